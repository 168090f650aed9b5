"""Token-level sparse attention: each query attends to an explicit index set of cached positions.

This is the numpy twin of ``gpu_track``'s ``sparse_attention`` kernel and the shared primitive of DeepSeek's DSA
(top-k by the lightning indexer) and HySparse2's SA layers (forced window ∪ top-k by the FA's scores).

Conventions (shared with the kernel):
- ``idx[b, t, g, :]`` lists the positions query t of KV group g may read, padded with -1. Entries must be unique.
  All ``Hq // Hkv`` query heads of a group share the group's set (MQA when Hkv = 1, GQA otherwise).
- ONE softmax over the listed positions (renormalized over the selected set). A query with no valid entry outputs 0.
- Causality is the caller's job: the index set decides what is visible.
- ``sink`` (Hq,) is an optional learnable per-head sink logit: it adds ``exp(sink)`` to the softmax denominator
  (a "no-op" slot that can absorb probability mass), as in HySparse2's sparse layers.
"""
from __future__ import annotations

import numpy as np

from hybrid_lab.core.blocks import softmax_with_sink
from hybrid_lab.ops.registry import swappable


def query_positions(q_pos, T: int, S: int) -> np.ndarray:
    """Absolute positions of T queries over S keys: the given (T,) ints >= 0, or by default the last T positions
    (``S - T + arange(T)``, a prefill chunk or a decode step at the end of the cache)."""
    if q_pos is None:
        if T > S:
            raise ValueError(f"without q_pos the T={T} queries are the last T of S={S} keys, so T must be <= S")
        return S - T + np.arange(T)
    q_pos = np.asarray(q_pos)
    if q_pos.shape != (T,) or not np.issubdtype(q_pos.dtype, np.integer) or (q_pos < 0).any():
        raise ValueError(f"q_pos must be a (T={T},) array of integers >= 0, got shape {q_pos.shape} dtype {q_pos.dtype}")
    return q_pos


def topk_indices(scores: np.ndarray, k: int) -> np.ndarray:
    """Deterministic top-k along the last axis.

    scores: (..., S) with ``-inf`` (or NaN-free masked values) for positions that may not be selected.
    Returns (..., k) int64 positions in descending score order; ties go to the smaller position; slots beyond the
    number of selectable (finite) positions are -1. ``k >= S`` means "all selectable positions".
    """
    scores = np.asarray(scores)
    if not (isinstance(k, (int, np.integer)) and k > 0):
        raise ValueError(f"k must be a positive integer, got {k!r}")
    if scores.ndim < 1:
        raise ValueError(f"scores must have at least one axis (..., S), got shape {scores.shape}")
    if np.isnan(scores).any():
        raise ValueError("scores contain NaN")
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
    q, k, v, idx = np.asarray(q), np.asarray(k), np.asarray(v), np.asarray(idx)
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"q, k, v must be 4-D (B, T, H, d); got q{q.shape} k{k.shape} v{v.shape}")
    B, T, Hq, d = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    if k.shape[0] != B or k.shape[3] != d or v.shape[:3] != k.shape[:3]:
        raise ValueError(f"k must be (B={B}, S, Hkv, d={d}) and v (B, S, Hkv, dv) matching it; got k{k.shape} v{v.shape}")
    if Hkv == 0 or Hq % Hkv:
        raise ValueError(f"query heads Hq={Hq} must be a multiple of KV heads Hkv={Hkv}")
    if idx.ndim != 4 or idx.shape[:3] != (B, T, Hkv):
        raise ValueError(f"idx must have shape (B={B}, T={T}, Hkv={Hkv}, K), got {idx.shape}")
    if not np.issubdtype(idx.dtype, np.integer):
        raise ValueError(f"idx must be an integer array, got dtype {idx.dtype}")
    if (idx < -1).any() or (idx >= S).any():
        raise ValueError(f"idx entries must lie in [-1, S={S}), got range [{idx.min()}, {idx.max()}]")
    if np.isnan(q).any():
        raise ValueError("q contains NaN")
    srt = np.sort(idx, axis=-1)
    if ((srt[..., 1:] == srt[..., :-1]) & (srt[..., 1:] >= 0)).any():
        raise ValueError("idx must not repeat a position within one index set")
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
    return o.reshape(B, T, Hq, v.shape[3]).astype(np.result_type(q.dtype, np.float32), copy=False)
