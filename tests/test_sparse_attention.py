import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hybrid_lab.ops.sparse_attention import sparse_attention, topk_indices


def dense(q, k, v, sink=None):
    G = q.shape[2] // k.shape[2]
    kk, vv = np.repeat(k, G, axis=2), np.repeat(v, G, axis=2)
    logits = np.einsum("bthd,bshd->bths", q, kk) / np.sqrt(q.shape[-1])
    m = logits.max(-1, keepdims=True)
    p = np.exp(logits - m)
    den = p.sum(-1, keepdims=True)
    if sink is not None:
        den = den + np.exp(np.asarray(sink)[None, None, :, None] - m)
    return np.einsum("bths,bshd->bthd", p / den, vv)


@settings(max_examples=20, deadline=None)
@given(T=st.integers(1, 4), S=st.integers(1, 12), Hkv=st.integers(1, 3), G=st.integers(1, 3), seed=st.integers(0, 999))
def test_all_positions_equal_dense(T, S, Hkv, G, seed):
    r = np.random.default_rng(seed)
    q, k, v = r.normal(size=(2, T, Hkv * G, 8)), r.normal(size=(2, S, Hkv, 8)), r.normal(size=(2, S, Hkv, 5))
    idx = np.broadcast_to(r.permutation(S), (2, T, Hkv, S)).copy()
    np.testing.assert_allclose(sparse_attention(q, k, v, idx), dense(q, k, v), atol=1e-12)


def test_padding_subset_and_sink(rng):
    q, k, v = rng.normal(size=(1, 2, 4, 8)), rng.normal(size=(1, 9, 2, 8)), rng.normal(size=(1, 9, 2, 3))
    sel = np.array([7, 2, 5])
    idx = np.full((1, 2, 2, 5), -1)
    idx[..., :3] = sel
    o = sparse_attention(q, k, v, idx)
    np.testing.assert_allclose(o, dense(q, k[:, sel], v[:, sel]), atol=1e-12)
    sink = np.array([0.5, -1.0, 2.0, 0.0])
    np.testing.assert_allclose(sparse_attention(q, k, v, idx, sink=sink), dense(q, k[:, sel], v[:, sel], sink), atol=1e-12)
    empty = np.full((1, 2, 2, 3), -1)
    assert np.all(sparse_attention(q, k, v, empty) == 0)


def test_topk_ties_and_k_large():
    s = np.array([[1.0, 3.0, 3.0, -np.inf, 2.0]])
    np.testing.assert_array_equal(topk_indices(s, 2), [[1, 2]])
    np.testing.assert_array_equal(topk_indices(s, 7), [[1, 2, 4, 0, -1, -1, -1]])


@pytest.mark.parametrize("kw, msg", [
    (dict(idx=np.zeros((1, 2, 2, 3), dtype=float)), "integer"),
    (dict(idx=np.full((1, 2, 2, 3), 9)), "idx entries"),
    (dict(idx=np.zeros((1, 2, 1, 3), dtype=int)), "idx must have shape"),
    (dict(idx=np.zeros((1, 2, 2, 3), dtype=int)), "repeat"),
    (dict(k=np.zeros((1, 9, 3, 8))), "multiple"),
])
def test_bad_inputs(rng, kw, msg):
    args = dict(q=rng.normal(size=(1, 2, 4, 8)), k=rng.normal(size=(1, 9, 2, 8)), v=rng.normal(size=(1, 9, 2, 3)),
                idx=np.zeros((1, 2, 2, 1), dtype=int))
    args.update(kw)
    if "k" in kw:
        args["v"] = np.zeros((1, 9, 3, 3))
        args["idx"] = np.zeros((1, 2, 3, 1), dtype=int)
    with pytest.raises(ValueError, match=msg):
        sparse_attention(**args)


def test_topk_bad():
    with pytest.raises(ValueError, match="k must be"):
        topk_indices(np.zeros(3), 0)
    with pytest.raises(ValueError, match="NaN"):
        topk_indices(np.array([np.nan]), 1)


def test_softmax_with_sink():
    from hybrid_lab.core.blocks import softmax_with_sink
    z = np.array([[0.0, np.log(3.0), -np.inf], [-np.inf, -np.inf, -np.inf]])
    np.testing.assert_allclose(softmax_with_sink(z), [[0.25, 0.75, 0.0], [0, 0, 0]])
    np.testing.assert_allclose(softmax_with_sink(z, np.zeros((2, 1)))[0], [0.2, 0.6, 0.0])


def test_empty_index_list_outputs_zeros(rng):
    """K = 0 (nothing listed) gives 0 like a fully padded row and like the kernel (it used to raise
    "zero-size array to reduction" here)."""
    q, k, v = rng.normal(size=(2, 3, 4, 8)), rng.normal(size=(2, 9, 2, 8)), rng.normal(size=(2, 9, 2, 5))
    o = sparse_attention(q, k, v, np.zeros((2, 3, 2, 0), np.int64), sink=np.zeros(4))
    assert o.shape == (2, 3, 4, 5) and o.dtype == np.float64 and (o == 0).all()


@pytest.mark.parametrize("kw, arg", [
    (dict(sink=np.array([0.0, np.nan, 1.0, 0.0])), "sink"), (dict(sink=np.full(4, np.inf)), "sink"),
    (dict(k=np.full((1, 9, 2, 8), np.nan)), "k"), (dict(v=np.full((1, 9, 2, 3), -np.inf)), "v"),
    (dict(scale=np.nan), "scale"), (dict(scale=-0.5), "scale"),
])
def test_nan_and_inf_are_refused(rng, kw, arg):
    """A NaN sink used to return an unnormalised output; NaN in k, v or scale used to pass through."""
    args = dict(q=rng.normal(size=(1, 2, 4, 8)), k=rng.normal(size=(1, 9, 2, 8)), v=rng.normal(size=(1, 9, 2, 3)),
                idx=np.array([[[[0, 4], [2, -1]], [[1, 3], [5, 6]]]]))
    args.update(kw)
    with pytest.raises(ValueError, match=rf"\b{arg}\b"):
        sparse_attention(**args)
