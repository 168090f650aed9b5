"""Block-sparse attention: each query reads the tokens of a list of KV blocks (InfLLM-V2, SparDA §3.1).

The attended set of query i is a union of whole blocks of ``block_size`` tokens (B_init ∪ B_local(i) ∪ B_topk(i),
chosen by ``hybrid_lab.models.infllm``), with causality inside a block: token s is read iff its block is listed
and s <= q_pos[i]. ONE softmax over the readable tokens, so listing every block gives dense causal attention.
Blocks are the unit that is moved and attended (64 tokens in the papers); ``contracts.n_blocks`` counts them.

Numpy twin of ``gpu_track.block_sparse``. The arguments are checked once by ``contracts.check_block_sparse_attention``.
"""
from __future__ import annotations

import numpy as np

from hybrid_lab.core.blocks import softmax_with_sink
from hybrid_lab.ops.contracts import float_dtype, n_blocks
from hybrid_lab.ops.registry import swappable


@swappable("block_sparse_attention")
def block_sparse_attention(q, k, v, block_idx, block_size=64, scale=None, q_pos=None):
    """Attention restricted to listed KV blocks: one softmax over the causal tokens of the selected blocks.

    q: (B, T, Hq, d); k: (B, S, Hkv, d); v: (B, S, Hkv, dv); block_idx: (B, T, Hkv, nb) int block ids, -1
    padded, unique per row; the Hq // Hkv heads of a group share the group's blocks. Query t reads token s iff
    s's block is listed and s <= q_pos[t] (default S - T + arange(T)). scale defaults to d**-0.5.
    A query with no readable token (or nb = 0) outputs 0. Returns o: (B, T, Hq, dv).
    """
    Bt, T, Hq, d = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    Nb = n_blocks(S, block_size)
    G, dv = Hq // Hkv, v.shape[3]
    scale = d ** -0.5 if scale is None else scale
    # block list -> (B, T, Hkv, Nb) membership (column Nb absorbs the -1 padding)
    member = np.zeros((Bt, T, Hkv, Nb + 1), bool)
    np.put_along_axis(member, np.where(block_idx < 0, Nb, block_idx), True, axis=-1)
    member = member[..., :Nb]
    o = np.zeros((Bt, T, Hkv, G, dv), float_dtype(q))
    qg = q.reshape(Bt, T, Hkv, G, d)
    s_ar = np.arange(S)
    block_of = s_ar // block_size                                            # (S,) each token's block
    chunk = max(1, int(2 ** 22 // max(1, Bt * Hq * S)))                      # bound the (.., S) logits buffer
    for t0 in range(0, T, chunk):
        t1 = min(T, t0 + chunk)
        tok = member[:, t0:t1][..., block_of]                               # (B, t, Hkv, S)
        tok &= (s_ar[None, :] <= q_pos[t0:t1, None])[None, :, None, :]
        logits = np.einsum("btgjd,bsgd->btgjs", qg[:, t0:t1], k) * scale
        p = softmax_with_sink(np.where(tok[:, :, :, None, :], logits, -np.inf))   # no readable token: p = 0
        o[:, t0:t1] = np.einsum("btgjs,bsgd->btgjd", p, v)
    return o.reshape(Bt, T, Hq, dv)
