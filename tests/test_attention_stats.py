"""Attention diagnostics: probabilities, entropy, top-k mass and the top-k output error."""
import numpy as np
import pytest

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
    with pytest.raises(ValueError):
        attention_entropy(np.array([0.5, -0.1, 0.6]))


def test_topk_mass():
    p = np.array([[0.5, 0.1, 0.3, 0.1]])
    np.testing.assert_allclose(topk_mass(p, 1), [0.5])
    np.testing.assert_allclose(topk_mass(p, 2), [0.8])
    np.testing.assert_allclose(topk_mass(p, 10), [1.0])
    with pytest.raises(ValueError):
        topk_mass(p, 0)


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


def test_bad_input(rng):
    q, k, v = _qkv(rng)
    with pytest.raises(ValueError, match="multiple"):
        attention_probs(q[:, :, :3], k)
    with pytest.raises(ValueError, match="NaN"):
        attention_probs(np.full_like(q, np.nan), k)
    with pytest.raises(ValueError, match="topk"):
        topk_output_error(q, k, v, topk=0)
    with pytest.raises(ValueError, match="q_pos"):
        attention_probs(q, k, q_pos=np.array([1, 2]))


def test_plot_helpers_return_figures():
    import matplotlib.pyplot as plt

    from hybrid_lab.widgets.dsa import plot_entropy, plot_losses, plot_topk_curves

    fig = plot_entropy({"a": [6.9, 6.8], "b": [3.0]}, 6.93)
    assert len(fig.axes[0].patches) == 3
    plt.close(fig)
    fig = plot_topk_curves([16, 32], {"c=1": [1.0, 0.5]}, "error")
    assert len(fig.axes[0].lines) == 1
    plt.close(fig)
    fig = plot_losses({"ok": [3.0, 1.0, 0.5], "diverged": [90.0, 1e9, np.inf]})
    assert len(fig.axes[0].lines) == 3                                   # two curves + the divergence mark
    plt.close(fig)
    with pytest.raises(ValueError):
        plot_entropy({}, 1.0)
