"""Two Mamba-1 scan layouts that put time on the lanes, as mamba's CUDA kernel does, tried and not kept.

Why: at batch 1 mamba-ssm's CUDA forward scan beats ``gpu_track.selective_scan``'s chunked kernel although it
issues more instructions per element (``python -m gpu_track.sass --peer``): one channel per block with time on
its 128 threads gives it 5,120 blocks of 4 warps, where our kernel (channels on the lanes, time in registers)
has 1,280 one-warp programs. These two kernels put time on the lanes in Triton, with the 16 states in a static
loop as mamba does, and count their instructions per (t, d, n) element compiled for sm_90 (no GPU needed):

- ``scan_time_kernel``: (channel, time) tiles, ``tl.associative_scan`` along time (Triton spreads it over lanes
  and warps and scans each repetition of its tile across them);
- ``scan_lanes_kernel``: (channel, item, lane) tiles, time t = lane * ITEMS + item: a scan over each lane's items
  in registers, then one over the lanes' totals that also yields each lane's exclusive prefix (the pair
  (inclusive, exclusive) combines associatively: the exclusive prefix of S1 S2's last element is I1 then E2).

Both need B and C time-major per state, (Bt, N, L). The counts (Triton 3.9, this module's configs): 20.5 to 66
per element, against 11.6-20.8 for the chunked kernel's configs and 22.0 for mamba's: Triton's layouts give
these warps only at mamba's instruction count or above, so neither is a bench candidate. Not part of the
package: an experiment, kept so that its numbers can be produced again.

    TRITON_INTERPRET=0 TRITON_DEFAULT_FP_FUSION=1 python benchmarks/sass_scan_layouts.py
    python benchmarks/sass_scan_layouts.py --check     # both kernels in Triton's interpreter against the twin
"""
from __future__ import annotations

import os
import sys

# compile for a GPU even where none is present; --check runs the kernels in the interpreter instead
os.environ["TRITON_INTERPRET"] = "1" if "--check" in sys.argv else os.environ.get("TRITON_INTERPRET", "0")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gpu_track import sass  # noqa: E402  (gpu_track before triton: it checks TRITON_INTERPRET)
from gpu_track.common import scan_combine  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def _channels(A_ptr, D_ptr, h0_ptr, DM, N, HAS_D: tl.constexpr, HAS_H0: tl.constexpr, BLOCK_D: tl.constexpr,
              BLOCK_N: tl.constexpr, ACC_DTYPE: tl.constexpr):
    """This program's channels and what it keeps of them: offsets, masks, the state's offsets, A·log2(e) (exp2 of
    Δ·that is exp(Δ A)), the state (h0 or zeros) and D (zeros without it). Both kernels start with it."""
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    mask_d = offs_d < DM
    mask_dn = mask_d[:, None] & (offs_n < N)[None, :]
    dn = offs_d[:, None] * N + offs_n[None, :]
    a2 = tl.load(A_ptr + dn, mask=mask_dn, other=0.0).to(ACC_DTYPE) * 1.4426950408889634
    hrow = tl.program_id(0).to(tl.int64) * DM * N + dn
    h = tl.zeros([BLOCK_D, BLOCK_N], ACC_DTYPE)
    if HAS_H0:
        h = tl.load(h0_ptr + hrow, mask=mask_dn, other=0.0).to(ACC_DTYPE)
    d_skip = tl.zeros([BLOCK_D], ACC_DTYPE)
    if HAS_D:
        d_skip = tl.load(D_ptr + offs_d, mask=mask_d, other=0.0).to(ACC_DTYPE)
    return offs_d, offs_n, mask_d, mask_dn, hrow, a2, h, d_skip


@triton.jit
def _state(n: tl.constexpr, offs_n, a2, h, Bt_ptr, Ct_ptr, b, N, L, offs_t, mask_t, ACC_DTYPE: tl.constexpr):
    """State n's share of one chunk: its column selector, A·log2(e) and carried state per channel, and B, C over
    the chunk's steps (time-major, (Bt, N, L), any shape of offs_t)."""
    sel = (offs_n == n)[None, :]
    bt_row = (b.to(tl.int64) * N + n) * L + offs_t
    ok = mask_t & (offs_t * 0 + n < N)
    return (sel, tl.sum(tl.where(sel, a2, 0.0), 1), tl.sum(tl.where(sel, h, 0.0), 1),
            tl.load(Bt_ptr + bt_row, mask=ok, other=0.0).to(ACC_DTYPE),
            tl.load(Ct_ptr + bt_row, mask=ok, other=0.0).to(ACC_DTYPE))


@triton.jit
def scan_time_kernel(x_ptr, dt_ptr, A_ptr, Bt_ptr, Ct_ptr, D_ptr, h0_ptr, y_ptr, h_last_ptr, L, DM, N,
                     HAS_D: tl.constexpr, HAS_H0: tl.constexpr, CHUNK: tl.constexpr, BLOCK_D: tl.constexpr,
                     BLOCK_N: tl.constexpr, ACC_DTYPE: tl.constexpr):
    b = tl.program_id(0)
    offs_d, offs_n, mask_d, mask_dn, hrow, a2, h, d_skip = _channels(A_ptr, D_ptr, h0_ptr, DM, N, HAS_D, HAS_H0,
                                                                    BLOCK_D, BLOCK_N, ACC_DTYPE)
    ar = tl.arange(0, CHUNK)
    first = (ar == 0)[None, :]
    last = (ar == CHUNK - 1)[None, :]
    for t0 in range(0, L, CHUNK):
        offs_t = t0 + ar
        mask_t = offs_t < L
        row = b.to(tl.int64) * L + offs_t
        m2 = mask_d[:, None] & mask_t[None, :]
        td = row[None, :] * DM + offs_d[:, None]                                     # (BD, CH)
        x = tl.load(x_ptr + td, mask=m2, other=0.0).to(ACC_DTYPE)
        dt = tl.load(dt_ptr + td, mask=m2, other=0.0).to(ACC_DTYPE)
        dtx = dt * x
        if HAS_D:
            y = d_skip[:, None] * x
        else:
            y = tl.zeros([BLOCK_D, CHUNK], ACC_DTYPE)
        for n in tl.static_range(BLOCK_N):                                           # the states one by one
            sel, a2n, hn, Bn, Cn = _state(n, offs_n, a2, h, Bt_ptr, Ct_ptr, b, N, L, offs_t, mask_t, ACC_DTYPE)
            a = tl.exp2(dt * a2n[:, None])
            u = dtx * Bn[None, :]
            u = tl.where(first, a * hn[:, None] + u, u)                              # the carried state folded in
            _, hs = tl.associative_scan((a, u), 1, scan_combine)
            y += hs * Cn[None, :]
            h = tl.where(sel, tl.sum(tl.where(last, hs, -0.0), 1)[:, None], h)
        tl.store(y_ptr + td, y.to(y_ptr.dtype.element_ty), mask=m2)
    tl.store(h_last_ptr + hrow, h.to(h_last_ptr.dtype.element_ty), mask=mask_dn)


@triton.jit
def _inclusive_exclusive(a1, u1, ea1, eu1, a2, u2, ea2, eu2):
    """(inclusive, exclusive) prefixes of the recurrence h = a h + u: the exclusive prefix of the last element of
    S1 S2 is S1's inclusive prefix followed by S2's exclusive one."""
    return a1 * a2, a2 * u1 + u2, a1 * ea2, ea2 * u1 + eu2


@triton.jit
def scan_lanes_kernel(x_ptr, dt_ptr, A_ptr, Bt_ptr, Ct_ptr, D_ptr, h0_ptr, y_ptr, h_last_ptr, L, DM, N,
                      HAS_D: tl.constexpr, HAS_H0: tl.constexpr, ITEMS: tl.constexpr, LANES: tl.constexpr,
                      BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, ACC_DTYPE: tl.constexpr):
    CHUNK: tl.constexpr = ITEMS * LANES
    b = tl.program_id(0)
    offs_d, offs_n, mask_d, mask_dn, hrow, a2, h, d_skip = _channels(A_ptr, D_ptr, h0_ptr, DM, N, HAS_D, HAS_H0,
                                                                    BLOCK_D, BLOCK_N, ACC_DTYPE)
    tt = tl.arange(0, LANES)[None, :] * ITEMS + tl.arange(0, ITEMS)[:, None]        # (ITEMS, LANES) time offsets
    last_item = (tl.arange(0, ITEMS) == ITEMS - 1)[None, :, None]
    last_lane = (tl.arange(0, LANES) == LANES - 1)[None, :]
    for t0 in range(0, L, CHUNK):
        offs_t = t0 + tt
        mask_t = offs_t < L
        row = b.to(tl.int64) * L + offs_t
        m3 = mask_d[:, None, None] & mask_t[None, :, :]
        td = row[None, :, :] * DM + offs_d[:, None, None]                             # (BD, ITEMS, LANES)
        x = tl.load(x_ptr + td, mask=m3, other=0.0).to(ACC_DTYPE)
        dt = tl.load(dt_ptr + td, mask=m3, other=0.0).to(ACC_DTYPE)
        dtx = dt * x
        if HAS_D:
            y = d_skip[:, None, None] * x
        else:
            y = tl.zeros([BLOCK_D, ITEMS, LANES], ACC_DTYPE)
        for n in tl.static_range(BLOCK_N):
            sel, a2n, hn, Bn, Cn = _state(n, offs_n, a2, h, Bt_ptr, Ct_ptr, b, N, L, offs_t, mask_t, ACC_DTYPE)
            a = tl.exp2(dt * a2n[:, None, None])
            u = dtx * Bn[None, :, :]
            ac, uc = tl.associative_scan((a, u), 1, scan_combine)                   # each lane's items
            at = tl.sum(tl.where(last_item, ac, -0.0), 1)                           # (BD, LANES) lane totals
            ut = tl.sum(tl.where(last_item, uc, -0.0), 1)
            _, _, ea, eu = tl.associative_scan((at, ut, tl.full(at.shape, 1.0, ACC_DTYPE),
                                                tl.zeros(at.shape, ACC_DTYPE)), 1, _inclusive_exclusive)
            h_in = ea * hn[:, None] + eu                                             # the state entering each lane
            y += (ac * h_in[:, None, :] + uc) * Cn[None, :, :]
            hn_new = tl.sum(tl.where(last_lane, at * h_in + ut, -0.0), 1)
            h = tl.where(sel, hn_new[:, None], h)
        tl.store(y_ptr + td, y.to(y_ptr.dtype.element_ty), mask=m3)
    tl.store(h_last_ptr + hrow, h.to(h_last_ptr.dtype.element_ty), mask=mask_dn)


# (kernel, time-tile constexprs, block_d, num_warps): the nine configs of the results README
CONFIGS = ([(scan_time_kernel, {"CHUNK": ch}, bd, 4) for ch, bd in ((128, 4), (512, 4), (1024, 2), (2048, 1), (512, 8))]
           + [(scan_lanes_kernel, {"ITEMS": it, "LANES": ln}, bd, nw)
              for it, ln, bd, nw in ((8, 128, 4, 4), (16, 128, 2, 4), (8, 128, 2, 4), (16, 32, 4, 1))])


def count(fn, tile: dict, block_d: int, num_warps: int) -> dict:
    """Instructions per (t, d, n) element of one config compiled for sm_90 (bf16 x/Δ/B/C, N = 16)."""
    sig = {"x_ptr": "*bf16", "dt_ptr": "*bf16", "A_ptr": "*fp32", "Bt_ptr": "*bf16", "Ct_ptr": "*bf16",
           "D_ptr": "*fp32", "h0_ptr": "*fp32", "y_ptr": "*bf16", "h_last_ptr": "*fp32", "L": "i32", "DM": "i32",
           "N": "i32"}
    const = {"HAS_D": True, "HAS_H0": False, **tile, "BLOCK_D": block_d, "BLOCK_N": 16, "ACC_DTYPE": tl.float32}
    sig.update({k: "constexpr" for k in const})
    ops, regs = sass.instruction_mix(sass.compile_sm90(fn, sig, const, num_warps=num_warps))
    steps = tile.get("CHUNK") or tile["ITEMS"] * tile["LANES"]
    per = steps * block_d * 16 / (32 * num_warps)          # elements one thread handles per loop iteration
    return {"kernel": fn.__name__, "tile": tile, "block_d": block_d, "num_warps": num_warps, "registers": regs,
            "spills": ops["STL"] > 0, "per_element": round(sum(ops.values()) / per, 2)}


def check(seed: int = 0) -> float:
    """Both kernels on a ragged float64 case (L not a multiple of any tile, h0 and D) against the numpy twin
    ``hybrid_lab.ops.ssm.ssm_scan``: the largest relative error of y and h over the configs' kernels."""
    import numpy as np
    import torch

    from hybrid_lab.ops import ssm
    rng = np.random.default_rng(seed)
    Bt, L, Dm, N = 2, 300, 6, 16
    x, dt = rng.standard_normal((Bt, L, Dm)), rng.uniform(0.05, 0.5, (Bt, L, Dm))
    A, D = -rng.uniform(0.5, 2.0, (Dm, N)), rng.standard_normal(Dm)
    B, C, h0 = rng.standard_normal((Bt, L, N)), rng.standard_normal((Bt, L, N)), rng.standard_normal((Bt, Dm, N))
    y0, hl0 = ssm.ssm_scan(x, dt, A, B, C, D, h0)
    t = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in dict(x=x, dt=dt, A=A, D=D, h0=h0).items()}
    Bt_, Ct_ = (torch.from_numpy(np.ascontiguousarray(v.transpose(0, 2, 1))) for v in (B, C))   # (Bt, N, L)
    worst = 0.0
    for fn, tile, block_d, _ in ((scan_time_kernel, {"CHUNK": 128}, 4, 4),
                                 (scan_lanes_kernel, {"ITEMS": 8, "LANES": 32}, 4, 1)):
        y, hl = torch.empty(Bt, L, Dm, dtype=torch.float64), torch.empty(Bt, Dm, N, dtype=torch.float64)
        fn[(Bt, triton.cdiv(Dm, block_d))](t["x"], t["dt"], t["A"], Bt_, Ct_, t["D"], t["h0"], y, hl, L, Dm, N,
                                           HAS_D=True, HAS_H0=True, **tile, BLOCK_D=block_d, BLOCK_N=16,
                                           ACC_DTYPE=tl.float64)
        for got, ref in ((y.numpy(), y0), (hl.numpy(), hl0)):
            worst = max(worst, float(np.abs(got - ref).max() / np.abs(ref).max()))
    return worst


if __name__ == "__main__":
    if "--check" in sys.argv:
        err = check()
        print(f"both layouts against the twin (float64, interpreter): largest relative error {err:.1e}")
        sys.exit(0 if err < 1e-12 else 1)
    if not sass.available():
        sys.exit("this Triton cannot compile for sm_90 here")
    rows = [count(*c) for c in CONFIGS]
    for r in rows:
        print(f"{r['kernel']:18s} {str(r['tile']):28s} block_d {r['block_d']} warps {r['num_warps']}: "
              f"{r['per_element']:5.1f} instructions per element, {r['registers']} registers"
              f"{', spills' if r['spills'] else ''}")
    print(f"range: {min(r['per_element'] for r in rows)}-{max(r['per_element'] for r in rows)} per element")
