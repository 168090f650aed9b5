"""HySparse2: early-exit exactness, reuse = full attention when the budget covers everything, decode equivalence,
cache lifecycle, the fa_decode_topk twin, bad configs."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hybrid_lab.models.hysparse2 import (HySparse2, HySparse2Cache, HySparse2Config, replay_errors, replay_tail,
                                         self_decoder_weight_names)
from hybrid_lab.ops.fa_decode import fa_decode_topk, forced_window_select, with_forced_window
from hybrid_lab.core.blocks import masked_attention
from hybrid_lab.ops.sparse_attention import sparse_attention

SMALL = dict(d_model=16, d_ff=32, self_swa_before=1, self_swa_after=1, cross_layers=4, group_size=2)


def toks(L, seed=0, vocab=64):
    return np.random.default_rng(seed).integers(0, vocab, L)


@settings(max_examples=25, deadline=None)
@given(before=st.integers(0, 2), after=st.integers(0, 2), groups=st.integers(1, 3), gsize=st.integers(1, 4),
       window=st.integers(1, 6), topk=st.integers(1, 10), L=st.integers(1, 24), hkv=st.sampled_from([1, 2]),
       src=st.sampled_from(["self_fa_input", "boundary"]), seed=st.integers(0, 10 ** 6))
def test_early_exit_equals_full_prefill(before, after, groups, gsize, window, topk, L, hkv, src, seed):
    cfg = HySparse2Config(d_model=16, d_ff=24, n_heads_q=4, n_heads_kv=hkv, self_swa_before=before,
                          self_swa_after=after, cross_layers=groups * gsize, group_size=gsize, window=window,
                          topk=topk, swa_window=3, bridge_sources=(src,) * groups, seed=seed % 1000)
    m = HySparse2(cfg)
    t = toks(L, seed)
    full, cf = m.prefill(t, early_exit=False)
    early, ce = m.prefill(t, early_exit=True)
    assert full.shape == (L, 64) and early.shape == (1, 64)
    assert np.abs(full[-1] - early[0]).max() <= 1e-10
    assert np.abs(full[-1]).max() > 1e-3                          # not a trivially zero model
    for a, b in zip(cf.cross + [cf.self_fa], ce.cross + [ce.self_fa]):
        np.testing.assert_array_equal(a.k, b.k)                  # the caches do not depend on the exit


def test_early_exit_skips_the_cross_decoder_history():
    m = HySparse2(HySparse2Config(**SMALL))
    m.prefill(toks(20), early_exit=True)
    assert m.trace["self.0"] == 20 and m.trace["bridge.0"] == 20
    assert m.trace["cross.0.fa"] == 1 and m.trace["cross.1.sa.0"] == 1
    m.prefill(toks(20), early_exit=False)
    assert m.trace["cross.1.sa.0"] == 20


def test_compute_map_matches_trace():
    from hybrid_lab.widgets.hysparse import FULL, compute_map

    cfg = HySparse2Config(**SMALL)
    m = HySparse2(cfg)
    for early in (True, False):
        m.prefill(toks(12), early_exit=early)
        cmap = compute_map(cfg, 12, early_exit=early)
        for r, (name, _) in enumerate(cfg.layers):
            assert m.trace[name] == int((cmap[r] == FULL).sum())


def test_v1_style_cross_swa_breaks_exactness_and_replay_tail_grows_with_depth():
    needed = []
    for groups in (1, 2, 3):
        cfg = HySparse2Config(**{**SMALL, "cross_layers": 2 * groups}, cross_swa_window=3, window=2, topk=3)
        r = replay_errors(HySparse2(cfg), toks(16), tails=np.arange(1, 17))
        assert r["errors"][0] > 1e-6                               # early exit (R=1) is wrong
        depth = cfg.n_groups * (cfg.group_size - 1)
        assert r["min_exact"] == replay_tail(depth, 3)             # measured = depth * (c - 1) + 1
        assert (r["errors"][r["tails"] < r["min_exact"]] > 1e-10).all()
        needed.append(r["min_exact"])
    assert needed == sorted(needed) and needed[0] < needed[-1]
    assert replay_tail(33, 4) == 100 and replay_tail(0, 4) == 1


def test_paper_model_needs_no_replay():
    r = replay_errors(HySparse2(HySparse2Config(**SMALL)), toks(10), tails=[1, 2, 5])
    assert r["min_exact"] == 1 and (r["errors"] <= 1e-10).all()


def test_decode_after_early_exit_equals_decode_after_full_prefill():
    m = HySparse2(HySparse2Config(**SMALL, window=2, topk=3))
    prompt = toks(15, 3)
    g_early, c_early = m.generate(prompt, 8, early_exit=True)
    g_full, c_full = m.generate(prompt, 8, early_exit=False)
    np.testing.assert_array_equal(g_early, g_full)
    assert c_early.pos == c_full.pos == 15 + 7
    # and decoding equals a fresh full prefill of the longer sequence at every step
    seq = np.concatenate([prompt, g_full[:-1]])
    ref, _ = m.prefill(seq, early_exit=False)
    assert int(np.argmax(ref[-1])) == g_full[-1]


def test_decode_logits_equal_prefill_logits():
    m = HySparse2(HySparse2Config(**SMALL, window=2, topk=3, swa_window=2))
    seq = toks(14, 5)
    ref, _ = m.prefill(seq, early_exit=False)
    _, cache = m.prefill(seq[:9])
    for t in range(9, 14):
        lg, cache = m.decode_step(int(seq[t]), cache)
        assert np.abs(lg - ref[t]).max() < 1e-10


def test_pd_api_p_worker_subset():
    cfg = HySparse2Config(**SMALL)
    m = HySparse2(cfg)
    names = self_decoder_weight_names(cfg)
    assert names and not any(n.startswith("cross.") for n in names) and "lm_head" not in names
    p_worker = HySparse2(cfg, weights={n: m.weights[n] for n in names})
    cache = p_worker.prefill_self(toks(11))
    with pytest.raises(ValueError, match="not held"):
        p_worker.first_token(cache)
    first = m.first_token(cache)                                   # D worker installs the cache
    ref, _ = m.prefill(toks(11), early_exit=False)
    assert np.abs(first - ref[-1]).max() < 1e-10
    assert isinstance(cache, HySparse2Cache) and cache.boundary.shape == (16,)


def test_cache_lifecycle_sizes():
    cfg = HySparse2Config(**SMALL, swa_window=4)
    m = HySparse2(cfg)
    _, c = m.prefill(toks(10))
    assert len(c.self_fa) == 10 and all(len(x) == 10 for x in c.cross) and len(c.cross) == cfg.n_groups
    assert len(c.self_swa) == cfg.n_self - 1 and all(len(w) == 4 for w in c.self_swa)
    _, c2 = m.decode_step(3, c)
    assert len(c2.self_fa) == 11 and all(len(x) == 11 for x in c2.cross) and all(len(w) == 4 for w in c2.self_swa)
    assert len(c.self_fa) == 10                                    # decode_step does not modify its input
    nb = c2.nbytes()
    assert nb["total"] == nb["self_fa"] + nb["self_swa"] + nb["cross"] > 0


def test_sa_with_budget_covering_everything_equals_full_attention():
    rng = np.random.default_rng(0)
    S, Hq, Hkv, d = 9, 4, 1, 8
    K, V = rng.standard_normal((S, Hkv, d)), rng.standard_normal((S, Hkv, d))
    q = rng.standard_normal((S, Hq, d))
    pos = np.arange(S)
    scores = rng.standard_normal((S, Hkv, S))
    for window, k in [(3, 6), (1, 8), (5, 5), (9, 1), (2, 20)]:
        idx = forced_window_select(scores, pos, window, k)
        o = sparse_attention(q[None], K[None], V[None], idx[None])[0]
        ref, _ = masked_attention(q, K, V, pos[None, :] <= pos[:, None], d ** -0.5)
        assert np.abs(o - ref).max() < 1e-12


def test_forced_window_select_semantics():
    scores = np.array([[[5., 1., 4., 3., 9., 0., 2.]]])
    idx = forced_window_select(scores, np.array([6]), 2, 3)[0, 0]
    assert list(idx[:2]) == [5, 6]                                  # forced window: the last 2 positions
    assert list(idx[2:]) == [4, 0, 2]                               # top-3 of s <= 4 by score (9, 5, 4)
    idx = forced_window_select(scores, np.array([1]), 3, 2)[0, 0]
    assert list(idx) == [-1, 0, 1, -1, -1]                           # short context: padding, no duplicates
    idx = forced_window_select(np.repeat(scores, 2, 0), np.array([6, 1]), 0, 3)[:, 0]   # window 0 ("no SWA"):
    assert idx.tolist() == [[4, 0, 2], [0, 1, -1]]                   # top-k of every visible position
    np.testing.assert_array_equal(with_forced_window(idx[:, None], np.array([6, 1]), 0), idx[:, None])


@pytest.mark.parametrize("q_pos, msg", [
    (np.array([2, 7]), r"q_pos entries must lie in \[0, 7\)"),       # q_pos >= S used to return positions >= S
    (np.array([2.0, 3.0]), "q_pos must be an integer array"),          # a float used to be truncated
    (np.array([-1, 3]), r"q_pos entries must lie in \[0, 7\)"),      # negative used to give all -1
    (np.array([3]), r"q_pos must be an integer array of shape \(T=2,\)"),
])
def test_forced_window_select_bad_q_pos(q_pos, msg):
    scores = np.random.default_rng(5).random((2, 1, 7))
    with pytest.raises(ValueError, match=msg):
        forced_window_select(scores, q_pos, 2, 3)
    with pytest.raises(ValueError, match="scores must be finite"):
        forced_window_select(np.full((2, 1, 7), np.nan), np.array([3, 4]), 2, 3)


def test_the_model_runs_the_selection_the_notebook_teaches():
    """One forced-window rule: prefill's recorded selections are forced_window_select of its recorded FA scores,
    and decode (fa_decode_topk + the same forced window) picks the same set as a full prefill at that position."""
    cfg = HySparse2Config(**SMALL, window=3, topk=4)
    m = HySparse2(cfg)
    seq = toks(20, 4)
    det = {}
    m.prefill(seq, early_exit=False, details=det)
    pos = np.arange(20)
    for score, idx in zip(det["scores"], det["idx"]):
        np.testing.assert_array_equal(idx, forced_window_select(score, pos, cfg.window, cfg.topk))
    _, cache = m.prefill(seq[:-1])
    logits_dec, _ = m.decode_step(int(seq[-1]), cache)
    full, _ = m.prefill(seq, early_exit=False)
    assert np.abs(logits_dec - full[-1]).max() < 1e-10


def test_fa_decode_topk_twin():
    rng = np.random.default_rng(1)
    B, S, Hq, Hkv, d = 2, 12, 4, 2, 8
    q, k, v = rng.standard_normal((B, Hq, d)), rng.standard_normal((B, S, Hkv, d)), rng.standard_normal((B, S, Hkv, d))
    o, idx = fa_decode_topk(q, k, v, topk=3, window=4)
    assert o.shape == (B, Hq, d) and idx.shape == (B, Hkv, 3)
    for b in range(B):
        ref, p = masked_attention(q[b][None], k[b], v[b], np.ones((1, S), bool), d ** -0.5)
        assert np.abs(o[b] - ref[0]).max() < 1e-12
        score = p[0].reshape(Hkv, 2, S).sum(1)[:, :S - 4]
        for g in range(Hkv):
            assert list(idx[b, g]) == list(np.argsort(-score[g], kind="stable")[:3])
    sink = rng.standard_normal(Hq)
    o_s, _ = fa_decode_topk(q, k, v, topk=3, window=4, sink=sink)
    ref_s, _ = masked_attention(q[0][None], k[0], v[0], np.ones((1, S), bool), d ** -0.5, sink)
    assert np.abs(o_s[0] - ref_s[0]).max() < 1e-12 and np.abs(o_s - o).max() > 1e-3
    _, idx = fa_decode_topk(q, k[:, :5], v[:, :5], topk=3, window=4)
    assert (idx[..., 0] == 0).all() and (idx[..., 1:] == -1).all()


@pytest.mark.parametrize("kw, msg", [
    (dict(topk=0), "topk"), (dict(window=-3), "window"),    # window=0 is valid: the "no forced window" ablation
    (dict(cross_layers=24, group_size=5), "group_size=5 must divide"),
    (dict(cross_layers=4, group_size=2, bridge_sources=("self_fa_input", "mirror")), "unknown bridge source"),
    (dict(cross_layers=4, group_size=2, bridge_sources=("boundary",)), "one entry per cross group"),
    (dict(n_heads_q=3, n_heads_kv=2), "multiple"), (dict(swa_window=0), "swa_window"),
    (dict(dtype="float16"), "dtype"), (dict(rope_dims=3), "rope_dims"),
    (dict(select="tokens"), "select must be one of"), (dict(select=None), "select must be one of"),
    (dict(select="block", topk=8, select_block=3), "topk=8 must be a multiple of select_block=3"),
    (dict(select_block=0), "select_block"), (dict(bridging=1), "bridging must be True or False"),
    (dict(bridging="no"), "bridging must be True or False"),
    (dict(cross_layers=4, group_size=2, bridging=False, bridge_sources=("boundary", "boundary")), "needs bridging"),
])
def test_bad_configs(kw, msg):
    with pytest.raises(ValueError, match=msg):
        HySparse2Config(**kw)


def test_bad_inputs():
    m = HySparse2(HySparse2Config(**SMALL))
    with pytest.raises(ValueError, match="tokens"):
        m.prefill(np.array([1, 99]))
    with pytest.raises(ValueError, match="cross_tail"):
        m.prefill(toks(4), cross_tail=5)
    with pytest.raises(ValueError, match="boundary"):
        m.first_token(m.new_cache())
    with pytest.raises(ValueError, match="topk"):
        fa_decode_topk(np.zeros((1, 2, 4)), np.zeros((1, 3, 1, 4)), np.zeros((1, 3, 1, 4)), topk=0, window=1)
    with pytest.raises(ValueError, match="sink"):
        fa_decode_topk(np.zeros((1, 2, 4)), np.zeros((1, 3, 1, 4)), np.zeros((1, 3, 1, 4)), 1, 1, sink=np.zeros(3))
    with pytest.raises(ValueError, match="NaN"):
        fa_decode_topk(np.full((1, 2, 4), np.nan), np.zeros((1, 3, 1, 4)), np.zeros((1, 3, 1, 4)), 1, 1)
    with pytest.raises(ValueError, match="k must"):
        fa_decode_topk(np.zeros((1, 2, 4)), np.zeros((1, 3, 1, 5)), np.zeros((1, 3, 1, 5)), 1, 1)


def test_paper_layout_counts():
    assert HySparse2Config().counts() == {"swa": 24, "fa": 5, "sa": 20, "total": 49}


def test_chunked_prefill_and_float32():
    cfg = HySparse2Config(**SMALL, window=2, topk=3, swa_window=3)
    m = HySparse2(cfg)
    seq = toks(17, 8)
    ref, _ = m.prefill(seq, early_exit=False)
    _, c = m.prefill(seq[:10])
    lg, c = m.prefill(seq[10:], cache=c, early_exit=False)       # continue the cache with a second chunk
    assert lg.shape == (7, 64) and np.abs(lg - ref[10:]).max() < 1e-10
    m32 = HySparse2(HySparse2Config(**SMALL, dtype="float32"))
    lg32, c32 = m32.prefill(seq)
    assert lg32.dtype == np.float32 and c32.cross[0].k.dtype == np.float32
    assert np.abs(lg32[0] - HySparse2(HySparse2Config(**SMALL)).prefill(seq)[0][0]).max() < 1e-3


def test_cache_summary_and_captured_mass():
    from hybrid_lab.models.hysparse2 import captured_mass

    _, c = HySparse2(HySparse2Config(**SMALL, swa_window=3)).prefill(toks(9))
    rows = {r[0]: r for r in c.summary()}
    assert rows["self FA KV"][2] == 9 and rows["self SWA windows"][1:3] == (2, 3) and rows["cross KV (bridged)"][1] == 2
    score = np.array([[0.1, 0.2, 0.3, 0.4]])
    assert captured_mass(score, np.array([[3, 1, -1]]))[0] == pytest.approx(0.6)
    with pytest.raises(ValueError, match="leading axes"):
        captured_mass(score, np.array([3]))


def test_cache_round_trip_through_arrays():
    m = HySparse2(HySparse2Config(**SMALL))
    c = m.prefill_self(toks(12))
    arrays = c.to_arrays()
    assert all(isinstance(v, np.ndarray) for v in arrays.values())
    c2 = HySparse2Cache.from_arrays(arrays)
    assert np.abs(m.first_token(c2) - m.first_token(c)).max() == 0
    lg1, _ = m.decode_step(5, c)
    lg2, _ = m.decode_step(5, c2)
    np.testing.assert_array_equal(lg1, lg2)
    del arrays["cross.0.v"]
    with pytest.raises(ValueError, match="cross.0.v"):
        HySparse2Cache.from_arrays(arrays)


@pytest.mark.parametrize("L, window, topk", [(3, 8, 2), (5, 2, 16), (1, 1, 1), (4, 4, 4), (6, 10, 10)])
def test_short_prompts_shorter_than_window_and_k(L, window, topk):
    m = HySparse2(HySparse2Config(**SMALL, window=window, topk=topk, swa_window=window))
    full, _ = m.prefill(toks(L, L), early_exit=False)
    early, _ = m.prefill(toks(L, L))
    assert np.abs(full[-1] - early[0]).max() <= 1e-10 and np.abs(early).max() > 1e-3


# ------------------------------------------------------------------ the per-layer building blocks (notebook 06.2)
def _decode_from_blocks(m, token, cache):
    """A decode step written only with the public per-layer building blocks (the orchestration of exercise 06.2)."""
    from hybrid_lab.ops.fa_decode import fa_attention

    cfg, cache = m.cfg, cache.copy()
    pos, h = cache.pos, m.weights["embed"][[token]]
    swa = iter(cache.self_swa)
    for i in range(cfg.n_self):
        name = f"self.{i}"
        x, q, k, v = m.layer_input(name, h, [pos])
        if i == cfg.self_swa_before:
            fa_input = h
            cache.self_fa.append(k, v)
            o, _ = fa_attention(q, cache.self_fa.k, cache.self_fa.v, [pos])
        else:
            win = next(swa)
            win.append(k, v, [pos])
            o, _ = fa_attention(q, win.k, win.v, [len(win) - 1], sink=m.sink(name))
        h = m.layer_output(name, h, x, o)
    for g, src in enumerate(cfg.sources):
        cache.cross[g].append(*m.bridge_kv(g, fa_input if src == "self_fa_input" else h))
    cache.pos, cache.boundary = pos + 1, h[0].copy()
    for g in range(cfg.n_groups):
        K, V = cache.cross[g].k, cache.cross[g].v
        x, q, _, _ = m.layer_input(f"cross.{g}.fa", h)
        o, score = fa_attention(q, K, V, [pos])
        idx = forced_window_select(score, np.array([pos]), cfg.window, cfg.topk)
        h = m.layer_output(f"cross.{g}.fa", h, x, o)
        for j in range(cfg.group_size - 1):
            name = f"cross.{g}.sa.{j}"
            x, q, _, _ = m.layer_input(name, h)
            h = m.layer_output(name, h, x, sparse_attention(q[None], K[None], V[None], idx[None],
                                                             sink=m.sink(name))[0])
    return m.logits(h)[0], cache


@pytest.mark.parametrize("kw, L", [(dict(SMALL, swa_window=3, window=2, topk=3), 9),
                                   (dict(SMALL, n_heads_kv=2, bridge_sources=("self_fa_input", "boundary")), 2),
                                   (dict(), 20)])
def test_decode_from_public_building_blocks_equals_decode_step(kw, L):
    m = HySparse2(HySparse2Config(**kw))
    t = toks(L + 6, L)
    _, ca = m.prefill(t[:L])
    cb = ca.copy()
    for tok in t[L:]:
        la, ca = m.decode_step(int(tok), ca)
        lb, cb = _decode_from_blocks(m, int(tok), cb)
        assert np.abs(la - lb).max() <= 1e-10
        aa, ab = ca.to_arrays(), cb.to_arrays()
        assert aa.keys() == ab.keys()
        for key in aa:
            np.testing.assert_allclose(ab[key], aa[key], rtol=0, atol=1e-10, err_msg=key)


def test_building_blocks_shapes_and_errors():
    cfg = HySparse2Config(**SMALL, n_heads_kv=2, gates=True, sinks=True)
    m = HySparse2(cfg)
    h = np.random.default_rng(0).normal(size=(3, cfg.d_model))
    x, q, k, v = m.layer_input("self.0", h, [4, 5, 6])
    assert x.shape == h.shape and q.shape == (3, 4, cfg.d_qk) and k.shape == (3, 2, cfg.d_qk) and v.shape == (3, 2, cfg.d_v)
    _, _, kc, vc = m.layer_input("cross.1.sa.0", h)
    assert kc is None and vc is None                                  # cross layers own no K/V projection
    assert m.layer_input(f"self.{cfg.self_swa_before}", h)[2].shape == (3, 2, cfg.d_qk)   # the FA: NoPE, no pos
    assert m.sink(f"self.{cfg.self_swa_before}") is None and m.sink("cross.0.fa") is None
    assert m.sink("self.0").shape == (cfg.n_heads_q,) and m.sink("cross.0.sa.0").shape == (cfg.n_heads_q,)
    assert m.layer_output("cross.0.sa.0", h, x, np.zeros((3, 4, cfg.d_v))).shape == h.shape
    kb, vb = m.bridge_kv(1, h)
    assert kb.shape == (3, 2, cfg.d_qk) and vb.shape == (3, 2, cfg.d_v)
    assert m.logits(h).shape == (3, cfg.vocab)
    with pytest.raises(ValueError, match="RoPE"):
        m.layer_input("self.0", h)
    with pytest.raises(ValueError, match="pos must have shape"):
        m.layer_input("self.0", h, [1, 2])
    with pytest.raises(ValueError, match="layer name"):
        m.layer_input("cross.9.fa", h)
    with pytest.raises(ValueError, match="g must"):
        m.bridge_kv(cfg.n_groups, h)
    p = HySparse2(cfg, weights={n: m.weights[n] for n in self_decoder_weight_names(cfg)})
    with pytest.raises(ValueError, match="not held"):
        p.layer_input("cross.0.fa", h)


def test_cache_bytes_counted_from_the_config_match_the_cache():
    from hybrid_lab.exercises.lab06 import kv_bytes_reference

    for kw, L in [(dict(SMALL, swa_window=5), 3), (dict(SMALL, self_swa_after=0, group_size=1), 17), (dict(), 48)]:
        cfg = HySparse2Config(**kw)
        c = HySparse2(cfg).prefill_self(toks(L))
        assert kv_bytes_reference(cfg, L, 8) == c.nbytes()
