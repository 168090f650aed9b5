"""Reading the benchmark JSON: results table, targets, rooflines (plots and the notebook's explorer).

Needs only numpy/matplotlib (no torch): the stored H200 results can be studied on any laptop.

Roofline: a kernel that moves ``bytes`` and does ``flops`` in ``ms`` sits at arithmetic intensity
``I = flops / bytes`` and achieved rate ``flops / ms``; the machine allows at most
``min(peak_TFLOPs, I · bandwidth)``. Memory-bound kernels (decode attention, scans) live on the slanted line,
so the number that matters for them is ``frac_bw = achieved bandwidth / copy bandwidth``.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

KERNELS = ("sparse_attention", "lightning_indexer", "fa_decode_topk", "selective_scan", "ssd_chunked",
           "block_sparse_attention")
RESULTS = Path(__file__).resolve().parent / "results" / "h200.json"

# The targets: (kernel, phase, kind, threshold). kind "frac_bw": best row's frac_bw >= threshold;
# kind "peer": our ms <= the named peer's ms on the same shape, for every row (threshold unused).
TARGETS = (
    ("sparse_attention", "decode", "frac_bw", 0.80, None),
    ("lightning_indexer", "decode", "frac_bw", 0.80, None),
    ("fa_decode_topk", "decode", "frac_bw", 0.70, None),
    ("selective_scan", "prefill", "frac_bw", 0.60, None),
    ("ssd_chunked", "prefill", "peer", None, "fla chunk_simple_gla"),
    ("block_sparse_attention", "prefill", "peer", None, "FlexAttention"),
)


def load_results(path=None) -> dict:
    """The stored benchmark results (default: gpu_track/results/h200.json)."""
    p = Path(path) if path is not None else RESULTS
    if not p.exists():
        raise ValueError(f"no benchmark results at {p}: run `python -m gpu_track.bench --out {p}` on a GPU")
    res = json.loads(p.read_text())
    for key in ("machine", "date", "copy_GBps", "bf16_TFLOPs", "rows"):
        if key not in res:
            raise ValueError(f"results file {p} lacks the key {key!r}")
    return res


def _rows(res, kernel=None, phase=None):
    if kernel is not None and kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    return [r for r in res["rows"] if (kernel is None or r["kernel"] == kernel) and (phase is None or r["phase"] == phase)]


def shape_str(shape: dict) -> str:
    """Compact shape text: 'B=64 S=32K K=2048'. Only the sizes, not the dtype."""
    def fmt(v):
        return f"{v // 1024}K" if isinstance(v, int) and v >= 8192 and v % 1024 == 0 else str(v)
    return " ".join(f"{k}={fmt(v)}" for k, v in shape.items() if k != "dtype")


def best_peer(r: dict, prefix: str | None = None):
    """(name, ms) of the fastest peer of a row, optionally among the peers whose name starts with ``prefix``."""
    peers = {k: v for k, v in r.get("peers", {}).items() if v is not None and (prefix is None or k.startswith(prefix))}
    if not peers:
        return None, None
    name = min(peers, key=peers.get)
    return name, peers[name]


def results_table(res, kernel=None) -> list:
    """One text line per row: kernel, phase, shape, ms, frac_bw, TFLOP/s, fastest peer and its ms."""
    lines = [f"{'kernel':23s} {'phase':7s} {'shape':44s} {'ms':>8s} {'frac_bw':>7s} {'TFLOP/s':>7s}  fastest peer (ms)"]
    for r in _rows(res, kernel):
        name, ms = best_peer(r)
        tf = r["flops"] / (r["ms"] * 1e-3) / 1e12
        peer = f"{name} ({ms:.3f})" if name else "-"
        lines.append(f"{r['kernel']:23s} {r['phase']:7s} {shape_str(r['shape'])[:44]:44s} {r['ms']:8.3f} "
                     f"{r['frac_bw']:7.2f} {tf:7.1f}  {peer}")
    return lines


def check_targets(res) -> list:
    """The issue's targets against the stored rows: list of dicts {kernel, phase, target, measured, met}."""
    out = []
    for kernel, phase, kind, thr, peer in TARGETS:
        rows = _rows(res, kernel, phase)
        if not rows:
            out.append({"kernel": kernel, "phase": phase, "target": "-", "measured": "no rows", "met": False})
            continue
        if kind == "frac_bw":
            best = max(rows, key=lambda r: r["frac_bw"])
            out.append({"kernel": kernel, "phase": phase, "target": f"best frac_bw >= {thr:.2f}",
                        "measured": f"{best['frac_bw']:.2f} ({shape_str(best['shape'])})", "met": best["frac_bw"] >= thr})
        else:
            wins = [(r, best_peer(r, peer)[1]) for r in rows]
            wins = [(r, p) for r, p in wins if p is not None]
            n_win = sum(r["ms"] <= p for r, p in wins)
            out.append({"kernel": kernel, "phase": phase, "target": f"<= {peer} on every shape",
                        "measured": f"faster on {n_win}/{len(wins)} shapes", "met": bool(wins) and n_win == len(wins)})
    return out


def roofline_points(res, kernel: str):
    """(intensity FLOP/B, achieved TFLOP/s, phase) arrays for one kernel's rows."""
    rows = _rows(res, kernel)
    ai = np.array([r["flops"] / r["bytes"] for r in rows], dtype=float)
    tf = np.array([r["flops"] / (r["ms"] * 1e-3) / 1e12 for r in rows], dtype=float)
    return ai, tf, [r["phase"] for r in rows]


def roof(res, intensity):
    """The roofline: min(peak bf16 TFLOP/s, intensity · copy bandwidth) in TFLOP/s."""
    intensity = np.asarray(intensity, dtype=float)
    return np.minimum(res["bf16_TFLOPs"], intensity * res["copy_GBps"] / 1e3)


def plot_roofline(res, kernel: str):
    """Roofline of the machine with one kernel's measured rows (decode o, prefill ^). Returns the Figure."""
    import matplotlib.pyplot as plt

    ai, tf, phase = roofline_points(res, kernel)
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = np.logspace(-1, 4, 200)
    ax.loglog(xs, roof(res, xs), "k-", lw=1.5, label=f"roof: {res['copy_GBps'] / 1e3:.2f} TB/s, {res['bf16_TFLOPs']:.0f} TFLOP/s")
    for ph, marker in (("decode", "o"), ("prefill", "^")):
        sel = [i for i, p in enumerate(phase) if p == ph]
        if sel:
            ax.loglog(ai[sel], tf[sel], marker, ms=8, label=f"{kernel} {ph} (measured)")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"{kernel} on {res['machine']}")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig


def roofline_summary(res, kernel: str) -> str:
    """The printed companion of plot_roofline: per row the fraction of the roof reached."""
    ai, tf, phase = roofline_points(res, kernel)
    frac = tf / roof(res, ai)
    return f"{kernel}: " + ", ".join(f"{p} I={a:.0f} -> {f:.2f} of roof" for a, f, p in zip(ai, frac, phase))


def roofline_explorer(res):
    """ipywidgets explorer: pick a kernel, see its roofline and the one-line summary."""
    import ipywidgets as widgets
    import matplotlib.pyplot as plt
    from IPython.display import display

    def show(kernel):
        fig = plot_roofline(res, kernel)
        display(fig)
        plt.close(fig)
        print(roofline_summary(res, kernel))

    return widgets.interactive(show, kernel=widgets.Dropdown(options=list(KERNELS), value=KERNELS[0]))


def predict_decode_ms(bytes_moved: float, copy_GBps: float) -> float:
    """The memory-bound prediction: time = bytes / bandwidth, in ms."""
    if bytes_moved < 0 or copy_GBps <= 0:
        raise ValueError(f"bytes_moved must be >= 0 and copy_GBps > 0, got {bytes_moved}, {copy_GBps}")
    return bytes_moved / (copy_GBps * 1e9) * 1e3
