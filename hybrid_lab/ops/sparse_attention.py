"""Token-level sparse attention: each query attends to an explicit index set of cached positions.

This is the numpy twin of ``gpu_track``'s ``sparse_attention`` kernel and the shared primitive of DeepSeek's DSA
(top-k by the lightning indexer) and HySparse2's SA layers (forced window ∪ top-k by the FA's scores).

Conventions (shared with the kernel):
- ``idx[b, t, g, :]`` lists the positions query t of KV group g may read, padded with -1. Entries must be unique.
  All ``Hq // Hkv`` query heads of a group share the group's set (MQA when Hkv = 1, GQA otherwise).
- ONE softmax over the listed positions (renormalized over the selected set). A query with no valid entry outputs 0,
  and so does every query of an empty index list (K = 0), as the kernel does.
- Causality is the caller's job: the index set decides what is visible.
- ``sink`` (Hq,) is an optional learnable per-head sink logit: it adds ``exp(sink)`` to the softmax denominator
  (a "no-op" slot that can absorb probability mass), as in HySparse2's sparse layers.
- The arguments are checked once by ``contracts.check_sparse_attention`` (run by the registry), not here.
"""
from __future__ import annotations

import numpy as np

from hybrid_lab.core import checks
from hybrid_lab.core.blocks import softmax_with_sink
from hybrid_lab.ops.contracts import float_dtype
from hybrid_lab.ops.registry import swappable


def topk_indices(scores: np.ndarray, k: int) -> np.ndarray:
    """Deterministic top-k along the last axis.

    scores: (..., S) finite, with ``-inf`` for positions that may not be selected (NaN and +inf are refused).
    Returns (..., k) int64 positions in descending score order; ties go to the smaller position; slots beyond the
    number of selectable (finite) positions are -1. ``k >= S`` means "all selectable positions".
    """
    k = checks.pos_int("k", k)
    scores = checks.finite_array("scores", scores, allow_neginf=True)
    if scores.ndim < 1:
        raise ValueError(f"scores must have at least one axis (..., S), got shape {scores.shape}")
    checks.output_size("k", (*scores.shape[:-1], k))
    S = scores.shape[-1]
    kk = min(k, S)
    order = np.argsort(-scores, axis=-1, kind="stable")[..., :kk]  # stable: equal scores keep position order
    picked = np.take_along_axis(scores, order, axis=-1)
    order = np.where(np.isneginf(picked), -1, order).astype(np.int64)
    if kk < k:
        order = np.concatenate([order, np.full(order.shape[:-1] + (k - kk,), -1, np.int64)], axis=-1)
    return order


@swappable("sparse_attention")
def sparse_attention(q, k, v, idx, scale=None, sink=None):
    """o[b,t,h] = Σ_{s ∈ idx[b,t,g(h)]} softmax_s(q·k_s · scale) v_s, one softmax over the index set.

    q: (B, T, Hq, d), k: (B, S, Hkv, d), v: (B, S, Hkv, dv), idx: (B, T, Hkv, K) int, -1 padded;
    scale defaults to d**-0.5; sink: (Hq,) or None. Returns o: (B, T, Hq, dv) in q's float dtype.
    """
    B, T, Hq, d = q.shape
    S, Hkv, K, dv = k.shape[1], k.shape[2], idx.shape[3], v.shape[3]
    out_dtype = float_dtype(q)
    if K == 0 or S == 0:                 # nothing listed (S = 0: every entry is -1): 0, as documented
        return np.zeros((B, T, Hq, dv), out_dtype)
    G = Hq // Hkv
    scale = d ** -0.5 if scale is None else scale
    valid = idx >= 0                                                   # (B, T, Hkv, K)
    safe = np.where(valid, idx, 0)
    bi = np.arange(B)[:, None, None, None]
    gi = np.arange(Hkv)[None, None, :, None]
    ks = k[bi, safe, gi]                                               # (B, T, Hkv, K, d)
    vs = v[bi, safe, gi]                                               # (B, T, Hkv, K, dv)
    qg = q.reshape(B, T, Hkv, G, d)
    logits = np.einsum("btgjd,btgkd->btgjk", qg, ks) * scale           # (B, T, Hkv, G, K)
    logits = np.where(valid[:, :, :, None, :], logits, -np.inf)
    if sink is not None:
        sink = np.asarray(sink, dtype=logits.dtype).reshape(Hkv, G)[None, None, :, :, None]
    p = softmax_with_sink(logits, sink)
    o = np.einsum("btgjk,btgkd->btgjd", p, vs)
    return o.reshape(B, T, Hq, dv).astype(out_dtype, copy=False)
