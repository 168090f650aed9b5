"""Plots and explorers of notebook 04 (DeepSeek sparse attention).

Every plot helper returns a matplotlib Figure; each widget only wires sliders to a pure function tested without a
browser (:func:`topk_explorer_data`, :func:`roofline_summary`).
"""
from __future__ import annotations

import numpy as np

from hybrid_lab.core import checks
from hybrid_lab.costs.dsa_cost import DEEPSEEK_V32, DSAConfig, decode_bytes, decode_crossover, prefill_flops
from hybrid_lab.models.attention_stats import attention_probs, oracle_topk, topk_mass, topk_output_error
from hybrid_lab.models.lightning_indexer import topk_recall
from hybrid_lab.models.tiny_llm import concentrated_attention
from hybrid_lab.widgets.static import with_picture


def _plt():
    import matplotlib.pyplot as plt

    return plt


# ---------------------------------------------------------------- concentration
def plot_entropy(entropy: dict, max_entropy):
    """Mean attention entropy per head, one group of bars per source. entropy: {label: (H,) nats}.

    max_entropy: the uniform-attention maximum ln(#visible keys) (>= 0, and no entropy may exceed it), one float
    for all sources or {label: float}; it is drawn as a dashed segment over each group. Bars, in order: every
    source's heads, left to right.
    """
    if not isinstance(entropy, dict) or not entropy:
        raise ValueError("entropy must be a non-empty dict {label: (H,) entropies}")
    ents = {label: np.atleast_1d(checks.finite_array(f"entropy[{label!r}]", e).astype(float))
            for label, e in entropy.items()}
    for label, ent in ents.items():
        if ent.ndim != 1 or (ent < 0).any():
            raise ValueError(f"entropy[{label!r}] must be 1-D (H,) entropies >= 0, got {ent}")
    maxes = {}
    for label in ents:
        if isinstance(max_entropy, dict) and label not in max_entropy:
            raise ValueError(f"max_entropy has no entry for {label!r}")
        mx = max_entropy[label] if isinstance(max_entropy, dict) else max_entropy
        name = f"max_entropy[{label!r}]" if isinstance(max_entropy, dict) else "max_entropy"
        maxes[label] = checks.nonneg_number(name, mx)
        if (ents[label] > maxes[label] * (1 + 1e-9) + 1e-12).any():      # no distribution beats the uniform one
            raise ValueError(f"entropy[{label!r}] must be <= {name} = {maxes[label]:.6g} (the uniform maximum), "
                             f"got {ents[label].max():.6g}")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.0, 3.2))
    x0 = 0
    for label, ent in ents.items():
        ax.bar(x0 + np.arange(ent.size), ent, label=label)
        mx = maxes[label]
        ax.hlines(mx, x0 - 0.45, x0 + ent.size - 0.55, colors="k", linestyles="--", lw=1)
        x0 += ent.size + 1
    ax.set_ylabel("entropy (nats)")
    ax.set_xticks([])
    ax.set_ylim(0, ax.get_ylim()[1] * 1.5)
    ax.set_title("attention entropy per head (dashed: uniform = ln #keys)")
    ax.legend(fontsize=7, loc="upper center", ncol=3)
    fig.tight_layout()
    return fig


def plot_topk_curves(ks, curves: dict, ylabel: str, title: str = "", logy: bool = False):
    """One line per source against k. ks: integers >= 1; curves: {label: finite values >= 0 over ks} (a mass, an
    error, a recall)."""
    if not isinstance(curves, dict) or not curves:
        raise ValueError("curves must be a non-empty dict {label: values over ks}")
    ks = checks.int_array("ks", ks, 1, lo=1)
    ys = {label: checks.finite_array(f"curves[{label!r}]", y, 1) for label, y in curves.items()}
    for label, y in ys.items():
        if y.shape != ks.shape or (y < 0).any():
            raise ValueError(f"curves[{label!r}] must have one value >= 0 per k ({ks.size}), got {y.tolist()}")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    for label, y in ys.items():
        ax.plot(ks, y, "o-", label=label)
    ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("k (selected keys)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_losses(histories: dict, title: str = "indexer training (KL per query)"):
    """Training curves. histories: {label: list of per-step losses >= 0}; values above ``1e6`` or non-finite (a
    diverged run) are cut off and the last plotted point of such a run is marked with an x."""
    if not isinstance(histories, dict) or not histories:
        raise ValueError("histories must be a non-empty dict {label: per-step losses}")
    losses = {label: checks.array(f"histories[{label!r}]", h, 1).astype(float) for label, h in histories.items()}
    for label, loss in losses.items():
        if (loss < 0).any():                          # a KL is >= 0 (NaN and inf compare False: a diverged run)
            raise ValueError(f"histories[{label!r}] must be >= 0 (a KL per query), got min {np.nanmin(loss):.3g}")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    for label, loss in losses.items():
        ok = np.isfinite(loss) & (loss < 1e6)
        steps = np.arange(loss.size)[ok]
        line, = ax.plot(steps, loss[ok], label=label)
        if not ok.all() and steps.size:
            ax.plot(steps[-1], loss[ok][-1], "x", color=line.get_color(), ms=9)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("KL(p || softmax(I)) per query")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def topk_explorer_data(concentration: float, k: int, indexer=None, n_train: int = 64, seed: int = 0) -> dict:
    """Quality of top-k attention on the concentrated synthetic at ``concentration`` (held-out queries).

    Uses :func:`concentrated_attention` (2,048 keys, 128 queries, ``seed``); the first n_train (1 .. 127) queries
    are the indexer's training queries, the last 128 - n_train are held out and measured. Returns {"mass": mean
    top-k mass of the head-averaged probability, "oracle_error": mean relative output error of the ideal top-k,
    "indexer_recall"/"indexer_error": the same for ``indexer``'s top-k selection (NaN without an indexer)}.
    """
    checks.pos_int("k", k)
    checks.int_in("n_train", n_train, 1, 128)              # >= 1 query the indexer saw, >= 1 held out
    d = concentrated_attention(concentration=concentration, seed=seed)
    te = slice(n_train, None)
    q, pos = d.q[:, te], d.q_pos[te]
    p = attention_probs(q, d.k, scale=1.0, q_pos=pos)
    out = {"mass": float(topk_mass(p.mean(axis=2), k).mean()),                 # the head-summed, L1-normalized target
           "oracle_error": float(topk_output_error(q, d.k, d.v, k, scale=1.0, q_pos=pos).mean()),
           "indexer_recall": float("nan"), "indexer_error": float("nan")}
    if indexer is not None:
        _, idx = indexer.select(d.x_queries[te], d.x_keys, k, pos)
        out["indexer_recall"] = topk_recall(idx, oracle_topk(p, 1, k)[0, :, 0])
        out["indexer_error"] = float(topk_output_error(q, d.k, d.v, k, scale=1.0, q_pos=pos,
                                                       idx=idx[None, :, None, :]).mean())
    return out


def plot_topk_explorer(stats: dict, title: str = ""):
    """Bar chart of :func:`topk_explorer_data`'s numbers, one bar per finite entry in the order mass, oracle_error,
    indexer_recall, indexer_error (NaN bars are skipped)."""
    if not isinstance(stats, dict):
        raise ValueError(f"stats must be the dict of topk_explorer_data, got {type(stats).__name__}")
    plt = _plt()
    names = []
    for n in ("mass", "oracle_error", "indexer_recall", "indexer_error"):
        v = checks.array(f"stats[{n!r}]", stats.get(n, np.nan), 0)
        if np.isnan(v):
            continue                                  # "no indexer": the bar is skipped
        if not np.isfinite(v) or v < 0:
            raise ValueError(f"stats[{n!r}] must be a finite number >= 0 (or NaN: not measured), got {v}")
        names.append(n)
    if not names:
        raise ValueError("stats has no finite value to plot")
    fig, ax = plt.subplots(figsize=(5.5, 3.0))
    vals = [stats[n] for n in names]
    bars = ax.bar(names, vals, color=["#4c78a8", "#e45756", "#54a24b", "#f58518"][:len(names)])
    for b, v in zip(bars, vals):
        ax.text(b.get_x() + b.get_width() / 2, v, f"{v:.2f}", ha="center", va="bottom", fontsize=9)
    ax.set_ylim(0, max(1.05, max(vals) * 1.15))
    ax.set_title(title or "top-k quality on held-out queries")
    fig.tight_layout()
    return fig


@with_picture
def topk_explorer(indexer=None, concentrations=(0.5, 1.0, 2.0, 3.0, 4.0, 6.0), ks=(32, 64, 128, 256, 512, 1024)):
    """ipywidgets: concentration and k sliders -> :func:`topk_explorer_data` bars + one printed line."""
    import ipywidgets as W
    from IPython.display import display

    plt = _plt()

    def show(concentration, k):
        stats = topk_explorer_data(concentration, k, indexer)
        fig = plot_topk_explorer(stats, f"concentration {concentration}, k = {k}")
        display(fig)
        plt.close(fig)
        print("  ".join(f"{n}: {v:.3f}" for n, v in stats.items()))

    wide = {"description_width": "initial"}  # so "concentration" is not cut off
    return W.interactive(show, concentration=W.SelectionSlider(options=list(concentrations), value=concentrations[-2],
                                                               style=wide),
                         k=W.SelectionSlider(options=list(ks), value=ks[len(ks) // 2], style=wide))


# ---------------------------------------------------------------- roofline
def roofline_summary(L: int, cfg: DSAConfig = DEEPSEEK_V32) -> dict:
    """Decode and prefill numbers of dense MLA vs DSA at context length L >= 1 (all computed by :mod:`dsa_cost`)."""
    L = checks.pos_int("L", L)
    dec, pre = decode_bytes(L, cfg), prefill_flops(L, cfg)
    return {"L": int(L), "decode_dense_MB": float(dec["dense"]) / 1e6, "decode_dsa_MB": float(dec["dsa"]) / 1e6,
            "decode_speedup": float(dec["speedup"]), "prefill_dense_PFLOP": float(pre["dense"]) / 1e15,
            "prefill_dsa_PFLOP": float(pre["dsa"]) / 1e15, "prefill_speedup": float(pre["speedup"])}


def plot_roofline(L: int | None = None, cfg: DSAConfig = DEEPSEEK_V32, L_max: int = 131072):
    """Left: decode bytes per token per layer vs L (crossover marked). Right: prefill speedup vs L. ``L`` is marked.

    The curves are computed at ``Ls = unique(geomspace(256, L_max, 200))`` (L_max >= 256): left the dense and DSA
    MB (``decode_bytes / 1e6``), right the prefill and decode speedups.
    """
    L = None if L is None else checks.pos_int("L", L)
    L_max = checks.pos_int("L_max", L_max, minimum=256)
    plt = _plt()
    Ls = np.unique(np.geomspace(256, L_max, 200).astype(np.int64))
    dec, pre = decode_bytes(Ls, cfg), prefill_flops(Ls, cfg)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9.5, 3.4))
    a1.loglog(Ls, dec["dense"] / 1e6, label="dense MLA: latent·L")
    a1.loglog(Ls, dec["dsa"] / 1e6, label="DSA: key·L + latent·min(L, k)")
    a1.axvline(decode_crossover(cfg), color="gray", ls=":", label=f"crossover {decode_crossover(cfg):,.0f}")
    a1.set_xlabel("context length L")
    a1.set_ylabel("MB read per token per layer")
    a1.set_title("decode (memory bound)")
    a1.legend(fontsize=7)
    a2.semilogx(Ls, pre["speedup"], color="#e45756", label="prefill speedup dense / DSA")
    a2.semilogx(Ls, dec["speedup"], color="#4c78a8", label="decode speedup dense / DSA")
    a2.axhline(1.0, color="k", lw=0.8)
    a2.set_xlabel("context length L")
    a2.set_ylabel("speedup (x)")
    a2.set_title("speedup of DSA")
    a2.legend(fontsize=7)
    if L is not None:
        s = roofline_summary(L, cfg)
        for ax in (a1, a2):
            ax.axvline(L, color="#54a24b", lw=1.5)
        a2.plot([L, L], [s["prefill_speedup"], s["decode_speedup"]], "o", color="#54a24b")
    for ax in (a1, a2):
        ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig


@with_picture
def roofline_explorer(cfg: DSAConfig = DEEPSEEK_V32):
    """ipywidgets: an L slider (log2 steps) -> :func:`plot_roofline` + the :func:`roofline_summary` line."""
    import ipywidgets as W
    from IPython.display import display

    plt = _plt()

    def show(L):
        fig = plot_roofline(L, cfg)
        display(fig)
        plt.close(fig)
        s = roofline_summary(L, cfg)
        print(f"L = {L:,}: decode speedup {s['decode_speedup']:.2f}x, prefill speedup {s['prefill_speedup']:.2f}x")

    return W.interactive(show, L=W.SelectionSlider(options=[2 ** i for i in range(10, 18)], value=4096))
