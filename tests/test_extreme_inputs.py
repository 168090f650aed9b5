"""Inputs at the edges, each once by hand: huge Δ, memory layouts, float16, overflow, duplicates, degenerate rows,
zero sizes, sizes near 2**62, ``None`` for arrays. The property tests (test_bad_input_property.py, the generators
at its end, and test_cross_backend_property.py) draw more of each kind; these are the cases that first showed
each kind returning a wrong number or raising something other than a ValueError.
"""
from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest

import hybrid_lab
from hybrid_lab.models import attention_stats, hysparse, hysparse2, infllm
from hybrid_lab.models.lightning_indexer import log_softmax
from hybrid_lab.ops import block_sparse, fa_decode, lightning_indexer, registry, sparse_attention, ssm
from hybrid_lab.serving import eviction, offload_sim, pd_timeline
from hybrid_lab.serving.radix_cache import marconi_admission

HUGE = 2 ** 62
with contextlib.suppress(ImportError):      # at collection, not in a test: without a GPU it sets TRITON_INTERPRET,
    import gpu_track  # noqa: F401           # an environment variable no test may change (conftest)


def rel(a, b):
    return float(np.abs(np.asarray(a, np.float64) - b).max() / max(np.abs(b).max(), 1e-300))


def _m1(r, L=20):
    return dict(x=r.standard_normal((1, L, 3)), dt=r.uniform(0.1, 1.0, (1, L, 3)), A=-r.uniform(0.5, 2.0, (3, 2)),
                B=r.standard_normal((1, L, 2)), C=r.standard_normal((1, L, 2)))


def _m2(r, L=20):
    return dict(x=r.standard_normal((1, L, 2, 2)), dt=r.uniform(0.1, 1.0, (1, L, 2)), A=-np.array([1.0, 0.5]),
                B=r.standard_normal((1, L, 3)), C=r.standard_normal((1, L, 3)))


# ------------------------------------------------------------------------------------ large Δ: a stable segment sum
@pytest.mark.parametrize("spike", [1e8, 1e12, 1e16, 1e30, 1e300])
def test_chunked_scans_exact_for_a_huge_step(rng, spike):
    """One Δ spiked: the chunked scans used to lose 1.7e-4 at 1e12 and everything at 1e16 (c_t - c_s cancelled)."""
    a = _m1(rng)
    a["dt"][0, 3] = spike
    y0, h0 = ssm.ssm_scan(**a)
    for fn in (ssm.ssm_chunked, ssm.selective_scan):
        y, h = fn(**a, chunk_size=8)
        assert rel(y, y0) < 1e-12 and rel(h, h0) < 1e-12, fn.__name__
    b = _m2(rng)
    b["dt"][0, 3] = spike
    y0, h0 = ssm.ssd_scan(**b)
    y, h = ssm.ssd_chunked(**b, chunk_size=8)
    assert rel(y, y0) < 1e-12 and rel(h, h0) < 1e-12


@pytest.mark.parametrize("spike", [1e12, 1e16, 1e300])
def test_chunked_scans_exact_for_a_huge_step_on_the_triton_backend(rng, spike):
    """The same spike through the registry's Triton backend (ssd_chunked lost 8.7e-5 at 1e12 there too)."""
    _torch()
    a = _m1(rng)
    a["dt"][0, 3] = spike
    y0, h0 = ssm.ssm_scan(**a)
    b = _m2(rng)
    b["dt"][0, 3] = spike
    y2, h2 = ssm.ssd_scan(**b)
    with hybrid_lab.use_backend("triton"):
        y, h = ssm.selective_scan(**a, chunk_size=8)
        assert rel(y, y0) < 1e-12 and rel(h, h0) < 1e-12
        y, h = ssm.ssd_chunked(**b, chunk_size=8)
        assert rel(y, y2) < 1e-12 and rel(h, h2) < 1e-12


# ------------------------------------------------------------------------------------------------ precision
@pytest.mark.parametrize("backend", ["numpy", "triton"])
def test_float16_inputs_compute_in_float32(rng, backend):
    """float16 operands are widened before any arithmetic (contracts.float_dtype): the result equals the op on
    the same values given as float32, to float32 rounding (it was 4e-4 to 1.5e-3 off), on both backends."""
    if backend == "triton":
        _torch()
    with hybrid_lab.use_backend(backend):
        _float16_is_float32(rng)


def _float16_is_float32(rng):
    q, k, v = (rng.standard_normal(s).astype(np.float16) for s in ((1, 3, 2, 8), (1, 40, 1, 8), (1, 40, 1, 8)))
    idx = np.tile(np.arange(40)[None, None, None], (1, 3, 1, 1))
    o16 = sparse_attention.sparse_attention(q, k, v, idx)
    o32 = sparse_attention.sparse_attention(*(a.astype(np.float32) for a in (q, k, v)), idx)
    assert o16.dtype == np.float32 and np.array_equal(o16, o32)
    o, i = fa_decode.fa_decode_topk(q[:, 0], k, v, 5, 2)
    o_, i_ = fa_decode.fa_decode_topk(q[:, 0].astype(np.float32), k.astype(np.float32), v.astype(np.float32), 5, 2)
    assert np.array_equal(i, i_) and np.array_equal(o, o_)
    a = {n: x.astype(np.float16) for n, x in _m1(rng).items()}
    y16, _ = ssm.selective_scan(**a)
    y32, _ = ssm.selective_scan(**{n: x.astype(np.float32) for n, x in a.items()})
    assert y16.dtype == np.float32 and np.array_equal(y16, y32)


def test_integer_operands_compute_in_float64(rng):
    """Integer arrays where floats belong are computed (and returned) in float64 on both backends' contract."""
    q = rng.integers(-2, 3, (1, 2, 1, 4))
    k = rng.integers(-2, 3, (1, 5, 1, 4))
    idx = np.array([[[[0, 1, 2]], [[2, 3, 4]]]])
    o = sparse_attention.sparse_attention(q, k, k, idx, sink=np.array([1]))
    ref = sparse_attention.sparse_attention(q.astype(float), k.astype(float), k.astype(float), idx,
                                            sink=np.array([1.0]))
    assert o.dtype == np.float64 and np.array_equal(o, ref)
    # the contract returns the sink as float64, so the Triton backend accepts an integer sink too
    assert sparse_attention.sparse_attention.check(q, k, k, idx, None, np.array([1]))[5].dtype == np.float64


# ------------------------------------------------------------------------------------------------ duplicates
def test_with_forced_window_refuses_a_repeated_position():
    with pytest.raises(ValueError, match="top must not repeat a position"):
        fa_decode.with_forced_window([[[0, 0]]], [5], 2)
    assert fa_decode.with_forced_window([[[0, -1, -1]]], [5], 2).tolist() == [[[4, 5, 0, -1, -1]]]


def test_captured_mass_refuses_a_repeated_position_and_an_empty_row():
    """It returned 1.5 (the position counted three times) and NaN (0/0)."""
    with pytest.raises(ValueError, match="idx must not list a position twice"):
        hysparse2.captured_mass([[.5, .3, .2]], [[0, 0, 0]])
    with pytest.raises(ValueError, match="score must have some mass in every row"):
        hysparse2.captured_mass([[0.0, 0.0, 0.0]], [[0, -1, -1]])
    assert hysparse2.captured_mass([[.5, .3, .2]], [[0, 2, -1]]).tolist() == pytest.approx([0.7])


# ------------------------------------------------------------------------------------------------ overflow
def test_blocks_to_tokens_does_not_wrap_a_huge_block_id():
    """Block 2**62 of 4 tokens starts at 2**64, which wrapped to token 0: [0, 1, 2, 3, ...] for q_pos 10."""
    assert (hysparse.blocks_to_tokens([[[HUGE, -1]]], 4, [10]) == -1).all()
    assert hysparse.blocks_to_tokens([[[HUGE, 2]]], 4, [10]).tolist() == [[[-1] * 4 + [8, 9, 10, -1]]]
    big = np.iinfo(np.int64).max
    assert (hysparse.blocks_to_tokens([[[big - 1, 0]]], 2, [big - 1]) >= -1).all()


# ------------------------------------------------------------------------------------------------ degenerate rows
def test_log_softmax_of_an_all_masked_row_is_all_minus_inf():
    out = log_softmax([[-np.inf, -np.inf], [0.0, 0.0]])
    assert np.isneginf(out[0]).all() and np.allclose(out[1], np.log(0.5))
    assert log_softmax(np.zeros((2, 0))).shape == (2, 0)


@pytest.mark.parametrize("axis", [2.0, "0", None, 2, -3, True])
def test_log_softmax_axis_must_be_an_integer_axis(axis):
    with pytest.raises(ValueError, match="axis"):
        log_softmax(np.zeros((2, 3)), axis=axis)


# ------------------------------------------------------------------------------------------------ unchecked inputs
@pytest.mark.parametrize("args, msg", [
    ((10, 5, 4, True, 0, False), "n_tokens"),           # the sequence is shorter than its input
    ((10, math.nan, 4, True, 0, False), "n_tokens"),
    ((10, 15, 11, False, 0, False), "m "),              # more matched than the input holds
    ((10, 15, 4.0, True, 0, False), "m "),
    ((10, 15, 4, 1, 0, False), "inside_edge"),
    ((10, 15, 4, True, 2, False), "inside_edge"),       # inside an edge there is no node with children
    ((10, 15, 0, True, 0, False), "inside_edge"),       # the root is a node, not an edge
    ((10, 15, 4, False, -1, False), "node_children"),
    ((10, 15, 4, False, 1, None), "node_has_state"),
    ((-1, 15, 0, False, 1, False), "n_input"),
])
def test_marconi_admission_refuses_a_walk_no_tree_gives(args, msg):
    with pytest.raises(ValueError, match=msg):
        marconi_admission(*args)


def test_marconi_admission_documented_results():
    assert marconi_admission(10, 15, 6, True, 0, False) == [6, 15]
    assert marconi_admission(np.int64(10), 10, 10, np.bool_(True), 0, False) == [10]


def test_blocks_from_compressed_refuses_a_query_past_the_last_token():
    S = 100                                             # 2 blocks of 64: the blocks end at 128, the tokens at 100
    sc = np.zeros((1, 1, 1, infllm.compressed_spans(5)[0].size))
    with pytest.raises(ValueError, match="q_pos"):
        infllm.blocks_from_compressed(sc, S, [S], 1, n_init=0, n_local=1)
    idx, _ = infllm.blocks_from_compressed(sc, S, [S - 1], 1, n_init=0, n_local=1)
    assert idx.tolist() == [[[[0, 1]]]]


@pytest.mark.parametrize("variant", ["paper", "lecture"])
def test_eviction_scores_stay_finite_for_huge_clocks(variant):
    saved, nbytes = np.array([1.0, 2.0, 3.0]), np.ones(3)
    for t in ([1e300, 0.0, 5.0], [1e308, -1e308, 5.0], [2.0 ** 60, 2.0 ** 60 - 2 ** 9, 0.0]):
        s = eviction.eviction_scores(np.array(t), saved, nbytes, 0.5, variant=variant)
        assert np.isfinite(s).all() and s.min() >= 0 and s.max() <= 1.5, (t, s)
        assert s[0] == s.max() if variant == "paper" else True      # the newest node is the most recent


@pytest.mark.parametrize("backend", ["numpy", "triton"])
def test_fa_decode_topk_refuses_an_empty_value_width(rng, backend):
    """dv = 0: the Triton backend used to return other indices than numpy; both refuse now."""
    if backend == "triton":
        _torch()
    with hybrid_lab.use_backend(backend), pytest.raises(ValueError, match="dv >= 1"):
        fa_decode.fa_decode_topk(rng.standard_normal((1, 2, 4)), rng.standard_normal((1, 6, 1, 4)),
                                 np.zeros((1, 6, 1, 0)), 2, 1)


# ------------------------------------------------------------------------------------------------ zero sizes
def _attn(rng, B=1, T=2, S=6, d=4, dv=3):
    return (rng.standard_normal((B, T, 2, d)), rng.standard_normal((B, S, 1, d)), rng.standard_normal((B, S, 1, dv)))


@pytest.mark.parametrize("backend", ["numpy", "triton"])
@pytest.mark.parametrize("op", ["sparse", "block", "fa_decode", "fa_attention", "indexer", "indexer_fp8"])
def test_a_key_width_of_zero_is_refused(rng, op, backend):
    """d = 0 raised ZeroDivisionError (d ** -0.5) or IndexError on both backends."""
    if backend == "triton":
        _torch()
    q, k, v = _attn(rng, d=0)
    call = {"sparse": lambda: sparse_attention.sparse_attention(q, k, v, np.zeros((1, 2, 1, 1), int)),
            "block": lambda: block_sparse.block_sparse_attention(q, k, v, np.zeros((1, 2, 1, 1), int)),
            "fa_decode": lambda: fa_decode.fa_decode_topk(q[:, 0], k, v, 2, 1),
            "fa_attention": lambda: fa_decode.fa_attention(q[0], k[0], v[0], None),
            "indexer": lambda: lightning_indexer.lightning_indexer(q, np.ones(q.shape[:3]), k[:, :, 0], 2),
            "indexer_fp8": lambda: lightning_indexer.lightning_indexer_fp8(q, np.ones(q.shape[:3]), k[:, :, 0], 2)}[op]
    with hybrid_lab.use_backend(backend), pytest.raises(ValueError, match="width d|index width di"):
        call()


def test_empty_batches_and_empty_caches_give_the_documented_results(rng):
    q, k, v = _attn(rng, B=0)
    o, idx = fa_decode.fa_decode_topk(q[:, 0], k, v, 3, 1)
    assert o.shape == (0, 2, 3) and idx.shape == (0, 1, 3)
    q, k, v = _attn(rng, S=0)
    o = sparse_attention.sparse_attention(q, k, v, -np.ones((1, 2, 1, 3), int))      # S = 0: every slot is -1
    assert o.shape == (1, 2, 2, 3) and not o.any()
    q, k, v = _attn(rng)
    assert not block_sparse.block_sparse_attention(q, k, v, np.zeros((1, 2, 1, 0), int)).any()


# ------------------------------------------------------------------------------------------------ sizes near 2**62
def test_huge_sizes_are_refused_by_name(rng):
    q, k, v = _attn(rng)
    with pytest.raises(ValueError, match="topk"):
        fa_decode.fa_decode_topk(q[:, 0], k, v, HUGE, 1)
    with pytest.raises(ValueError, match="topk"):
        lightning_indexer.lightning_indexer(q, q[..., 0], k[:, :, 0], HUGE)
    with pytest.raises(ValueError, match="k asks"):
        sparse_attention.topk_indices(np.zeros((2, 5)), HUGE)
    with pytest.raises(ValueError, match="window"):
        fa_decode.forced_window_select(np.zeros((1, 1, 5)), None, HUGE, 1)
    # a huge block or window that fits in no output is just "everything in one block" / "nothing outside it"
    full = block_sparse.block_sparse_attention(q, k, v, np.zeros((1, 2, 1, 1), int), block_size=HUGE)
    assert np.allclose(full, block_sparse.block_sparse_attention(q, k, v, np.zeros((1, 2, 1, 1), int), 6))
    assert (fa_decode.fa_decode_topk(q[:, 0], k, v, 2, HUGE)[1] == -1).all()


# ------------------------------------------------------------------------------------------------ None for arrays
def test_none_where_an_array_belongs_is_refused_by_name(rng):
    q, k, v = _attn(rng)
    with pytest.raises(ValueError, match="v"):
        attention_stats.dense_attention(q, k, None)
    with pytest.raises(ValueError, match="m must be a ModelSpec"):
        offload_sim.layer_times(offload_sim.H100, None, 8, 4096)
    with pytest.raises(ValueError, match="after"):
        pd_timeline.TaskDAG().add("t", 1.0, after=None)
    with pytest.raises(ValueError, match="after"):
        pd_timeline.TaskDAG().add("t", 1.0, after=[["a"]])


# ------------------------------------------------------------------------------------------------ backend names
@pytest.mark.parametrize("name", ["TRITON", " Numpy ", "numpy"])
def test_backend_names_ignore_case(name):
    with hybrid_lab.use_backend(name):
        assert registry.get_backend() == name.strip().lower()


@pytest.mark.parametrize("name", ["cuda", 3, None, ""])
def test_unknown_backends_are_refused(name):
    with pytest.raises(ValueError, match="backend"):
        hybrid_lab.use_backend(name)


# ------------------------------------------------------------------------------------------------ Triton wrappers
def _torch():
    torch = pytest.importorskip("torch")
    import gpu_track  # noqa: F401  (before triton: sets TRITON_INTERPRET without a GPU)
    pytest.importorskip("triton")
    return torch


def _scan_tensors(torch, rng):
    a = _m1(rng, L=12)
    return {n: torch.from_numpy(x) for n, x in a.items()}


def test_unfused_scan_is_layout_independent(rng):
    """A Fortran-ordered dt or A used to give relative errors of 3.29 / 0.66 (a_bar kept dt's strides)."""
    torch = _torch()
    from gpu_track import selective_scan as ss
    a = _scan_tensors(torch, rng)
    y0, h0 = ss.selective_scan_unfused(*a.values())
    for name in ("dt", "A", "x", "B"):
        b = dict(a)
        b[name] = torch.from_numpy(np.asfortranarray(a[name].numpy()))
        assert not b[name].is_contiguous() or a[name].ndim == 1
        y, h = ss.selective_scan_unfused(*b.values())
        assert torch.equal(y, y0) and torch.equal(h, h0), name
    for fn in (ss.selective_scan, ss.selective_scan_unfused):
        b = dict(a, dt=a["dt"].repeat_interleave(2, -1)[..., ::2])          # a strided view
        assert torch.allclose(fn(*b.values())[0], y0, rtol=1e-12, atol=1e-12)


def test_wrapper_sizes_are_python_or_numpy_integers(rng):
    """np.int32 sizes used to pass the check and fail inside the interpreter; one-element arrays are refused."""
    torch = _torch()
    from gpu_track import selective_scan as ss
    from gpu_track import ssd
    a = _scan_tensors(torch, rng)
    y0, _ = ss.selective_scan(*a.values())
    y, _ = ss.selective_scan(*a.values(), chunk=np.int32(16), block_d=np.int64(16), lanes_d=np.int32(8))
    assert torch.equal(y, y0)
    for bad in (np.array([16]), 16.0, True, None):
        with pytest.raises(ValueError, match="chunk"):
            ss.selective_scan(*a.values(), chunk=bad)
    b = {n: torch.from_numpy(x) for n, x in _m2(rng).items()}
    assert torch.equal(ssd.ssd_chunked(*b.values(), chunk=np.int32(16))[0], ssd.ssd_chunked(*b.values(), chunk=16)[0])


def test_ssd_parallel_form_refuses_a_chunk_its_int32_tile_offsets_cannot_address():
    """The parallel form addresses a chunk's rows of x (Q·H·P) and of B, C (Q·N) with int32 offsets from an int64
    base: one element past 2^31 - 1 is refused, naming the argument, before anything is launched."""
    torch = _torch()
    from gpu_track import ssd

    def args(HP, N):
        return (torch.zeros(1, 1, 1, HP), torch.zeros(1, 1, 1), torch.zeros(1), torch.zeros(1, 1, N),
                torch.zeros(1, 1, N))
    with pytest.raises(ValueError, match=r"^x: one chunk's rows of x \(Q·H·P\) has 2147483648 elements"):
        ssd.ssd_chunked(*args(2 ** 24, 4), chunk=128, two_pass=True)
    with pytest.raises(ValueError, match=r"^B: one chunk's rows of B and C \(Q·N\) has 2147483648 elements"):
        ssd.check_ssd_args(*args(1, 2 ** 24), None, None, 128, 64, True, 64)


def test_ssd_wrapper_keeps_float64_b_and_c_with_a_float16_x(rng):
    """float16 x with float64 B, C used to round B, C to float16 (5e-4); the dots now take the widest dtype."""
    torch = _torch()
    from gpu_track import ssd
    b = _m2(rng)
    x16 = torch.from_numpy(b["x"]).to(torch.float16)
    args = dict({n: torch.from_numpy(v) for n, v in b.items()}, x=x16)
    y, _ = ssd.ssd_chunked(*args.values(), chunk=16)
    y_ref, _ = ssm.ssd_scan(**dict(b, x=x16.double().numpy()))
    assert y.dtype == torch.float64 and rel(y.numpy(), y_ref) < 1e-12


def test_ssd_wrapper_exact_for_a_huge_step(rng):
    torch = _torch()
    from gpu_track import ssd
    b = _m2(rng, L=40)
    b["dt"][0, 3] = b["dt"][0, 20, 0] = 1e16
    y0, h0 = ssm.ssd_scan(**b)
    for two_pass in (False, True):
        y, h = ssd.ssd_chunked(*(torch.from_numpy(v) for v in b.values()), chunk=16, two_pass=two_pass,
                               block_p=16, block_n_states=16)
        assert rel(y.numpy(), y0) < 1e-12 and rel(h.numpy(), h0) < 1e-12, two_pass


def test_triton_backend_edge_cases_match_numpy(rng):
    """B = 0 (ZeroDivisionError before), no block listed (RuntimeError before), an integer sink (refused before)."""
    _torch()
    q, k, v = _attn(rng, B=0)
    with hybrid_lab.use_backend("triton"):
        o, idx = fa_decode.fa_decode_topk(q[:, 0], k, v, 3, 1)
        assert o.shape == (0, 2, 3) and idx.shape == (0, 1, 3)
        q, k, v = _attn(rng)
        assert not block_sparse.block_sparse_attention(q, k, v, np.zeros((1, 2, 1, 0), int)).any()
        o = sparse_attention.sparse_attention(q, k, v, np.array([[[[0, 1]], [[2, -1]]]]), sink=np.array([1, 0]))
        q0, k0, v0 = _attn(rng, S=0)                                    # S = 0, every slot -1 (IndexError before)
        o0 = sparse_attention.sparse_attention(q0, k0, v0, -np.ones((1, 2, 1, 3), int))
        assert o0.shape == (1, 2, 2, 3) and not o0.any()
    ref = sparse_attention.sparse_attention(q, k, v, np.array([[[[0, 1]], [[2, -1]]]]), sink=np.array([1.0, 0.0]))
    assert rel(o, ref) < 1e-12


_ATTN_WRAPPERS = ["sparse_attention", "block_sparse_attention", "fa_decode", "fa_decode_topk"]
_INDEXERS = ["indexer_scores", "lightning_indexer", "lightning_indexer_fp8"]          # no value width


@pytest.mark.parametrize("wrapper, width", [(w, x) for w in _ATTN_WRAPPERS for x in ("d", "dv")]
                         + [(w, "d") for w in _INDEXERS])
def test_triton_wrappers_refuse_an_empty_key_or_value_width(rng, wrapper, width):
    """d = 0 raised ZeroDivisionError in the attention wrappers; the indexer's di = 0 returned all-zero scores and
    an arbitrary ranking (its twin refuses it)."""
    torch = _torch()
    from gpu_track import block_sparse as gbs, fa_decode_topk as gfa, lightning_indexer as gli, sparse_attention as gsa
    q, k, v = (torch.from_numpy(a) for a in _attn(rng, d=0 if width == "d" else 4, dv=0 if width == "dv" else 3))
    idx = torch.zeros((1, 2, 1, 1), dtype=torch.int64)
    w = torch.ones(q.shape[:3], dtype=q.dtype)
    f32 = (q.float(), w.float(), k[:, :, 0].float())
    call = {"sparse_attention": lambda: gsa.sparse_attention(q, k, v, idx),
            "block_sparse_attention": lambda: gbs.block_sparse_attention(q, k, v, idx, 4),
            "fa_decode": lambda: gfa.fa_decode(q[:, 0], k, v, 1),
            "fa_decode_topk": lambda: gfa.fa_decode_topk(q[:, 0], k, v, 2, 1),
            "indexer_scores": lambda: gli.indexer_scores(q, w, k[:, :, 0]),
            "lightning_indexer": lambda: gli.lightning_indexer(q, w, k[:, :, 0], 2),
            "lightning_indexer_fp8": lambda: gli.lightning_indexer_fp8(*f32, 2)}[wrapper]
    with pytest.raises(ValueError, match=r"^q"):
        call()


def test_triton_wrappers_refuse_a_repeated_position(rng):
    """A repeat within an index set was read twice (it weighed twice in the softmax); the ops' contracts refused
    it, the torch wrappers did not."""
    torch = _torch()
    from gpu_track import block_sparse as gbs, sparse_attention as gsa
    q, k, v = (torch.from_numpy(a) for a in _attn(rng))
    with pytest.raises(ValueError, match=r"idx must not repeat a position within one row, got 3 twice in row "
                                         r"\(0, 1, 0\)"):
        gsa.sparse_attention(q, k, v, torch.tensor([[[[0, 1, -1]], [[3, -1, 3]]]]))
    with pytest.raises(ValueError, match="block_idx must not repeat a block"):
        gbs.block_sparse_attention(q, k, v, torch.tensor([[[[0, 0]], [[1, -1]]]]), 4)
    o = gsa.sparse_attention(q, k, v, torch.tensor([[[[0, -1, -1]], [[3, -1, 1]]]]))      # -1 pads may repeat
    ref = sparse_attention.sparse_attention(*(a.numpy() for a in (q, k, v)), np.array([[[[0, -1, -1]], [[3, -1, 1]]]]))
    assert rel(o.numpy(), ref) < 1e-12


def test_backend_environment_variable_ignores_case():
    """HYBRID_LAB_BACKEND=TRITON and use_backend("TRITON") follow one rule (registry._check)."""
    import os
    import subprocess
    import sys
    code = "from hybrid_lab.ops import registry; print(registry.get_backend())"
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, HYBRID_LAB_BACKEND=" TRITON "),
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "triton"


# ------------------------------------------------------------------------------ hybrid_lab.trained and widgets
def _dense_stack():
    """A dense Stack (two full-attention layers, the tasks' vocabulary) as the trained dsa / sparda model."""
    from hybrid_lab.models.stack import Stack, StackConfig
    return Stack(StackConfig(vocab=256, d_model=8, layers=("attn", "attn"), n_heads_q=2, n_heads_kv=1, d_qk=4, d_v=4,
                             d_ff=8, window=2, rope_dims_attn=2, rope_dims_swa=2, d_inner=8, d_state=4, head_dim=4,
                             d_conv=2, chunk_size=2))


def _sparda_selections(model, x, k):
    from hybrid_lab.trained import sparda
    heads = {f"W{i}": np.full((8, 1, 4), 0.1 * (i + 1)) for i in range(2)}
    return {"infllm": lambda: sparda.block_selection(model, 1, x, "infllm", k),
            "oracle": lambda: sparda.block_selection(model, 1, x, "oracle", k),
            "fine teacher": lambda: sparda.block_selection(model, 1, x, "fine teacher", k),
            "teacher_selection": lambda: sparda.teacher_selection(model, 1, x, k, "coarse"),
            "forecast_selection": lambda: sparda.forecast_selection(model, 1, x, x, heads, k)}


@pytest.mark.parametrize("k", [3, HUGE])
def test_sparda_selectors_refuse_k_past_the_candidate_blocks_by_name(rng, k):
    """T = 32 tokens are 4 blocks of 8: init + own block leave 2 candidates. k = 3 or 2**62 used to be refused by
    infllm's select_blocks naming its own ``topk``, an argument none of these functions has."""
    model, x = _dense_stack(), rng.standard_normal((32, 8))
    for name, fn in _sparda_selections(model, x, k).items():
        with pytest.raises(ValueError, match=r"^k must be <= the 2 candidate blocks of T=32 tokens"):
            fn()
    for name, fn in _sparda_selections(model, x, 2).items():       # k = 2 (every candidate) is valid
        assert fn().shape == (32, 4), name


def test_sparda_forecast_selection_takes_x_as_a_list(rng):
    """x was read as ``x.shape`` before it became an array: a nested list raised AttributeError."""
    from hybrid_lab.trained import sparda
    model, x = _dense_stack(), rng.standard_normal((32, 8))
    heads = {f"W{i}": np.full((8, 1, 4), 0.1 * (i + 1)) for i in range(2)}
    want = sparda.forecast_selection(model, 1, x, x, heads, 1)
    np.testing.assert_array_equal(sparda.forecast_selection(model, 1, x.tolist(), x.tolist(), heads, 1), want)


def test_sparda_blocks_to_positions_reads_a_repeated_block_once():
    """A block listed twice in a row (the init block that is also the query's own) used to give its positions twice
    (sparse attention refuses a repeated position); now once, the repeat's slots -1, as blocks_read counts it."""
    from hybrid_lab.trained import sparda
    T = 24
    t = np.arange(T)
    idx = np.stack([np.zeros(T, np.int64), t // 8, np.full(T, 2)], 1)     # rows 0-7: block 0 twice; 16-23: block 2
    pos = sparda.blocks_to_positions(idx, T)
    for q in range(T):
        got = pos[q, 0][pos[q, 0] >= 0].tolist()
        assert len(got) == len(set(got)), q
        assert set(got) == {p for b in set(idx[q].tolist()) for p in range(8 * b, 8 * b + 8) if p <= q}, q
    once = idx.copy()
    once[:8, 1] = once[16:, 2] = -1                                         # the same selections without the repeat
    np.testing.assert_array_equal(pos, sparda.blocks_to_positions(once, T))


@pytest.mark.parametrize("fn", ["mqar", "make_task"])
def test_a_one_element_n_pairs_is_the_mixture_of_that_one_count(fn):
    """n_pairs is an int or a list of counts each sequence draws from (documented): a one-element array is the
    mixture of one count, the same batch as the plain int (trained/tasks.py is a hashed training source: allowed, not
    refused, in the property table's ROUND2_ALLOW)."""
    from hybrid_lab.trained import tasks
    call = (lambda n: tasks.mqar(2, 32, n, 0)) if fn == "mqar" else (lambda n: tasks.make_task("mqar", 2, 32, 0,
                                                                                                n_pairs=n))
    a, b = call(np.array([4])), call(4)
    for f in ("tokens", "targets", "kind", "dist"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))


def test_reuse_options_for_a_huge_old_request_lists_no_chunks():
    """reuse_options listed every chunk boundary up to old_len (MemoryError at 2**62); the last boundary at or before
    ``shared`` and old_len give the same reuse, for every size."""
    from hybrid_lab.models.hybrid import reusable_prefix
    from hybrid_lab.widgets import basics
    for old_len in range(0, 40):
        for shared in range(old_len + 1):
            for cs in range(1, 42):
                listed = reusable_prefix(shared, list(range(cs, old_len + 1, cs)) + [old_len])
                assert basics.reuse_options(shared, old_len, cs)[f"chunk boundaries ({cs})"] == listed
    assert basics.reuse_options(40, HUGE, 16) == {"final state only": 0, "chunk boundaries (16)": 32,
                                                  "two-pass at the branch": 40, "pure Transformer (KV only)": 40}
    assert basics.reuse_options(HUGE - 1, HUGE, 16)["chunk boundaries (16)"] == HUGE - 16
