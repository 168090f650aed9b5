"""Radix cache + policies: property tests on random traces (hypothesis), exercise 3's admission decisions, the real
model checked against recomputation, the node store, and bad input."""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybrid_lab.costs.shape7b import L7B, HybridLayout
from hybrid_lab.models.hybrid import HybridConfig, MiniHybrid
from hybrid_lab.serving.eviction import eviction_scores
from hybrid_lab.serving.marconi import simulate
from hybrid_lab.serving.node_store import ROOT, NodeStore
from hybrid_lab.serving.radix_cache import (POLICIES, BlockCache, RadixCache, SimResult, TreeView, make_cache,
                                            marconi_admission, marconi_evict)
from hybrid_lab.serving.state_models import ByteModel, RealModel, mini_hybrid_layout
from hybrid_lab.serving.workloads import Request, chat_trace, exercise3_trace, regeneration_trace

# tiny layout: 8 B of KV per token, 48 B per state, so small capacities create contention
TINY = HybridLayout(n_attn=1, n_ssm=3, n_mlp=4, d_model=4, n_heads=2, d_state=4, dtype_bytes=1, mlp_hidden=16,
                    expand=1, ssm_head_dim=4)
PURE_ATTN = TINY.with_(n_attn=4, n_ssm=0)
MINI = MiniHybrid(HybridConfig(dtype="float64", seed=0))
SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def traces(draw, vocab=4, max_requests=14):
    """Random multi-session traces over a tiny vocabulary: follow-ups, shared prefixes and fresh requests."""
    n = draw(st.integers(1, max_requests))
    seqs, turns, out = {}, {}, []

    def tok(lo, hi):
        return np.array(draw(st.lists(st.integers(0, vocab - 1), min_size=lo, max_size=hi)), np.int32)

    for _ in range(n):
        kind = draw(st.sampled_from(["new", "follow", "share"])) if seqs else "new"
        if kind == "follow":
            s = draw(st.sampled_from(sorted(seqs)))
            inp = np.concatenate([seqs[s], tok(1, 6)])
        else:
            s = len(turns)
            turns[s] = 0
            base = seqs[draw(st.sampled_from(sorted(seqs)))] if kind == "share" else np.zeros(0, np.int32)
            cut = draw(st.integers(0, len(base)))
            inp = np.concatenate([base[:cut], tok(1, 10)])
        r = Request(s, turns[s], inp, tok(0, 5))
        out.append(r)
        turns[s] += 1
        seqs[s] = r.tokens
    return out


def longest_state_prefix(cache, tokens):
    """Reference: the longest cached prefix of ``tokens`` that ends at a node with a state."""
    best = 0
    for p in cache.state_prefixes():
        if len(p) <= len(tokens) and np.array_equal(p, tokens[: len(p)]):
            best = max(best, len(p))
    return best


def lcp_with_tree(cache, tokens):
    """Reference for pure attention: the longest common prefix of ``tokens`` with any cached sequence."""
    best = 0
    for i in cache.nodes.live():
        if cache.nodes.n_children[i] == 0:
            p = cache.node_prefix(i)
            k = min(len(p), len(tokens))
            neq = np.flatnonzero(p[:k] != tokens[:k])
            best = max(best, int(neq[0]) if neq.size else k)
    return best


@settings(max_examples=150, **SETTINGS)
@given(trace=traces(), policy=st.sampled_from(POLICIES), cap_states=st.integers(0, 12),
       alpha=st.sampled_from([0.0, 0.3, 2.0]), block=st.sampled_from([2, 4]))
def test_properties_byte_model(trace, policy, cap_states, alpha, block):
    cache = make_cache(policy, cap_states * 64, ByteModel(TINY), alpha=alpha, block=block)
    cache.eviction_log = []
    for r in trace:
        expect = longest_state_prefix(cache, r.input_ids)
        if policy == "vllm+":
            expect = min(expect, r.n_input // block * block)
        assert cache.match(r.input_ids) == expect                # match() predicts serve() without side effects
        assert cache.serve(r) == expect                          # longest cached prefix that ends at a state
        cache.check_invariants()                                 # bytes <= capacity, tokens == Σ edges, structure
    for e in cache.eviction_log:
        assert e["nchild"] <= 1                                  # a branch node is never evicted
        if cache.alpha == 0 and "min_t" in e:
            assert e["t"] == e["min_t"]                          # α = 0 evicts exactly in LRU order


@settings(max_examples=150, **SETTINGS)
@given(trace=traces(), cap_tokens=st.integers(0, 60))
def test_pure_attention_hits_any_matched_prefix(trace, cap_tokens):
    cache = RadixCache(cap_tokens * PURE_ATTN.kv_bytes_per_token, ByteModel(PURE_ATTN))
    for r in trace:
        expect = lcp_with_tree(cache, r.input_ids)
        assert cache.serve(r) == min(expect, r.n_input)
        cache.check_invariants()


def test_lru_order_matches_reference():
    """α = 0: the victim is always the least recently accessed candidate (ties: the deeper node)."""
    tr = chat_trace(30, "lmsys", seed=4, vocab=16, scale=0.05)
    cache = RadixCache(40 * TINY.kv_bytes_per_token + 3 * TINY.state_bytes, ByteModel(TINY), alpha=0.0)
    cache.eviction_log = []
    cache.serve_trace(tr)
    assert len(cache.eviction_log) > 10
    assert all(e["t"] == e["min_t"] for e in cache.eviction_log)


def test_exercise3_admission():
    """Lecture 10 §4.2: r1 misses; r2 misses but checkpoints S+D (speculative insertion); r3 hits S+D (3rd
    occurrence); r4 hits r1's input + output."""
    tr = exercise3_trace(len_s=40, len_d=200, len_q=20, len_a=30, len_f=15)
    cache = make_cache("marconi", 1e15)
    cache.keep_log = True
    hits = [cache.serve(r) for r in tr]
    assert hits == [0, 0, 240, 290]
    assert [x.checkpoint for x in cache.log] == [None, 240, None, None]
    assert [x.states_added for x in cache.log] == [[290], [240, 290], [290], [335]]   # <= 2 states per sequence


def test_selective_admission_beats_vllm_plus_on_chat():
    tr = chat_trace(150, "lmsys", seed=0)
    res = {p: simulate(tr, p, 4e9, alpha=0.0) for p in POLICIES}
    assert res["sglang+"].token_hit_rate > 2 * res["vllm+"].token_hit_rate > 0
    assert res["vllm+"].kv_reuse_frac > 5 * res["vllm+"].state_reuse_frac      # KV reuse >> state reuse


def test_pure_attention_policies_nearly_equal():
    tr = chat_trace(60, "lmsys", seed=1)
    model = ByteModel(HybridLayout(n_attn=28, n_ssm=0))
    rates = [simulate(tr, p, 2e9, model=model, alpha=0.5).token_hit_rate for p in POLICIES]
    assert max(rates) - min(rates) < 0.05 and min(rates) > 0.3


def test_default_score_is_eviction_scores():
    """The cache's unchecked default score gives exactly the decisions of the checked public eviction_scores (the
    paper's), and the lecture's variant decides differently."""
    tr = chat_trace(80, "sharegpt", seed=6)
    a = RadixCache(1e9, alpha=0.5).serve_trace(tr)
    b = RadixCache(1e9, alpha=0.5, score_fn=eviction_scores).serve_trace(tr)
    assert a.stats["evictions"] > 0 and np.array_equal(a.hit, b.hit) and a.stats == b.stats
    lecture = RadixCache(1e9, alpha=0.5, score="lecture").serve_trace(tr)
    assert not np.array_equal(lecture.hit, a.hit)


def test_identical_inputs_with_different_outputs_hit():
    """Four requests with the same 1,000-token input and different outputs (n samples per prompt): the second one
    splits the first one's edge at the input's end and checkpoints it, the third and fourth hit the whole input
    (the official simulator: [0, 0, 1000, 1000])."""
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, 32000, 1000)
    trace = [Request(i, 0, prompt, rng.integers(0, 32000, 50)) for i in range(4)]
    for policy in ("sglang+", "marconi"):
        c = make_cache(policy, 1e15)
        c.keep_log = True
        assert [c.serve(r) for r in trace] == [0, 0, 1000, 1000]
        assert [x.checkpoint for x in c.log] == [None, 1000, None, None]
        assert [x.states_added for x in c.log] == [[1050], [1000, 1050], [1050], [1050]]
        c.check_invariants()
    same = make_cache("marconi", 1e15)              # the same answer again: the input's end is checkpointed too
    assert [same.serve(r) for r in [trace[0]] * 3] == [0, 0, 1000]


def test_regeneration_trace_hits_from_the_third_sample():
    tr = regeneration_trace(n_prompts=6, samples=4, seed=1)
    res = simulate(tr, "marconi", 1e15, alpha=0.0)
    per_prompt = res.hit.reshape(6, 4)
    assert (per_prompt[:, :2] == 0).all()
    assert np.array_equal(per_prompt[:, 2:], res.n_input.reshape(6, 4)[:, 2:])


def test_sglang_plus_evicts_leaves_only_in_lru_order():
    """The paper's SGLang+ baseline: only leaves are evicted, the least recently used first; every node of a served
    request's path is refreshed (so a parent is never older than its children)."""
    tr = chat_trace(60, "lmsys", seed=4, vocab=16, scale=0.05, system_prompt_len=40)
    cache = make_cache("sglang+", 40 * TINY.kv_bytes_per_token + 3 * TINY.state_bytes, ByteModel(TINY))
    cache.eviction_log = []
    for r in tr:
        cache.serve(r)
        nodes = cache.nodes
        ids = nodes.live()
        par = nodes.parent[ids]
        inner = par != ROOT
        assert (nodes.last_access[par[inner]] >= nodes.last_access[ids[inner]]).all()
        cache.check_invariants()
    assert len(cache.eviction_log) > 10
    assert all(e["nchild"] == 0 and e["t"] == e["min_t"] for e in cache.eviction_log)
    assert cache.stats["evicted_intermediate"] == 0
    with pytest.raises(ValueError, match="alpha must be 0"):
        RadixCache(1e9, alpha=0.5, policy="sglang+")


class _Watched:
    """Records the largest ``bytes_held`` ever set, inside serve() included."""

    peak = 0.0

    @property
    def bytes_held(self):
        return self._held

    @bytes_held.setter
    def bytes_held(self, v):
        self._held = v
        self.peak = max(self.peak, v)


class WatchedRadix(_Watched, RadixCache):
    pass


class WatchedBlocks(_Watched, BlockCache):
    pass


@settings(max_examples=150, **SETTINGS)
@given(trace=traces(), policy=st.sampled_from(POLICIES), cap=st.integers(0, 400), alpha=st.sampled_from([0.0, 2.0]),
       score=st.sampled_from(["paper", "lecture"]))
def test_bytes_held_never_exceed_capacity_inside_serve(trace, policy, cap, alpha, score):
    """Evict before admit: at no point, inside one request included, do the bytes held exceed the capacity."""
    if policy == "vllm+":
        cache = WatchedBlocks(cap, ByteModel(TINY), block=2)
    elif policy == "sglang+":
        cache = WatchedRadix(cap, ByteModel(TINY), policy="sglang+")
    else:
        cache = WatchedRadix(cap, ByteModel(TINY), alpha=alpha, score=score)
    for r in trace:
        cache.serve(r)
        assert cache.peak <= cap + 1e-6, (cache.peak, cap)
        cache.check_invariants()
    assert not cache.nodes.locked.any()


@settings(max_examples=150, **SETTINGS)
@given(trace=traces(), cap_states=st.integers(0, 12), alpha=st.sampled_from([0.0, 0.3, 2.0]),
       hook=st.sampled_from(["admit", "evict", "both"]))
def test_hooks_with_marconis_functions_decide_as_the_cache(trace, cap_states, alpha, hook):
    """admit_fn=marconi_admission / evict_fn=marconi_evict (the notebook's references) reproduce the cache's own
    decisions exactly: hits, states admitted, checkpoints, every eviction, every counter."""
    kw = {"admit_fn": marconi_admission if hook != "evict" else None,
          "evict_fn": marconi_evict if hook != "admit" else None}
    a, b = (RadixCache(cap_states * 64, ByteModel(TINY), alpha=alpha, **k) for k in ({}, kw))
    for c in (a, b):
        c.keep_log, c.eviction_log = True, []
    for r in trace:
        assert a.serve(r) == b.serve(r)
        b.check_invariants()
    assert [(x.hit, x.checkpoint, x.states_added) for x in a.log] == \
        [(x.hit, x.checkpoint, x.states_added) for x in b.log]
    assert [(e["node"], e["nchild"], e["clock"]) for e in a.eviction_log] == \
        [(e["node"], e["nchild"], e["clock"]) for e in b.eviction_log]
    assert a.stats == b.stats and a.bytes_held == b.bytes_held


def test_marconi_admission_rule():
    """Branch iff 0 < m <= n_input and (a split inside an edge, or a node with children and no state); always the
    last decoded token."""
    assert marconi_admission(10, 15, 0, False, 3, False) == [15]         # nothing matched: the root is no branch
    assert marconi_admission(10, 15, 6, True, 0, False) == [6, 15]       # the input leaves an edge midway
    assert marconi_admission(10, 15, 6, False, 2, False) == [6, 15]      # a state-less branch node gets one more child
    assert marconi_admission(10, 15, 6, False, 2, True) == [15]          # ... which already holds a state: a hit
    assert marconi_admission(10, 15, 6, False, 0, False) == [15]         # extending a leaf: no branch
    assert marconi_admission(10, 15, 10, True, 0, False) == [10, 15]     # the input ends inside an edge: the output
    #                                                                     splits it there (same prompt, new answer)
    assert marconi_admission(10, 15, 10, False, 2, False) == [10, 15]    # ... or at a state-less node with children
    assert marconi_admission(10, 10, 10, True, 0, False) == [10]         # no output: the last token is the branch
    assert marconi_admission(10, 15, 10, False, 0, False) == [15]        # ends at a leaf: extending it, no branch


def test_admission_hook_positions_and_checks():
    """An admission function may save states anywhere in [1, n_tokens] (a new leaf is cut where needed), returned in
    any order; bad positions raise."""
    tr = exercise3_trace(len_s=4, len_d=6, len_q=3, len_a=2, len_f=2)
    c = RadixCache(1e15, admit_fn=lambda n_in, n, m, *_: [n_in, 3, n])
    c.keep_log = True
    c.serve_trace(tr[:1])
    assert c.log[0].states_added == [3, 13, 15] and c.n_states == 3 and c.n_nodes == 3
    assert c.match(tr[0].input_ids[:5]) == 3
    c.check_invariants()
    none = RadixCache(1e15, admit_fn=lambda *a: [])            # nothing admitted: the KV is cached, never a hit
    assert none.serve_trace(tr).hit.sum() == 0 and none.n_states == 0 and none.n_tokens > 0
    for bad in ([0, 15], [16], [2.5], "x", [None]):
        with pytest.raises(ValueError, match="admit_fn must return"):
            RadixCache(1e15, admit_fn=lambda *a, bad=bad: bad).serve(tr[0])


def test_eviction_hook_tree_view():
    """TreeView: fresh columns after every eviction, refuses branch points and dead nodes; an eviction function that
    frees too little is an error."""
    tr = exercise3_trace(len_s=4, len_d=6, len_q=3, len_a=2, len_f=2)
    seen = []

    def record(tree, need, alpha):
        seen.append((len(tree), need))
        branch = tree.ids[tree.n_children >= 2]
        for v in branch:
            with pytest.raises(ValueError, match="never evicted"):
                tree.evict(v)
        leaf = tree.ids[np.argmin(tree.n_children)]
        n = len(tree)
        freed = tree.evict(leaf)
        assert freed > 0 and len(tree) < n and leaf not in tree.ids
        with pytest.raises(ValueError, match="not in the tree"):
            tree.evict(leaf)
        marconi_evict(tree, need - freed, alpha)

    c = RadixCache(3 * L7B.state_bytes, evict_fn=record)
    c.serve_trace(tr)
    c.check_invariants()
    assert seen and c.bytes_held <= c.capacity
    view = TreeView(c)
    assert view.flops(np.array([0, 5])).tolist() == [0.0, float(L7B.prefill_flops(5))]
    with pytest.raises(ValueError, match="freed 0 of the"):
        RadixCache(3 * L7B.state_bytes, evict_fn=lambda tree, need, alpha: None).serve_trace(tr)


def test_clone_is_independent():
    tr = chat_trace(40, "lmsys", seed=2)
    cache = RadixCache(5e8, alpha=0.5)
    for r in tr[:20]:
        cache.serve(r)
    copy = cache.clone()
    before = (cache.n_nodes, cache.bytes_held, dict(cache.stats))
    for r in tr[20:]:
        copy.serve(r)
    assert (cache.n_nodes, cache.bytes_held, cache.stats) == before
    ref = cache.clone()
    assert [ref.serve(r) for r in tr[20:]] == [cache.serve(r) for r in tr[20:]]   # same state, same decisions
    blocks = BlockCache(5e8)
    blocks.serve(tr[0])
    bc = blocks.clone()
    bc.serve(tr[1])
    assert blocks.stats["requests"] == 1 and bc.stats["requests"] == 2


def test_sim_result_breakdown_and_fractions():
    n_in, hit = np.array([100, 8000, 9000]), np.array([50, 4000, 0])
    res = SimResult("marconi", 1e9, 0.5, n_in, hit, L7B.prefill_flops(n_in), L7B.prefill_flops(hit),
                    dict(kv_tokens_reused=3, kv_tokens_inserted=12, states_reused=1, states_inserted=4))
    assert res.token_hit_rate == pytest.approx(4050 / 17100)
    assert res.breakdown((7000,)) == [(0, 7000, 1, 0.5), (7000, np.inf, 2, pytest.approx(4000 / 17000))]
    assert res.kv_reuse_frac == 0.25 and res.state_reuse_frac == 0.25
    assert 0 < res.flops_saved_frac < res.token_hit_rate      # long prompts cost more FLOPs per token


# ---------------------------------------------------------------------------------------------------- real model
def test_mini_hybrid_layout_matches_the_real_arrays():
    rm = RealModel(MINI)
    _, cache, _ = MINI.prefill(np.arange(10) % MINI.cfg.vocab)
    assert rm.kv_bytes_per_token * 10 == cache.kv_bytes()
    assert rm.state_bytes == cache.ssm_bytes()
    assert rm.layout == mini_hybrid_layout(MINI.cfg) and rm.atol == 1e-9


def test_real_model_every_hit_equals_recomputation():
    tr = exercise3_trace(len_s=8, len_d=24, len_q=5, len_a=6, len_f=4)
    tr += [Request(10 + i, 0, r.input_ids, r.output_ids) for i, r in enumerate(tr[:2])]
    for policy in POLICIES:
        rm = RealModel(MINI)
        cap = 60 * rm.kv_bytes_per_token + 4 * rm.state_bytes
        real = make_cache(policy, cap, rm, alpha=0.5, block=8)
        byte = make_cache(policy, cap, ByteModel(rm.layout), alpha=0.5, block=8)
        hits = [real.serve(r) for r in tr]
        assert hits == [byte.serve(r) for r in tr]              # same decisions as the byte model
        assert rm.verified_hits == sum(h > 0 for h in hits) > 0  # every hit restored and checked
        real.check_invariants()


@settings(max_examples=20, **SETTINGS)
@given(trace=traces(vocab=3, max_requests=6), policy=st.sampled_from(POLICIES), cap_states=st.integers(1, 6))
def test_real_model_property(trace, policy, cap_states):
    rm = RealModel(MINI)
    cache = make_cache(policy, cap_states * (rm.state_bytes + 4 * rm.kv_bytes_per_token), rm, alpha=0.3, block=2)
    hits = [cache.serve(r) for r in trace]
    assert rm.verified_hits == sum(h > 0 for h in hits)
    cache.check_invariants()


def test_real_model_with_the_hooks():
    """The real model through admit_fn / evict_fn: the same hits as the cache's own decisions, every hit verified."""
    tr = exercise3_trace(len_s=8, len_d=24, len_q=5, len_a=6, len_f=4)
    tr += [Request(10 + i, 0, r.input_ids, r.output_ids) for i, r in enumerate(tr[:2])]
    rm, rm2 = RealModel(MINI), RealModel(MINI)
    cap = 60 * rm.kv_bytes_per_token + 4 * rm.state_bytes
    own = make_cache("marconi", cap, rm, alpha=0.5).serve_trace(tr).hit.tolist()
    hooked = RadixCache(cap, rm2, alpha=0.5, admit_fn=marconi_admission, evict_fn=marconi_evict)
    assert hooked.serve_trace(tr).hit.tolist() == own and sum(h > 0 for h in own) > 0
    assert rm2.verified_hits == rm.verified_hits == sum(h > 0 for h in own)
    hooked.check_invariants()
    with pytest.raises(ValueError, match="after the hit"):
        RadixCache(cap, RealModel(MINI), admit_fn=lambda n_in, n, m, *a: [1, n]).serve_trace(tr)


def test_real_model_detects_a_wrong_state():
    cache = make_cache("sglang+", 1e9, RealModel(MINI))
    tr = exercise3_trace(len_s=8, len_d=24, len_q=5, len_a=6, len_f=4)
    cache.serve(tr[0])
    (leaf,) = [i for i in cache.nodes.live() if cache.nodes.has_state[i]]
    cache.nodes.state[leaf] = [h + 1.0 for h in cache.nodes.state[leaf]]   # corrupt the saved state
    with pytest.raises(RuntimeError, match="does not match recomputation"):
        cache.serve(tr[3])


# ---------------------------------------------------------------------------------------------------- node store
def test_node_store_recycles_rows_last_freed_first():
    s = NodeStore(rows=2)
    ids = [s.new() for _ in range(5)]                        # grows past 2 rows
    assert ids == [1, 2, 3, 4, 5] and s.rows >= 6 and s.count() == 5
    s.end[3], s.has_state[3] = 7, True
    s.free(3)
    s.free(1)
    assert s.count() == 3 and s.live().tolist() == [2, 4, 5]
    assert s.new() == 1 and s.new() == 3
    assert s.end[3] == 0 and not s.has_state[3]              # a recycled row starts from the defaults
    many = s.new_many(3)
    assert many.tolist() == [6, 7, 8] and s.alive[many].all()
    s.free_many(np.array([6, 8]))
    assert s.new_many(2).tolist() == [8, 6]


def test_node_store_copy_is_independent():
    s = NodeStore()
    i = s.new()
    s.children[ROOT] = {5: i}
    c = s.copy()
    c.children[ROOT][6] = c.new()
    c.edge_len[i] = 9
    assert s.children[ROOT] == {5: i} and s.edge_len[i] == 0 and s.count() == 1 and c.count() == 2


# ---------------------------------------------------------------------------------------------------- bad input
def _score_nan(t, saved, nbytes, alpha, now):
    return np.full(len(t), np.nan)


def _score_short(t, saved, nbytes, alpha, now):
    return np.zeros(len(t) + 1)


BAD_INPUT = [
    (lambda: make_cache("marconi", -1.0), "capacity"),
    (lambda: make_cache("marconi", math.nan), "capacity"),
    (lambda: make_cache("vllm+", math.inf), "capacity"),
    (lambda: make_cache("sglang+", "5e9"), "capacity"),
    (lambda: make_cache("marconi", 1e9, alpha=-0.1), "alpha"),
    (lambda: make_cache("marconi", 1e9, alpha=math.nan), "alpha"),
    (lambda: make_cache("lru", 1e9), "policy"),
    (lambda: make_cache("marconi", 1e9, model=L7B), "model"),
    (lambda: RadixCache(1e9, alpha=-1), "alpha"),
    (lambda: RadixCache(1e9, alpha=math.inf), "alpha"),
    (lambda: RadixCache(1e9, score_fn="lru"), "score_fn"),
    (lambda: RadixCache(1e9, policy="vllm+"), "policy"),
    (lambda: RadixCache(1e9, admit_fn="marconi"), "admit_fn"),
    (lambda: RadixCache(1e9, evict_fn=3), "evict_fn"),
    (lambda: RadixCache(1e9, ByteModel(PURE_ATTN), evict_fn=marconi_evict), "evict_fn"),
    (lambda: TreeView(RadixCache(1e9)).flops([1.5]), "lengths"),
    (lambda: BlockCache(1e9, block=0), "block"),
    (lambda: BlockCache(1e9, block=4097), "block"),
    (lambda: BlockCache(1e9, block=2.0), "block"),
    (lambda: make_cache("marconi", 1e9, block=-4), "block"),                     # checked for every policy
    (lambda: ByteModel("7B"), "layout"),
    (lambda: RealModel(L7B), "model"),
    (lambda: RealModel(MINI, verify="yes"), "verify"),
    (lambda: RealModel(MINI, atol=0.0), "atol"),
    (lambda: RealModel(MINI, atol=math.nan), "atol"),
    (lambda: mini_hybrid_layout(L7B), "cfg"),
    (lambda: RadixCache(1e9).serve("abc"), "req"),
    (lambda: BlockCache(1e9).serve(np.ones(3, np.int32)), "req"),
    (lambda: RadixCache(1e9).match([1.5, 2.0]), "tokens"),
    (lambda: BlockCache(1e9).match([[1, 2]]), "tokens"),
    (lambda: RadixCache(1e9).match([-1]), "tokens"),
    (lambda: RadixCache(1e9).node_prefix(0), "node"),
    (lambda: RadixCache(1e9).node_prefix(5), "node"),
    (lambda: RadixCache(1e9).serve_trace([]), "at least one request"),
    (lambda: RadixCache(1e9).serve_trace(chat_trace(2), progress_desc=3), "progress_desc"),
    (lambda: RadixCache(2e8, alpha=0.5, score_fn=_score_nan).serve_trace(chat_trace(30)), "finite scores"),
    (lambda: RadixCache(2e8, alpha=0.5, score_fn=_score_short).serve_trace(chat_trace(30)), "one score per node"),
    (lambda: SimResult.from_run("cache", chat_trace(2), [0, 0]), "cache"),
    (lambda: SimResult.from_run(RadixCache(1e9), chat_trace(2)[:2], [0, -1]), "hits"),
    (lambda: RadixCache(1e9).serve_trace(chat_trace(3)).breakdown((0,)), "edges"),
    (lambda: RadixCache(1e9).serve_trace(chat_trace(3)).breakdown((900, 500)), "edges"),
    (lambda: RadixCache(1e9).serve_trace(chat_trace(3)).breakdown((math.nan,)), "edges"),
    (lambda: NodeStore(rows=0), "rows"),
]


@pytest.mark.parametrize("call, match", BAD_INPUT, ids=[m for _, m in BAD_INPUT])
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()
