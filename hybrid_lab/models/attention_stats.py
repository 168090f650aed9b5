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

from hybrid_lab.core import checks
from hybrid_lab.core.blocks import masked_attention, masked_attention_probs
from hybrid_lab.ops.sparse_attention import sparse_attention, topk_indices


def _causal(q, k, scale, q_pos):
    """Checked operands plus what the shared masked attention needs: (q, k, visible (T, S), scale)."""
    q, k, _ = checks.qkv(q, k)
    T, S = q.shape[1], k.shape[1]
    pos = checks.query_positions(q_pos, T, S)
    scale = q.shape[3] ** -0.5 if scale is None else checks.positive_number("scale", scale)
    return q, k, np.arange(S)[None, :] <= pos[:, None], scale


def attention_probs(q, k, scale=None, q_pos=None) -> np.ndarray:
    """Dense causal attention probabilities (:func:`hybrid_lab.core.blocks.masked_attention_probs` per sequence).

    q: (B, T, Hq, d), k: (B, S, Hkv, d), finite; scale > 0 defaults to d**-0.5; q_pos: (T,) absolute query
    positions in [0, S) (default S - T + arange(T)); key s is visible to query t iff s <= q_pos[t].
    Returns p: (B, T, Hq, S), rows sum to 1.
    """
    q, k, visible, scale = _causal(q, k, scale, q_pos)
    return np.stack([masked_attention_probs(qb, kb, visible, scale) for qb, kb in zip(q, k)])


def dense_attention(q, k, v, scale=None, q_pos=None) -> np.ndarray:
    """Dense causal attention output o: (B, T, Hq, dv) (the reference top-k attention is compared with).

    q, k, scale, q_pos as in :func:`attention_probs`; v: (B, S, Hkv, dv) finite.
    """
    return _dense(q, k, v, scale, q_pos)[0]


def _dense(q, k, v, scale, q_pos):
    """(o (B, T, Hq, dv), p (B, T, Hq, S)) of dense causal attention, one sequence at a time."""
    q, k, visible, scale = _causal(q, k, scale, q_pos)
    v = checks.finite_array("v", v, 4, "(B, S, Hkv, dv)")       # qkv() treats v=None as "no v"
    _, _, v = checks.qkv(q, k, v)
    o, p = zip(*(masked_attention(qb, kb, vb, visible, scale) for qb, kb, vb in zip(q, k, v)))
    return np.stack(o), np.stack(p)


def _probs(name, p, ndim=None, shape_doc=""):
    """Probabilities: a finite array (..., S) with entries >= 0."""
    p = checks.finite_array(name, p, ndim, shape_doc).astype(np.float64)
    if p.ndim < 1:
        raise ValueError(f"{name} must be an array (..., S), got a scalar")
    if (p < 0).any():
        raise ValueError(f"{name} must be >= 0, got min {p.min():.6g}")
    return p


def attention_entropy(p) -> np.ndarray:
    """Entropy in nats of each row: p (..., S) probability rows (finite, >= 0, summing to 1) -> (...,).

    0·ln 0 counts as 0. Uniform over n keys gives ln n.
    """
    p = checks.prob_rows("p", p)
    logp = np.log(np.where(p > 0, p, 1.0))
    return -(p * logp).sum(axis=-1)


def entropy_per_head(p) -> np.ndarray:
    """Mean entropy per head: p (B, T, H, S) -> (H,)."""
    p = checks.array("p", p, 4, "(B, T, H, S)")
    return attention_entropy(p).mean(axis=(0, 1))


def topk_mass(p, k: int) -> np.ndarray:
    """Probability mass held by the k largest entries of each row: p (..., S) -> (...,). k >= S gives the row sum.

    p: finite, >= 0 (rows need not sum to 1: a head-averaged or masked distribution is fine).
    """
    p = _probs("p", p)
    k = checks.pos_int("k", k)
    S = p.shape[-1]
    if k >= S:
        return p.sum(axis=-1)
    return -np.partition(-p, k - 1, axis=-1)[..., :k].sum(axis=-1)


def oracle_topk(p, n_kv_heads: int, k: int) -> np.ndarray:
    """The ideal MQA/GQA index set: top-k of the probability summed over each KV group's query heads.

    p: (B, T, Hq, S) dense probabilities (0 where not visible). Returns idx: (B, T, Hkv, k), -1 padded.
    Zero-probability (invisible) positions are never selected, so k >= #visible keys means "all visible keys".
    """
    p = _probs("p", p, 4, "(B, T, Hq, S)")
    B, T, Hq, S = p.shape
    checks.heads(Hq, n_kv_heads, "p's query heads Hq", "n_kv_heads")
    k = checks.pos_int("k", k)
    score = p.reshape(B, T, n_kv_heads, Hq // n_kv_heads, S).sum(axis=3)
    # Keys with probability exactly 0 (invisible, or underflowed) are never picked: they add nothing to the output.
    return topk_indices(np.where(score > 0, score, -np.inf), k)


def topk_output_error(q, k, v, topk: int, scale=None, q_pos=None, idx=None) -> np.ndarray:
    """Relative error ||o_topk - o_dense|| / ||o_dense|| per (b, t, h): (B, T, Hq).

    q: (B, T, Hq, d); k, v: (B, S, Hkv, d/dv); scale, q_pos as in :func:`attention_probs`. ``idx`` (B, T, Hkv, K)
    is the index set to test (e.g. a lightning indexer's choice); by default the oracle top-``topk`` set of
    :func:`oracle_topk`. The sparse output is :func:`hybrid_lab.ops.sparse_attention.sparse_attention`: one softmax
    renormalized over the selected set.
    """
    q, k, v = checks.qkv(q, k, v)
    topk = checks.pos_int("topk", topk)
    scale = q.shape[3] ** -0.5 if scale is None else checks.positive_number("scale", scale)
    o_dense, p = _dense(q, k, v, scale, q_pos)
    if idx is None:
        idx = oracle_topk(p, k.shape[2], topk)
    o_sparse = sparse_attention(q, k, v, np.asarray(idx), scale=scale)
    num = np.linalg.norm(o_sparse - o_dense, axis=-1)
    return num / np.maximum(np.linalg.norm(o_dense, axis=-1), 1e-30)
