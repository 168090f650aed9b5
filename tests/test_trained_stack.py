"""The layer-stack LM (numpy) and its torch twin: equal logits at init and after training, gradients flow, same
weight names; prefill + decode = the full forward; cache sizes by kind; config and weight validation."""
from dataclasses import replace

import numpy as np
import pytest
import torch
from trained_helpers import adam_steps, one_torch_thread  # noqa: F401 (an autouse fixture)

from hybrid_lab.models.stack import Stack, StackConfig, n_params, weight_shapes
from hybrid_lab.trained.torch_stack import TorchStack

# Small on purpose (2 CPU cores): chunk_size 8 < T so the numpy SSD scan hands its state across chunks, window 8 < T
# so the SWA band and the rolling window really drop positions; rope on the full-attention layer of one layout.
LAYOUTS = {
    "mamba2": dict(layers=("mamba2", "mamba2")),
    "mamba2+attn": dict(layers=("mamba2", "attn"), rope_dims_attn=4),
    "swa+attn": dict(layers=("swa", "attn")),
}
BASE = dict(d_model=32, d_ff=64, d_qk=8, d_v=8, rope_dims_swa=4, window=8, d_inner=32, d_state=8, head_dim=8,
            chunk_size=8)


def cfg_of(layout, **kw):
    return StackConfig(**{**BASE, **LAYOUTS[layout], **kw})


def batch(B, T, seed=0, vocab=64):
    return torch.tensor(np.random.default_rng(seed).integers(0, vocab, (B, T)))


def numpy_logits(cfg, weights, tokens):
    m = Stack(cfg, weights)
    return np.stack([m.forward(t) for t in tokens.numpy()])


def assert_rel_close(a, b, rel):
    scale = np.abs(b).max()
    assert scale > 1e-2                                             # not a trivially zero model
    assert np.abs(a - b).max() <= rel * scale, np.abs(a - b).max() / scale


# ------------------------------------------------------------------------------------------ the brief's three
@pytest.mark.parametrize("layout", LAYOUTS)
def test_numpy_equals_torch_at_init_and_after_training(layout):
    # No top-k selection in this model, so float32 has no tie flips: compare in float32 at the brief's 1e-4.
    cfg = cfg_of(layout)
    tm = TorchStack(cfg)
    tokens = batch(3, 24, seed=1)
    w0 = tm.numpy_weights()
    with torch.no_grad():
        assert_rel_close(numpy_logits(replace(cfg, dtype="float32"), w0, tokens), tm(tokens).numpy(), 1e-4)
    adam_steps(tm, batch(4, 24, seed=2), 20)
    w1 = tm.numpy_weights()
    assert max(np.abs(w1[n] - w0[n]).max() for n in w0) > 1e-2       # the weights moved off the init
    with torch.no_grad():
        lt = tm(tokens).numpy()
    ln = numpy_logits(replace(cfg, dtype="float32"), w1, tokens)
    assert ln.dtype == np.float32
    assert_rel_close(ln, lt, 1e-4)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_twin_is_exact_in_float64(layout):
    # float32 noise (~1e-7) could hide a small op mismatch (an eps, a shifted mask); float64 must agree to ~1e-13.
    cfg = cfg_of(layout)
    tm = TorchStack(cfg).double()
    adam_steps(tm, batch(4, 24, seed=3), 5)
    w = {n: tm.w(n).detach().numpy().copy() for n in tm.names}
    tokens = batch(2, 40, seed=4)                                    # T = 40: 5 SSD chunks, 5 windows
    with torch.no_grad():
        lt = tm(tokens).numpy()
    assert_rel_close(numpy_logits(cfg, w, tokens), lt, 1e-10)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_loss_decreases_on_a_repeating_pattern(layout):
    tm = TorchStack(cfg_of(layout))
    pattern = torch.tensor([3, 17, 42, 5, 9, 60, 1, 33])
    tokens = pattern.repeat(4, 4)                                    # (4, 32): the pattern 4 times per row
    losses = adam_steps(tm, tokens, 30)
    assert np.isfinite(losses).all()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in tm.parameters())
    assert losses[-1] < 0.1 * losses[0], losses


@pytest.mark.parametrize("layout", LAYOUTS)
def test_numpy_weights_match_init_weights(layout):
    cfg = cfg_of(layout)
    ref = Stack.init_weights(cfg)
    got = TorchStack(cfg).numpy_weights()
    assert list(got) == list(ref)
    assert {n: a.shape for n, a in got.items()} == {n: a.shape for n, a in ref.items()} == weight_shapes(cfg)
    assert all(a.dtype == np.float32 for a in got.values())
    assert all(np.allclose(got[n], ref[n], rtol=1e-6, atol=1e-7) for n in ref)   # the numpy init, copied in
    assert sum(a.size for a in ref.values()) == n_params(cfg)


# ------------------------------------------------------------------------------------------ numpy model
@pytest.mark.parametrize("layout", LAYOUTS)
def test_prefill_then_decode_equals_forward(layout):
    m = Stack(cfg_of(layout))
    t = np.random.default_rng(5).integers(0, 64, 30)
    full = m.forward(t)
    assert full.shape == (30, 64)
    logits, cache = m.prefill(t[:11])                    # 11: not a multiple of the chunk, inside the 2nd window
    rows = [logits]
    for tok in t[11:20]:
        lg, cache = m.decode_step(int(tok), cache)
        rows.append(lg[None])
    lg, cache = m.prefill(t[20:], cache)                 # a second prefill chunk continues the cache
    rows.append(lg)
    assert cache.pos == 30
    assert np.abs(np.concatenate(rows) - full).max() <= 1e-10


def test_decode_does_not_modify_the_input_cache():
    m = Stack(cfg_of("mamba2+attn"))
    _, cache = m.prefill(np.arange(5))
    before = cache.copy()
    m.decode_step(7, cache)
    assert cache.pos == 5
    for a, b in zip(cache.layers, before.layers):
        for name in vars(a):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def test_cache_bytes_by_kind():
    cfg = StackConfig(**{**BASE, "layers": ("attn", "swa", "mamba2")})
    m = Stack(cfg)
    t = np.random.default_rng(6).integers(0, 64, 24)
    sizes = [m.prefill(t[:n])[1].nbytes() for n in (1, 4, 8, 16, 24)]
    kv_row = cfg.n_heads_kv * (cfg.d_qk + cfg.d_v) * 8                  # bytes per position, float64
    assert [s["kv"] for s in sizes] == [n * kv_row for n in (1, 4, 8, 16, 24)]           # grows with T
    assert [s["swa"] for s in sizes] == [n * kv_row for n in (1, 4, 8, 8, 8)]            # capped at the window
    ssm = ((cfg.d_conv - 1) * cfg.conv_dim + cfg.n_ssm_heads * cfg.head_dim * cfg.d_state) * 8
    assert [s["ssm"] for s in sizes] == [ssm] * 5                                         # constant
    assert all(s["total"] == s["kv"] + s["swa"] + s["ssm"] for s in sizes)
    assert m.new_cache().nbytes() == {"kv": 0, "swa": 0, "ssm": ssm, "total": ssm}


def test_counts_and_defaults():
    cfg = StackConfig(layers=["swa", "swa", "attn"])
    assert cfg.layers == ("swa", "swa", "attn")                     # a list is stored as a tuple
    assert cfg.counts() == {"attn": 1, "swa": 2, "mamba2": 0, "total": 3}
    d = StackConfig()
    assert (d.d_inner, d.n_ssm_heads, d.conv_dim) == (64, 4, 96)


@pytest.mark.parametrize("kw, field", [
    (dict(layers=()), "layers"), (dict(layers="attn"), "layers"), (dict(layers=("attn", "mamba")), "layers"),
    (dict(vocab=0), "vocab"), (dict(d_model=2.0), "d_model"), (dict(window=0), "window"),
    (dict(n_heads_q=3, n_heads_kv=2), "n_heads_q"), (dict(rope_dims_swa=3), "rope_dims_swa"),
    (dict(rope_dims_attn=18), "rope_dims_attn"), (dict(rope_base=0.0), "rope_base"),
    (dict(d_inner=40), "d_inner"), (dict(head_dim=0), "head_dim"), (dict(d_conv=0), "d_conv"),
    (dict(chunk_size=-1), "chunk_size"), (dict(dtype="float16"), "dtype"), (dict(gates=1), "gates"),
    (dict(seed=-1), "seed"),
])
def test_config_validation(kw, field):
    with pytest.raises(ValueError, match=field):
        StackConfig(**kw)


def test_weights_are_validated():
    cfg = cfg_of("swa+attn")
    w = Stack.init_weights(cfg)
    with pytest.raises(ValueError, match="missing"):
        Stack(cfg, {n: a for n, a in w.items() if n != "layer.0.attn.sink"})
    with pytest.raises(ValueError, match="unexpected"):
        Stack(cfg, {**w, "layer.9.mlp.w1": w["layer.0.mlp.w1"]})
    with pytest.raises(ValueError, match="shape"):
        Stack(cfg, {**w, "lm_head": w["lm_head"].T})
    with pytest.raises(ValueError, match="finite"):
        Stack(cfg, {**w, "embed": np.full_like(w["embed"], np.nan)})
    with pytest.raises(ValueError, match="tokens"):
        Stack(cfg).forward(np.array([0, 64]))
    with pytest.raises(ValueError, match="tokens"):
        TorchStack(cfg)(torch.tensor([1, 2]))                     # (T,) instead of (B, T)


def test_token_value_check_is_skipped_only_while_a_cuda_graph_is_captured(monkeypatch):
    # the value check reads the tokens on the host, impossible inside torch.cuda.graph (train.py captures the step)
    tm = TorchStack(cfg_of("swa+attn"))
    bad = torch.tensor([[1, 64]])
    with pytest.raises(ValueError, match="vocab"):
        tm.check_tokens(bad)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert tm.check_tokens(bad).tolist() == [[1, 64]]
    with pytest.raises(ValueError, match="integer torch tensor"):      # the shape and dtype checks still run
        tm.check_tokens(torch.zeros(2, 3))
