"""Plots and widgets of notebooks 05 and 06 (HySparse, HySparse2). Every widget is a thin wrapper around a pure
function that returns data or a matplotlib Figure, so it is testable without a browser."""
from __future__ import annotations

import base64
import io
import traceback

import numpy as np

from hybrid_lab.core import checks
from hybrid_lab.costs import hysparse_ledger as hl
from hybrid_lab.models.hysparse import drifting_attention_stack, topk_overlap_by_distance
from hybrid_lab.models.hysparse2 import HySparse2Config
from hybrid_lab.widgets.static import with_picture

__all__ = ["compute_map", "plot_compute_map", "architecture_explorer", "plot_architecture", "ledger_rows",
           "plot_ledger", "ledger_slider", "plot_bounds", "plot_overlap", "plot_replay", "plot_selection", "overlap_curves", "overlap_explorer",
           "SKIP", "KV_ONLY", "FULL"]

SKIP, KV_ONLY, FULL = 0, 1, 2


def _plt():
    import matplotlib.pyplot as plt  # the backend is the caller's choice (inline in Jupyter, Agg headless)

    return plt


def _figure_output(fig) -> dict:
    """A Figure as a Jupyter display_data output (PNG, as the inline backend draws it) for an Output's ``outputs``."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return {"output_type": "display_data", "metadata": {},
            "data": {"image/png": base64.b64encode(buf.getvalue()).decode("ascii"), "text/plain": repr(fig)}}


def _explorer(draw, controls: dict):
    """An explorer: ``controls`` (argument name -> ipywidgets control) above ONE Output widget showing what
    ``draw(**values)`` returns, ``(printed text or "", Figure)``; redrawn when a control moves. Returns a VBox
    ``[VBox(controls), Output]``.

    Each redraw replaces the Output's content as a whole (its ``outputs`` state, one message to the browser) and
    closes the figure. It does not print into the Output under ``with out:`` inside ``ipywidgets.interactive``: that
    captures by message id into two nested output areas (interactive's own, above, and ours), and where a message
    lands then depends on the order in which the browser registers and drops the two capture hooks (reported in
    notebook 06: the ledger's chart drawn above its table, plus a stale duplicate)."""
    import ipywidgets as W

    out = W.Output()

    def redraw(_change=None):
        plt = _plt()
        try:
            text, fig = draw(**{name: c.value for name, c in controls.items()})
            try:
                shown = ([{"output_type": "stream", "name": "stdout", "text": text}] if text else []) + \
                        [_figure_output(fig)]
            finally:
                plt.close(fig)
        except Exception:  # shown in the widget, as interactive() did (a slider must not fail silently)
            shown = [{"output_type": "stream", "name": "stderr", "text": traceback.format_exc()}]
        out.outputs = tuple(shown)

    for c in controls.values():
        c.observe(redraw, names="value")
    redraw()
    return W.VBox([W.VBox(list(controls.values())), out])


def _cfg(cfg) -> HySparse2Config:
    if not isinstance(cfg, HySparse2Config):
        raise ValueError(f"cfg must be a HySparse2Config, got {type(cfg).__name__}")
    return cfg


def compute_map(cfg: HySparse2Config, L: int, early_exit: bool = True, cross_tail: int | None = None) -> np.ndarray:
    """Which (layer, position) pairs a prefill of L tokens computes: (n_layers, L) ints.

    FULL (2) = the layer runs at that position (queries, attention read, MLP); KV_ONLY (1) = only its K/V are
    built there (a cross FA whose cache the bridge projects from the Self-decoder); SKIP (0) = nothing.
    Rows follow ``cfg.layers``. ``cross_tail`` = Cross run on the last R positions (overrides ``early_exit``).
    """
    cfg = _cfg(cfg)
    L = checks.pos_int("L", L)
    checks.output_size("L (the map is n_layers x L)", (len(cfg.layers), L))
    R = checks.int_in("cross_tail", cross_tail, 1, L + 1) if cross_tail is not None else (1 if early_exit else L)
    out = np.zeros((len(cfg.layers), L), np.int64)
    for r, (name, kind) in enumerate(cfg.layers):
        if name.startswith("self."):
            out[r] = FULL
        else:
            if kind == "fa":
                out[r] = KV_ONLY
            out[r, L - R:] = FULL
    return out


def plot_compute_map(cfg: HySparse2Config, L: int, early_exit: bool = True, cross_tail: int | None = None):
    """Heat map of :func:`compute_map` (the image array is that map). Returns a Figure."""
    plt = _plt()
    from matplotlib.colors import ListedColormap

    m = compute_map(cfg, L, early_exit, cross_tail)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.imshow(m, aspect="auto", interpolation="nearest", cmap=ListedColormap(["#f2f2f2", "#9ecae1", "#e6550d"]),
              vmin=0, vmax=2)
    names = [n for n, _ in cfg.layers]
    step = max(1, len(names) // 25)
    ax.set_yticks(range(0, len(names), step))
    ax.set_yticklabels([f"{names[i]} ({cfg.layers[i][1]})" for i in range(0, len(names), step)], fontsize=6)
    ax.axhline(cfg.n_self - 0.5, color="k", lw=1)
    ax.set_xlabel("prompt position")
    mode = f"cross tail {cross_tail}" if cross_tail is not None else ("early exit" if early_exit else "full prefill")
    ax.set_title(f"{mode}: computed {int((m == FULL).sum())} layer-positions, KV-only {int((m == KV_ONLY).sum())}")
    fig.tight_layout()
    return fig


@with_picture
def architecture_explorer(cfg: HySparse2Config | None = None):
    """Widget: prompt length slider + early-exit toggle over :func:`plot_compute_map`. Returns an ipywidgets object."""
    import ipywidgets as W

    cfg = HySparse2Config() if cfg is None else _cfg(cfg)
    return _explorer(lambda L, early_exit: ("", plot_compute_map(cfg, L, early_exit)),
                     {"L": W.IntSlider(value=32, min=4, max=128, step=4, description="prompt L"),
                      "early_exit": W.Checkbox(value=True, description="early exit")})


def plot_architecture(cfg: HySparse2Config):
    """The model drawn from its config: one box per layer (in ``cfg.layers`` order, coloured by kind), bridging (blue)
    and reuse (red) arrows. Returns a Figure."""
    cfg = _cfg(cfg)
    plt = _plt()
    colors = {"swa": "#c7e9c0", "fa": "#fdae6b", "sa": "#9ecae1"}
    layers = cfg.layers
    fig, ax = plt.subplots(figsize=(10, 3.2))
    x_of = {}
    x = 0.0
    for i, (name, kind) in enumerate(layers):
        if i == cfg.n_self:
            x += 1.0                                   # gap between Self and Cross
        x_of[name] = x
        ax.add_patch(plt.Rectangle((x, 0), 0.8, 1, color=colors[kind], ec="k", lw=0.4))
        ax.text(x + 0.4, 0.5, kind.upper(), ha="center", va="center", fontsize=5, rotation=90)
        x += 1.0
    src = x_of[f"self.{cfg.self_swa_before}"]
    for g, source in enumerate(cfg.sources):       # bridging: from the self FA input (or the boundary)
        dst = x_of[f"cross.{g}.fa"]
        s = src - 0.1 if source == "self_fa_input" else x_of[layers[cfg.n_self - 1][0]] + 0.9
        ax.annotate("", xy=(dst + 0.4, 1.0), xytext=(s, 1.0),
                    arrowprops=dict(arrowstyle="->", color="tab:blue", connectionstyle=f"arc3,rad=-{0.25 + 0.05 * g}"))
        for j in range(cfg.group_size - 1):        # reuse: FA's KV + selection to its SAs
            ax.annotate("", xy=(x_of[f"cross.{g}.sa.{j}"] + 0.4, 0.0), xytext=(dst + 0.4, 0.0),
                        arrowprops=dict(arrowstyle="->", color="tab:red", lw=0.6, connectionstyle="arc3,rad=0.4"))
    c = cfg.counts()
    ax.text(x_of["self.0"], -0.9, "Self-decoder (runs on every prompt position)", fontsize=8)
    ax.text(x_of["cross.0.fa"], -0.9, "Cross-decoder (last prompt position only, with early exit)", fontsize=8)
    ax.set_xlim(-0.5, x + 0.5)
    ax.set_ylim(-1.2, 2.9)
    ax.axis("off")
    ax.set_title(f"HySparse2: Self {cfg.n_self} layers | Cross {cfg.n_groups} x (FA + {cfg.group_size - 1} SA); "
                 f"{c['swa']} SWA, {c['fa']} FA, {c['sa']} SA. Blue: KV bridging, red: KV reuse", fontsize=9)
    fig.tight_layout()
    return fig


def ledger_rows(L: int) -> list:
    """Rows of the ledger at context L: design, KV GB, prefill PFLOPs, decode KV entries read per token."""
    return hl.ledger_table(L)


def plot_ledger(lengths=None, mark: int | None = None):
    """Two panels over context length: KV GB and prefill FLOPs for the three designs (log-log), one line per design
    in ``hl.DESIGNS`` order. lengths: integers >= 1 (default 2^10 .. 2^20); mark: a length to mark, or None.
    Returns a Figure."""
    lengths = checks.int_array("lengths", lengths if lengths is not None else 2 ** np.arange(10, 21), 1, lo=1)
    if lengths.size == 0:
        raise ValueError("lengths must hold at least one context length")
    mark = None if mark is None else checks.pos_int("mark", mark)
    plt = _plt()
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    for d in hl.DESIGNS:
        a.plot(lengths, [hl.kv_gb(d, int(L)) for L in lengths], marker="o", ms=3, label=d.name)
        b.plot(lengths, [hl.prefill_flops(d, int(L))["total"] for L in lengths], marker="o", ms=3, label=d.name)
    for ax, title in ((a, "KV cache (GB, FP8)"), (b, "prefill FLOPs (computed)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("context length L (tokens)")
        ax.set_title(title)
        if mark is not None:
            ax.axvline(mark, color="grey", ls=":")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


@with_picture
def ledger_slider():
    """Widget: log2(L) slider -> the ledger table and plots at that length. Returns an ipywidgets object."""
    import ipywidgets as W

    def draw(log2_L):
        L = 2 ** log2_L
        table = "".join(f"{r['design']:<11} L={L:>8}: KV {r['kv_gb']:8.3f} GB  prefill {r['prefill_pflops']:10.3f} "
                        f"PFLOPs  decode reads {r['decode_entries']:>9} entries/token\n" for r in ledger_rows(L))
        return table, plot_ledger(mark=L)

    return _explorer(draw, {"log2_L": W.IntSlider(value=20, min=10, max=20, description="log2 L")})


def plot_bounds(res: dict):
    """Measured error vs bound for both bounds (points below the diagonal respect the bound). Returns a Figure.

    res: {"bound_sparse", "err_sparse", "bound_reuse", "err_reuse"} finite arrays (``bounds.check_bounds``); each
    panel scatters (bound, error) pairs.
    """
    if not isinstance(res, dict):
        raise ValueError(f"res must be the dict of bounds.check_bounds, got {type(res).__name__}")
    for key in ("sparse", "reuse"):
        for part in ("bound_", "err_"):
            if part + key not in res:
                raise ValueError(f"res lacks {part + key!r}")
        b = checks.finite_array(f"res['bound_{key}']", res["bound_" + key], 1)
        e = checks.finite_array(f"res['err_{key}']", res["err_" + key], 1)
        if b.shape != e.shape or b.size == 0:
            raise ValueError(f"res['bound_{key}'] and res['err_{key}'] must be non-empty and of one length, got "
                             f"{b.shape} and {e.shape}")
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8))
    for ax, key, title in ((axes[0], "sparse", "renormalized sparse: 2εV"), (axes[1], "reuse", "reused set: 2(ε+δ)V")):
        bnd, err = res["bound_" + key], res["err_" + key]
        ax.scatter(bnd, err, s=4, alpha=0.5)
        top = max(bnd.max(), err.max())
        ax.plot([0, top], [0, top], "k--", lw=1, label="error = bound")
        ax.set_xlabel("bound")
        ax.set_ylabel("measured error")
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_overlap(overlaps: dict):
    """Top-k overlap vs layer distance, one line per drift. overlaps: {label: (n_layers,) array in [0, 1]}; line i
    is (arange(n_layers), overlaps[label i]). Returns a Figure."""
    if not isinstance(overlaps, dict) or not overlaps:
        raise ValueError("overlaps must be a non-empty dict {drift: (n_layers,) overlap}")
    overlaps = {label: checks.finite_array(f"overlaps[{label!r}]", ov, 1) for label, ov in overlaps.items()}
    for label, ov in overlaps.items():
        if ((ov < 0) | (ov > 1)).any():
            raise ValueError(f"overlaps[{label!r}] must lie in [0, 1] (a fraction of k), got {ov.tolist()}")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for label, ov in overlaps.items():
        ax.plot(np.arange(len(ov)), ov, marker="o", ms=3, label=str(label))
    ax.set_xlabel("layer distance")
    ax.set_ylabel(r"$|S_a \cap S_b|\,/\,k$")
    ax.set_ylim(0, 1.05)
    ax.legend(title="drift", fontsize=8)
    fig.tight_layout()
    return fig


def plot_replay(results: dict):
    """Last-position error vs replayed tail R, one line per cross depth. results: {depth: replay_errors(...)} with
    "tails" (R >= 1) and "errors" (finite, >= 0) of one length. Line i is (tails, max(errors, 1e-17)): a log axis
    cannot show an exact 0, drawn at 1e-17 instead."""
    if not isinstance(results, dict) or not results:
        raise ValueError("results must be a non-empty dict {depth: replay_errors(...)}")
    for depth, r in results.items():
        tails = checks.int_array(f"results[{depth!r}]['tails']", r["tails"], 1, lo=1)
        errs = checks.finite_array(f"results[{depth!r}]['errors']", r["errors"], 1)
        if tails.shape != errs.shape or (errs < 0).any():
            raise ValueError(f"results[{depth!r}] needs one error >= 0 per tail, got tails {tails.shape}, "
                             f"errors {errs.shape} (min {errs.min(initial=0):.3g})")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    for depth, r in results.items():
        ax.semilogy(r["tails"], np.maximum(r["errors"], 1e-17), marker="o", ms=3, label=f"{depth} cross SWA layers")
    ax.axhline(1e-10, color="grey", ls=":", label="1e-10")
    ax.set_xlabel("replayed tail R (positions)")
    ax.set_ylabel("max |logit error| at the last position")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_selection(idx_sets: dict, L: int):
    """Rows of selected positions (one per method) for one query. idx_sets: {label: 1-D int positions in [-1, L),
    -1 padded}; row r scatters the valid positions of the r-th set at height r. Returns a Figure."""
    L = checks.pos_int("L", L)
    if not isinstance(idx_sets, dict) or not idx_sets:
        raise ValueError("idx_sets must be a non-empty dict {label: positions}")
    idx_sets = {label: checks.index_sets(f"idx_sets[{label!r}]", idx, L, 1) for label, idx in idx_sets.items()}
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 0.6 + 0.5 * len(idx_sets)))
    for r, (label, idx) in enumerate(idx_sets.items()):
        idx = np.asarray(idx)
        idx = idx[idx >= 0]
        ax.scatter(idx, np.full(len(idx), r), marker="|", s=120)
    ax.set_yticks(range(len(idx_sets)))
    ax.set_yticklabels(list(idx_sets))
    ax.set_xlim(-1, L)
    ax.set_xlabel("key position")
    fig.tight_layout()
    return fig


def overlap_curves(drifts=(0.1, 0.3, 0.6), L: int = 512, n_layers: int = 10, k: int = 32, seed: int = 0) -> dict:
    """{drift: top-k overlap vs layer distance} for the drifting-weights stack of ``hysparse`` (drifts non-empty)."""
    if len(drifts) == 0:
        raise ValueError("drifts must hold at least one drift angle")
    for i, d in enumerate(drifts):
        checks.number_in(f"drifts[{i}]", d, 0.0, np.pi / 2)
    return {d: topk_overlap_by_distance(drifting_attention_stack(L, n_layers, drift=d, seed=seed)[0], k)
            for d in drifts}


@with_picture
def overlap_explorer():
    """Widget: drift and k sliders over :func:`overlap_curves` / :func:`plot_overlap`. Returns an ipywidgets object."""
    import ipywidgets as W

    def draw(drift, k):
        curves = overlap_curves((drift,), k=k)
        return f"overlap by distance: {np.round(curves[drift], 2)}\n", plot_overlap(curves)

    return _explorer(draw, {"drift": W.FloatSlider(value=0.3, min=0.0, max=1.5, step=0.05, description="drift"),
                            "k": W.IntSlider(value=32, min=4, max=128, step=4, description="k")})
