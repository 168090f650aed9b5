import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hybrid_lab.ops import ssm


def _inputs(rng, Bt=2, L=37, D=6, N=4, scale=1.0):
    p = ssm.init_ssm(D, N, seed=int(rng.integers(1000)))
    x = rng.normal(size=(Bt, L, D))
    dt, B, C = ssm.ssm_inputs(p, x)
    return x, dt * scale, p["A"], B, C, p["D"]


def test_hand_computed_single_channel():
    # D = N = 1, A = -1, constant dt = 0.5, B = C = 1, D = 0: h_t = e^{-0.5} h + 0.5 x_t
    x = np.array([[[1.0], [2.0], [-1.0]]])
    dt = np.full_like(x, 0.5)
    A, B, C = np.array([[-1.0]]), np.ones((1, 3, 1)), np.ones((1, 3, 1))
    a = np.exp(-0.5)
    h1 = 0.5
    h2 = a * h1 + 1.0
    h3 = a * h2 - 0.5
    for fn in (ssm.ssm_scan, lambda *a_: ssm.ssm_chunked(*a_, chunk_size=2)):
        y, h = fn(x, dt, A, B, C)
        np.testing.assert_allclose(y[0, :, 0], [h1, h2, h3], rtol=1e-12)
        np.testing.assert_allclose(h[0, 0, 0], h3, rtol=1e-12)


@pytest.mark.parametrize("Q", [1, 5, 16, 37, 64])
def test_chunked_matches_recurrent_ragged(rng, Q):
    x, dt, A, B, C, D = _inputs(rng)
    y1, h1 = ssm.ssm_scan(x, dt, A, B, C, D)
    y2, h2 = ssm.ssm_chunked(x, dt, A, B, C, D, chunk_size=Q)
    assert np.abs(y1).max() > 0.1
    assert np.abs(y1 - y2).max() <= 1e-10 and np.abs(h1 - h2).max() <= 1e-10


def test_large_delta_no_overflow(rng):
    x, dt, A, B, C, D = _inputs(rng, scale=1e5)
    with np.errstate(over="raise", invalid="raise"):
        y2, h2 = ssm.ssm_chunked(x, dt, A, B, C, D, chunk_size=16)
    y1, h1 = ssm.ssm_scan(x, dt, A, B, C, D)
    assert np.isfinite(y2).all()
    assert np.abs(y1 - y2).max() <= 1e-6


def test_h0_continuation_and_boundaries(rng):
    x, dt, A, B, C, D = _inputs(rng, L=40)
    y, h = ssm.ssm_scan(x, dt, A, B, C, D)
    ya, ha = ssm.ssm_chunked(x[:, :24], dt[:, :24], A, B[:, :24], C[:, :24], D, chunk_size=8)
    yb, hb = ssm.ssm_chunked(x[:, 24:], dt[:, 24:], A, B[:, 24:], C[:, 24:], D, h0=ha, chunk_size=8)
    np.testing.assert_allclose(np.concatenate([ya, yb], 1), y, atol=1e-10)
    np.testing.assert_allclose(hb, h, atol=1e-10)
    _, _, bounds = ssm.ssm_chunked(x, dt, A, B, C, D, chunk_size=16, return_boundaries=True)
    assert sorted(bounds) == [16, 32, 40]
    _, _, states = ssm.ssm_scan(x, dt, A, B, C, D, return_states=True)
    np.testing.assert_allclose(bounds[32], states[:, 31], atol=1e-10)


def test_step_matches_scan(rng):
    x, dt, A, B, C, D = _inputs(rng, L=1)
    h0 = rng.normal(size=(2, 6, 4))
    y, h = ssm.selective_scan_step(x[:, 0], dt[:, 0], A, B[:, 0], C[:, 0], D, h0)
    y2, h2 = ssm.ssm_scan(x, dt, A, B, C, D, h0=h0)
    np.testing.assert_allclose(y, y2[:, 0], atol=1e-12)
    np.testing.assert_allclose(h, h2, atol=1e-12)
    assert np.abs(y).max() > 0


@settings(max_examples=25, deadline=None)
@given(L=st.integers(1, 40), Q=st.integers(1, 20), H=st.integers(1, 3), P=st.integers(1, 4), N=st.integers(1, 5),
       seed=st.integers(0, 10_000))
def test_ssd_chunked_matches_recurrent(L, Q, H, P, N, seed):
    r = np.random.default_rng(seed)
    x = r.normal(size=(1, L, H, P))
    dt = np.log1p(np.exp(r.normal(size=(1, L, H))))
    A = -np.exp(r.normal(size=H))
    B, C = r.normal(size=(1, L, N)), r.normal(size=(1, L, N))
    h0 = r.normal(size=(1, H, P, N))
    y1, h1 = ssm.ssd_scan(x, dt, A, B, C, np.ones(H), h0)
    y2, h2 = ssm.ssd_chunked(x, dt, A, B, C, np.ones(H), h0, chunk_size=Q)
    assert np.abs(y1 - y2).max() <= 1e-9 * max(1.0, np.abs(y1).max())
    assert np.abs(h1 - h2).max() <= 1e-9 * max(1.0, np.abs(h1).max())


def test_selective_scan_is_the_chunked_scan(rng):
    x, dt, A, B, C, D = _inputs(rng)
    y1, _ = ssm.selective_scan(x, dt, A, B, C, D, chunk_size=8)
    y2, _ = ssm.ssm_scan(x, dt, A, B, C, D)
    np.testing.assert_allclose(y1, y2, atol=1e-10)


def test_survival():
    s = ssm.survival(0.5, -1.0, 5, token=1)
    np.testing.assert_allclose(s, [0, 1, np.exp(-0.5), np.exp(-1.0), np.exp(-1.5)])
    s = ssm.survival(np.array([0.0, 0.5, 0.0, 1.0]), -2.0, 4)          # Δ = 0 on a step: that step is skipped
    np.testing.assert_allclose(s, [1, np.exp(-1.0), np.exp(-1.0), np.exp(-3.0)])


@pytest.mark.parametrize("bad, arg", [
    (dict(x=np.zeros((2, 3))), "x"),
    (dict(dt=np.zeros((2, 5, 6))), "dt"),
    (dict(A=np.zeros((5, 4))), "A"),
    (dict(B=np.zeros((2, 7, 3))), "B"),
    (dict(D=np.zeros(5)), "D"),
    (dict(h0=np.zeros((2, 6, 5))), "h0"),
])
def test_bad_shapes_name_the_argument(rng, bad, arg):
    x, dt, A, B, C, D = _inputs(rng, L=7)
    kw = dict(x=x, dt=dt, A=A, B=B, C=C, D=D, h0=None)
    kw.update(bad)
    with pytest.raises(ValueError, match=rf"\b{arg}\b"):
        ssm.ssm_chunked(**kw)


@pytest.mark.parametrize("Q", [0, -3, 2.5, True])
def test_bad_chunk_size(rng, Q):
    x, dt, A, B, C, D = _inputs(rng, L=7)
    with pytest.raises(ValueError, match="chunk_size"):
        ssm.ssm_chunked(x, dt, A, B, C, D, chunk_size=Q)
    with pytest.raises(ValueError, match="chunk_size"):
        ssm.ssd_chunked(x[..., None], dt, -np.ones(6), B, C, chunk_size=Q)


def test_nan_and_negative_inputs(rng):
    x, dt, A, B, C, D = _inputs(rng, L=7)
    A2 = A.copy()
    A2[0, 0] = np.nan
    with pytest.raises(ValueError, match="A must be finite"):
        ssm.ssm_scan(x, dt, A2, B, C, D)
    with pytest.raises(ValueError, match="dt must be >= 0"):
        ssm.ssm_chunked(x, -dt, A, B, C, D)
    with pytest.raises(ValueError, match="length"):
        ssm.survival(0.1, -1.0, -1)
    with pytest.raises(ValueError, match="dt"):
        ssm.survival(np.inf, -1.0, 4)
    with pytest.raises(ValueError, match="A must be <= 0"):
        ssm.survival(0.1, 0.5, 4)
    with pytest.raises(ValueError, match="d_model"):
        ssm.init_ssm(0, 4)
    with pytest.raises(ValueError, match="d_state"):
        ssm.init_ssm(4, 2.0)
    p = ssm.init_ssm(4, 2)
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., Dm=4\)"):
        ssm.ssm_inputs(p, np.ones((3, 5)))
    with pytest.raises(ValueError, match="x must be finite"):
        ssm.ssm_inputs(p, np.full((3, 4), np.nan))


SCANS_1 = {"ssm_scan": ssm.ssm_scan, "ssm_chunked": lambda *a: ssm.ssm_chunked(*a, chunk_size=4),
           "selective_scan": lambda *a: ssm.selective_scan(*a, chunk_size=4)}
SCANS_2 = {"ssd_scan": ssm.ssd_scan, "ssd_chunked": lambda *a: ssm.ssd_chunked(*a, chunk_size=4)}


@pytest.mark.parametrize("scan", sorted(SCANS_1))
def test_positive_A_is_refused_by_every_mamba1_scan(rng, scan):
    """A > 0 used to be clamped by the chunked path (0.36-0.60 off the recurrence) and followed by the kernel."""
    x, dt, A, B, C, D = _inputs(rng, L=9)
    A = A.copy()
    A[2, 1] = 0.5
    with pytest.raises(ValueError, match=r"A must be <= 0 .* got 0\.5 at index \(2, 1\)"):
        SCANS_1[scan](x, dt, A, B, C, D)
    with pytest.raises(ValueError, match=r"A must be <= 0"):
        ssm.selective_scan_step(x[:, 0], dt[:, 0], A, B[:, 0], C[:, 0], D, np.zeros((2, 6, 4)))
    y, _ = SCANS_1[scan](x, dt, np.zeros_like(A), B, C, D)            # A = 0 (no decay) is allowed
    assert np.isfinite(y).all()


@pytest.mark.parametrize("scan", sorted(SCANS_2))
def test_positive_A_is_refused_by_every_mamba2_scan(scan):
    r = np.random.default_rng(3)
    x, dt, B, C = r.normal(size=(1, 9, 2, 3)), np.abs(r.normal(size=(1, 9, 2))), r.normal(size=(1, 9, 4)), \
        r.normal(size=(1, 9, 4))
    with pytest.raises(ValueError, match=r"A must be <= 0"):
        SCANS_2[scan](x, dt, np.array([-1.0, 0.25]), B, C)


@pytest.mark.parametrize("arg", ["x", "dt", "B", "C"])
@pytest.mark.parametrize("value", [np.inf, np.nan])
def test_inf_or_nan_at_a_late_step_is_refused(rng, arg, value):
    """One +inf at step 5 used to turn the chunked outputs of steps 0-4 into NaN (a non-causal leak)."""
    x, dt, A, B, C, D = _inputs(rng, L=8)
    kw = dict(x=x, dt=dt, A=A, B=B, C=C, D=D)
    kw[arg] = kw[arg].copy()
    kw[arg][0, 5, 0] = value
    for scan in (ssm.ssm_scan, ssm.ssm_chunked, ssm.selective_scan):
        with pytest.raises(ValueError, match=rf"{arg} must be finite, got NaN or inf at index \(0, 5, 0\)"):
            scan(**kw)


def test_survival_with_no_decay_keeps_the_token():
    """A = 0 is valid (documented: A <= 0): nothing decays; A > 0 would grow and is refused."""
    np.testing.assert_array_equal(ssm.survival(0.5, 0.0, 6, token=1), [0, 1, 1, 1, 1, 1])
    with pytest.raises(ValueError, match="A must be <= 0"):
        ssm.survival(0.5, 0.1, 6)
