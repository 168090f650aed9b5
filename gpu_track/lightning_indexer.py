"""DeepSeek-V3.2's lightning indexer: I[t, s] = Σ_j w[t, j] · ReLU(q[t, j] · k[s]), causal, then top-k.

One program scores BLOCK_T queries against BLOCK_S keys. All Hi indexer heads of the BLOCK_T queries are stacked
into one (BLOCK_T·Hi, di) operand so a single tensor-core dot gives every head's q·k; ReLU, the per-head weight and
the sum over heads then run on that tile in registers. Each key is shared by all heads (one di-vector per token),
so at decode the pass reads about S · di · bytes of keys and writes S float32 scores: memory-bound.
"""
from __future__ import annotations

import triton
import triton.language as tl

from gpu_track.common import (FLOAT_DTYPES, acc_dtype, acc_torch_dtype, alloc, check, check_int, check_tensor,
                              check_tile, dot_precision, pow2, query_positions, topk_stable)


@triton.jit
def _indexer_kernel(q_ptr, w_ptr, k_ptr, q_pos_ptr, out_ptr, T, S,
                    HI: tl.constexpr, DI: tl.constexpr,
                    BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr,
                    ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr):
    b = tl.program_id(0)
    t0 = tl.program_id(1) * BLOCK_T
    s0 = tl.program_id(2) * BLOCK_S
    rows = tl.arange(0, BLOCK_T * BLOCK_H)          # row r = (query t0 + r // BLOCK_H, head r % BLOCK_H)
    tq = t0 + rows // BLOCK_H
    hj = rows % BLOCK_H
    mask_r = (tq < T) & (hj < HI)
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < DI
    qrow = ((b * T + tq) * HI + hj).to(tl.int64)
    q = tl.load(q_ptr + qrow[:, None] * DI + offs_d[None, :], mask=mask_r[:, None] & mask_d[None, :], other=0.0)
    w = tl.load(w_ptr + qrow, mask=mask_r, other=0.0).to(ACC_DTYPE)        # padded heads weigh 0
    offs_s = s0 + tl.arange(0, BLOCK_S)
    mask_s = offs_s < S
    krow = (b * S + offs_s).to(tl.int64)
    k = tl.load(k_ptr + krow[:, None] * DI + offs_d[None, :], mask=mask_s[:, None] & mask_d[None, :], other=0.0)
    logits = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE)   # (BLOCK_T*BLOCK_H, BLOCK_S)
    contrib = tl.maximum(logits, 0.0) * w[:, None]
    score = tl.sum(tl.reshape(contrib, (BLOCK_T, BLOCK_H, BLOCK_S)), 1)                   # (BLOCK_T, BLOCK_S)
    offs_t = t0 + tl.arange(0, BLOCK_T)
    mask_t = offs_t < T
    qpos = tl.load(q_pos_ptr + offs_t, mask=mask_t, other=-1)
    visible = offs_s[None, :] <= qpos[:, None]
    score = tl.where(visible, score, float("-inf"))
    optr = out_ptr + (b * T + offs_t).to(tl.int64)[:, None] * S + offs_s[None, :]
    tl.store(optr, score.to(out_ptr.dtype.element_ty), mask=mask_t[:, None] & mask_s[None, :])


def check_indexer_args(q, w, k, block_s, block_t):
    """The torch wrapper's contract (shapes, dtypes, devices); ValueError naming the argument."""
    check_tensor("q", q, (None,) * 4, doc="(B, T, Hi, di)")
    B, T, Hi, di = q.shape
    check_tensor("w", w, (B, T, Hi), FLOAT_DTYPES, like=q, doc=f"(B={B}, T={T}, Hi={Hi})")
    check_tensor("k", k, (B, None, di), (q.dtype,), like=q, doc=f"(B={B}, S, di={di}) in q's dtype")
    check_tile("block_s", block_s)
    if block_t is not None:
        check_tile("block_t", block_t, lo=1)
        check(block_t * pow2(Hi, 1) >= 16, f"block_t * pow2(Hi={Hi}) must be >= 16 (tl.dot needs 16 rows), "
                                           f"got block_t={block_t}")


def indexer_scores(q, w, k, q_pos=None, block_s: int = 64, block_t: int | None = None, num_warps: int = 4,
                   num_stages: int = 2):
    """Scores only (the pass the benchmark times). q: (B, T, Hi, di); w: (B, T, Hi); k: (B, S, di);
    q_pos: (T,) int >= 0 (q_pos >= S - 1 sees every key), default S - T + arange(T).
    Returns (B, T, S) float32 (float64 for float64 q), -inf where s > q_pos[t]."""
    check_indexer_args(q, w, k, block_s, block_t)
    B, T, Hi, di = q.shape
    S = k.shape[1]
    q_pos = query_positions(q_pos, T, S, like=q, hi=None)
    out = alloc((B, T, S), acc_torch_dtype(q.dtype), q.device)
    if B * T * S == 0:
        return out
    BLOCK_H = pow2(Hi, 1)
    if block_t is None:   # keep BLOCK_T * BLOCK_H a power of two >= 16 (tl.dot needs M >= 16)
        block_t = max(1, min(pow2(T, 1), 128 // BLOCK_H)) if T > 1 else max(1, 16 // BLOCK_H)
    grid = (B, triton.cdiv(T, block_t), triton.cdiv(S, block_s))
    _indexer_kernel[grid](q.contiguous(), w.contiguous(), k.contiguous(), q_pos, out, T, S,
                          HI=Hi, DI=di, BLOCK_T=block_t, BLOCK_H=BLOCK_H, BLOCK_D=pow2(di), BLOCK_S=block_s,
                          ACC_DTYPE=acc_dtype(q.dtype), DOT_PRECISION=dot_precision(q.dtype), num_warps=num_warps,
                          num_stages=num_stages)
    return out


def lightning_indexer(q, w, k, topk, q_pos=None):
    """Scores and deterministic top-k: returns (scores (B, T, S), idx (B, T, topk) int64, -1 padded)."""
    check_int("topk", topk)
    scores = indexer_scores(q, w, k, q_pos)
    return scores, topk_stable(scores, topk)
