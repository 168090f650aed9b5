"""Exercises of notebook 10 (trained models): the evaluation that splits accuracy by how far back the evidence lies
(inside a window's reach or beyond it), the cache a layer stack keeps while it decodes, and the recall of a sparse
layer's selection (did it keep the needle?), measured apart from whether the model then read it right.

Shapes are as the notebook states them: a batch of sequences for 10.1, one query per row for 10.3."""
from __future__ import annotations

from itertools import pairwise

import numpy as np

from hybrid_lab.exercises.framework import Case, Exercise, compare_values, register
from hybrid_lab.trained import tasks


# ------------------------------------------------------------------------------------------ 10.1 accuracy by distance
def accuracy_by_distance_reference(logits, targets, dist, edges):
    """logits: (B, T, V); targets: (B, T), -1 where nothing is asked; dist: (B, T) ints; edges: (nb + 1,) increasing
    ints. Returns (acc (nb,) float, NaN for an empty bucket; count (nb,) int): bucket b holds the answers with
    edges[b] <= dist < edges[b + 1], acc[b] the share of them whose argmax (first maximum on ties) is the target."""
    targets, dist, edges = np.asarray(targets), np.asarray(dist), np.asarray(edges)
    z = np.zeros(targets.shape, np.int64)
    batch = tasks.Batch(tokens=z, targets=targets, kind=z, dist=dist)
    res = [tasks.accuracy(logits, batch, dist_range=(int(lo), int(hi))) for lo, hi in pairwise(edges)]
    return np.array([a for a, _ in res], np.float64), np.array([n for _, n in res], np.int64)


def _edges(rng, nb, lo=0, hi=80):
    return np.sort(rng.choice(np.arange(lo, hi), nb + 1, replace=False))


def acc_case(rng, name, B=None, T=None, V=None, edges=None, dist=None, asked=None, logits=None, targets=None):
    """A 10.1 Case (logits (B, T, V), targets (B, T) int, -1 = not asked, dist (B, T) int, edges (nb + 1,) int).

    A batch with about half of its answers right (the target's logit raised): tie-free argmax unless ``logits``
    is given. dist / asked: callables (B, T, edges) -> array, for the edge cases."""
    B = int(rng.integers(1, 5)) if B is None else B
    T = int(rng.integers(4, 41)) if T is None else T
    V = int(rng.integers(3, 13)) if V is None else V
    edges = _edges(rng, int(rng.integers(1, 6))) if edges is None else np.asarray(edges, np.int64)
    asked = rng.random((B, T)) < 0.6 if asked is None else asked(B, T, edges)
    if targets is None:
        targets = np.where(asked, rng.integers(0, V, (B, T)), -1)
    if logits is None:
        logits = rng.normal(size=(B, T, V))
        b, t = np.nonzero(asked & (rng.random((B, T)) < 0.5))
        logits[b, t, targets[b, t]] += 3.0
    dist = rng.integers(0, int(edges[-1]) + 16, (B, T)) if dist is None else dist(B, T, edges)
    return Case(name, (logits, targets.astype(np.int64), np.asarray(dist, np.int64), edges),
                note=f"B={B}, T={T}, V={logits.shape[-1]}, edges={edges.tolist()}, {int((targets >= 0).sum())} answers")


def _acc_cases(rng):
    def on_edges(B, T, edges):                      # every answer exactly on an edge, the last edge included
        d = rng.choice(edges, (B, T))
        d.flat[0], d.flat[1] = edges[-1], edges[1]
        return d

    def outside(B, T, edges):                       # most answers below the first or beyond the last edge
        return rng.integers(0, 48, (B, T))

    def in_buckets(B, T, edges):                    # every position, asked or not, inside some bucket
        return rng.integers(edges[0], edges[-1], (B, T))

    def some_unasked(B, T, edges):
        a = rng.random((B, T)) < 0.5
        a.flat[0], a.flat[1] = False, True
        return a

    def two_buckets_empty(B, T, edges):             # nothing in [4, 8) nor in [8, 16)
        return np.where(rng.random((B, T)) < 0.4, rng.integers(0, 4, (B, T)), rng.integers(16, 64, (B, T)))

    def ties():                                     # two equal maxima i < j per answer; the target i or j (or other)
        B, T, V = 2, int(rng.integers(6, 16)), int(rng.integers(3, 8))
        logits, targets = np.zeros((B, T, V)), np.zeros((B, T), np.int64)
        which = rng.integers(0, 3, (B, T))
        which.flat[0], which.flat[1] = 1, 0          # at least one answer on the second maximum, one on the first
        for b in range(B):
            for t in range(T):
                i, j = np.sort(rng.choice(V, 2, replace=False))
                logits[b, t, [i, j]] = 1.0
                other = [v for v in range(V) if v not in (i, j)]
                targets[b, t] = (i, j, other[0] if other else j)[which[b, t]]
        return acc_case(rng, "ties (numpy's argmax: the first maximum)", B=B, T=T, V=V, edges=[0, 8, 16, 24],
                        logits=logits, targets=targets, dist=lambda B, T, e: rng.integers(0, 24, (B, T)))

    return ([acc_case(rng, "random") for _ in range(4)]
            + [acc_case(rng, "empty buckets (acc NaN, count 0)", edges=[0, 4, 8, 16, 64], dist=two_buckets_empty),
               acc_case(rng, "answers exactly on the edges (lo <= dist < hi)", T=int(rng.integers(4, 30)),
                        edges=_edges(rng, 4, 0, 40), dist=on_edges, asked=lambda B, T, e: np.ones((B, T), bool)),
               acc_case(rng, "answers outside every bucket (ignored)", edges=[8, 16, 24, 32], dist=outside),
               acc_case(rng, "-1 targets inside the buckets (ignored)", dist=in_buckets, asked=some_unasked),
               ties(),
               acc_case(rng, "B = T = 1", B=1, T=1, edges=[0, 64], asked=lambda B, T, e: np.ones((1, 1), bool),
                        dist=lambda B, T, e: rng.integers(0, 64, (1, 1))),
               acc_case(rng, "one bucket", edges=_edges(rng, 1))])


register(Exercise("10.1", "accuracy_by_distance", accuracy_by_distance_reference, _acc_cases, outputs=("acc", "count"),
                  axes={"acc": ("bucket",), "count": ("bucket",)}, forbidden=("hybrid_lab.trained.tasks:accuracy",)))


# ------------------------------------------------------------------------------------------ 10.2 the decode cache
KINDS = ("attn", "swa", "mamba2")
UNKNOWN = "unknown kind (ValueError naming it)"


def decode_cache_bytes_reference(layers, context, window, kv_bytes, state_bytes):
    """layers: a tuple of kinds from KINDS; context: positions seen (>= 0); window: the SWA window; kv_bytes: one
    position's K and V in one attention layer; state_bytes: one Mamba-2 layer's state (SSM + conv). Returns the bytes
    one sequence keeps: attn context · kv, swa min(context, window) · kv, mamba2 state; ValueError on another kind.
    (``families.decode_ledger``'s cache_bytes, for any layer list and sizes.)"""
    total = 0
    for kind in layers:
        if kind == "attn":
            total += context * kv_bytes
        elif kind == "swa":
            total += min(context, window) * kv_bytes
        elif kind == "mamba2":
            total += state_bytes
        else:
            raise ValueError(f"layers: unknown kind {kind!r}, expected one of {KINDS}")
    return int(total)


def _run_cache(fn, case):
    """The unknown-kind case expects a ValueError that names the kind; every other case a number."""
    if case.name != UNKNOWN:
        return fn(*case.args, **case.kwargs)
    bad = next(k for k in case.args[0] if k not in KINDS)
    try:
        got = fn(*case.args, **case.kwargs)
    except ValueError as exc:
        return f"ValueError naming {bad!r}" if str(bad) in str(exc) else f"ValueError that does not name {bad!r}"
    return got


def _compare_cache(got, want, case):
    if isinstance(want, str):
        if isinstance(got, str) and got == want:
            return None
        return f"expected a {want}, got {got if isinstance(got, str) else 'the result ' + repr(got)}"
    return compare_values(got, want)


def _cache_cases(rng):
    def case(name, layers=None, context=None, window=None, need=()):
        if layers is None:
            layers = [str(k) for k in rng.choice(KINDS, int(rng.integers(1, 9)))]
            layers += list(need)                     # the kinds the case is about, at random places
            layers = [layers[i] for i in rng.permutation(len(layers))]
        window = int(rng.integers(2, 513)) if window is None else window
        context = int(rng.integers(2, 5001)) if context is None else (context(window) if callable(context) else context)
        kv = int(rng.integers(1, 5) * rng.choice([16, 32, 64, 128]) * 2)   # Hkv · (d_qk + d_v) · bytes
        state = int(rng.integers(1_000, 200_001))
        return Case(name, (tuple(layers), context, window, kv, state),
                    note=f"layers={tuple(layers)}, context={context}, window={window}, kv_bytes={kv}, "
                         f"state_bytes={state}")
    n = int(rng.integers(1, 5))
    bad = str(rng.choice(["mlp", "moe", "Attn", "mamba1", "gdn", "SWA"]))
    return ([case("random") for _ in range(4)]
            + [case("context 0 (the states exist already)", context=0, need=KINDS),
               case("context < window (the window not full yet)", context=lambda w: int(rng.integers(1, w)),
                    need=("swa",)),
               case("context = window", context=lambda w: w, need=("swa",)),
               case("only Mamba-2 layers (no growth)", layers=["mamba2"] * n),
               case("only full attention", layers=["attn"] * n),
               case("empty stack (0 bytes)", layers=[]),
               case("a long context (2^20 positions)", context=2 ** 20, need=KINDS),
               case(UNKNOWN, need=(bad,))])


register(Exercise("10.2", "decode_cache_bytes", decode_cache_bytes_reference, _cache_cases, run=_run_cache,
                  compare=_compare_cache, forbidden=("hybrid_lab.trained.families:decode_ledger",
                                                     "hybrid_lab.trained.report:ledger_rows")))


# ------------------------------------------------------------------------------------------ 10.3 evidence recall
def evidence_recall_reference(idx, evidence):
    """idx: (Q, K) the positions a sparse layer selected for each query, -1 padded anywhere; evidence: (Q, E) the
    positions each query needs, -1 = unused slot. Returns (Q,) bool: every used evidence position of query q is in
    idx[q] (True when q needs none); a -1 never matches."""
    idx, evidence = np.asarray(idx), np.asarray(evidence)
    out = np.empty(len(evidence), bool)
    for q in range(len(evidence)):
        kept = {int(s) for s in idx[q] if s >= 0}
        out[q] = all(int(e) in kept for e in evidence[q] if e >= 0)
    return out


def selection(rng, Q, S, K, pad=0.25):
    """(Q, K) distinct positions in [0, S) per row, about ``pad`` of the slots -1 (anywhere in the row)."""
    idx = np.stack([rng.choice(S, K, replace=False) for _ in range(Q)]) if K else np.zeros((Q, 0), np.int64)
    return np.where(rng.random((Q, K)) < pad, -1, idx).astype(np.int64)


def _pick(rng, pool, n):
    return [int(x) for x in rng.choice(np.asarray(sorted(pool)), n, replace=False)]


def recall_case(rng, name, Q=None, S=None, K=None, E=None, rows=None, pad=0.25, idx=None):
    """A 10.3 Case (idx (Q, K) int, -1 = empty slot, evidence (Q, E) int, -1 = unused slot).

    rows(q, kept, missing) -> the evidence row of query q (E slots) from the kept and the missing positions;
    idx(Q, S, K) -> the selection (default: ``selection`` with ``pad``)."""
    Q = int(rng.integers(1, 10)) if Q is None else Q
    S = int(rng.integers(30, 200)) if S is None else S
    K = int(rng.integers(1, 25)) if K is None else K
    E = int(rng.integers(1, 4)) if E is None else E
    idx = selection(rng, Q, S, K, pad) if idx is None else idx(Q, S, K)
    ev = np.full((Q, E), -1, np.int64)
    for q in range(Q):
        kept = set(idx[q][idx[q] >= 0].tolist())
        missing = set(range(S)) - kept
        if rows is None:                             # each slot: kept (0.6), missing (0.25) or unused (0.15)
            u = rng.random(E)
            nk, nm = min(int((u < 0.6).sum()), len(kept)), int(((u >= 0.6) & (u < 0.85)).sum())
            row = _pick(rng, kept, nk) + _pick(rng, missing, nm)
            row += [-1] * (E - len(row))
            row = [row[i] for i in rng.permutation(E)]
        else:
            row = rows(q, kept, missing)
        ev[q] = row
    return Case(name, (idx, ev), note=f"Q={Q}, K={idx.shape[1]}, E={E}, positions < {S}")


def _recall_cases(rng):
    def half_kept(q, kept, missing):                 # one evidence position kept, one dropped
        row = _pick(rng, kept, 1) + _pick(rng, missing, 1)
        return row if rng.random() < 0.5 else row[::-1]

    def none_used(q, kept, missing):
        return [-1, -1]

    def one_minus_one(Q, S, K):                      # distinct positions >= 1, exactly one -1 per row
        idx = np.stack([rng.choice(np.arange(1, S), K, replace=False) for _ in range(Q)])
        idx[np.arange(Q), rng.integers(0, K, Q)] = -1
        return idx.astype(np.int64)

    def zero_dropped(q, kept, missing):              # position 0 needed, not selected
        return [0] + (_pick(rng, kept, 1) if q % 2 == 0 else [-1])

    def minus_one_both(q, kept, missing):            # an unused slot next to a kept (even q) or missing (odd q) one
        row = (_pick(rng, kept, 1) if q % 2 == 0 else _pick(rng, missing, 1)) + [-1]
        return row if rng.random() < 0.5 else row[::-1]

    def every_other(Q, S, K):                        # the even positions: every odd p < S - 1 has both neighbours
        return np.stack([rng.permutation(np.arange(0, S, 2)) for _ in range(Q)]).astype(np.int64)

    def neighbours(q, kept, missing):
        return [int(rng.choice([p for p in missing if p - 1 in kept and p + 1 in kept]))]

    def no_k(q, kept, missing):
        return [-1, -1] if q % 2 == 0 else [int(rng.integers(0, 50)), -1]

    S = int(rng.integers(30, 80))
    return ([recall_case(rng, "random") for _ in range(4)]
            + [recall_case(rng, "one of two evidence positions dropped (all, not any)", E=2, pad=0.0,
                           rows=half_kept),
               recall_case(rng, "no evidence used (every slot -1): True", E=2, pad=0.0, rows=none_used),
               recall_case(rng, "position 0 needed, -1 padding in idx (-1 is not position 0)",
                           Q=int(rng.integers(2, 7)), K=int(rng.integers(2, 16)), E=2, idx=one_minus_one,
                           rows=zero_dropped),
               recall_case(rng, "-1 in idx and in evidence (never a match)", Q=int(rng.integers(2, 8)),
                           K=int(rng.integers(2, 16)), E=2, idx=one_minus_one, rows=minus_one_both),
               recall_case(rng, "the neighbours selected, not the position", S=S, K=(S + 1) // 2, E=1,
                           idx=every_other, rows=neighbours),
               recall_case(rng, "K = 0 (nothing selected)", Q=int(rng.integers(2, 7)), K=0, E=2, rows=no_k),
               recall_case(rng, "one query, one evidence slot", Q=1, E=1)])


register(Exercise("10.3", "evidence_recall", evidence_recall_reference, _recall_cases, axes={"result": ("query",)},
                  forbidden=("hybrid_lab.models.hysparse2:captured_mass",
                             "hybrid_lab.models.lightning_indexer:topk_recall",
                             "hybrid_lab.models.forecast:_recall")))
