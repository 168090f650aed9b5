"""HySparse v1: block scoring/selection, KV + index reuse, the own-KV SWA branch, cross-layer overlap."""
import numpy as np
import pytest

from hybrid_lab.core.blocks import apply_rope, masked_attention
from hybrid_lab.models.hysparse import (HySparse, HySparseConfig, block_scores, blocks_to_tokens, drifting_attention_stack,
                                        gated_fusion, select_blocks, topk_overlap_by_distance)
from hybrid_lab.ops.sparse_attention import sparse_attention


def test_block_scores_sum_probability_mass():
    rng = np.random.default_rng(0)
    p = rng.random((5, 4, 10))
    p /= p.sum(-1, keepdims=True)
    bs = block_scores(p, 4, n_kv_heads=2)
    assert bs.shape == (5, 2, 3)
    np.testing.assert_allclose(bs.sum(-1), 2.0)                   # 2 query heads per KV group, each sums to 1
    np.testing.assert_allclose(bs[:, 0, 0], p[:, :2, :4].sum((1, 2)))


def test_select_blocks_is_causal_and_deterministic():
    scores = np.array([[[0.1, 0.5, 0.5, 0.9]]] * 2)
    q_pos = np.array([5, 15])
    b = select_blocks(scores, q_pos, block_size=4, n_blocks=2)
    assert list(b[0, 0]) == [1, 0]                                # blocks starting at <= 5: {0, 1}
    assert list(b[1, 0]) == [3, 1]                                # tie 1 vs 2 -> the smaller block id
    tok = blocks_to_tokens(b, 4, q_pos)
    assert list(tok[0, 0]) == [4, 5, -1, -1, 0, 1, 2, 3]          # block 1 cut at the query position


def test_v1_sparse_branch_equals_full_attention_when_all_blocks_fit():
    cfg = HySparseConfig(block_size=4, n_blocks=8, n_layers=4, group_size=2)
    m = HySparse(cfg)
    t = np.random.default_rng(1).integers(0, 64, 20)
    _, det = m.forward(t, return_details=True)
    idx = blocks_to_tokens(det["block_idx"][0], 4, np.arange(20))
    rng = np.random.default_rng(2)
    q, K, V = rng.standard_normal((20, 4, 8)), rng.standard_normal((20, 2, 8)), rng.standard_normal((20, 2, 8))
    o = sparse_attention(q[None], K[None], V[None], idx[None])[0]
    ref, _ = masked_attention(q, K, V, np.tri(20, dtype=bool), 8 ** -0.5)
    assert np.abs(o - ref).max() < 1e-12


def test_v1_forward_is_causal():
    """Changing token L-2 changes the last logits (through FA, SA and the own-KV SWA branch) but no earlier row."""
    m = HySparse(HySparseConfig())
    t = np.random.default_rng(3).integers(0, 64, 24)
    a = m.forward(t)
    t2 = t.copy()
    t2[-2] = (t2[-2] + 1) % 64
    b = m.forward(t2)
    assert a.shape == (24, 64) and np.abs(a[-1] - b[-1]).max() > 1e-6
    np.testing.assert_allclose(a[:-2], b[:-2])                   # causal: earlier rows unchanged


def test_gated_fusion():
    o1, o2 = np.ones(3), 2 * np.ones(3)
    np.testing.assert_allclose(gated_fusion(o1, o2, np.zeros(3), np.zeros(3)), 1.5)
    np.testing.assert_allclose(gated_fusion(o1, o2, np.full(3, 50.0), np.full(3, -50.0)), 1.0)


def test_overlap_decays_with_distance():
    p, _ = drifting_attention_stack(L=256, n_layers=8, drift=0.4, seed=0)
    ov = topk_overlap_by_distance(p, 16)
    assert ov[0] == 1.0 and ov[1] > ov[-1] + 0.2
    p0, _ = drifting_attention_stack(L=256, n_layers=4, drift=0.0)
    np.testing.assert_allclose(topk_overlap_by_distance(p0, 16), 1.0)


def test_rope_preserves_norm_and_relative_positions():
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((1, 1, 8)), rng.standard_normal((1, 1, 8))
    a = apply_rope(q, np.array([7]), 4) @ apply_rope(k, np.array([3]), 4)[0, 0]
    b = apply_rope(q, np.array([14]), 4) @ apply_rope(k, np.array([10]), 4)[0, 0]
    np.testing.assert_allclose(a, b)
    np.testing.assert_allclose(np.linalg.norm(apply_rope(q, np.array([5]), 8)), np.linalg.norm(q))


@pytest.mark.parametrize("kw, msg", [(dict(n_layers=10, group_size=4), "must divide"), (dict(n_blocks=0), "n_blocks"),
                                     (dict(window=0), "window"), (dict(block_size=-1), "block_size"),
                                     (dict(n_heads_q=4, n_heads_kv=3), "multiple")])
def test_bad_configs(kw, msg):
    with pytest.raises(ValueError, match=msg):
        HySparseConfig(**kw)


P3 = np.full((3, 4, 8), 1 / 8)                       # (T, Hq, S) uniform FA probabilities


@pytest.mark.parametrize("call, match", [
    (lambda: HySparse(HySparseConfig()).forward(np.zeros((2, 2), int)), "tokens"),
    (lambda: HySparse(HySparseConfig()).forward(np.array([1, 64])), "tokens"),
    (lambda: HySparse({"vocab": 64}), "HySparseConfig"),
    (lambda: HySparse(HySparseConfig(), weights={"embed": np.zeros((64, 32))}), "weights"),
    (lambda: HySparse(HySparseConfig(), weights={**HySparse.init_weights(HySparseConfig()),
                                                  "embed": np.zeros((64, 31))}), "shape"),
    (lambda: select_blocks(np.ones((2, 1, 4)), np.array([5, 15]), block_size=0, n_blocks=2), "block_size"),
    (lambda: select_blocks(np.ones((2, 1, 4)), np.array([5, 15]), block_size=4, n_blocks=0), "n_blocks"),
    (lambda: select_blocks(np.ones((2, 1, 4)), np.array([5, 16]), block_size=4, n_blocks=2), "q_pos"),
    (lambda: select_blocks(np.ones((2, 1, 4)), np.array([5, -1]), block_size=4, n_blocks=2), "q_pos"),
    (lambda: select_blocks(np.ones((2, 1, 4)), np.array([5.0, 6.0]), block_size=4, n_blocks=2), "q_pos"),
    (lambda: select_blocks(np.ones((2, 1, 4)), np.array([5]), block_size=4, n_blocks=2), "q_pos"),
    (lambda: select_blocks(np.full((2, 1, 4), np.nan), np.array([5, 6]), block_size=4, n_blocks=2), "scores"),
    (lambda: block_scores(P3, 0), "block_size"),
    (lambda: block_scores(P3, 4, n_kv_heads=3), "multiple"),
    (lambda: block_scores(P3 * np.nan, 4), "probs must be finite"),
    (lambda: block_scores(-P3, 4), "probs must be >= 0"),
    (lambda: block_scores(P3[0], 4), "3-D"),
    (lambda: blocks_to_tokens(np.array([[[0, 0]]]), 4, np.array([5])), "twice"),
    (lambda: blocks_to_tokens(np.array([[[0, -2]]]), 4, np.array([5])), "block_idx"),
    (lambda: blocks_to_tokens(np.array([[[0, 1]]]), 0, np.array([5])), "block_size"),
    (lambda: blocks_to_tokens(np.array([[[0, 1]]]), 4, np.array([5, 6])), "q_pos"),
    (lambda: gated_fusion(np.ones(3), np.full(3, np.nan), 0.0, 0.0), "o_local"),
    (lambda: gated_fusion(np.ones(3), np.ones(4), 0.0, 0.0), "one shape"),
    (lambda: gated_fusion(np.ones(3), np.ones(3), np.zeros(2), 0.0), "g_sparse"),
    (lambda: gated_fusion(np.ones(3), np.ones(3), 0.0, np.inf), "g_local"),
    (lambda: drifting_attention_stack(L=8, n_layers=2, drift=np.nan), "drift"),
    (lambda: drifting_attention_stack(L=8, n_layers=2, drift=2.0), "drift"),
    (lambda: drifting_attention_stack(L=8, n_layers=2, temperature=0.0), "temperature"),
    (lambda: drifting_attention_stack(L=0, n_layers=2), "L"),
    (lambda: topk_overlap_by_distance(np.ones(8), 2), "2-D"),
    (lambda: topk_overlap_by_distance(np.full((2, 8), np.nan), 2), "finite"),
    (lambda: topk_overlap_by_distance(np.ones((2, 8)), 9), "k must be <="),
])
def test_bad_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_kept_mass_details():
    cfg = HySparseConfig(n_layers=4, group_size=2, block_size=4, n_blocks=2)
    _, det = HySparse(cfg).forward(np.random.default_rng(0).integers(0, 64, 30), return_details=True)
    km = det["kept_mass"]
    assert len(km) == 4 and km[0].shape == (30, cfg.n_heads_q)
    assert np.allclose(km[0][:8], 1.0)                             # t < 8: the two blocks cover every visible token
    assert 0.05 < km[0][20:].mean() < 0.999 and 0.05 < km[1][20:].mean() < 0.999
