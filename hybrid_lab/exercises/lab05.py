"""Exercises of notebook 05 (HySparse): the FA's block selection for one query, the error of reusing a selection
(missing mass ε, drift δ and the renormalized sparse error behind the bounds 2εV and 2(ε+δ)V), and the overlap of
top-k sets as a function of layer distance (why a new FA must refresh the selection every few layers).

Shapes are for one query and one KV group, as the notebook states them."""
from __future__ import annotations

import numpy as np

from hybrid_lab.costs import bounds
from hybrid_lab.exercises.framework import Case, Exercise, register
from hybrid_lab.models.hysparse import block_scores, select_blocks, topk_overlap_by_distance

TOPK = ("hybrid_lab.ops.sparse_attention:topk_indices", "hybrid_lab.models.attention_stats:oracle_topk")


# ------------------------------------------------------------------------------------------ 05.1 block selection
def select_blocks_one_reference(p_row, t, block_size, n_blocks):
    """p_row: (S,) attention mass of query t (summed over a KV group's query heads), >= 0, zero after t; t in [0, S).
    Returns (m,) int block ids, m = min(n_blocks, #blocks starting at or before t): those blocks by decreasing mass
    (block b = positions b·block_size ... (b+1)·block_size - 1, the last one may be shorter), ties to the lower id."""
    scores = block_scores(np.asarray(p_row, dtype=np.float64)[None, None, :], block_size, 1)
    idx = select_blocks(scores, np.array([t]), block_size, n_blocks)[0, 0]
    return idx[idx >= 0]


def causal_row(rng, S, t):
    """(S,) attention mass of query t: positive on 0..t, zero after, summing to 1."""
    row = np.zeros(S)
    row[:t + 1] = np.exp(rng.normal(0.0, 1.5, t + 1))
    return row / row.sum()


def _block_cases(rng):
    def case(name, S, t, bs, n_blocks, row=None):
        row = causal_row(rng, S, t) if row is None else row
        return Case(name, (row, t, bs, n_blocks),
                    note=f"S={S}, t={t}, block_size={bs}, n_blocks={n_blocks} (visible blocks: {t // bs + 1})")

    out = []
    for _ in range(4):
        bs = int(rng.integers(2, 9))
        S = int(rng.integers(3 * bs, 12 * bs))
        out.append(case("random", S, int(rng.integers(bs, S)), bs, int(rng.integers(1, 7))))
    bs = int(rng.integers(2, 9))
    out.append(case("t = 0 (only block 0 visible)", int(rng.integers(2, 10)) * bs, 0, bs, int(rng.integers(1, 5))))
    bs = int(rng.integers(3, 9))
    out.append(case("t inside the first block", int(rng.integers(2, 10)) * bs, int(rng.integers(1, bs - 1)), bs,
                    int(rng.integers(1, 5))))
    bs = int(rng.integers(2, 9))
    t = int(rng.integers(bs, 3 * bs))
    out.append(case("n_blocks > visible blocks (return fewer)", 10 * bs, t, bs, t // bs + 1 + int(rng.integers(1, 5))))

    # ties: block masses from {1, 2} with the top mass 3 at two or more blocks, spread evenly (exact dyadic sums)
    bs = int(rng.choice([2, 4, 8]))
    nb = int(rng.integers(6, 11))
    mass = rng.integers(1, 3, nb).astype(float)
    mass[rng.choice(nb, size=int(rng.integers(2, 4)), replace=False)] = 3.0
    out.append(case("ties in block mass (lower block id first)", nb * bs, nb * bs - 1, bs, int(rng.integers(3, nb)),
                    row=np.repeat(mass / bs, bs) / 32.0))

    # a visible block whose mass is exactly 0 (attention underflowed) is still a candidate
    bs = int(rng.integers(2, 9))
    nb = int(rng.integers(5, 9))
    row = causal_row(rng, nb * bs, nb * bs - 1)
    for b in rng.choice(np.arange(1, nb), size=2, replace=False):
        row[b * bs:(b + 1) * bs] = 0.0
    out.append(case("visible blocks of zero mass (still candidates)", nb * bs, nb * bs - 1, bs, nb, row=row))

    # ragged: S = full blocks + r positions; the query sits in the short last block, which holds the most mass
    bs = int(rng.integers(3, 9))
    full = int(rng.integers(3, 8))
    S = full * bs + int(rng.integers(1, bs))
    t = int(rng.integers(full * bs, S))
    row = causal_row(rng, S, t)
    row[full * bs:t + 1] += 2.0
    out.append(case("ragged last block (S not a multiple of block_size)", S, t, bs, int(rng.integers(1, 4)),
                    row=row / row.sum()))
    out.append(case("paper sizes (64-token blocks, top 16)", 2048, int(rng.integers(1100, 2048)), 64, 16))
    return out


register(Exercise("05.1", "select_blocks_one", select_blocks_one_reference, _block_cases, axes={"result": ("rank",)},
                  forbidden=("hybrid_lab.models.hysparse:block_scores", "hybrid_lab.models.hysparse:select_blocks")
                  + TOPK))


# ------------------------------------------------------------------------------------------ 05.2 the error of reuse
def reuse_error_reference(p, q, v, keep):
    """p, q: (S,) distributions of the source and a later layer; v: (S, dv); keep: (S,) bool, q > 0 somewhere on it.
    Returns (eps, delta, err): p's mass outside keep, TV(p, q) = ½Σ|p - q|, ||o_q - ô_q|| with ô_q the later
    layer's output renormalized over keep."""
    return (float(bounds.missing_mass(p, keep)), float(bounds.tv_distance(p, q)), float(bounds.sparse_error(q, v, keep)))


def softmax(x):
    """(S,) logits -> (S,) probabilities (max subtracted)."""
    e = np.exp(x - x.max())
    return e / e.sum()


def _reuse_cases(rng):
    def case(name, S=None, dv=None, k=None, drift=None, same=False, keep=None, q_fn=None):
        S = int(rng.integers(4, 65)) if S is None else S
        dv = int(rng.integers(1, 9)) if dv is None else dv
        peak = float(rng.uniform(0.5, 3.0))
        a = peak * rng.standard_normal(S)
        p = softmax(a)
        drift = float(rng.uniform(0.2, 1.0)) if drift is None else drift
        q = p.copy() if same else softmax(a + drift * peak * rng.standard_normal(S))
        v = rng.standard_normal((S, dv)) * float(rng.uniform(0.2, 2.0))
        if keep is None:
            k = int(rng.integers(1, S)) if k is None else k
            keep = np.zeros(S, bool)
            keep[np.argsort(-p, kind="stable")[:k]] = True
        if q_fn is not None:
            q = q_fn(q, keep)
        return Case(name, (p, q, v, keep), note=f"S={S}, dv={dv}, kept={int(keep.sum())}")

    def inside(q, keep):                                      # the later layer looks only at kept positions
        q = np.where(keep, q, 0.0)
        return q / q.sum()

    S_all = int(rng.integers(4, 40))
    eps = float(rng.uniform(0.05, 0.5))
    p, v, keep = bounds.tight_instance(eps, V=float(rng.uniform(0.5, 2.0)), S=8, k=int(rng.integers(1, 8)))
    return ([case("random") for _ in range(4)]
            + [case("keep all (ε = 0, error 0)", S=S_all, keep=np.ones(S_all, bool)),
               case("keep one", k=1),
               case("q = p (own layer: δ = 0)", same=True),
               case("dv = 1", dv=1),
               case("the later layer's mass all on the kept set (error 0, ε > 0)", S=int(rng.integers(6, 40)),
                    k=3, q_fn=inside),
               Case("worst case: +u kept, -u dropped, q = p (error = 2εV)", (p, p.copy(), v, keep),
                    note=f"S=8, eps={eps:.3f}, kept={int(keep.sum())}")])


register(Exercise("05.2", "reuse_error", reuse_error_reference, _reuse_cases, outputs=("eps", "delta", "err"),
                  forbidden=("hybrid_lab.costs.bounds:missing_mass", "hybrid_lab.costs.bounds:tv_distance",
                             "hybrid_lab.costs.bounds:renormalized_output", "hybrid_lab.costs.bounds:sparse_error")))


# ------------------------------------------------------------------------------------------ 05.3 overlap by distance
def overlap_by_distance_reference(probs, k):
    """probs: (n_layers, L) one query's attention in each layer (>= 0); 1 <= k <= L. S_l = the top-k positions of
    layer l (ties to the smaller position). Returns (n_layers,): entry d = mean over a of |S_a ∩ S_{a+d}| / k."""
    return topk_overlap_by_distance(probs, k)


def stack(rng, n, L, drift):
    """(n, L): n layers of one query's attention over L keys whose logits drift like a random walk (tie-free)."""
    logits = rng.standard_normal(L) * 2.0
    rows = []
    for _ in range(n):
        rows.append(softmax(logits))
        logits = np.cos(drift) * logits + np.sin(drift) * 2.0 * rng.standard_normal(L)
    return np.array(rows)


def _overlap_cases(rng):
    def case(name, n=None, L=None, k=None, drift=None, probs=None):
        if probs is None:
            n = int(rng.integers(2, 9)) if n is None else n
            L = int(rng.integers(8, 65)) if L is None else L
            drift = float(rng.uniform(0.2, 1.0)) if drift is None else drift
            probs = stack(rng, n, L, drift)
        n, L = probs.shape
        k = int(rng.integers(2, max(3, L // 2 + 1))) if k is None else k
        return Case(name, (probs, k), note=f"n_layers={n}, L={L}, k={k}")

    ties = np.array([[0.3, 0.2, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05],       # top-3: 0, 1, then 2 of the tied 2..5
                     [0.35, 0.25, 0.2, 0.1, 0.05, 0.03, 0.01, 0.01],   # no tie in its top 3
                     [0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.2, 0.2]])        # top-3: 6, 7, then 0 of the tied 0..5
    same = stack(rng, 1, int(rng.integers(8, 40)), 0.0)
    L_all = int(rng.integers(4, 20))
    return ([case("random") for _ in range(4)]
            + [case("ties at the k-th place (smaller position first)", probs=ties, k=3),
               case("k = L (every position)", L=L_all, k=L_all),
               case("k = 1", k=1),
               case("one layer", n=1),
               case("identical layers (overlap 1)", probs=np.repeat(same, int(rng.integers(2, 6)), axis=0)),
               case("far layers decorrelate (drift 1.5, L = 256)", n=8, L=256, k=16, drift=1.5)])


register(Exercise("05.3", "overlap_by_distance", overlap_by_distance_reference, _overlap_cases,
                  axes={"result": ("distance",)},
                  forbidden=("hybrid_lab.models.hysparse:topk_overlap_by_distance",) + TOPK))
