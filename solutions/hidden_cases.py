"""The lecturer's hidden cases: added to each exercise's public cases when ``hybrid-lab grade`` decides a verdict.

Students never get this file (it sits with the answers in ``solutions/``), so an answer fitted to what the public
cases look like (their sizes, their ranges) fails here. ``CASES = {exercise id: fn(rng) -> [Case]}``; each function
builds its cases with the exercise's own generators, outside the public ranges. Exercises not listed are graded on
their public cases (with the grader's own seeds).

Where an exercise states a tie rule (top-k and block selections, argmax, the critical path's tie rules), one hidden
case puts EXACT ties among >= 32 candidates, in a random order, across the cut: numpy's default (unstable) sort
returns tied entries in no particular order once there are more than 16 of them (and in SIMD builds already
below), so ``np.argsort(-x)`` without ``kind="stable"`` fails there, as does a reversed ascending sort. (03.3
excepted: in the real cache only the nodes one request creates share an access time, so its exact score ties are
between two candidates, the deeper one once with the higher and once with the lower, recycled, id.) Where an
exercise has a capacity or a budget, one case fits it exactly (03.3: the bytes to free are exactly one victim's,
so an eviction too many shows; top-k budgets equal to the number of candidates). Lab 00's formulas are checked past
the sizes the public cases reach: 00.1's bytes past 2^32 and past 2^63 (an int, exactly: numpy's int64 wraps
there, a float rounds), head groups and head sizes the public cases never draw; 00.2's L* below one token, models
of 10^12 parameters and more, a pure SSM of 10^14. Lab 09's Triton kernels get tile sizes the public cases never
use. tests/test_hidden_cases.py proves the cases valid for the reference and what they catch.
"""
from __future__ import annotations

import numpy as np

from hybrid_lab.exercises.framework import Case


# ================================================================================================ lab 00
def _kv_per_token(rng):
    from hybrid_lab.exercises.lab00 import kv_case

    def n(lo, hi):
        return int(rng.integers(lo, hi))
    return [kv_case(rng, "hidden: groups of 7 query heads (28 query heads, 4 KV heads)", n_heads=28, n_kv_heads=4),
            kv_case(rng, "hidden: 8-byte numbers, any head size (33 - 299)", d_head=n(33, 300), b=8),
            kv_case(rng, "hidden: the smallest model (1 layer, 1 head of 1 number, 1 byte)", 1, 1, 1, 1, 1),
            kv_case(rng, "hidden: no attention layers, 128 KV heads", n_attn=0, n_heads=128),
            # the public results stay below 2^23; these need integers wider than 32 and than 64 bits, and odd
            # factors, so that no float holds the product exactly
            kv_case(rng, "hidden: 2^32 bytes per token and more", n(1024, 2048), 1024, 256, 1024, 8),
            kv_case(rng, "hidden: past 2^63 bytes per token (an int, exactly)", n(10 ** 7, 10 ** 8) | 1,
                    n(10 ** 6, 10 ** 7) | 1, None, n(10 ** 6, 10 ** 7) | 1, 8)]


def _crossover(rng):
    from hybrid_lab.exercises.lab00 import cross_case

    def width():
        return int(rng.choice([1024, 4096, 8192]))
    n_attn, d_model = int(rng.integers(1, 97)), width()
    return [cross_case(rng, "hidden: a tiny model (L* below one token)", int(rng.integers(1, n_attn * d_model)),
                       n_attn, d_model),
            cross_case(rng, "hidden: one layer of width 1 (L* = params)", n_attn=1, d_model=1),
            cross_case(rng, "hidden: 10^12 - 10^14 parameters", int(rng.integers(10 ** 12, 10 ** 14))),
            cross_case(rng, "hidden: 500 - 2000 attention layers of width 65,536", n_attn=int(rng.integers(500, 2000)),
                       d_model=65536),
            cross_case(rng, "hidden: no attention layers, 10^14 parameters", 10 ** 14, 0, width())]


# ================================================================================================ lab 01
def _ssm_step(rng):
    def case(name, Dm, N, dt=None):
        dt_t = rng.uniform(0.01, 1.0, Dm) if dt is None else np.full(Dm, float(dt))
        return Case(name, (rng.normal(size=(Dm, N)), rng.normal(size=Dm), dt_t, -rng.uniform(0.5, 4.0, (Dm, N)),
                           rng.normal(size=N), rng.normal(size=N), rng.normal(size=Dm)), note=f"D={Dm}, N={N}")
    return [case("hidden: wide (D = 33, N = 17)", 33, 17), case("hidden: tiny Δ (1e-6)", 12, 9, 1e-6),
            case("hidden: huge Δ (1e3)", 10, 8, 1e3)]


def _decay(rng):
    def run(name, steps):
        return Case(name, (np.cumsum(steps),), note=f"q={len(steps)}")
    return [run("hidden: a long chunk (q = 96)", -rng.uniform(0.0, 0.5, 96)),
            run("hidden: zeros and huge steps mixed", np.where(rng.random(40) < 0.5, 0.0, -rng.uniform(100, 900, 40)))]


def _ssd(rng, chunked):
    out = []
    for name, (L, H, P, N) in (("hidden: long (L = 203, H = 4, P = 8, N = 16)", (203, 4, 8, 16)),
                               ("hidden: wide heads (L = 45, H = 6, P = 12, N = 9)", (45, 6, 12, 9))):
        dt = np.log1p(np.exp(rng.normal(-1.0, 0.7, (L, H))))
        args = (rng.normal(size=(L, H, P)), dt, -np.exp(rng.normal(0.0, 0.5, H)), rng.normal(size=(L, N)),
                rng.normal(size=(L, N)), rng.normal(size=H))
        out.append(Case(name, args + ((int(rng.integers(9, 40)),) if chunked else ()),
                        note=f"L={L}, H={H}, P={P}, N={N}"))
    return out



# ================================================================================================ shared helpers
def _levels(rng, counts, values):
    """A shuffled 1-D array holding counts[i] copies of values[i] (exact ties, in a random order)."""
    return rng.permutation(np.repeat(np.asarray(values, dtype=np.float64), counts))


# ================================================================================================ lab 02
def _ledger(rng):
    from hybrid_lab.exercises.lab02 import ledger_case
    every = int(rng.integers(600, 5000))
    return [ledger_case(rng, "hidden: L = every (exactly one snapshot)", L=every, every=every),
            ledger_case(rng, "hidden: L = every - 1 (no snapshot yet)", L=every - 1, every=every),
            ledger_case(rng, "hidden: L = every = 1 (the smallest sequence)", L=1, every=1),
            ledger_case(rng, "hidden: neither attention nor SSM layers", kv=0, n_ssm=0),
            ledger_case(rng, "hidden: 100 SSM layers, 8-byte numbers, a million tokens",
                        L=10 ** 6 + int(rng.integers(1, 999)), every=int(rng.integers(700, 2000)), n_ssm=100,
                        d_inner=16384, d_state=256, b=8),
            ledger_case(rng, "hidden: odd sizes (d_inner = 3000, d_state = 17, 3-byte numbers)", d_inner=3000,
                        d_state=17, b=3, kv=int(rng.integers(1, 9)) * 3 * 2 * 96)]


def _reuse(rng):
    def case(name, shared, positions, hybrid=True):
        kw = {} if hybrid else {"hybrid": False}
        return Case(name, (int(shared), [int(p) for p in positions]), kw,
                    note=f"shared={shared}, state_positions={list(positions)}" + ("" if hybrid else ", hybrid=False"))
    shared = int(rng.integers(2000, 10 ** 6))
    many = rng.permutation(np.r_[rng.choice(np.arange(1, shared), 20, replace=False),
                                 rng.choice(np.arange(shared + 1, 3 * shared), 20, replace=False)])
    dup = rng.choice(np.arange(1, shared), 3, replace=False)
    dup = rng.permutation(np.r_[dup, dup, shared + 1 + dup])
    return [case("hidden: 40 positions, shuffled, half beyond the shared prefix", shared, many),
            case("hidden: repeated positions", shared, dup),
            case("hidden: only a state at position 0", shared, [shared + 5, 0, 2 * shared]),
            case("hidden: shared = 1, a state at 1", 1, [2, 1, 0]),
            case("hidden: pure Transformer, no state at all", shared, [], hybrid=False),
            case("hidden: a billion shared tokens", 10 ** 9, [10 ** 9 + 1, 10 ** 9 - 1, 5, 10 ** 9 - 2])]


# ================================================================================================ lab 03
def _trace(rng, n, vocab):
    """n requests over a tiny vocabulary, as lab03's random traces but longer, sharing more often, with shorter
    requests (more reuse per token)."""
    from hybrid_lab.exercises.lab03 import random_trace
    return random_trace(rng, vocab, n=n, kinds=("new", "follow", "share", "share"), follow_len=(1, 5),
                        new_len=(1, 8), output_len=(0, 4))


def _admit(rng):
    from hybrid_lab.exercises.lab03 import KV, NO_EVICTION, STATE, describe_trace
    out = []
    for name, n, vocab, cap in (("hidden: a long trace (40 requests, 2 token ids)", 40, 2, NO_EVICTION),
                                ("hidden: a long trace under heavy eviction", 40, 3,
                                 STATE + int(rng.integers(0, 40)) * KV)):
        tr = _trace(rng, n, vocab)
        out.append(Case(name, kwargs={"trace": tr, "capacity": cap},
                        note=f"{describe_trace(tr)}, capacity {cap:,.0f} B"))
    n_in = int(rng.integers(5, 50))

    def unit(name, *args):
        return Case(name, args, note="admit(" + ", ".join(map(str, args)) + ")")
    return out + [
        unit("hidden: a 1-token prompt again, no output (m = n_input = n_tokens, inside an edge)", 1, 1, 1, True, 0,
             False),
        unit("hidden: the walk ends at the end of the input, a state-less node with 2 children, no output",
             n_in, n_in, n_in, False, 2, False),
        unit("hidden: the walk ends at the input's end, a state-less node with 1 child", n_in, n_in + 7, n_in, False,
             1, False),
        unit("hidden: at a node that holds a state (no new branch)", n_in, n_in + 3, n_in - 2, False, 3, True),
        unit("hidden: nothing matched at a root with children (m = 0)", n_in, n_in + 2, 0, False, 5, False),
        unit("hidden: inside an edge after one token (m = 1)", n_in, n_in + 4, 1, True, 0, False)]


def _score(rng):
    from hybrid_lab.exercises.lab03 import score_case
    n = 40
    t = rng.uniform(0.0, 500.0, n)
    nbytes = np.zeros(n)
    zero = Case("hidden: every node holds 0 bytes (efficiency 0 everywhere)",
                (t, rng.uniform(1e11, 1e14, n), nbytes, 1.5, float(t.max() + 0.5)), note=f"n={n}")
    tied_t = np.repeat(rng.uniform(0, 50, 4).round(), 10)[rng.permutation(n)]
    tied = Case("hidden: 40 nodes sharing 4 access times", (tied_t, rng.uniform(1e11, 1e14, n),
                                                            rng.uniform(1e6, 1e9, n), 0.7, float(tied_t.max() + 1)),
                note=f"n={n}")
    return [score_case(rng, "hidden: 40 nodes", n=40), score_case(rng, "hidden: two nodes", n=2),
            score_case(rng, "hidden: now = last access + 1 (age 1)", n=12, now_gap=1),
            score_case(rng, "hidden: a tiny alpha (1e-9)", n=20, alpha=1e-9), zero, tied]


def _evict(rng):
    from hybrid_lab.exercises.lab03 import KV, STATE, describe_trace, evict_case, segment
    from hybrid_lab.serving.workloads import Request

    def n(lo, hi):
        return int(rng.integers(lo, hi))

    def nbytes(r, shared=0):                  # one leaf holding the request's tokens past `shared`, with its state
        return (len(r.tokens) - shared) * KV + STATE

    cases = []
    # exact fit, alpha = 0: A1, A2 (old), then B: the bytes to free are exactly A1's, so A2 must stay
    A1 = Request(0, 0, segment(rng, n(5, 60), 0), segment(rng, n(1, 10), 1))
    A2 = Request(1, 0, segment(rng, n(5, 60), 2), segment(rng, n(1, 10), 3))
    B = Request(2, 0, segment(rng, n(70, 120), 4), segment(rng, n(1, 10), 5))        # larger than A1: A1 + A2 fit
    cases.append(evict_case("hidden: exact fit, alpha = 0 (free exactly the oldest leaf, no more)", [A1, A2, B, A2],
                            nbytes(A2) + nbytes(B), 0.0, describe_trace([A1, A2, B])))
    # exact fit, alpha > 0: A1 and A2 of the same length (equal efficiencies), recency decides
    la, lo = n(5, 60), n(1, 10)
    A1 = Request(0, 0, segment(rng, la, 0), segment(rng, lo, 1))
    A2 = Request(1, 0, segment(rng, la, 2), segment(rng, lo, 3))
    B = Request(2, 0, segment(rng, n(la + lo, la + lo + 60), 4), segment(rng, n(1, 10), 5))
    alpha = float(rng.uniform(0.5, 3.0))
    cases.append(evict_case("hidden: exact fit, alpha > 0 (equal efficiencies)", [A1, A2, B, A1],
                            nbytes(A2) + nbytes(B), alpha, describe_trace([A1, A2, B])))
    # a conversation A, A + f (A refreshed: A and the new leaf tie in recency), then Q: the deeper leaf goes first
    # and frees exactly the bytes to free; one eviction more would take A's state too
    A = Request(0, 0, segment(rng, n(10, 60), 0), segment(rng, n(1, 10), 1))
    A2 = Request(0, 1, np.r_[A.tokens, segment(rng, n(1, 10), 2)], segment(rng, n(1, 10), 3))
    Q = Request(1, 0, segment(rng, n(20, 60), 4), segment(rng, n(1, 10), 5))     # longer than A2's tail: A2 fits
    cases.append(evict_case("hidden: tie in recency, the deeper leaf goes first, exact fit",
                            [A, A2, Q], nbytes(A) + nbytes(Q), 0.0, f"|A| = {A.n_input}, |A + f| = {A2.n_input}"))
    # recycled node ids make the deeper node of a tie the LOWER id: X, Y evicted (ids freed), then P + y splits
    # P + x and takes them; then R frees x, and the branch P and y's leaf tie: y (deeper, lower id) goes first
    p = n(10, 40)
    P = segment(rng, p, 0)
    X = Request(0, 0, segment(rng, n(1, 3), 1), segment(rng, n(0, 2), 2))
    Y = Request(1, 0, segment(rng, n(1, 3), 3), segment(rng, n(0, 2), 4))
    Px = Request(2, 0, np.r_[P, segment(rng, n(2, 10), 5)], segment(rng, n(1, 5), 6))
    Py = Request(3, 0, np.r_[P, segment(rng, n(8, 20), 7)], segment(rng, n(1, 5), 8))    # y's tail > |X| + |Y|
    edge_x, edge_y = len(Px.tokens) - p, len(Py.tokens) - p
    cap = p * KV + STATE + (edge_x * KV + STATE) + (edge_y * KV + STATE)      # exactly P, x and y after Py
    R = Request(4, 0, segment(rng, edge_x + edge_y + STATE // KV - 3, 9), segment(rng, 3, 10))
    cases.append(evict_case("hidden: tie in recency, the deeper node has the lower (recycled) id, exact fits",
                            [X, Y, Px, Py, R], cap, 0.0, f"|P| = {p}, tails {edge_x} and {edge_y}"))
    for name, alpha in (("hidden: a long trace under heavy eviction, alpha = 0", 0.0),
                        ("hidden: a long trace under heavy eviction, alpha > 0", float(rng.uniform(0.1, 5.0)))):
        tr = _trace(rng, 40, 3)
        cap = n(1, 3) * STATE + n(0, 60) * KV
        cases.append(evict_case(name, tr, cap, alpha, describe_trace(tr)))
    return cases


# ================================================================================================ lab 04
def _index_scores(rng):
    from hybrid_lab.exercises.lab04 import score_case
    return [score_case(rng, "hidden: wide (T = 24, S = 48, Hi = 8, di = 16)", T=24, S=48, Hi=8, di=16),
            score_case(rng, "hidden: unsorted q_pos, some far past the cache", T=10, S=20,
                       q_pos=lambda T, S: rng.permutation(np.r_[rng.integers(0, S, T - 3), S + 100, 0, S - 1])),
            score_case(rng, "hidden: T = S = Hi = di = 1", T=1, S=1, Hi=1, di=1, q_pos=lambda T, S: np.zeros(T)),
            score_case(rng, "hidden: every query at position 0 (S = 40)", T=6, S=40, q_pos=lambda T, S: np.zeros(T)),
            score_case(rng, "hidden: integer inputs, wide", T=12, S=36, Hi=6, di=3, integer=True)]


def _indexer_tie_case(rng):
    """Sparse stage, 40 visible keys whose scores take a few values (integer weights, d_i = 1): every query's top-k
    boundary cuts a group of >= 10 exactly tied keys (ReLU-dead keys tie at 0)."""
    T, S, D, Hi, di = 4, 40, 2, 1, 1
    for _ in range(500):
        P = {"Wq": rng.integers(-1, 2, (D, Hi, di)).astype(float), "Ww": rng.integers(-1, 2, (D, Hi)).astype(float),
             "Wk": np.array([[1.0], [1.0]]), "bw": np.array([2.0])}
        xq = rng.integers(-1, 2, (T, D)).astype(float)
        xk = rng.integers(-1, 2, (S, D)).astype(float)
        q = np.einsum("td,dje->tje", xq, P["Wq"])
        w = xq @ P["Ww"] + P["bw"]
        I = np.einsum("tj,tjs->ts", w, np.maximum(np.einsum("tje,se->tjs", q, xk @ P["Wk"]), 0.0))
        topk = 20
        ok = True
        for row in I:                                   # the value at the cut is shared inside and outside the top-k
            cut = np.sort(row)[::-1][topk - 1]
            inside = int((row > cut).sum())
            if not (inside < topk < inside + int((row == cut).sum())) or (row == cut).sum() < 10:
                ok = False
        if ok and np.abs(q).sum() > 0:
            break
    else:
        raise RuntimeError("04.2 hidden tie case: no draw with ties at every top-k boundary")
    pos = np.full(T, S - 1)
    from hybrid_lab.exercises.lab04 import target
    p = target(rng, T, S, pos)
    return Case("hidden: sparse stage, >= 10 exactly tied keys at every top-k boundary (S = 40, topk = 20)",
                (P, xq, xk, p, pos, 0.3, None, "sparse", topk),
                note=f"T={T}, S={S}, D={D}, Hi={Hi}, di={di}, integer weights, topk={topk}")


def _indexer_step(rng):
    from hybrid_lab.exercises.lab04 import step_case
    return [_indexer_tie_case(rng),
            step_case(rng, "hidden: dense, wide (T = 8, S = 20, D = 6, Hi = 4, di = 6)", T=8, S=20, D=6, Hi=4, di=6),
            step_case(rng, "hidden: sparse, topk = the visible keys exactly", T=3, S=12, stage="sparse",
                      pos=lambda T, S: np.full(T, 9), topk=10),
            step_case(rng, "hidden: sparse, topk = 2 of 16, clipping on", T=4, S=16, stage="sparse", topk=2,
                      pos=lambda T, S: np.full(T, S - 1), clip=lambda n: 0.3 * n),
            step_case(rng, "hidden: no bias, sparse, wide", T=6, S=24, D=5, Hi=3, di=4, bias=False, stage="sparse",
                      topk=7)]


def _prefill_speedup(rng):
    from hybrid_lab.exercises.lab04 import dsa_cfg, speedup_case
    big = int(rng.integers(10 ** 5, 10 ** 6))
    return [speedup_case(rng, "hidden: topk larger than every L", lambda k: rng.integers(1, 10 ** 5, 6),
                         dsa_cfg(rng, topk=10 ** 6)),
            speedup_case(rng, "hidden: L = k - 1, k, k + 1 for a large k", lambda k: [k - 1, k, k + 1],
                         dsa_cfg(rng, topk=big)),
            speedup_case(rng, "hidden: L up to 2^50", lambda k: [2 ** 40, 2 ** 45 + 3, 2 ** 50], dsa_cfg(rng)),
            speedup_case(rng, "hidden: 64 unsorted lengths, a fast FP8 (x16)",
                         lambda k: rng.permutation(np.r_[rng.integers(1, 10 ** 7, 61), k, 1, k + 1]),
                         dsa_cfg(rng, fp8=16.0)),
            speedup_case(rng, "hidden: k = 1, L = 1 and 2", [1, 2], dsa_cfg(rng, topk=1))]


# ================================================================================================ lab 05
def _select_blocks(rng):
    from hybrid_lab.exercises.lab05 import causal_row

    def case(name, row, t, bs, n_blocks):
        return Case(name, (np.asarray(row, float), int(t), int(bs), int(n_blocks)),
                    note=f"S={len(row)}, t={t}, block_size={bs}, n_blocks={n_blocks} (visible blocks: {t // bs + 1})")
    out = []
    for bs in (1, 4):                       # 40 visible blocks of masses 3, 2, 1 (x 2^-10): 16 tied 2s across the cut
        mass = _levels(rng, [10, 16, 14], [3.0, 2.0, 1.0]) * 2.0 ** -10
        out.append(case(f"hidden: 40 blocks, 16 tied at the cut (block_size = {bs})", np.repeat(mass / bs, bs),
                        40 * bs - 1, bs, 18))
    bs = int(rng.integers(3, 9))
    nb = int(rng.integers(4, 9))
    t = nb * bs                              # the query is the first position of block nb: that block is visible
    out.append(case("hidden: t at the first position of a block (it counts)", causal_row(rng, (nb + 3) * bs, t),
                    t, bs, nb + 1))
    out.append(case("hidden: t at the last position of a block (the next is not visible)",
                    causal_row(rng, (nb + 3) * bs, t - 1), t - 1, bs, nb + 1))
    S = int(rng.integers(3, 12))
    out.append(case("hidden: block_size > S (one block)", causal_row(rng, S, S - 1), S - 1, S + 3, 2))
    S = int(rng.integers(20, 60))
    out.append(case("hidden: block_size = 1, n_blocks = 1", causal_row(rng, S, S - 1), S - 1, 1, 1))
    bs, full = int(rng.integers(3, 9)), int(rng.integers(3, 8))
    S = full * bs + 1                        # the last block holds one position: the query's
    out.append(case("hidden: ragged last block of one position, n_blocks = the visible blocks",
                    causal_row(rng, S, S - 1), S - 1, bs, full + 1))
    return out


def _reuse_error(rng):
    from hybrid_lab.exercises.lab05 import softmax

    def case(name, p, q, v, keep):
        return Case(name, (p, q, v, keep), note=f"S={len(p)}, dv={v.shape[1]}, kept={int(keep.sum())}")
    S, dv = 300, 16
    p = softmax(2.0 * rng.standard_normal(S))
    q = softmax(np.log(p) + 0.5 * rng.standard_normal(S))
    v = rng.standard_normal((S, dv))
    keep = np.zeros(S, bool)
    keep[np.argsort(-p, kind="stable")[:40]] = True
    all_but = np.ones(S, bool)
    all_but[int(np.argmin(p))] = False
    onehot = np.zeros(S)
    onehot[int(rng.integers(S))] = 1.0
    k1 = onehot > 0
    return [case("hidden: S = 300, dv = 16", p, q, v, keep),
            case("hidden: keep all but one", p, q, v, all_but),
            case("hidden: p one-hot on the kept position (eps = 0)", onehot, q, v, k1 | keep),
            case("hidden: S = 1", np.ones(1), np.ones(1), rng.standard_normal((1, 3)), np.ones(1, bool))]


def _overlap(rng):
    from hybrid_lab.exercises.lab05 import stack

    def case(name, probs, k):
        return Case(name, (np.asarray(probs, float), int(k)), note=f"n_layers={len(probs)}, L={probs.shape[1]}, k={k}")
    tied = np.stack([_levels(rng, [12, 20, 16], [3.0, 2.0, 1.0]) / 64.0 for _ in range(5)])
    return [case("hidden: 5 layers, 48 positions, 20 tied at the cut (k = 22)", tied, 22),
            case("hidden: one layer, one position (k = L = 1)", np.ones((1, 1)), 1),
            case("hidden: 16 layers, L = 100", stack(rng, 16, 100, 0.4), 10),
            case("hidden: k = L - 1", stack(rng, 4, 30, 0.7), 29)]


# ================================================================================================ lab 06
def _forced_window(rng):
    def case(name, row, t, window, topk):
        return Case(name, (np.asarray(row, float), int(t), int(window), int(topk)),
                    note=f"S={len(row)}, t={t}, window={window}, topk={topk}")
    S, w = 64, 4
    row = np.r_[_levels(rng, [8, 30, 22], [0.5, 0.25, 0.0]), np.ones(w)]   # 60 candidates, 30 tied at the cut
    row2 = np.r_[_levels(rng, [8, 30, 22], [0.5, 0.25, 0.0]), np.ones(w), np.ones(20)]   # + future positions
    S2 = int(rng.integers(10, 40))
    w2 = int(rng.integers(2, 8))
    return [case("hidden: 60 candidates, 30 tied at the cut (topk = 23)", row, S - 1, w, 23),
            case("hidden: 60 candidates and a future, 30 tied at the cut", row2, 63, w, 23),
            case("hidden: t = window - 1 (no candidate: all -1)", rng.uniform(0, 1, S2), w2 - 1, w2, 3),
            case("hidden: t = window (one candidate: position 0)", rng.uniform(0, 1, S2), w2, w2, 3),
            case("hidden: topk = the candidates exactly (no -1)", rng.permutation(S2) / S2, S2 - 1, w2, S2 - w2),
            case("hidden: window = S (the window covers the row)", rng.uniform(0, 1, S2), S2 - 1, S2, 2),
            case("hidden: window = 1, t = 0", rng.uniform(0, 1, S2), 0, 1, 4)]


def _decode(rng):
    from hybrid_lab.exercises.lab06 import decode_case
    return [decode_case(rng, "hidden: FA first, groups of one FA (no SA), windows and topk of 1", L=6, steps=3,
                        self_swa_before=0, groups=2, group_size=1, swa_window=1, window=1, topk=1),
            decode_case(rng, "hidden: prompt = the SWA window exactly, no SWA after the FA", L=4, steps=3,
                        swa_window=4, self_swa_after=0),
            decode_case(rng, "hidden: 4 KV heads (MHA), 3 groups of 2", L=9, steps=3, n_heads_kv=4, groups=3,
                        group_size=2, topk=3)]


def _kv_bytes(rng):
    from hybrid_lab.exercises.lab06 import PAPER_CFG
    from hybrid_lab.models.hysparse2 import HySparse2Config

    def case(name, L, b, **kw):
        c = dict(n_heads_q=4, n_heads_kv=1, d_qk=16, d_v=8, self_swa_before=int(rng.integers(0, 5)),
                 self_swa_after=int(rng.integers(0, 5)), cross_layers=6, group_size=3,
                 swa_window=int(rng.integers(2, 129)), window=4)
        c.update(kw)
        cfg = HySparse2Config(**c)
        L = L(cfg) if callable(L) else L
        return Case(name, (cfg, L, b), note=f"L={L}, bytes_per_elem={b}, {cfg.self_swa_before} SWA + FA + "
                                           f"{cfg.self_swa_after} SWA, {cfg.n_groups} groups, swa_window="
                                           f"{cfg.swa_window}")
    return [case("hidden: L = the SWA window", lambda c: c.swa_window, 2),
            case("hidden: L = the SWA window + 1", lambda c: c.swa_window + 1, 4),
            case("hidden: no SWA layer at all (n_self = 1)", 50, 2, self_swa_before=0, self_swa_after=0),
            case("hidden: swa_window = 1", 33, 1, swa_window=1, self_swa_before=3, self_swa_after=2),
            case("hidden: one group of 6, L = 1", 1, 8, group_size=6),
            case("hidden: the paper configuration at 2^31 + 1 tokens, 8 bytes", 2 ** 31 + 1, 8, cross_layers=24,
                 group_size=6, self_swa_before=12, self_swa_after=12, **PAPER_CFG)]


# ================================================================================================ lab 07
def _p_stream(rng):
    from hybrid_lab.exercises.lab07 import describe, p_model, small_cfg

    def case(name, cfg, L, chunk):
        return Case(name, (p_model(cfg), rng.integers(0, cfg.vocab, L), int(chunk)),
                    note=f"L={L}, chunk_size={chunk}; {describe(cfg)}")
    L = int(rng.integers(5, 20))
    return [case("hidden: a one-token prompt, chunk = 1", small_cfg(rng), 1, 1),
            case("hidden: chunk = L - 1 (a last chunk of one token)", small_cfg(rng), L, L - 1),
            case("hidden: no SWA layer (FA only in the Self-decoder)", small_cfg(rng, self_swa_before=0,
                                                                                 self_swa_after=0), L, 4),
            case("hidden: swa_window = 1, groups of one FA", small_cfg(rng, swa_window=1, groups=3, group_size=1),
                 L, 3),
            case("hidden: chunk far beyond the prompt", small_cfg(rng), L, 1000)]


def _generate(rng):
    from hybrid_lab.exercises.lab07 import describe, small_cfg
    from hybrid_lab.models.hysparse2 import HySparse2, self_decoder_weight_names
    from hybrid_lab.serving.pd_bundle import PDBundle, weights_hash

    def case(name, cfg, L, n_new, tie=False):
        weights = HySparse2.init_weights(cfg)
        if tie:            # the LM head's columns: 10 distinct ones, 32 copies each, shuffled: logits tie 32 ways
            head = weights["lm_head"]
            cols = rng.choice(cfg.vocab, 10, replace=False)
            weights["lm_head"] = np.ascontiguousarray(head[:, _levels(rng, [32] * 10, cols).astype(int)])
        p = HySparse2(cfg, weights={n: weights[n] for n in self_decoder_weight_names(cfg)})
        cache = p.prefill_self(rng.integers(0, cfg.vocab, L))
        bundle = PDBundle.from_cache(cache, cfg, weights_hash(p.weights, self_decoder_weight_names(cfg)),
                                     int(rng.integers(1, 17)))
        return Case(name, (HySparse2(cfg, weights=weights), bundle, n_new),
                    note=f"prompt of {L} tokens, n_new={n_new}; {describe(cfg)}" + (", tied LM head" if tie else ""))
    return [case("hidden: logits tied 32 ways, vocab 320 (ties to the smaller id)", small_cfg(rng, vocab=320),
                 int(rng.integers(3, 12)), 6, tie=True),
            case("hidden: a one-token prompt, n_new = 1", small_cfg(rng), 1, 1),
            case("hidden: swa_window = 1, no SWA after the FA", small_cfg(rng, swa_window=1, self_swa_after=0),
                 int(rng.integers(3, 10)), 3)]


def _longest_path(rng):
    from hybrid_lab.exercises.lab07 import dag_case
    from hybrid_lab.serving.pd_timeline import PDTiming, build_pd_dag

    def short(name, durations, preds, release, order=None):
        order = list(durations) if order is None else order
        return Case(name, (durations, preds, order, release),
                    note=f"{len(order)} tasks, {sum(len(v) for v in preds.values())} edges")
    out = []
    # 40 sinks that end together among 300 that end earlier, in a shuffled order: the first in order ends the path
    # (three draws: an unstable sort of the finish times puts the first of the tied sinks first now and then)
    for j in range(3):
        sinks = [f"k{i:03d}" for i in rng.permutation(340)]
        d = {"s": 2.0, **{k: float(rng.integers(0, 5)) for k in sinks}}
        for k in rng.choice(sinks, 40, replace=False):
            d[str(k)] = 5.0
        out.append(short(f"hidden: 40 of 340 sinks end together (the first in order) #{j + 1}", d,
                         {k: ["s"] for k in sinks}, {}))
    # one join with 40 predecessors that end together, listed in a shuffled order: the first listed is the path
    ps = [f"p{i:02d}" for i in range(40)]
    listed = [ps[i] for i in rng.permutation(40)]
    d = {**{p: 3.0 for p in ps}, "join": 1.0}
    out.append(short("hidden: 40 tied predecessors (the first listed, not the first in order)", d,
                     {"join": listed}, {}))
    # a zero-duration task after the last one ends together with it: the path ends at the first in order
    out.append(dag_case("hidden: a zero-duration successor ends with its predecessor", {"a": 5.0, "z": 0.0,
                        "b": 2.0}, {"z": ["a"], "b": []}, {}))
    chain = {f"c{i:02d}": 0.0 for i in range(40)}
    out.append(short("hidden: a chain of 40 zero-duration tasks, released at 7", chain,
                     {f"c{i:02d}": [f"c{i - 1:02d}"] for i in range(1, 40)}, {"c00": 7.0}))
    out.append(dag_case("hidden: a release that ties two predecessors (the path goes through the first listed)",
                        {"x": 4.0, "y": 4.0, "r": 1.0}, {"r": ["y", "x"]}, {"r": 4.0, "x": 0.0}))
    t = PDTiming(n_requests=3, prompt_len=4096, chunk=1024, bandwidth_gbs=2.0, n_new=2, arrival_gap_ms=50.0)
    dag = build_pd_dag(t)
    out.append(Case("hidden: the PD pipeline (3 requests, 4 chunks, arrivals 50 ms apart)",
                    (dag.durations(), dag.preds(), dag.order, dag.releases()), note=f"{len(dag.order)} tasks"))
    return out


# ================================================================================================ lab 08
def _compress(rng):
    def case(name, window, stride, S, B=None, H=None, d=None, defaults=False):
        B = int(rng.integers(1, 3)) if B is None else B
        H = int(rng.integers(1, 3)) if H is None else H
        d = int(rng.integers(1, 5)) if d is None else d
        k = rng.normal(size=(B, S, H, d))
        return Case(name, (k,) if defaults else (k, window, stride),
                    note=f"B={B}, S={S}, Hkv={H}, d={d}, " + ("window and stride not given" if defaults else
                                                           f"window={window}, stride={stride}"))
    w = int(rng.integers(41, 70))
    s = int(rng.integers(2, w))
    return [case("hidden: S = window - 1 (Nc = 0)", w, s, w - 1),
            case("hidden: S = window + stride - 1 (Nc = 1)", w, s, w + s - 1),
            case("hidden: S = window + stride (Nc = 2)", w, s, w + s),
            case("hidden: window = stride = 1 (every token)", 1, 1, int(rng.integers(2, 30))),
            case("hidden: stride = 1, window = S", 9, 1, 9),
            case("hidden: B = 3, Hkv = 4, d = 8", 8, 3, 41, B=3, H=4, d=8),
            case("hidden: the default (32, 16) grid (window and stride not passed)", 32, 16, 16 * 5 + 7,
                 defaults=True)]


def _kl(rng):
    def case(name, teacher, k, logits=None):
        teacher = np.asarray(teacher, float)
        logits = rng.normal(size=len(teacher)) if logits is None else logits
        return Case(name, (teacher, np.asarray(logits, float), int(k)), note=f"N={len(teacher)}, k={k}")
    N = int(rng.integers(6, 30))
    one = np.zeros(N)
    one[int(rng.integers(N))] = rng.uniform(0.1, 2.0)
    return [case("hidden: N = 48, 18 tied scores across the cut (k = 19)", _levels(rng, [10, 18, 20], [3, 2, 1]), 19),
            case("hidden: 33 tied maxima, k = 1", _levels(rng, [33, 15], [2.0, 1.0]), 1),
            case("hidden: 40 tied scores, a zero-mass rest (k = 36)", _levels(rng, [30, 10, 8], [2, 1, 0]), 36),
            case("hidden: k = N - 1 (one position in the rest bucket)", rng.random(N) + 0.1, N - 1),
            case("hidden: k = N exactly", rng.random(N) + 0.1, N),
            case("hidden: N = 1, k = 1", [0.7], 1),
            case("hidden: one non-zero score, k = 1", one, 1)]


def _forecast_step(rng):
    from hybrid_lab.exercises.lab08 import step_case

    def case(name, *sizes, **kw):
        return step_case(rng, name, *sizes, **kw)
    B, T, H, Nc = 1, 2, 2, 40
    tied = np.stack([_levels(rng, [8, 18, 14], [3.0, 2.0, 1.0]) for _ in range(B * T * H)]).reshape(B, T, H, Nc)
    one = np.zeros((3, 40), bool)
    one[0, 5] = True                                   # a query with exactly one candidate
    one[1, :] = True
    one[2, 10:30] = True
    return [case("hidden: 40 candidates, 18 tied teacher scores across the cut (k = 17)", B, T, H, 4, 3, Nc, 17,
                 teacher=tied, mask=np.ones((T, Nc), bool)),
            case("hidden: a query with exactly one candidate", 2, 3, 1, 3, 4, 40, 4, mask=one),
            case("hidden: wide (B = 3, T = 6, Hkv = 4, Nc = 20)", 3, 6, 4, 8, 6, 20, 5),
            case("hidden: late step (t = 1000), no clipping", 1, 3, 2, 4, 4, 12, 3, t=1000, clip=False)]


# ================================================================================================ lab 09
# The Triton kernels (on a GPU, or on the CPU under TRITON_INTERPRET=1): tile sizes the public cases never use
# (BLOCK_K = 4, 8, 32; D = 1 and past 64; Q = 64), selections that fill the tiles exactly or hold one entry.
def _gather(rng):
    from hybrid_lab.exercises.lab09 import gather_case
    return [gather_case(rng, "hidden: BLOCK_K = 32, ragged (K_SEL = 45)", S=70, k_sel=45, block_k=32),
            gather_case(rng, "hidden: BLOCK_K = 4, 11 programs", S=60, k_sel=41, block_k=4),
            gather_case(rng, "hidden: D = 1", S=30, D=1, k_sel=20),
            gather_case(rng, "hidden: D = 100 (past a power of two)", S=40, D=100, k_sel=33),
            gather_case(rng, "hidden: K_SEL = BLOCK_K exactly (the row after it stays NaN)", S=40, k_sel=16),
            gather_case(rng, "hidden: K_SEL = 1, no padding", S=25, k_sel=1, pad=0)]


def _sparse_decode(rng):
    from hybrid_lab.exercises.lab09 import decode_case
    return [decode_case(rng, "hidden: BLOCK_K = 32", S=80, k_sel=70, block_k=32),
            decode_case(rng, "hidden: BLOCK_K = 8", S=40, k_sel=29, block_k=8),
            decode_case(rng, "hidden: D = 64, 4 KV heads of one query head each", Hkv=4, G=1, D=64, S=40, k_sel=33),
            decode_case(rng, "hidden: every position selected (K_SEL = S), no padding", S=48, k_sel=48, pad="none"),
            decode_case(rng, "hidden: K_SEL = 1", S=30, k_sel=1, pad="none"),
            decode_case(rng, "hidden: 3 sequences, 4 query heads per KV head", B=3, Hkv=1, G=4, S=36, k_sel=30)]


def _chunk_decay(rng):
    from hybrid_lab.exercises.lab09 import chunk_case

    def two_big(Q):
        dt = np.log1p(np.exp(rng.normal(size=Q)))
        dt[[Q // 4, 3 * Q // 4]] = 400.0
        return dt
    return [chunk_case(rng, "hidden: Q = 64, P = 64", 64, 64),
            chunk_case(rng, "hidden: Q = 16, P = 64", 16, 64),
            chunk_case(rng, "hidden: tiny Δ (1e-6: L is almost the causal mask)", dt=lambda Q: np.full(Q, 1e-6)),
            chunk_case(rng, "hidden: Δ x1000 everywhere", dt=lambda Q: 1000 * np.log1p(np.exp(rng.normal(size=Q)))),
            chunk_case(rng, "hidden: two large steps", 64, 16, dt=two_big)]


# ================================================================================================ lab 10
def _accuracy(rng):
    from hybrid_lab.exercises.lab10 import acc_case

    def tied():                 # 300 logits per answer, 32 of them tied at the maximum (shuffled): the target is the
        B, T, V = 2, 12, 300    # first maximum, another maximum, or not a maximum
        logits = np.stack([_levels(rng, [32, 134, 134], [2.0, 1.0, 0.0]) for _ in range(B * T)]).reshape(B, T, V)
        targets = np.empty((B, T), np.int64)
        for b in range(B):
            for t in range(T):
                top = np.flatnonzero(logits[b, t] == 2.0)
                targets[b, t] = (top[0], top[int(rng.integers(1, len(top)))],
                                 int(np.flatnonzero(logits[b, t] < 2.0)[0]))[(b * T + t) % 3]
        return acc_case(rng, "hidden: 32 tied maxima among 300 logits (numpy's first maximum)", B=B, T=T, V=V,
                        edges=[0, 10, 20], logits=logits, targets=targets,
                        dist=lambda B, T, e: rng.integers(0, 20, (B, T)))
    return [tied(),
            acc_case(rng, "hidden: buckets of width 1", edges=np.arange(5, 12), dist=lambda B, T, e:
                     rng.integers(4, 13, (B, T))),
            acc_case(rng, "hidden: wide batch (B = 6, T = 64, V = 50)", B=6, T=64, V=50),
            acc_case(rng, "hidden: nothing asked (every bucket empty)", asked=lambda B, T, e: np.zeros((B, T), bool)),
            acc_case(rng, "hidden: dist at the first edge and one below", edges=[3, 9, 30],
                     dist=lambda B, T, e: rng.choice([2, 3, 29, 30], (B, T)),
                     asked=lambda B, T, e: np.ones((B, T), bool))]


def _cache_bytes(rng):
    from hybrid_lab.exercises.lab10 import KINDS, UNKNOWN

    def case(name, layers, context, window, kv=None, state=None):
        kv = int(rng.integers(1, 5) * rng.choice([16, 32, 64, 128]) * 2) if kv is None else kv
        state = int(rng.integers(1_000, 200_001)) if state is None else state
        return Case(name, (tuple(layers), int(context), int(window), kv, state),
                    note=f"layers={tuple(layers)}, context={context}, window={window}, kv_bytes={kv}, "
                         f"state_bytes={state}")
    w = int(rng.integers(2, 300))
    mixed = [str(k) for k in rng.choice(KINDS, 49)]
    return [case("hidden: window = 1", ["swa", "attn", "swa"], int(rng.integers(2, 100)), 1),
            case("hidden: context = window + 1", ["swa", "mamba2", "swa"], w + 1, w),
            case("hidden: context = 1", list(KINDS), 1, w),
            case("hidden: 49 mixed layers, 2^30 positions", mixed, 2 ** 30, w, kv=4096),
            case(UNKNOWN, ["attn", "swa2", "mamba2"], 10, w)]


def _evidence(rng):
    from hybrid_lab.exercises.lab10 import recall_case, selection

    def dup_rows(q, kept, missing):                  # the same position twice: kept twice (True) or missing twice
        p = int(rng.choice(sorted(kept))) if q % 2 == 0 else int(rng.choice(sorted(missing)))
        return [p, p, -1]
    return [Case("hidden: E = 0 (no evidence slot at all: True)", (selection(rng, 4, 50, 6), np.zeros((4, 0),
                                                                                                  np.int64)),
                 note="Q=4, K=6, E=0"),
            Case("hidden: one query, idx [-1], evidence [-1]", (np.array([[-1]]), np.array([[-1]])),
                 note="Q=1, K=1, E=1"),
            recall_case(rng, "hidden: wide (Q = 50, K = 64, E = 6)", Q=50, S=400, K=64, E=6),
            recall_case(rng, "hidden: an evidence position listed twice", Q=6, S=60, K=10, E=3, pad=0.0,
                        rows=dup_rows)]


# ================================================================================================ lab 11
def _topk_recall(rng):
    from hybrid_lab.exercises.lab11 import recall_case

    def tied_scores(vis, p):                           # 48 keys: 8 at 2, 24 tied at 1 across the cut, 16 at 0
        return np.stack([_levels(rng, [8, 24, 16], [2.0, 1.0, 0.0]) for _ in range(len(vis))])

    def tied_probs(vis):
        return np.stack([_levels(rng, [8, 24, 16], [3.0, 2.0, 1.0]) / 64.0 for _ in range(len(vis))])

    def noisy(vis, p):
        return rng.normal(0.0, 1.0, vis.shape)

    def everything(T, S):
        return np.ones((T, S), bool)
    return [recall_case(rng, "hidden: 24 tied scores across the cut (S = 48, k = 20)", T=4, S=48, k=20,
                        visible=everything, scores=tied_scores),
            recall_case(rng, "hidden: 24 tied probabilities across the cut (S = 48, k = 20)", T=4, S=48, k=20,
                        visible=everything, scores=noisy, probs=tied_probs),
            recall_case(rng, "hidden: k = the visible keys exactly", T=3, S=10, k=10, visible=everything),
            recall_case(rng, "hidden: k = the visible keys - 1", T=3, S=10, k=9, visible=everything),
            recall_case(rng, "hidden: T = S = 1", T=1, S=1, k=1)]


def _topk_attention(rng):
    from hybrid_lab.exercises.lab11 import attn_case

    def negative(rng, name, **kw):                     # every logit about -900: exp underflows to 0 (0 / 0)
        c = attn_case(rng, name, **kw)
        q, k, v, idx, scale = c.args
        q, k = q.copy(), k.copy()
        q[:, 0] = np.sqrt(900.0 / scale)
        k[:, :, 0] = -np.sqrt(900.0 / scale)
        return Case(c.name, (q, k, v, idx, scale), note=c.note + ", logits about -900")

    def everything(Hkv, S, K):
        return np.stack([rng.permutation(S) for _ in range(Hkv)])

    def last_and_pad(Hkv, S, K):                       # position S - 1 selected, -1 slots next to it
        sel = np.full((Hkv, K), -1)
        sel[:, 0] = S - 1
        sel[:, 2] = rng.integers(0, S - 1, Hkv)
        return sel
    return [negative(rng, "hidden: logits about -900 (exp underflows unless the max is subtracted)", d=8, K=6),
            attn_case(rng, "hidden: every position selected (K = S)", S=20, K=20, idx=everything),
            attn_case(rng, "hidden: Hq = Hkv = 4 (G = 1), d = 64", Hkv=4, G=1, d=64, dv=32),
            attn_case(rng, "hidden: position S - 1 next to -1 padding", K=4, idx=last_and_pad),
            attn_case(rng, "hidden: K = 1, every slot -1", K=1, idx=lambda Hkv, S, K: np.full((Hkv, K), -1))]


def _fetch(rng):
    from hybrid_lab.exercises.lab11 import fetch_case
    N = 10 ** 9
    a = rng.choice(np.arange(N - 100, N), 8, replace=False)
    return [fetch_case(rng, "hidden: everything empty (K1 = K2 = R = 0)", [], [], []),
            fetch_case(rng, "hidden: all -1 in prev_blocks and new_blocks", [-1, -1], [-1, -1, -1], [0]),
            fetch_case(rng, "hidden: block ids near 10^9, block_bytes = 1", a[:4], a[2:], [a[7]], block_bytes=1),
            fetch_case(rng, "hidden: a block in prev_blocks and resident, selected again", [5, 7, -1],
                       [7, 5, 9, -1], [7, 0]),
            fetch_case(rng, "hidden: -1 in resident too", [3], [3, 4, -1, 6], [-1, 6]),
            fetch_case(rng, "hidden: 64 new blocks, -1 slots among them",
                       rng.permutation(200)[:16], np.where(rng.random(64) < 0.2, -1, rng.permutation(300)[:64]),
                       [0])]


CASES = {"00.1": _kv_per_token, "00.2": _crossover,
         "01.1": _ssm_step, "01.2": _decay, "01.3": lambda rng: _ssd(rng, False), "01.4": lambda rng: _ssd(rng, True),
         "02.1": _ledger, "02.2": _reuse,
         "03.1": _admit, "03.2": _score, "03.3": _evict,
         "04.1": _index_scores, "04.2": _indexer_step, "04.3": _prefill_speedup,
         "05.1": _select_blocks, "05.2": _reuse_error, "05.3": _overlap,
         "06.1": _forced_window, "06.2": _decode, "06.3": _kv_bytes,
         "07.1": _p_stream, "07.2": _generate, "07.3": _longest_path,
         "08.1": _compress, "08.2": _kl, "08.3": _forecast_step,
         "09.1": _gather, "09.2": _sparse_decode, "09.3": _chunk_decay,
         "10.1": _accuracy, "10.2": _cache_bytes, "10.3": _evidence,
         "11.1": _topk_recall, "11.2": _topk_attention, "11.3": _fetch}
