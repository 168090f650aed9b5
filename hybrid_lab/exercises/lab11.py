"""Exercises of notebook 11 (sparse attention on trained models): how much of a layer's own top-k attention a
lightning indexer's top-k finds (recall, with the tie rule of ``topk_indices`` written by hand), and the attention
output of one query that reads only the selected positions (one softmax over them, GQA head mapping, -1 padding,
the max subtracted before ``exp``), and the bytes one decode step of one layer copies from host memory when the
block cache holds the previous step's selection (SparDA's offload, 11.3).

Shapes are as the notebook states them: one layer of one sequence for 11.1 (T queries, S keys), one query for 11.2,
one step of one layer for 11.3.
"""
from __future__ import annotations

import numpy as np

from hybrid_lab.exercises.framework import Case, Exercise, register
from hybrid_lab.models.lightning_indexer import topk_recall
from hybrid_lab.ops.sparse_attention import sparse_attention as _sparse_attention
from hybrid_lab.ops.sparse_attention import topk_indices
from hybrid_lab.serving.offload_sim import new_blocks as _new_blocks

_twin = _sparse_attention.numpy_impl          # the numpy op, whatever backend is active

TOPK = ("hybrid_lab.ops.sparse_attention:topk_indices",
        "hybrid_lab.models.lightning_indexer:topk_recall",
        "hybrid_lab.models.lightning_indexer:LightningIndexer.select",
        "hybrid_lab.models.attention_stats:oracle_topk",
        "hybrid_lab.models.forecast:teacher_topk",
        "hybrid_lab.models.forecast:_recall",
        "hybrid_lab.trained.dsa:indexer_recall",
        "hybrid_lab.trained.dsa:oracle_selector",
        "hybrid_lab.trained.dsa:indexer_selector")
ATTENTION = ("hybrid_lab.ops.sparse_attention:sparse_attention",
             "hybrid_lab.ops.sparse_attention:sparse_attention.numpy_impl",
             "hybrid_lab.core.blocks:masked_attention",
             "hybrid_lab.core.blocks:masked_attention_probs",
             "hybrid_lab.core.blocks:softmax_with_sink",
             "hybrid_lab.ops.fa_decode:fa_attention",
             "hybrid_lab.trained.dsa:sparse_forward")
FETCH = ("hybrid_lab.serving.offload_sim:new_blocks",
         "hybrid_lab.serving.offload_sim:replay_trace",
         "hybrid_lab.trained.sparda:replay_layers")


# ------------------------------------------------------------------------------------------ 11.1 recall of the top-k
def topk_recall_from_scores_reference(scores, probs, k):
    """scores: (T, S) an indexer's scores, -inf where not visible; probs: (T, S) >= 0, the main attention summed over
    heads, 0 where not visible (a visible key may also have probability 0); k >= 1. Returns (T,) float: per query,
    |indexer top-k ∩ oracle top-k| / |oracle top-k|, both among the visible positions (where scores is finite), ties
    to the smaller position, all visible positions when fewer than k; NaN for a query that sees nothing."""
    scores, probs = np.asarray(scores, np.float64), np.asarray(probs, np.float64)
    mine = topk_indices(scores, k)
    best = topk_indices(np.where(np.isfinite(scores), probs, -np.inf), k)
    out = np.full(len(scores), np.nan)
    for t in range(len(scores)):
        if (best[t] >= 0).any():
            out[t] = topk_recall(mine[t], best[t])
    return out


def _causal(T, S):
    """(T, S) bool: the T queries are the last T of the S positions, each sees itself and everything before."""
    return np.arange(S)[None, :] <= (S - T + np.arange(T))[:, None]


def _attention_mass(rng, visible, H=None):
    """Softmax of random logits over the visible keys, per head, summed over H heads: (T, S), 0 where not visible."""
    H = int(rng.integers(1, 5)) if H is None else H
    logits = np.where(visible, rng.normal(0.0, 1.5, (H,) + visible.shape), -np.inf)
    m = np.max(logits, axis=-1, keepdims=True)
    e = np.exp(logits - np.where(np.isfinite(m), m, 0.0))
    return (e / np.maximum(e.sum(-1, keepdims=True), 1e-300)).sum(0)


def recall_case(rng, name, T=None, S=None, k=None, visible=None, scores=None, probs=None):
    """An 11.1 Case (scores (T, S), -inf where not visible, probs (T, S), 0 where not visible, k int).

    A layer's attention mass and an indexer that ranks it with noise (tie-free unless scores / probs are given).
    visible(T, S), scores(visible, probs), probs(visible): callables for the edge cases."""
    S = int(rng.integers(4, 64)) if S is None else S
    T = int(rng.integers(1, min(S, 24) + 1)) if T is None else T
    k = int(rng.integers(1, 13)) if k is None else k
    vis = _causal(T, S) if visible is None else visible(T, S)
    p = _attention_mass(rng, vis) if probs is None else probs(vis)
    if scores is None:                                 # log-mass + noise: recall anywhere between 0 and 1
        noisy = np.log(np.maximum(p, 1e-300)) + rng.normal(0.0, float(rng.uniform(0.3, 3.0)), vis.shape)
        sc = np.where(vis, noisy, -np.inf)
    else:
        sc = np.where(vis, scores(vis, p), -np.inf)
    n = vis.sum(1)
    return Case(name, (sc, np.where(vis, p, 0.0), k),
                note=f"T={T}, S={S}, k={k}, visible keys per query {int(n.min())}..{int(n.max())}")


def _recall_cases(rng):
    def decreasing(vis):                               # strictly decreasing along the positions of each row
        return np.where(vis, np.linspace(2.0, 1.0, vis.shape[1])[None, :] + 0.0 * vis, 0.0)

    def tied_scores(vis, p):                           # scores 0, 1, 2; row 0 constant (one tie over all keys)
        s = rng.integers(0, 3, vis.shape).astype(np.float64)
        s[0] = 1.0
        return s

    def probs_decreasing_row0(vis):
        p = _attention_mass(rng, vis)
        p[0] = np.where(vis[0], decreasing(vis)[0], 0.0)
        return p

    def tied_probs(vis):                               # multiples of 1/16 (exact); row 0 constant
        p = rng.integers(1, 4, vis.shape) / 16.0
        p[0] = 1.0 / 16.0
        return np.where(vis, p, 0.0)

    def scores_decreasing_row0(vis, p):
        s = rng.normal(0.0, 1.0, vis.shape)
        s[0] = decreasing(vis)[0]
        return s

    def some_rows_blind(T, S):                         # random visibility; two rows see nothing
        vis = rng.random((T, S)) < 0.4
        vis[np.arange(T), rng.integers(0, S, T)] = True
        vis[rng.choice(T, 2, replace=False)] = False
        return vis

    def window(T, S):                                  # a sliding window of W keys: not a prefix
        W = int(rng.integers(2, 9))
        d = (S - T + np.arange(T))[:, None] - np.arange(S)[None, :]
        return (d >= 0) & (d < W)

    def zero_mass(vis):                                # 3 keys per row hold all the mass; the others are exactly 0
        p = _attention_mass(rng, vis)
        for t in range(len(vis)):
            keys = np.nonzero(vis[t])[0]
            p[t, rng.permutation(keys)[3:]] = 0.0
        return p

    T1, k1 = int(rng.integers(3, 10)), int(rng.integers(2, 6))
    T2, k2 = int(rng.integers(3, 10)), int(rng.integers(2, 6))
    S3 = int(rng.integers(2, 12))
    T4 = int(rng.integers(4, 12))
    T5 = int(rng.integers(3, 10))
    return ([recall_case(rng, "random") for _ in range(4)]
            + [recall_case(rng, "ties in the scores (smaller position first)", T=T1,
                           S=T1 + 2 * k1 + int(rng.integers(0, 20)), k=k1, scores=tied_scores,
                           probs=probs_decreasing_row0),
               recall_case(rng, "ties in the probabilities (smaller position first)", T=T2,
                           S=T2 + 2 * k2 + int(rng.integers(0, 20)), k=k2, scores=scores_decreasing_row0,
                           probs=tied_probs),
               recall_case(rng, "k >= visible keys (all of them: recall 1)", T=S3, S=S3,
                           k=S3 + int(rng.integers(1, 4))),
               recall_case(rng, "a row with one visible key (t = 0)", T=T4, S=T4, k=int(rng.integers(2, 6))),
               recall_case(rng, "rows that see nothing (-inf everywhere: NaN)", S=int(rng.integers(8, 40)),
                           T=int(rng.integers(3, 8)), visible=some_rows_blind),
               recall_case(rng, "sliding-window visibility (not a prefix)", S=int(rng.integers(12, 48)),
                           T=int(rng.integers(3, 12)), k=int(rng.integers(2, 7)), visible=window),
               recall_case(rng, "visible keys of probability 0 (still candidates)", T=T5,
                           S=T5 + int(rng.integers(8, 30)), k=int(rng.integers(5, 9)), probs=zero_mass),
               recall_case(rng, "k = 1", k=1)])


register(Exercise("11.1", "topk_recall_from_scores", topk_recall_from_scores_reference, _recall_cases,
                  axes={"result": ("t",)}, forbidden=TOPK))


# ------------------------------------------------------------------------------------------ 11.2 top-k attention
def topk_attention_reference(q, k, v, idx, scale):
    """q: (Hq, d) one query; k: (S, Hkv, d); v: (S, Hkv, dv); idx: (Hkv, K) positions, -1 padded anywhere, no position
    twice in a row; scale > 0. Returns o: (Hq, dv): query head h reads KV head g = h // (Hq // Hkv), one softmax of
    q_h · k_s · scale over the positions of idx[g] only; zeros for a group that selects nothing."""
    return _twin(q[None, None], k[None], v[None], np.asarray(idx)[None, None], scale=scale)[0, 0]


def attn_case(rng, name, Hkv=None, G=None, d=None, dv=None, S=None, K=None, pad=0.25, idx=None, offset=0.0):
    """An 11.2 Case (q (Hkv·G, d), k (S, Hkv, d), v (S, Hkv, dv), idx (Hkv, K) int, -1 = empty slot, scale).

    Random q, k, v and a selection of K distinct positions per KV head with about ``pad`` of the slots -1.
    idx(Hkv, S, K) -> the selection, for the edge cases; offset: added to every logit (through the first channel)."""
    Hkv = int(rng.choice([1, 2, 4])) if Hkv is None else Hkv
    G = int(rng.integers(1, 4)) if G is None else G
    d = int(rng.integers(2, 17)) if d is None else d
    dv = int(rng.integers(1, 13)) if dv is None else dv
    S = int(rng.integers(8, 61)) if S is None else S
    K = int(rng.integers(1, S)) if K is None else K
    scale = float(d ** -0.5)
    q, kk, v = rng.normal(size=(Hkv * G, d)), rng.normal(size=(S, Hkv, d)), rng.normal(size=(S, Hkv, dv))
    if offset:                                          # q_0 · k_0 · scale = offset for every head and position
        q[:, 0] = kk[:, :, 0] = np.sqrt(offset / scale)
    if idx is None:
        sel = np.stack([rng.permutation(S)[:K] for _ in range(Hkv)]) if K else np.zeros((Hkv, 0), np.int64)
        sel = np.where(rng.random((Hkv, K)) < pad, -1, sel)
    else:
        sel = idx(Hkv, S, K)
    sel = np.asarray(sel, np.int64)
    return Case(name, (q, kk, v, sel, scale),
                note=f"Hq={Hkv * G}, Hkv={Hkv}, d={d}, dv={dv}, S={S}, K={sel.shape[1]}, "
                     f"selected per KV head {(sel >= 0).sum(1).tolist()}")


def _attn_cases(rng):
    def middle(Hkv, S, K):                              # valid, -1, valid, -1, ... in every row
        sel = np.stack([rng.permutation(S)[:K] for _ in range(Hkv)])
        sel[:, 1::2] = -1
        return sel

    def single(Hkv, S, K):                              # one valid slot per row, somewhere among the -1
        sel = np.full((Hkv, K), -1)
        sel[np.arange(Hkv), rng.integers(0, K, Hkv)] = rng.choice(S, Hkv, replace=False)
        return sel

    def one_group_empty(Hkv, S, K):                     # KV head 0 or 1 selects nothing, the other K positions
        sel = np.stack([rng.permutation(S)[:K] for _ in range(Hkv)])
        sel[int(rng.integers(0, Hkv))] = -1
        return sel

    def different_sets(Hkv, S, K):                      # the two KV heads read disjoint position sets
        perm = rng.permutation(S)
        return np.stack([perm[:K], perm[K:2 * K]])

    return ([attn_case(rng, "random") for _ in range(4)]
            + [attn_case(rng, "-1 padding in the middle", K=int(rng.integers(5, 8)), idx=middle),
               attn_case(rng, "a single selected position (output = its v)", K=int(rng.integers(2, 6)), idx=single),
               attn_case(rng, "a KV head that selects nothing (its query heads: zeros)", Hkv=2,
                         K=int(rng.integers(2, 8)), idx=one_group_empty),
               attn_case(rng, "large logits (offset 900: exp overflows unless the max is subtracted)",
                         d=int(rng.integers(4, 17)), K=int(rng.integers(4, 8)), offset=900.0),
               attn_case(rng, "GQA: 2 KV heads, 3 query heads each", Hkv=2, G=3, S=int(rng.integers(12, 40)),
                         K=int(rng.integers(2, 6)), idx=different_sets),
               attn_case(rng, "MQA: 1 KV head, 4 query heads", Hkv=1, G=4),
               attn_case(rng, "K = 0 (nothing selected: zeros)", K=0)])


register(Exercise("11.2", "topk_attention", topk_attention_reference, _attn_cases,
                  axes={"result": ("head", "dim")}, forbidden=ATTENTION, float_errors=True))


# ------------------------------------------------------------------------------------------ 11.3 bytes to fetch
def fetch_bytes_reference(prev_blocks, new_blocks, resident, block_bytes):
    """prev_blocks: (K1,) the previous step's selection (the block cache); new_blocks: (K2,) this step's; resident:
    (R,) blocks on the GPU anyway (e.g. the init block), R may be 0; block ids >= 0, -1 = an empty slot anywhere, no
    id twice except -1; block_bytes > 0. Returns int: block_bytes x the number of distinct ids of new_blocks in
    neither prev_blocks nor resident (-1 is never a block)."""
    on_gpu = np.concatenate([np.asarray(prev_blocks, np.int64), np.asarray(resident, np.int64)])
    return len(_new_blocks(np.asarray(new_blocks, np.int64), on_gpu)) * int(block_bytes)


def _ids(x):
    return np.asarray(x, np.int64).reshape(-1)


def fetch_case(rng, name, prev, new, resident, block_bytes=None):
    """An 11.3 Case (prev_blocks (K1,), new_blocks (K2,), resident (R,): int64 block ids, block_bytes int).

    prev, new, resident: block ids (-1 = empty slot); block_bytes: random (a multiple of 1 KiB) unless given."""
    bb = int(rng.integers(1, 257)) * 1024 if block_bytes is None else block_bytes
    prev, new, resident = _ids(prev), _ids(new), _ids(resident)
    return Case(name, (prev, new, resident, bb),
                note=f"prev_blocks={prev.tolist()}, new_blocks={new.tolist()}, resident={resident.tolist()}, "
                     f"block_bytes={bb}")


def _pad(rng, ids, share):
    """ids with about ``share`` of extra slots -1, inserted anywhere."""
    ids = list(ids) + [-1] * int(rng.binomial(len(ids) + 1, share))
    return np.asarray(ids, np.int64)[rng.permutation(len(ids))]


def _fetch_random(rng):
    """A selection that keeps part of the previous one, with some blocks resident and -1 slots in both."""
    N = int(rng.integers(12, 200))                     # blocks in the context
    perm = rng.permutation(np.arange(1, N))            # block 0 (the init block) handled apart
    K1, K2 = int(rng.integers(1, 10)), int(rng.integers(1, 10))
    keep = int(rng.integers(0, min(K1, K2) + 1))       # blocks of the previous step selected again
    prev = perm[:K1]
    new = np.concatenate([prev[:keep], perm[K1:K1 + K2 - keep]])
    resident = np.concatenate([[0] if rng.random() < 0.5 else [], rng.choice(perm, int(rng.integers(0, 3)),
                                                                              replace=False)]).astype(np.int64)
    if rng.random() < 0.5:                             # the init block selected too (SparDA always reads it)
        new = np.concatenate([new, [0]])
    return fetch_case(rng, "random", _pad(rng, prev, 0.2), _pad(rng, new, 0.2), resident)


def _fetch_cases(rng):
    N = int(rng.integers(20, 200))
    perm = rng.permutation(np.arange(1, N))
    K = int(rng.integers(2, 9))
    a, b, c = perm[:K], perm[K:2 * K], perm[2 * K:3 * K]           # three disjoint sets of K blocks
    r = perm[3 * K:3 * K + int(rng.integers(1, 3))]                # resident, disjoint from a, b, c
    n_keep = int(rng.integers(1, K))                               # 1 .. K-1 blocks kept from a
    return ([_fetch_random(rng) for _ in range(4)]
            + [fetch_case(rng, "identical selections (nothing to copy)", _pad(rng, a, 0.3),
                          _pad(rng, rng.permutation(a), 0.3), r),
               fetch_case(rng, "all new (K2 blocks to copy)", a[:K - 1], b, r),
               fetch_case(rng, "-1 slots in new_blocks only (an empty slot is not a block)", a,
                          rng.permutation(np.concatenate([a[:n_keep], b[:1], [-1, -1, -1]])), r),
               fetch_case(rng, "-1 slots in both (a -1 in prev_blocks caches no block)", _pad(rng, a, 0.5),
                          np.concatenate([[-1], a[:n_keep], c[:2], [-1]]), r),
               fetch_case(rng, "a block resident and selected (not copied)", a,
                          np.concatenate([a[:n_keep], r, b[:2]]), r),
               fetch_case(rng, "nothing resident (R = 0)", a, np.concatenate([b[:2], a[:n_keep]]), []),
               fetch_case(rng, "new_blocks all -1 (0 bytes)", a, [-1] * K, r),
               fetch_case(rng, "first step (prev_blocks empty): every selected block not resident",
                          [], np.concatenate([[0], b]), np.concatenate([[0], r]))])


register(Exercise("11.3", "fetch_bytes", fetch_bytes_reference, _fetch_cases, forbidden=FETCH))
