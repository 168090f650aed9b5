"""Mamba-2 SSD chunked scan: scalar decay per head, so the intra-chunk step is a masked matmul on tensor cores.

One program owns (sequence b, head h, BLOCK_P of the head's P channels) and carries the (BLOCK_P, N) state across
chunks of Q steps. Per chunk, with c = cumsum(Δ·A_h) inside the chunk:

    y      = ((C Bᵀ) ⊙ L) (Δ x)  +  exp(c) ⊙ (C hᵀ)        L[t, s] = exp(c_t - c_s) for s ≤ t, else 0
    h_next = exp(c_Q) h  +  (Δ x ⊙ exp(c_Q - c))ᵀ B

Three tl.dot's per chunk (Q×N·N×Q, Q×Q·Q×P, P×Q·Q×N and one Q×N·N×P): tensor-core work, the exp and the
causal mask are the "intra-chunk decay step". Exponents are clamped to ≤ 0 so masked entries cannot overflow.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpu_track._common import alloc, check, pow2


@triton.jit
def _ssd_kernel(X, DT, A, BM, CM, DD, H0, Y, HL, L, H, P, N,
                HAS_D: tl.constexpr, HAS_H0: tl.constexpr, Q: tl.constexpr,
                BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr, PREC: tl.constexpr):
    b = tl.program_id(0)
    hh = tl.program_id(1)
    offs_p = tl.program_id(2) * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_n = tl.arange(0, BLOCK_N)
    mp, mn = offs_p < P, offs_n < N
    a_h = tl.load(A + hh).to(ACC)
    hrow = ((b * H + hh) * P + offs_p).to(tl.int64)[:, None] * N + offs_n[None, :]
    if HAS_H0:
        h = tl.load(H0 + hrow, mask=mp[:, None] & mn[None, :], other=0.0).to(ACC)
    else:
        h = tl.zeros([BLOCK_P, BLOCK_N], ACC)
    if HAS_D:
        d_h = tl.load(DD + hh).to(ACC)
    ar = tl.arange(0, Q)
    causal = ar[:, None] >= ar[None, :]
    for t0 in range(0, L, Q):
        offs_t = t0 + ar
        mt = offs_t < L
        row = (b * L + offs_t).to(tl.int64)
        dt = tl.load(DT + row * H + hh, mask=mt, other=0.0).to(ACC)                  # 0 past L: no decay, no input
        c = tl.cumsum(dt * a_h, 0)                                                   # (Q,) log-decay from chunk start
        c_last = tl.sum(tl.where(ar == Q - 1, c, 0.0), 0)
        xm = (row * H + hh)[:, None] * P + offs_p[None, :]
        x = tl.load(X + xm, mask=mt[:, None] & mp[None, :], other=0.0)               # (Q, BP)
        bm = tl.load(BM + row[:, None] * N + offs_n[None, :], mask=mt[:, None] & mn[None, :], other=0.0)
        cm = tl.load(CM + row[:, None] * N + offs_n[None, :], mask=mt[:, None] & mn[None, :], other=0.0)
        u = x.to(ACC) * dt[:, None]                                                  # Δ x
        cb = tl.dot(cm, tl.trans(bm), input_precision=PREC, out_dtype=ACC)           # (Q, Q) = C Bᵀ
        decay = tl.where(causal, tl.exp(tl.minimum(c[:, None] - c[None, :], 0.0)), 0.0)
        y = tl.dot((cb * decay).to(x.dtype), u.to(x.dtype), input_precision=PREC, out_dtype=ACC)
        y += tl.exp(c)[:, None] * tl.dot(cm.to(ACC), tl.trans(h), input_precision=PREC, out_dtype=ACC)
        if HAS_D:
            y += d_h * x.to(ACC)
        tl.store(Y + xm, y.to(Y.dtype.element_ty), mask=mt[:, None] & mp[None, :])
        w = u * tl.exp(tl.minimum(c_last - c, 0.0))[:, None]                         # (Q, BP)
        h = tl.exp(c_last) * h + tl.dot(tl.trans(w.to(x.dtype)), bm, input_precision=PREC, out_dtype=ACC)
    tl.store(HL + hrow, h.to(HL.dtype.element_ty), mask=mp[:, None] & mn[None, :])


@triton.jit
def _ssd_states_kernel(X, DT, A, BM, H0, HS, HL, L, H, P, N, NCH,
                       HAS_H0: tl.constexpr, Q: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr,
                       ACC: tl.constexpr, PREC: tl.constexpr):
    """Two-pass form, pass 1: the only sequential part. Program (b·H + h, P block, N block) walks the chunks and
    writes the state at the START of every chunk to HS (Bt·H, NCH, P, N); per chunk it does one Q-deep dot."""
    bh = tl.program_id(0)
    b = bh // H
    hh = bh % H
    offs_p = tl.program_id(1) * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_n = tl.program_id(2) * BLOCK_N + tl.arange(0, BLOCK_N)
    mp, mn = offs_p < P, offs_n < N
    mpn = mp[:, None] & mn[None, :]
    a_h = tl.load(A + hh).to(ACC)
    hrow = (bh * P + offs_p).to(tl.int64)[:, None] * N + offs_n[None, :]
    if HAS_H0:
        h = tl.load(H0 + hrow, mask=mpn, other=0.0).to(ACC)
    else:
        h = tl.zeros([BLOCK_P, BLOCK_N], ACC)
    ar = tl.arange(0, Q)
    for j in range(0, NCH):
        srow = ((bh * NCH + j) * P + offs_p).to(tl.int64)[:, None] * N + offs_n[None, :]
        tl.store(HS + srow, h.to(HS.dtype.element_ty), mask=mpn)
        offs_t = j * Q + ar
        mt = offs_t < L
        row = (b * L + offs_t).to(tl.int64)
        dt = tl.load(DT + row * H + hh, mask=mt, other=0.0).to(ACC)
        c = tl.cumsum(dt * a_h, 0)
        c_last = tl.sum(tl.where(ar == Q - 1, c, 0.0), 0)
        x = tl.load(X + (row * H + hh)[:, None] * P + offs_p[None, :], mask=mt[:, None] & mp[None, :], other=0.0)
        bm = tl.load(BM + row[:, None] * N + offs_n[None, :], mask=mt[:, None] & mn[None, :], other=0.0)
        w = x.to(ACC) * (dt * tl.exp(tl.minimum(c_last - c, 0.0)))[:, None]
        h = tl.exp(c_last) * h + tl.dot(tl.trans(w.to(x.dtype)), bm, input_precision=PREC, out_dtype=ACC)
    tl.store(HL + hrow, h.to(HL.dtype.element_ty), mask=mpn)


@triton.jit
def _ssd_out_kernel(X, DT, A, BM, CM, DD, HS, Y, L, H, P, N, NCH,
                    HAS_D: tl.constexpr, Q: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr,
                    ACC: tl.constexpr, PREC: tl.constexpr):
    """Two-pass form, pass 2: every (sequence·head, chunk, P block) in parallel, from the chunk's start state."""
    bh = tl.program_id(0)
    j = tl.program_id(1)
    b = bh // H
    hh = bh % H
    offs_p = tl.program_id(2) * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_n = tl.arange(0, BLOCK_N)
    mp, mn = offs_p < P, offs_n < N
    a_h = tl.load(A + hh).to(ACC)
    ar = tl.arange(0, Q)
    offs_t = j * Q + ar
    mt = offs_t < L
    row = (b * L + offs_t).to(tl.int64)
    dt = tl.load(DT + row * H + hh, mask=mt, other=0.0).to(ACC)
    c = tl.cumsum(dt * a_h, 0)
    xm = (row * H + hh)[:, None] * P + offs_p[None, :]
    x = tl.load(X + xm, mask=mt[:, None] & mp[None, :], other=0.0)
    bm = tl.load(BM + row[:, None] * N + offs_n[None, :], mask=mt[:, None] & mn[None, :], other=0.0)
    cm = tl.load(CM + row[:, None] * N + offs_n[None, :], mask=mt[:, None] & mn[None, :], other=0.0)
    srow = ((bh * NCH + j) * P + offs_p).to(tl.int64)[:, None] * N + offs_n[None, :]
    h = tl.load(HS + srow, mask=mp[:, None] & mn[None, :], other=0.0).to(ACC)
    u = x.to(ACC) * dt[:, None]
    cb = tl.dot(cm, tl.trans(bm), input_precision=PREC, out_dtype=ACC)
    decay = tl.where(ar[:, None] >= ar[None, :], tl.exp(tl.minimum(c[:, None] - c[None, :], 0.0)), 0.0)
    y = tl.dot((cb * decay).to(x.dtype), u.to(x.dtype), input_precision=PREC, out_dtype=ACC)
    y += tl.exp(c)[:, None] * tl.dot(cm.to(ACC), tl.trans(h), input_precision=PREC, out_dtype=ACC)
    if HAS_D:
        y += tl.load(DD + hh).to(ACC) * x.to(ACC)
    tl.store(Y + xm, y.to(Y.dtype.element_ty), mask=mt[:, None] & mp[None, :])


def ssd_chunked(x, dt, A, B, C, D=None, h0=None, chunk: int = 64, block_p: int = 64, num_warps: int = 4,
                out_dtype=None, num_stages: int = 2, two_pass: bool = False, block_n_states: int = 64,
                states_dtype=None):
    """x: (Bt, L, H, P); dt: (Bt, L, H); A: (H,); B, C: (Bt, L, N); D: (H,); h0: (Bt, H, P, N).

    Returns (y: (Bt, L, H, P), h_last: (Bt, H, P, N) float32/float64). y is float32 (float64 for float64 input)
    unless ``out_dtype`` is given (the benchmark writes bf16 like its peers).

    ``two_pass``: pass 1 walks the chunks sequentially doing only the state update and stores every chunk's start
    state (Bt·H·n_chunks·P·N floats); pass 2 computes all chunks' outputs in parallel. More bytes, far more
    parallelism: the better choice when Bt·H is small against the GPU's SM count. ``states_dtype`` stores those
    chunk states in another dtype (bf16 halves their bytes, as fla does; default: the accumulator's dtype).
    """
    check(x.ndim == 4, f"x must be (Bt, L, H, P), got {x.shape}")
    Bt, L, H, P = x.shape
    N = B.shape[2]
    check(dt.shape == (Bt, L, H) and A.shape == (H,) and B.shape == (Bt, L, N) and C.shape == B.shape,
          f"dt (Bt, L, H), A (H,), B, C (Bt, L, N); got {dt.shape} {A.shape} {B.shape} {C.shape}")
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    y = alloc((Bt, L, H, P), out_dtype or acc, x.device)
    hl = alloc((Bt, H, P, N), acc, x.device)
    if Bt * H * P == 0:
        return y, hl
    B, C = B.to(x.dtype), C.to(x.dtype)          # the dots take one operand type
    block_p = min(block_p, pow2(P))
    Q = max(16, pow2(chunk))
    ACC = tl.float64 if acc == torch.float64 else tl.float32
    PREC = "ieee" if x.dtype in (torch.float32, torch.float64) else "tf32"
    if two_pass:
        x, dt, A, B, C = x.contiguous(), dt.contiguous(), A.contiguous(), B.contiguous(), C.contiguous()
        nch = triton.cdiv(L, Q)
        hs = alloc((Bt * H, nch, P, N), states_dtype or acc, x.device)
        bn = min(block_n_states, pow2(N))
        _ssd_states_kernel[(Bt * H, triton.cdiv(P, block_p), triton.cdiv(N, bn))](
            x, dt, A, B, h0.contiguous() if h0 is not None else hl, hs, hl, L, H, P, N, nch,
            HAS_H0=h0 is not None, Q=Q, BLOCK_P=block_p, BLOCK_N=bn, ACC=ACC, PREC=PREC, num_warps=num_warps,
            num_stages=num_stages)
        _ssd_out_kernel[(Bt * H, nch, triton.cdiv(P, block_p))](
            x, dt, A, B, C, D.contiguous() if D is not None else hl, hs, y, L, H, P, N, nch,
            HAS_D=D is not None, Q=Q, BLOCK_P=block_p, BLOCK_N=pow2(N), ACC=ACC, PREC=PREC, num_warps=num_warps,
            num_stages=num_stages)
        return y, hl
    grid = (Bt, H, triton.cdiv(P, block_p))
    _ssd_kernel[grid](x.contiguous(), dt.contiguous(), A.contiguous(), B.contiguous(), C.contiguous(),
                      D.contiguous() if D is not None else hl, h0.contiguous() if h0 is not None else hl,
                      y, hl, L, H, P, N, HAS_D=D is not None, HAS_H0=h0 is not None, Q=max(16, pow2(chunk)),
                      BLOCK_P=block_p, BLOCK_N=pow2(N), ACC=tl.float64 if acc == torch.float64 else tl.float32,
                      PREC="ieee" if x.dtype in (torch.float32, torch.float64) else "tf32", num_warps=num_warps,
                      num_stages=num_stages)
    return y, hl
