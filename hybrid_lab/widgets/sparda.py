"""Plots and the offload explorer of notebook 08 (SparDA). Every function returns a matplotlib Figure (or an
ipywidgets object built on ``explore_offload``, a pure function that is unit-tested)."""
from __future__ import annotations

import matplotlib

matplotlib.use(matplotlib.get_backend())   # keep the notebook's inline backend; Agg under pytest
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from hybrid_lab.serving.offload_sim import (H100, A100, MINICPM_8B, METHODS, layer_timeline,  # noqa: E402
                                    throughput, max_batch, with_)

__all__ = ["plot_selection", "plot_teachers", "plot_training", "plot_recall", "plot_timeline", "plot_batch_sweep",
           "explore_offload", "offload_explorer"]

_COLORS = {"init": "#4c72b0", "local": "#55a868", "top-k": "#dd8452", "not read": "#cccccc"}


def plot_selection(scores_c, block_scores, block_ids, q_pos, n_init=1, n_local=2, block_size=64, stride=16):
    """Two panels for one query and one group: the compressed-grid scores, then the block scores colored by
    why each block is read (init / local / top-k) or not. scores_c: (Nc,), block_scores: (Nb,), block_ids:
    selected ids (-1 padded)."""
    scores_c, block_scores = np.asarray(scores_c, float), np.asarray(block_scores, float)
    fig, (a0, a1) = plt.subplots(2, 1, figsize=(8, 4.2), constrained_layout=True)
    x = np.arange(len(scores_c)) * stride
    a0.bar(x, np.where(np.isfinite(scores_c), scores_c, 0), width=stride * 0.9, align="edge", color="#8172b3")
    a0.axvline(q_pos, color="k", ls="--", lw=1)
    a0.set(title="compressed grid (32, 16): summed softmax per window start", xlabel="token", ylabel="score")
    cur = q_pos // block_size
    sel = set(int(b) for b in np.asarray(block_ids) if b >= 0)
    kinds = []
    for b in range(len(block_scores)):
        if b in sel and b < n_init:
            kinds.append("init")
        elif b in sel and b > cur - n_local:
            kinds.append("local")
        elif b in sel:
            kinds.append("top-k")
        else:
            kinds.append("not read")
    xb = np.arange(len(block_scores)) * block_size
    h = np.where(np.isfinite(block_scores), block_scores, 0)
    for kind in _COLORS:
        m = np.array([k == kind for k in kinds])
        a1.bar(xb[m], h[m], width=block_size * 0.9, align="edge", color=_COLORS[kind], label=kind)
    a1.axvline(q_pos, color="k", ls="--", lw=1)
    a1.set(title="64-token blocks: max-pooled scores and the selection", xlabel="token", ylabel="score")
    a1.legend(ncol=4, fontsize=8)
    return fig


def plot_teachers(fine, coarse, needles=(), spans=(), stride=16, title="teacher scores for one query"):
    """Fine (2,1)->(32,16) and coarse (32,16) teacher scores on the compressed grid, each normalized to sum 1,
    with the query's needle tokens (red) and diffuse spans (grey) marked."""
    fine, coarse = np.asarray(fine, float), np.asarray(coarse, float)
    fig, ax = plt.subplots(figsize=(8, 3), constrained_layout=True)
    x = np.arange(len(fine)) * stride
    ax.step(x, fine / max(fine.sum(), 1e-30), where="post", label="fine teacher (2,1) max-pooled")
    ax.step(x, coarse / max(coarse.sum(), 1e-30), where="post", label="coarse teacher (32,16)")
    for n in needles:
        ax.axvline(n, color="red", lw=1, alpha=0.6)
    for s0, s1 in spans:
        ax.axvspan(s0, s1, color="grey", alpha=0.2)
    ax.set(title=title, xlabel="token (window start)", ylabel="normalized score")
    ax.legend(fontsize=8)
    return fig


def plot_training(histories: dict):
    """Loss curves: {name: array of per-step losses}."""
    fig, ax = plt.subplots(figsize=(6, 3), constrained_layout=True)
    for name, h in histories.items():
        ax.plot(np.asarray(h), label=name)
    ax.set(yscale="log", xlabel="Adam step", ylabel="Σ_l rest-bucket KL", title="Forecast training")
    ax.legend(fontsize=8)
    return fig


def plot_recall(results: dict):
    """Bars of recall (left) and attention-output error (right) per selector and layer."""
    names = list(results)
    n_layers = len(results[names[0]]["recall"])
    fig, axes = plt.subplots(1, 2, figsize=(9, 3), constrained_layout=True)
    w = 0.8 / len(names)
    for i, name in enumerate(names):
        for ax, key in zip(axes, ("recall", "error")):
            ax.bar(np.arange(n_layers) + i * w, results[name][key], width=w, label=name)
    for ax in axes:
        ax.set_xticks(np.arange(n_layers) + w * (len(names) - 1) / 2, [str(i) for i in range(n_layers)])
    axes[0].set(title="recall of the oracle's top-k blocks", xlabel="target layer", ylim=(0, 1))
    axes[1].set(title="relative attention-output error", xlabel="target layer")
    axes[0].legend(fontsize=8)
    return fig


def plot_timeline(segments, totals, title=""):
    """Gantt chart of ``offload_sim.layer_timeline`` segments (times shown in µs)."""
    lanes = ["serial: GPU", "overlapped: compute", "overlapped: copy"]
    colors = {"select": "#8172b3", "forecast+select": "#8172b3", "copy": "#c44e52", "copy next layer": "#c44e52",
              "compute": "#4c72b0", "sync": "#222222"}
    fig, ax = plt.subplots(figsize=(9, 2.9), layout="constrained")
    for lane, s, e, lab in segments:
        y = lanes.index(lane)
        ax.barh(y, (e - s) * 1e6, left=s * 1e6, color=colors.get(lab, "grey"), edgecolor="white", height=0.6)
    ax.set_yticks(range(len(lanes)), lanes)
    ax.invert_yaxis()
    ax.set(xlabel="time [µs]", title=title or f"serial {totals['serial'] * 1e6:.0f} vs overlapped "
                                             f"{totals['overlapped'] * 1e6:.0f} (µs, these layers)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[k]) for k in ("select", "copy", "compute", "sync")]
    fig.legend(handles, ["select", "copy", "compute", "sync"], ncol=4, fontsize=8, loc="outside lower center")
    return fig


def plot_batch_sweep(batches, sweep: dict, reported: dict | None = None, title="decode throughput"):
    """Computed tokens/s per method vs batch (0 = OOM, not drawn); optional reported points as markers."""
    fig, ax = plt.subplots(figsize=(7, 3.2), constrained_layout=True)
    for i, (name, ys) in enumerate(sweep.items()):
        ys = np.asarray(ys, float)
        ok = ys > 0
        line, = ax.plot(np.asarray(batches)[ok], ys[ok], "o-", label=f"{name} (computed)")
        if reported and name in reported:
            rb, ry = zip(*[(b, y) for b, y in zip(batches, reported[name]) if y])
            ax.plot(rb, ry, "x--", color=line.get_color(), alpha=0.6, label=f"{name} (reported)")
    ax.set(xscale="log", xlabel="batch", ylabel="tokens/s", title=title)
    ax.set_xticks(batches, [str(b) for b in batches])
    ax.legend(fontsize=7, ncol=2)
    return fig


def explore_offload(batch=16, ctas=16, pcie_gbps=55.0, context=131072, hw="H100", churn=None):
    """The explorer's pure function: timeline figure + summary for one setting.

    Returns (fig, summary) with summary = {"serial_us", "overlapped_us" (per middle layer), "tok_s" per method
    (0 = OOM), "max_batch" per method}.
    """
    base = {"H100": H100, "A100": A100}[hw]
    h = with_(base, pcie_bw=float(pcie_gbps) * 1e9)
    m = MINICPM_8B
    segs, tot = layer_timeline(h, m, int(batch), int(context), int(ctas), n_layers=3, churn=churn)
    tok = {meth: throughput(h, m, int(batch), int(context), meth, int(ctas), churn) for meth in METHODS}
    summary = {"serial_us": tot["serial"] / 3 * 1e6, "overlapped_us": tot["overlapped"] / 3 * 1e6, "tok_s": tok,
               "max_batch": {meth: max_batch(h, m, int(context), meth) for meth in METHODS}}
    fig = plot_timeline(segs, tot, title=f"{hw}, batch {batch}, {ctas} copy CTAs, PCIe {pcie_gbps:.0f} GB/s, "
                                         f"{context // 1024}K context: 3 middle layers")
    return fig, summary


def format_summary(s: dict) -> str:
    tok = ", ".join(f"{k} {v:.0f}" if v else f"{k} OOM" for k, v in s["tok_s"].items())
    return (f"per layer [µs]: serial {s['serial_us']:.1f}, overlapped {s['overlapped_us']:.1f} | "
            f"tokens/s: {tok}")


def offload_explorer():
    """Sliders batch / copy CTAs / PCIe bandwidth (+ context, GPU) driving the timeline and throughput."""
    import ipywidgets as w
    from IPython.display import display

    def show(batch, ctas, pcie_gbps, context_k, hw):
        fig, s = explore_offload(batch, ctas, pcie_gbps, context_k * 1024, hw)
        display(fig)
        plt.close(fig)
        print(format_summary(s))

    return w.interactive(
        show,
        batch=w.SelectionSlider(options=[1, 2, 4, 8, 16, 32, 64, 128], value=16, description="batch"),
        ctas=w.IntSlider(value=16, min=4, max=96, step=4, description="copy CTAs"),
        pcie_gbps=w.FloatSlider(value=55.0, min=8.0, max=128.0, step=1.0, description="PCIe GB/s"),
        context_k=w.SelectionSlider(options=[32, 64, 96, 128], value=128, description="context K"),
        hw=w.Dropdown(options=["H100", "A100"], value="H100", description="GPU"),
    )
