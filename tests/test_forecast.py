import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hybrid_lab.core.optim import Adam
from hybrid_lab.models.forecast import (SyntheticModel, candidate_mask, evaluate_selectors, forecast_logits,
                                        forecast_loss_and_grad, init_params, make_setup, oracle_blocks,
                                        pool_fine_to_coarse, rest_bucket_kl, rest_bucket_partition, teacher_needle_hits,
                                        teacher_scores, teacher_topk, train_forecast, train_step)


def test_worked_example_partitions_and_kl():
    """A worked example of the rest-bucket KL (SparDA §4.2, Eq. 7): teacher (0.4, 0.3, 0.2, 0.1), student
    (0.35, 0.25, 0.15, 0.25), top-2 plus the rest."""
    t = np.array([0.4, 0.3, 0.2, 0.1])
    s = np.array([0.35, 0.25, 0.15, 0.25])
    np.testing.assert_allclose(rest_bucket_partition(t, [0, 1]), [0.4, 0.3, 0.3])
    np.testing.assert_allclose(rest_bucket_partition(s, [0, 1]), [0.35, 0.25, 0.4])
    loss, grad = rest_bucket_kl(t, np.log(s), 2)
    hand = 0.4 * math.log(0.4 / 0.35) + 0.3 * math.log(0.3 / 0.25) + 0.3 * math.log(0.3 / 0.4)
    assert loss == pytest.approx(hand, abs=1e-12)
    assert loss == pytest.approx(0.0218044, abs=1e-6)
    np.testing.assert_allclose(grad, [-0.05, -0.05, 0.0375, 0.0625], atol=1e-12)


def test_unnormalized_teacher_is_renormalized():
    t = np.array([0.4, 0.3, 0.2, 0.1])
    z = np.log([0.35, 0.25, 0.15, 0.25])
    assert rest_bucket_kl(2 * t, z, 2)[0] == pytest.approx(rest_bucket_kl(t, z, 2)[0])   # a sum of G = 2 softmaxes


def test_kl_is_zero_iff_partitions_match():
    t = np.array([0.4, 0.3, 0.2, 0.1])
    same = np.array([0.4, 0.3, 0.05, 0.25])          # same (0.4, 0.3, 0.3), rest split differently
    assert rest_bucket_kl(t, np.log(same), 2)[0] == pytest.approx(0.0, abs=1e-14)
    other = np.array([0.4, 0.3, 0.05, 0.26])
    assert rest_bucket_kl(t, np.log(other / other.sum()), 2)[0] > 1e-6
    # plain top-k renormalization would miss mass leaking into the rest bucket: ours does not
    leak = np.array([0.04, 0.03, 0.5, 0.43])
    assert rest_bucket_kl(t, np.log(leak), 2)[0] > 0.5


def _fd(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += eps
        xm[i] -= eps
        g[i] = (f(xp) - f(xm)) / (2 * eps)
    return g


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 1000), k=st.integers(1, 6))
def test_rest_bucket_gradient_matches_finite_differences(seed, k):
    rng = np.random.default_rng(seed)
    t = rng.random((3, 7)) ** 3
    z = rng.normal(size=(3, 7))
    mask = rng.random((3, 7)) < 0.7
    mask[0] = False                                   # a row without candidates is ignored
    mask[1, :2] = True
    loss, g = rest_bucket_kl(t, z, k, mask)
    num = _fd(lambda zz: rest_bucket_kl(t, zz, k, mask)[0], z)
    np.testing.assert_allclose(g, num, atol=1e-7)
    assert loss >= -1e-12


T4 = np.array([0.4, 0.3, 0.2, 0.1])
Z4 = np.log([0.35, 0.25, 0.15, 0.25])


def test_issue_list_rest_bucket_bad_input():
    """NaN became [0.5, 0.5], negative mass was accepted, a NaN/inf logit gave a finite loss, a duplicate
    sel double-counted, an out-of-range sel raised IndexError. Each is now a ValueError naming the argument."""
    with pytest.raises(ValueError, match="p must be finite"):
        rest_bucket_partition(np.array([np.nan, 1.0]), [0])
    with pytest.raises(ValueError, match="p must be >= 0"):
        rest_bucket_partition(np.array([-0.5, 1.5]), [1])
    for bad in (np.nan, np.inf, -np.inf):
        with pytest.raises(ValueError, match="student_logits must be finite"):
            rest_bucket_kl(T4, np.where(np.arange(4) == 2, bad, Z4), 2)
    with pytest.raises(ValueError, match="sel must not list a position twice"):
        rest_bucket_partition(T4, [0, 0])
    with pytest.raises(ValueError, match="sel must not list a position twice"):
        rest_bucket_kl(T4, Z4, 2, sel=np.array([1, 1]))
    with pytest.raises(ValueError, match="sel entries must lie in"):
        rest_bucket_partition(T4, [0, 4])
    with pytest.raises(ValueError, match="sel entries must lie in"):
        rest_bucket_partition(T4, [-2])


def test_rest_bucket_documented_edge_cases():
    np.testing.assert_allclose(rest_bucket_partition(np.zeros(3), [0, -1]), [0, 0, 1])    # nothing to split: "rest"
    np.testing.assert_allclose(rest_bucket_partition(T4, [-1, -1]), [0, 0, 1])             # empty slots hold 0
    # a row without candidates is left out of the mean (both partitions are [0, ..., 1]) and gets no gradient
    loss, g = rest_bucket_kl(np.stack([T4, T4]), np.stack([Z4, Z4]), 2, mask=np.array([[True], [False]]))
    assert loss == pytest.approx(rest_bucket_kl(T4, Z4, 2)[0]) and (g[1] == 0).all()


MODEL = SyntheticModel(n_layers=2, D=8, Hkv=1, G=2, d=8, n_topics=4, seed=0)
DATA = MODEL.sample(n_seq=1, T=256, seed=1, n_needles=1, span=20)
SETUP = make_setup(DATA, "fine", q_pos=np.array([200, 255]), k=2)
Q, K = DATA.Q[1][:, [200, 255]], DATA.K[1]


@pytest.mark.parametrize("call, match", [
    (lambda: rest_bucket_kl(np.ones(4), np.ones(3), 2), "same shape"),
    (lambda: rest_bucket_kl(np.ones(4), np.ones(4), 5), "k=5 is larger"),
    (lambda: rest_bucket_kl(np.ones(4), np.ones(4), 0), "k must be"),
    (lambda: rest_bucket_kl(np.ones(4), np.ones(4), 2.0), "k must be"),
    (lambda: rest_bucket_kl(-np.ones(4), np.ones(4), 2), "teacher must be >= 0"),
    (lambda: rest_bucket_kl(np.array([1.0, np.inf]), np.ones(2), 1), "teacher must be finite"),
    (lambda: rest_bucket_kl(np.ones(4), np.ones(4), 2, mask=np.ones(4)), "mask must be a bool"),
    (lambda: rest_bucket_kl(np.ones(4), np.ones(4), 2, mask=np.ones(3, bool)), "mask must broadcast"),
    (lambda: rest_bucket_kl(np.ones(4), np.ones(4), 2, sel=np.array([0, 1, 2])), "sel must have shape"),
    (lambda: rest_bucket_kl(np.ones(4), np.ones(4), 2, sel=np.array([0.0, 1.0])), "sel must be an integer array"),
    (lambda: rest_bucket_partition(np.ones((2, 4)), [[0], [1], [2]]), "sel must have shape"),
    (lambda: rest_bucket_partition(np.float64(1.0), []), "scalar"),
    (lambda: teacher_topk(np.array([1.0, np.nan]), 1), "teacher must be finite"),
    (lambda: teacher_topk(np.ones(3), 0), "k must be"),
    (lambda: candidate_mask(np.array([-1]), 30), "q_pos"),
    (lambda: candidate_mask(np.array([100.0]), 30), "q_pos"),
    (lambda: candidate_mask(np.array([100]), -1), "Nc"),
    (lambda: candidate_mask(np.array([100]), 30, block_size=0), "block_size"),
    (lambda: candidate_mask(np.array([100]), 30, window=8, stride=16), "stride"),
    (lambda: pool_fine_to_coarse(np.ones(20), 5), "too few"),
    (lambda: pool_fine_to_coarse(np.array([1.0, np.nan]), 0), "scores_f must be finite"),
    (lambda: pool_fine_to_coarse(np.ones(99), 5, fine=(64, 1)), "fit in the coarse window"),
    (lambda: pool_fine_to_coarse(np.ones(99), 5, fine=(2, 0)), "stride"),
    (lambda: teacher_scores(np.ones((1, 1, 2, 4)), np.ones((1, 64, 1, 4)), np.array([63]), kind="medium"), "kind"),
    (lambda: teacher_scores(Q, K, np.array([200, 256])), "q_pos"),
    (lambda: teacher_scores(Q, K, np.array([200.0, 255.0])), "q_pos"),
    (lambda: teacher_scores(np.full_like(Q, np.nan), K, np.array([200, 255])), "q must be finite"),
    (lambda: teacher_scores(Q, K, np.array([200, 255]), scale=-1.0), "scale"),
    (lambda: forecast_logits(np.ones((1, 2, 8)), np.ones((8, 2, 4)), np.ones((1, 3, 3, 4))), "shapes disagree"),
    (lambda: forecast_logits(np.full((1, 2, 8), np.nan), np.ones((8, 2, 4)), np.ones((1, 3, 2, 4))), "x_src"),
    (lambda: forecast_logits(np.ones((1, 2, 8)), np.ones((8, 2, 0)), np.ones((1, 3, 2, 0))), "head width"),
    (lambda: forecast_logits(np.ones((1, 2, 8)), np.ones((8, 2, 4)), np.ones((1, 3, 2, 4)), scale=0), "scale"),
    (lambda: SyntheticModel(D=0), "D"),
    (lambda: SyntheticModel(noise=-0.1), "noise"),
    (lambda: SyntheticModel(needle_logit=np.inf), "needle_logit"),
    (lambda: SyntheticModel(d=8, n_topics=8), "2·n_topics"),
    (lambda: MODEL.sample(T=10, n_needles=4), "distinct needles"),
    (lambda: MODEL.sample(T=100, span=40, first=64), "span"),
    (lambda: MODEL.sample(n_seq=0), "n_seq"),
    (lambda: make_setup({"K": []}), "SyntheticData"),
    (lambda: make_setup(DATA, q_pos=np.array([256])), "q_pos"),
    (lambda: make_setup(DATA, k=0), "k"),
    (lambda: forecast_loss_and_grad({"W0": np.zeros((8, 1, 8))}, SETUP), "'W1' is missing"),
    (lambda: forecast_loss_and_grad({"W0": np.zeros((8, 1, 8)), "W1": np.full((8, 1, 8), np.nan)}, SETUP), "W"),
    (lambda: init_params(MODEL, std=0.0), "std"),
    (lambda: train_forecast(MODEL, SETUP, steps=0), "steps"),
    (lambda: train_forecast(MODEL, SETUP, lr=np.nan), "lr"),
    (lambda: train_forecast(MODEL, SETUP, weight_decay=-1.0), "weight_decay"),
    (lambda: train_step(init_params(MODEL), SETUP, Adam(init_params(MODEL))), "optimizer of params"),
    (lambda: train_step(init_params(MODEL), SETUP, None), "optimizer of params"),
    (lambda: oracle_blocks(Q, K, np.array([200, 300]), 1), "q_pos"),
    (lambda: oracle_blocks(Q, K, np.array([200, 255]), 1, block_size=0), "block_size"),
    (lambda: evaluate_selectors(DATA, {}, np.array([255]), topk=0), "topk"),
    (lambda: evaluate_selectors(DATA, {"x": {"W0": np.zeros((8, 1, 8))}}, np.array([255])), "'W1' is missing"),
    (lambda: evaluate_selectors(DATA, {"x": {"W0": 0, "W1": 0}}, np.array([255])), "W0"),
    (lambda: evaluate_selectors(DATA, {}, np.array([-1])), "q_pos"),
    (lambda: teacher_needle_hits(MODEL, DATA, 2, 0, np.array([255]), "fine"), "layer"),
    (lambda: teacher_needle_hits(MODEL, DATA, 1, 1, np.array([255]), "fine"), "group"),
    (lambda: teacher_needle_hits(MODEL, DATA, 1, 0, np.array([255]), "fine", seq=1), "seq"),
    (lambda: teacher_needle_hits(MODEL, DATA, 1, 0, np.array([10]), "fine"), "0 of 0"),
])
def test_bad_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_pool_fine_to_coarse_keeps_a_sharp_peak():
    sf = np.zeros(99)                                 # (2, 1) grid of 100 tokens
    sf[40] = 1.0                                      # tokens 40, 41
    sc = pool_fine_to_coarse(sf, 5)                   # (32, 16) windows [0,32) [16,48) [32,64) [48,80) [64,96)
    np.testing.assert_array_equal(sc, [0, 1, 1, 0, 0])


def test_candidate_mask_excludes_future_init_and_local():
    m = candidate_mask(np.array([500]), 30)           # blocks 6, 7 are local: tokens >= 384 excluded
    starts = np.arange(30) * 16
    np.testing.assert_array_equal(m[0], (starts >= 64) & (starts + 32 <= 384))


def test_fine_teacher_preserves_the_needle_coarse_does_not():
    model = SyntheticModel(seed=0)
    data = model.sample(n_seq=1, T=1024, seed=3)
    l, g = 1, 0
    q_pos = np.arange(700, 1024, 3)
    q = data.Q[l][:, q_pos]
    mask = candidate_mask(q_pos, 63)[None, :, None, :]
    hits = {}
    for kind in ("fine", "coarse"):
        sc = np.where(mask, teacher_scores(q, data.K[l], q_pos, kind), -np.inf)[0, :, g]   # (T, Nc)
        best = np.argmax(sc, axis=-1) * 16                           # window start of the top position
        target = model.perm[l, g][data.topics[0, q_pos]]
        needles = data.needles[l][0, g][target]                      # (T, n_needles)
        inside = (needles >= best[:, None]) & (needles < best[:, None] + 32) & (needles < q_pos[:, None] - 128)
        hits[kind] = inside.any(-1).mean()
    assert hits["fine"] > 0.8 and hits["fine"] > hits["coarse"] + 0.3


def test_forecast_gradient_matches_finite_differences():
    model = SyntheticModel(n_layers=2, D=8, Hkv=1, G=2, d=8, n_topics=4, seed=0)
    data = model.sample(n_seq=1, T=400, seed=1, n_needles=1, span=20)
    setup = make_setup(data, "fine", q_pos=np.arange(300, 400, 13), k=2)
    params = init_params(model, seed=1, std=0.3)
    loss, grads = forecast_loss_and_grad(params, setup)
    assert loss > 0
    for name in params:
        def f(w, name=name):
            p = dict(params)
            p[name] = w
            return forecast_loss_and_grad(p, setup)[0]
        np.testing.assert_allclose(grads[name], _fd(f, params[name]), atol=1e-7)


def test_train_step_is_one_step_of_train_forecast():
    """train_step: loss and unclipped gradients of forecast_loss_and_grad, the gradients clipped together to
    max_norm, one Adam step; train_forecast is a loop of it (same losses, same parameters)."""
    model = SyntheticModel(n_layers=2, D=8, Hkv=1, G=2, d=8, n_topics=4, seed=0)
    setup = make_setup(model.sample(n_seq=1, T=400, seed=1, n_needles=1, span=20), "fine",
                       q_pos=np.arange(300, 400, 13), k=2)
    params = init_params(model, seed=0)
    opt = Adam(params, lr=0.05, betas=(0.9, 0.95), eps=1e-6)
    hist = []
    for step in range(3):
        before = {k: v.copy() for k, v in params.items()}
        want_loss, want_grads = forecast_loss_and_grad(before, setup)
        loss, grads = train_step(params, setup, opt, max_norm=0.01)
        assert loss == want_loss and all(np.array_equal(grads[k], want_grads[k]) for k in grads)
        norm = math.sqrt(math.fsum(float(np.sum(g * g)) for g in grads.values()))
        assert norm > 0.01                                        # so clipping is on
        assert not any(np.array_equal(params[k], before[k]) for k in params)
        hist.append(loss)
    trained, h = train_forecast(model, setup, steps=3, lr=0.05, max_norm=0.01, show_progress=False)
    np.testing.assert_array_equal(h["loss"], hist)
    assert all(np.array_equal(trained[k], params[k]) for k in params)


def test_training_lowers_the_loss_and_fine_teacher_beats_coarse_on_recall():
    model = SyntheticModel(seed=0)
    train = model.sample(n_seq=2, T=1024, seed=1)
    test = model.sample(n_seq=2, T=1024, seed=2)
    heads = {}
    for kind in ("coarse", "fine"):
        setup = make_setup(train, kind, q_pos=np.arange(512, 1024, 4))
        params, hist = train_forecast(model, setup, steps=120, lr=0.05, show_progress=False)
        assert hist["loss"][-1] < 0.5 * hist["loss"][0]
        heads[kind] = params
    res = evaluate_selectors(test, heads, np.arange(512, 1024, 8), topk=2)
    fine, coarse = np.mean(res["fine"]["recall"]), np.mean(res["coarse"]["recall"])
    assert fine > coarse + 0.05
    assert np.mean(res["fine"]["error"]) < np.mean(res["coarse"]["error"])


def test_a_fine_grid_one_window_short_is_refused():
    """A fine grid that stops one window before the last coarse window ends used to be max-pooled over the fine
    windows it had (a silently different score); a top-0 oracle used to return the init + local blocks."""
    rng = np.random.default_rng(5)
    sf = rng.normal(size=(2, 255))                                      # T = 256: 255 fine (2, 1) windows, Nc = 15
    full = pool_fine_to_coarse(sf, 15)
    with pytest.raises(ValueError, match="Nf=254 fine positions: too few for Nc=15"):
        pool_fine_to_coarse(sf[:, :254], 15)
    longer = np.concatenate([sf, rng.normal(size=(2, 3))], axis=1)     # positions past the last window: not read
    np.testing.assert_array_equal(pool_fine_to_coarse(longer, 15), full)
    with pytest.raises(ValueError, match="without a fine window"):
        pool_fine_to_coarse(np.ones(3), 3, fine=(8, 8), coarse=(10, 10))   # [10, 20) holds no [8p, 8p + 8)
    q, k = rng.normal(size=(1, 2, 2, 8)), rng.normal(size=(1, 256, 1, 8))
    with pytest.raises(ValueError, match="topk must be an integer >= 1"):
        oracle_blocks(q, k, np.array([200, 255]), topk=0)
