"""Tiny random transformer (near-uniform attention) and the concentrated synthetic generator."""
import numpy as np
import pytest

from hybrid_lab.models.attention_stats import attention_probs, entropy_per_head, topk_mass
from hybrid_lab.models.tiny_llm import TinyLLM, TinyLLMConfig, concentrated_attention


def test_tiny_llm_shapes_and_near_uniform_attention():
    model = TinyLLM(TinyLLMConfig(max_len=256))
    tokens = np.random.default_rng(0).integers(0, 256, 256)
    logits, attn = model.forward(tokens)
    assert logits.shape == (256, 256) and np.isfinite(logits).all() and np.abs(logits).sum() > 0
    assert len(attn) == 2
    q, k, v = attn[0]
    assert q.shape == k.shape == v.shape == (1, 256, 4, 16)
    p = attention_probs(q[:, -16:], k)                                   # the last 16 queries see ~250 keys
    ent = entropy_per_head(p)
    assert (ent > 0.95 * np.log(256)).all()                              # random weights: almost uniform


def test_tiny_llm_causal():
    model = TinyLLM(TinyLLMConfig(max_len=32))
    t = np.arange(32) % 256
    t2 = t.copy()
    t2[-1] = 7
    l1, _ = model.forward(t)
    l2, _ = model.forward(t2)
    np.testing.assert_allclose(l1[:-1], l2[:-1])
    assert not np.allclose(l1[-1], l2[-1])


@pytest.mark.parametrize("call, match", [
    (lambda: TinyLLM(TinyLLMConfig(max_len=8)).forward(np.array([0, 300])), "tokens"),
    (lambda: TinyLLM(TinyLLMConfig(max_len=8)).forward(np.array([0.0, 1.0])), "tokens"),
    (lambda: TinyLLM(TinyLLMConfig(max_len=8)).forward(np.array([], int)), "tokens"),
    (lambda: TinyLLM(TinyLLMConfig(max_len=8)).forward(np.zeros((2, 2), int)), "tokens"),
    (lambda: TinyLLM(TinyLLMConfig(max_len=8)).forward(np.zeros(9, int)), "max_len"),
    (lambda: TinyLLM({"vocab": 8}), "TinyLLMConfig"),
    (lambda: TinyLLMConfig(d_model=10, n_heads=4), "multiple"),
    (lambda: TinyLLMConfig(n_layers=0), "n_layers"),
    (lambda: TinyLLMConfig(vocab=2.5), "vocab"),
    (lambda: TinyLLMConfig(init_std=np.inf), "init_std"),
    (lambda: TinyLLMConfig(init_std=0.0), "init_std"),
    (lambda: TinyLLMConfig(seed=-1), "seed"),
])
def test_tiny_llm_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_concentration_controls_mass():
    mass = []
    for c in (0.0, 2.0, 4.0):
        d = concentrated_attention(n_keys=512, n_queries=8, concentration=c, seed=1)
        assert d.q.shape == (1, 8, 4, 32) and d.k.shape == (1, 512, 1, 32) and d.v.shape == (1, 512, 1, 32)
        logits = np.einsum("the,se->ths", d.q[0], d.k[0, :, 0])
        np.testing.assert_allclose(logits.std(-1), c, atol=1e-9)
        p = attention_probs(d.q, d.k, scale=1.0, q_pos=d.q_pos)
        mass.append(topk_mass(p, 32).mean())
    assert mass[0] == pytest.approx(32 / 512)
    assert mass[0] < mass[1] < mass[2] and mass[2] > 0.7


@pytest.mark.parametrize("kw, match", [
    (dict(concentration=-1.0), "concentration"),
    (dict(concentration=np.nan), "concentration"),
    (dict(noise=np.inf), "noise"),
    (dict(head_spread="0.3"), "head_spread"),
    (dict(d_model=4, rank=8), "rank"),
    (dict(n_keys=0), "n_keys"),
    (dict(n_queries=2.0), "n_queries"),
    (dict(seed=-3), "seed"),
])
def test_concentrated_bad_input(kw, match):
    with pytest.raises(ValueError, match=match):
        concentrated_attention(**kw)
