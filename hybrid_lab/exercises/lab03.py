"""Exercises of notebook 03 (Marconi prefix caching): Marconi's admission and eviction plugged into the real radix
cache and checked by the cache's decisions on fresh random traces and on edge-case traces, and the eviction score
as the paper computes it (Marconi §4.1-§4.2; Lecture 10 §4.2-§4.3).

Every trace runs on the 7B byte model (65,536 B of KV per token, 25,165,824 B per SSM state). The admission and
eviction checks replay each trace twice, once with the student's function as the cache's hook and once with the
library's (:func:`~hybrid_lab.serving.radix_cache.marconi_admission`, :func:`~hybrid_lab.serving.radix_cache.
marconi_evict`), and compare per request: the hook's answer, the hit, the states admitted and the evictions."""
from __future__ import annotations

import numpy as np

from hybrid_lab.costs.shape7b import L7B
from hybrid_lab.exercises.framework import Case, Exercise, register
from hybrid_lab.serving.eviction import eviction_scores
from hybrid_lab.serving.radix_cache import RadixCache, marconi_admission, marconi_evict
from hybrid_lab.serving.workloads import Request, exercise3_trace

KV, STATE = L7B.kv_bytes_per_token, L7B.state_bytes
NO_EVICTION = 1e15


# ------------------------------------------------------------------------------------------ traces
def segment(rng, n, k):
    """n random token ids from the k-th block of 1,000 ids: segments with different k never share a first token."""
    return rng.integers(1000 * k, 1000 * k + 1000, int(n)).astype(np.int32)


def random_trace(rng, vocab=4, n=None, kinds=("new", "follow", "share"), follow_len=(1, 7), new_len=(1, 11),
                 output_len=(0, 6)):
    """n requests (None: 6-16) over a tiny vocabulary: new requests, follow-up turns, and requests that share a
    random cut of an earlier sequence (branch points inside edges and at node ends). Each request's kind is drawn
    uniformly from ``kinds`` (repeat a kind to weight it); ``follow_len``, ``new_len`` and ``output_len`` are the
    [low, high) ranges of a follow-up's added tokens, a new or shared request's own tokens and the output. The
    defaults make the public cases' traces."""
    seqs, turns, out = {}, {}, []
    for _ in range(int(rng.integers(6, 17)) if n is None else n):
        kind = rng.choice(kinds) if seqs else "new"
        if kind == "follow":
            s = int(rng.choice(sorted(seqs)))
            inp = np.concatenate([seqs[s], rng.integers(0, vocab, int(rng.integers(*follow_len)))])
        else:
            s = len(turns)
            turns[s] = 0
            base = seqs[int(rng.choice(sorted(seqs)))] if kind == "share" else np.zeros(0, np.int64)
            inp = np.concatenate([base[: int(rng.integers(0, len(base) + 1))],
                                  rng.integers(0, vocab, int(rng.integers(*new_len)))])
        r = Request(s, turns[s], inp.astype(np.int32),
                    rng.integers(0, vocab, int(rng.integers(*output_len))).astype(np.int32))
        out.append(r)
        turns[s] += 1
        seqs[s] = r.tokens
    return out


def describe_trace(trace) -> str:
    return f"{len(trace)} requests, inputs of {min(r.n_input for r in trace)}-{max(r.n_input for r in trace)} tokens"


# ------------------------------------------------------------------------------------------ 03.1 admission
def admit_reference(n_input, n_tokens, m, inside_edge, node_children, node_has_state):
    """Marconi's admission: [branch point found by speculative insertion, if any] + [the last decoded token]."""
    return marconi_admission(n_input, n_tokens, m, inside_edge, node_children, node_has_state)


ARGS = ("n_input", "n_tokens", "m", "inside_edge", "node_children", "node_has_state")


def _call(args) -> str:
    return "admit(" + ", ".join(f"{k}={v}" for k, v in zip(ARGS, args)) + ")"


def _positions(out) -> list:
    if out is None:
        raise ValueError("admit returned None; return the list of positions, e.g. [n_tokens]")
    return sorted({int(p) for p in out})


def _run_admit(fn, case):
    """A unit case: the positions. A trace: per request (the hook's arguments, its positions, hit, states admitted)."""
    if "trace" not in case.kwargs:
        return _positions(fn(*case.args))
    calls = []

    def hook(*args):
        out = fn(*args)
        pos = _positions(out)
        calls.append((tuple(args), pos))
        return out if isinstance(out, (list, tuple, np.ndarray)) else pos

    cache = RadixCache(case.kwargs["capacity"], alpha=0.5, admit_fn=hook)
    cache.keep_log = True
    rows = []
    for r in case.kwargs["trace"]:
        cache.serve(r)
        args, pos = calls[-1]
        rows.append((args, pos, cache.log[-1].hit, list(cache.log[-1].states_added)))
    return rows


def _compare_admit(got, want, case):
    if "trace" not in case.kwargs:
        return None if got == want else f"{_call(case.args)} returned {got}, expected {want}"
    for i, (g, w) in enumerate(zip(got, want)):
        if g == w:
            continue
        head = f"request {i + 1} of {len(want)}"
        if g[0] != w[0]:                                    # cannot happen while every earlier answer was right
            return f"{head}: the cache's walk differs ({_call(g[0])} vs {_call(w[0])})"
        if g[1] != w[1]:
            return f"{head}: {_call(w[0])} returned {g[1]}, expected {w[1]}"
        return f"{head}: hit {g[2]}, states admitted {g[3]}; expected hit {w[2]}, states {w[3]}"
    return None


def _admit_cases(rng):
    cases = [Case("random trace", kwargs={"trace": tr, "capacity": NO_EVICTION}, note=describe_trace(tr))
             for tr in (random_trace(rng) for _ in range(2))]
    tr = random_trace(rng)
    cap = int(rng.integers(2, 5)) * STATE + int(rng.integers(0, 100)) * KV
    cases.append(Case("random trace, under eviction", kwargs={"trace": tr, "capacity": cap},
                      note=f"{describe_trace(tr)}, capacity {cap:,} B"))

    def trace_case(name, trace, note=""):
        return Case(name, kwargs={"trace": trace, "capacity": NO_EVICTION}, note=note or describe_trace(trace))

    def n(lo, hi):
        return int(rng.integers(lo, hi))

    one = Request(0, 0, segment(rng, n(5, 40), 0), segment(rng, n(1, 20), 1))
    cases.append(trace_case("empty tree (one request)", [one]))
    lens = {"len_s": n(5, 60), "len_d": n(20, 300), "len_q": n(2, 30), "len_a": n(1, 40), "len_f": n(1, 20)}
    ex3 = exercise3_trace(**lens, seed=n(0, 10 ** 6), vocab=1000)
    cases.append(trace_case("lecture exercise 3 (shared S + D)", ex3,
                            note=", ".join(f"{k[4:]}={v}" for k, v in lens.items())))
    P = segment(rng, n(5, 40), 0)
    a, b = segment(rng, n(1, 10), 1), segment(rng, n(1, 10), 2)
    cases.append(trace_case("the same prompt again (m = n_input)",
                            [Request(0, 0, P, a), Request(1, 0, P, a), Request(2, 0, P, b)],
                            note=f"|prompt| = {len(P)}, answers of {len(a)} and {len(b)} tokens"))
    q1, q2 = segment(rng, n(1, 10), 3), segment(rng, n(1, 10), 4)
    cases.append(trace_case("branch exactly at an edge end (a node without, then with a state)",
                            [Request(0, 0, P, a), Request(1, 0, P, b), Request(2, 0, np.r_[P, q1], a),
                             Request(3, 0, np.r_[P, q2], b)],
                            note=f"|P| = {len(P)}: P + answer, P + another answer, P + q1, P + q2"))
    x = Request(0, 0, segment(rng, n(5, 40), 0), segment(rng, n(1, 20), 1))
    y = Request(0, 1, np.r_[x.tokens, segment(rng, n(1, 10), 2)], segment(rng, n(1, 20), 3))
    z = Request(0, 2, np.r_[y.tokens, segment(rng, n(1, 10), 4)], segment(rng, n(1, 20), 5))
    cases.append(trace_case("next turns of a conversation (the walk ends at a leaf)", [x, y, z]))
    S = segment(rng, n(5, 40), 0)
    cases.append(trace_case("no output tokens (n_tokens = n_input)",
                            [Request(k, 0, np.r_[S, segment(rng, n(1, 10), k + 1)]) for k in range(3)]))
    n_in = n(5, 50)
    m, out = n(1, n_in), n(0, 30)
    cases.append(Case("walk ends at a leaf without a state (unit)", (n_in, n_in + out, m, False, 0, False)))
    cases.append(Case("nothing matched, m = 0 (unit)", (n_in, n_in + out, 0, False, n(1, 5), False)))
    cases.append(Case("input ends inside an edge, m = n_input (unit)", (n_in, n_in + out, n_in, True, 0, False)))
    return cases


register(Exercise("03.1", "admit", admit_reference, _admit_cases, run=_run_admit, compare=_compare_admit,
                  forbidden=("hybrid_lab.serving.radix_cache:marconi_admission",
                             "hybrid_lab.serving.radix_cache:RadixCache._speculative_insertion")))


# ------------------------------------------------------------------------------------------ 03.2 eviction score
def eviction_score_reference(last_access, saved_flops, nbytes, alpha, now):
    """(n,) normalize(1 / (now - last_access)) + alpha * normalize(saved_flops / nbytes) (0 for 0 bytes): the
    paper's score."""
    return eviction_scores(last_access, saved_flops, nbytes, alpha, now=now)


def score_case(rng, name, n=None, alpha=None, zero_bytes=False, same_time=False, same_eff=False, now_gap=None):
    n = int(rng.integers(2, 13)) if n is None else n
    t = np.full(n, float(rng.integers(0, 100))) if same_time else rng.permutation(100)[:n].astype(float)
    now = float(t.max() + (rng.integers(1, 5) if now_gap is None else now_gap))
    nbytes = rng.uniform(1e6, 1e9, n)
    saved = nbytes * rng.uniform(5e4, 2.5e5) if same_eff else rng.uniform(1e11, 1e14, n)
    if zero_bytes:
        nbytes[int(rng.integers(n))] = 0.0
    alpha = float(rng.uniform(0.1, 3.0)) if alpha is None else alpha
    return Case(name, (t, saved, nbytes, alpha, now), note=f"n={n}, alpha={alpha:.3g}, now={now:g}")


def _score_cases(rng):
    return ([score_case(rng, "random") for _ in range(4)]
            + [score_case(rng, "a node holding 0 bytes", zero_bytes=True),
               score_case(rng, "every node used at the same time (constant recency)", same_time=True),
               score_case(rng, "equal FLOPs per byte (constant efficiency)", same_eff=True),
               score_case(rng, "alpha = 0 (LRU)", alpha=0.0), score_case(rng, "one node", n=1),
               score_case(rng, "large alpha (100)", alpha=100.0),
               score_case(rng, "now long after the last access (ages >> 1)", now_gap=50)])


register(Exercise("03.2", "eviction_score", eviction_score_reference, _score_cases, axes={"result": ("node",)},
                  forbidden=("hybrid_lab.serving.eviction:eviction_scores", "hybrid_lab.serving.eviction:node_scores",
                             "hybrid_lab.serving.eviction:normalize", "hybrid_lab.serving.eviction:flop_efficiency")))


# ------------------------------------------------------------------------------------------ 03.3 eviction
def evict_reference(tree, bytes_to_free, alpha):
    """Marconi's eviction loop on a TreeView: the paper's score over the nodes with <= 1 child (prefix bytes,
    recency from tree.now), the lowest goes, re-scored every round."""
    return marconi_evict(tree, bytes_to_free, alpha)


def _what(e) -> str:
    span = f"[{e['end'] - e['edge_len']}, {e['end']})"
    return f"leaf {span}" if e["nchild"] == 0 else f"the state of {span} (one child)"


def _run_evict(fn, case):
    """Per request: (hit, states admitted, [what was evicted, in order])."""
    cache = RadixCache(case.kwargs["capacity"], alpha=case.kwargs["alpha"], evict_fn=fn)
    cache.keep_log, cache.eviction_log = True, []
    rows = []
    for r in case.kwargs["trace"]:
        k = len(cache.eviction_log)
        cache.serve(r)
        rows.append((cache.log[-1].hit, list(cache.log[-1].states_added),
                     [_what(e) for e in cache.eviction_log[k:]]))
    return rows


def _compare_evict(got, want, case):
    for i, (g, w) in enumerate(zip(got, want)):
        if g == w:
            continue
        head = f"request {i + 1} of {len(want)}"
        if g[2] != w[2]:
            return f"{head}: evicted {g[2] or 'nothing'}; expected {w[2] or 'nothing'}"
        return f"{head}: hit {g[0]}, states admitted {g[1]}; expected hit {w[0]}, states {w[1]}"
    return None


def evict_case(name, trace, capacity, alpha, note=""):
    return Case(name, kwargs={"trace": trace, "capacity": capacity, "alpha": alpha},
                note=(note + "; " if note else "") + f"capacity {capacity:,} B, alpha {alpha:g}")


def _bytes(tokens, states):
    return int(tokens) * KV + int(states) * STATE


def _evict_cases(rng):
    def n(lo, hi):
        return int(rng.integers(lo, hi))

    cases = []
    for name, alpha in (("random trace, alpha = 0 (LRU)", 0.0), ("random trace, alpha > 0", None),
                        ("random trace, alpha > 0", None)):
        tr = random_trace(rng)
        cap = n(1, 5) * STATE + n(0, 100) * KV
        alpha = float(rng.uniform(0.1, 3.0)) if alpha is None else alpha
        cases.append(evict_case(name, tr, cap, alpha, describe_trace(tr)))

    # P + x, then P + y (a branch at P): x goes first (oldest); then the branch node and y's leaf tie in recency
    p, ax, ay = n(10, 60), n(2, 20), n(25, 60)
    P = segment(rng, p, 0)
    tr = [Request(0, 0, np.r_[P, segment(rng, ax - 1, 1)], segment(rng, 1, 2)),
          Request(1, 0, np.r_[P, segment(rng, ay - 5, 3)], segment(rng, 5, 4))]
    cases.append(evict_case("alpha = 0, a tie in recency (a branch node and its new leaf)", tr,
                            _bytes(p + ax, 1), 0.0, f"|P| = {p}, tails of {ax} and {ay} tokens"))

    # the branch node at P is the least recently used node, but it has two children
    x = Request(0, 0, np.r_[P, segment(rng, n(2, 10), 1)], segment(rng, n(1, 10), 2))
    y = Request(1, 0, np.r_[P, segment(rng, n(2, 10), 3)], segment(rng, n(1, 10), 4))
    y2 = Request(1, 1, np.r_[y.tokens, segment(rng, n(1, 10), 5)], segment(rng, n(1, 10), 6))
    x2 = Request(0, 1, np.r_[x.tokens, segment(rng, n(1, 10), 7)], segment(rng, n(1, 10), 8))
    Q = Request(2, 0, segment(rng, n(20, 80), 9), segment(rng, n(1, 10), 10))
    held = _bytes(len(x2.tokens) + len(y2.tokens) - p, 5)
    cases.append(evict_case("alpha = 0, a branch point older than its children", [x, y, y2, x2, Q], held, 0.0,
                            f"|P| = {p}"))

    # after P + x, P + y, a long Q must free the branch node at P too, which becomes a candidate only once x and y
    # are gone
    x = Request(0, 0, np.r_[P, segment(rng, n(2, 10), 1)], segment(rng, n(1, 10), 2))
    y = Request(1, 0, np.r_[P, segment(rng, n(2, 10), 3)], segment(rng, n(1, 10), 4))
    tails = len(x.tokens) + len(y.tokens) - 2 * p
    q = tails + STATE // KV + n(20, min(200, p + 300))
    Q = Request(2, 0, segment(rng, q - 5, 9), segment(rng, 5, 10))
    cases.append(evict_case("alpha = 0, a branch point becomes a candidate once its leaves are gone", [x, y, Q],
                            _bytes(p + tails, 3) + n(0, 10) * KV, 0.0, f"|P| = {p}, |Q| = {q}"))

    # A, A + f, A + f + g: A (one child) is the least recently used: only its state goes
    A = Request(0, 0, segment(rng, n(10, 60), 0), segment(rng, n(1, 10), 1))
    A2 = Request(0, 1, np.r_[A.tokens, segment(rng, n(1, 10), 2)], segment(rng, n(1, 10), 3))
    A3 = Request(0, 2, np.r_[A2.tokens, segment(rng, n(1, 10), 4)], segment(rng, n(1, 10), 5))
    cases.append(evict_case("alpha = 0, an intermediate node gives up its state", [A, A2, A3],
                            _bytes(len(A3.tokens), 3) - n(1, 1000), 0.0, f"|A| = {A.n_input}"))

    # a long prefix, then two short ones: LRU would drop the long one, FLOP efficiency keeps it
    L = Request(0, 0, segment(rng, n(1500, 2500), 0), segment(rng, 10, 1))
    s = n(10, 40)
    S1 = Request(1, 0, segment(rng, s, 2), segment(rng, 5, 3))
    S2 = Request(2, 0, segment(rng, s, 4), segment(rng, 5, 5))
    cases.append(evict_case("alpha = 2, a long prefix outlives a more recent short one", [L, S1, S2],
                            _bytes(len(L.tokens) + 2 * (s + 5), 3) - n(1, 1000), 2.0,
                            f"|long| = {L.n_input}, |short| = {s}"))

    # a long prefix, a short follow-up of it, then a medium request: the follow-up's leaf saves little relative to
    # its parent (the long prefix is reused anyway)
    L2 = Request(0, 1, np.r_[L.tokens, segment(rng, n(3, 10), 6)], segment(rng, 5, 7))
    M = Request(1, 0, segment(rng, n(200, 400), 8), segment(rng, 5, 9))
    cases.append(evict_case("alpha = 2, FLOPs saved relative to the parent", [L, L2, M],
                            _bytes(len(L2.tokens) + len(M.tokens), 3) - n(1, 1000), 2.0,
                            f"|long| = {L.n_input}, follow-up + {L2.n_input - len(L.tokens)}, |medium| = {M.n_input}"))

    # a long prefix L, a short request S, then a 300-token follow-up X of L (the most recent leaf): per byte of its
    # whole prefix X saves least, per byte of its own edge it would beat S
    L = Request(0, 0, segment(rng, n(2500, 3500), 0), segment(rng, 10, 1))
    S = Request(1, 0, segment(rng, n(80, 120), 2), segment(rng, 5, 3))
    X = Request(0, 1, np.r_[L.tokens, segment(rng, n(240, 340), 4)], segment(rng, 10, 5))
    Q = Request(2, 0, segment(rng, 50, 6), segment(rng, 5, 7))
    held = _bytes(len(X.tokens) + len(S.tokens) + len(Q.tokens), 4) - n(1, 1000)
    cases.append(evict_case("alpha = 10, a short tail under a long prefix (bytes of the whole prefix)", [L, S, X, Q],
                            held, 10.0, f"|L| = {L.n_input}, |S| = {S.n_input}, tail {X.n_input - len(L.tokens)}"))

    one = Request(0, 0, segment(rng, n(5, 50), 0), segment(rng, n(1, 10), 1))
    cases.append(evict_case("capacity smaller than one entry", [one, Request(1, 0, one.input_ids, segment(rng, 3, 2))],
                            n(0, STATE), float(rng.uniform(0.1, 3.0))))
    return cases


register(Exercise("03.3", "evict", evict_reference, _evict_cases, run=_run_evict, compare=_compare_evict,
                  forbidden=("hybrid_lab.serving.radix_cache:marconi_evict",
                             "hybrid_lab.serving.radix_cache:RadixCache._pick_victim"),
                  preamble="import numpy as np\nfrom hybrid_lab.exercises.lab03 import eviction_score_reference as "
                           "eviction_score"))
