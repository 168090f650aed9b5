"""trained.stats: the statistics that decide a claim from many training seeds (Wilson share, permutation p,
bootstrap interval, the verdict rules in their order)."""
import math
import re

import numpy as np
import pytest

from hybrid_lab.trained import stats


def _spread(mean, std, n, lo=-1.5, hi=1.5):
    """n accuracies with exactly this mean and (ddof-0) std, evenly spread."""
    z = np.linspace(lo, hi, n)
    z = (z - z.mean()) / z.std()
    return list(mean + std * z)


# ------------------------------------------------------------------------------------------------- wilson
def _wilson_closed(k, n, z=1.96):
    p = k / n
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return c - h, c + h


def test_wilson_known_values():
    z2n = 1.96 ** 2 / 10
    assert stats.wilson(0, 10) == (0.0, pytest.approx(z2n / (1 + z2n), abs=1e-12))
    assert stats.wilson(0, 10)[1] == pytest.approx(0.27754, abs=1e-5)
    assert stats.wilson(10, 10) == (pytest.approx(1 / (1 + z2n), abs=1e-12), 1.0)
    lo, hi = stats.wilson(5, 10)
    assert (lo, hi) == pytest.approx(_wilson_closed(5, 10), abs=1e-12)
    assert (lo, hi) == pytest.approx((0.23659, 0.76341), abs=1e-5)
    assert stats.wilson(3, 7, z=2.576) == pytest.approx(_wilson_closed(3, 7, 2.576), abs=1e-12)
    assert stats.wilson(np.int64(1), np.int64(4)) == pytest.approx(_wilson_closed(1, 4), abs=1e-12)


# ------------------------------------------------------------------------------------------------- first_step
def test_first_step():
    steps, curve = [0, 100, 200, 300], [0.1, 0.5, 0.9, 0.95]
    assert stats.first_step(steps, curve, 0.9) == 200                # >= level: reaching it counts
    assert stats.first_step(steps, curve, 0.05) == 0
    assert stats.first_step(steps, curve, 0.99) is None
    assert stats.first_step(np.array(steps), np.array(curve), 0.5) == 100
    assert type(stats.first_step(np.array(steps), curve, 0.5)) is int


# ------------------------------------------------------------------------------------------------- summarize
def test_summarize():
    acc = [0.95, 0.2, 0.91, 0.89, 1.0]
    s = stats.summarize(acc, steps=[300, None, 500, None, 100], level=0.9)
    assert s["n"] == 5 and s["learned"] == 3 and s["share"] == pytest.approx(0.6)
    assert (s["share_lo"], s["share_hi"]) == stats.wilson(3, 5)
    assert s["median_steps"] == 300
    assert s["acc_learned"] == pytest.approx((0.95 + 0.91 + 1.0) / 3)
    assert s["mean"] == pytest.approx(np.mean(acc)) and s["std"] == pytest.approx(np.std(acc))
    assert s["median"] == pytest.approx(0.91)
    assert stats.summarize(acc)["median_steps"] is None                        # no steps given
    none = stats.summarize([0.1, 0.2], steps=[None, None])
    assert none["learned"] == 0 and none["median_steps"] is None and math.isnan(none["acc_learned"])
    assert none["share_lo"] == 0.0
    # a learner without a recorded step is left out of the median, not counted as 0
    assert stats.summarize([0.95, 0.97], steps=[None, 40])["median_steps"] == 40


# ------------------------------------------------------------------------------------------------- permutation p
def test_permutation_p_exact_by_hand():
    # pooled {0.1, 0.2, 0.3, 0.5}, 6 splits of 2 vs 2; mean(A) - mean(B):
    # {.1,.2} -.25  {.1,.3} -.15  {.1,.5} +.05  {.2,.3} -.05  {.2,.5} +.15  {.3,.5} +.25
    kw = dict(min_seeds=1, level=0.05)
    assert stats.compare([0.1, 0.2], [0.3, 0.5], **kw)["p"] == pytest.approx(2 / 6)     # |d| >= .25: 2 of 6
    assert stats.compare([0.1, 0.3], [0.2, 0.5], **kw)["p"] == pytest.approx(4 / 6)     # |d| >= .15: 4 (ties count)
    assert stats.compare([0.1, 0.5], [0.2, 0.3], **kw)["p"] == pytest.approx(1.0)       # |d| >= .05: all 6
    # 1 vs 3: {.9}: +.7, {.1}: -.367, {.2}: -.233, {.3}: -.1 -> only the observed split is as extreme
    assert stats.compare([0.9], [0.1, 0.2, 0.3], **kw)["p"] == pytest.approx(1 / 4)


def test_permutation_p_monte_carlo():
    a, b = [0.95 + 0.004 * i for i in range(10)], [0.6 + 0.02 * i for i in range(10)]
    r = stats.compare(a, b)                         # C(20, 10) = 184,756 splits > n_perm: Monte Carlo, add-one
    assert 1 / 20001 <= r["p"] <= 4 / 20001
    assert (r["p"] * 20001) == pytest.approx(round(r["p"] * 20001))
    # a moderate case: Monte Carlo agrees with the exact enumeration of its C(12, 6) = 924 splits
    x, y = [0.9, 0.7, 0.8, 0.95, 0.6, 0.85], [0.7, 0.65, 0.8, 0.5, 0.75, 0.6]
    exact = stats.compare(x, y, min_seeds=1, level=0.5)["p"]
    mc = stats.compare(x, y, min_seeds=1, level=0.5, n_perm=900)["p"]
    assert exact * 924 == pytest.approx(round(exact * 924))
    assert abs(mc - exact) < 4 * math.sqrt(exact * (1 - exact) / 900) + 1 / 901


# ------------------------------------------------------------------------------------------------- verdicts
CLEAR_A = [0.95 + 0.004 * i for i in range(10)]
CLEAR_B = [0.55 + 0.03 * i for i in range(10)]


def test_bug_case_plateau_is_untestable():
    # the reported bug: 0.44 ± 0.11 vs 0.39 ± 0.01 around chance 0.387, nothing learned: no verdict either way
    a, b = _spread(0.44, 0.11, 10), _spread(0.39, 0.01, 10)
    assert np.mean(a) == pytest.approx(0.44) and np.std(a) == pytest.approx(0.11)
    r = stats.compare(a, b, chance=0.387)
    assert r["verdict"] == "untestable here: neither model learned the task", r
    assert stats.compare(a, b, expect="same", chance=0.387)["verdict"].startswith("untestable here:")
    # with many seeds the difference is significant, and still says nothing about the claim
    a40, b40 = _spread(0.44, 0.11, 40), _spread(0.39, 0.01, 40)
    r40 = stats.compare(a40, b40, chance=0.387)
    assert r40["p"] < 0.05 and r40["verdict"].startswith("untestable here:")


def test_both_at_chance_or_on_the_plateau():
    a, b = _spread(0.41, 0.01, 10), _spread(0.40, 0.01, 10)          # every seed <= 0.387 + 0.05
    r = stats.compare(a, b, chance=0.387, level=0.4)              # the plateau rule comes before "learned"
    assert r["verdict"] == "untestable here: both at chance / on the plateau"
    assert "0.387" in r["reason"]
    assert stats.compare(a, b, chance=0.387)["verdict"] == "untestable here: both at chance / on the plateau"
    # one seed off the plateau: the plateau rule no longer applies
    assert stats.compare(a[:-1] + [0.45], b, chance=0.387, level=0.4)["verdict"] != r["verdict"]


def test_both_at_ceiling():
    r = stats.compare([1.0] * 10, [1.0] * 10)
    assert r["verdict"] == "untestable here: both at ceiling" and r["diff"] == 0.0 and r["p"] == 1.0
    assert stats.compare([1.0] * 10, [0.995] * 10, expect="same")["verdict"] == "untestable here: both at ceiling"


def test_fewer_than_min_seeds():
    r = stats.compare([0.99, 0.98, 0.97], [0.1, 0.2, 0.3])
    assert r["verdict"] == "untestable here: fewer than 10 seeds" and "3 and 3" in r["reason"]
    assert stats.compare(CLEAR_A, CLEAR_B[:9])["verdict"] == "untestable here: fewer than 10 seeds"
    # 3 vs 3 passes min_seeds=3, but the smallest two-sided permutation p is 0.1: no verdict either way
    assert stats.compare(CLEAR_A[:3], CLEAR_B[:3], min_seeds=3)["verdict"].startswith("untestable here: too noisy")
    assert stats.compare([0.1] * 3, [0.1] * 3, min_seeds=5)["verdict"] == "untestable here: fewer than 5 seeds"


def test_better_reproduced_reversed_no_difference():
    r = stats.compare(CLEAR_A, CLEAR_B)
    assert r["verdict"] == "reproduced" and r["diff"] == pytest.approx(0.283) and r["p"] < 0.001
    assert r["interval"][0] > 0 and "10 vs 10 seeds" in r["reason"]
    assert r["summary_a"]["learned"] == 10 and r["summary_b"]["learned"] == 0
    rev = stats.compare(CLEAR_B, CLEAR_A)
    assert rev["verdict"] == "not reproduced: reversed" and rev["diff"] < 0
    # no difference detected, and the seeds are too noisy to rule out a gain: untestable, not "not reproduced"
    noisy_a, noisy_b = _spread(0.75, 0.12, 10), _spread(0.73, 0.12, 10)
    nd = stats.compare(noisy_a, noisy_b)
    iv = r"\[[-+]0\.\d\d, [-+]0\.\d\d\]"
    assert re.fullmatch(rf"untestable here: too noisy to decide \(p = \d\.\d\d, interval {iv}\)", nd["verdict"]), nd
    assert f"p = {nd['p']:.2f}" in nd["verdict"] and nd["p"] >= 0.05 and nd["interval"][1] > 0.05
    # no difference detected, and tight enough to exclude any gain above tol: not reproduced
    tight_a, tight_b = _spread(0.950, 0.005, 10), _spread(0.952, 0.005, 10)
    ng = stats.compare(tight_a, tight_b)
    assert re.fullmatch(rf"not reproduced: no gain \(p = \d\.\d\d, interval {iv}\)", ng["verdict"]), ng
    assert ng["interval"][1] <= 0.05 and ng["p"] >= 0.05
    # the boundary: the same seeds with tol just below the interval's top are too noisy
    assert stats.compare(tight_a, tight_b, tol=ng["interval"][1] / 2)["verdict"].startswith("untestable here: too")
    # alpha decides: a tiny alpha turns the clear case into undecided (its interval holds gains far above tol)
    assert stats.compare(CLEAR_A, CLEAR_B, alpha=1e-9)["verdict"].startswith("untestable here: too noisy")


def test_neither_learned():
    a, b = [0.7 + 0.01 * i for i in range(10)], [0.3 + 0.01 * i for i in range(10)]
    r = stats.compare(a, b)                                       # clearly separated, but neither reaches 0.9
    assert r["p"] < 0.001 and r["verdict"] == "untestable here: neither model learned the task"
    assert stats.compare(a, b, level=0.75)["verdict"] == "reproduced"          # one seed of a learned: testable


def test_same_branches():
    tight_a, tight_b = _spread(0.95, 0.005, 10), _spread(0.952, 0.005, 10)
    r = stats.compare(tight_a, tight_b, expect="same")
    assert r["verdict"] == "reproduced (equal within ±0.05)", r
    lo, hi = r["interval"]
    assert -0.05 <= lo < r["diff"] < hi <= 0.05
    assert stats.compare(tight_a, tight_b, expect="same", tol=0.001)["verdict"].startswith("untestable here: too")
    differ = stats.compare(CLEAR_A, [0.85 + 0.01 * i for i in range(10)], expect="same")
    assert re.fullmatch(r"not reproduced: differ by 0\.\d\d \(p = \S+\)", differ["verdict"]) and differ["p"] < 0.05
    assert differ["verdict"] == f"not reproduced: differ by {abs(differ['diff']):.2f} (p = {differ['p']:.2g})"
    noisy = stats.compare(_spread(0.75, 0.12, 10), _spread(0.73, 0.12, 10), expect="same")
    assert re.fullmatch(r"untestable here: too noisy to show equality \(interval \[[-+]0\.\d\d, [-+]0\.\d\d\]\)",
                        noisy["verdict"]), noisy
    # a "same" claim needs a baseline that learned, even when a did
    base = stats.compare(CLEAR_A, [0.8 + 0.005 * i for i in range(10)], expect="same")
    assert base["verdict"] == "untestable here: the baseline did not learn the task"
    assert stats.compare([0.5] * 10, [0.5] * 10, expect="same")["verdict"] == \
        "untestable here: neither model learned the task"


def test_compare_is_deterministic():
    noisy_a, noisy_b = _spread(0.82, 0.08, 12), _spread(0.8, 0.08, 11)
    for expect in ("better", "same"):
        first = stats.compare(noisy_a, noisy_b, expect=expect, seed=3)
        assert repr(first) == repr(stats.compare(noisy_a, noisy_b, expect=expect, seed=3))
        assert repr(first) == repr(stats.compare(np.array(noisy_a), tuple(noisy_b), expect=expect, seed=3))
    assert set(first) == {"verdict", "reason", "diff", "p", "interval", "summary_a", "summary_b"}


def test_verdict_from_means():
    f = stats.verdict_from_means
    assert f((1.0, 0.0), (0.995, 0.004)) == "untestable here: both at ceiling"
    assert f((0.42, 0.11), (0.39, 0.01), chance=0.387) == "untestable here: both at chance / on the plateau"
    # the bug case's means: 0.44 > 0.387 + 0.05, so the means alone cannot call it; never "reproduced"
    assert f((0.44, 0.11), (0.39, 0.01), chance=0.387) == "see compare(): per-seed values needed"
    assert f((0.9, 0.02), (0.5, 0.05), n_seeds=3) == "untestable here: fewer than 10 seeds"
    assert f((0.9, 0.02), (0.5, 0.05), n_seeds=3, min_seeds=3) == "see compare(): per-seed values needed"
    assert f((0.9, 0.02), (0.5, 0.05), expect="same") == "see compare(): per-seed values needed"
    assert f((0.9, 0.02), (0.5, 0.05), chance=0.387) == "see compare(): per-seed values needed"
    # the same wording as compare()
    assert f((1.0, 0.0), (1.0, 0.0)) == stats.compare([1.0] * 10, [1.0] * 10)["verdict"]


# ------------------------------------------------------------------------------------------------- bad input
GOOD = [0.9, 0.8]
BAD_ACC = [[math.nan, 0.5], [0.5, math.inf], [1.5, 0.5], [0.5, -0.1], [], (), [True, 0.5], [0.5, "0.5"], [[0.5]],
           [0.5, None], [0.5, 1j], None, "0.9", 0.9, {0.9: 1}, np.array([True, False]), np.array([[0.5, 0.6]]),
           np.array([0.5, np.nan]), np.array(["0.5"]), np.array([], dtype=float)]


@pytest.mark.parametrize("bad", BAD_ACC, ids=repr)
def test_bad_accuracies(bad):
    with pytest.raises(ValueError, match=r"^acc"):
        stats.summarize(bad)
    with pytest.raises(ValueError, match=r"^a\b"):
        stats.compare(bad, GOOD)
    with pytest.raises(ValueError, match=r"^b\b"):
        stats.compare(GOOD, bad)


@pytest.mark.parametrize("kwargs, name", [
    (dict(k=11, n=10), "k"), (dict(k=-1, n=10), "k"), (dict(k=2.0, n=10), "k"), (dict(k=True, n=10), "k"),
    (dict(k=0, n=0), "n"), (dict(k=1, n=10.0), "n"), (dict(k=1, n=math.nan), "n"), (dict(k=1, n="10"), "n"),
    (dict(k=1, n=10, z=0), "z"), (dict(k=1, n=10, z=-1.96), "z"), (dict(k=1, n=10, z=math.nan), "z"),
])
def test_bad_wilson(kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        stats.wilson(**kwargs)


@pytest.mark.parametrize("steps, curve, level, name", [
    ([0, 100], [0.5], 0.9, "curve"), ([], [], 0.9, "eval_steps"), ([100, 100], [0.5, 0.6], 0.9, "eval_steps"),
    ([200, 100], [0.5, 0.6], 0.9, "eval_steps"), ([0.0, 100.0], [0.5, 0.6], 0.9, "eval_steps"),
    ([-100, 0], [0.5, 0.6], 0.9, "eval_steps"), ([True, 2], [0.5, 0.6], 0.9, "eval_steps"),
    ([0, 100], [0.5, math.nan], 0.9, "curve"), ([0, 100], [0.5, 1.2], 0.9, "curve"),
    ([0, 100], [0.5, 0.6], 0, "level"), ([0, 100], [0.5, 0.6], 1.1, "level"), ([0, 100], [0.5, 0.6], "0.9", "level"),
    ([0, 100], [0.5, 0.6], math.nan, "level"), ([0, 100], [0.5, 0.6], True, "level"),
])
def test_bad_first_step(steps, curve, level, name):
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        stats.first_step(steps, curve, level)


@pytest.mark.parametrize("steps", [[100], [100, 200, 300], [100, 2.5], [100, -1], [100, True], [100, math.nan],
                                   "100", np.array([1.0, 2.0]), 100])
def test_bad_steps(steps):
    with pytest.raises(ValueError, match=r"^steps"):
        stats.summarize(GOOD, steps=steps)


@pytest.mark.parametrize("kwargs, name", [
    (dict(expect="worse"), "expect"), (dict(expect=1), "expect"),
    (dict(level=0), "level"), (dict(level=1.5), "level"), (dict(level=math.nan), "level"),
    (dict(chance=1.0), "chance"), (dict(chance=-0.1), "chance"), (dict(chance="0.3"), "chance"),
    (dict(ceiling=0), "ceiling"), (dict(ceiling=1.01), "ceiling"),
    (dict(min_seeds=0), "min_seeds"), (dict(min_seeds=2.5), "min_seeds"), (dict(min_seeds=True), "min_seeds"),
    (dict(tol=0), "tol"), (dict(tol=1), "tol"), (dict(alpha=0), "alpha"), (dict(alpha=1.0), "alpha"),
    (dict(alpha=math.inf), "alpha"), (dict(n_perm=0), "n_perm"), (dict(n_perm=100.0), "n_perm"),
    (dict(seed=-1), "seed"), (dict(seed=None), "seed"), (dict(seed=1.5), "seed"),
])
def test_bad_compare_options(kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        stats.compare(CLEAR_A, CLEAR_B, **kwargs)


@pytest.mark.parametrize("kwargs, name", [
    (dict(better=0.9), "better"), (dict(better=(0.9,)), "better"), (dict(better=(math.nan, 0.1)), "better"),
    (dict(worse=(0.5, 1.5)), "worse"), (dict(worse=(True, 0.1)), "worse"), (dict(worse=("0.5", 0.1)), "worse"),
    (dict(expect="maybe"), "expect"), (dict(chance=1.0), "chance"), (dict(ceiling=0), "ceiling"),
    (dict(n_seeds=0), "n_seeds"), (dict(n_seeds=3.0), "n_seeds"), (dict(min_seeds=0), "min_seeds"),
])
def test_bad_verdict_from_means(kwargs, name):
    args = dict(better=(0.9, 0.02), worse=(0.5, 0.05)) | kwargs
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        stats.verdict_from_means(**args)


def test_messages_say_what_was_expected_and_given():
    with pytest.raises(ValueError, match=r"acc\[1\] must be an accuracy .*\[0, 1\].*got nan"):
        stats.summarize([0.5, math.nan])
    with pytest.raises(ValueError, match=r"a\[0\] must be an accuracy.*got True"):
        stats.compare([True] * 10, CLEAR_B)
    with pytest.raises(ValueError, match=r"k must be <= n = 10.*got 11"):
        stats.wilson(11, 10)
    with pytest.raises(ValueError, match=r"level must lie in \(0, 1\], got 0"):
        stats.summarize(GOOD, level=0)
    with pytest.raises(ValueError, match=r"steps must have one entry per seed of acc \(2\), got 1"):
        stats.summarize(GOOD, steps=[3])


# ------------------------------------------------------------------------------------------------- learners only
_LEARN_A = [0.80, 0.82, 0.85, 0.81, 0.79, 0.30, 0.30, 0.31, 0.30, 0.29]
_LEARN_B = [0.60, 0.62, 0.61, 0.59, 0.63, 0.30, 0.30, 0.31, 0.30, 0.29]


def _mask(acc):
    return [x > 0.5 for x in acc]


def test_compare_learners_compares_only_the_seeds_that_learned():
    out = stats.compare_learners(_LEARN_A, _LEARN_B, _mask(_LEARN_A), _mask(_LEARN_B))
    assert out["verdict"] == "reproduced"
    assert out["learned_a"]["k"] == out["learned_b"]["k"] == 5
    assert out["learned_a"]["acc"] == pytest.approx(np.mean(_LEARN_A[:5]))
    assert out["diff"] == pytest.approx(np.mean(_LEARN_A[:5]) - np.mean(_LEARN_B[:5]))
    assert out["p"] == pytest.approx(2 / 252)                  # every split of 5 vs 5: the two extremes
    assert (out["learned_a"]["lo"], out["learned_a"]["hi"]) == pytest.approx(stats.wilson(5, 10))
    # over all seeds the same data is a mean difference of 0.1, which counts the non-learners too
    assert stats.compare(_LEARN_A, _LEARN_B)["diff"] == pytest.approx(out["diff"] / 2)


def test_compare_learners_is_untestable_with_too_few_learners():
    few = [True] * 4 + [False] * 6
    out = stats.compare_learners(_LEARN_A, _LEARN_B, _mask(_LEARN_A), few)
    assert out["verdict"] == "untestable here: fewer than 5 seeds learned"
    assert "4 of 10" in out["reason"] and np.isnan(out["p"])
    assert stats.compare_learners(_LEARN_A, _LEARN_B, _mask(_LEARN_A), few, min_learners=4)["verdict"] == "reproduced"
    none = stats.compare_learners(_LEARN_A, _LEARN_B, [False] * 10, [False] * 10)
    assert np.isnan(none["learned_a"]["acc"]) and none["learned_a"]["hi"] < 0.35


def test_compare_learners_keeps_the_ceiling_and_plateau_rules():
    top = [1.0] * 6 + [0.3] * 4
    assert stats.compare_learners(top, top, _mask(top), _mask(top))["verdict"] == "untestable here: both at ceiling"
    flat = [0.26, 0.27, 0.25, 0.26, 0.28, 0.1, 0.1, 0.1, 0.1, 0.1]
    out = stats.compare_learners(flat, flat, [True] * 5 + [False] * 5, [True] * 5 + [False] * 5, chance=0.25)
    assert out["verdict"] == "untestable here: both at chance / on the plateau"
    same = stats.compare_learners(_LEARN_A, _LEARN_A, _mask(_LEARN_A), _mask(_LEARN_A), "same")
    assert same["verdict"].startswith(("reproduced", stats.UNTESTABLE)) and same["interval"] is not None


@pytest.mark.parametrize("kwargs, name", [
    (dict(learned_a=[True] * 9), "learned_a"),                  # one per seed
    (dict(learned_b=[1] * 10), "learned_b"),                    # bools, not ints
    (dict(learned_a=np.ones(10)), "learned_a"),                 # a float array
    (dict(learned_a="yes"), "learned_a"),
    (dict(min_learners=0), "min_learners"),
    (dict(chance=1.0), "chance"),
    (dict(alpha=0.0), "alpha"),
    (dict(expect="worse"), "expect"),
    (dict(a=[0.5] * 9 + [1.5]), "a[9]"),
])
def test_bad_compare_learners(kwargs, name):
    args = dict(dict(a=_LEARN_A, b=_LEARN_B, learned_a=_mask(_LEARN_A), learned_b=_mask(_LEARN_B)), **kwargs)
    with pytest.raises(ValueError, match=re.escape(name)):
        stats.compare_learners(**args)


# ------------------------------------------------------------------------------------------------- fisher / shares
def test_fisher_exact_known_values():
    # Fisher's tea tasting (3 of 4 vs 1 of 4) and two textbook tables, [[8, 2], [1, 5]] and [[1, 9], [11, 3]]
    assert stats.fisher_exact(3, 4, 1, 4) == pytest.approx(34 / 70, abs=1e-12)
    assert stats.fisher_exact(8, 10, 1, 6) == pytest.approx(0.034965034965035, abs=1e-12)
    assert stats.fisher_exact(1, 10, 11, 14) == pytest.approx(0.0027594561852200836, abs=1e-12)
    # symmetric in the two groups and in success / failure; one possible split gives 1
    assert stats.fisher_exact(4, 20, 16, 20) == stats.fisher_exact(16, 20, 4, 20) == stats.fisher_exact(16, 20, 4, 20)
    assert stats.fisher_exact(0, 5, 0, 7) == stats.fisher_exact(5, 5, 7, 7) == 1.0
    # the p is the sum of the hypergeometric probabilities <= the observed one: by hand for 2 of 3 vs 0 of 3
    probs = [math.comb(3, x) * math.comb(3, 2 - x) / math.comb(6, 2) for x in range(3)]   # 3/15, 9/15, 3/15
    assert stats.fisher_exact(2, 3, 0, 3) == pytest.approx(probs[0] + probs[2], abs=1e-12)


def test_compare_shares_verdicts():
    out = stats.compare_shares(4, 20, 16, 20, alpha=0.05 / 4)
    assert out["verdict"] == "differ (p = 0.00036 < 0.0125)" and out["a"] == stats.wilson(4, 20)
    assert stats.compare_shares(4, 20, 1, 20, alpha=0.0125)["verdict"] == "no difference detected (p = 0.34 >= 0.0125)"
    assert stats.compare_shares(0, 20, 0, 20)["verdict"] == "untestable here: no seed of either learned"
    assert stats.compare_shares(20, 20, 10, 10)["verdict"] == "untestable here: every seed of either learned"
    # the same split is significant at 0.05 and not at 0.05 / 4
    assert stats.compare_shares(8, 10, 1, 6)["verdict"].startswith("differ")
    assert stats.compare_shares(8, 10, 1, 6, alpha=0.0125)["verdict"].startswith("no difference")


@pytest.mark.parametrize("args, name", [((5, 4, 1, 4), "ka"), ((1, 4, 5, 4), "kb"), ((1, 0, 1, 4), "na"),
                                        ((1, 4, -1, 4), "kb"), ((1.5, 4, 1, 4), "ka")])
def test_bad_fisher_exact(args, name):
    with pytest.raises(ValueError, match=name):
        stats.fisher_exact(*args)
