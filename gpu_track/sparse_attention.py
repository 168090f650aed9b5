"""Token-level sparse attention (DSA / HySparse2 SA layers): each query reads an explicit index set of positions.

One program = one query token x one KV group. It loads the group's G = Hq/Hkv query heads once (MQA/GQA: the
heads share the index set, so every gathered key row is reused G times), walks the index list in BLOCK_K
chunks, gathers those K/V rows (masked: -1 slots and the tail past K load nothing), and keeps a flash-style
online softmax (running max m, running sum l, rescaled accumulator). The optional per-head sink adds exp(sink)
to the denominator at the end. Cost at decode is the gather: about K * (d + dv) * bytes per (query, group).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpu_track.common import (INT_DTYPES, TARGET_PROGRAMS, acc_dtype, acc_torch_dtype, alloc, check_gqa_operands,
                              check_int, check_no_repeats, check_range, check_scale, check_sink, check_tensor,
                              check_tile, dot_precision, fold_scale, pow2, split_chunk, on_tensor_cores)
from gpu_track.softmax import combine_splits, online_softmax_step


@triton.jit
def _sparse_attn_kernel(q_ptr, k_ptr, v_ptr, idx_ptr, sink_ptr, o_ptr, part_m_ptr, part_l_ptr, part_acc_ptr, scale,
                        T, S, n_idx, split_len, n_splits,
                        HQ: tl.constexpr, HKV: tl.constexpr, G: tl.constexpr,
                        D: tl.constexpr, DV: tl.constexpr,
                        BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
                        BLOCK_K: tl.constexpr, HAS_SINK: tl.constexpr, ACC_DTYPE: tl.constexpr,
                        DOT_PRECISION: tl.constexpr, SPLIT: tl.constexpr):
    bt = tl.program_id(0)            # b * T + t
    g = tl.program_id(1)             # KV group
    sp = tl.program_id(2)            # slice of the index list (split-K, for decode at small batch)
    b = bt // T
    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    mask_g, mask_d, mask_dv = offs_g < G, offs_d < D, offs_dv < DV
    heads = g * G + offs_g
    q = tl.load(q_ptr + (bt * HQ + heads)[:, None] * D + offs_d[None, :], mask=mask_g[:, None] & mask_d[None, :],
                other=0.0)
    m_i = tl.full([BLOCK_G], float("-inf"), ACC_DTYPE)
    l_i = tl.zeros([BLOCK_G], ACC_DTYPE)
    acc = tl.zeros([BLOCK_G, BLOCK_DV], ACC_DTYPE)
    idx_row = idx_ptr + (bt * HKV + g) * n_idx
    lo = sp * split_len
    hi = tl.minimum(lo + split_len, n_idx)
    for start in range(lo, hi, BLOCK_K):
        offs_k = start + tl.arange(0, BLOCK_K)
        ids = tl.load(idx_row + offs_k, mask=offs_k < hi, other=-1)
        valid = ids >= 0
        rows = (b * S + tl.where(valid, ids, 0)).to(tl.int64) * HKV + g   # int64: B*S*Hkv*d can pass 2**31
        kt = tl.load(k_ptr + rows[:, None] * D + offs_d[None, :], mask=valid[:, None] & mask_d[None, :], other=0.0)
        vt = tl.load(v_ptr + rows[:, None] * DV + offs_dv[None, :], mask=valid[:, None] & mask_dv[None, :],
                     other=0.0)
        s = tl.dot(q, tl.trans(kt), input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE) * scale
        s = tl.where(valid[None, :], s, float("-inf"))
        m_i, l_i, acc = online_softmax_step(m_i, l_i, acc, s, vt, ACC_DTYPE, DOT_PRECISION)
    if SPLIT:   # partial (m, l, acc), merged by softmax.combine_splits, laid out (B*T, Hkv, n_splits, G)
        prow = ((bt * HKV + g) * n_splits + sp) * G + offs_g
        tl.store(part_m_ptr + prow, m_i, mask=mask_g)
        tl.store(part_l_ptr + prow, l_i, mask=mask_g)
        tl.store(part_acc_ptr + prow[:, None] * DV + offs_dv[None, :], acc, mask=mask_g[:, None] & mask_dv[None, :])
    else:
        if HAS_SINK:
            sink = tl.load(sink_ptr + heads, mask=mask_g, other=0.0).to(ACC_DTYPE)
            m_fin = tl.maximum(m_i, sink)
            r = tl.exp(m_i - m_fin)
            l_i = l_i * r + tl.exp(sink - m_fin)
            acc = acc * r[:, None]
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]        # empty index set -> 0, as the numpy twin
        tl.store(o_ptr + (bt * HQ + heads)[:, None] * DV + offs_dv[None, :], out.to(o_ptr.dtype.element_ty),
                 mask=mask_g[:, None] & mask_dv[None, :])


# public: gpu_track.targets compiles it ahead of time for each student GPU
KERNELS = {"attention": _sparse_attn_kernel}


def check_sparse_attention_args(q, k, v, idx, scale, sink, block_k, nsplit):
    """The torch wrapper's contract (shapes, dtypes, devices, index range); ValueError naming the argument."""
    B, S, Hq, Hkv, d, _ = check_gqa_operands(q, k, v)
    T = q.shape[1]
    check_tensor("idx", idx, (B, T, Hkv, None), INT_DTYPES, like=q, doc=f"(B={B}, T={T}, Hkv={Hkv}, K) integers")
    check_range("idx", idx, -1, S)                      # -1 pads; anything else would be read out of bounds
    check_no_repeats("idx", idx)                        # a repeat would be read, and weigh, twice
    check_scale(scale)
    check_sink(sink, Hq, q)
    check_tile("block_k", block_k)
    if nsplit is not None:
        check_int("nsplit", nsplit)


@on_tensor_cores("q", "k", "v")
def sparse_attention(q, k, v, idx, scale=None, sink=None, block_k: int = 32, num_warps: int = 4,
                     num_stages: int = 2, nsplit: int | None = None):
    """Torch wrapper. q: (B, T, Hq, d); k: (B, S, Hkv, d); v: (B, S, Hkv, dv); idx: (B, T, Hkv, K) int in [-1, S),
    -1 padded; sink: (Hq,) or None.

    Returns o: (B, T, Hq, dv) in q's dtype. Shapes, dtypes, devices and the index range are checked here (an
    index >= S would read out of bounds), and that no position repeats within an index set (it would be read and
    weigh twice; refused as the op's contract refuses it). ``nsplit``: slices of the index list run by separate
    programs and merged after (default: enough to give the GPU ~4 programs per SM when B·T·Hkv is small).
    """
    check_sparse_attention_args(q, k, v, idx, scale, sink, block_k, nsplit)
    block_k, nsplit = int(block_k), None if nsplit is None else int(nsplit)
    B, T, Hq, d = q.shape
    S, Hkv, dv = k.shape[1], k.shape[2], v.shape[3]
    G = Hq // Hkv
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    idx = idx.to(torch.int32).contiguous()
    o = alloc((B, T, Hq, dv), q.dtype, q.device)
    n_idx = idx.shape[3]
    q, scale = fold_scale(q, scale, d)
    acc_t = acc_torch_dtype(q.dtype)
    sink_t = sink.to(acc_t).contiguous() if sink is not None else None
    if B * T == 0 or n_idx == 0 or S == 0:          # nothing listed (S = 0: every entry is -1): 0
        o.zero_()
        return o
    if nsplit is None:
        nsplit = max(1, min(triton.cdiv(n_idx, block_k), TARGET_PROGRAMS // (B * T * Hkv)))
    split_len, nsplit = split_chunk(n_idx, block_k, nsplit)
    meta = dict(HQ=Hq, HKV=Hkv, G=G, D=d, DV=dv, BLOCK_G=pow2(G), BLOCK_D=pow2(d), BLOCK_DV=pow2(dv),
                BLOCK_K=block_k, HAS_SINK=sink is not None, ACC_DTYPE=acc_dtype(q.dtype),
                DOT_PRECISION=dot_precision(q.dtype), num_warps=num_warps, num_stages=num_stages)
    if nsplit == 1:
        _sparse_attn_kernel[(B * T, Hkv, 1)](q, k, v, idx, o if sink_t is None else sink_t, o, o, o, o, scale,
                                             T, S, n_idx, split_len, 1, SPLIT=False, **meta)
        return o
    part_m = alloc((B * T, Hkv, nsplit, G), acc_t, q.device)
    part_l = alloc(part_m.shape, acc_t, q.device)
    part_acc = alloc((B * T, Hkv, nsplit, G, dv), acc_t, q.device)
    _sparse_attn_kernel[(B * T, Hkv, nsplit)](q, k, v, idx, o, o, part_m, part_l, part_acc, scale, T, S, n_idx,
                                              split_len, nsplit, SPLIT=True, **meta)
    combine_splits(part_m, part_l, part_acc, sink_t, o)
    return o
