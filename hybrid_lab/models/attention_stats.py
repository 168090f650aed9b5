"""Attention diagnostics: is this attention concentrated enough for top-k sparse attention?

- :func:`attention_probs`: dense causal softmax probabilities p[b, t, h, s].
- :func:`attention_entropy`: entropy (nats) of each row; its maximum is ``ln(#visible keys)`` (uniform attention).
- :func:`topk_mass`: probability mass held by the k largest entries of each row.
- :func:`topk_output_error`: relative error of top-k sparse attention (one softmax renormalized over the selected
  set, :func:`hybrid_lab.ops.sparse_attention.sparse_attention`) against dense attention.

Selection is per KV group, as in DSA's MQA mode: the group's query heads share one index set, chosen by the
attention probability summed over those heads (ties to the smaller position, see ``topk_indices``).
"""
from __future__ import annotations

import numpy as np

from hybrid_lab.ops.sparse_attention import query_positions, sparse_attention, topk_indices


def _check_qkv(q, k, v=None):
    q, k = np.asarray(q), np.asarray(k)
    if q.ndim != 4 or k.ndim != 4:
        raise ValueError(f"q must be (B, T, Hq, d) and k (B, S, Hkv, d); got q{q.shape} k{k.shape}")
    if k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3]:
        raise ValueError(f"k must be (B={q.shape[0]}, S, Hkv, d={q.shape[3]}), got {k.shape}")
    if k.shape[2] == 0 or q.shape[2] % k.shape[2]:
        raise ValueError(f"query heads Hq={q.shape[2]} must be a multiple of KV heads Hkv={k.shape[2]}")
    if np.isnan(q).any():
        raise ValueError("q contains NaN")
    if np.isnan(k).any():
        raise ValueError("k contains NaN")
    if v is not None:
        v = np.asarray(v)
        if v.ndim != 4 or v.shape[:3] != k.shape[:3]:
            raise ValueError(f"v must be (B, S, Hkv, dv) matching k{k.shape[:3]}, got {v.shape}")
    return q, k, v


def attention_probs(q, k, scale=None, q_pos=None) -> np.ndarray:
    """Dense causal attention probabilities.

    q: (B, T, Hq, d), k: (B, S, Hkv, d); scale defaults to d**-0.5; q_pos: (T,) absolute query positions
    (default S - T + arange(T)); key s is visible to query t iff s <= q_pos[t]. Returns p: (B, T, Hq, S), rows sum to 1.
    """
    q, k, _ = _check_qkv(q, k)
    B, T, Hq, d = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    pos = query_positions(q_pos, T, S)
    scale = d ** -0.5 if scale is None else scale
    qg = q.reshape(B, T, Hkv, Hq // Hkv, d)
    logits = np.einsum("btgjd,bsgd->btgjs", qg, k).reshape(B, T, Hq, S) * scale
    visible = np.arange(S)[None, :] <= pos[:, None]                    # (T, S)
    logits = np.where(visible[None, :, None, :], logits, -np.inf)
    m = logits.max(axis=-1, keepdims=True)
    p = np.exp(logits - m)
    return p / p.sum(axis=-1, keepdims=True)


def dense_attention(q, k, v, scale=None, q_pos=None) -> np.ndarray:
    """Dense causal attention output o: (B, T, Hq, dv) (the reference top-k attention is compared with)."""
    q, k, v = _check_qkv(q, k, v)
    p = attention_probs(q, k, scale, q_pos)
    B, T, Hq, S = p.shape
    Hkv = k.shape[2]
    pg = p.reshape(B, T, Hkv, Hq // Hkv, S)
    return np.einsum("btgjs,bsge->btgje", pg, v).reshape(B, T, Hq, v.shape[3])


def attention_entropy(p) -> np.ndarray:
    """Entropy in nats of each row: p (..., S) -> (...,). 0·ln 0 counts as 0. Uniform over n keys gives ln n."""
    p = np.asarray(p, dtype=np.float64)
    if p.ndim < 1 or (p < 0).any() or np.isnan(p).any():
        raise ValueError(f"p must be an array (..., S) of probabilities >= 0 without NaN, got shape {p.shape}")
    logp = np.log(np.where(p > 0, p, 1.0))
    return -(p * logp).sum(axis=-1)


def entropy_per_head(p) -> np.ndarray:
    """Mean entropy per head: p (B, T, H, S) -> (H,)."""
    p = np.asarray(p)
    if p.ndim != 4:
        raise ValueError(f"p must be (B, T, H, S), got shape {p.shape}")
    return attention_entropy(p).mean(axis=(0, 1))


def topk_mass(p, k: int) -> np.ndarray:
    """Probability mass held by the k largest entries of each row: p (..., S) -> (...,). k >= S gives the row sum."""
    p = np.asarray(p, dtype=np.float64)
    if not (isinstance(k, (int, np.integer)) and k > 0):
        raise ValueError(f"k must be a positive integer, got {k!r}")
    if p.ndim < 1 or np.isnan(p).any():
        raise ValueError(f"p must be an array (..., S) without NaN, got shape {p.shape}")
    S = p.shape[-1]
    if k >= S:
        return p.sum(axis=-1)
    return -np.partition(-p, k - 1, axis=-1)[..., :k].sum(axis=-1)


def oracle_topk(p, n_kv_heads: int, k: int) -> np.ndarray:
    """The ideal MQA/GQA index set: top-k of the probability summed over each KV group's query heads.

    p: (B, T, Hq, S) dense probabilities (0 where not visible). Returns idx: (B, T, Hkv, k), -1 padded.
    Zero-probability (invisible) positions are never selected, so k >= #visible keys means "all visible keys".
    """
    p = np.asarray(p)
    if p.ndim != 4:
        raise ValueError(f"p must be (B, T, Hq, S), got shape {p.shape}")
    B, T, Hq, S = p.shape
    if not (isinstance(n_kv_heads, (int, np.integer)) and n_kv_heads > 0 and Hq % n_kv_heads == 0):
        raise ValueError(f"n_kv_heads must be a positive divisor of Hq={Hq}, got {n_kv_heads!r}")
    score = p.reshape(B, T, n_kv_heads, Hq // n_kv_heads, S).sum(axis=3)
    # Keys with probability exactly 0 (invisible, or underflowed) are never picked: they add nothing to the output.
    return topk_indices(np.where(score > 0, score, -np.inf), k)


def topk_output_error(q, k, v, topk: int, scale=None, q_pos=None, idx=None) -> np.ndarray:
    """Relative error ||o_topk - o_dense|| / ||o_dense|| per (b, t, h): (B, T, Hq).

    q: (B, T, Hq, d); k, v: (B, S, Hkv, d/dv). ``idx`` (B, T, Hkv, K) is the index set to test (e.g. a lightning
    indexer's choice); by default the oracle top-``topk`` set of :func:`oracle_topk`. The sparse output is
    :func:`hybrid_lab.ops.sparse_attention.sparse_attention`: one softmax renormalized over the selected set.
    """
    q, k, v = _check_qkv(q, k, v)
    if not (isinstance(topk, (int, np.integer)) and topk > 0):
        raise ValueError(f"topk must be a positive integer, got {topk!r}")
    scale = q.shape[3] ** -0.5 if scale is None else scale
    p = attention_probs(q, k, scale, q_pos)
    o_dense = np.einsum("btgjs,bsge->btgje", p.reshape(*p.shape[:2], k.shape[2], -1, p.shape[3]), v
                        ).reshape(*q.shape[:3], v.shape[3])
    if idx is None:
        idx = oracle_topk(p, k.shape[2], topk)
    o_sparse = sparse_attention(q, k, v, np.asarray(idx), scale=scale)
    num = np.linalg.norm(o_sparse - o_dense, axis=-1)
    return num / np.maximum(np.linalg.norm(o_dense, axis=-1), 1e-30)
