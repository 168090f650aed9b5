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

import torch
import triton
import triton.language as tl

from gpu_track._common import alloc, check, fold_scale, pow2, topk_stable
from gpu_track.sparse_attention import acc_dtype, dot_precision


@triton.jit
def _fa_split_kernel(Q, K, V, LOGITS, PM, PL, PACC, scale, S, CHUNK, NSPLIT,
                     HQ: tl.constexpr, HKV: tl.constexpr, G: tl.constexpr, D: tl.constexpr, DV: tl.constexpr,
                     BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_S: tl.constexpr,
                     ACC: tl.constexpr, PREC: tl.constexpr):
    b = tl.program_id(0)
    g = tl.program_id(1)
    sp = tl.program_id(2)
    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    mg, md, mdv = offs_g < G, offs_d < D, offs_dv < DV
    heads = g * G + offs_g
    q = tl.load(Q + (b * HQ + heads)[:, None] * D + offs_d[None, :], mask=mg[:, None] & md[None, :], other=0.0)
    m_i = tl.full([BLOCK_G], float("-inf"), ACC)
    l_i = tl.zeros([BLOCK_G], ACC)
    acc = tl.zeros([BLOCK_G, BLOCK_DV], ACC)
    lrow = ((b * HKV + g) * G + offs_g).to(tl.int64) * S          # logits laid out (B, Hkv, G, S)
    lo = sp * CHUNK
    hi = tl.minimum(lo + CHUNK, S)
    for start in range(lo, hi, BLOCK_S):
        offs_s = start + tl.arange(0, BLOCK_S)
        ms = offs_s < hi
        rows = (b * S + offs_s).to(tl.int64) * HKV + g
        kt = tl.load(K + rows[:, None] * D + offs_d[None, :], mask=ms[:, None] & md[None, :], other=0.0)
        s = tl.dot(q, tl.trans(kt), input_precision=PREC, out_dtype=ACC) * scale
        s = tl.where(ms[None, :], s, float("-inf"))
        tl.store(LOGITS + lrow[:, None] + offs_s[None, :], s, mask=mg[:, None] & ms[None, :])
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_use)
        p = tl.exp(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        vt = tl.load(V + rows[:, None] * DV + offs_dv[None, :], mask=ms[:, None] & mdv[None, :], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(vt.dtype), vt, input_precision=PREC, out_dtype=ACC)
        m_i = m_new
    prow = ((b * HKV + g) * NSPLIT + sp) * G + offs_g              # partials laid out (B, Hkv, NSPLIT, G)
    tl.store(PM + prow, m_i, mask=mg)
    tl.store(PL + prow, l_i, mask=mg)
    tl.store(PACC + prow[:, None] * DV + offs_dv[None, :], acc, mask=mg[:, None] & mdv[None, :])


@triton.jit
def _fa_combine_kernel(PM, PL, PACC, SINK, O, MF, LF, NSPLIT,
                       HQ: tl.constexpr, HKV: tl.constexpr, G: tl.constexpr, DV: tl.constexpr,
                       BLOCK_G: tl.constexpr, BLOCK_DV: tl.constexpr, HAS_SINK: tl.constexpr, ACC: tl.constexpr):
    b = tl.program_id(0)
    g = tl.program_id(1)
    offs_g = tl.arange(0, BLOCK_G)
    offs_dv = tl.arange(0, BLOCK_DV)
    mg, mdv = offs_g < G, offs_dv < DV
    m = tl.full([BLOCK_G], float("-inf"), ACC)
    for sp in range(0, NSPLIT):                                    # pass 1: the global max per head
        prow = ((b * HKV + g) * NSPLIT + sp) * G + offs_g
        m = tl.maximum(m, tl.load(PM + prow, mask=mg, other=float("-inf")))
    if HAS_SINK:
        sink = tl.load(SINK + g * G + offs_g, mask=mg, other=0.0).to(ACC)
        m = tl.maximum(m, sink)
    m_use = tl.where(m == float("-inf"), 0.0, m)
    l = tl.zeros([BLOCK_G], ACC)
    acc = tl.zeros([BLOCK_G, BLOCK_DV], ACC)
    for sp in range(0, NSPLIT):                                    # pass 2: rescale and add
        prow = ((b * HKV + g) * NSPLIT + sp) * G + offs_g
        r = tl.exp(tl.load(PM + prow, mask=mg, other=float("-inf")) - m_use)
        l += r * tl.load(PL + prow, mask=mg, other=0.0)
        acc += r[:, None] * tl.load(PACC + prow[:, None] * DV + offs_dv[None, :], mask=mg[:, None] & mdv[None, :],
                                    other=0.0)
    if HAS_SINK:
        l += tl.exp(sink - m_use)
    heads = g * G + offs_g
    o = acc / tl.where(l > 0, l, 1.0)[:, None]
    tl.store(O + (b * HQ + heads)[:, None] * DV + offs_dv[None, :], o.to(O.dtype.element_ty),
             mask=mg[:, None] & mdv[None, :])
    tl.store(MF + b * HQ + heads, m_use, mask=mg)
    tl.store(LF + b * HQ + heads, l, mask=mg)


@triton.jit
def _group_score_kernel(LOGITS, MF, LF, SCORE, S, LIMIT,
                        HQ: tl.constexpr, HKV: tl.constexpr, G: tl.constexpr,
                        BLOCK_G: tl.constexpr, BLOCK_S: tl.constexpr):
    b = tl.program_id(0)
    g = tl.program_id(1)
    offs_s = tl.program_id(2) * BLOCK_S + tl.arange(0, BLOCK_S)
    offs_g = tl.arange(0, BLOCK_G)
    mg = offs_g < G
    ms = offs_s < S
    heads = g * G + offs_g
    m = tl.load(MF + b * HQ + heads, mask=mg, other=0.0)
    l = tl.load(LF + b * HQ + heads, mask=mg, other=1.0)
    inv = tl.where(l > 0, 1.0 / l, 0.0)
    lrow = ((b * HKV + g) * G + offs_g).to(tl.int64) * S
    lg = tl.load(LOGITS + lrow[:, None] + offs_s[None, :], mask=mg[:, None] & ms[None, :], other=float("-inf"))
    p = tl.exp(lg - m[:, None]) * inv[:, None]
    score = tl.sum(p, 0)
    score = tl.where(offs_s < LIMIT, score, float("-inf"))        # the window's positions are read anyway
    tl.store(SCORE + (b * HKV + g).to(tl.int64) * S + offs_s, score, mask=ms)


def fa_decode(q, k, v, window, scale=None, sink=None, block_s: int = 64, nsplit: int | None = None,
              num_warps: int = 4):
    """Attention output and group scores. q: (B, Hq, d) at position S-1; k: (B, S, Hkv, d); v: (B, S, Hkv, dv).

    Returns (o: (B, Hq, dv) in q's dtype, score: (B, Hkv, S) float32/float64, -inf for s >= S - window).
    """
    check(q.ndim == 3 and k.ndim == 4 and v.ndim == 4, f"q (B,Hq,d), k/v (B,S,Hkv,d); got {q.shape} {k.shape} {v.shape}")
    B, Hq, d = q.shape
    S, Hkv, dv = k.shape[1], k.shape[2], v.shape[3]
    check(Hq % Hkv == 0, f"Hq={Hq} must be a multiple of Hkv={Hkv}")
    G = Hq // Hkv
    acc_t = torch.float64 if q.dtype == torch.float64 else torch.float32
    dev = q.device
    o = alloc((B, Hq, dv), q.dtype, dev)
    score = alloc((B, Hkv, S), acc_t, dev)
    if S == 0:
        o.zero_()
        return o, score
    nblocks = triton.cdiv(S, block_s)
    if nsplit is None:   # enough programs to fill the GPU: about 4 per SM over B * Hkv * nsplit
        nsplit = max(1, min(nblocks, triton.cdiv(528, B * Hkv)))
    chunk = triton.cdiv(nblocks, nsplit) * block_s
    nsplit = triton.cdiv(S, chunk)
    logits = alloc((B, Hkv, G, S), acc_t, dev)
    pm = alloc((B, Hkv, nsplit, G), acc_t, dev)
    pl = alloc(pm.shape, pm.dtype, pm.device)
    pacc = alloc((B, Hkv, nsplit, G, dv), acc_t, dev)
    mf = alloc((B, Hq), acc_t, dev)
    lf = alloc(mf.shape, mf.dtype, mf.device)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    q, scale = fold_scale(q, scale, d)
    BG, BD, BDV = pow2(G), pow2(d), pow2(dv)
    ACC = acc_dtype(q.dtype)
    _fa_split_kernel[(B, Hkv, nsplit)](q, k, v, logits, pm, pl, pacc, scale, S, chunk, nsplit,
                                       HQ=Hq, HKV=Hkv, G=G, D=d, DV=dv, BLOCK_G=BG, BLOCK_D=BD, BLOCK_DV=BDV,
                                       BLOCK_S=block_s, ACC=ACC, PREC=dot_precision(q.dtype), num_warps=num_warps)
    has_sink = sink is not None
    sink_t = sink.to(device=dev, dtype=acc_t).contiguous() if has_sink else mf
    _fa_combine_kernel[(B, Hkv)](pm, pl, pacc, sink_t, o, mf, lf, nsplit, HQ=Hq, HKV=Hkv, G=G, DV=dv,
                                 BLOCK_G=BG, BLOCK_DV=BDV, HAS_SINK=has_sink, ACC=ACC)
    BS2 = 256
    _group_score_kernel[(B, Hkv, triton.cdiv(S, BS2))](logits, mf, lf, score, S, S - window, HQ=Hq, HKV=Hkv, G=G,
                                                       BLOCK_G=pow2(G, 1), BLOCK_S=BS2)
    return o, score


def fa_decode_topk(q, k, v, topk, window, scale=None, sink=None):
    """Returns (o: (B, Hq, dv), idx: (B, Hkv, topk) int64): exact attention + the group's top-k outside the window."""
    o, score = fa_decode(q, k, v, window, scale, sink)
    return o, topk_stable(score, topk)
