"""Mamba-2 SSD chunked scan: scalar decay per head, so the intra-chunk step is a masked matmul on tensor cores.

One program owns (sequence b, head h, BLOCK_P of the head's P channels) and carries the (BLOCK_P, N) state across
chunks of Q steps. Per chunk, with c = cumsum(Δ·A_h) inside the chunk:

    y      = ((C Bᵀ) ⊙ L) (Δ x)  +  exp(c) ⊙ (C hᵀ)        L[t, s] = exp(c_t - c_s) for s ≤ t, else 0
    h_next = exp(c_Q) h  +  (Δ x ⊙ exp(c_Q - c))ᵀ B

Three tl.dot's per chunk (Q×N·N×Q, Q×Q·Q×P, P×Q·Q×N and one Q×N·N×P): tensor-core work, the exp and the
causal mask are the "intra-chunk decay step". Exponents are clamped to ≤ 0 so masked entries cannot overflow.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from gpu_track.common import (acc_dtype, acc_torch_dtype, alloc, check_int, check_tensor, check_tile, dot_precision,
                              pow2)


@triton.jit
def _ssd_kernel(x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, h0_ptr, y_ptr, h_last_ptr, L, H, P, N,
                HAS_D: tl.constexpr, HAS_H0: tl.constexpr, Q: tl.constexpr,
                BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, ACC_DTYPE: tl.constexpr,
                DOT_PRECISION: tl.constexpr):
    b = tl.program_id(0)
    head = tl.program_id(1)
    offs_p = tl.program_id(2) * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_n = tl.arange(0, BLOCK_N)
    mask_p, mask_n = offs_p < P, offs_n < N
    a_h = tl.load(A_ptr + head).to(ACC_DTYPE)
    hrow = ((b * H + head) * P + offs_p).to(tl.int64)[:, None] * N + offs_n[None, :]
    if HAS_H0:
        h = tl.load(h0_ptr + hrow, mask=mask_p[:, None] & mask_n[None, :], other=0.0).to(ACC_DTYPE)
    else:
        h = tl.zeros([BLOCK_P, BLOCK_N], ACC_DTYPE)
    if HAS_D:
        d_h = tl.load(D_ptr + head).to(ACC_DTYPE)
    ar = tl.arange(0, Q)
    causal = ar[:, None] >= ar[None, :]
    for t0 in range(0, L, Q):
        offs_t = t0 + ar
        mask_t = offs_t < L
        row = (b * L + offs_t).to(tl.int64)
        mask_tn = mask_t[:, None] & mask_n[None, :]
        dt = tl.load(dt_ptr + row * H + head, mask=mask_t, other=0.0).to(ACC_DTYPE)   # 0 past L: no decay, no input
        c = tl.cumsum(dt * a_h, 0)                                                   # (Q,) log-decay from chunk start
        c_last = tl.sum(tl.where(ar == Q - 1, c, 0.0), 0)
        xm = (row * H + head)[:, None] * P + offs_p[None, :]
        x = tl.load(x_ptr + xm, mask=mask_t[:, None] & mask_p[None, :], other=0.0)   # (Q, BP)
        B_tile = tl.load(B_ptr + row[:, None] * N + offs_n[None, :], mask=mask_tn, other=0.0)
        C_tile = tl.load(C_ptr + row[:, None] * N + offs_n[None, :], mask=mask_tn, other=0.0)
        u = x.to(ACC_DTYPE) * dt[:, None]                                            # Δ x
        cb = tl.dot(C_tile, tl.trans(B_tile), input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE)   # (Q, Q) = C Bᵀ
        decay = tl.where(causal, tl.exp(tl.minimum(c[:, None] - c[None, :], 0.0)), 0.0)
        y = tl.dot((cb * decay).to(x.dtype), u.to(x.dtype), input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE)
        y += tl.exp(c)[:, None] * tl.dot(C_tile.to(ACC_DTYPE), tl.trans(h), input_precision=DOT_PRECISION,
                                         out_dtype=ACC_DTYPE)
        if HAS_D:
            y += d_h * x.to(ACC_DTYPE)
        tl.store(y_ptr + xm, y.to(y_ptr.dtype.element_ty), mask=mask_t[:, None] & mask_p[None, :])
        w = u * tl.exp(tl.minimum(c_last - c, 0.0))[:, None]                         # (Q, BP)
        h = tl.exp(c_last) * h + tl.dot(tl.trans(w.to(x.dtype)), B_tile, input_precision=DOT_PRECISION,
                                        out_dtype=ACC_DTYPE)
    tl.store(h_last_ptr + hrow, h.to(h_last_ptr.dtype.element_ty), mask=mask_p[:, None] & mask_n[None, :])


@triton.jit
def _ssd_states_kernel(x_ptr, dt_ptr, A_ptr, B_ptr, h0_ptr, h_chunks_ptr, h_last_ptr, L, H, P, N, n_chunks,
                       HAS_H0: tl.constexpr, Q: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr,
                       ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """Two-pass form, pass 1: the only sequential part. Program (b·H + h, P block, N block) walks the chunks and
    writes the state at the START of every chunk to h_chunks (Bt·H, n_chunks, P, N); one Q-deep dot per chunk."""
    bh = tl.program_id(0)
    b = bh // H
    head = bh % H
    offs_p = tl.program_id(1) * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_n = tl.program_id(2) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_p, mask_n = offs_p < P, offs_n < N
    mask_pn = mask_p[:, None] & mask_n[None, :]
    a_h = tl.load(A_ptr + head).to(ACC_DTYPE)
    hrow = (bh * P + offs_p).to(tl.int64)[:, None] * N + offs_n[None, :]
    if HAS_H0:
        h = tl.load(h0_ptr + hrow, mask=mask_pn, other=0.0).to(ACC_DTYPE)
    else:
        h = tl.zeros([BLOCK_P, BLOCK_N], ACC_DTYPE)
    ar = tl.arange(0, Q)
    for j in range(0, n_chunks):
        srow = ((bh * n_chunks + j) * P + offs_p).to(tl.int64)[:, None] * N + offs_n[None, :]
        tl.store(h_chunks_ptr + srow, h.to(h_chunks_ptr.dtype.element_ty), mask=mask_pn)
        offs_t = j * Q + ar
        mask_t = offs_t < L
        row = (b * L + offs_t).to(tl.int64)
        dt = tl.load(dt_ptr + row * H + head, mask=mask_t, other=0.0).to(ACC_DTYPE)
        c = tl.cumsum(dt * a_h, 0)
        c_last = tl.sum(tl.where(ar == Q - 1, c, 0.0), 0)
        x = tl.load(x_ptr + (row * H + head)[:, None] * P + offs_p[None, :], mask=mask_t[:, None] & mask_p[None, :],
                    other=0.0)
        B_tile = tl.load(B_ptr + row[:, None] * N + offs_n[None, :], mask=mask_t[:, None] & mask_n[None, :], other=0.0)
        w = x.to(ACC_DTYPE) * (dt * tl.exp(tl.minimum(c_last - c, 0.0)))[:, None]
        h = tl.exp(c_last) * h + tl.dot(tl.trans(w.to(x.dtype)), B_tile, input_precision=DOT_PRECISION,
                                        out_dtype=ACC_DTYPE)
    tl.store(h_last_ptr + hrow, h.to(h_last_ptr.dtype.element_ty), mask=mask_pn)


@triton.jit
def _ssd_out_kernel(x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, h_chunks_ptr, y_ptr, L, H, P, N, n_chunks,
                    HAS_D: tl.constexpr, Q: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr,
                    BLOCK_NS: tl.constexpr, ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """Two-pass form, pass 2: every (sequence·head, chunk, P block) in parallel, from the chunk's start state."""
    bh = tl.program_id(0)
    j = tl.program_id(1)
    b = bh // H
    head = bh % H
    offs_p = tl.program_id(2) * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_n = tl.arange(0, BLOCK_N)
    mask_p, mask_n = offs_p < P, offs_n < N
    a_h = tl.load(A_ptr + head).to(ACC_DTYPE)
    ar = tl.arange(0, Q)
    offs_t = j * Q + ar
    mask_t = offs_t < L
    row = (b * L + offs_t).to(tl.int64)
    mask_tn = mask_t[:, None] & mask_n[None, :]
    dt = tl.load(dt_ptr + row * H + head, mask=mask_t, other=0.0).to(ACC_DTYPE)
    c = tl.cumsum(dt * a_h, 0)
    xm = (row * H + head)[:, None] * P + offs_p[None, :]
    x = tl.load(x_ptr + xm, mask=mask_t[:, None] & mask_p[None, :], other=0.0)
    B_tile = tl.load(B_ptr + row[:, None] * N + offs_n[None, :], mask=mask_tn, other=0.0)
    C_tile = tl.load(C_ptr + row[:, None] * N + offs_n[None, :], mask=mask_tn, other=0.0)
    u = x.to(ACC_DTYPE) * dt[:, None]
    cb = tl.dot(C_tile, tl.trans(B_tile), input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE)
    decay = tl.where(ar[:, None] >= ar[None, :], tl.exp(tl.minimum(c[:, None] - c[None, :], 0.0)), 0.0)
    y = tl.dot((cb * decay).to(x.dtype), u.to(x.dtype), input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE)
    # what earlier chunks left in the state: C (Q, N) @ h_startᵀ (N, BLOCK_P), over N in BLOCK_NS slices, each slice
    # of the state loaded already transposed and kept in its stored dtype. One full-N dot against tl.trans(h) in fp32
    # made Triton 3.6 read past its shared-memory buffer (compute-sanitizer: "Invalid __shared__ read"; a fault at
    # large Bt·H with bf16 states, wrong outputs elsewhere; issue 17)
    base = ((bh * n_chunks + j) * P + offs_p).to(tl.int64)[None, :] * N
    y_inter = tl.zeros([Q, BLOCK_P], ACC_DTYPE)
    for n0 in tl.static_range(0, BLOCK_N, BLOCK_NS):
        offs_ns = n0 + tl.arange(0, BLOCK_NS)
        m_ns = offs_ns < N
        c_sub = tl.load(C_ptr + row[:, None] * N + offs_ns[None, :], mask=mask_t[:, None] & m_ns[None, :], other=0.0)
        h_sub = tl.load(h_chunks_ptr + base + offs_ns[:, None], mask=m_ns[:, None] & mask_p[None, :], other=0.0)
        y_inter += tl.dot(c_sub.to(h_sub.dtype), h_sub, input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE)
    y += tl.exp(c)[:, None] * y_inter
    if HAS_D:
        y += tl.load(D_ptr + head).to(ACC_DTYPE) * x.to(ACC_DTYPE)
    tl.store(y_ptr + xm, y.to(y_ptr.dtype.element_ty), mask=mask_t[:, None] & mask_p[None, :])


def check_ssd_args(x, dt, A, B, C, D, h0, chunk, block_p, two_pass, block_n_states):
    """The torch wrapper's contract (shapes, dtypes, devices); ValueError naming the argument."""
    check_tensor("x", x, (None,) * 4, doc="(Bt, L, H, P)")
    Bt, L, H, P = x.shape
    check_tensor("dt", dt, (Bt, L, H), like=x, doc=f"(Bt={Bt}, L={L}, H={H})")
    check_tensor("A", A, (H,), like=x, doc=f"(H={H},)")
    check_tensor("B", B, (Bt, L, None), like=x, doc=f"(Bt={Bt}, L={L}, N)")
    N = B.shape[2]
    check_tensor("C", C, (Bt, L, N), like=x, doc=f"(Bt={Bt}, L={L}, N={N})")
    if D is not None:
        check_tensor("D", D, (H,), like=x, doc=f"(H={H},)")
    if h0 is not None:
        check_tensor("h0", h0, (Bt, H, P, N), like=x, doc=f"(Bt={Bt}, H={H}, P={P}, N={N})")
    check_int("chunk", chunk)
    check_tile("block_p", block_p)
    if two_pass:
        check_tile("block_n_states", block_n_states)
        if x.dtype in (torch.bfloat16, torch.float16) and N > 32 and not os.environ.get("TRITON_INTERPRET"):
            # measured on an H200 with Triton 3.6 (issue 17): relative error ~1 against the single pass for every
            # bf16 input with N in {64, 128} (exact for N <= 32 and for fp32 inputs), and out-of-bounds shared-memory
            # reads under compute-sanitizer at (Bt, L) = (4, 8192), (16, 2048) with H = 80. Refused until fixed.
            raise ValueError(f"two_pass: not available for {x.dtype} inputs with N={N} > 32 on a GPU (wrong results "
                             f"and out-of-bounds reads with Triton 3.6, issue 17); use two_pass=False or float32 inputs")


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
    Natively, ``two_pass`` is refused (ValueError) for bf16/fp16 inputs with N > 32: on Triton 3.6 it gave wrong
    results there (issue 17); the interpreter and float32 inputs are not affected.
    """
    check_ssd_args(x, dt, A, B, C, D, h0, chunk, block_p, two_pass, block_n_states)
    Bt, L, H, P = x.shape
    N = B.shape[2]
    acc = acc_torch_dtype(x.dtype)
    y = alloc((Bt, L, H, P), out_dtype or acc, x.device)
    h_last = alloc((Bt, H, P, N), acc, x.device)
    if Bt * H * P == 0:
        return y, h_last
    B, C = B.to(x.dtype), C.to(x.dtype)          # the dots take one operand type
    block_p = min(block_p, pow2(P))
    Q = max(16, pow2(chunk))
    meta = dict(Q=Q, ACC_DTYPE=acc_dtype(x.dtype), DOT_PRECISION=dot_precision(x.dtype), num_warps=num_warps,
                num_stages=num_stages)
    if two_pass:
        x, dt, A, B, C = x.contiguous(), dt.contiguous(), A.contiguous(), B.contiguous(), C.contiguous()
        n_chunks = triton.cdiv(L, Q)
        h_chunks = alloc((Bt * H, n_chunks, P, N), states_dtype or acc, x.device)
        bn = min(block_n_states, pow2(N))
        _ssd_states_kernel[(Bt * H, triton.cdiv(P, block_p), triton.cdiv(N, bn))](
            x, dt, A, B, h0.contiguous() if h0 is not None else h_last, h_chunks, h_last, L, H, P, N, n_chunks,
            HAS_H0=h0 is not None, BLOCK_P=block_p, BLOCK_N=bn, **meta)
        _ssd_out_kernel[(Bt * H, n_chunks, triton.cdiv(P, block_p))](
            x, dt, A, B, C, D.contiguous() if D is not None else h_last, h_chunks, y, L, H, P, N, n_chunks,
            HAS_D=D is not None, BLOCK_P=block_p, BLOCK_N=pow2(N), BLOCK_NS=min(32, pow2(N)), **meta)
        return y, h_last
    grid = (Bt, H, triton.cdiv(P, block_p))
    _ssd_kernel[grid](x.contiguous(), dt.contiguous(), A.contiguous(), B.contiguous(), C.contiguous(),
                      D.contiguous() if D is not None else h_last, h0.contiguous() if h0 is not None else h_last,
                      y, h_last, L, H, P, N, HAS_D=D is not None, HAS_H0=h0 is not None, BLOCK_P=block_p,
                      BLOCK_N=pow2(N), **meta)
    return y, h_last
