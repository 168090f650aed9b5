"""The flash-attention pieces every attention kernel of the track shares: one online-softmax step and the
split-K combine.

Online softmax (FlashAttention): a program walks its keys a block at a time and keeps, per query row, the
running max m, the running denominator l = Σ exp(s - m) and the accumulator acc = Σ exp(s - m) v. A new block of
scores s (ROWS, COLS), -inf where masked, with its values v (COLS, BLOCK_DV) updates them:

    m' = max(m, max_j s_j)      α = exp(m - m')      p = exp(s - m')
    l' = α l + Σ_j p_j          acc' = α acc + p · v

The output is acc / l once every block is seen. Split-K (flash decoding): at decode with a small batch, a
query's keys are cut into slices walked by separate programs; each writes its partial (m, l, acc) and the
combine merges them: m* = max over slices, l = Σ exp(m_i - m*) l_i, acc = Σ exp(m_i - m*) acc_i, with an
optional per-head sink adding exp(sink - m*) to the denominator (a sink absorbs probability, outputs nothing).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpu_track.common import acc_dtype, alloc, pow2


@triton.jit
def online_softmax_step(m_i, l_i, acc, s, v, ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """One block: m_i, l_i (ROWS,), acc (ROWS, BLOCK_DV), scores s (ROWS, COLS) with -inf where masked, values
    v (COLS, BLOCK_DV) (masked rows loaded as 0). Returns the updated (m_i, l_i, acc)."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)   # a row with nothing valid yet: avoid inf - inf
    alpha = tl.exp(m_i - m_use)
    p = tl.exp(s - m_use[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE)
    return m_new, l_i, acc


@triton.jit
def combine_splits_kernel(part_m_ptr, part_l_ptr, part_acc_ptr, sink_ptr, o_ptr, m_out_ptr, l_out_ptr, n_splits,
                          HQ: tl.constexpr, HKV: tl.constexpr, G: tl.constexpr, DV: tl.constexpr,
                          BLOCK_G: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_SP: tl.constexpr,
                          BLOCK_SP_M: tl.constexpr, HAS_SINK: tl.constexpr, ACC_DTYPE: tl.constexpr):
    """Program (row r, KV group g, slice of the value width) merges the n_splits partials of the group's G heads.
    Partials are laid out (R, Hkv, n_splits, G[, DV]); writes o (R, Hq, DV) and the final max / denominator (R, Hq)
    per head (the program of the first value slice writes those). The splits are read as tiles (BLOCK_SP_M of
    them at once for the max, BLOCK_SP for the rescaled sums), not one per loop step: at batch 1 the combine has
    only Hkv · (DV / BLOCK_DV) programs, and a loop of one dependent load per split would make it latency-bound."""
    r = tl.program_id(0)
    g = tl.program_id(1)
    dv0 = tl.program_id(2) * BLOCK_DV
    offs_g = tl.arange(0, BLOCK_G)
    offs_dv = dv0 + tl.arange(0, BLOCK_DV)
    mask_g, mask_dv = offs_g < G, offs_dv < DV
    base = (r * HKV + g) * n_splits
    m = tl.full([BLOCK_G], float("-inf"), ACC_DTYPE)
    for s0 in range(0, n_splits, BLOCK_SP_M):                       # pass 1: the global max per head
        sp = s0 + tl.arange(0, BLOCK_SP_M)
        prow = (base + sp)[:, None] * G + offs_g[None, :]
        msk = (sp < n_splits)[:, None] & mask_g[None, :]
        m = tl.maximum(m, tl.max(tl.load(part_m_ptr + prow, mask=msk, other=float("-inf")), 0))
    if HAS_SINK:
        sink = tl.load(sink_ptr + g * G + offs_g, mask=mask_g, other=0.0).to(ACC_DTYPE)
        m = tl.maximum(m, sink)
    m_use = tl.where(m == float("-inf"), 0.0, m)
    l = tl.zeros([BLOCK_G], ACC_DTYPE)
    acc = tl.zeros([BLOCK_G, BLOCK_DV], ACC_DTYPE)
    for s0 in range(0, n_splits, BLOCK_SP):                         # pass 2: rescale and add
        sp = s0 + tl.arange(0, BLOCK_SP)
        prow = (base + sp)[:, None] * G + offs_g[None, :]           # (BLOCK_SP, BLOCK_G)
        msk = (sp < n_splits)[:, None] & mask_g[None, :]
        scale = tl.exp(tl.load(part_m_ptr + prow, mask=msk, other=float("-inf")) - m_use[None, :])
        l += tl.sum(scale * tl.load(part_l_ptr + prow, mask=msk, other=0.0), 0)
        pa = tl.load(part_acc_ptr + prow[:, :, None] * DV + offs_dv[None, None, :],
                     mask=msk[:, :, None] & mask_dv[None, None, :], other=0.0)
        acc += tl.sum(scale[:, :, None] * pa, 0)
    if HAS_SINK:
        l += tl.exp(sink - m_use)
    heads = g * G + offs_g
    o = acc / tl.where(l > 0, l, 1.0)[:, None]                     # nothing to attend to: 0, as the numpy twins
    tl.store(o_ptr + (r * HQ + heads)[:, None] * DV + offs_dv[None, :], o.to(o_ptr.dtype.element_ty),
             mask=mask_g[:, None] & mask_dv[None, :])
    first = (offs_g * 0 + dv0) == 0                                # only the first value slice
    tl.store(m_out_ptr + r * HQ + heads, m_use, mask=mask_g & first)
    tl.store(l_out_ptr + r * HQ + heads, l, mask=mask_g & first)


COMBINE_TILE = 4096     # partial-accumulator elements one combine program reads per step (16 KB of float32)


def combine_splits(part_m: torch.Tensor, part_l: torch.Tensor, part_acc: torch.Tensor, sink, o: torch.Tensor,
                   m_out: torch.Tensor | None = None, l_out: torch.Tensor | None = None,
                   block_dv: int | None = None) -> None:
    """Merge split-K partials into ``o`` (R, Hq, dv), in place.

    part_m, part_l: (R, Hkv, n_splits, G); part_acc: (R, Hkv, n_splits, G, dv), in the accumulator dtype;
    sink: (Hq,) in that dtype, or None. m_out, l_out (R, Hq), when given, receive each head's final max and
    denominator (fa_decode_topk turns its logits into probabilities with them). ``block_dv``: value columns per
    program (a power of two; default: the whole width when R·Hkv fills the GPU, else slices of 32, so that a
    batch-1 combine still has several programs).
    """
    R, Hkv, n_splits, G = part_m.shape
    dv = part_acc.shape[-1]
    Hq = Hkv * G
    if m_out is None:
        m_out = alloc((R, Hq), part_m.dtype, part_m.device)
    if l_out is None:
        l_out = alloc((R, Hq), part_m.dtype, part_m.device)
    BG = pow2(G, 1)
    if block_dv is None:
        block_dv = pow2(dv, 1) if R * Hkv >= 132 else min(pow2(dv, 1), 32)
    block_sp = max(1, min(pow2(n_splits, 1), COMBINE_TILE // (BG * block_dv)))
    block_sp_m = max(1, min(pow2(n_splits, 1), COMBINE_TILE // BG))
    grid = (R, Hkv, triton.cdiv(dv, block_dv))
    combine_splits_kernel[grid](part_m, part_l, part_acc, m_out if sink is None else sink, o, m_out, l_out,
                                n_splits, HQ=Hq, HKV=Hkv, G=G, DV=dv, BLOCK_G=BG, BLOCK_DV=block_dv,
                                BLOCK_SP=block_sp, BLOCK_SP_M=block_sp_m, HAS_SINK=sink is not None,
                                ACC_DTYPE=acc_dtype(part_m.dtype))
