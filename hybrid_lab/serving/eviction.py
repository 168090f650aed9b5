"""Marconi's FLOP-aware eviction score: which cached node to drop (Marconi §4.2; Lecture 10 §4.3).

Score of a candidate node n (a node with at most one child), the lowest is evicted::

    S(n) = recency(n) + α · flop_efficiency(n)           both min-max normalized to [0, 1]
    flop_efficiency(n) = FLOPs a hit on n saves, relative to its parent / bytes

α = 0 is pure recency. Why FLOPs per byte for hybrids: a Transformer's KV grows with the FLOPs it saves, so recency
alone is enough; an SSM state has a fixed size, so a long prefix saves many more FLOPs per byte than a short one.

Two variants of the score, named by :data:`SCORES` (``variant=``):

- ``"paper"`` (the default; what the official Marconi simulator, ruipeterpan/marconi, computes):
  recency = normalize(1 / (now − last_access)), a node's *age* in requests, so the few most recent nodes are far
  apart and all old ones are close to 0; the bytes in the efficiency are those of the node's **whole prefix** (the
  KV of every token from the root to the node + its state), and both normalizations run over the **candidates**.
- ``"lecture"`` (this lab's earlier score, from Lecture 10 §4.3's wording "both normalized over all current nodes"):
  recency = normalize(last_access), linear in time; the bytes are the node's **own** (its edge's KV + its state),
  and both normalizations run over **all** nodes.

The two put very different weights on the same α: with the paper's recency, every node older than a few requests
has recency ≈ 0 and the efficiency term decides among them even at small α; with the linear one, recency spreads
evenly over [0, 1] and an α of 1 is needed for efficiency to outweigh a sizeable gap in time. Their efficiencies
differ too (a whole-prefix denominator grows with depth, an own-bytes one does not). So "α = 0.5" names a different
policy in each: α tuned for one does not carry over to the other.

This is the bottom of the cache policies: ``radix_cache`` imports it; the tuning of α by replay (``marconi``) sits
above the cache.
"""
from __future__ import annotations

import math

import numpy as np

from hybrid_lab.core.checks import finite_array, finite_number, nonneg_number

SCORES = ("paper", "lecture")


def normalize(x) -> np.ndarray:
    """Min-max to [0, 1] (all zeros when x is constant). x: (n,) finite."""
    return _normalize(finite_array("x", x, ndim=1, shape_doc="(n,)").astype(np.float64))


def flop_efficiency(saved_flops, nbytes) -> np.ndarray:
    """FLOPs saved per byte held, (n,); a node holding no bytes gets 0 (it costs nothing to keep).

    saved_flops, nbytes: (n,) finite, >= 0.
    """
    saved, nbytes = _check_pair(saved_flops, nbytes)
    return _efficiency(saved, nbytes)


def _check_variant(variant):
    if variant not in SCORES:
        raise ValueError(f"variant must be one of {SCORES}, got {variant!r}")
    return variant


def eviction_scores(last_access, saved_flops, nbytes, alpha: float, now: float | None = None,
                    variant: str = "paper") -> np.ndarray:
    """Marconi's score per node: normalized recency + α · normalized FLOP efficiency (the lowest is evicted first).

    last_access, saved_flops, nbytes: (n,) over the nodes scored (finite; FLOPs and bytes >= 0); alpha >= 0.
    ``variant="paper"`` (default): recency = normalize(1 / (now − last_access)); ``now`` (default max(last_access)
    + 1) must be later than every last_access. ``variant="lecture"``: recency = normalize(last_access) (``now`` is
    not used). Which bytes and which nodes to pass differ between the variants (module docstring). Returns (n,)
    float64.
    """
    alpha = nonneg_number("alpha", alpha)
    _check_variant(variant)
    t = finite_array("last_access", last_access, ndim=1, shape_doc="(n,)")
    saved, nbytes = _check_pair(saved_flops, nbytes)
    if t.shape != saved.shape:
        raise ValueError(f"last_access {t.shape} and saved_flops {saved.shape} must have the same shape")
    if now is not None:
        now = finite_number("now", now)
    return node_scores(t, saved, nbytes, alpha, now, variant)


def node_scores(last_access, saved_flops, nbytes, alpha: float, now: float | None = None,
                variant: str = "paper") -> np.ndarray:
    """:func:`eviction_scores` for the cache's hot path (one call per eviction), checked at almost no cost: ranks,
    dtypes and lengths from the arrays' attributes; the values from the min and max that the normalizations take
    anyway, plus one min and max of nbytes. It refuses every input that would change a score (the FLOPs of a node
    that holds no bytes are not read: its efficiency is 0 by definition). last_access, saved_flops, nbytes: (n,)
    real; alpha >= 0; now: later than every last_access (paper) or None."""
    if not (type(alpha) is float and 0.0 <= alpha < math.inf):       # the cache passes a checked float
        alpha = nonneg_number("alpha", alpha)
    if variant not in SCORES:
        _check_variant(variant)
    t, saved, nb = _vector("last_access", last_access), _vector("saved_flops", saved_flops), _vector("nbytes", nbytes)
    if not t.shape == saved.shape == nb.shape:
        raise ValueError(f"last_access {t.shape}, saved_flops {saved.shape} and nbytes {nb.shape} must have the "
                         f"same shape (n,)")
    if t.size == 0:
        return t
    lo, hi = nb.min(), nb.max()
    if not (lo >= 0 and hi < math.inf):                                # NaN fails both comparisons
        raise ValueError(f"nbytes must be finite and >= 0, got values in [{lo:.6g}, {hi:.6g}]")
    eff = _efficiency(saved, nb)
    e_lo, e_hi = eff.min(), eff.max()
    if not (e_lo >= 0 and e_hi < math.inf):
        raise ValueError(f"saved_flops must be finite and >= 0, got FLOPs per byte in [{e_lo:.6g}, {e_hi:.6g}]")
    t_lo, t_hi = t.min(), t.max()
    if not (-math.inf < t_lo and t_hi < math.inf):
        raise ValueError(f"last_access must be finite, got values in [{t_lo}, {t_hi}]")
    if variant == "paper":
        if now is None:             # past 2**53, t_hi + 1 == t_hi: the next float keeps the newest age > 0
            now = max(t_hi + 1.0, float(np.nextafter(t_hi, math.inf)))
        elif not (now > t_hi and now < math.inf):
            raise ValueError(f"now must be finite and later than every last_access (max {t_hi}), got {now!r}")
        # 0.5 / (now/2 - t/2) = 1 / (now - t) without overflowing when last_access spans most of the float range
        r = 0.5 / (0.5 * now - 0.5 * t)
        if not np.isfinite(r).all():
            raise ValueError(f"now ({now!r}) must be later than every last_access by a representable gap (max "
                             f"last_access {t_hi})")
        recency = _minmax(r, r.min(), r.max())
    else:
        recency = _minmax(t, t_lo, t_hi)
    return recency + alpha * _minmax(eff, e_lo, e_hi)


def _minmax(x, lo, hi) -> np.ndarray:
    """(x - lo) / (hi - lo), all zeros when hi == lo; halved first where hi - lo overflows (finite x spanning
    more than the float range would give inf / inf = NaN)."""
    if not hi > lo:
        return np.zeros_like(x)
    if math.isinf(float(hi) - float(lo)):
        return (0.5 * x - 0.5 * lo) / (0.5 * hi - 0.5 * lo)
    return (x - lo) / (hi - lo)


def _vector(name, a) -> np.ndarray:
    try:
        a = np.asarray(a)
    except (TypeError, ValueError, RuntimeError) as e:    # a ragged list, a torch bfloat16 tensor (no numpy dtype)
        raise ValueError(f"{name} must be a real (n,) array, got {type(a).__name__} that numpy cannot read: "
                         f"{str(e).splitlines()[0][:100]}") from None
    if a.ndim != 1 or a.dtype.kind not in "fiu":
        raise ValueError(f"{name} must be a real (n,) array, got shape {a.shape} dtype {a.dtype}")
    return a.astype(np.float64, copy=False)


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
    return _minmax(x, x.min(), x.max())


def _efficiency(saved, nbytes) -> np.ndarray:
    saved = np.asarray(saved, dtype=np.float64)
    nbytes = np.asarray(nbytes, dtype=np.float64)
    return np.divide(saved, nbytes, out=np.zeros_like(saved), where=nbytes > 0)
