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

from gpu_track._common import alloc, check, fold_scale, pow2


@triton.jit
def _sparse_attn_kernel(Q, K, V, IDX, SINK, O, PM, PL, PACC, scale,
                        T, S, K_SEL, CHUNK, NSPLIT,
                        HQ: tl.constexpr, HKV: tl.constexpr, G: tl.constexpr,
                        D: tl.constexpr, DV: tl.constexpr,
                        BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
                        BLOCK_K: tl.constexpr, HAS_SINK: tl.constexpr, ACC: tl.constexpr,
                        PREC: tl.constexpr, SPLIT: tl.constexpr):
    bt = tl.program_id(0)            # b * T + t
    g = tl.program_id(1)             # KV group
    sp = tl.program_id(2)            # slice of the index list (split-K, for decode at small batch)
    b = bt // T
    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    mg, md, mdv = offs_g < G, offs_d < D, offs_dv < DV
    heads = g * G + offs_g
    q = tl.load(Q + (bt * HQ + heads)[:, None] * D + offs_d[None, :], mask=mg[:, None] & md[None, :], other=0.0)
    m_i = tl.full([BLOCK_G], float("-inf"), ACC)
    l_i = tl.zeros([BLOCK_G], ACC)
    acc = tl.zeros([BLOCK_G, BLOCK_DV], ACC)
    idx_row = IDX + (bt * HKV + g) * K_SEL
    lo = sp * CHUNK
    hi = tl.minimum(lo + CHUNK, K_SEL)
    for start in range(lo, hi, BLOCK_K):
        offs_k = start + tl.arange(0, BLOCK_K)
        ids = tl.load(idx_row + offs_k, mask=offs_k < hi, other=-1)
        valid = ids >= 0
        rows = (b * S + tl.where(valid, ids, 0)).to(tl.int64) * HKV + g   # int64: B*S*Hkv*d can pass 2**31
        kt = tl.load(K + rows[:, None] * D + offs_d[None, :], mask=valid[:, None] & md[None, :], other=0.0)
        s = tl.dot(q, tl.trans(kt), input_precision=PREC, out_dtype=ACC) * scale
        s = tl.where(valid[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)   # a row with nothing valid yet: avoid inf - inf
        alpha = tl.exp(m_i - m_use)
        p = tl.exp(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        vt = tl.load(V + rows[:, None] * DV + offs_dv[None, :], mask=valid[:, None] & mdv[None, :], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(vt.dtype), vt, input_precision=PREC, out_dtype=ACC)
        m_i = m_new
    if SPLIT:   # partial (m, l, acc), merged by fa_decode_topk's combine kernel, laid out (B*T, Hkv, NSPLIT, G)
        prow = ((bt * HKV + g) * NSPLIT + sp) * G + offs_g
        tl.store(PM + prow, m_i, mask=mg)
        tl.store(PL + prow, l_i, mask=mg)
        tl.store(PACC + prow[:, None] * DV + offs_dv[None, :], acc, mask=mg[:, None] & mdv[None, :])
    else:
        if HAS_SINK:
            sink = tl.load(SINK + heads, mask=mg, other=0.0).to(ACC)
            m_fin = tl.maximum(m_i, sink)
            r = tl.exp(m_i - m_fin)
            l_i = l_i * r + tl.exp(sink - m_fin)
            acc = acc * r[:, None]
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]        # empty index set -> 0, as the numpy twin
        tl.store(O + (bt * HQ + heads)[:, None] * DV + offs_dv[None, :], out.to(O.dtype.element_ty),
                 mask=mg[:, None] & mdv[None, :])


def acc_dtype(dtype: torch.dtype):
    """Accumulate in float64 for float64 inputs (exact twin of numpy), else float32."""
    return tl.float64 if dtype == torch.float64 else tl.float32


def dot_precision(dtype: torch.dtype) -> str:
    """fp32 inputs: true fp32 dots ("ieee"), not tf32, so fp32 results match numpy to ~1e-6."""
    return "ieee" if dtype in (torch.float32, torch.float64) else "tf32"


def sparse_attention(q, k, v, idx, scale=None, sink=None, block_k: int = 32, num_warps: int = 4,
                     num_stages: int = 2, nsplit: int | None = None):
    """Torch wrapper. q: (B, T, Hq, d); k: (B, S, Hkv, d); v: (B, S, Hkv, dv); idx: (B, T, Hkv, K) int, -1 padded.

    Returns o: (B, T, Hq, dv) in q's dtype. Index validity (range, uniqueness) is the caller's contract; the numpy
    API checks it before calling. ``nsplit``: slices of the index list run by separate programs and merged after
    (default: enough to give the GPU ~4 programs per SM when B·T·Hkv is small).
    """
    check(q.ndim == 4 and k.ndim == 4 and v.ndim == 4, f"q, k, v must be 4-D; got {q.shape} {k.shape} {v.shape}")
    B, T, Hq, d = q.shape
    S, Hkv, dv = k.shape[1], k.shape[2], v.shape[3]
    check(Hq % Hkv == 0, f"Hq={Hq} must be a multiple of Hkv={Hkv}")
    check(idx.shape[:3] == (B, T, Hkv), f"idx must be (B={B}, T={T}, Hkv={Hkv}, K), got {tuple(idx.shape)}")
    G = Hq // Hkv
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    idx = idx.to(torch.int32).contiguous()
    o = alloc((B, T, Hq, dv), q.dtype, q.device)
    K_SEL = idx.shape[3]
    q, scale = fold_scale(q, scale, d)
    has_sink = sink is not None
    sink_t = sink.to(torch.float32 if q.dtype != torch.float64 else torch.float64).contiguous() if has_sink else o
    if B * T == 0 or K_SEL == 0:
        o.zero_()
        return o
    nblocks = triton.cdiv(K_SEL, block_k)
    if nsplit is None:
        nsplit = max(1, min(nblocks, 528 // (B * T * Hkv)))
    chunk = triton.cdiv(nblocks, nsplit) * block_k
    nsplit = triton.cdiv(K_SEL, chunk)
    acc_t = torch.float64 if q.dtype == torch.float64 else torch.float32
    meta = dict(HQ=Hq, HKV=Hkv, G=G, D=d, DV=dv, BLOCK_G=pow2(G), BLOCK_D=pow2(d), BLOCK_DV=pow2(dv),
                BLOCK_K=block_k, HAS_SINK=has_sink, ACC=acc_dtype(q.dtype), PREC=dot_precision(q.dtype),
                num_warps=num_warps, num_stages=num_stages)
    if nsplit == 1:
        _sparse_attn_kernel[(B * T, Hkv, 1)](q, k, v, idx, sink_t, o, o, o, o, scale, T, S, K_SEL, chunk, 1,
                                             SPLIT=False, **meta)
        return o
    from gpu_track.fa_decode_topk import _fa_combine_kernel
    pm = alloc((B * T, Hkv, nsplit, G), acc_t, q.device)
    pl = alloc(pm.shape, acc_t, q.device)
    pacc = alloc((B * T, Hkv, nsplit, G, dv), acc_t, q.device)
    _sparse_attn_kernel[(B * T, Hkv, nsplit)](q, k, v, idx, sink_t, o, pm, pl, pacc, scale, T, S, K_SEL, chunk,
                                              nsplit, SPLIT=True, **meta)
    mf = alloc((B * T, Hq), acc_t, q.device)
    _fa_combine_kernel[(B * T, Hkv)](pm, pl, pacc, sink_t, o, mf, mf.clone(), nsplit, HQ=Hq, HKV=Hkv, G=G, DV=dv,
                                     BLOCK_G=pow2(G), BLOCK_DV=pow2(dv), HAS_SINK=has_sink, ACC=meta["ACC"])
    return o
