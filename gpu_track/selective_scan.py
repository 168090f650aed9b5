"""Mamba-1 selective scan (diagonal A per channel) and its one-token decode step.

Prefill: one program owns BLOCK_D channels of one sequence and their (BLOCK_D, N) state, kept in registers for
the whole sequence. It walks the sequence CHUNK steps at a time: it loads a (CHUNK, BLOCK_D) tile of x and Δ
and a (CHUNK, N) tile of B and C (coalesced, so loads stay in flight), forms every step's decay
a_t = exp(Δ_t A) and input u_t = Δ_t x_t B_t, and solves h_t = a_t h_{t-1} + u_t inside the chunk with a
parallel prefix scan over the pairs (a, u) (``tl.associative_scan``; (a1, u1) then (a2, u2) composes to
(a1 a2, a2 u1 + u2)). Only h crosses a chunk boundary. Bytes: x and Δ read, y written, B/C read once per
channel block: the kernel is memory-bound, ~ (2 + 1) · Bt · L · Dm · bytes.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpu_track._common import alloc, check, pow2


@triton.jit
def _combine(a1, u1, a2, u2):
    return a1 * a2, a2 * u1 + u2


@triton.jit
def _scan_kernel(X, DT, A, BM, CM, DD, H0, Y, HL, L, DM, N,
                 HAS_D: tl.constexpr, HAS_H0: tl.constexpr, CHUNK: tl.constexpr,
                 BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    b = tl.program_id(0)
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    md, mn = offs_d < DM, offs_n < N
    mdn = md[:, None] & mn[None, :]
    a_log = tl.load(A + offs_d[:, None] * N + offs_n[None, :], mask=mdn, other=0.0).to(ACC)     # (BD, BN)
    hrow = (b * DM + offs_d).to(tl.int64)[:, None] * N + offs_n[None, :]
    if HAS_H0:
        h = tl.load(H0 + hrow, mask=mdn, other=0.0).to(ACC)
    else:
        h = tl.zeros([BLOCK_D, BLOCK_N], ACC)
    if HAS_D:
        dskip = tl.load(DD + offs_d, mask=md, other=0.0).to(ACC)
    last = tl.arange(0, CHUNK) == CHUNK - 1
    for t0 in range(0, L, CHUNK):
        offs_t = t0 + tl.arange(0, CHUNK)
        mt = offs_t < L
        row = (b * L + offs_t).to(tl.int64)
        mtd = mt[:, None] & md[None, :]
        x = tl.load(X + row[:, None] * DM + offs_d[None, :], mask=mtd, other=0.0).to(ACC)        # (CH, BD)
        dt = tl.load(DT + row[:, None] * DM + offs_d[None, :], mask=mtd, other=0.0).to(ACC)      # 0 past L: a=1, u=0
        bm = tl.load(BM + row[:, None] * N + offs_n[None, :], mask=mt[:, None] & mn[None, :], other=0.0).to(ACC)
        cm = tl.load(CM + row[:, None] * N + offs_n[None, :], mask=mt[:, None] & mn[None, :], other=0.0).to(ACC)
        a = tl.exp(dt[:, :, None] * a_log[None, :, :])                                          # (CH, BD, BN)
        u = (dt * x)[:, :, None] * bm[:, None, :]
        a_cum, u_cum = tl.associative_scan((a, u), 0, _combine)
        hs = a_cum * h[None, :, :] + u_cum                                                       # every step's state
        y = tl.sum(hs * cm[:, None, :], 2)                                                       # (CH, BD)
        if HAS_D:
            y += dskip[None, :] * x
        tl.store(Y + row[:, None] * DM + offs_d[None, :], y.to(Y.dtype.element_ty), mask=mtd)
        h = tl.sum(tl.where(last[:, None, None], hs, 0.0), 0)                                   # state after the chunk
    tl.store(HL + hrow, h.to(HL.dtype.element_ty), mask=mdn)


@triton.jit
def _scan_seq_kernel(X, DT, A, BM, CM, DD, H0, Y, HL, L, DM, N,
                     HAS_D: tl.constexpr, HAS_H0: tl.constexpr,
                     BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    """The plain recurrence, one step per iteration: no scan overhead (one exp and two FMAs per state element
    and step); the loads of step t+1 do not depend on h, so they can be issued ahead of the arithmetic."""
    b = tl.program_id(0)
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    md, mn = offs_d < DM, offs_n < N
    mdn = md[:, None] & mn[None, :]
    a_log = tl.load(A + offs_d[:, None] * N + offs_n[None, :], mask=mdn, other=0.0).to(ACC)
    hrow = (b * DM + offs_d).to(tl.int64)[:, None] * N + offs_n[None, :]
    if HAS_H0:
        h = tl.load(H0 + hrow, mask=mdn, other=0.0).to(ACC)
    else:
        h = tl.zeros([BLOCK_D, BLOCK_N], ACC)
    if HAS_D:
        dskip = tl.load(DD + offs_d, mask=md, other=0.0).to(ACC)
    for t in range(0, L):
        row = (b * L + t).to(tl.int64)
        x = tl.load(X + row * DM + offs_d, mask=md, other=0.0).to(ACC)
        dt = tl.load(DT + row * DM + offs_d, mask=md, other=0.0).to(ACC)
        bm = tl.load(BM + row * N + offs_n, mask=mn, other=0.0).to(ACC)
        cm = tl.load(CM + row * N + offs_n, mask=mn, other=0.0).to(ACC)
        h = tl.exp(dt[:, None] * a_log) * h + (dt * x)[:, None] * bm[None, :]
        y = tl.sum(h * cm[None, :], 1)
        if HAS_D:
            y += dskip * x
        tl.store(Y + row * DM + offs_d, y.to(Y.dtype.element_ty), mask=md)
    tl.store(HL + hrow, h.to(HL.dtype.element_ty), mask=mdn)


@triton.jit
def _step_kernel(X, DT, A, BM, CM, DD, H, Y, HN, DM, N, HAS_D: tl.constexpr,
                 BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    b = tl.program_id(0)
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    md, mn = offs_d < DM, offs_n < N
    mdn = md[:, None] & mn[None, :]
    hrow = (b * DM + offs_d).to(tl.int64)[:, None] * N + offs_n[None, :]
    h = tl.load(H + hrow, mask=mdn, other=0.0).to(ACC)
    a_log = tl.load(A + offs_d[:, None] * N + offs_n[None, :], mask=mdn, other=0.0).to(ACC)
    x = tl.load(X + b * DM + offs_d, mask=md, other=0.0).to(ACC)
    dt = tl.load(DT + b * DM + offs_d, mask=md, other=0.0).to(ACC)
    bm = tl.load(BM + b * N + offs_n, mask=mn, other=0.0).to(ACC)
    cm = tl.load(CM + b * N + offs_n, mask=mn, other=0.0).to(ACC)
    h = tl.exp(dt[:, None] * a_log) * h + (dt * x)[:, None] * bm[None, :]
    y = tl.sum(h * cm[None, :], 1)
    if HAS_D:
        y += tl.load(DD + offs_d, mask=md, other=0.0).to(ACC) * x
    tl.store(Y + b * DM + offs_d, y.to(Y.dtype.element_ty), mask=md)
    tl.store(HN + hrow, h.to(HN.dtype.element_ty), mask=mdn)


def _acc(*ts):
    return torch.float64 if any(t is not None and t.dtype == torch.float64 for t in ts) else torch.float32


def selective_scan(x, dt, A, B, C, D=None, h0=None, chunk: int = 16, block_d: int = 16, num_warps: int = 4,
                   out_dtype=None, variant: str = "chunked"):
    """x, dt: (Bt, L, Dm); A: (Dm, N); B, C: (Bt, L, N); D: (Dm,); h0: (Bt, Dm, N).

    Returns (y: (Bt, L, Dm), h_last: (Bt, Dm, N)), both float32 (float64 if any input is float64). ``chunk`` is the
    kernel's time tile; the result does not depend on it (up to rounding). ``out_dtype`` overrides y's dtype
    (the benchmark writes bf16). ``variant``: "chunked" (prefix scan inside CHUNK-step tiles) or "sequential"
    (one step per loop iteration).
    """
    check(variant in ("chunked", "sequential"), f"variant must be 'chunked' or 'sequential', got {variant!r}")
    check(x.ndim == 3 and dt.shape == x.shape, f"x, dt must be (Bt, L, Dm); got {x.shape} {dt.shape}")
    Bt, L, Dm = x.shape
    N = A.shape[1]
    check(A.shape == (Dm, N) and B.shape == (Bt, L, N) and C.shape == (Bt, L, N),
          f"A (Dm={Dm}, N), B, C (Bt, L, N); got {A.shape} {B.shape} {C.shape}")
    acc = _acc(x, dt, A, B, C)
    y = alloc((Bt, L, Dm), out_dtype or acc, x.device)
    hl = alloc((Bt, Dm, N), acc, x.device)
    dummy = hl
    grid = (Bt, triton.cdiv(Dm, block_d))
    if Bt * Dm == 0:
        return y, hl
    args = (x.contiguous(), dt.contiguous(), A.contiguous(), B.contiguous(), C.contiguous(),
            D.contiguous() if D is not None else dummy, h0.contiguous() if h0 is not None else dummy, y, hl, L, Dm, N)
    meta = dict(HAS_D=D is not None, HAS_H0=h0 is not None, BLOCK_D=block_d, BLOCK_N=pow2(N, 1),
                ACC=tl.float64 if acc == torch.float64 else tl.float32, num_warps=num_warps)
    if variant == "sequential":
        _scan_seq_kernel[grid](*args, **meta)
    else:
        _scan_kernel[grid](*args, CHUNK=chunk, **meta)
    return y, hl


def selective_scan_step(x, dt, A, B, C, D, h, block_d: int = 32, num_warps: int = 4):
    """One decode step. x, dt: (Bt, Dm); A: (Dm, N); B, C: (Bt, N); D: (Dm,) or None; h: (Bt, Dm, N).

    Returns (y: (Bt, Dm), h_new: (Bt, Dm, N)). Memory-bound on the state: it reads and writes Bt · Dm · N floats.
    """
    check(x.ndim == 2 and dt.shape == x.shape, f"x, dt must be (Bt, Dm); got {x.shape} {dt.shape}")
    Bt, Dm = x.shape
    N = A.shape[1]
    check(h.shape == (Bt, Dm, N) and B.shape == (Bt, N) and C.shape == (Bt, N),
          f"h (Bt, Dm, N), B, C (Bt, N); got {h.shape} {B.shape} {C.shape}")
    acc = _acc(x, dt, A, B, C, h)
    y = alloc((Bt, Dm), acc, x.device)
    hn = alloc((Bt, Dm, N), acc, x.device)
    if Bt * Dm == 0:
        return y, hn
    _step_kernel[(Bt, triton.cdiv(Dm, block_d))](
        x.contiguous(), dt.contiguous(), A.contiguous(), B.contiguous(), C.contiguous(),
        D.contiguous() if D is not None else y, h.contiguous(), y, hn, Dm, N, HAS_D=D is not None,
        BLOCK_D=block_d, BLOCK_N=pow2(N, 1), ACC=tl.float64 if acc == torch.float64 else tl.float32,
        num_warps=num_warps)
    return y, hn
