"""Exercises of notebook 02 (hybrid models and state snapshots): the snapshot ledger of one sequence (lecture 10
exercises 1 and 5: one SSM state in tokens of KV, and what snapshotting every k tokens costs) and the longest prefix
a hybrid can reuse (exercise 2: all-or-nothing at the saved state positions)."""
from __future__ import annotations

import math

import numpy as np

from hybrid_lab.costs.shape7b import HYBRID_7B, HybridLayout
from hybrid_lab.exercises.framework import Case, Exercise, compare_values, register
from hybrid_lab.models.hybrid import reusable_prefix


# ------------------------------------------------------------------------------------------ 02.1 the snapshot ledger
def snapshot_ledger_reference(L, every, kv_per_token, n_ssm, d_inner, d_state, bytes_per_elem):
    """A hybrid holding a sequence of L tokens, its SSM states snapshotted at every, 2·every, ... <= L.

    Returns (state_tokens, n_snapshots, total_bytes): one full SSM state (all n_ssm layers, d_inner × d_state numbers
    each) in tokens of KV (inf without KV, 0 without SSM layers); floor(L / every); the KV of the L tokens plus the
    snapshots (as ``ledger.snapshot_bytes``). The state's bytes come from ``HybridLayout.state_bytes`` (a layout of
    the SSM layers alone); the KV per token is given, so the rest is the ledger's arithmetic on it."""
    state = HybridLayout(n_attn=0, n_ssm=n_ssm, n_mlp=0, d_model=d_inner, n_heads=1, d_state=d_state,
                         dtype_bytes=bytes_per_elem, ssm_head_dim=1).state_bytes if n_ssm else 0
    n = int(L // every)
    state_tokens = math.inf if kv_per_token == 0 else state / kv_per_token
    return state_tokens, n, int(L * kv_per_token + n * state)


def ledger_case(rng, name, L=None, every=None, kv=None, n_ssm=None, d_inner=None, d_state=None, b=None,
                multiple=False):
    """A 02.1 Case (L, every, kv_per_token, n_ssm, d_inner, d_state, bytes_per_elem): ints; None: drawn."""
    b = int(rng.choice([1, 2, 4])) if b is None else b
    if kv is None:                                   # 2 · n_attn · n_kv_heads · d_head · b
        kv = 2 * int(rng.integers(1, 9)) * int(rng.choice([1, 2, 4, 8])) * int(rng.choice([64, 128])) * b
    n_ssm = int(rng.integers(2, 49)) if n_ssm is None else n_ssm
    d_inner = int(rng.choice([512, 1024, 2048, 4096, 8192])) if d_inner is None else d_inner
    d_state = int(rng.choice([16, 32, 64, 128, 256])) if d_state is None else d_state
    every = int(rng.integers(2, 513)) if every is None else every
    if L is None:
        L = every * int(rng.integers(1, 200)) + (0 if multiple else int(rng.integers(1, every)))
    return Case(name, (L, every, kv, n_ssm, d_inner, d_state, b),
                note=f"L={L}, every={every}, kv_per_token={kv}, n_ssm={n_ssm}, d_inner={d_inner}, d_state={d_state}, "
                     f"bytes_per_elem={b}")


def _ledger_cases(rng):
    m = HYBRID_7B
    return ([ledger_case(rng, "random") for _ in range(4)]
            + [ledger_case(rng, "L a multiple of every", multiple=True),
               ledger_case(rng, "every > L (no snapshot yet)", L=int(rng.integers(1, 300)),
                           every=int(rng.integers(300, 1000))),
               ledger_case(rng, "every = 1", every=1, L=int(rng.integers(1, 5000))),
               ledger_case(rng, "no attention layers (no KV)", kv=0),
               ledger_case(rng, "no SSM layers (pure Transformer)", n_ssm=0),
               ledger_case(rng, "hybrid 7B, 10K tokens every 32", 10_000, 32, m.kv_bytes_per_token, m.n_ssm,
                           m.d_model, m.d_state, m.dtype_bytes)])


def _compare_ledger(got, want, case):
    """Part by part as the default comparison, except that an infinite state_tokens needs an infinite answer (the
    default's relative tolerance is infinite there and would accept any number)."""
    names = ("state_tokens", "n_snapshots", "total_bytes")
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        return (f"snapshot_ledger returned {type(got).__name__}"
                + (f" of length {len(got)}" if isinstance(got, (tuple, list)) else "")
                + "; expected a tuple (state_tokens, n_snapshots, total_bytes)")
    probs = []
    for g, w, nm in zip(got, want, names):
        if isinstance(w, float) and math.isinf(w):
            try:
                ok = math.isinf(float(g)) and float(g) > 0
            except (TypeError, ValueError):
                ok = False
            probs.append(None if ok else f"{nm} is {g!r}, expected inf")
        else:
            probs.append(compare_values(g, w, nm))
    if not any(probs):
        return None
    right = [nm for nm, p in zip(names, probs) if p is None]
    return "; ".join(p for p in probs if p) + (f"; {', '.join(right)} right" if right else "")


LEDGER = ("hybrid_lab.costs.ledger:kv_bytes_per_token", "hybrid_lab.costs.ledger:ssm_state_bytes",
          "hybrid_lab.costs.ledger:state_in_tokens", "hybrid_lab.costs.ledger:sequence_bytes",
          "hybrid_lab.costs.ledger:snapshot_bytes", "hybrid_lab.costs.ledger:bounded_snapshot_bytes",
          "hybrid_lab.costs.shape7b:HybridLayout.state_bytes", "hybrid_lab.costs.shape7b:HybridLayout.state_in_tokens",
          "hybrid_lab.costs.shape7b:HybridLayout.entry_bytes")
register(Exercise("02.1", "snapshot_ledger", snapshot_ledger_reference, _ledger_cases,
                  outputs=("state_tokens", "n_snapshots", "total_bytes"), compare=_compare_ledger, forbidden=LEDGER))


# ------------------------------------------------------------------------------------------ 02.2 longest reusable prefix
def longest_reuse_reference(shared, state_positions, hybrid=True):
    """Tokens a new request can reuse: ``shared`` for a pure Transformer (KV cuts anywhere), else the largest saved
    SSM-state position <= shared (0 when there is none). state_positions: ints >= 0, any order."""
    if not hybrid:
        return shared
    return reusable_prefix(shared, list(state_positions))


def _positions(rng, n, lo, hi):
    """n distinct ints in [lo, hi], shuffled."""
    return [int(p) for p in rng.permutation(rng.choice(np.arange(lo, hi + 1), size=n, replace=False))]


def _reuse_cases(rng):
    def case(name, shared, positions, hybrid=True):
        kw = {} if hybrid else {"hybrid": False}
        return Case(name, (shared, positions), kw,
                    note=f"shared={shared}, state_positions={positions}" + ("" if hybrid else ", hybrid=False"))

    out = []
    for _ in range(4):                                      # a best position, others below and above it
        shared = int(rng.integers(50, 5000))
        best = int(rng.integers(1, shared))
        below = _positions(rng, int(rng.integers(0, 4)), 1, best - 1) if best > 4 else []
        above = _positions(rng, int(rng.integers(1, 4)), shared + 1, 2 * shared)
        pos = [int(p) for p in rng.permutation(below + above + [best])]
        out.append(case("random", shared, pos))
    shared = int(rng.integers(100, 5000))
    at = _positions(rng, 2, 1, shared - 1) + [shared] + _positions(rng, 1, shared + 1, 2 * shared)
    out.append(case("a state exactly at the shared length", shared, [int(p) for p in rng.permutation(at)]))
    out.append(case("no saved state", int(rng.integers(1, 5000)), []))
    shared = int(rng.integers(1, 5000))
    out.append(case("every state beyond the shared prefix", shared, sorted(_positions(rng, 3, shared + 1, 3 * shared))))
    shared = int(rng.integers(100, 5000))                   # sorted-ness assumed -> stops early at a large position
    small = sorted(_positions(rng, 3, 1, shared))
    big = _positions(rng, 2, shared + 1, 2 * shared)
    out.append(case("unsorted positions", shared, [small[0], big[0], small[2], big[1], small[1]]))
    out.append(case("pure Transformer (hybrid=False)", int(rng.integers(1, 5000)),
                    sorted(_positions(rng, 3, 1, 400)), hybrid=False))
    out.append(case("nothing shared (shared = 0)", 0, sorted(_positions(rng, 3, 1, 400))))
    out.append(case("lecture exercise 2 (c)", 800, [256, 512, 768, 1024]))
    return out


register(Exercise("02.2", "longest_reuse", longest_reuse_reference, _reuse_cases,
                  forbidden=("hybrid_lab.models.hybrid:reusable_prefix",)))
