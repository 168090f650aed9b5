"""Mamba-1 selective scan (diagonal A per channel) and its one-token decode step.

Prefill: one program owns BLOCK_D channels of one sequence and their (BLOCK_D, N) state, kept in registers for
the whole sequence. It walks the sequence CHUNK steps at a time: it loads CHUNK steps of x and Δ for its channels
and of B and C (coalesced, so loads stay in flight), forms every step's decay a_t = exp(Δ_t A) and input
u_t = Δ_t x_t B_t, and solves h_t = a_t h_{t-1} + u_t inside the chunk with a prefix scan over the pairs (a, u)
(``tl.associative_scan``; (a1, u1) then (a2, u2) composes to (a1 a2, a2 u1 + u2)). Only h crosses a chunk boundary.

The tiles are (time, channel group, state, channel lane): Triton puts a tile's last axes on a warp's lanes, so
LANES_D channels go to lanes and time, the channel groups and most of the N states stay in each thread's registers.
The scan over time and most of the sum y = Σ_n h C are then register arithmetic (the first layout, (time, channel,
state), put the states on the lanes: 4 shuffles and 4 adds per element for that sum, 26 instructions per element
against 12-21 now; ``python -m gpu_track.sass`` counts them). Bytes: x and Δ read, y written, B/C read once per
channel block: ~ (2 + 1) · Bt · L · Dm · bytes; the exps (Bt·L·Dm·N) and the instructions around them are the
work.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpu_track.common import (acc_dtype, acc_torch_dtype, alloc, check, check_grid, check_index_space, check_tensor,
                              check_tile, pow2, scan_combine, on_tensor_cores)


@triton.jit
def _scan_kernel(x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, h0_ptr, y_ptr, h_last_ptr, L, DM, N,
                 HAS_D: tl.constexpr, HAS_H0: tl.constexpr, CHUNK: tl.constexpr,
                 BLOCK_D: tl.constexpr, LANES_D: tl.constexpr, BLOCK_N: tl.constexpr, ACC_DTYPE: tl.constexpr):
    # Tiles are (time, channel group, state, channel lane), channel d = g · LANES_D + j. Triton spreads a tile's
    # last axes over a warp's lanes, so j and part of n go to lanes while t, g and the rest of n stay in each thread's
    # registers: the scan over t and most of the sum over n are register arithmetic, and one thread reuses each B, C
    # value for its BLOCK_D / LANES_D channels (this layout: 2.2x fewer instructions per element).
    G: tl.constexpr = BLOCK_D // LANES_D
    LOG2E: tl.constexpr = 1.4426950408889634
    b = tl.program_id(0)
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, G)[:, None] * LANES_D + tl.arange(0, LANES_D)[None, :]  # (G, J)
    offs_n = tl.arange(0, BLOCK_N)
    mask_d, mask_n = offs_d < DM, offs_n < N
    mask_dn = mask_d[:, None, :] & mask_n[None, :, None]                                          # (G, BN, J)
    dn = offs_d[:, None, :] * N + offs_n[None, :, None]
    a2 = tl.load(A_ptr + dn, mask=mask_dn, other=0.0).to(ACC_DTYPE) * LOG2E      # exp(Δ A) = exp2(Δ · A log2 e)
    hrow = b.to(tl.int64) * DM * N + dn
    if HAS_H0:
        h = tl.load(h0_ptr + hrow, mask=mask_dn, other=0.0).to(ACC_DTYPE)
    else:
        h = tl.zeros([G, BLOCK_N, LANES_D], ACC_DTYPE)
    if HAS_D:
        d_skip = tl.load(D_ptr + offs_d, mask=mask_d, other=0.0).to(ACC_DTYPE)
    first = tl.arange(0, CHUNK) == 0
    last = tl.arange(0, CHUNK) == CHUNK - 1
    for t0 in range(0, L, CHUNK):
        offs_t = t0 + tl.arange(0, CHUNK)
        mask_t = offs_t < L
        row = b.to(tl.int64) * L + offs_t
        mask_td = mask_t[:, None, None] & mask_d[None, :, :]
        td = row[:, None, None] * DM + offs_d[None, :, :]                                            # (CH, G, J)
        x = tl.load(x_ptr + td, mask=mask_td, other=0.0).to(ACC_DTYPE)
        # dt = 0 past L: a = 1, u = 0, the state passes through the padded steps unchanged
        dt = tl.load(dt_ptr + td, mask=mask_td, other=0.0).to(ACC_DTYPE)
        mask_tn = mask_t[:, None] & mask_n[None, :]
        B_tile = tl.load(B_ptr + row[:, None] * N + offs_n[None, :], mask=mask_tn, other=0.0).to(ACC_DTYPE)  # (CH, BN)
        C_tile = tl.load(C_ptr + row[:, None] * N + offs_n[None, :], mask=mask_tn, other=0.0).to(ACC_DTYPE)
        a = tl.exp2(dt[:, :, None, :] * a2[None, :, :, :])                                   # (CH, G, BN, J)
        u = (dt * x)[:, :, None, :] * B_tile[:, None, :, None]
        # fold the carried state into the first step (u_0 <- a_0 h + u_0): the scan's u-part is then every step's
        # state, and the product of the a's it also forms is never read, so the compiler drops it
        u = tl.where(first[:, None, None, None], a * h[None, :, :, :] + u, u)
        _, hs = tl.associative_scan((a, u), 0, scan_combine)
        y = tl.sum(hs * C_tile[:, None, :, None], 2)                                                 # (CH, G, J)
        if HAS_D:
            y += d_skip[None, :, :] * x
        tl.store(y_ptr + td, y.to(y_ptr.dtype.element_ty), mask=mask_td)
        h = tl.sum(tl.where(last[:, None, None, None], hs, -0.0), 0)     # the last step (x + -0.0 == x: exact)
    tl.store(h_last_ptr + hrow, h.to(h_last_ptr.dtype.element_ty), mask=mask_dn)


CHUNKED_SCAN_KERNEL = _scan_kernel    # public: gpu_track.sass compiles it ahead of time to count its instructions


@triton.jit
def _scan_materialized_kernel(a_ptr, u_ptr, x_ptr, C_ptr, D_ptr, h0_ptr, y_ptr, h_last_ptr, L, DM, N,
                              HAS_D: tl.constexpr, HAS_H0: tl.constexpr, CHUNK: tl.constexpr,
                              BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, ACC_DTYPE: tl.constexpr):
    """The unfused scan (Lecture 10 §2.3's baseline): the same chunked prefix scan as ``_scan_kernel``, but the
    discretized Ā = exp(ΔA) and B̄x = Δ x B were computed beforehand and stored in HBM as (Bt, L, Dm, N) tensors,
    so the kernel reads 2·N floats per (t, d) instead of computing them from x, Δ, B."""
    b = tl.program_id(0)
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    mask_d, mask_n = offs_d < DM, offs_n < N
    mask_dn = mask_d[:, None] & mask_n[None, :]
    hrow = (b.to(tl.int64) * DM + offs_d)[:, None] * N + offs_n[None, :]
    if HAS_H0:
        h = tl.load(h0_ptr + hrow, mask=mask_dn, other=0.0).to(ACC_DTYPE)
    else:
        h = tl.zeros([BLOCK_D, BLOCK_N], ACC_DTYPE)
    if HAS_D:
        d_skip = tl.load(D_ptr + offs_d, mask=mask_d, other=0.0).to(ACC_DTYPE)
    last = tl.arange(0, CHUNK) == CHUNK - 1
    for t0 in range(0, L, CHUNK):
        offs_t = t0 + tl.arange(0, CHUNK)
        mask_t = offs_t < L
        row = b.to(tl.int64) * L + offs_t
        mask_td = mask_t[:, None] & mask_d[None, :]
        m3 = mask_td[:, :, None] & mask_n[None, None, :]
        tdn = (row[:, None] * DM + offs_d[None, :])[:, :, None] * N + offs_n[None, None, :]        # (CH, BD, BN)
        a = tl.load(a_ptr + tdn, mask=m3, other=1.0).to(ACC_DTYPE)                     # past L: a = 1, u = 0
        u = tl.load(u_ptr + tdn, mask=m3, other=0.0).to(ACC_DTYPE)
        C_tile = tl.load(C_ptr + row[:, None] * N + offs_n[None, :], mask=mask_t[:, None] & mask_n[None, :],
                         other=0.0).to(ACC_DTYPE)
        a_cum, u_cum = tl.associative_scan((a, u), 0, scan_combine)
        hs = a_cum * h[None, :, :] + u_cum
        y = tl.sum(hs * C_tile[:, None, :], 2)
        if HAS_D:
            y += d_skip[None, :] * tl.load(x_ptr + row[:, None] * DM + offs_d[None, :], mask=mask_td,
                                           other=0.0).to(ACC_DTYPE)
        tl.store(y_ptr + row[:, None] * DM + offs_d[None, :], y.to(y_ptr.dtype.element_ty), mask=mask_td)
        h = tl.sum(tl.where(last[:, None, None], hs, 0.0), 0)
    tl.store(h_last_ptr + hrow, h.to(h_last_ptr.dtype.element_ty), mask=mask_dn)


@triton.jit
def _recurrence_step(h, a_log, x, dt, B_tile, C_tile):
    """One step of the Mamba-1 recurrence for a (BLOCK_D, BLOCK_N) tile of the state, shared by the sequential
    prefill and the decode step: h = exp(dt·A) h + (dt·x) B, y = h · C. Returns (h, y)."""
    h = tl.exp(dt[:, None] * a_log) * h + (dt * x)[:, None] * B_tile[None, :]
    return h, tl.sum(h * C_tile[None, :], 1)


@triton.jit
def _scan_seq_kernel(x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, h0_ptr, y_ptr, h_last_ptr, L, DM, N,
                     HAS_D: tl.constexpr, HAS_H0: tl.constexpr,
                     BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, ACC_DTYPE: tl.constexpr):
    """The plain recurrence, one step per iteration: no scan overhead (one exp and two FMAs per state element
    and step); the loads of step t+1 do not depend on h, so they can be issued ahead of the arithmetic."""
    b = tl.program_id(0)
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    mask_d, mask_n = offs_d < DM, offs_n < N
    mask_dn = mask_d[:, None] & mask_n[None, :]
    a_log = tl.load(A_ptr + offs_d[:, None] * N + offs_n[None, :], mask=mask_dn, other=0.0).to(ACC_DTYPE)
    hrow = (b.to(tl.int64) * DM + offs_d)[:, None] * N + offs_n[None, :]
    if HAS_H0:
        h = tl.load(h0_ptr + hrow, mask=mask_dn, other=0.0).to(ACC_DTYPE)
    else:
        h = tl.zeros([BLOCK_D, BLOCK_N], ACC_DTYPE)
    if HAS_D:
        d_skip = tl.load(D_ptr + offs_d, mask=mask_d, other=0.0).to(ACC_DTYPE)
    for t in range(0, L):
        row = b.to(tl.int64) * L + t
        x = tl.load(x_ptr + row * DM + offs_d, mask=mask_d, other=0.0).to(ACC_DTYPE)
        dt = tl.load(dt_ptr + row * DM + offs_d, mask=mask_d, other=0.0).to(ACC_DTYPE)
        B_tile = tl.load(B_ptr + row * N + offs_n, mask=mask_n, other=0.0).to(ACC_DTYPE)
        C_tile = tl.load(C_ptr + row * N + offs_n, mask=mask_n, other=0.0).to(ACC_DTYPE)
        h, y = _recurrence_step(h, a_log, x, dt, B_tile, C_tile)
        if HAS_D:
            y += d_skip * x
        tl.store(y_ptr + row * DM + offs_d, y.to(y_ptr.dtype.element_ty), mask=mask_d)
    tl.store(h_last_ptr + hrow, h.to(h_last_ptr.dtype.element_ty), mask=mask_dn)


@triton.jit
def _step_kernel(x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, h_ptr, y_ptr, h_new_ptr, DM, N, HAS_D: tl.constexpr,
                 BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, ACC_DTYPE: tl.constexpr):
    b = tl.program_id(0)
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    mask_d, mask_n = offs_d < DM, offs_n < N
    mask_dn = mask_d[:, None] & mask_n[None, :]
    hrow = (b.to(tl.int64) * DM + offs_d)[:, None] * N + offs_n[None, :]
    h = tl.load(h_ptr + hrow, mask=mask_dn, other=0.0).to(ACC_DTYPE)
    a_log = tl.load(A_ptr + offs_d[:, None] * N + offs_n[None, :], mask=mask_dn, other=0.0).to(ACC_DTYPE)
    b64 = b.to(tl.int64)
    x = tl.load(x_ptr + b64 * DM + offs_d, mask=mask_d, other=0.0).to(ACC_DTYPE)
    dt = tl.load(dt_ptr + b64 * DM + offs_d, mask=mask_d, other=0.0).to(ACC_DTYPE)
    B_tile = tl.load(B_ptr + b64 * N + offs_n, mask=mask_n, other=0.0).to(ACC_DTYPE)
    C_tile = tl.load(C_ptr + b64 * N + offs_n, mask=mask_n, other=0.0).to(ACC_DTYPE)
    h, y = _recurrence_step(h, a_log, x, dt, B_tile, C_tile)
    if HAS_D:
        y += tl.load(D_ptr + offs_d, mask=mask_d, other=0.0).to(ACC_DTYPE) * x
    tl.store(y_ptr + b64 * DM + offs_d, y.to(y_ptr.dtype.element_ty), mask=mask_d)
    tl.store(h_new_ptr + hrow, h.to(h_new_ptr.dtype.element_ty), mask=mask_dn)


# public: gpu_track.targets compiles them ahead of time for each student GPU
KERNELS = {"chunked": _scan_kernel, "sequential": _scan_seq_kernel, "step": _step_kernel}


def _dtypes(*ts):
    return [t.dtype for t in ts if t is not None]


def check_selective_scan_args(x, dt, A, B, C, D, h0, chunk, block_d, variant, lanes_d=8):
    """The prefill wrapper's contract (shapes, dtypes, devices); ValueError naming the argument."""
    check(variant in ("chunked", "sequential"), f"variant must be 'chunked' or 'sequential', got {variant!r}")
    check_tensor("x", x, (None,) * 3, doc="(Bt, L, Dm)")
    Bt, L, Dm = x.shape
    check_tensor("dt", dt, (Bt, L, Dm), like=x, doc=f"(Bt={Bt}, L={L}, Dm={Dm})")
    check_tensor("A", A, (Dm, None), like=x, doc=f"(Dm={Dm}, N)")
    N = A.shape[1]
    check_tensor("B", B, (Bt, L, N), like=x, doc=f"(Bt={Bt}, L={L}, N={N} as A)")
    check_tensor("C", C, (Bt, L, N), like=x, doc=f"(Bt={Bt}, L={L}, N={N})")
    if D is not None:
        check_tensor("D", D, (Dm,), like=x, doc=f"(Dm={Dm},)")
    if h0 is not None:
        check_tensor("h0", h0, (Bt, Dm, N), like=x, doc=f"(Bt={Bt}, Dm={Dm}, N={N})")
    check_tile("chunk", chunk, lo=1)
    check_tile("block_d", block_d, lo=1)
    check_tile("lanes_d", lanes_d, lo=1)
    check_index_space("A", Dm * N, "A (Dm·N)")                                  # A's offsets are int32
    check_grid("block_d", (Bt, triton.cdiv(Dm, block_d), 1))


@on_tensor_cores("x", "dt", "B", "C")
def selective_scan(x, dt, A, B, C, D=None, h0=None, chunk: int = 16, block_d: int = 16, num_warps: int = 4,
                   out_dtype=None, variant: str = "chunked", lanes_d: int = 8):
    """x, dt: (Bt, L, Dm); A: (Dm, N); B, C: (Bt, L, N); D: (Dm,); h0: (Bt, Dm, N).

    Returns (y: (Bt, L, Dm), h_last: (Bt, Dm, N)), both float32 (float64 if any input is float64). ``chunk`` is the
    kernel's time tile (a power of two); the result does not depend on it (up to rounding). ``out_dtype``
    overrides y's dtype (the benchmark writes bf16). ``variant``: "chunked" (prefix scan inside CHUNK-step tiles)
    or "sequential" (one step per loop iteration). ``lanes_d`` (chunked): how many of a program's ``block_d`` channels
    lie across a warp's lanes (the rest are looped over in each thread's registers; capped at ``block_d``).
    """
    check_selective_scan_args(x, dt, A, B, C, D, h0, chunk, block_d, variant, lanes_d)
    chunk, block_d, lanes_d = int(chunk), int(block_d), int(lanes_d)     # checked integers, as Python ints
    Bt, L, Dm = x.shape
    N = A.shape[1]
    acc = acc_torch_dtype(*_dtypes(x, dt, A, B, C))
    y = alloc((Bt, L, Dm), out_dtype or acc, x.device)
    h_last = alloc((Bt, Dm, N), acc, x.device)
    dummy = h_last
    grid = (Bt, triton.cdiv(Dm, block_d))
    if Bt * Dm == 0:
        return y, h_last
    args = (x.contiguous(), dt.contiguous(), A.contiguous(), B.contiguous(), C.contiguous(),
            D.contiguous() if D is not None else dummy, h0.contiguous() if h0 is not None else dummy, y, h_last,
            L, Dm, N)
    meta = dict(HAS_D=D is not None, HAS_H0=h0 is not None, BLOCK_D=block_d, BLOCK_N=pow2(N, 1),
                ACC_DTYPE=acc_dtype(acc), num_warps=num_warps)
    if variant == "sequential":
        _scan_seq_kernel[grid](*args, **meta)
    else:
        _scan_kernel[grid](*args, CHUNK=chunk, LANES_D=min(lanes_d, block_d), **meta)
    return y, h_last


@on_tensor_cores("x", "dt", "B", "C")
def selective_scan_unfused(x, dt, A, B, C, D=None, h0=None, chunk: int = 16, block_d: int = 16, num_warps: int = 4,
                           out_dtype=None):
    """The unfused form of ``selective_scan`` (chunked variant), Lecture 10 §2.3's baseline: first materialize the
    discretized Ā = exp(Δ A) and B̄x = Δ x B as (Bt, L, Dm, N) accumulator-dtype tensors in HBM (torch), then
    scan them. Same arguments and result; moves ``scan_bytes(..., fused=False)`` bytes instead of
    ``scan_bytes(..., fused=True)``."""
    check_selective_scan_args(x, dt, A, B, C, D, h0, chunk, block_d, "chunked")
    chunk, block_d = int(chunk), int(block_d)
    Bt, L, Dm = x.shape
    N = A.shape[1]
    acc = acc_torch_dtype(*_dtypes(x, dt, A, B, C))
    y = alloc((Bt, L, Dm), out_dtype or acc, x.device)
    h_last = alloc((Bt, Dm, N), acc, x.device)
    if Bt * Dm == 0:
        return y, h_last
    dt_a = dt.to(acc)
    # elementwise torch ops keep their inputs' strides (a Fortran-ordered dt gives a Fortran-ordered a_bar): the
    # kernel indexes them as contiguous
    a_bar = torch.exp(dt_a[..., None] * A.to(acc)).contiguous()                     # (Bt, L, Dm, N) in HBM
    u_bar = ((dt_a * x.to(acc))[..., None] * B.to(acc)[:, :, None, :]).contiguous()  # (Bt, L, Dm, N) in HBM
    _scan_materialized_kernel[(Bt, triton.cdiv(Dm, block_d))](
        a_bar, u_bar, x.contiguous(), C.contiguous(), D.contiguous() if D is not None else h_last,
        h0.contiguous() if h0 is not None else h_last, y, h_last, L, Dm, N, HAS_D=D is not None,
        HAS_H0=h0 is not None, CHUNK=chunk, BLOCK_D=block_d, BLOCK_N=pow2(N, 1), ACC_DTYPE=acc_dtype(acc),
        num_warps=num_warps)
    return y, h_last


# scan_bytes lives with the stored results (no torch, no triton: notebook 09 counts bytes where Triton is missing)
from gpu_track.report import scan_bytes  # noqa: E402,F401


def check_selective_scan_step_args(x, dt, A, B, C, D, h, block_d):
    """The decode step's contract (shapes, dtypes, devices); ValueError naming the argument."""
    check_tensor("x", x, (None, None), doc="(Bt, Dm)")
    Bt, Dm = x.shape
    check_tensor("dt", dt, (Bt, Dm), like=x, doc=f"(Bt={Bt}, Dm={Dm})")
    check_tensor("A", A, (Dm, None), like=x, doc=f"(Dm={Dm}, N)")
    N = A.shape[1]
    check_tensor("B", B, (Bt, N), like=x, doc=f"(Bt={Bt}, N={N} as A)")
    check_tensor("C", C, (Bt, N), like=x, doc=f"(Bt={Bt}, N={N})")
    if D is not None:
        check_tensor("D", D, (Dm,), like=x, doc=f"(Dm={Dm},)")
    check_tensor("h", h, (Bt, Dm, N), like=x, doc=f"(Bt={Bt}, Dm={Dm}, N={N})")
    check_tile("block_d", block_d, lo=1)
    check_index_space("A", Dm * N, "A (Dm·N)")
    check_grid("block_d", (Bt, triton.cdiv(Dm, block_d), 1))


@on_tensor_cores("x", "dt", "B", "C")
def selective_scan_step(x, dt, A, B, C, D, h, block_d: int = 32, num_warps: int = 4):
    """One decode step. x, dt: (Bt, Dm); A: (Dm, N); B, C: (Bt, N); D: (Dm,) or None; h: (Bt, Dm, N).

    Returns (y: (Bt, Dm), h_new: (Bt, Dm, N)). Memory-bound on the state: it reads and writes Bt · Dm · N floats.
    """
    check_selective_scan_step_args(x, dt, A, B, C, D, h, block_d)
    block_d = int(block_d)
    Bt, Dm = x.shape
    N = A.shape[1]
    acc = acc_torch_dtype(*_dtypes(x, dt, A, B, C, h))
    y = alloc((Bt, Dm), acc, x.device)
    h_new = alloc((Bt, Dm, N), acc, x.device)
    if Bt * Dm == 0:
        return y, h_new
    _step_kernel[(Bt, triton.cdiv(Dm, block_d))](
        x.contiguous(), dt.contiguous(), A.contiguous(), B.contiguous(), C.contiguous(),
        D.contiguous() if D is not None else y, h.contiguous(), y, h_new, Dm, N, HAS_D=D is not None,
        BLOCK_D=block_d, BLOCK_N=pow2(N, 1), ACC_DTYPE=acc_dtype(acc), num_warps=num_warps)
    return y, h_new
