"""InfLLM-V2 / SparDA block-sparse attention: each query reads the tokens of a few listed 64-token blocks.

Two launch shapes, one semantics (query t of KV group g reads the tokens of blocks block_idx[b, t, g, :], -1
padded, that satisfy s <= q_pos[t]; one softmax over all of them):

- per query (decode, or block lists that differ from query to query): program (b·T + t, g) holds the group's
  G query heads and walks its listed blocks;
- tiled (prefill): when BLOCK_T consecutive queries list the same blocks (InfLLM-V2 and SparDA select per query
  block), one program stacks BLOCK_T queries × G heads into one tall operand, so every K/V block it loads is
  reused BLOCK_T·G times on tensor cores, as FlashAttention does. Causality stays per row.
- split-K (decode at a small batch, one query per program): the block list is cut into ``nsplit`` slices run by
  separate programs, each writing its partial (m, l, acc); ``softmax.combine_splits`` merges them. Without it a
  decode step has only B·Hkv programs (2 at batch 1, 128 at B = 64) for the H200's 132 SMs.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpu_track.common import (INT_DTYPES, TARGET_PROGRAMS, acc_dtype, acc_torch_dtype, alloc, check, check_gqa_operands,
                              check_int, check_no_repeats, check_range, check_scale, check_tensor, check_tile,
                              dot_precision, fold_scale, pow2, query_positions, split_chunk, on_tensor_cores)
from gpu_track.softmax import combine_splits, online_softmax_step


@triton.jit
def _block_attn_kernel(q_ptr, k_ptr, v_ptr, block_idx_ptr, q_pos_ptr, o_ptr, part_m_ptr, part_l_ptr, part_acc_ptr,
                       scale, T, S, n_listed, split_len, n_splits,
                       HQ: tl.constexpr, HKV: tl.constexpr, G: tl.constexpr, D: tl.constexpr, DV: tl.constexpr,
                       KV_BLOCK: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_G: tl.constexpr,
                       BLOCK_KV: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
                       ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, SPLIT: tl.constexpr):
    b = tl.program_id(0)
    t0 = tl.program_id(1) * BLOCK_T
    g = tl.program_id(2) // n_splits
    sp = tl.program_id(2) % n_splits                  # slice of the block list (split-K; 0 when n_splits = 1)
    rows = tl.arange(0, BLOCK_T * BLOCK_G)             # row r = (query t0 + r // BLOCK_G, head r % BLOCK_G)
    tq = t0 + rows // BLOCK_G
    hj = rows % BLOCK_G
    mask_r = (tq < T) & (hj < G)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    mask_d, mask_dv = offs_d < D, offs_dv < DV
    qrow = ((b * T + tq) * HQ + g * G + hj).to(tl.int64)
    q = tl.load(q_ptr + qrow[:, None] * D + offs_d[None, :], mask=mask_r[:, None] & mask_d[None, :], other=0.0)
    qpos = tl.load(q_pos_ptr + tq, mask=mask_r, other=-1)
    m_i = tl.full([BLOCK_T * BLOCK_G], float("-inf"), ACC_DTYPE)
    l_i = tl.zeros([BLOCK_T * BLOCK_G], ACC_DTYPE)
    acc = tl.zeros([BLOCK_T * BLOCK_G, BLOCK_DV], ACC_DTYPE)
    offs_j = tl.arange(0, BLOCK_KV)
    list_row = block_idx_ptr + ((b * T + t0) * HKV + g) * n_listed   # the tile's first query's list (shared)
    lo = sp * split_len
    hi = tl.minimum(lo + split_len, n_listed)
    for i in range(lo, hi):
        bid = tl.load(list_row + i)
        s = bid * KV_BLOCK + offs_j
        mask_s = (offs_j < KV_BLOCK) & (s >= 0) & (s < S)          # bid = -1 gives s < 0: nothing loads
        kv = (b * S + tl.where(mask_s, s, 0)).to(tl.int64) * HKV + g
        kt = tl.load(k_ptr + kv[:, None] * D + offs_d[None, :], mask=mask_s[:, None] & mask_d[None, :], other=0.0)
        vt = tl.load(v_ptr + kv[:, None] * DV + offs_dv[None, :], mask=mask_s[:, None] & mask_dv[None, :],
                     other=0.0)
        logit = tl.dot(q, tl.trans(kt), input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE) * scale
        visible = mask_s[None, :] & (s[None, :] <= qpos[:, None])
        logit = tl.where(visible, logit, float("-inf"))
        m_i, l_i, acc = online_softmax_step(m_i, l_i, acc, logit, vt, ACC_DTYPE, DOT_PRECISION)
    if SPLIT:   # one query per program (BLOCK_T = 1): partials laid out (B*T, Hkv, n_splits, G) for the combine
        prow = (((b * T + t0) * HKV + g) * n_splits + sp) * G + hj
        tl.store(part_m_ptr + prow, m_i, mask=mask_r)
        tl.store(part_l_ptr + prow, l_i, mask=mask_r)
        tl.store(part_acc_ptr + prow[:, None] * DV + offs_dv[None, :], acc, mask=mask_r[:, None] & mask_dv[None, :])
    else:
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        tl.store(o_ptr + qrow[:, None] * DV + offs_dv[None, :], out.to(o_ptr.dtype.element_ty),
                 mask=mask_r[:, None] & mask_dv[None, :])


# public: gpu_track.targets compiles it ahead of time for each student GPU
KERNELS = {"attention": _block_attn_kernel}


def tile_uniform(block_idx: torch.Tensor, block_t: int) -> bool:
    """True when every run of ``block_t`` consecutive queries lists the same blocks (so the tiled launch is exact)."""
    # any device (a host copy of the lists too): not check_tensor, which wants the kernels' device
    got = (f"shape {tuple(block_idx.shape)}, dtype {block_idx.dtype}" if isinstance(block_idx, torch.Tensor)
           else type(block_idx).__name__)
    check(isinstance(block_idx, torch.Tensor) and block_idx.ndim == 4 and block_idx.dtype in INT_DTYPES,
          f"block_idx must be a (B, T, Hkv, nb) integer torch tensor, got {got}")
    block_t = check_tile("block_t", block_t, lo=1)
    B, T, Hkv, nb = block_idx.shape
    pad = (-T) % block_t
    bi = block_idx
    if pad:  # repeat the last row so a ragged last tile compares with itself
        bi = torch.cat([bi, bi[:, -1:].expand(B, pad, Hkv, nb)], dim=1)
    if bi.numel() == 0:      # no query, head or listed block: every tile lists the same (empty) blocks
        return True
    tiles = bi.reshape(B, -1, block_t, Hkv, nb)
    return bool((tiles == tiles[:, :, :1]).all())


def check_block_sparse_args(q, k, v, block_idx, block_size, scale, block_t, nsplit=None):
    """The torch wrapper's contract (shapes, dtypes, devices, block-index range); ValueError naming the argument.
    Returns Nb, the number of blocks of size ``block_size`` covering S (the last one may be partial)."""
    B, S, Hq, Hkv, d, _ = check_gqa_operands(q, k, v)
    T = q.shape[1]
    block_size = check_int("block_size", block_size)
    n_blocks = triton.cdiv(S, block_size)
    check_tensor("block_idx", block_idx, (B, T, Hkv, None), INT_DTYPES, like=q,
                 doc=f"(B={B}, T={T}, Hkv={Hkv}, nb) integers")
    check_range("block_idx", block_idx, -1, n_blocks)   # -1 pads; a block >= Nb holds no key
    check_no_repeats("block_idx", block_idx, "block")   # a repeat would be read, and weigh, twice
    check_scale(scale)
    if block_t is not None:
        check_tile("block_t", block_t, lo=1)
    if nsplit is not None:
        check_int("nsplit", nsplit)
    return n_blocks


@on_tensor_cores("q", "k", "v")
def block_sparse_attention(q, k, v, block_idx, block_size: int = 64, scale=None, q_pos=None,
                           block_t: int | None = None, num_warps: int = 4, num_stages: int = 2,
                           nsplit: int | None = None):
    """q: (B, T, Hq, d); k: (B, S, Hkv, d); v: (B, S, Hkv, dv); block_idx: (B, T, Hkv, nb) int in [-1, Nb), -1
    padded, no block twice in a row (refused: it would be read twice), Nb = ceil(S / block_size); q_pos: (T,) int in
    [0, S), default S - T + arange(T).
    Returns o: (B, T, Hq, dv) in q's dtype.

    ``block_t``: queries per program (a power of two); by default the largest power of two <= 128 / G that keeps
    the launch exact (tile_uniform), else 1.
    ``nsplit``: slices of each block list run by separate programs and merged after (split-K), only where a
    program holds one query; default: enough for ~4 programs per SM of an H200 when B·T·Hkv is small.
    """
    check_block_sparse_args(q, k, v, block_idx, block_size, scale, block_t, nsplit)
    block_t, nsplit = (None if a is None else int(a) for a in (block_t, nsplit))
    B, T, Hq, d = q.shape
    S, Hkv, dv = k.shape[1], k.shape[2], v.shape[3]
    # a block of >= S tokens is the one block [0, S): the same attention, and a tile the kernel can hold
    block_size = min(int(block_size), max(S, 1))
    q_pos = query_positions(q_pos, T, S, like=q, hi=S)
    G = Hq // Hkv
    BG = pow2(G, 1)
    block_idx = block_idx.to(torch.int32).contiguous()
    o = alloc((B, T, Hq, dv), q.dtype, q.device)
    n_listed = block_idx.shape[3]
    if B * T == 0 or n_listed == 0:                    # no block listed: 0, as the numpy twin
        o.zero_()
        return o
    if block_t is None:
        block_t = max(1, 128 // BG) if T > 1 else 1
        while block_t > 1 and not tile_uniform(block_idx, block_t):
            block_t //= 2
    block_t = max(block_t, triton.cdiv(16, BG))        # tl.dot needs >= 16 rows: pad rows (masked) if needed
    if block_t > 1 and T > 1 and not tile_uniform(block_idx, block_t):   # (one query is always tile-uniform)
        # rows padded past G in one query: only legal when each tile is a single real query
        block_t_eff = 1
    else:
        block_t_eff = block_t
    if block_t_eff == 1 and BG < 16:
        BG = 16                                        # pad heads instead of queries
    q, scale = fold_scale(q, scale, d)
    meta = dict(HQ=Hq, HKV=Hkv, G=G, D=d, DV=dv, KV_BLOCK=block_size, BLOCK_T=block_t_eff, BLOCK_G=BG,
                BLOCK_KV=pow2(block_size), BLOCK_D=pow2(d), BLOCK_DV=pow2(dv), ACC_DTYPE=acc_dtype(q.dtype),
                DOT_PRECISION=dot_precision(q.dtype), num_warps=num_warps, num_stages=num_stages)
    args = (q.contiguous(), k.contiguous(), v.contiguous(), block_idx, q_pos)
    if block_t_eff > 1 or n_listed <= 1:
        nsplit = 1
    elif nsplit is None:
        nsplit = max(1, min(n_listed, TARGET_PROGRAMS // (B * T * Hkv)))
    split_len, nsplit = split_chunk(max(n_listed, 1), 1, nsplit)
    if nsplit == 1:
        _block_attn_kernel[(B, triton.cdiv(T, block_t_eff), Hkv)](*args, o, o, o, o, scale, T, S, n_listed,
                                                                  max(n_listed, 1), 1, SPLIT=False, **meta)
        return o
    acc_t = acc_torch_dtype(q.dtype)
    part_m = alloc((B * T, Hkv, nsplit, G), acc_t, q.device)
    part_l = alloc(part_m.shape, acc_t, q.device)
    part_acc = alloc((B * T, Hkv, nsplit, G, dv), acc_t, q.device)
    _block_attn_kernel[(B, T, Hkv * nsplit)](*args, o, part_m, part_l, part_acc, scale, T, S, n_listed, split_len,
                                             nsplit, SPLIT=True, **meta)
    combine_splits(part_m, part_l, part_acc, None, o.view(B * T, Hq, dv))
    return o
