"""core.blocks: the shared building blocks. Cheap argument checks (scalars, dtypes, shapes) raise ValueError naming
the argument; activations are not scanned, so NaN in -> NaN out (documented in the module docstring)."""
import math

import numpy as np
import pytest

from hybrid_lab.core.blocks import (apply_rope, attn_weights, init_weight, layer_norm, masked_attention,
                                    masked_attention_probs, mlp_weights, rms_norm, sigmoid, silu, softmax_with_sink,
                                    softplus)

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 4))
Q, K, V = RNG.standard_normal((3, 2, 4)), RNG.standard_normal((4, 1, 4)), RNG.standard_normal((4, 1, 3))
MASK = np.tril(np.ones((3, 4), bool), 1)


def test_norms_and_activations_match_their_formulas():
    np.testing.assert_allclose(rms_norm(X), X / np.sqrt((X * X).mean(-1, keepdims=True) + 1e-6))
    np.testing.assert_allclose(layer_norm(X).mean(-1), 0.0, atol=1e-12)
    np.testing.assert_allclose(silu(X), X * sigmoid(X))
    np.testing.assert_allclose(softplus(X), np.log1p(np.exp(X)))
    np.testing.assert_allclose(silu(np.arange(3)), np.arange(3) / (1 + np.exp(-np.arange(3))))   # ints are real


def test_rope_rotates_pairs_and_keeps_their_norm():
    x = RNG.standard_normal((3, 2, 6))
    out = apply_rope(x, np.arange(3), rot_dims=4)
    np.testing.assert_array_equal(out[0], x[0])                                   # position 0: no rotation
    np.testing.assert_array_equal(out[..., 4:], x[..., 4:])                       # NoPE channels pass through
    np.testing.assert_allclose(out[..., 0] ** 2 + out[..., 2] ** 2, x[..., 0] ** 2 + x[..., 2] ** 2)
    assert apply_rope(x, np.arange(3), rot_dims=0) is x


def test_attention_rows_sum_to_one_and_a_sink_absorbs_mass():
    o, p = masked_attention(Q, K, V, MASK, 0.5)
    np.testing.assert_allclose(p.sum(-1), 1.0)
    assert (p[:, :, ~MASK[0]][0] == 0).all()
    np.testing.assert_allclose(masked_attention_probs(Q, K, MASK, 0.5), p)
    ps = masked_attention_probs(Q, K, MASK, 0.5, sink=np.array([0.3, -0.2]))
    assert (ps.sum(-1) < 1).all() and (ps.sum(-1) > 0).all()


def test_softmax_rows_with_nothing_visible_are_zero():
    z = np.array([[0.0, -np.inf], [-np.inf, -np.inf]])
    np.testing.assert_array_equal(softmax_with_sink(z), [[1.0, 0.0], [0.0, 0.0]])


# ------------------------------------------------------------------------ NaN in -> NaN out (documented, not scanned)
def test_a_nan_or_plus_inf_logit_makes_its_whole_row_nan():
    """It used to return the row's unnormalised exp() beside the NaN (the denominator NaN was replaced by 1)."""
    z = RNG.standard_normal((2, 4))
    for bad in (math.nan, math.inf):
        zb = z.copy()
        zb[0, 1] = bad
        with np.errstate(invalid="ignore"):                                       # inf - inf: the NaN we want
            p = softmax_with_sink(zb)
        assert np.isnan(p[0]).all()
        np.testing.assert_allclose(p[1], softmax_with_sink(z)[1])                 # other rows untouched


def test_nan_in_q_k_v_reaches_the_outputs():
    for name in ("q", "k", "v"):
        args = dict(q=Q.copy(), k=K.copy(), v=V.copy())
        args[name][0, 0, 0] = np.nan
        o, p = masked_attention(args["q"], args["k"], args["v"], MASK, 0.5)
        assert np.isnan(o).any()


def test_nan_in_a_norm_row_stays_in_that_row():
    x = X.copy()
    x[0, 2] = np.nan
    for fn in (rms_norm, layer_norm):
        out = fn(x)
        assert np.isnan(out[0]).all() and np.isfinite(out[1]).all()


# ---------------------------------------------------------------------------------------- bad arguments raise
@pytest.mark.parametrize("call, match", [
    (lambda: rms_norm(X, eps=0.0), "eps"),
    (lambda: rms_norm(X, eps=math.nan), "eps"),
    (lambda: layer_norm(X, eps=-1e-5), "eps"),
    (lambda: layer_norm(X, eps=math.inf), "eps"),
    (lambda: rms_norm(X.astype(complex)), "x"),
    (lambda: layer_norm(X > 0), "x"),
    (lambda: silu(X.astype(object)), "x"),
    (lambda: sigmoid(X > 0), "x"),
    (lambda: softplus(X.astype(str)), "z"),
    (lambda: softmax_with_sink(X, math.nan), "sink"),
    (lambda: softmax_with_sink(X, math.inf), "sink"),
    (lambda: softmax_with_sink(X, np.zeros(3)), "sink"),                  # does not broadcast to (2, 1)
    (lambda: softmax_with_sink(X.astype(complex)), "logits"),
    (lambda: apply_rope(Q, np.arange(3), 4, base=0.0), "base"),
    (lambda: apply_rope(Q, np.arange(3), 4, base=math.nan), "base"),
    (lambda: apply_rope(Q, np.arange(3), 3), "rot_dims"),
    (lambda: apply_rope(Q, np.arange(3), 4.0), "rot_dims"),
    (lambda: apply_rope(Q, np.arange(3), 6), "rot_dims"),
    (lambda: apply_rope(Q, np.arange(2), 4), "pos"),                      # one position per query
    (lambda: apply_rope(Q, np.array([0, -1, 2]), 4), "pos"),
    (lambda: apply_rope(Q, np.arange(3.0), 4), "pos"),                    # float positions
    (lambda: apply_rope(Q, np.arange(3).astype(str), 4), "pos"),
    (lambda: apply_rope(Q[0], np.arange(3), 4), "x"),                     # (H, d): no T axis
    (lambda: apply_rope(Q.astype(complex), np.arange(3), 4), "x"),
    (lambda: apply_rope(np.ones((3, 2, 4), int), np.arange(3), 4), "x"),  # ints would be truncated in place
    (lambda: masked_attention(Q, K, V, MASK, 0.0), "scale"),
    (lambda: masked_attention(Q, K, V, MASK, math.nan), "scale"),
    (lambda: masked_attention(Q, K, V, MASK, 0.5, sink=np.array([0.3, math.nan])), "sink"),
    (lambda: masked_attention(Q, K, V, MASK, 0.5, sink=np.array([0.3])), "sink"),
    (lambda: masked_attention(Q, K, V, MASK, 0.5, sink=np.float64(0.3)), "sink"),
    (lambda: masked_attention(Q, K, V, MASK[:, :3], 0.5), "mask"),
    (lambda: masked_attention(Q, K, V, MASK[0], 0.5), "mask"),
    (lambda: masked_attention(Q, K, V, MASK.astype(str), 0.5), "mask"),
    (lambda: masked_attention(Q, K, V, MASK.astype(float), 0.5), "mask"),
    (lambda: masked_attention(Q[:, :, :3], K, V, MASK, 0.5), "k"),        # d of q and k differ
    (lambda: masked_attention(Q, K[None], V, MASK, 0.5), "k"),
    (lambda: masked_attention(Q[0], K, V, MASK, 0.5), "q"),
    (lambda: masked_attention(Q, K, V[:3], MASK, 0.5), "v"),
    (lambda: masked_attention(Q, K, V[..., 0], MASK, 0.5), "v"),
    (lambda: masked_attention(Q, np.repeat(K, 3, axis=1), np.repeat(V, 3, axis=1), MASK, 0.5), "Hq"),
    (lambda: masked_attention(Q > 0, K, V, MASK, 0.5), "q"),
    (lambda: masked_attention_probs(Q, K.astype(complex), MASK, 0.5), "k"),
    (lambda: init_weight(np.random.default_rng(0), (3, 0), 3, "float64"), "shape"),
    (lambda: init_weight(np.random.default_rng(0), (), 3, "float64"), "shape"),
    (lambda: init_weight(np.random.default_rng(0), (3, 4.0), 3, "float64"), "shape"),
    (lambda: init_weight(np.random.default_rng(0), (3, 4), 0, "float64"), "fan_in"),
    (lambda: init_weight(np.random.default_rng(0), (3, 4), 2.5, "float64"), "fan_in"),
    (lambda: init_weight(np.random.default_rng(0), (3, 4), 3, "int64"), "dtype"),
    (lambda: init_weight(np.random.default_rng(0), (3, 4), 3, "no-such-dtype"), "dtype"),
    (lambda: attn_weights(np.random.default_rng(0), "l.", 0, 2, 1, 4, 4, "float64"), "D"),
    (lambda: attn_weights(np.random.default_rng(0), "l.", 8, 3, 2, 4, 4, "float64"), "Hq"),
    (lambda: attn_weights(np.random.default_rng(0), "l.", 8, True, 1, 4, 4, "float64"), "Hq"),
    (lambda: attn_weights(np.random.default_rng(0), "l.", 8, 2, 1, 4, 4.0, "float64"), "dv"),
    (lambda: attn_weights(np.random.default_rng(0), "l.", 8, 2, 1, 4, 4, 3), "dtype"),
    (lambda: mlp_weights(np.random.default_rng(0), "l.", 8, 0, "float64"), "F"),
    (lambda: mlp_weights(np.random.default_rng(0), "l.", -8, 16, "float64"), "D"),
])
def test_bad_arguments_raise_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_weights_have_the_documented_shapes():
    w = attn_weights(np.random.default_rng(0), "l.", 8, 4, 2, 3, 5, "float32", gate=True, sink=True)
    assert {k: v.shape for k, v in w.items()} == {"l.wq": (8, 12), "l.wo": (20, 8), "l.wk": (8, 6), "l.wv": (8, 10),
                                                  "l.wg": (8, 20), "l.sink": (4,)}
    assert all(v.dtype == np.float32 for v in w.values())
    assert mlp_weights(np.random.default_rng(0), "m.", 8, 16, np.float64)["m.w2"].shape == (16, 8)
