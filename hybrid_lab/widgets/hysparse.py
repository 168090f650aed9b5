"""Plots and widgets of notebooks 05 and 06 (HySparse, HySparse2). Every widget is a thin wrapper around a pure
function that returns data or a matplotlib Figure, so it is testable without a browser."""
from __future__ import annotations

import numpy as np

from hybrid_lab.models.hysparse2 import HySparse2Config
from hybrid_lab.costs import hysparse_ledger as hl

__all__ = ["compute_map", "plot_compute_map", "architecture_explorer", "plot_architecture", "ledger_rows",
           "plot_ledger", "ledger_slider", "plot_bounds", "plot_overlap", "plot_replay", "plot_selection", "overlap_curves", "overlap_explorer",
           "SKIP", "KV_ONLY", "FULL"]

SKIP, KV_ONLY, FULL = 0, 1, 2


def _plt():
    import matplotlib.pyplot as plt  # the backend is the caller's choice (inline in Jupyter, Agg headless)

    return plt


def compute_map(cfg: HySparse2Config, L: int, early_exit: bool = True, cross_tail: int | None = None) -> np.ndarray:
    """Which (layer, position) pairs a prefill of L tokens computes: (n_layers, L) ints.

    FULL (2) = the layer runs at that position (queries, attention read, MLP); KV_ONLY (1) = only its K/V are
    built there (a cross FA whose cache the bridge projects from the Self-decoder); SKIP (0) = nothing.
    Rows follow ``cfg.layers``. ``cross_tail`` = Cross run on the last R positions (overrides ``early_exit``).
    """
    if not isinstance(L, (int, np.integer)) or L < 1:
        raise ValueError(f"L must be a positive integer, got {L!r}")
    R = cross_tail if cross_tail is not None else (1 if early_exit else L)
    if not 1 <= R <= L:
        raise ValueError(f"cross_tail must lie in [1, L={L}], got {R}")
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
    """Heat map of :func:`compute_map`. Returns a Figure."""
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


def architecture_explorer(cfg: HySparse2Config | None = None):
    """Widget: prompt length slider + early-exit toggle over :func:`plot_compute_map`. Returns an ipywidgets object."""
    import ipywidgets as W
    from IPython.display import display

    cfg = cfg or HySparse2Config()
    out = W.Output()

    def show(L, early_exit):
        plt = _plt()
        with out:
            out.clear_output(wait=True)
            fig = plot_compute_map(cfg, L, early_exit)
            display(fig)
            plt.close(fig)

    ui = W.interactive(show, L=W.IntSlider(value=32, min=4, max=128, step=4, description="prompt L"),
                       early_exit=W.Checkbox(value=True, description="early exit"))
    return W.VBox([ui, out])


def plot_architecture(cfg: HySparse2Config):
    """The model drawn from its config: one box per layer, bridging (blue) and reuse (red) arrows. Returns a Figure."""
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
    """Two panels over context length: KV GB and prefill FLOPs for the three designs (log-log). Returns a Figure."""
    plt = _plt()
    lengths = np.asarray(lengths if lengths is not None else 2 ** np.arange(10, 21))
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


def ledger_slider():
    """Widget: log2(L) slider -> the ledger table and plots at that length. Returns an ipywidgets object."""
    import ipywidgets as W
    from IPython.display import display

    out = W.Output()

    def show(log2_L):
        plt = _plt()
        L = 2 ** log2_L
        with out:
            out.clear_output(wait=True)
            for r in ledger_rows(L):
                print(f"{r['design']:<11} L={L:>8}: KV {r['kv_gb']:8.3f} GB  prefill {r['prefill_pflops']:10.3f} "
                      f"PFLOPs  decode reads {r['decode_entries']:>9} entries/token")
            fig = plot_ledger(mark=L)
            display(fig)
            plt.close(fig)

    return W.VBox([W.interactive(show, log2_L=W.IntSlider(value=20, min=10, max=20, description="log2 L")), out])


def plot_bounds(res: dict):
    """Measured error vs bound for both bounds (points below the diagonal respect the bound). Returns a Figure."""
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
    """Top-k overlap vs layer distance, one line per drift. overlaps: {label: (n_layers,) array}. Returns a Figure."""
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
    """Last-position error vs replayed tail R, one line per cross depth. results: {depth: replay_errors(...)}."""
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
    """Rows of selected positions (one per method) for one query. idx_sets: {label: 1-D int positions, -1 padded}."""
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
    """{drift: top-k overlap vs layer distance} for the drifting-weights stack of ``hysparse``."""
    from hybrid_lab.models.hysparse import drifting_attention_stack, topk_overlap_by_distance

    return {d: topk_overlap_by_distance(drifting_attention_stack(L, n_layers, drift=d, seed=seed)[0], k)
            for d in drifts}


def overlap_explorer():
    """Widget: drift and k sliders over :func:`overlap_curves` / :func:`plot_overlap`. Returns an ipywidgets object."""
    import ipywidgets as W
    from IPython.display import display

    out = W.Output()

    def show(drift, k):
        plt = _plt()
        with out:
            out.clear_output(wait=True)
            curves = overlap_curves((drift,), k=k)
            print("overlap by distance:", np.round(curves[drift], 2))
            fig = plot_overlap(curves)
            display(fig)
            plt.close(fig)

    ui = W.interactive(show, drift=W.FloatSlider(value=0.3, min=0.0, max=1.5, step=0.05, description="drift"),
                       k=W.IntSlider(value=32, min=4, max=128, step=4, description="k"))
    return W.VBox([ui, out])
