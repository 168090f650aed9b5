"""DeepSeek-V3.2's lightning indexer: I[t, s] = Σ_j w[t, j] · ReLU(q[t, j] · k[s]), causal, then top-k.

One program scores BLOCK_T queries against BLOCK_S keys. All Hi indexer heads of the BLOCK_T queries are stacked
into one (BLOCK_T·Hi, di) operand so a single tensor-core dot gives every head's q·k; ReLU, the per-head weight and
the sum over heads then run on that tile in registers. Each key is shared by all heads (one di-vector per token),
so at decode the pass reads about S · di · bytes of keys and writes S float32 scores: memory-bound.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpu_track._common import alloc, check, pow2, topk_stable
from gpu_track.sparse_attention import acc_dtype, dot_precision


@triton.jit
def _indexer_kernel(Q, W, K, QPOS, OUT, T, S,
                    HI: tl.constexpr, DI: tl.constexpr,
                    BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr,
                    ACC: tl.constexpr, PREC: tl.constexpr):
    b = tl.program_id(0)
    t0 = tl.program_id(1) * BLOCK_T
    s0 = tl.program_id(2) * BLOCK_S
    rows = tl.arange(0, BLOCK_T * BLOCK_H)          # row r = (query t0 + r // BLOCK_H, head r % BLOCK_H)
    tq = t0 + rows // BLOCK_H
    hj = rows % BLOCK_H
    rmask = (tq < T) & (hj < HI)
    offs_d = tl.arange(0, BLOCK_D)
    md = offs_d < DI
    qrow = ((b * T + tq) * HI + hj).to(tl.int64)
    q = tl.load(Q + qrow[:, None] * DI + offs_d[None, :], mask=rmask[:, None] & md[None, :], other=0.0)
    w = tl.load(W + qrow, mask=rmask, other=0.0).to(ACC)        # padded heads weigh 0
    offs_s = s0 + tl.arange(0, BLOCK_S)
    ms = offs_s < S
    krow = (b * S + offs_s).to(tl.int64)
    k = tl.load(K + krow[:, None] * DI + offs_d[None, :], mask=ms[:, None] & md[None, :], other=0.0)
    logits = tl.dot(q, tl.trans(k), input_precision=PREC, out_dtype=ACC)     # (BLOCK_T*BLOCK_H, BLOCK_S)
    contrib = tl.maximum(logits, 0.0) * w[:, None]
    score = tl.sum(tl.reshape(contrib, (BLOCK_T, BLOCK_H, BLOCK_S)), 1)     # (BLOCK_T, BLOCK_S)
    offs_t = t0 + tl.arange(0, BLOCK_T)
    mt = offs_t < T
    qpos = tl.load(QPOS + offs_t, mask=mt, other=-1)
    visible = offs_s[None, :] <= qpos[:, None]
    score = tl.where(visible, score, float("-inf"))
    optr = OUT + (b * T + offs_t).to(tl.int64)[:, None] * S + offs_s[None, :]
    tl.store(optr, score.to(OUT.dtype.element_ty), mask=mt[:, None] & ms[None, :])


def indexer_scores(q, w, k, q_pos=None, block_s: int = 64, block_t: int | None = None, num_warps: int = 4,
                   num_stages: int = 2):
    """Scores only (the pass the benchmark times). q: (B, T, Hi, di); w: (B, T, Hi); k: (B, S, di);
    q_pos: (T,) int, default S - T + arange(T). Returns (B, T, S) float32 (float64 for float64 q), -inf where s > q_pos[t]."""
    check(q.ndim == 4 and w.ndim == 3 and k.ndim == 3, f"q (B,T,Hi,di), w (B,T,Hi), k (B,S,di); got {q.shape} {w.shape} {k.shape}")
    B, T, Hi, di = q.shape
    S = k.shape[1]
    check(w.shape == (B, T, Hi) and k.shape == (B, S, di), f"w must be {(B, T, Hi)} and k {(B, S, di)}; got {w.shape} {k.shape}")
    if q_pos is None:
        q_pos = torch.arange(S - T, S, device=q.device)
    q_pos = q_pos.to(device=q.device, dtype=torch.int32).contiguous()
    out = alloc((B, T, S), torch.float64 if q.dtype == torch.float64 else torch.float32, q.device)
    if B * T * S == 0:
        return out
    BLOCK_H = pow2(Hi, 1)
    if block_t is None:   # keep BLOCK_T * BLOCK_H a power of two >= 16 (tl.dot needs M >= 16)
        block_t = max(1, min(pow2(T, 1), 128 // BLOCK_H)) if T > 1 else max(1, 16 // BLOCK_H)
    grid = (B, triton.cdiv(T, block_t), triton.cdiv(S, block_s))
    _indexer_kernel[grid](q.contiguous(), w.contiguous(), k.contiguous(), q_pos, out, T, S,
                          HI=Hi, DI=di, BLOCK_T=block_t, BLOCK_H=BLOCK_H, BLOCK_D=pow2(di), BLOCK_S=block_s,
                          ACC=acc_dtype(q.dtype), PREC=dot_precision(q.dtype), num_warps=num_warps,
                          num_stages=num_stages)
    return out


def lightning_indexer(q, w, k, topk, q_pos=None):
    """Scores and deterministic top-k: returns (scores (B, T, S), idx (B, T, topk) int64, -1 padded)."""
    scores = indexer_scores(q, w, k, q_pos)
    return scores, topk_stable(scores, topk)
