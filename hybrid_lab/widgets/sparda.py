"""Plots and the offload explorer of notebook 08 (SparDA). Every function returns a matplotlib Figure (or an
ipywidgets object built on ``explore_offload``, a pure function that is unit-tested)."""
from __future__ import annotations

import matplotlib

matplotlib.use(matplotlib.get_backend())   # keep the notebook's inline backend; Agg under pytest
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from hybrid_lab.core import checks  # noqa: E402
from hybrid_lab.serving.offload_sim import (A100, H100, METHODS, MINICPM_8B, PAPER, layer_timeline,  # noqa: E402
                                            max_batch, throughput, with_)
from hybrid_lab.widgets.static import with_picture  # noqa: E402

__all__ = ["plot_selection", "plot_teachers", "plot_training", "plot_recall", "plot_timeline", "plot_batch_sweep",
           "explore_offload", "format_summary", "offload_explorer", "TIMELINE_LANES", "PAPER_PREFILL_H100_B4",
           "PAPER_PER_TASK", "throughput_tables_text", "per_task_text"]

TIMELINE_LANES = ("serial: GPU", "overlapped: compute", "overlapped: copy")   # the lanes of offload_sim.layer_timeline

# Reported, SparDA notes §4.4 (Table 3, p. 8): prefill throughput on the H100, batch 4, tokens/s.
PAPER_PREFILL_H100_B4 = {
    "lengths": (32768, 65536, 131072),
    "MiniCPM": {"Dense†": (20388.3, 13673.7, 8085.8), "Sparse": (18548.4, 16254.4, 13661.8),
                "SparDA": (19845.6, 18379.5, 17087.6)},
    "NOSA": {"Dense†": (20438.9, 13701.0, 8118.0), "Sparse": (12778.3, 11359.2, 9805.2),
             "SparDA": (13456.0, 12386.1, 11332.7)},
}
# Reported, SparDA notes §4.1: the per-task excerpts of Tables 11-14 (Sparse -> SparDA), as the notes quote them.
PAPER_PER_TASK = (
    ("Table 11 (HELMET)", "MiniCPM", "Recall", 67.8, 61.5), ("Table 11 (HELMET)", "MiniCPM", "Rerank", 14.7, 17.0),
    ("Table 11 (HELMET)", "NOSA", "Recall", 40.9, 45.6), ("Table 11 (HELMET)", "NOSA", "LongQA", 26.9, 26.0),
    ("Table 12 (LongBench)", "MiniCPM", "narrativeqa", 20.2, 22.6),
    ("Table 12 (LongBench)", "MiniCPM", "2wikimqa", 35.2, 34.2),
    ("Table 12 (LongBench)", "NOSA", "musique", 23.4, 24.9),
    ("Table 12 (LongBench)", "NOSA", "passage retrieval", 92.0, 90.5),
    ("Table 13 (RULER)", "MiniCPM", "qa_1", 64.0, 70.0), ("Table 13 (RULER)", "MiniCPM", "niah_multikey_3", 62.0, 56.0),
    ("Table 13 (RULER)", "NOSA", "niah_multikey_3", 20.0, 28.0),
    ("Table 14 (Reasoning)", "MiniCPM", "MATH-500", 97.6, 97.4), ("Table 14 (Reasoning)", "MiniCPM", "AIME 2024", 90.0, 86.7),
    ("Table 14 (Reasoning)", "MiniCPM", "AIME 2025", 63.3, 70.0), ("Table 14 (Reasoning)", "NOSA", "MATH-500", 72.2, 71.6),
    ("Table 14 (Reasoning)", "NOSA", "AIME 2024", 40.0, 46.7), ("Table 14 (Reasoning)", "NOSA", "AIME 2025", 40.0, 53.3),
)

_COLORS = {"init": "#4c72b0", "local": "#55a868", "top-k": "#dd8452", "not read": "#cccccc"}


def plot_selection(scores_c, block_scores, block_ids, q_pos, n_init=1, n_local=2, block_size=64, stride=16):
    """Two panels for one query and one group: the compressed-grid scores, then the block scores colored by
    why each block is read (init / local / top-k) or not. scores_c: (Nc,), block_scores: (Nb,) real scores
    (-inf marks a masked position and is drawn as a 0 bar, NaN is refused), block_ids: selected ids in [-1, Nb)
    (-1 padded), q_pos >= 0. Bars: one per compressed position, then one per block grouped by kind."""
    scores_c = checks.finite_array("scores_c", scores_c, 1, "(Nc,)", allow_neginf=True).astype(float)
    block_scores = checks.finite_array("block_scores", block_scores, 1, "(Nb,)", allow_neginf=True).astype(float)
    block_ids = checks.index_sets("block_ids", block_ids, len(block_scores), 1)
    n_init, n_local = checks.nonneg_int("n_init", n_init), checks.nonneg_int("n_local", n_local)
    block_size, stride = checks.pos_int("block_size", block_size), checks.pos_int("stride", stride)
    q_pos = checks.int_in("q_pos", q_pos, 0, len(block_scores) * block_size)    # the query sits in a drawn block
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
    with the query's needle tokens (red) and diffuse spans (grey) marked. fine, coarse: (Nc,) finite scores >= 0;
    the two step lines are (arange(Nc)·stride, scores / Σ scores) (an all-zero row is drawn as zeros)."""
    fine = checks.finite_array("fine", fine, 1, "(Nc,)").astype(float)
    coarse = checks.finite_array("coarse", coarse, 1, "(Nc,)").astype(float)
    if fine.shape != coarse.shape or (fine < 0).any() or (coarse < 0).any():
        raise ValueError(f"fine and coarse must be scores >= 0 on one grid, got shapes {fine.shape}, {coarse.shape}")
    stride = checks.pos_int("stride", stride)
    needles = checks.int_array("needles", needles, 1, "(n,) token positions", lo=0)
    spans = [tuple(checks.finite_array(f"spans[{i}]", sp, 1)) for i, sp in enumerate(spans)]
    if any(len(sp) != 2 for sp in spans):
        raise ValueError(f"spans must be (start, end) pairs, got {spans!r}")
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
    """Loss curves: {name: 1-D array of per-step losses, finite and > 0 (log axis)}; line i is (step, loss)."""
    if not isinstance(histories, dict) or not histories:
        raise ValueError("histories must be a non-empty dict {name: per-step losses}")
    hs = {}
    for name, h in histories.items():
        hs[name] = checks.finite_array(f"histories[{name!r}]", h, 1)
        if (hs[name] <= 0).any():
            raise ValueError(f"histories[{name!r}] must be > 0 (a log axis), got min {hs[name].min():.3g}")
    fig, ax = plt.subplots(figsize=(6, 3), constrained_layout=True)
    for name, h in hs.items():
        ax.plot(h, label=name)
    ax.set(yscale="log", xlabel="Adam step", ylabel="Σ_l rest-bucket KL", title="Forecast training")
    ax.legend(fontsize=8)
    return fig


def plot_recall(results: dict):
    """Bars of recall (left) and attention-output error (right) per selector and layer.

    results: {selector: {"recall": per layer in [0, 1], "error": per layer >= 0}} (``evaluate_selectors``); each
    panel holds the bars of selector 0 (layers 0..n-1), then selector 1, ...
    """
    if not isinstance(results, dict) or not results:
        raise ValueError("results must be a non-empty dict {selector: {'recall': [...], 'error': [...]}}")
    names = list(results)
    n_layers = None
    for name in names:
        for key in ("recall", "error"):
            if not isinstance(results[name], dict) or key not in results[name]:
                raise ValueError(f"results[{name!r}] must hold 'recall' and 'error' lists, {key!r} is missing")
            v = checks.finite_array(f"results[{name!r}][{key!r}]", results[name][key], 1)
            n_layers = v.size if n_layers is None else n_layers
            if v.size != n_layers or v.size == 0 or (v < 0).any():
                raise ValueError(f"results[{name!r}][{key!r}] must hold one value >= 0 per layer ({n_layers}), "
                                 f"got {v.tolist()}")
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
    """Gantt chart of ``offload_sim.layer_timeline`` segments (times shown in µs): one bar per segment, in order,
    on the row of its lane, from start to end. totals: {"serial", "overlapped"} seconds (the default title)."""
    lanes = list(TIMELINE_LANES)
    if len(segments) == 0:
        raise ValueError("segments is empty: pass offload_sim.layer_timeline(...)[0]")
    for i, seg in enumerate(segments):
        if len(seg) != 4 or seg[0] not in lanes:
            raise ValueError(f"segments[{i}] must be (lane in {lanes}, start_s, end_s, label), got {seg!r}")
        s0 = checks.finite_number(f"segments[{i}] start", seg[1])
        s1 = checks.finite_number(f"segments[{i}] end", seg[2])
        if s1 < s0:
            raise ValueError(f"segments[{i}] ends before it starts: {seg!r}")
    if not title:
        for key in ("serial", "overlapped"):
            checks.nonneg_number(f"totals[{key!r}]", totals.get(key) if isinstance(totals, dict) else None)
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
    """Computed tokens/s per method vs batch (0 = OOM, not drawn); optional reported points as markers.

    batches: integers >= 1; sweep: {method: tokens/s per batch, finite >= 0}; reported: {method: tokens/s per batch,
    None/0 = not reported}. Lines: per method its computed line (non-OOM points), then its reported line if any.
    """
    batches = checks.int_array("batches", batches, 1, lo=1)
    if not isinstance(sweep, dict) or not sweep:
        raise ValueError("sweep must be a non-empty dict {method: tokens/s per batch}")
    for name, ys in sweep.items():
        ys = checks.finite_array(f"sweep[{name!r}]", ys, 1)
        if ys.shape != batches.shape or (ys < 0).any():
            raise ValueError(f"sweep[{name!r}] must hold one tokens/s >= 0 per batch ({batches.size}), "
                             f"got {ys.tolist()}")
    for name, ys in (reported or {}).items():
        if len(ys) != batches.size:
            raise ValueError(f"reported[{name!r}] must hold one entry per batch ({batches.size}), got {len(ys)}")
    fig, ax = plt.subplots(figsize=(7, 3.2), constrained_layout=True)
    for i, (name, ys) in enumerate(sweep.items()):
        ys = np.asarray(ys, float)
        ok = ys > 0
        line, = ax.plot(np.asarray(batches)[ok], ys[ok], "o-", label=f"{name} (computed)")
        pts = [(b, y) for b, y in zip(batches, (reported or {}).get(name, ())) if y]
        if pts:
            rb, ry = zip(*pts)
            ax.plot(rb, ry, "x--", color=line.get_color(), alpha=0.6, label=f"{name} (reported)")
    ax.set(xscale="log", xlabel="batch", ylabel="tokens/s", title=title)
    ax.set_xticks(batches, [str(b) for b in batches])
    ax.legend(fontsize=7, ncol=2)
    return fig


def explore_offload(batch=16, ctas=16, pcie_gbps=55.0, context=131072, hw="H100", churn=None):
    """The explorer's pure function: timeline figure + summary for one setting.

    Returns (fig, summary) with summary = {"serial_us", "overlapped_us" (per middle layer), "tok_s" per method
    (0 = OOM), "max_batch" per method}. hw: "H100" or "A100"; batch, ctas, context integers >= 1; pcie_gbps > 0.
    """
    if hw not in ("H100", "A100"):
        raise ValueError(f"hw must be 'H100' or 'A100', got {hw!r}")
    batch, ctas = checks.pos_int("batch", batch), checks.pos_int("ctas", ctas)
    context = checks.pos_int("context", context)
    pcie_gbps = checks.positive_number("pcie_gbps", pcie_gbps)
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
    """One line of :func:`explore_offload`'s summary: per-layer µs, serial vs overlapped, and tokens/s per method."""
    if not isinstance(s, dict) or not {"serial_us", "overlapped_us", "tok_s"} <= set(s):
        raise ValueError("s must be the summary dict of explore_offload (serial_us, overlapped_us, tok_s)")
    for key in ("serial_us", "overlapped_us"):
        checks.nonneg_number(f"s[{key!r}]", s[key])
    for meth, v in s["tok_s"].items():
        checks.nonneg_number(f"s['tok_s'][{meth!r}]", v)
    tok = ", ".join(f"{k} {v:.0f}" if v else f"{k} OOM" for k, v in s["tok_s"].items())
    return (f"per layer [µs]: serial {s['serial_us']:.1f}, overlapped {s['overlapped_us']:.1f} | "
            f"tokens/s: {tok}")


@with_picture
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


def throughput_tables_text() -> str:
    """The reported prefill table (Table 3) and the decode comparisons the notes draw from Tables 4 and 10, as plain
    text. Every ratio is computed here from the reported tokens/s (printed as computed from reported)."""
    pre = PAPER_PREFILL_H100_B4
    out = ["reported (Table 3, prefill, H100, batch 4, tokens/s):" + "".join(f"{L // 1024:>10}K" for L in pre["lengths"])]
    for model in ("MiniCPM", "NOSA"):
        rows = pre[model]
        for meth, vals in rows.items():
            out.append(f"  {model + ' / ' + meth:<18}" + "".join(f"{v:>11.1f}" for v in vals))
        fastest = [max(rows, key=lambda m, j=j: rows[m][j]) for j in range(len(pre["lengths"]))]
        out.append(f"  {model}: fastest by length (computed): {', '.join(fastest)}; at 128K SparDA / Sparse "
                   f"{rows['SparDA'][-1] / rows['Sparse'][-1]:.2f}x, SparDA / Dense† "
                   f"{rows['SparDA'][-1] / rows['Dense†'][-1]:.2f}x")
    dec = PAPER["decode_h100_128k"]
    j8 = dec["batches"].index(8)
    out.append("reported (Table 4, decode, H100, 128K): same batch, both offloaded, batch 8: " + "; ".join(
        f"{m} {dec[m]['SparDA'][j8]} / {dec[m]['Sparse'][j8]} = {dec[m]['SparDA'][j8] / dec[m]['Sparse'][j8]:.2f}x"
        for m in ("MiniCPM", "NOSA")) + " (computed from reported)")
    npf = PAPER["no_prefetch_h100_128k"]
    j64 = npf["batches"].index(64)
    for m in ("MiniCPM", "NOSA"):
        r = npf[m]
        out.append(f"reported (Table 10, decode, H100, 128K, batch 64), {m}: Sparse {r['Sparse'][j64]}, SparDA without "
                   f"prefetch {r['SparDA (no prefetch)'][j64]}, full SparDA {r['SparDA'][j64]}: without prefetch "
                   f"{'below' if r['SparDA (no prefetch)'][j64] < r['Sparse'][j64] else 'above'} Sparse; prefetch "
                   f"adds {r['SparDA'][j64] / r['SparDA (no prefetch)'][j64] - 1:+.1%} (computed from reported)")
    return "\n".join(out)


def per_task_text() -> str:
    """The per-task excerpts of Tables 11-14 (Sparse -> SparDA, reported) with the change in points (computed)."""
    out = ["reported (Tables 11-14, Sparse -> SparDA; the change computed):"]
    for table, model, task, a, b in PAPER_PER_TASK:
        out.append(f"  {table:<21} {model:<8} {task:<18} {a:>5.1f} -> {b:>5.1f}  ({b - a:+.1f})")
    return "\n".join(out)
