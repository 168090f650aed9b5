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
SASS = Path(__file__).resolve().parent / "results" / "sass_scan.json"     # python -m gpu_track.sass --json
SASS_SSD = Path(__file__).resolve().parent / "results" / "sass_ssd.json"  # python -m gpu_track.targets --sass-ssd
CHAINED = Path(__file__).resolve().parent / "results" / "ssd_chained_h200.json"  # benchmarks/ssd_chained_probe.py

# The targets: (kernel, phase, kind, threshold, arg).
#   "frac_bw": the best row's frac_bw >= threshold (arg: None, or a shape dict the row must match);
#   "frac_of_bound": the best row's measured bound / time >= threshold (the row states its bound);
#   "speedup": on every row, (fastest peer whose name starts with one of arg) / our ms >= threshold;
#   "peer": our ms <= the named peer's ms on the same shape, for every row (threshold unused).
TARGETS = (
    ("sparse_attention", "decode", "frac_bw", 0.80, None),
    ("lightning_indexer", "decode", "frac_bw", 0.80, None),
    ("fa_decode_topk", "decode", "frac_bw", 0.70, None),
    ("selective_scan", "prefill", "frac_of_bound", 0.50, None),
    ("ssd_chunked", "prefill", "speedup", 1.5, ("mamba", "fla")),
    ("block_sparse_attention", "prefill", "peer", None, "FlexAttention"),
    ("block_sparse_attention", "decode", "frac_bw", 0.70, {"B": 64, "S": 32768}),
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
    for kernel, phase, kind, thr, arg in TARGETS:
        rows = _rows(res, kernel, phase)
        if kind == "frac_bw" and arg:
            rows = [r for r in rows if all(r["shape"].get(k) == v for k, v in arg.items())]
        if not rows:
            out.append({"kernel": kernel, "phase": phase, "target": "-", "measured": "no rows", "met": False})
            continue
        if kind in ("frac_bw", "frac_of_bound"):
            rows = [r for r in rows if r.get(kind) is not None]
            best = max(rows, key=lambda r: r[kind], default=None)
            where = f" at {shape_str(arg)}" if arg else ""
            out.append({"kernel": kernel, "phase": phase, "target": f"best {kind}{where} >= {thr:.2f}",
                        "measured": "no rows" if best is None else f"{best[kind]:.2f} ({shape_str(best['shape'])})",
                        "met": best is not None and best[kind] >= thr})
        elif kind == "speedup":
            wins = [(r, min((best_peer(r, p)[1] for p in arg if best_peer(r, p)[1] is not None), default=None))
                    for r in rows]
            wins = [(r, p) for r, p in wins if p is not None]
            n_win = sum(p / r["ms"] >= thr for r, p in wins)
            lo = min((p / r["ms"] for r, p in wins), default=float("nan"))
            out.append({"kernel": kernel, "phase": phase, "target": f">= {thr:g}x faster than {'/'.join(arg)}",
                        "measured": f"on {n_win}/{len(wins)} shapes (lowest {lo:.2f}x)",
                        "met": bool(wins) and n_win == len(wins)})
        else:
            wins = [(r, best_peer(r, arg)[1]) for r in rows]
            wins = [(r, p) for r, p in wins if p is not None]
            n_win = sum(r["ms"] <= p for r, p in wins)
            out.append({"kernel": kernel, "phase": phase, "target": f"<= {arg} on every shape",
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


def ridge_point(res) -> float:
    """The roofline's ridge in FLOP/byte from the MEASURED ceilings: bf16_TFLOPs / copy bandwidth. Below it a kernel
    is memory-bound (its roof is intensity · bandwidth), above it compute-bound."""
    return res["bf16_TFLOPs"] * 1e12 / (res["copy_GBps"] * 1e9)


def roofline_positions(res) -> list:
    """Per (kernel, phase, dtype): the best row's intensity, which side of the ridge it sits on, the fraction of the
    roof (memory: frac_bw; compute: TFLOP/s / bf16_TFLOPs) it reaches. list of dicts, in row order."""
    ridge = ridge_point(res)
    groups = {}
    for r in res["rows"]:
        groups.setdefault((r["kernel"], r["phase"], r["shape"].get("dtype", "")), []).append(r)
    out = []
    for (kernel, phase, dtype), rows in groups.items():
        best = max(rows, key=lambda r: r["flops"] / (r["ms"] * 1e-3) / roof(res, r["flops"] / r["bytes"]) / 1e12)
        ai = best["flops"] / best["bytes"]
        tf = best["flops"] / (best["ms"] * 1e-3) / 1e12
        out.append({"kernel": kernel, "phase": phase, "dtype": dtype, "intensity": ai, "ridge": ridge,
                    "bound": "memory" if ai < ridge else "compute", "frac_of_roof": tf / float(roof(res, ai)),
                    "frac_bw": best["frac_bw"], "TFLOPs": tf, "shape": shape_str(best["shape"])})
    return out


PROFILE_FIELDS = (("dram_pct_of_peak", "DRAM % of peak"), ("achieved_occupancy_pct", "occupancy %"),
                  ("sfu_xu_pipe_pct", "SFU (XU) pipe %"), ("tensor_pipe_pct", "tensor pipe %"), ("grid", "grid"))


def profile_summary(res) -> list:
    """One line per profiled kernel launch from the JSON's ``profile`` (Nsight Compute), [] when the JSON has none."""
    prof = res.get("profile") or {}
    lines = []
    for case, kernels in prof.get("cases", {}).items():
        if "error" in kernels:
            lines.append(f"{case}: not profiled ({str(kernels['error'])[:60].strip()})")
            continue
        for name, m in kernels.items():
            parts = [f"{label} {m[key]:.0f}" for key, label in PROFILE_FIELDS if isinstance(m.get(key), float)]
            lines.append(f"{case} / {name.split(':', 1)[-1][:28]}: " + ", ".join(parts))
    return lines


def _profiled(res, case: str, kernel: str):
    """The Nsight Compute metrics of one launch in the JSON's profile (None when not profiled)."""
    for name, m in (res.get("profile") or {}).get("cases", {}).get(case, {}).items():
        if name.split(":", 1)[-1].startswith(kernel):
            return m
    return None


def issue_rate(res, clock_hz: float = 1.98e9) -> float:
    """Thread-instructions per second the SMs can issue: 4 schedulers x 32 lanes per SM per clock."""
    return 4 * 32 * (res.get("sms") or 132) * clock_hz


def scan_limits(res, sass: dict | None = None) -> list:
    """What limits the Mamba-1 scan prefill, from the JSON and the SASS table (``load_sass``): one line per row with
    its exp/byte bound, then what the profile and the instruction count say. [] without prefill rows."""
    rows = _rows(res, "selective_scan", "prefill")
    lines = []
    mix = {tuple(r["config"]): r for r in (sass or {}).get("selective_scan", [])}
    for r in rows:
        sh, c = r["shape"], r.get("config") or {}
        n = sh["Bt"] * sh["L"] * sh["Dm"] * sh["N"]
        key = (c.get("chunk"), c.get("block_d"), c.get("lanes_d"), c.get("num_warps"))
        line = (f"{shape_str(sh)}: {r['ms']:.3f} ms against its bound {r['bound_ms']:.3f} ms "
                f"({r['frac_of_bound']:.2f} of it)")
        if key in mix:
            per = mix[key]["per_element"]
            issue_ms = n * per / issue_rate(res) * 1e3
            line += (f"; config {key}: {per:.1f} instructions per element (1 of them the exp) -> "
                     f"{issue_ms:.3f} ms at the full issue rate, the measured time is {r['ms'] / issue_ms:.1f}x that")
        lines.append(line)
    m = _profiled(res, "selective_scan_prefill", "_scan_kernel")
    if m and rows:
        nan = float("nan")
        lines.append(f"profile at {shape_str(rows[0]['shape'])}: {m.get('active_warps_per_scheduler', nan):.2f} "
                     f"warps per scheduler ({m.get('eligible_warps_per_scheduler', float('nan')):.2f} ready to issue), "
                     f"issue slots busy {m.get('issue_slots_busy_pct', float('nan')):.0f}%, DRAM "
                     f"{m.get('dram_pct_of_peak', float('nan')):.0f}% of peak, occupancy "
                     f"{m.get('achieved_occupancy_pct', float('nan')):.0f}%")
    elif rows:
        lines.append("profile: not in this JSON")
    peer = (sass or {}).get("mamba_selective_scan_cuda")
    if rows and peer and "per_element" in peer:
        lines.append(f"mamba's CUDA scan, compiled the same way (nvcc): {peer['per_element']:.1f} instructions per "
                     f"element, {peer['registers']} registers, {peer['warps_per_block']} warps per block of one "
                     f"channel (time on the threads): more instructions than ours, more warps at batch 1")
    return lines


def ssd_limits(res) -> list:
    """What limits the SSD prefill: per row the speedup over the fastest peer, the bytes the three-launch form
    must move (x twice, y, the chunk states four times) at copy bandwidth against the time the 1.5x target asks;
    then the profiled launches (share of the time, DRAM, registers, spills). [] without rows."""
    lines = []
    for r in _rows(res, "ssd_chunked", "prefill"):
        name, peer_ms = best_peer(r)
        sh = r["shape"]
        x_bytes = sh["Bt"] * sh["L"] * sh["H"] * sh["P"] * 2
        floor_ms = (r["bytes"] + x_bytes + r.get("states_bytes", 0)) / (res["copy_GBps"] * 1e9) * 1e3
        lines.append(f"{shape_str(sh)}: {r['ms']:.3f} ms, {peer_ms / r['ms']:.2f}x the fastest peer ({name}); "
                     f"the 1.5x target asks {peer_ms / 1.5:.3f} ms; this form's bytes alone take {floor_ms:.3f} ms")
    prof = (res.get("profile") or {}).get("cases", {}).get("ssd_two_pass_b4", {})
    total = sum(m.get("time_ns", 0.0) for m in prof.values()) or 1.0
    for name, m in prof.items():
        lines.append(f"  {name.split(':', 1)[-1]}: {m['time_ns'] / total:.0%} of the time, DRAM "
                     f"{m.get('dram_pct_of_peak', float('nan')):.0f}% of peak, {m.get('regs_per_thread', 0):.0f} "
                     f"registers, {m.get('spill_requests', 0):,.0f} local-memory spill requests, occupancy "
                     f"{m.get('achieved_occupancy_pct', float('nan')):.0f}%")
    return lines


SSD_CONFIG_ORDER = ("chunk", "block_p", "num_warps", "num_stages", "two_pass", "block_n_states", "states_dtype",
                    "pass_block", "pass_chunks", "heads_per_program")


def ssd_sass_lines(res, table: dict | None = None) -> list:
    """The SSD kernels of the config the stored rows picked, as compiled for sm_90 by the current code (the table of
    ``python -m gpu_track.targets --sass-ssd``, default gpu_track/results/sass_ssd.json): registers, static
    instructions, local-memory loads (spills). [] without SSD rows or without that config in the table."""
    table = load_sass(SASS_SSD) if table is None else table
    rows = _rows(res, "ssd_chunked", "prefill")
    if not rows or not table:
        return []
    cfg = rows[0].get("config") or {}
    key = [cfg.get(k) for k in SSD_CONFIG_ORDER]
    by = {json.dumps(r["config"]): r["kernels"] for r in table.get("ssd_chunked", [])}
    kernels = by.get(json.dumps(key))
    if kernels is None:
        return []
    lines = [f"the picked config compiled for sm_90 now (Triton {table.get('triton')}, static counts):"]
    for k in kernels:
        lines.append(f"  {k['kernel']}: {k['registers']} registers, {k['instructions']:,} instructions, "
                     f"{k['local_loads']:,} local-memory loads (spills)")
    return lines


def ssd_chained_lines(probe: dict | None = None) -> list:
    """The one-launch (chained) SSD form against the two-pass form and mamba, from one probe run
    (``benchmarks/ssd_chained_probe.py``; default gpu_track/results/ssd_chained_h200.json): per shape the fastest
    chained config, the two-pass config the bench picks and mamba's faster chunk size, all timed in that run; then
    its checks. [] without a probe file."""
    probe = _load_json(CHAINED) if probe is None else probe
    if not probe.get("rows"):
        return []
    lines = [f"one launch, chunk states handed on through L2 (ssd_chunked(chained=True)), {probe['gpu']}, "
             f"{probe.get('date', '?')}, one run:"]
    for r in probe["rows"]:
        ms = r["ms"]
        chained = {k: v for k, v in ms.items() if "chained=True" in k}
        two = {k: v for k, v in ms.items() if "two_pass=True" in k}
        peer = {k: v for k, v in ms.items() if k.startswith("mamba")}
        if not (chained and two and peer):
            continue
        c, t, p = (min(d, key=d.get) for d in (chained, two, peer))
        hg = c.split("heads_per_program=")[-1] if "heads_per_program=" in c else "1"
        lines.append(f"  Bt={r['Bt']} L={r['L'] // 1024}K: chained {chained[c]:.3f} ms (chunk "
                     f"{c.split('chunk=')[1].split(',')[0]}, {hg} head(s) a program), two-pass {two[t]:.3f} ms, "
                     f"{p} {peer[p]:.3f} ms: chained {peer[p] / chained[c]:.2f}x mamba, "
                     f"{two[t] / chained[c]:.2f}x the two-pass form")
    if "ragged_max_rel" in probe:
        lines.append(f"  checks: ragged shapes against the single pass, fp32 {probe['ragged_max_rel']:.1e}, bf16 "
                     f"{probe['ragged_max_rel_bf16']:.1e} relative; 20 repeats bit-identical: "
                     f"{probe.get('repeat_bitwise_equal_20')}")
    return lines


def _load_json(path: Path) -> dict:
    """A stored results file, {} when absent."""
    return json.loads(path.read_text()) if path.exists() else {}


def load_sass(path=None) -> dict:
    """The stored SASS instruction table (gpu_track/results/sass_scan.json), {} when absent."""
    return _load_json(Path(path) if path is not None else SASS)


def scan_bytes(Bt: int, L: int, Dm: int, N: int, fused: bool = True, in_bytes: int = 2, out_bytes: int = 2,
               acc_bytes: int = 4) -> int:
    """HBM bytes the Mamba-1 prefill must move. Fused: read x, Δ (in_bytes each per (t, d)), B, C (per t), write y,
    the last state. Unfused adds writing Ā and B̄x ((t, d, n), acc_bytes each) and reading them back, and reads x
    a second time (for the D skip)."""
    fused_b = Bt * L * Dm * (2 * in_bytes + out_bytes) + 2 * Bt * L * N * in_bytes + Bt * Dm * N * acc_bytes
    if fused:
        return fused_b
    return fused_b + 2 * 2 * Bt * L * Dm * N * acc_bytes + Bt * L * Dm * in_bytes
