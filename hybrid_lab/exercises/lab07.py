"""Exercises of notebook 07 (prefill/decode disaggregation of HySparse2): P's streaming of the hand-off bundle
(each array sent as soon as it is final), D's first-token step and decode loop, and the critical path of the
pipeline's dependency DAG (start = max(release, predecessors' finish), ties by the stated rule)."""
from __future__ import annotations

import numpy as np

from hybrid_lab.exercises.framework import Case, Exercise, compare_values, register
from hybrid_lab.models.hysparse2 import HySparse2, HySparse2Cache, HySparse2Config, self_decoder_weight_names
from hybrid_lab.serving.pd_bundle import PDBundle, make_header, weights_hash, wire_plan
from hybrid_lab.serving.pd_timeline import PDTiming, build_pd_dag, critical_path
from hybrid_lab.serving.pd_workers import DWorker

NOTEBOOK_CFG = dict(d_model=64, seed=1)             # notebook 07's model: the paper layout at toy width


def small_cfg(rng, **kw):
    """A random small ``HySparse2Config`` (vocab 32, d_model 16); keyword arguments override its fields."""
    groups, gsize = kw.pop("groups", int(rng.integers(1, 4))), kw.pop("group_size", int(rng.integers(1, 4)))
    c = dict(vocab=32, d_model=16, d_ff=24, n_heads_q=4, n_heads_kv=int(rng.choice([1, 2])), d_qk=8,
             d_v=int(rng.choice([4, 8])), self_swa_before=int(rng.integers(0, 3)),
             self_swa_after=int(rng.integers(1, 3)), cross_layers=groups * gsize, group_size=gsize,
             window=int(rng.integers(2, 5)), topk=int(rng.integers(2, 6)), swa_window=int(rng.integers(2, 7)),
             seed=int(rng.integers(0, 10 ** 6)))
    c.update(kw)
    return HySparse2Config(**c)


def describe(cfg) -> str:
    """A HySparse2Config's layout in one line, for a Case's note."""
    return (f"{cfg.self_swa_before} SWA + FA + {cfg.self_swa_after} SWA, {cfg.n_groups} cross group(s), "
            f"Hkv={cfg.n_heads_kv}, swa_window={cfg.swa_window}")


# ------------------------------------------------------------------------------------------ 07.1 P streams the bundle
class StreamingPModel(HySparse2):
    """A P worker's model (Self-decoder + bridges only) that records ``frontier``: how many prompt positions it
    has prefilled so far (the check reads it each time an array is yielded)."""

    def __init__(self, cfg, weights=None):
        super().__init__(cfg, weights)
        self.frontier = 0

    def prefill_self(self, tokens, cache=None):
        out = super().prefill_self(tokens, cache)
        self.frontier = max(self.frontier, out.pos)
        return out


def p_stream_reference(model, tokens, chunk_size):
    """P's side of the hand-off as a generator: prefill the prompt chunk by chunk (``model.prefill_self``
    continuing the cache) and yield every payload array of ``wire_plan`` as soon as it is final: after chunk c,
    the chunk's rows of the self FA k, v then of every cross group's k, v; after the last chunk the SWA windows
    (k, v, pos of each) and the boundary state."""
    cache = None
    for c0 in range(0, len(tokens), chunk_size):
        c1 = min(c0 + chunk_size, len(tokens))
        cache = model.prefill_self(tokens[c0:c1], cache)
        yield cache.self_fa.k[c0:c1]
        yield cache.self_fa.v[c0:c1]
        for kv in cache.cross:
            yield kv.k[c0:c1]
            yield kv.v[c0:c1]
    for w in cache.self_swa:
        yield w.k
        yield w.v
        yield w.pos
    yield cache.boundary


def p_model(cfg):
    """A ``StreamingPModel`` of cfg with the Self-decoder weights only (a P worker's)."""
    w = HySparse2.init_weights(cfg)
    return StreamingPModel(cfg, weights={n: w[n] for n in self_decoder_weight_names(cfg)})


def _stream_cases(rng):
    def case(name, cfg, L, chunk):
        tokens = rng.integers(0, cfg.vocab, L)
        return Case(name, (p_model(cfg), tokens, chunk), note=f"L={L}, chunk_size={chunk}; {describe(cfg)}")

    def ragged(cfg=None):
        chunk = int(rng.integers(2, 9))
        return case("ragged prompt (last chunk short)", cfg or small_cfg(rng),
                    chunk * int(rng.integers(1, 5)) + int(rng.integers(1, chunk)), chunk)
    out = []
    for _ in range(2):
        L = int(rng.integers(5, 50))
        out.append(case("random", small_cfg(rng), L, int(rng.integers(2, 17))))
    chunk = int(rng.integers(2, 9))
    return out + [ragged(),
                  case("prompt a multiple of the chunk", small_cfg(rng), 4 * chunk, chunk),
                  case("one chunk (chunk >= prompt)", small_cfg(rng), (L := int(rng.integers(3, 20))),
                       L + int(rng.integers(0, 5))),
                  case("chunk = 1", small_cfg(rng), int(rng.integers(3, 9)), 1),
                  case("prompt shorter than the SWA window", small_cfg(rng, swa_window=6), 3, 2),
                  case("the notebook's model (49 layers)", HySparse2Config(**NOTEBOOK_CFG),
                       int(rng.integers(20, 41)), 16)]


def _run_stream(fn, case):
    """[(array, positions prefilled when it was yielded)] for every array the function yields."""
    model = case.args[0]
    out = []
    for a in fn(*case.args):
        out.append((np.array(a, copy=True), model.frontier))
    return out


def _compare_stream(got, want, case):
    model, tokens, chunk = case.args
    plan = [name for name, _, _ in wire_plan(make_header(model.cfg, "-", len(tokens), chunk))]
    if len(got) != len(want):
        extra = (f"first missing: {plan[len(got)]}" if len(got) < len(want) else
                 f"{len(got) - len(want)} extra")
        return f"yielded {len(got)} arrays, the wire plan has {len(want)} ({extra})"
    for j, ((ga, gf), (wa, wf), name) in enumerate(zip(got, want, plan)):
        p = compare_values(ga, wa, f"array {j} ({name})", ("slot",) if name.endswith("pos") else ("s", "head", "d"))
        if p:
            return p
        if gf != wf:
            return (f"array {j} ({name}) was yielded when {gf} of the {len(tokens)} positions had been prefilled; "
                    f"it is final (and P can send it) after {wf}")
    return None


register(Exercise("07.1", "p_stream", p_stream_reference, _stream_cases, run=_run_stream, compare=_compare_stream,
                  forbidden=("hybrid_lab.serving.pd_bundle:PDBundle.to_arrays",
                             "hybrid_lab.serving.pd_bundle:PDBundle.from_cache",
                             "hybrid_lab.serving.pd_workers:PWorker.prefill_chunks",
                             "hybrid_lab.serving.pd_workers:PWorker.bundle")))


# ------------------------------------------------------------------------------------------ 07.2 first token + decode on D
def generate_on_d_reference(model, bundle, n_new):
    """model: D's full HySparse2; bundle: a PDBundle from P; n_new >= 1. Returns (n_new greedy tokens, the cache
    after them: the last token is not fed back)."""
    d = DWorker(model.cfg, model.weights)
    req = d.install(bundle)
    return d.generate(req, n_new), d.installed[req]


def _gen_cases(rng):
    def case(name, cfg, L, n_new):
        weights = HySparse2.init_weights(cfg)
        p = HySparse2(cfg, weights={n: weights[n] for n in self_decoder_weight_names(cfg)})
        cache = p.prefill_self(rng.integers(0, cfg.vocab, L))
        bundle = PDBundle.from_cache(cache, cfg, weights_hash(p.weights, self_decoder_weight_names(cfg)),
                                     int(rng.integers(1, 17)))
        return Case(name, (HySparse2(cfg, weights=weights), bundle, n_new),
                    note=f"prompt of {L} tokens, n_new={n_new}; {describe(cfg)}")
    return ([case("random (ragged prompt)", small_cfg(rng), int(rng.integers(2, 40)), int(rng.integers(2, 7)))
             for _ in range(3)]
            + [case("n_new = 1 (the first token only)", small_cfg(rng), int(rng.integers(2, 30)), 1),
               case("one-token prompt", small_cfg(rng), 1, int(rng.integers(2, 5))),
               case("prompt shorter than the SWA window", small_cfg(rng, swa_window=6), 3, 4),
               case("the notebook's model (49 layers)", HySparse2Config(**NOTEBOOK_CFG), int(rng.integers(20, 65)),
                    3)])


def _run_gen(fn, case):
    res = fn(*case.args)
    if not isinstance(res, (tuple, list)) or len(res) != 2:
        return ("bad", type(res).__name__)
    toks, cache = res
    snap = ({k: np.array(v, copy=True) for k, v in cache.to_arrays().items()} if isinstance(cache, HySparse2Cache)
            else type(cache).__name__)
    return ([int(t) for t in toks] if isinstance(toks, (list, tuple, np.ndarray)) else toks), snap


def _compare_gen(got, want, case):
    if got[0] == "bad":
        return f"generate_on_d returned {got[1]}, expected a tuple (tokens, cache)"
    (gt, gc), (wt, wc) = got, want
    probs = []
    if gt != wt:
        probs.append(f"tokens are {gt}, expected {wt}")
    if not isinstance(gc, dict):
        probs.append(f"the cache returned is a {gc}, expected the HySparse2Cache")
    else:
        for key, w in wc.items():
            p = (f"cache {key!r} missing" if key not in gc else
                 compare_values(gc[key], w, f"cache {key!r}", ("s", "head", "d") if np.ndim(w) == 3 else ()))
            if p:
                probs.append(p)
                break
    if not probs:
        return None
    return "; ".join(probs) + ("; tokens right" if gt == wt else "")


register(Exercise("07.2", "generate_on_d", generate_on_d_reference, _gen_cases, run=_run_gen, compare=_compare_gen,
                  forbidden=("hybrid_lab.serving.pd_workers:DWorker.generate",
                             "hybrid_lab.serving.pd_workers:DWorker.decode",
                             "hybrid_lab.serving.pd_workers:DWorker.first",
                             "hybrid_lab.serving.pd_workers:reference_tokens",
                             "hybrid_lab.models.hysparse2:HySparse2.generate")))


# ------------------------------------------------------------------------------------------ 07.3 the critical path
def longest_path_reference(durations, preds, order, release):
    """durations: {task: d >= 0}; preds: {task: [predecessors]} (a task may be missing: none); order: the tasks in
    a topological order; release: {task: earliest start} (missing: 0). Returns (length, path)."""
    length, path, _, _ = critical_path(durations, preds, order, release)
    return length, path


def dag_case(name, durations, preds, release, note=""):
    """A 07.3 Case (durations {task: float}, preds {task: [task]}, order = list(durations), release {task: float})."""
    order = list(durations)
    return Case(name, (durations, preds, order, release),
                note=note or f"{len(order)} tasks, durations {durations}, preds {preds}, release {release}")


def _random_dag(rng, n):
    names = [f"t{i}" for i in range(n)]
    durations = {t: float(rng.integers(0, 10)) for t in names}
    preds = {}
    for i, t in enumerate(names[1:], 1):
        ps = [p for p in names[:i] if rng.random() < 0.4]
        rng.shuffle(ps)
        if ps:
            preds[t] = ps
    release = {t: float(rng.integers(0, 25)) for t in names if rng.random() < 0.3}
    return durations, preds, release


def _path_cases(rng):
    out = [dag_case("random", *_random_dag(rng, int(rng.integers(3, 13)))) for _ in range(4)]
    d = float(rng.integers(1, 9))
    out += [
        dag_case("a single task", {"only": d}, {}, {}),
        # a and b end together; c lists b first: the path must go through b
        dag_case("tied predecessors (first listed wins)", {"a": 3.0, "b": 3.0, "c": 2.0}, {"c": ["b", "a"]}, {}),
        # two sinks finishing at the same time: the first in order ends the path; a later sink ends earlier
        dag_case("two sinks (latest finish; equal: first in order)",
                 {"s": 2.0, "x": 4.0, "y": 4.0, "z": 1.0}, {"x": ["s"], "y": ["s"], "z": ["s"]}, {}),
        dag_case("the last task in order is not the latest", {"a": 5.0, "b": 1.0, "c": 2.0}, {"b": ["a"]}, {}),
        # r arrives at 10 > finish of p (4): the path starts at r
        dag_case("a release later than every predecessor", {"p": 4.0, "r": 3.0}, {"r": ["p"]}, {"r": 10.0}),
        dag_case("a release equal to the predecessor's finish (the path goes on)",
                 {"p": 4.0, "r": 3.0}, {"r": ["p"]}, {"r": 4.0}),
        dag_case("zero durations", {"a": 0.0, "b": 0.0, "c": d}, {"b": ["a"], "c": ["b"]}, {}),
    ]
    t = PDTiming(n_requests=2, prompt_len=8192, chunk=2048, bandwidth_gbs=0.5, n_new=4, arrival_gap_ms=300.0)
    dag = build_pd_dag(t)
    out.append(Case("the PD pipeline (2 requests, 4 chunks, a slow link, arrivals 300 ms apart)",
                    (dag.durations(), dag.preds(), dag.order, dag.releases()), note=f"{len(dag.order)} tasks"))
    return out


register(Exercise("07.3", "longest_path", longest_path_reference, _path_cases, outputs=("length", "path"),
                  forbidden=("hybrid_lab.serving.pd_timeline:critical_path", "hybrid_lab.serving.pd_timeline:schedule",
                             "hybrid_lab.serving.pd_timeline:timeline_summary")))
