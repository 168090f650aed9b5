"""Attention diagnostics: probabilities, entropy, top-k mass and the top-k output error."""
import numpy as np
import pytest

from hybrid_lab.core.blocks import masked_attention, masked_attention_probs
from hybrid_lab.models.attention_stats import (attention_entropy, attention_probs, dense_attention, entropy_per_head,
                                               oracle_topk, topk_mass, topk_output_error)
from hybrid_lab.ops.sparse_attention import sparse_attention


def _qkv(rng, B=2, T=4, Hq=4, Hkv=2, S=7, d=5):
    return rng.normal(size=(B, T, Hq, d)), rng.normal(size=(B, S, Hkv, d)), rng.normal(size=(B, S, Hkv, 3))


def test_probs_causal_and_normalized(rng):
    q, k, _ = _qkv(rng)
    p = attention_probs(q, k)
    np.testing.assert_allclose(p.sum(-1), 1.0)
    assert (p[:, 0, :, 4:] == 0).all() and (p[:, 0, :, :4] > 0).all()     # query 0 sits at position S-T = 3
    # explicit loop for one entry
    b, t, h, s = 1, 2, 3, 2
    g = h // 2
    logits = np.array([q[b, t, h] @ k[b, j, g] for j in range(6)]) / np.sqrt(5)
    ref = np.exp(logits - logits.max())
    assert p[b, t, h, s] == pytest.approx(ref[s] / ref.sum())


def test_entropy_uniform_and_onehot():
    u = np.full((3, 8), 1 / 8)
    np.testing.assert_allclose(attention_entropy(u), np.log(8))
    onehot = np.eye(8)[:3]
    np.testing.assert_allclose(attention_entropy(onehot), 0.0)
    p = np.zeros((1, 1, 2, 4))
    p[0, 0, 0] = 0.25
    p[0, 0, 1] = [1, 0, 0, 0]
    np.testing.assert_allclose(entropy_per_head(p), [np.log(4), 0.0])


def test_topk_mass():
    p = np.array([[0.5, 0.1, 0.3, 0.1]])
    np.testing.assert_allclose(topk_mass(p, 1), [0.5])
    np.testing.assert_allclose(topk_mass(p, 2), [0.8])
    np.testing.assert_allclose(topk_mass(p, 10), [1.0])


def test_oracle_topk_mqa_uses_head_sum():
    p = np.zeros((1, 1, 2, 4))
    p[0, 0, 0] = [0.6, 0.0, 0.4, 0.0]
    p[0, 0, 1] = [0.0, 0.5, 0.45, 0.05]
    idx = oracle_topk(p, 1, 2)                                             # sums: [0.6, 0.5, 0.85, 0.05]
    np.testing.assert_array_equal(idx[0, 0, 0], [2, 0])
    np.testing.assert_array_equal(oracle_topk(p, 2, 1)[0, 0], [[0], [1]])  # GQA: each head its own set


def test_topk_equals_dense_when_k_covers_all(rng):
    q, k, v = _qkv(rng)
    err = topk_output_error(q, k, v, topk=7)
    assert err.shape == (2, 4, 4)
    np.testing.assert_allclose(err, 0.0, atol=1e-12)
    o = dense_attention(q, k, v)
    idx = oracle_topk(attention_probs(q, k), 2, 100)
    np.testing.assert_allclose(sparse_attention(q, k, v, idx), o, atol=1e-12)


def test_topk_error_positive_and_decreasing(rng):
    q, k, v = _qkv(rng, S=30, T=3)
    errs = [topk_output_error(q, k, v, topk=kk).mean() for kk in (2, 8, 30)]
    assert errs[0] > errs[1] > errs[2] and errs[0] > 0.05


def test_probs_and_output_are_the_shared_masked_attention(rng):
    """One softmax / GQA implementation: attention_stats is core.blocks' masked attention, sequence by sequence."""
    q, k, v = _qkv(rng)
    vis = np.arange(7)[None, :] <= (3 + np.arange(4))[:, None]
    p = attention_probs(q, k)
    o = dense_attention(q, k, v)
    for b in range(2):
        ob, pb = masked_attention(q[b], k[b], v[b], vis, 5 ** -0.5)
        np.testing.assert_array_equal(p[b], pb)
        np.testing.assert_array_equal(o[b], ob)
        np.testing.assert_array_equal(pb, masked_attention_probs(q[b], k[b], vis, 5 ** -0.5))


Q, K, V = (np.random.default_rng(7).normal(size=s) for s in ((2, 4, 4, 5), (2, 7, 2, 5), (2, 7, 2, 3)))


def _with(a, idx, value):
    a = a.copy()
    a[idx] = value
    return a


@pytest.mark.parametrize("call, match", [
    (lambda: attention_probs(Q[:, :, :3], K), "multiple"),
    (lambda: attention_probs(np.full_like(Q, np.nan), K), "q must be finite"),
    (lambda: attention_probs(Q, _with(K, (0, 3, 1, 2), np.inf)), "k must be finite"),
    (lambda: attention_probs(Q[0], K), "4-D"),
    (lambda: attention_probs(Q, K[:1]), "k must be"),
    (lambda: attention_probs(Q[:, :0], K), "empty"),
    (lambda: attention_probs(Q.astype(complex), K), "dtype"),
    (lambda: attention_probs(Q, K, scale=0.0), "scale"),
    (lambda: attention_probs(Q, K, scale=np.nan), "scale"),
    (lambda: attention_probs(Q, K, q_pos=np.array([1, 2])), "q_pos"),
    (lambda: attention_probs(Q, K, q_pos=np.array([3, 4, 5, 7])), "q_pos"),           # 7 = S: no such key
    (lambda: attention_probs(Q, K, q_pos=np.array([3.0, 4, 5, 6])), "q_pos"),
    (lambda: attention_probs(Q[:, :, :, :4], K), "d="),
    (lambda: dense_attention(Q, K, V[:, :5]), "v must be"),
    (lambda: dense_attention(Q, K, _with(V, (1, 0, 0, 0), np.nan)), "v must be finite"),
    (lambda: topk_output_error(Q, K, V, topk=0), "topk"),
    (lambda: topk_output_error(Q, K, V, topk=2.5), "topk"),
    (lambda: attention_entropy(np.array([0.5, -0.1, 0.6])), ">= 0"),
    (lambda: attention_entropy(np.array([0.5, np.nan, 0.5])), "finite"),
    (lambda: attention_entropy(np.array([0.5, 0.2])), "sum to 1"),
    (lambda: entropy_per_head(np.full((2, 3), 0.5)), "4-D"),
    (lambda: topk_mass(np.array([[0.5, -0.5]]), 1), ">= 0"),
    (lambda: topk_mass(np.array([[0.5, np.inf]]), 1), "finite"),
    (lambda: topk_mass(np.array([[0.5, 0.5]]), 0), "k"),
    (lambda: oracle_topk(np.full((1, 1, 4, 3), 0.25), 3, 2), "multiple"),
    (lambda: oracle_topk(np.full((1, 1, 4, 3), 0.25), 2, 0), "k"),
    (lambda: oracle_topk(np.full((1, 4, 3), 0.25), 2, 1), "4-D"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
