"""Every Triton kernel against its numpy twin (fresh random inputs, ragged sizes, causal edges, -1 padding).

Without a GPU the kernels run in Triton's interpreter (``gpu_track`` sets TRITON_INTERPRET=1 before defining
them), so shapes stay small. On a GPU the same tests run natively: ``pytest -m gpu tests/test_gpu_kernels.py``;
bf16 cases run only there (the interpreter's bf16 arithmetic is not trustworthy).

Outputs are poisoned (NaN-filled before each launch, ``gpu_track._common.POISON``): an element a kernel forgets
to write is NaN and fails the comparison. Tolerances, as max |kernel - twin| / max |twin| against the twin run in
float64 on the same (rounded) inputs: fp64 1e-10, fp32 2e-5, fp16 4e-3, bf16 3e-2 (the half types also round the
attention probabilities before the P·V product, as FlashAttention does).
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
gpu_track = pytest.importorskip("gpu_track")   # first: it sets TRITON_INTERPRET before triton is imported
pytest.importorskip("triton")

from gpu_track import _common  # noqa: E402
from gpu_track import block_sparse, fa_decode_topk, lightning_indexer, numpy_api, selective_scan  # noqa: E402
from gpu_track import sparse_attention, ssd  # noqa: E402
from hybrid_lab.models import hysparse2, infllm
from hybrid_lab.ops import ssm  # noqa: E402
from hybrid_lab.models import lightning_indexer as li_twin  # noqa: E402
from hybrid_lab.ops import sparse_attention as sa_twin  # noqa: E402

pytestmark = pytest.mark.gpu
ON_GPU = not gpu_track.INTERPRET
DEV = _common.device()
TOL = {torch.float64: 1e-10, torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}
DTYPES = [torch.float64, torch.float32, torch.float16,
          pytest.param(torch.bfloat16, marks=pytest.mark.skipif(not ON_GPU, reason="bf16 only on a GPU"))]


@pytest.fixture(autouse=True)
def poison(monkeypatch):
    monkeypatch.setattr(_common, "POISON", True)


def as_t(a, dtype):
    return torch.from_numpy(np.ascontiguousarray(a)).to(DEV).to(dtype)


def rounded(a, dtype):
    """The input as the kernel sees it (rounded to dtype), back in float64 for the twin."""
    return torch.from_numpy(np.asarray(a)).to(dtype).double().numpy()


def rel_err(got, ref):
    got = got.detach().double().cpu().numpy() if isinstance(got, torch.Tensor) else np.asarray(got, float)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    assert not np.isnan(got).any(), "unwritten (poisoned) or NaN output"
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


# --------------------------------------------------------------------------------------------- sparse attention
SA_CASES = [  # (B, T, Hq, Hkv, S, d, dv, K, pad)
    (2, 3, 4, 2, 37, 24, 20, 9, "some"),     # GQA, ragged d/dv/K, a partly padded and a fully padded row
    (1, 2, 3, 1, 19, 16, 16, 19, "none"),    # MQA, K = S (k >= length: every position)
    (1, 1, 2, 2, 70, 32, 48, 40, "tail"),    # K > BLOCK_K, -1 tail
]


@pytest.mark.parametrize("case", SA_CASES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_sink", [False, True])
def test_sparse_attention_matches_twin(case, dtype, with_sink):
    B, T, Hq, Hkv, S, d, dv, K, pad = case
    rng = np.random.default_rng(hash(case) % 2**32)
    q, k, v = (rng.standard_normal(s) for s in ((B, T, Hq, d), (B, S, Hkv, d), (B, S, Hkv, dv)))
    idx = np.stack([rng.permutation(S)[:K] for _ in range(B * T * Hkv)]).reshape(B, T, Hkv, K)
    if pad == "some":
        idx[0, 0, 0, 3:] = -1
        idx[-1, -1, -1, :] = -1
    elif pad == "tail":
        idx[..., K // 2:] = -1
    sink = rng.standard_normal(Hq) if with_sink else None
    out = sparse_attention.sparse_attention(as_t(q, dtype), as_t(k, dtype), as_t(v, dtype), torch.from_numpy(idx).to(DEV),
                                            sink=None if sink is None else as_t(sink, torch.float64))
    ref = sa_twin.sparse_attention.numpy_impl(rounded(q, dtype), rounded(k, dtype), rounded(v, dtype), idx, sink=sink)
    assert out.dtype == dtype
    assert rel_err(out, ref) < TOL[dtype]
    if pad == "some" and not with_sink:
        assert float(out[-1, -1, -(Hq // Hkv):].abs().max()) == 0.0   # an empty index set reads nothing: output 0


def test_sparse_attention_depends_on_the_index_set():
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((1, 1, 2, 16)), rng.standard_normal((1, 30, 1, 16)), rng.standard_normal((1, 30, 1, 16))
    a = numpy_api.sparse_attention(q, k, v, np.array([[[[0, 1, 2, -1]]]]))
    b = numpy_api.sparse_attention(q, k, v, np.array([[[[0, 1, 3, -1]]]]))
    assert np.abs(a - b).max() > 1e-3


# --------------------------------------------------------------------------------------------- lightning indexer
LI_CASES = [  # (B, T, Hi, di, S, topk, q_pos)
    (2, 3, 4, 24, 37, 5, None),              # decode-like tail queries, ragged di and S
    (1, 1, 3, 16, 70, 100, None),            # topk > S: all visible keys then -1
    (2, 20, 8, 32, 50, 7, "edges"),          # prefill: q_pos 0 (sees one key) ... beyond S
]


@pytest.mark.parametrize("case", LI_CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_lightning_indexer_exact_on_integer_inputs(case, dtype):
    """Small integers make q·k and the weighted sum exact in every dtype, so scores AND top-k order (ties to the
    smaller position) must match the twin exactly."""
    B, T, Hi, di, S, topk, qp = case
    rng = np.random.default_rng(hash(case) % 2**32)
    q = rng.integers(-2, 3, (B, T, Hi, di)).astype(float)
    w = rng.integers(0, 3, (B, T, Hi)).astype(float)
    k = rng.integers(-2, 3, (B, S, di)).astype(float)
    q_pos = None if qp is None else np.concatenate([[0, 1], rng.integers(0, S, T - 3), [S + 5]])
    scores, idx = lightning_indexer.lightning_indexer(as_t(q, dtype), as_t(w, dtype), as_t(k, dtype), topk,
                                                      None if q_pos is None else torch.from_numpy(q_pos).to(DEV))
    rs, ri = li_twin.lightning_indexer.numpy_impl(q, w, k, topk, q_pos)
    assert np.array_equal(scores.cpu().numpy(), rs)
    assert np.array_equal(idx.cpu().numpy(), ri)
    if q_pos is not None:
        assert (idx[:, 0, 1:].cpu().numpy() == -1).all()   # q_pos = 0 sees key 0 only


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_lightning_indexer_random_scores(dtype):
    rng = np.random.default_rng(3)
    q, w, k = rng.standard_normal((1, 4, 5, 20)), rng.random((1, 4, 5)), rng.standard_normal((1, 33, 20))
    scores = lightning_indexer.indexer_scores(as_t(q, dtype), as_t(w, dtype), as_t(k, dtype))
    rs, _ = li_twin.lightning_indexer.numpy_impl(q, w, k, 3)
    fin = np.isfinite(rs)
    assert np.array_equal(np.isfinite(scores.cpu().numpy()), fin)
    assert rel_err(scores.cpu().numpy()[fin], rs[fin]) < TOL[dtype]


# --------------------------------------------------------------------------------------------- fa_decode_topk
FA_CASES = [  # (B, Hq, Hkv, d, dv, S, topk, window)
    (2, 4, 2, 24, 20, 150, 5, 16),           # several splits, ragged S and dims
    (1, 2, 1, 16, 16, 40, 100, 8),           # topk > S - window: -1 padding
    (1, 3, 3, 16, 16, 10, 3, 20),            # window >= S: no candidate at all
]


def _same_selection(got, ref, score):
    """Equal up to near-ties: the selected positions' twin scores agree, and -1 padding matches."""
    assert np.array_equal(got == -1, ref == -1)
    sg = np.take_along_axis(score, np.where(got < 0, 0, got), -1)
    sr = np.take_along_axis(score, np.where(ref < 0, 0, ref), -1)
    assert np.allclose(np.where(got < 0, 0, sg), np.where(ref < 0, 0, sr), rtol=1e-3, atol=1e-6)


@pytest.mark.parametrize("case", FA_CASES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_sink", [False, True])
def test_fa_decode_topk_matches_twin(case, dtype, with_sink):
    B, Hq, Hkv, d, dv, S, topk, window = case
    rng = np.random.default_rng(hash(case) % 2**32)
    q, k, v = rng.standard_normal((B, Hq, d)), rng.standard_normal((B, S, Hkv, d)), rng.standard_normal((B, S, Hkv, dv))
    sink = rng.standard_normal(Hq) if with_sink else None
    o, score = fa_decode_topk.fa_decode(as_t(q, dtype), as_t(k, dtype), as_t(v, dtype), window,
                                        sink=None if sink is None else as_t(sink, torch.float64))
    idx = _common.topk_stable(score, topk).cpu().numpy()
    qr, kr, vr = rounded(q, dtype), rounded(k, dtype), rounded(v, dtype)
    ro, ri = hysparse2.fa_decode_topk.numpy_impl(qr, kr, vr, topk, window, sink=sink)
    assert rel_err(o, ro) < TOL[dtype]
    # the twin's ranking score, recomputed in float64: probability summed over the group's heads
    G = Hq // Hkv
    lg = np.einsum("bgjd,bsgd->bgjs", qr.reshape(B, Hkv, G, d), kr) * d ** -0.5
    m = lg.max(-1, keepdims=True) if sink is None else np.maximum(lg.max(-1, keepdims=True), sink.reshape(Hkv, G)[None, :, :, None])
    den = np.exp(lg - m).sum(-1, keepdims=True) + (0 if sink is None else np.exp(sink.reshape(Hkv, G)[None, :, :, None] - m))
    ref_score = (np.exp(lg - m) / den).sum(2)
    got_score = score.double().cpu().numpy()
    inside = np.arange(S) >= S - window
    assert np.isneginf(got_score[..., inside]).all()
    assert rel_err(got_score[..., ~inside], ref_score[..., ~inside]) < max(TOL[dtype], 1e-6) * 10 if (~inside).any() else True
    _same_selection(idx, ri, ref_score)
    if dtype in (torch.float64, torch.float32):
        assert np.array_equal(idx, ri)


# --------------------------------------------------------------------------------------------- Mamba-1 scan
SCAN_CASES = [  # (Bt, L, Dm, N, with_D, with_h0)
    (2, 37, 20, 6, True, True),              # L not a multiple of the chunk, Dm not of BLOCK_D, N not a power of 2
    (1, 16, 16, 16, False, False),           # exact tiles, no D, zero initial state
    (1, 3, 5, 1, True, False),               # shorter than one chunk, N = 1
]


def _scan_inputs(case, seed):
    Bt, L, Dm, N, with_D, with_h0 = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((Bt, L, Dm))
    dt = np.log1p(np.exp(rng.standard_normal((Bt, L, Dm))))
    A = -np.exp(rng.standard_normal((Dm, N)))
    B, C = rng.standard_normal((Bt, L, N)), rng.standard_normal((Bt, L, N))
    D = rng.standard_normal(Dm) if with_D else None
    h0 = rng.standard_normal((Bt, Dm, N)) if with_h0 else None
    return x, dt, A, B, C, D, h0


@pytest.mark.parametrize("case", SCAN_CASES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", ["chunked", "sequential"])
def test_selective_scan_matches_twin(case, dtype, variant):
    args = _scan_inputs(case, 11)
    targs = [None if a is None else as_t(a, dtype) for a in args]
    y, h = selective_scan.selective_scan(*targs, variant=variant)
    rargs = [None if a is None else rounded(a, dtype) for a in args]
    ry, rh = ssm.ssm_scan(*rargs)
    assert rel_err(y, ry) < TOL[dtype] * 5 and rel_err(h, rh) < TOL[dtype] * 5


@pytest.mark.parametrize("dtype", DTYPES)
def test_selective_scan_step_matches_twin(dtype):
    x, dt, A, B, C, D, h0 = _scan_inputs((3, 1, 20, 6, True, True), 5)
    step = (x[:, 0], dt[:, 0], A, B[:, 0], C[:, 0], D, h0)
    y, h = selective_scan.selective_scan_step(*[as_t(a, dtype) for a in step])
    ry, rh = ssm.selective_scan_step.numpy_impl(*[rounded(a, dtype) for a in step])
    assert rel_err(y, ry) < TOL[dtype] * 5 and rel_err(h, rh) < TOL[dtype] * 5


def test_prefill_then_steps_equals_longer_prefill():
    """The decode kernel continues the prefill kernel's state exactly (float64)."""
    x, dt, A, B, C, D, h0 = _scan_inputs((1, 20, 8, 4, True, True), 9)
    y_all, h_all = numpy_api.selective_scan(x, dt, A, B, C, D, h0)
    y, h = numpy_api.selective_scan(x[:, :17], dt[:, :17], A, B[:, :17], C[:, :17], D, h0)
    for t in range(17, 20):
        yt, h = numpy_api.selective_scan_step(x[:, t], dt[:, t], A, B[:, t], C[:, t], D, h)
        assert np.allclose(yt, y_all[:, t], atol=1e-12)
    assert np.allclose(h, h_all, atol=1e-12)


# --------------------------------------------------------------------------------------------- Mamba-2 SSD
SSD_CASES = [  # (Bt, L, H, P, N, chunk, with_D, with_h0)
    (2, 37, 3, 20, 12, 16, True, True),      # ragged L, P, N
    (1, 64, 2, 16, 16, 32, False, False),    # exact chunks
    (1, 5, 1, 8, 4, 16, True, False),        # shorter than a chunk
]


@pytest.mark.parametrize("case", SSD_CASES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("two_pass", [False, True])
def test_ssd_chunked_matches_twin(case, dtype, two_pass):
    Bt, L, H, P, N, chunk, with_D, with_h0 = case
    rng = np.random.default_rng(7)
    x = rng.standard_normal((Bt, L, H, P))
    dt = np.log1p(np.exp(rng.standard_normal((Bt, L, H))))
    A = -np.exp(rng.standard_normal(H))
    B, C = rng.standard_normal((Bt, L, N)), rng.standard_normal((Bt, L, N))
    D = rng.standard_normal(H) if with_D else None
    h0 = rng.standard_normal((Bt, H, P, N)) if with_h0 else None
    args = (x, dt, A, B, C, D, h0)
    half = dtype in (torch.float16, torch.bfloat16)
    y, h = ssd.ssd_chunked(*[None if a is None else as_t(a, dtype) for a in args], chunk=chunk, two_pass=two_pass,
                           block_n_states=16, states_dtype=dtype if half else None)   # half: chunk states stored in half
    ry, rh = ssm.ssd_scan(*[None if a is None else rounded(a, dtype) for a in args])
    tol = TOL[dtype] * (5 if dtype in (torch.float64, torch.float32) else 3)
    assert rel_err(y, ry) < tol and rel_err(h, rh) < tol


# --------------------------------------------------------------------------------------------- block-sparse
BS_CASES = [  # (B, T, Hq, Hkv, S, d, block, nb, layout, q_pos)
    (2, 5, 4, 2, 70, 16, 16, 3, "per_query", None),     # decode-like: lists differ per query; partial last block
    (1, 40, 4, 1, 100, 16, 16, 4, "uniform", None),     # prefill fast path (tiles of queries share the list)
    (1, 33, 2, 2, 90, 20, 32, 2, "uniform", "edges"),   # ragged T and d, causal edges (q_pos 0 and S-1)
    (1, 4, 2, 1, 40, 16, 16, 9, "all", None),           # nb > number of blocks: every block, rest -1
]


@pytest.mark.parametrize("case", BS_CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_block_sparse_attention_matches_twin(case, dtype):
    B, T, Hq, Hkv, S, d, bs, nb, layout, qp = case
    rng = np.random.default_rng(hash(case) % 2**32)
    q, k, v = rng.standard_normal((B, T, Hq, d)), rng.standard_normal((B, S, Hkv, d)), rng.standard_normal((B, S, Hkv, d))
    nblk = -(-S // bs)
    if layout == "uniform":
        base = np.stack([rng.permutation(nblk)[:nb] for _ in range(B * Hkv)]).reshape(B, 1, Hkv, nb)
        bidx = np.broadcast_to(base, (B, T, Hkv, nb)).copy()
        bidx[..., -1] = -1
    elif layout == "all":
        bidx = np.full((B, T, Hkv, nb), -1)
        bidx[..., :nblk] = rng.permutation(nblk)
    else:
        bidx = np.stack([rng.permutation(nblk)[:nb] for _ in range(B * T * Hkv)]).reshape(B, T, Hkv, nb)
        bidx[0, 0, 0, 1:] = -1
    q_pos = None if qp is None else np.sort(np.concatenate([[0, S - 1], rng.integers(0, S, T - 2)]))
    o = block_sparse.block_sparse_attention(as_t(q, dtype), as_t(k, dtype), as_t(v, dtype), torch.from_numpy(bidx).to(DEV),
                                            block_size=bs, q_pos=None if q_pos is None else torch.from_numpy(q_pos).to(DEV))
    ref = infllm.block_sparse_attention.numpy_impl(rounded(q, dtype), rounded(k, dtype), rounded(v, dtype), bidx,
                                                   block_size=bs, q_pos=q_pos)
    assert rel_err(o, ref) < TOL[dtype]


def test_tile_uniform_detects_shared_lists():
    b = torch.zeros((1, 10, 1, 2), dtype=torch.int64)
    assert block_sparse.tile_uniform(b, 4)
    b[0, 5, 0, 1] = 3
    assert not block_sparse.tile_uniform(b, 4) and block_sparse.tile_uniform(b, 1)


# --------------------------------------------------------------------------------------------- numpy API contract
def test_numpy_api_rejects_bad_input_like_the_twins():
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((1, 1, 2, 8)), rng.standard_normal((1, 5, 1, 8)), rng.standard_normal((1, 5, 1, 8))
    with pytest.raises(ValueError, match="idx"):
        numpy_api.sparse_attention(q, k, v, np.array([[[[0, 7]]]]))
    with pytest.raises(ValueError, match="repeat"):
        numpy_api.sparse_attention(q, k, v, np.array([[[[1, 1]]]]))
    with pytest.raises(ValueError, match="topk"):
        numpy_api.fa_decode_topk(q[:, 0], k, v, 0, 2)
    with pytest.raises(ValueError, match="block_idx"):
        numpy_api.block_sparse_attention(q, k, v, np.array([[[[3]]]]), block_size=4)
    with pytest.raises(ValueError, match="dt"):
        numpy_api.selective_scan(np.ones((1, 3, 2)), -np.ones((1, 3, 2)), -np.ones((2, 2)), np.ones((1, 3, 2)),
                                 np.ones((1, 3, 2)))
    with pytest.raises(ValueError, match="NaN"):
        numpy_api.lightning_indexer(np.full((1, 1, 2, 4), np.nan), np.ones((1, 1, 2)), np.ones((1, 3, 4)), 2)


def test_numpy_api_keeps_the_twins_dtypes():
    rng = np.random.default_rng(1)
    q32 = rng.standard_normal((1, 2, 2, 8)).astype(np.float32)
    k32, v32 = (rng.standard_normal((1, 6, 1, 8)).astype(np.float32) for _ in range(2))
    idx = np.array([[[[0, 2, -1]], [[1, 3, 5]]]])
    assert numpy_api.sparse_attention(q32, k32, v32, idx).dtype == np.float32
    assert numpy_api.sparse_attention(q32.astype(np.float64), k32, v32, idx).dtype == np.float64
    s, i = numpy_api.lightning_indexer(q32, np.ones((1, 2, 2), np.float32), k32[:, :, 0], 3)
    assert s.dtype == np.float32 and i.dtype == np.int64


# --------------------------------------------------------------------------------------------- property test
from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 2), st.integers(1, 3), st.sampled_from([(1, 1), (2, 1), (4, 2), (3, 3)]),
       st.integers(1, 40), st.integers(1, 12), st.sampled_from([8, 16, 20]), st.integers(0, 2**31 - 1))
def test_sparse_attention_property_random_shapes(B, T, heads, S, K, d, seed):
    """Any shape, any -1 padding pattern: the fp64 kernel equals the twin."""
    Hq, Hkv = heads
    rng = np.random.default_rng(seed)
    K = min(K, S)
    q, k, v = rng.normal(size=(B, T, Hq, d)), rng.normal(size=(B, S, Hkv, d)), rng.normal(size=(B, S, Hkv, d))
    idx = np.stack([rng.permutation(S)[:K] for _ in range(B * T * Hkv)]).reshape(B, T, Hkv, K)
    idx = np.where(rng.random(idx.shape) < 0.3, -1, idx)
    got = numpy_api.sparse_attention(q, k, v, idx)
    ref = sa_twin.sparse_attention.numpy_impl(q, k, v, idx)
    assert np.allclose(got, ref, atol=1e-12)
