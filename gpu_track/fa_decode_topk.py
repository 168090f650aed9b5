"""HySparse2's full-attention layer at decode: exact attention over the whole cache that ALSO hands its group's
sparse-attention layers the top-k positions outside the local window.

Three launches, all memory-bound on the KV read:
1. split-S flash decoding: program (b, group, split) walks its slice of the cache for the group's G query heads,
   keeps an online softmax (m, l, acc) and writes the raw logits q·k·scale (G floats per position: 8x-16x fewer
   bytes than the K/V rows it read) so that probabilities can be formed once the global max is known;
2. combine: merge the splits' (m, l, acc) into o, adding the optional sink to the denominator;
3. group score: p_h(s) = exp(logit_h(s) - m_h) / l_h summed over the G heads, -inf inside the window
   [S - window, S); then a deterministic top-k (ties to the smaller position).
"""
from __future__ import annotations

import triton
import triton.language as tl

from gpu_track.common import (TARGET_PROGRAMS, acc_dtype, acc_torch_dtype, alloc, check_gqa_operands, check_int,
                              check_scale, check_sink, check_tile, dot_precision, fold_scale, pow2, split_chunk,
                              topk_stable, on_tensor_cores)
from gpu_track.softmax import combine_splits, online_softmax_step


@triton.jit
def _fa_split_kernel(q_ptr, k_ptr, v_ptr, logits_ptr, part_m_ptr, part_l_ptr, part_acc_ptr, scale, S, split_len,
                     n_splits,
                     HQ: tl.constexpr, HKV: tl.constexpr, G: tl.constexpr, D: tl.constexpr, DV: tl.constexpr,
                     BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_S: tl.constexpr,
                     ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr):
    b = tl.program_id(0)
    g = tl.program_id(1)
    sp = tl.program_id(2)
    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    mask_g, mask_d, mask_dv = offs_g < G, offs_d < D, offs_dv < DV
    heads = g * G + offs_g
    q = tl.load(q_ptr + (b * HQ + heads)[:, None] * D + offs_d[None, :], mask=mask_g[:, None] & mask_d[None, :],
                other=0.0)
    m_i = tl.full([BLOCK_G], float("-inf"), ACC_DTYPE)
    l_i = tl.zeros([BLOCK_G], ACC_DTYPE)
    acc = tl.zeros([BLOCK_G, BLOCK_DV], ACC_DTYPE)
    lrow = ((b * HKV + g) * G + offs_g).to(tl.int64) * S          # logits laid out (B, Hkv, G, S)
    lo = sp * split_len
    hi = tl.minimum(lo + split_len, S)
    for start in range(lo, hi, BLOCK_S):
        offs_s = start + tl.arange(0, BLOCK_S)
        mask_s = offs_s < hi
        rows = (b * S + offs_s).to(tl.int64) * HKV + g
        kt = tl.load(k_ptr + rows[:, None] * D + offs_d[None, :], mask=mask_s[:, None] & mask_d[None, :], other=0.0)
        vt = tl.load(v_ptr + rows[:, None] * DV + offs_dv[None, :], mask=mask_s[:, None] & mask_dv[None, :],
                     other=0.0)
        s = tl.dot(q, tl.trans(kt), input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE) * scale
        s = tl.where(mask_s[None, :], s, float("-inf"))
        tl.store(logits_ptr + lrow[:, None] + offs_s[None, :], s, mask=mask_g[:, None] & mask_s[None, :])
        m_i, l_i, acc = online_softmax_step(m_i, l_i, acc, s, vt, ACC_DTYPE, DOT_PRECISION)
    prow = ((b * HKV + g) * n_splits + sp) * G + offs_g              # partials laid out (B, Hkv, n_splits, G)
    tl.store(part_m_ptr + prow, m_i, mask=mask_g)
    tl.store(part_l_ptr + prow, l_i, mask=mask_g)
    tl.store(part_acc_ptr + prow[:, None] * DV + offs_dv[None, :], acc, mask=mask_g[:, None] & mask_dv[None, :])


@triton.jit
def _group_score_kernel(logits_ptr, m_ptr, l_ptr, score_ptr, S, window_start,
                        HQ: tl.constexpr, HKV: tl.constexpr, G: tl.constexpr,
                        BLOCK_G: tl.constexpr, BLOCK_S: tl.constexpr):
    b = tl.program_id(0)
    g = tl.program_id(1)
    offs_s = tl.program_id(2) * BLOCK_S + tl.arange(0, BLOCK_S)
    offs_g = tl.arange(0, BLOCK_G)
    mask_g = offs_g < G
    mask_s = offs_s < S
    heads = g * G + offs_g
    m = tl.load(m_ptr + b * HQ + heads, mask=mask_g, other=0.0)
    l = tl.load(l_ptr + b * HQ + heads, mask=mask_g, other=1.0)
    inv = tl.where(l > 0, 1.0 / l, 0.0)
    lrow = ((b * HKV + g) * G + offs_g).to(tl.int64) * S
    lg = tl.load(logits_ptr + lrow[:, None] + offs_s[None, :], mask=mask_g[:, None] & mask_s[None, :],
                 other=float("-inf"))
    p = tl.exp(lg - m[:, None]) * inv[:, None]
    score = tl.sum(p, 0)
    score = tl.where(offs_s < window_start, score, float("-inf"))    # the window's positions are read anyway
    tl.store(score_ptr + (b * HKV + g).to(tl.int64) * S + offs_s, score, mask=mask_s)


# public: gpu_track.targets compiles them ahead of time for each student GPU
KERNELS = {"split": _fa_split_kernel, "group_score": _group_score_kernel}


def check_fa_decode_args(q, k, v, window, scale, sink, block_s, nsplit):
    """The torch wrapper's contract (shapes, dtypes, devices, sizes); ValueError naming the argument."""
    B, S, Hq, Hkv, d, _ = check_gqa_operands(q, k, v, q_doc="(B, Hq, d)")
    check_int("window", window)
    check_scale(scale)
    check_sink(sink, Hq, q)
    check_tile("block_s", block_s)
    if nsplit is not None:
        check_int("nsplit", nsplit)


@on_tensor_cores("q", "k", "v")
def fa_decode(q, k, v, window, scale=None, sink=None, block_s: int = 64, nsplit: int | None = None,
              num_warps: int = 4):
    """Attention output and group scores. q: (B, Hq, d) at position S-1; k: (B, S, Hkv, d); v: (B, S, Hkv, dv);
    window: int >= 1; sink: (Hq,) or None.

    Returns (o: (B, Hq, dv) in q's dtype, score: (B, Hkv, S) float32/float64, -inf for s >= S - window).
    """
    check_fa_decode_args(q, k, v, window, scale, sink, block_s, nsplit)
    window, block_s, nsplit = int(window), int(block_s), None if nsplit is None else int(nsplit)
    B, Hq, d = q.shape
    S, Hkv, dv = k.shape[1], k.shape[2], v.shape[3]
    G = Hq // Hkv
    acc_t = acc_torch_dtype(q.dtype)
    dev = q.device
    o = alloc((B, Hq, dv), q.dtype, dev)
    score = alloc((B, Hkv, S), acc_t, dev)
    if S == 0 or B == 0:
        o.zero_()
        return o, score
    if nsplit is None:   # enough programs to fill the GPU: about 4 per SM over B * Hkv * nsplit
        nsplit = max(1, min(triton.cdiv(S, block_s), triton.cdiv(TARGET_PROGRAMS, B * Hkv)))
    split_len, nsplit = split_chunk(S, block_s, nsplit)
    logits = alloc((B, Hkv, G, S), acc_t, dev)
    part_m = alloc((B, Hkv, nsplit, G), acc_t, dev)
    part_l = alloc(part_m.shape, acc_t, dev)
    part_acc = alloc((B, Hkv, nsplit, G, dv), acc_t, dev)
    m_fin = alloc((B, Hq), acc_t, dev)
    l_fin = alloc(m_fin.shape, acc_t, dev)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    q, scale = fold_scale(q, scale, d)
    _fa_split_kernel[(B, Hkv, nsplit)](q, k, v, logits, part_m, part_l, part_acc, scale, S, split_len, nsplit,
                                       HQ=Hq, HKV=Hkv, G=G, D=d, DV=dv, BLOCK_G=pow2(G), BLOCK_D=pow2(d),
                                       BLOCK_DV=pow2(dv), BLOCK_S=block_s, ACC_DTYPE=acc_dtype(q.dtype),
                                       DOT_PRECISION=dot_precision(q.dtype), num_warps=num_warps)
    sink_t = sink.to(device=dev, dtype=acc_t).contiguous() if sink is not None else None
    combine_splits(part_m, part_l, part_acc, sink_t, o, m_fin, l_fin)
    block_score = 256
    # a window past the first key leaves nothing outside it: start 0 (fits the kernel's int32 for any window)
    _group_score_kernel[(B, Hkv, triton.cdiv(S, block_score))](logits, m_fin, l_fin, score, S, max(S - window, 0),
                                                               HQ=Hq, HKV=Hkv, G=G, BLOCK_G=pow2(G, 1),
                                                               BLOCK_S=block_score)
    return o, score


def fa_decode_topk(q, k, v, topk, window, scale=None, sink=None):
    """Returns (o: (B, Hq, dv), idx: (B, Hkv, topk) int64): exact attention + the group's top-k outside the window."""
    topk = check_int("topk", topk)
    o, score = fa_decode(q, k, v, window, scale, sink)
    return o, topk_stable(score, topk, "topk")
