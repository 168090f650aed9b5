"""Why reusing a few selected tokens can work: two error bounds behind HySparse's and HySparse2's KV reuse (an FA
layer's selection reused by the following SA layers, HySparse2 §3.3). They are an explanatory analysis of ours, not
a guarantee the papers make: they cover one head with fixed query and KV, not error propagation across layers.

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

from hybrid_lab.core import checks

__all__ = ["missing_mass", "renormalized_output", "sparse_error", "tv_distance", "bound_sparse",
           "bound_reuse", "random_instance", "check_bounds", "tight_instance"]


def _dist(name, p) -> np.ndarray:
    return checks.prob_rows(name, p, atol=1e-9)


def _keep(keep, p) -> np.ndarray:
    """The kept set: a bool mask of p's shape."""
    keep = checks.array("keep", keep, kinds="b")
    if keep.shape != p.shape:
        raise ValueError(f"keep must be a bool mask of shape {p.shape} (p's), got shape {keep.shape}")
    return keep


def _values(v, p) -> np.ndarray:
    """Values v (..., S, dv), finite, one row per position of p."""
    v = checks.finite_array("v", v).astype(np.float64)
    if v.shape[:-1] != p.shape or v.shape[-1] == 0:
        raise ValueError(f"v must have shape {p.shape + ('dv',)} with dv >= 1, got {v.shape}")
    return v


def _in_unit(name, x) -> np.ndarray:
    """A mass or a distance between distributions: finite numbers in [0, 1]."""
    x = checks.finite_array(name, x).astype(np.float64)
    if ((x < 0) | (x > 1)).any():
        raise ValueError(f"{name} must lie in [0, 1], got range [{x.min():.6g}, {x.max():.6g}]")
    return x


def _norm_bound(V) -> np.ndarray:
    V = checks.finite_array("V", V).astype(np.float64)
    if (V < 0).any():
        raise ValueError(f"V (a bound on ||v_s||) must be >= 0, got min {V.min():.6g}")
    return V


def missing_mass(p, keep) -> np.ndarray:
    """ε = probability mass outside the kept set. p: (..., S) distribution; keep: (..., S) bool. Returns (...)."""
    p = _dist("p", p)
    keep = _keep(keep, p)
    return np.where(keep, 0.0, p).sum(-1)


def renormalized_output(p, v, keep) -> np.ndarray:
    """ô = Σ_{s∈S} p_s v_s / Σ_{s∈S} p_s. p: (..., S); v: (..., S, dv); keep: (..., S) bool with a non-empty
    kept set of positive mass. Returns (..., dv)."""
    p = _dist("p", p)
    keep = _keep(keep, p)
    v = _values(v, p)
    kept = np.where(keep, p, 0.0)
    mass = kept.sum(-1, keepdims=True)
    if (mass <= 0).any():
        raise ValueError("keep must select positions with positive probability mass")
    return np.einsum("...s,...sd->...d", kept / mass, v)


def sparse_error(p, v, keep) -> np.ndarray:
    """||o - ô||_2 with o the full output of p and ô the renormalized output on the kept set. Returns (...)."""
    p = _dist("p", p)
    o = np.einsum("...s,...sd->...d", p, _values(v, p))
    return np.linalg.norm(o - renormalized_output(p, v, keep), axis=-1)


def tv_distance(p, q) -> np.ndarray:
    """Total variation ½ Σ_s |p_s - q_s| between two distributions over the same positions. Returns (...)."""
    p, q = _dist("p", p), _dist("q", q)
    if p.shape != q.shape:
        raise ValueError(f"p and q must have the same shape, got {p.shape} and {q.shape}")
    return 0.5 * np.abs(p - q).sum(-1)


def bound_sparse(eps, V) -> np.ndarray:
    """Bound 1: 2 ε V. eps: missing mass in [0, 1]; V >= 0 (numbers or arrays that broadcast)."""
    return 2.0 * _in_unit("eps", eps) * _norm_bound(V)


def bound_reuse(eps, delta, V) -> np.ndarray:
    """Bound 2: 2 (ε + δ) V, capped at 2V (an output of norm <= V is never further than 2V from another).
    eps, delta (total variation) in [0, 1]; V >= 0."""
    eps, delta, V = _in_unit("eps", eps), _in_unit("delta", delta), _norm_bound(V)
    return np.minimum(2.0 * (eps + delta) * V, 2.0 * V)


def random_instance(rng: np.random.Generator, S: int = 64, k: int = 8, dv: int = 4, peak: float = 3.0,
                    drift: float = 0.5):
    """One random reuse instance: source logits -> p, later-layer logits = source + drift * noise -> q,
    values v (S, dv), kept set = top-k of p. ``peak`` scales the logits (higher = more concentrated attention)."""
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy Generator (np.random.default_rng(seed)), got {type(rng).__name__}")
    S, dv = checks.pos_int("S", S), checks.pos_int("dv", dv)
    checks.output_size("S or dv (the values v are S x dv)", (S, dv))
    k = checks.int_in("k", k, 1, S + 1)
    peak, drift = checks.positive_number("peak", peak), checks.nonneg_number("drift", drift)
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
    n, seed = checks.pos_int("n", n), checks.nonneg_int("seed", seed)
    checks.output_size("n (one entry per instance in each returned array)", (n,))
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
    eps = checks.finite_number("eps", eps)
    if not 0 <= eps < 1:
        raise ValueError(f"eps must lie in [0, 1), got {eps!r}")
    V, S = checks.positive_number("V", V), checks.pos_int("S", S, 2)
    checks.output_size("S (p is (S,), v is (S, 2))", (S, 2))
    k = checks.int_in("k", k, 1, S)
    p = np.concatenate([np.full(k, (1 - eps) / k), np.full(S - k, eps / (S - k))])
    keep = np.arange(S) < k
    v = np.where(keep[:, None], 1.0, -1.0) * np.array([V, 0.0])
    return p, v, keep
