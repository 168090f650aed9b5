"""Radix cache + policies: property tests on random traces (hypothesis) and exercise 3's admission decisions."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybrid_lab.costs.shape7b import HybridLayout
from hybrid_lab.serving.radix_cache import POLICIES, BlockCache, ByteModel, RadixCache, RealModel, make_cache, simulate
from hybrid_lab.serving.workloads import Request, chat_trace, exercise3_trace

# tiny layout: 8 B of KV per token, 48 B per state, so small capacities create contention
TINY = HybridLayout(n_attn=1, n_ssm=3, n_mlp=4, d_model=4, n_heads=2, d_state=4, dtype_bytes=1, mlp_hidden=16,
                    expand=1, ssm_head_dim=4)
PURE_ATTN = TINY.with_(n_attn=4, n_ssm=0)


@st.composite
def traces(draw, vocab=4, max_requests=14):
    """Random multi-session traces over a tiny vocabulary: follow-ups, shared prefixes and fresh requests."""
    n = draw(st.integers(1, max_requests))
    seqs, turns, out = {}, {}, []
    tok = lambda lo, hi: np.array(draw(st.lists(st.integers(0, vocab - 1), min_size=lo, max_size=hi)), np.int32)
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
        outp = tok(0, 5)
        out.append(Request(s, turns[s], inp.astype(np.int32), outp))
        turns[s] += 1
        seqs[s] = np.concatenate([inp, outp]).astype(np.int32)
    return out


def longest_state_prefix(cache, tokens):
    """Reference: the longest cached prefix of ``tokens`` that ends at a node with a state."""
    best = 0
    for p in cache.state_prefixes():
        if len(p) <= len(tokens) and np.array_equal(p, tokens[: len(p)]):
            best = max(best, len(p))
    return best


def lcp_with_tree(cache, tokens):
    best = 0
    for i in np.flatnonzero(cache.alive[: cache._n]):
        if i and cache.nchild[i] == 0:
            p = cache.node_prefix(i)
            k = min(len(p), len(tokens))
            neq = np.flatnonzero(p[:k] != tokens[:k])
            best = max(best, int(neq[0]) if neq.size else k)
    return best


SETTINGS = dict(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@settings(**SETTINGS)
@given(trace=traces(), policy=st.sampled_from(POLICIES), cap_states=st.integers(0, 12),
       alpha=st.sampled_from([0.0, 0.3, 2.0]), block=st.sampled_from([2, 4]))
def test_properties_byte_model(trace, policy, cap_states, alpha, block):
    model = ByteModel(TINY)
    cap = cap_states * 64
    cache = make_cache(policy, cap, model, alpha=alpha, block=block)
    cache.eviction_log = []
    for r in trace:
        full = np.concatenate([r.input_ids, r.output_ids])
        expect = longest_state_prefix(cache, r.input_ids)
        if policy == "vllm+":
            expect = min(expect, r.n_input // block * block)
        assert cache.match(r.input_ids) >= 0
        hit = cache.serve(r)
        assert hit == expect                                   # longest cached prefix that ends at a state
        assert 0 <= hit <= r.n_input
        cache.check_invariants()                               # bytes <= capacity, tokens == Σ edges, structure
        assert len(full) >= hit
    for e in cache.eviction_log:
        assert e["nchild"] <= 1                                # a branch node is never evicted
        if cache.alpha == 0 and "min_t" in e:
            assert e["t"] == e["min_t"]                        # α = 0 evicts exactly in LRU order


@settings(**SETTINGS)
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
    """The lecture's answer: r1 misses; r2 misses but checkpoints S+D; r3 hits S+D; r4 hits r1's input+output."""
    tr = exercise3_trace(len_s=40, len_d=200, len_q=20, len_a=30, len_f=15)
    cache = make_cache("marconi", 1e15)
    cache.keep_log = True
    hits = [cache.serve(r) for r in tr]
    assert hits == [0, 0, 240, 290]
    assert [x.checkpoint for x in cache.log] == [None, 240, None, None]
    assert [x.states_added for x in cache.log] == [[290], [240, 290], [290], [335]]
    assert all(len(x.states_added) <= 2 for x in cache.log)   # <= 2 states per sequence


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


def test_real_model_every_hit_equals_recomputation():
    from hybrid_lab.models.hybrid import HybridConfig, MiniHybrid

    model = MiniHybrid(HybridConfig(dtype="float64", seed=0))
    tr = exercise3_trace(len_s=8, len_d=24, len_q=5, len_a=6, len_f=4)
    tr += [Request(10 + i, 0, r.input_ids, r.output_ids) for i, r in enumerate(tr[:2])]
    for policy in POLICIES:
        rm = RealModel(model)
        cap = 60 * rm.kv_bytes_per_token + 4 * rm.state_bytes
        real = make_cache(policy, cap, rm, alpha=0.5, block=8)
        byte = make_cache(policy, cap, ByteModel(rm.layout), alpha=0.5, block=8)
        hits = [real.serve(r) for r in tr]
        assert hits == [byte.serve(r) for r in tr]              # same decisions as the byte model
        assert rm.verified_hits == sum(h > 0 for h in hits) > 0  # every hit restored and checked
        real.check_invariants()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=traces(vocab=3, max_requests=6), policy=st.sampled_from(POLICIES), cap_states=st.integers(1, 6))
def test_real_model_property(trace, policy, cap_states):
    from hybrid_lab.models.hybrid import HybridConfig, MiniHybrid

    rm = RealModel(_MODEL.setdefault("m", MiniHybrid(HybridConfig(dtype="float64"))))
    cache = make_cache(policy, cap_states * (rm.state_bytes + 4 * rm.kv_bytes_per_token), rm, alpha=0.3, block=2)
    hits = [cache.serve(r) for r in trace]
    assert rm.verified_hits == sum(h > 0 for h in hits)
    cache.check_invariants()


_MODEL = {}


def test_real_model_detects_a_wrong_state():
    from hybrid_lab.models.hybrid import HybridConfig, MiniHybrid

    rm = RealModel(MiniHybrid(HybridConfig(dtype="float64")))
    cache = make_cache("sglang+", 1e9, rm)
    tr = exercise3_trace(len_s=8, len_d=24, len_q=5, len_a=6, len_f=4)
    cache.serve(tr[0])
    leaf = [i for i in np.flatnonzero(cache.alive[: cache._n]) if i and cache.has_state[i]][0]
    cache.st[leaf] = [h + 1.0 for h in cache.st[leaf]]         # corrupt the saved state
    with pytest.raises(RuntimeError, match="does not match recomputation"):
        cache.serve(tr[3])


def test_bad_inputs():
    with pytest.raises(ValueError, match="capacity"):
        make_cache("marconi", -1.0)
    with pytest.raises(ValueError, match="alpha"):
        make_cache("marconi", 1e9, alpha=-0.1)
    with pytest.raises(ValueError, match="alpha"):
        RadixCache(1e9, alpha=-1)
    with pytest.raises(ValueError, match="policy"):
        make_cache("lru", 1e9)
    with pytest.raises(ValueError, match="block"):
        BlockCache(1e9, block=0)
    with pytest.raises(ValueError, match="empty input"):
        simulate([Request(0, 0, np.zeros(0, np.int32), np.zeros(1, np.int32))], "marconi", 1e9)
    with pytest.raises(ValueError, match="unknown session"):
        simulate([Request(5, 2, np.ones(3, np.int32), np.zeros(1, np.int32))], "sglang+", 1e9)
    with pytest.raises(ValueError, match="alpha"):
        simulate(chat_trace(2), "marconi", 1e9, alpha="best")
