"""Why reusing a few selected tokens can work: the two error bounds of seed 000 §9 (an explanatory analysis, not a
guarantee the paper makes).

Single head, fixed query and KV. Full attention o = Σ_s p_s v_s. Keep a set S, drop the rest and renormalize:
ô = Σ_{s∈S} p_s v_s / (1 - ε) with ε = Σ_{s∉S} p_s the missing mass. If every ||v_s|| <= V:

    ||o - ô|| <= 2 ε V                                         (bound 1)

Proof: o - ô = Σ_{s∉S} p_s v_s - ε/(1-ε) Σ_{s∈S} p_s v_s; each term has norm <= ε V.

Reuse across layers: S was chosen by a source layer with distribution p (missing mass ε); a later layer's full
distribution q satisfies TV(p, q) = ½ Σ|p - q| <= δ. Then q's mass outside S is <= ε + δ, so the later layer's
renormalized output on S is within

    ||o_q - ô_q|| <= 2 (ε + δ) V                               (bound 2)

Both are tight: put all dropped mass on -u and all kept mass on u (||u|| = V), see :func:`tight_instance`.
"""
from __future__ import annotations

import numpy as np

__all__ = ["missing_mass", "renormalized_output", "sparse_error", "tv_distance", "bound_sparse",
           "bound_reuse", "random_instance", "check_bounds", "tight_instance"]


def _check_dist(name, p):
    p = np.asarray(p, dtype=np.float64)
    if p.ndim < 1:
        raise ValueError(f"{name} must be an array (..., S) of probabilities, got a scalar")
    if (p < 0).any() or not np.allclose(p.sum(-1), 1.0, atol=1e-9):
        raise ValueError(f"{name} must be non-negative and sum to 1 along the last axis "
                         f"(sums in [{p.sum(-1).min():.6g}, {p.sum(-1).max():.6g}])")
    return p


def _check_mask(keep, p):
    keep = np.asarray(keep)
    if keep.dtype != bool or keep.shape != p.shape:
        raise ValueError(f"keep must be a boolean mask of shape {p.shape}, got dtype {keep.dtype} shape {keep.shape}")
    return keep


def missing_mass(p, keep) -> np.ndarray:
    """ε = probability mass outside the kept set. p: (..., S) distribution; keep: (..., S) bool. Returns (...)."""
    p = _check_dist("p", p)
    keep = _check_mask(keep, p)
    return np.where(keep, 0.0, p).sum(-1)


def renormalized_output(p, v, keep) -> np.ndarray:
    """ô = Σ_{s∈S} p_s v_s / Σ_{s∈S} p_s. p: (..., S); v: (..., S, dv); keep: (..., S) bool with a non-empty
    kept set of positive mass. Returns (..., dv)."""
    p = _check_dist("p", p)
    keep = _check_mask(keep, p)
    v = np.asarray(v, dtype=np.float64)
    if v.shape[:-1] != p.shape:
        raise ValueError(f"v must have shape {p.shape + ('dv',)}, got {v.shape}")
    kept = np.where(keep, p, 0.0)
    mass = kept.sum(-1, keepdims=True)
    if (mass <= 0).any():
        raise ValueError("keep must select positions with positive probability mass")
    return np.einsum("...s,...sd->...d", kept / mass, v)


def sparse_error(p, v, keep) -> np.ndarray:
    """||o - ô||_2 with o the full output of p and ô the renormalized output on the kept set. Returns (...)."""
    o = np.einsum("...s,...sd->...d", _check_dist("p", p), np.asarray(v, dtype=np.float64))
    return np.linalg.norm(o - renormalized_output(p, v, keep), axis=-1)


def tv_distance(p, q) -> np.ndarray:
    """Total variation ½ Σ_s |p_s - q_s| between two distributions over the same positions. Returns (...)."""
    p, q = _check_dist("p", p), _check_dist("q", q)
    if p.shape != q.shape:
        raise ValueError(f"p and q must have the same shape, got {p.shape} and {q.shape}")
    return 0.5 * np.abs(p - q).sum(-1)


def bound_sparse(eps, V) -> np.ndarray:
    """Bound 1: 2 ε V."""
    return 2.0 * np.asarray(eps) * np.asarray(V)


def bound_reuse(eps, delta, V) -> np.ndarray:
    """Bound 2: 2 (ε + δ) V, capped at 2V (an output of norm <= V is never further than 2V from another)."""
    return np.minimum(2.0 * (np.asarray(eps) + np.asarray(delta)) * np.asarray(V), 2.0 * np.asarray(V))


def random_instance(rng: np.random.Generator, S: int = 64, k: int = 8, dv: int = 4, peak: float = 3.0,
                    drift: float = 0.5):
    """One random reuse instance: source logits -> p, later-layer logits = source + drift * noise -> q,
    values v (S, dv), kept set = top-k of p. ``peak`` scales the logits (higher = more concentrated attention)."""
    if not (0 < k <= S):
        raise ValueError(f"k must lie in (0, S={S}], got {k}")
    a = peak * rng.standard_normal(S)
    b = a + drift * peak * rng.standard_normal(S)
    p = np.exp(a - a.max()); p /= p.sum()
    q = np.exp(b - b.max()); q /= q.sum()
    v = rng.standard_normal((S, dv)) * rng.uniform(0.2, 2.0)
    keep = np.zeros(S, bool)
    keep[np.argsort(-p, kind="stable")[:k]] = True
    return p, q, v, keep


def check_bounds(n: int = 1000, seed: int = 0, **kw) -> dict:
    """Draw ``n`` random instances (varied S, k, concentration, drift) and evaluate both bounds.

    Returns arrays {'eps', 'delta', 'err_sparse', 'bound_sparse', 'err_reuse', 'bound_reuse'} (n,) plus
    'violations_sparse' and 'violations_reuse' (counts, expected 0).
    """
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    rng = np.random.default_rng(seed)
    cols = {c: np.empty(n) for c in ("eps", "delta", "err_sparse", "bound_sparse", "err_reuse", "bound_reuse")}
    for i in range(n):
        S = int(rng.integers(4, 129))
        args = dict(S=S, k=int(rng.integers(1, S + 1)), dv=int(rng.integers(1, 9)), peak=float(rng.uniform(0.1, 5)),
                    drift=float(rng.uniform(0, 1.5)))
        args.update(kw)
        p, q, v, keep = random_instance(rng, **args)
        V = np.linalg.norm(v, axis=-1).max()
        eps, delta = missing_mass(p, keep), tv_distance(p, q)
        cols["eps"][i], cols["delta"][i] = eps, delta
        cols["err_sparse"][i], cols["bound_sparse"][i] = sparse_error(p, v, keep), bound_sparse(eps, V)
        cols["err_reuse"][i], cols["bound_reuse"][i] = sparse_error(q, v, keep), bound_reuse(eps, delta, V)
    tol = 1e-12
    cols["violations_sparse"] = int((cols["err_sparse"] > cols["bound_sparse"] + tol).sum())
    cols["violations_reuse"] = int((cols["err_reuse"] > cols["bound_reuse"] + tol).sum())
    return cols


def tight_instance(eps: float, V: float = 1.0, S: int = 8, k: int = 4):
    """An instance that attains bound 1 exactly: kept positions hold value +u, dropped ones -u (||u|| = V), the
    dropped mass is ε. Returns (p (S,), v (S, 2), keep (S,))."""
    if not 0 <= eps < 1:
        raise ValueError(f"eps must lie in [0, 1), got {eps}")
    if not 0 < k < S:
        raise ValueError(f"k must lie in (0, S={S}), got {k}")
    p = np.concatenate([np.full(k, (1 - eps) / k), np.full(S - k, eps / (S - k))])
    keep = np.arange(S) < k
    v = np.where(keep[:, None], 1.0, -1.0) * np.array([V, 0.0])
    return p, v, keep
