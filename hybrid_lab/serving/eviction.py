"""Marconi's FLOP-aware eviction score: which cached node to drop (Marconi §4.2; lecture 10 §4.3).

Score of a cached node n, the lowest is evicted::

    S(n) = recency(n) + α · flop_efficiency(n)         both min-max normalized to [0, 1] over the current nodes
    flop_efficiency(n) = FLOPs a hit on n saves, relative to its parent / bytes n holds (its edge's KV + its state)

α = 0 is LRU. Why FLOPs per byte for hybrids: a Transformer's KV grows with the FLOPs it saves, so recency alone is
enough; an SSM state has a fixed size, so a long prefix saves many more FLOPs per byte than a short one.

This is the bottom of the cache policies: ``radix_cache`` imports it; the tuning of α by replay (``marconi``) sits
above the cache.
"""
from __future__ import annotations

import numpy as np

from hybrid_lab.core.checks import finite_array, nonneg_number


def normalize(x) -> np.ndarray:
    """Min-max to [0, 1] (all zeros when x is constant). x: (n,) finite."""
    return _normalize(finite_array("x", x, ndim=1, shape_doc="(n,)").astype(np.float64))


def flop_efficiency(saved_flops, nbytes) -> np.ndarray:
    """FLOPs saved per byte held, (n,); a node holding no bytes gets 0 (it costs nothing to keep).

    saved_flops, nbytes: (n,) finite, >= 0.
    """
    saved, nbytes = _check_pair(saved_flops, nbytes)
    return _efficiency(saved, nbytes)


def eviction_scores(last_access, saved_flops, nbytes, alpha: float) -> np.ndarray:
    """Marconi's score per node: normalized recency + α · normalized FLOP efficiency (the lowest is evicted first).

    last_access, saved_flops, nbytes: (n,) over the current nodes (finite; FLOPs and bytes >= 0); alpha >= 0.
    Returns (n,) float64.
    """
    alpha = nonneg_number("alpha", alpha)
    t = finite_array("last_access", last_access, ndim=1, shape_doc="(n,)")
    saved, nbytes = _check_pair(saved_flops, nbytes)
    if t.shape != saved.shape:
        raise ValueError(f"last_access {t.shape} and saved_flops {saved.shape} must have the same shape")
    return node_scores(t, saved, nbytes, alpha)


def node_scores(last_access, saved_flops, nbytes, alpha: float) -> np.ndarray:
    """:func:`eviction_scores` without the argument checks, for the cache: its arrays are valid by construction, and
    checking them again on every eviction would cost about a tenth of a replay."""
    return _normalize(last_access) + alpha * _normalize(_efficiency(saved_flops, nbytes))


def _check_pair(saved_flops, nbytes):
    saved = finite_array("saved_flops", saved_flops, ndim=1, shape_doc="(n,)").astype(np.float64)
    nbytes = finite_array("nbytes", nbytes, ndim=1, shape_doc="(n,)").astype(np.float64)
    if saved.shape != nbytes.shape:
        raise ValueError(f"saved_flops {saved.shape} and nbytes {nbytes.shape} must have the same shape")
    for name, a in (("saved_flops", saved), ("nbytes", nbytes)):
        if a.size and a.min() < 0:
            raise ValueError(f"{name} must be >= 0, got min {a.min():.6g}")
    return saved, nbytes


def _normalize(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return x
    lo, hi = x.min(), x.max()
    return (x - lo) / (hi - lo) if hi > lo else np.zeros_like(x)


def _efficiency(saved, nbytes) -> np.ndarray:
    saved = np.asarray(saved, dtype=np.float64)
    nbytes = np.asarray(nbytes, dtype=np.float64)
    return np.divide(saved, nbytes, out=np.zeros_like(saved), where=nbytes > 0)
