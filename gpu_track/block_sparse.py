"""InfLLM-V2 / SparDA block-sparse attention: each query reads the tokens of a few listed 64-token blocks.

Two launch shapes, one semantics (query t of KV group g reads the tokens of blocks block_idx[b, t, g, :], -1
padded, that satisfy s <= q_pos[t]; one softmax over all of them):

- per query (decode, or block lists that differ from query to query): program (b·T + t, g) holds the group's
  G query heads and walks its listed blocks;
- tiled (prefill): when BLOCK_T consecutive queries list the same blocks (InfLLM-V2 and SparDA select per query
  block), one program stacks BLOCK_T queries × G heads into one tall operand, so every K/V block it loads is
  reused BLOCK_T·G times on tensor cores, as FlashAttention does. Causality stays per row.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpu_track._common import alloc, check, fold_scale, pow2
from gpu_track.sparse_attention import acc_dtype, dot_precision


@triton.jit
def _block_attn_kernel(Q, K, V, BIDX, QPOS, O, scale, T, S, NB,
                       HQ: tl.constexpr, HKV: tl.constexpr, G: tl.constexpr, D: tl.constexpr, DV: tl.constexpr,
                       BS: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_BS: tl.constexpr,
                       BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, ACC: tl.constexpr, PREC: tl.constexpr):
    b = tl.program_id(0)
    t0 = tl.program_id(1) * BLOCK_T
    g = tl.program_id(2)
    rows = tl.arange(0, BLOCK_T * BLOCK_G)             # row r = (query t0 + r // BLOCK_G, head r % BLOCK_G)
    tq = t0 + rows // BLOCK_G
    hj = rows % BLOCK_G
    mr = (tq < T) & (hj < G)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    md, mdv = offs_d < D, offs_dv < DV
    qrow = ((b * T + tq) * HQ + g * G + hj).to(tl.int64)
    q = tl.load(Q + qrow[:, None] * D + offs_d[None, :], mask=mr[:, None] & md[None, :], other=0.0)
    qpos = tl.load(QPOS + tq, mask=mr, other=-1)
    m_i = tl.full([BLOCK_T * BLOCK_G], float("-inf"), ACC)
    l_i = tl.zeros([BLOCK_T * BLOCK_G], ACC)
    acc = tl.zeros([BLOCK_T * BLOCK_G, BLOCK_DV], ACC)
    offs_j = tl.arange(0, BLOCK_BS)
    list_row = BIDX + ((b * T + t0) * HKV + g) * NB       # the tile's first query's list (shared by the tile)
    for i in range(0, NB):
        bid = tl.load(list_row + i)
        s = bid * BS + offs_j
        ms = (offs_j < BS) & (s >= 0) & (s < S)          # bid = -1 gives s < 0: nothing loads
        kv = (b * S + tl.where(ms, s, 0)).to(tl.int64) * HKV + g
        kt = tl.load(K + kv[:, None] * D + offs_d[None, :], mask=ms[:, None] & md[None, :], other=0.0)
        logit = tl.dot(q, tl.trans(kt), input_precision=PREC, out_dtype=ACC) * scale
        ok = ms[None, :] & (s[None, :] <= qpos[:, None])
        logit = tl.where(ok, logit, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(logit, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_use)
        p = tl.exp(logit - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        vt = tl.load(V + kv[:, None] * DV + offs_dv[None, :], mask=ms[:, None] & mdv[None, :], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(vt.dtype), vt, input_precision=PREC, out_dtype=ACC)
        m_i = m_new
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    tl.store(O + qrow[:, None] * DV + offs_dv[None, :], out.to(O.dtype.element_ty), mask=mr[:, None] & mdv[None, :])


def tile_uniform(block_idx: torch.Tensor, block_t: int) -> bool:
    """True when every run of ``block_t`` consecutive queries lists the same blocks (so the tiled launch is exact)."""
    B, T, Hkv, nb = block_idx.shape
    pad = (-T) % block_t
    bi = block_idx
    if pad:  # repeat the last row so a ragged last tile compares with itself
        bi = torch.cat([bi, bi[:, -1:].expand(B, pad, Hkv, nb)], dim=1)
    tiles = bi.reshape(B, -1, block_t, Hkv, nb)
    return bool((tiles == tiles[:, :, :1]).all())


def block_sparse_attention(q, k, v, block_idx, block_size: int = 64, scale=None, q_pos=None,
                           block_t: int | None = None, num_warps: int = 4, num_stages: int = 2):
    """q: (B, T, Hq, d); k: (B, S, Hkv, d); v: (B, S, Hkv, dv); block_idx: (B, T, Hkv, nb) int, -1 padded;
    q_pos: (T,) default S - T + arange(T). Returns o: (B, T, Hq, dv) in q's dtype.

    ``block_t``: queries per program; by default the largest power of two <= 128 / G that keeps the launch exact
    (tile_uniform), else 1.
    """
    check(q.ndim == 4 and k.ndim == 4 and v.ndim == 4, f"q, k, v must be 4-D; got {q.shape} {k.shape} {v.shape}")
    B, T, Hq, d = q.shape
    S, Hkv, dv = k.shape[1], k.shape[2], v.shape[3]
    check(Hq % Hkv == 0, f"Hq={Hq} must be a multiple of Hkv={Hkv}")
    check(block_idx.shape[:3] == (B, T, Hkv), f"block_idx must be (B={B}, T={T}, Hkv={Hkv}, nb), got {tuple(block_idx.shape)}")
    G = Hq // Hkv
    BG = pow2(G, 1)
    if q_pos is None:
        q_pos = torch.arange(S - T, S, device=q.device)
    q_pos = q_pos.to(device=q.device, dtype=torch.int32).contiguous()
    block_idx = block_idx.to(torch.int32).contiguous()
    o = alloc((B, T, Hq, dv), q.dtype, q.device)
    nb = block_idx.shape[3]
    if B * T == 0:
        return o
    if block_t is None:
        block_t = max(1, 128 // BG) if T > 1 else 1
        while block_t > 1 and not tile_uniform(block_idx, block_t):
            block_t //= 2
    block_t = max(block_t, triton.cdiv(16, BG))        # tl.dot needs >= 16 rows: pad rows (masked) if needed
    if block_t > 1 and not tile_uniform(block_idx, block_t):
        # rows padded past G in one query: only legal when each tile is a single real query
        block_t_eff = 1
    else:
        block_t_eff = block_t
    if block_t_eff == 1 and BG < 16:
        BG = 16                                        # pad heads instead of queries
    grid = (B, triton.cdiv(T, block_t_eff), Hkv)
    q, scale = fold_scale(q, scale, d)
    _block_attn_kernel[grid](q.contiguous(), k.contiguous(), v.contiguous(), block_idx, q_pos, o,
                             scale, T, S, nb,
                             HQ=Hq, HKV=Hkv, G=G, D=d, DV=dv, BS=block_size, BLOCK_T=block_t_eff, BLOCK_G=BG,
                             BLOCK_BS=pow2(block_size), BLOCK_D=pow2(d), BLOCK_DV=pow2(dv), ACC=acc_dtype(q.dtype),
                             PREC=dot_precision(q.dtype), num_warps=num_warps, num_stages=num_stages)
    return o
