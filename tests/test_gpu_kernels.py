"""Every Triton kernel against its numpy twin (fresh random inputs, ragged sizes, causal edges, -1 padding).

Without a GPU the kernels run in Triton's interpreter (``gpu_track`` sets TRITON_INTERPRET=1 before defining
them), so shapes stay small. On a GPU the same tests run natively: ``pytest -m gpu tests/test_gpu_kernels.py``;
bf16 cases run only there (the interpreter's bf16 arithmetic is not trustworthy).

Outputs are poisoned (NaN-filled before each launch, ``gpu_track.common.POISON``): an element a kernel forgets
to write is NaN and fails the comparison. Tolerances, as max |kernel - twin| / max |twin| against the twin run in
float64 on the same (rounded) inputs: fp64 1e-10, fp32 2e-5, fp16 4e-3, bf16 3e-2 (the half types also round the
attention probabilities before the P·V product, as FlashAttention does).
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")           # torch and triton are the optional [gpu] extra
import gpu_track  # noqa: E402  (before triton: it sets TRITON_INTERPRET when there is no GPU)

pytest.importorskip("triton")

from gpu_track import block_sparse, common, fa_decode_topk, lightning_indexer, numpy_api  # noqa: E402
from gpu_track import selective_scan, softmax, sparse_attention, ssd  # noqa: E402
from hybrid_lab.ops import block_sparse as bs_twin  # noqa: E402
from hybrid_lab.ops import fa_decode as fa_twin  # noqa: E402
from hybrid_lab.ops import lightning_indexer as li_twin  # noqa: E402
from hybrid_lab.ops import sparse_attention as sa_twin  # noqa: E402
from hybrid_lab.ops import ssm  # noqa: E402

pytestmark = pytest.mark.gpu
ON_GPU = not gpu_track.INTERPRET
DEV = common.device()
TOL = {torch.float64: 1e-10, torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}
DTYPES = [torch.float64, torch.float32, torch.float16,
          pytest.param(torch.bfloat16, marks=pytest.mark.skipif(not ON_GPU, reason="bf16 only on a GPU"))]


@pytest.fixture(autouse=True)
def poison(monkeypatch):
    monkeypatch.setattr(common, "POISON", True)


def case_seed(case) -> int:
    """A seed per parametrized case that is the same in every process (``hash`` of a tuple with str is not)."""
    return zlib.crc32(repr(case).encode())


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
    rng = np.random.default_rng(case_seed(case))
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
    rng = np.random.default_rng(case_seed(case))
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


@pytest.mark.parametrize("variant", ["tile", "stream"])
@pytest.mark.parametrize("span", [None, 32])
def test_lightning_indexer_both_launch_shapes_match_twin(variant, span):
    """The tiled (prefill) and streamed (decode: queries loaded once, a span of keys per program) launches give the
    twin's scores, decode-like (T = 1, T = 2) and with a prefill's causal edges; ragged S, di and span."""
    rng = np.random.default_rng(17)
    for B, T, Hi, di, S in ((2, 1, 4, 24, 137), (1, 2, 5, 20, 70), (2, 9, 8, 32, 50)):
        q, w, k = rng.standard_normal((B, T, Hi, di)), rng.random((B, T, Hi)), rng.standard_normal((B, S, di))
        q_pos = np.concatenate([[0], rng.integers(0, S, T - 1)]) if T > 2 else None
        sc = lightning_indexer.indexer_scores(as_t(q, torch.float64), as_t(w, torch.float64), as_t(k, torch.float64),
                                              None if q_pos is None else torch.from_numpy(q_pos).to(DEV),
                                              block_s=16, variant=variant, span=span)
        rs, _ = li_twin.lightning_indexer.numpy_impl(q, w, k, 3, q_pos)
        fin = np.isfinite(rs)
        assert np.array_equal(np.isfinite(sc.cpu().numpy()), fin)
        assert rel_err(sc.cpu().numpy()[fin], rs[fin]) < TOL[torch.float64]


def test_fp8_quantization_matches_twin_bit_for_bit():
    """quantize_fp8 (torch) and the numpy twin round the same numbers: power-of-two scales make x / scale exact,
    then float32, then e4m3 ties-to-even; every value is within 2^-4 relative of its row's scale grid."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((40, 33)) * np.exp(3 * rng.standard_normal((40, 1)))
    x[3] = 0.0                                                     # an all-zero row: scale 1
    x[4, :] = 448.0 * 2.0 ** -3                                    # amax exactly 448 · 2^e: scale 2^e, not 2^(e+1)
    t8, ts = lightning_indexer.quantize_fp8(torch.from_numpy(x).to(DEV))
    n8, ns = li_twin.quantize_fp8(x)
    assert t8.dtype == torch.float8_e4m3fn and np.array_equal(t8.double().cpu().numpy(), n8)
    assert np.array_equal(ts.double().cpu().numpy(), ns)
    assert ns[3] == 1.0 and ns[4] == 2.0 ** -3 and np.abs(n8).max() <= li_twin.E4M3_MAX
    assert np.all(np.abs(n8 * ns[:, None] - x) <= np.abs(x) * 2.0 ** -4 + ns[:, None] * 2.0 ** -10)


@pytest.mark.parametrize("case", LI_CASES)
def test_lightning_indexer_fp8_matches_twin(case):
    """The FP8 path (e4m3 q and k on tensor cores, float32 accumulation, key scale after the head sum) against its
    float64 twin on the same quantized values; top-k identical. Integer inputs quantize exactly: scores equal."""
    B, T, Hi, di, S, topk, qp = case
    rng = np.random.default_rng(case_seed(case))
    q_pos = None if qp is None else np.concatenate([[0, 1], rng.integers(0, S, T - 3), [S + 5]])
    qpt = None if q_pos is None else torch.from_numpy(q_pos).to(DEV)
    q, w, k = rng.standard_normal((B, T, Hi, di)), rng.random((B, T, Hi)), rng.standard_normal((B, S, di))
    q, w, k = (a.astype(np.float32) for a in (q, w, k))
    sc, idx = lightning_indexer.lightning_indexer_fp8(as_t(q, torch.float32), as_t(w, torch.float32),
                                                      as_t(k, torch.float32), topk, qpt)
    rs, ri = li_twin.lightning_indexer_fp8(q, w, k, topk, q_pos)
    assert sc.dtype == torch.float32 and rs.dtype == np.float32
    fin = np.isfinite(rs)
    assert np.array_equal(np.isfinite(sc.cpu().numpy()), fin)
    # Hopper's FP8 tensor cores accumulate with about 14 bits of mantissa, not float32's 24 (DeepSeek-V3 report
    # §3.3.2, measured on H800): against a float64 twin of the same quantized values the scores agree to ~1e-4, not 1e-7
    tol = 2e-3 if DEV.type == "cuda" else 2e-5
    assert rel_err(sc.cpu().numpy()[fin], rs[fin].astype(np.float64)) < tol
    exact, _ = li_twin.lightning_indexer.numpy_impl(q, w, k, topk, q_pos)
    assert 0 < np.abs(rs[fin] - exact[fin]).max() / np.abs(exact[fin]).max() < 0.1   # FP8 rounds (and not wildly)
    qi = rng.integers(-2, 3, (B, T, Hi, di)).astype(np.float32)
    wi = rng.integers(0, 3, (B, T, Hi)).astype(np.float32)
    ki = rng.integers(-2, 3, (B, S, di)).astype(np.float32)
    sc, idx = lightning_indexer.lightning_indexer_fp8(as_t(qi, torch.float32), as_t(wi, torch.float32),
                                                      as_t(ki, torch.float32), topk, qpt)
    rs, ri = li_twin.lightning_indexer_fp8(qi, wi, ki, topk, q_pos)
    ref, _ = li_twin.lightning_indexer.numpy_impl(qi, wi, ki, topk, q_pos)
    assert np.array_equal(sc.cpu().numpy(), rs) and np.array_equal(rs, ref.astype(np.float32))
    assert np.array_equal(idx.cpu().numpy(), ri)


def test_lightning_indexer_fp8_rejects_bad_input():
    q8 = torch.zeros(1, 2, 2, 8, device=DEV).to(torch.float8_e4m3fn)
    k8 = torch.zeros(1, 5, 8, device=DEV).to(torch.float8_e4m3fn)
    w = torch.ones(1, 2, 2, device=DEV)
    with pytest.raises(ValueError, match="k_scale"):
        lightning_indexer.indexer_scores_fp8(q8, w, k8, torch.ones(1, 4, device=DEV))
    with pytest.raises(ValueError, match="q must have dtype"):
        lightning_indexer.indexer_scores_fp8(q8.float(), w, k8, torch.ones(1, 5, device=DEV))
    with pytest.raises(ValueError, match="variant"):
        lightning_indexer.indexer_scores(q8.float(), w, k8.float(), variant="fast")
    with pytest.raises(ValueError, match="x must be finite"):
        li_twin.quantize_fp8(np.array([1.0, np.nan]))


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
    rng = np.random.default_rng(case_seed(case))
    q, k, v = rng.standard_normal((B, Hq, d)), rng.standard_normal((B, S, Hkv, d)), rng.standard_normal((B, S, Hkv, dv))
    sink = rng.standard_normal(Hq) if with_sink else None
    o, score = fa_decode_topk.fa_decode(as_t(q, dtype), as_t(k, dtype), as_t(v, dtype), window,
                                        sink=None if sink is None else as_t(sink, torch.float64))
    idx = common.topk_stable(score, topk).cpu().numpy()
    qr, kr, vr = rounded(q, dtype), rounded(k, dtype), rounded(v, dtype)
    ro, ri = fa_twin.fa_decode_topk.numpy_impl(qr, kr, vr, topk, window, sink=sink)
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
@pytest.mark.parametrize("variant, tiles", [("chunked", {}), ("chunked", dict(chunk=8, block_d=16, lanes_d=4)),
                                            ("chunked", dict(chunk=4, block_d=8, lanes_d=8, num_warps=1)),
                                            ("sequential", {})])
def test_selective_scan_matches_twin(case, dtype, variant, tiles):
    """Every tiling agrees with the twin: lanes_d < block_d (channel groups in registers), lanes_d = block_d."""
    args = _scan_inputs(case, 11)
    targs = [None if a is None else as_t(a, dtype) for a in args]
    y, h = selective_scan.selective_scan(*targs, variant=variant, **tiles)
    rargs = [None if a is None else rounded(a, dtype) for a in args]
    ry, rh = ssm.ssm_scan(*rargs)
    assert rel_err(y, ry) < TOL[dtype] * 5 and rel_err(h, rh) < TOL[dtype] * 5


@pytest.mark.parametrize("case", SCAN_CASES[:2])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_selective_scan_unfused_matches_twin_and_counts_more_bytes(case, dtype):
    """Lecture 10 §2.3's baseline: Ā and B̄x materialized in HBM, then scanned. Same result as the twin (and the
    fused kernel); its byte count adds 2·2·N accumulator floats per (t, d)."""
    args = _scan_inputs(case, 13)
    y, h = selective_scan.selective_scan_unfused(*[None if a is None else as_t(a, dtype) for a in args], chunk=8)
    ry, rh = ssm.ssm_scan(*[None if a is None else rounded(a, dtype) for a in args])
    assert rel_err(y, ry) < TOL[dtype] * 5 and rel_err(h, rh) < TOL[dtype] * 5
    Bt, L, Dm, N = case[:4]
    fused, unfused = (selective_scan.scan_bytes(Bt, L, Dm, N, fused=f) for f in (True, False))
    assert unfused - fused == 16 * Bt * L * Dm * N + 2 * Bt * L * Dm


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


@pytest.mark.parametrize("pass_block, pass_chunks", [(16, 2), (64, 1), (512, 8)])
def test_ssd_parallel_state_pass_tiles(pass_block, pass_chunks):
    """The inter-chunk pass in tiles of pass_chunks chunks × pass_block state entries, ragged both ways (7 chunks,
    P·N = 240 entries), with h0 and D, equals the twin (float64)."""
    Bt, L, H, P, N = 2, 100, 2, 20, 12
    rng = np.random.default_rng(21)
    args = (rng.standard_normal((Bt, L, H, P)), np.log1p(np.exp(rng.standard_normal((Bt, L, H)))),
            -np.exp(rng.standard_normal(H)), rng.standard_normal((Bt, L, N)), rng.standard_normal((Bt, L, N)),
            rng.standard_normal(H), rng.standard_normal((Bt, H, P, N)))
    y, h = ssd.ssd_chunked(*[as_t(a, torch.float64) for a in args], chunk=16, two_pass=True, pass_block=pass_block,
                           pass_chunks=pass_chunks)
    ry, rh = ssm.ssd_scan(*args)
    assert rel_err(y, ry) < 1e-10 and rel_err(h, rh) < 1e-10


@pytest.mark.parametrize("heads_per_program", [1, 2, 3, 8])
def test_ssd_parallel_heads_per_program(heads_per_program):
    """Kernels 1 and 3 of the parallel form give a program several heads of one chunk (B, C and C Bᵀ shared): with
    H = 5, groups of 2 and 3 leave a partial last group, 8 > H is one group. Equals the twin (float64)."""
    Bt, L, H, P, N = 2, 50, 5, 12, 10
    rng = np.random.default_rng(22)
    args = (rng.standard_normal((Bt, L, H, P)), np.log1p(np.exp(rng.standard_normal((Bt, L, H)))),
            -np.exp(rng.standard_normal(H)), rng.standard_normal((Bt, L, N)), rng.standard_normal((Bt, L, N)),
            rng.standard_normal(H), rng.standard_normal((Bt, H, P, N)))
    y, h = ssd.ssd_chunked(*[as_t(a, torch.float64) for a in args], chunk=32, two_pass=True,
                           heads_per_program=heads_per_program)
    ry, rh = ssm.ssd_scan(*args)
    assert rel_err(y, ry) < 1e-10 and rel_err(h, rh) < 1e-10


@pytest.mark.parametrize("case", SSD_CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_ssd_chained_matches_twin(case, dtype):
    """The one-launch form (chunk states handed on through L2, fp32 carried state) equals the twin."""
    Bt, L, H, P, N, chunk, with_D, with_h0 = case
    rng = np.random.default_rng(8)
    args = (rng.standard_normal((Bt, L, H, P)), np.log1p(np.exp(rng.standard_normal((Bt, L, H)))),
            -np.exp(rng.standard_normal(H)), rng.standard_normal((Bt, L, N)), rng.standard_normal((Bt, L, N)),
            rng.standard_normal(H) if with_D else None, rng.standard_normal((Bt, H, P, N)) if with_h0 else None)
    y, h = ssd.ssd_chunked(*[None if a is None else as_t(a, dtype) for a in args], chunk=chunk, chained=True)
    ry, rh = ssm.ssd_scan(*[None if a is None else rounded(a, dtype) for a in args])
    tol = TOL[dtype] * (5 if dtype in (torch.float64, torch.float32) else 3)
    assert rel_err(y, ry) < tol and rel_err(h, rh) < tol


@pytest.mark.parametrize("heads_per_program", [1, 2, 3, 8])
def test_ssd_chained_many_chunks_and_head_groups(heads_per_program):
    """Ten chunks (each ring slot of a chain reused five times), H = 5 heads in groups of 1, 2, 3 (a partial last
    group, whose missing heads must touch no chain) and 8 > H, two P blocks, with h0 and D: equals the twin and
    the two-pass form (float64)."""
    Bt, L, H, P, N = 2, 150, 5, 20, 12
    rng = np.random.default_rng(23)
    args = (rng.standard_normal((Bt, L, H, P)), np.log1p(np.exp(rng.standard_normal((Bt, L, H)))),
            -np.exp(rng.standard_normal(H)), rng.standard_normal((Bt, L, N)), rng.standard_normal((Bt, L, N)),
            rng.standard_normal(H), rng.standard_normal((Bt, H, P, N)))
    t = [as_t(a, torch.float64) for a in args]
    y, h = ssd.ssd_chunked(*t, chunk=16, block_p=16, chained=True, heads_per_program=heads_per_program)
    ry, rh = ssm.ssd_scan(*args)
    assert rel_err(y, ry) < 1e-10 and rel_err(h, rh) < 1e-10
    y2, h2 = ssd.ssd_chunked(*t, chunk=16, block_p=16, two_pass=True)
    assert rel_err(y, y2.cpu().numpy()) < 1e-12 and rel_err(h, h2.cpu().numpy()) < 1e-12


@pytest.mark.skipif(not ON_GPU, reason="the issue-17 shapes need a GPU")
@pytest.mark.parametrize("Bt, L", [(4, 8192), (1, 1000)])
def test_ssd_parallel_bf16_large_n_agrees_with_single_pass(Bt, L):
    """The two-pass SSD with bf16 inputs and N = 128 (H = 80, P = 64) gave relative errors ~1 and read
    shared memory out of bounds at (Bt, L) = (4, 8192) with 32-wide tiles. Now every dot tile is >= 64 wide; the
    parallel form, bf16 chunk states, agrees with the single pass and with the fp32 kernel."""
    H, P, N = 80, 64, 128
    g = torch.Generator(device=DEV).manual_seed(17)
    x = torch.randn(Bt, L, H, P, device=DEV, generator=g).to(torch.bfloat16)
    dt = torch.nn.functional.softplus(torch.randn(Bt, L, H, device=DEV, generator=g) - 3).to(torch.bfloat16)
    A = -(torch.rand(H, device=DEV, generator=g) * 2 + 0.5).to(torch.bfloat16)
    B = (torch.randn(Bt, L, N, device=DEV, generator=g) * N ** -0.5).to(torch.bfloat16)
    C = (torch.randn(Bt, L, N, device=DEV, generator=g) * N ** -0.5).to(torch.bfloat16)
    y1, h1 = ssd.ssd_chunked(x, dt, A, B, C, chunk=64, block_p=32)
    for chunk in (64, 128):
        y2, h2 = ssd.ssd_chunked(x, dt, A, B, C, chunk=chunk, block_p=32, two_pass=True, block_n_states=32,
                                 states_dtype=torch.bfloat16, out_dtype=torch.bfloat16)
        yf, _ = ssd.ssd_chunked(*(t.float() for t in (x, dt, A, B, C)), chunk=chunk, two_pass=True)
        assert float((y2.float() - y1).norm() / y1.norm()) < 2e-2
        assert float((yf - y1).norm() / y1.norm()) < 2e-2
        assert float((h2 - h1).norm() / h1.norm()) < 2e-2


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
    rng = np.random.default_rng(case_seed(case))
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
    ref = bs_twin.block_sparse_attention.numpy_impl(rounded(q, dtype), rounded(k, dtype), rounded(v, dtype), bidx,
                                                   block_size=bs, q_pos=q_pos)
    assert rel_err(o, ref) < TOL[dtype]


def test_tile_uniform_detects_shared_lists():
    b = torch.zeros((1, 10, 1, 2), dtype=torch.int64)
    assert block_sparse.tile_uniform(b, 4)
    b[0, 5, 0, 1] = 3
    assert not block_sparse.tile_uniform(b, 4) and block_sparse.tile_uniform(b, 1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_block_sparse_split_k_decode_matches_twin(dtype):
    """Split-K decode (each block list cut into nsplit slices + the combine) gives the twin's output for every
    nsplit, including more slices than listed blocks (empty slices) and a list of -1 only (output 0); G = 16 and
    G = 3 (padded heads); per-query lists (T = 2), as at decode with speculative tokens."""
    rng = np.random.default_rng(33)
    for B, T, Hq, Hkv, S, d, bs, nb in ((2, 1, 32, 2, 300, 32, 64, 4), (1, 2, 6, 2, 100, 24, 16, 3)):
        q, k, v = rng.standard_normal((B, T, Hq, d)), rng.standard_normal((B, S, Hkv, d)), rng.standard_normal((B, S, Hkv, d))
        n_blk = -(-S // bs)
        bidx = np.stack([rng.permutation(n_blk)[:nb] for _ in range(B * T * Hkv)]).reshape(B, T, Hkv, nb)
        bidx[0, 0, -1, :] = -1                                       # nothing listed: 0
        bidx[-1, -1, 0, 1:] = -1                                     # one block, then padding
        ref = bs_twin.block_sparse_attention.numpy_impl(rounded(q, dtype), rounded(k, dtype), rounded(v, dtype), bidx, bs)
        for nsplit in (None, 1, 2, nb, nb + 3):
            o = block_sparse.block_sparse_attention(as_t(q, dtype), as_t(k, dtype), as_t(v, dtype),
                                                    torch.from_numpy(bidx).to(DEV), bs, nsplit=nsplit)
            assert rel_err(o, ref) < TOL[dtype], nsplit
            assert not o[0, 0, -(Hq // Hkv):].abs().sum().item()


# --------------------------------------------------------------------------------------------- shared layer
def test_split_k_equals_one_pass_with_and_without_sink():
    """softmax.combine_splits merging 1, 2 or 5 slices of the index list gives the one-pass result (float64)."""
    rng = np.random.default_rng(21)
    q, k, v = (rng.standard_normal(s) for s in ((1, 2, 4, 16), (1, 200, 2, 16), (1, 200, 2, 16)))
    idx = torch.from_numpy(np.stack([rng.permutation(200)[:150] for _ in range(4)]).reshape(1, 2, 2, 150)).to(DEV)
    sink = as_t(rng.standard_normal(4), torch.float64)
    for sk in (None, sink):
        one = sparse_attention.sparse_attention(*(as_t(a, torch.float64) for a in (q, k, v)), idx, sink=sk, nsplit=1)
        for nsplit in (2, 5):
            split = sparse_attention.sparse_attention(*(as_t(a, torch.float64) for a in (q, k, v)), idx, sink=sk,
                                                      nsplit=nsplit)
            assert rel_err(split, one.cpu().numpy()) < 1e-12


def test_combine_splits_merges_partials_and_handles_empty_heads():
    """Two slices of one head's keys, written as (m, l, acc) partials, merge to the softmax over all keys; a head
    whose slices saw nothing (m = -inf, l = 0) gets 0, as the twins' empty index set."""
    s1, s2 = np.array([0.5, -1.0]), np.array([2.0, 0.1, -0.3])
    v1, v2 = np.array([[1.0], [2.0]]), np.array([[3.0], [4.0], [5.0]])
    parts = [(s.max(), np.exp(s - s.max()).sum(), np.exp(s - s.max()) @ vv) for s, vv in ((s1, v1), (s2, v2))]
    f64 = dict(dtype=torch.float64, device=DEV)
    part_m = torch.tensor([[[[parts[0][0], -np.inf], [parts[1][0], -np.inf]]]], **f64)   # (R=1, Hkv=1, 2 splits, G=2)
    part_l = torch.tensor([[[[parts[0][1], 0.0], [parts[1][1], 0.0]]]], **f64)
    part_acc = torch.zeros((1, 1, 2, 2, 1), **f64)
    part_acc[0, 0, 0, 0], part_acc[0, 0, 1, 0] = as_t(parts[0][2], torch.float64), as_t(parts[1][2], torch.float64)
    o = torch.full((1, 2, 1), np.nan, **f64)
    softmax.combine_splits(part_m, part_l, part_acc, None, o)
    s_all, v_all = np.concatenate([s1, s2]), np.concatenate([v1, v2])
    p = np.exp(s_all - s_all.max()) / np.exp(s_all - s_all.max()).sum()
    assert o[0, 0, 0].item() == pytest.approx(float(p @ v_all[:, 0]), rel=1e-14)
    assert o[0, 1, 0].item() == 0.0


def test_accumulator_and_precision_helpers():
    import triton.language as tl
    assert common.acc_torch_dtype(torch.float16, torch.float64) == torch.float64
    assert common.acc_torch_dtype(torch.bfloat16, torch.float32) == torch.float32
    assert common.acc_dtype(torch.float64) == tl.float64 and common.acc_dtype(torch.float16) == tl.float32
    assert common.dot_precision(torch.float32) == "ieee" and common.dot_precision(torch.bfloat16) == "tf32"
    assert common.split_chunk(100, 32, 3) == (64, 2)      # 4 blocks in at most 3 slices: 2 slices of 2 blocks
    assert common.split_chunk(100, 32, 1) == (128, 1) and common.split_chunk(100, 32, 9) == (32, 4)


# ----------------------------------------------------------------------------------- torch wrappers: bad input
def _attn_inputs(B=1, T=2, Hq=4, Hkv=2, S=20, d=16, dv=16, dtype=torch.float64):
    rng = np.random.default_rng(5)
    return (as_t(rng.standard_normal((B, T, Hq, d)), dtype), as_t(rng.standard_normal((B, S, Hkv, d)), dtype),
            as_t(rng.standard_normal((B, S, Hkv, dv)), dtype))


def _sa_bad_cases():
    q, k, v = _attn_inputs()                                   # S = 20, Hkv = 2
    idx = torch.tensor([[[[0, 5, -1], [1, 2, 3]], [[4, -1, -1], [19, 0, 7]]]], device=DEV)
    sa = sparse_attention.sparse_attention
    return {
        "index = S": (lambda: sa(q, k, v, torch.where(idx == 19, 20, idx)), "idx entries must lie in \\[-1, 20\\)"),
        "index < -1": (lambda: sa(q, k, v, torch.where(idx == -1, -2, idx)), "idx"),
        "index huge": (lambda: sa(q, k, v, torch.where(idx == 7, 2 ** 40, idx)), "idx"),
        "float index": (lambda: sa(q, k, v, idx.double()), "idx must have dtype"),
        "index heads": (lambda: sa(q, k, v, idx[:, :, :1]), "idx must have shape"),
        "k dtype": (lambda: sa(q, k.float(), v, idx), "k must have dtype"),
        "k head dim": (lambda: sa(q, k[..., :8], v, idx), "k must have shape"),
        "v length": (lambda: sa(q, k, v[:, :10], idx), "v must have shape"),
        "q 3-D": (lambda: sa(q[:, 0], k, v, idx), "q must have shape"),
        "numpy q": (lambda: sa(q.cpu().numpy(), k, v, idx), "q must be a torch tensor"),
        "GQA": (lambda: sa(q[:, :, :3], k, v, idx), "Hq=3 must be a multiple of Hkv=2"),
        "sink shape": (lambda: sa(q, k, v, idx, sink=q.new_zeros(3)), "sink must have shape"),
        "sink NaN": (lambda: sa(q, k, v, idx, sink=q.new_tensor([0.0, np.nan, 0, 0])), "sink must be finite"),
        "scale NaN": (lambda: sa(q, k, v, idx, scale=float("nan")), "scale"),
        "block_k": (lambda: sa(q, k, v, idx, block_k=24), "block_k must be a power of two"),
        "nsplit": (lambda: sa(q, k, v, idx, nsplit=0), "nsplit"),
        "device": (lambda: sa(q, k.to("meta"), v, idx), "k must be on"),
    }


def _bs_bad_cases():
    q, k, v = _attn_inputs(T=3, S=40)                          # block_size 16: Nb = 3
    bidx = torch.tensor([[[[0, 2], [1, -1]]] * 3], device=DEV)
    bs = block_sparse.block_sparse_attention
    return {
        "block index = Nb": (lambda: bs(q, k, v, torch.where(bidx == 2, 3, bidx), 16), "block_idx .* \\[-1, 3\\)"),
        "block index < -1": (lambda: bs(q, k, v, torch.where(bidx == -1, -2, bidx), 16), "block_idx"),
        "block_idx shape": (lambda: bs(q, k, v, bidx[:, :2], 16), "block_idx must have shape"),
        "block_idx float": (lambda: bs(q, k, v, bidx.float(), 16), "block_idx must have dtype"),
        "q_pos = S": (lambda: bs(q, k, v, bidx, 16, q_pos=torch.tensor([3, 10, 40], device=DEV)), "q_pos entries"),
        "q_pos < 0": (lambda: bs(q, k, v, bidx, 16, q_pos=torch.tensor([-1, 10, 20], device=DEV)), "q_pos"),
        "q_pos float": (lambda: bs(q, k, v, bidx, 16, q_pos=q.new_tensor([1.0, 2.0, 3.0])), "q_pos must have dtype"),
        "nsplit = 0": (lambda: bs(q, k, v, bidx, 16, nsplit=0), "nsplit must be an integer >= 1"),
        "q_pos length": (lambda: bs(q, k, v, bidx, 16, q_pos=torch.tensor([1, 2], device=DEV)), "q_pos must have sh"),
        "T > S": (lambda: bs(*_attn_inputs(T=3, S=2), torch.zeros((1, 3, 2, 1), dtype=torch.int64, device=DEV), 16),
                  "T must be <= S"),
        "block_size 0": (lambda: bs(q, k, v, bidx, 0), "block_size must be an integer >= 1"),
        "block_t": (lambda: bs(q, k, v, bidx, 16, block_t=3), "block_t must be a power of two"),
        "v heads": (lambda: bs(q, k, v[:, :, :1], bidx, 16), "v must have shape"),
    }


def _li_bad_cases():
    rng = np.random.default_rng(2)
    q, w, k = (as_t(rng.standard_normal(s), torch.float64) for s in ((1, 3, 4, 16), (1, 3, 4), (1, 10, 16)))
    li = lightning_indexer.lightning_indexer
    return {
        "q_pos < 0": (lambda: li(q, w, k, 2, torch.tensor([-1, 3, 4], device=DEV)), "q_pos entries .* \\[0, inf"),
        "q_pos length": (lambda: li(q, w, k, 2, torch.tensor([1, 3], device=DEV)), "q_pos must have shape"),
        "q_pos float": (lambda: li(q, w, k, 2, torch.tensor([1.0, 3, 4], device=DEV)), "q_pos must have dtype"),
        "T > S": (lambda: li(q, w, k[:, :2], 2), "T must be <= S"),
        "topk 0": (lambda: li(q, w, k, 0), "topk must be an integer >= 1"),
        "w shape": (lambda: li(q, w[..., :3], k, 2), "w must have shape"),
        "k dim": (lambda: li(q, w, k[..., :8], 2), "k must have shape"),
        "k dtype": (lambda: li(q, w, k.float(), 2), "k must have dtype"),
        "block_s": (lambda: lightning_indexer.indexer_scores(q, w, k, block_s=48), "block_s must be a power of two"),
        "block_t rows": (lambda: lightning_indexer.indexer_scores(q, w, k, block_t=2), "block_t"),
    }


def _fa_bad_cases():
    q, k, v = _attn_inputs()
    q = q[:, 0]
    fa = fa_decode_topk.fa_decode_topk
    return {
        "topk 0": (lambda: fa(q, k, v, 0, 4), "topk must be an integer >= 1"),
        "window 0": (lambda: fa(q, k, v, 2, 0), "window must be an integer >= 1"),
        "window float": (lambda: fa(q, k, v, 2, 4.0), "window"),
        "q 4-D": (lambda: fa(q[:, None], k, v, 2, 4), "q must have shape"),
        "v length": (lambda: fa(q, k, v[:, :5], 2, 4), "v must have shape"),
        "k batch": (lambda: fa(q, torch.cat([k, k]), v, 2, 4), "k must have shape"),
        "sink NaN": (lambda: fa(q, k, v, 2, 4, sink=q.new_tensor([np.nan, 0, 0, 0])), "sink must be finite"),
        "block_s": (lambda: fa_decode_topk.fa_decode(q, k, v, 4, block_s=100), "block_s must be a power of two"),
    }


def _scan_bad_cases():
    x, dt, A, B, C, D, h0 = (as_t(a, torch.float64) for a in _scan_inputs((1, 5, 4, 3, True, True), 0))
    ss, st = selective_scan.selective_scan, selective_scan.selective_scan_step
    return {
        "dt shape": (lambda: ss(x, dt[:, :4], A, B, C), "dt must have shape"),
        "A shape": (lambda: ss(x, dt, A[:3], B, C), "A must have shape"),
        "B state size": (lambda: ss(x, dt, A, B[..., :2], C), "B must have shape"),
        "C length": (lambda: ss(x, dt, A, B, C[:, :4]), "C must have shape"),
        "D shape": (lambda: ss(x, dt, A, B, C, D[:2]), "D must have shape"),
        "h0 shape": (lambda: ss(x, dt, A, B, C, D, h0[..., :2]), "h0 must have shape"),
        "int x": (lambda: ss(x.long(), dt, A, B, C), "x must have dtype"),
        "chunk": (lambda: ss(x, dt, A, B, C, chunk=12), "chunk must be a power of two"),
        "variant": (lambda: ss(x, dt, A, B, C, variant="parallel"), "variant"),
        "lanes_d": (lambda: ss(x, dt, A, B, C, lanes_d=3), "lanes_d must be a power of two"),
        "unfused chunk": (lambda: selective_scan.selective_scan_unfused(x, dt, A, B, C, chunk=6), "chunk must be"),
        "step h": (lambda: st(x[:, 0], dt[:, 0], A, B[:, 0], C[:, 0], D, h0[:, :3]), "h must have shape"),
        "step B": (lambda: st(x[:, 0], dt[:, 0], A, B, C[:, 0], D, h0), "B must have shape"),
    }


def _ssd_bad_cases():
    rng = np.random.default_rng(4)
    x, dt, A, B, C, D, h0 = (as_t(rng.standard_normal(s), torch.float64) for s in
                             ((1, 5, 2, 16), (1, 5, 2), (2,), (1, 5, 8), (1, 5, 8), (2,), (1, 2, 16, 8)))
    sd = ssd.ssd_chunked
    return {
        "A shape": (lambda: sd(x, dt, A[:1], B, C), "A must have shape"),
        "dt heads": (lambda: sd(x, dt[..., :1], A, B, C), "dt must have shape"),
        "C state size": (lambda: sd(x, dt, A, B, C[..., :4]), "C must have shape"),
        "h0 shape": (lambda: sd(x, dt, A, B, C, D, h0[:, :, :8]), "h0 must have shape"),
        "D shape": (lambda: sd(x, dt, A, B, C, D[:1]), "D must have shape"),
        "block_p": (lambda: sd(x, dt, A, B, C, block_p=24), "block_p must be a power of two"),
        "block_n_states": (lambda: sd(x, dt, A, B, C, two_pass=True, block_n_states=0), "block_n_states"),
        "pass_block": (lambda: sd(x, dt, A, B, C, two_pass=True, pass_block=100), "pass_block must be a power of two"),
        "pass_chunks": (lambda: sd(x, dt, A, B, C, two_pass=True, pass_chunks=3), "pass_chunks must be a power"),
        "heads_per_program": (lambda: sd(x, dt, A, B, C, two_pass=True, heads_per_program=0),
                              "heads_per_program must be an integer >= 1"),
        "chunk": (lambda: sd(x, dt, A, B, C, chunk=0), "chunk must be an integer >= 1"),
        "chained not a bool": (lambda: sd(x, dt, A, B, C, chained=1), "chained must be a bool"),
        "two forms": (lambda: sd(x, dt, A, B, C, chained=True, two_pass=True), "chained and two_pass are two forms"),
        "chained heads_per_program": (lambda: sd(x, dt, A, B, C, chained=True, heads_per_program=0),
                                      "heads_per_program must be an integer >= 1"),
    }


BAD_GROUPS = (("sparse_attention", _sa_bad_cases), ("block_sparse", _bs_bad_cases),
              ("lightning_indexer", _li_bad_cases), ("fa_decode", _fa_bad_cases),
              ("selective_scan", _scan_bad_cases), ("ssd", _ssd_bad_cases))
BAD = {f"{group} / {name}": case for group, cases in BAD_GROUPS for name, case in cases().items()}


@pytest.mark.parametrize("name", list(BAD))
def test_torch_wrappers_reject_bad_input(name):
    """Each wrapper checks its arguments before launching: a ValueError naming the argument, never a number."""
    call, match = BAD[name]
    with pytest.raises(ValueError, match=match):
        call()


def test_sparse_attention_index_at_s_was_an_out_of_bounds_read():
    """The case the checks exist for: with idx = S the kernel would gather row S, which is the next sequence's
    key 0 (or past the buffer), and return a finite, wrong output. Now it raises; idx = S - 1 still works."""
    q, k, v = _attn_inputs(B=2, S=20)
    idx = torch.full((2, 2, 2, 1), 19, device=DEV)
    assert torch.isfinite(sparse_attention.sparse_attention(q, k, v, idx)).all()
    with pytest.raises(ValueError, match="idx"):
        sparse_attention.sparse_attention(q, k, v, idx + 1)


def test_launch_limits_are_checked_before_launch():
    """Grids past CUDA's limits and int32 offsets past 2^31 raise a ValueError naming the argument before anything
    is allocated or launched (stride-0 views: no memory behind these shapes)."""
    def z(*shape):
        return torch.zeros(1, device=DEV, dtype=torch.float32).expand(*shape)
    H = 2 ** 16                                   # 2^22 steps / 64 per chunk (natively) x 2^16 heads = 2^32 programs
    with pytest.raises(ValueError, match="x: the launch grid's axis 0"):
        ssd.ssd_chunked(z(1, 2 ** 22, H, 16), z(1, 2 ** 22, H), z(H), z(1, 2 ** 22, 16), z(1, 2 ** 22, 16),
                        chunk=16, two_pass=True, heads_per_program=1)
    L = 2 ** 31
    with pytest.raises(ValueError, match="L: one sequence's time axis"):
        ssd.ssd_chunked(z(1, L, 1, 16), z(1, L, 1), z(1), z(1, L, 16), z(1, L, 16))
    Dm = 2 ** 20
    with pytest.raises(ValueError, match="block_d: the launch grid's axis 1"):
        selective_scan.selective_scan(z(1, 4, Dm), z(1, 4, Dm), z(Dm, 4), z(1, 4, 4), z(1, 4, 4), block_d=1)
    with pytest.raises(ValueError, match="A: A"):
        selective_scan.selective_scan(z(1, 4, Dm), z(1, 4, Dm), z(Dm, 2 ** 12), z(1, 4, 2 ** 12), z(1, 4, 2 ** 12),
                                      block_d=64)
    assert common.check_grid("x", (2 ** 31 - 1, 65535, 65535)) == (2 ** 31 - 1, 65535, 65535)


@pytest.mark.skipif(not ON_GPU, reason="CUDA graphs need a GPU")
def test_checks_do_not_break_cuda_graph_capture():
    """The benchmark replays decode launches from CUDA graphs: the host-side index checks are skipped during capture
    (the eager call before it was checked), and the replay equals the eager result."""
    q, k, v = _attn_inputs(B=2, T=1, Hq=32, Hkv=2, S=300, dtype=torch.float16)
    idx = torch.rand(2, 1, 2, 300, device=DEV).topk(40, dim=-1).indices     # distinct per row (repeats are refused)
    bidx = torch.rand(2, 1, 2, 5, device=DEV).topk(3, dim=-1).indices
    calls = [lambda: sparse_attention.sparse_attention(q, k, v, idx),
             lambda: block_sparse.block_sparse_attention(q, k, v, bidx, 64),
             lambda: fa_decode_topk.fa_decode(q[:, 0], k, v, 16)[0]]
    eager = [c() for c in calls]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = [c() for c in calls]
    graph.replay()
    torch.cuda.synchronize()
    assert all(torch.equal(a, b) for a, b in zip(captured, eager))


def test_indexer_q_pos_past_s_sees_every_key():
    """The indexer's q_pos has no upper bound (q_pos >= S - 1 sees every key), even past int32."""
    rng = np.random.default_rng(8)
    q, w, k = (as_t(rng.standard_normal(s), torch.float64) for s in ((1, 2, 2, 16), (1, 2, 2), (1, 9, 16)))
    a = lightning_indexer.indexer_scores(q, w, k, torch.tensor([8, 8], device=DEV))
    b = lightning_indexer.indexer_scores(q, w, k, torch.tensor([9, 2 ** 40], device=DEV))
    assert torch.equal(a, b) and torch.isfinite(a).all()


# --------------------------------------------------------------------------------------------- numpy API contract
# (bad input never reaches numpy_api: the registry runs the op's contract first; see tests/test_contracts.py)
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
