import numpy as np
import pytest

from hybrid_lab.models.hybrid import (HybridCache, HybridConfig, MiniHybrid, chunk_boundary, reusable_prefix,
                               serve_with_reuse, shared_prefix_len)


@pytest.fixture(scope="module")
def model():
    return MiniHybrid(HybridConfig(dtype="float64"))


def test_prefill_equals_decode(model, rng):
    toks = rng.integers(0, 64, 45)
    full, cfull, _ = model.prefill(toks)
    _, c, _ = model.prefill(toks[:20])
    for t in toks[20:]:
        logits, c = model.decode_step(int(t), c)
    assert np.abs(logits - full[-1]).max() <= 1e-10
    for a, b in zip(c.ssm, cfull.ssm):
        assert np.abs(a - b).max() <= 1e-10
    assert np.abs(full).max() > 0.1


def test_sizes_fp32(rng):
    m = MiniHybrid(HybridConfig())
    for L, kv in ((16, 4096), (256, 65536)):
        _, c, _ = m.prefill(rng.integers(0, 64, L))
        assert c.kv_bytes() == kv
        assert c.ssm_bytes() == 6144


def test_chunk_snapshot_restore_is_exact(model, rng):
    old = rng.integers(0, 64, 60)
    new = np.concatenate([old[:40], rng.integers(0, 64, 20)])
    _, cache, snaps = model.prefill(old, snapshot_at="chunks")
    assert sorted(snaps) == [16, 32, 48]
    ref, _, _ = model.prefill(new)
    restored = HybridCache.from_parts(cache.kv, snaps[32], 32)
    out, _, _ = model.prefill(new[32:], cache=restored)
    assert np.array_equal(out, ref[32:])


def test_two_pass_and_all_or_nothing(model, rng):
    old = rng.integers(0, 64, 60)
    new = np.concatenate([old[:40], (old[40:] + 1) % 64])
    shared = shared_prefix_len(old, new)
    assert shared == 40
    ref, ref_cache, _ = model.prefill(new)
    _, cache, s40 = model.prefill(old, snapshot_at=[40])
    out, c, p = serve_with_reuse(model, new, cache, s40, shared)
    assert p == 40 and np.abs(out - ref[40:]).max() <= 1e-10
    out, c, p = serve_with_reuse(model, new, cache, {}, shared)
    assert p == 0 and np.abs(out - ref).max() <= 1e-10
    # serving the state of token 60 at token 40 gives a different (wrong) answer
    wrong = HybridCache.from_parts(cache.kv, cache.ssm, 40)
    bad, _, _ = model.prefill(new[40:], cache=wrong)
    assert np.abs(bad - ref[40:]).max() > 1e-3


def test_prefill_does_not_mutate_input_cache(model, rng):
    _, c, _ = model.prefill(rng.integers(0, 64, 10))
    before = c.copy()
    model.prefill(rng.integers(0, 64, 5), cache=c)
    model.decode_step(3, c)
    assert c.pos == before.pos and all(np.array_equal(a, b) for a, b in zip(c.ssm, before.ssm))


def test_reuse_rules():
    assert reusable_prefix(800, [512]) == 512
    assert reusable_prefix(800, [256, 512, 768, 1024]) == 768
    assert reusable_prefix(40, [60]) == 0
    assert chunk_boundary(40, 16) == 32


def test_generate_is_greedy_and_deterministic(model):
    a = model.generate(np.arange(10), 5)
    assert a == model.generate(np.arange(10), 5) and len(a) == 5


@pytest.mark.parametrize("kw, msg", [
    (dict(d_model=30, n_heads=4), "divisible"),
    (dict(layers=("attn", "mlp")), "layers"),
    (dict(chunk_size=0), "chunk_size"),
    (dict(dtype="float16"), "dtype"),
])
def test_bad_config(kw, msg):
    with pytest.raises(ValueError, match=msg):
        HybridConfig(**kw)


@pytest.mark.parametrize("call, match", [
    (lambda m: m.prefill(np.array([[1, 2]])), "tokens"),
    (lambda m: m.prefill(np.array([1, 99])), "tokens"),
    (lambda m: m.prefill(np.array([1.0, 2.0])), "tokens"),
    (lambda m: m.prefill(np.arange(10), snapshot_at=[11]), "snapshot_at"),
    (lambda m: m.prefill(np.arange(10), snapshot_at=[2.5]), "snapshot_at"),
    (lambda m: m.prefill(np.arange(10), snapshot_at="all"), "snapshot_at"),
    (lambda m: m.prefill(np.arange(3), cache=HybridCache(2)), "layer layout"),
    (lambda m: m.prefill(np.arange(3), cache=HybridCache(5, *_shapes(m, 4))), "pos=5"),
    (lambda m: m.prefill(np.arange(3), cache="cache"), "HybridCache"),
    (lambda m: m.decode_step(2.0, m.init_cache()), "token"),
    (lambda m: m.decode_step(64, m.init_cache()), "token"),
    (lambda m: m.generate(np.arange(4), 1.5), "n_new"),
    (lambda m: m.generate(np.arange(4), -1), "n_new"),
    (lambda m: m.generate(np.array([], int), 2), "empty prompt"),
    (lambda m: HybridCache.from_parts([], [], -1), "pos"),
    (lambda m: HybridCache.from_parts([], [], 2.5), "pos"),
    (lambda m: HybridCache.from_parts([(np.zeros((3, 2, 16)), np.zeros((3, 2, 16)))], [], 4), "fewer than pos"),
    (lambda m: HybridCache.from_parts([(np.full((3, 2, 16), np.nan), np.zeros((3, 2, 16)))], [], 2), "finite"),
    (lambda m: HybridCache(pos=-2), "pos"),
    (lambda m: reusable_prefix(-1, [3]), "shared"),
    (lambda m: reusable_prefix(10, [3.5]), "state_positions"),
    (lambda m: reusable_prefix(10, [-4]), "state_positions"),
    (lambda m: chunk_boundary(3, 0), "chunk_size"),
    (lambda m: chunk_boundary(-1, 4), "want"),
    (lambda m: shared_prefix_len(np.zeros((2, 2), int), np.arange(3)), "a must be 1-D"),
    (lambda m: shared_prefix_len(np.arange(3), np.array([0.5])), "b must be"),
    (lambda m: serve_with_reuse(m, np.arange(8), m.prefill(np.arange(6))[1], {}, 7), "shared=7"),
    (lambda m: serve_with_reuse(m, np.arange(8), m.prefill(np.arange(6))[1], {4: []}, 5), "snapshots"),
    (lambda m: MiniHybrid({"vocab": 64}), "HybridConfig"),
])
def test_bad_inputs(model, call, match):
    with pytest.raises(ValueError, match=match):
        call(model)


def _shapes(m, pos):
    """A cache of the right layer layout whose KV holds ``pos`` rows (to test a stated pos that disagrees)."""
    c = m.cfg
    kv = [(np.zeros((pos, c.n_heads, c.d_head)), np.zeros((pos, c.n_heads, c.d_head))) for _ in range(c.n_attn)]
    return kv, [np.zeros((c.d_model, c.d_state)) for _ in range(c.n_ssm)]


def test_documented_edge_cases(model):
    assert reusable_prefix(10, []) == 0                  # no saved state: recompute everything
    assert reusable_prefix(10, {4: None, 12: None}) == 4  # the keys of a {position: states} dict
    _, c, _ = model.prefill(np.arange(5))
    logits, c2, snaps = model.prefill(np.array([], int), cache=c)   # an empty prefill returns the cache unchanged
    assert logits.shape == (0, 64) and c2.pos == 5 and snaps == {}
    assert all(np.array_equal(a, b) for a, b in zip(c.ssm, c2.ssm))


def test_generate_refuses_a_huge_n_new_by_name(model):
    with pytest.raises(ValueError, match=rf"^n_new .*more than {2 ** 40}"):     # not a 2**62-step loop
        model.generate(np.arange(3), 2 ** 62)
    assert model.generate(np.arange(3), 0) == []
