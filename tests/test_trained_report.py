"""The verdicts notebook 10 prints: untestable at ceiling, on the plateau and with too few seeds; decided from the
per-seed accuracies otherwise; and the tables and probes they come from."""
import numpy as np
import pytest

from hybrid_lab.trained import report, stats, tasks, train

RES = report.load_results()


@pytest.mark.parametrize("better, worse, kw, want", [
    ((1.0, 0.0), (0.995, 0.005), {}, "untestable here: both at ceiling"),
    ((0.40, 0.01), (0.39, 0.02), {"chance": 0.387}, "untestable here: both at chance / on the plateau"),
    ((0.44, 0.11), (0.39, 0.02), {"chance": 0.387, "n_seeds": 3}, "untestable here: fewer than 10 seeds"),
])
def test_verdict_is_untestable_at_ceiling_on_the_plateau_and_with_few_seeds(better, worse, kw, want):
    for expect in ("better", "same"):
        assert report.verdict(better, worse, expect, **kw) == want


def test_verdict_still_decides_a_clear_difference_with_enough_seeds():
    assert report.verdict((0.9, 0.02), (0.5, 0.05), "better", chance=0.25, n_seeds=10) == "reproduced"
    assert report.verdict((0.5, 0.02), (0.9, 0.05), "better", n_seeds=10) == "not reproduced: reversed"
    assert report.verdict((np.nan, 0.0), (0.5, 0.05)) == "n/a: not measured"


def test_the_stored_ablations_are_all_untestable():
    """Three seeds per model, both sides on the plateau or at ceiling: nothing can be decided (the bug this replaces
    printed 'reproduced (within noise)' for bridging)."""
    mix = train.eval_sets(train.EXPERIMENTS["retrieval"])["mix"]
    chance = {"needles=4": 0.25, "needle": report.pick_any_chance(mix, tasks.KIND_NEEDLE)}
    rows = report.direction_rows(RES, chance=chance)
    assert len(rows) == len(report.DIRECTIONS)
    assert all(r[3].startswith(stats.UNTESTABLE) for r in rows), [r[3] for r in rows]


def test_why_hybrids_rows_decide_from_the_per_seed_accuracies():
    rows = {r[0]: r for r in report.why_hybrids_rows(RES)}
    hyb, ssm = (report.per_seed(RES, "mqar", m, "pairs=32") for m in ("mamba2_hybrid", "mamba2"))
    want = stats.compare(hyb, ssm, "better", level=report.LEVEL, chance=1 / 32)["verdict"]
    assert rows["pure SSMs lag on recall"][2].startswith(want)
    # the state sizes are compared among the seeds that learned 2 pairs (>= 5 of them each)
    learned = {m: [v for v, w in zip(report.per_seed(RES, "mqar", m, "pairs=32"),
                                     report.per_seed(RES, "mqar", m, "pairs=2")) if w >= report.LEVEL]
               for m in ("mamba2", "mamba2_N64")}
    want = stats.compare(learned["mamba2_N64"], learned["mamba2"], "better", level=report.LEVEL, chance=1 / 32,
                         min_seeds=5)["verdict"]
    assert rows["a larger state recovers recall"][2].startswith(want)
    loc, dense = (report.per_seed(RES, "mqar", m, "pairs=32") for m in ("dense_local", "dense"))
    want = stats.compare(loc, dense, "better", level=report.LEVEL, chance=1 / 32)["verdict"]
    assert rows["attention learns MQAR given a previous-token path"][2].startswith(want)
    # with one state size and no dense_local, those rows say why they cannot be decided
    one = {**RES, "mqar": {**RES["mqar"], "models": {m: v for m, v in RES["mqar"]["models"].items()
                                                      if m in ("mamba2", "mamba2_hybrid", "dense")}}}
    rows1 = {r[0]: r for r in report.why_hybrids_rows(one)}
    assert rows1["a larger state recovers recall"][2].startswith(stats.UNTESTABLE)
    assert "attention learns MQAR given a previous-token path" not in rows1
    assert all(r[2].split(":")[0] in ("reproduced", "not reproduced", "untestable here") or
               r[2].startswith("reproduced") for r in rows.values())


def test_per_seed_is_in_seed_order_and_seed_rows_count_the_learners():
    info = RES["mqar"]["models"]["dense"]
    vals = report.per_seed(RES, "mqar", "dense", "pairs=2")
    assert vals == [info["per_seed"]["pairs=2"][info["seeds"].index(s)] for s in sorted(info["seeds"])]
    row = report.seed_rows(RES, "mqar", ["dense"], ["pairs=2"], learn="pairs=2")[0]
    k = sum(v >= report.LEVEL for v in vals)
    assert row[3].startswith(f"{k}/{len(vals)} [")
    with pytest.raises(ValueError, match="split"):
        report.per_seed(RES, "mqar", "dense", "pairs=2", split="train")


def test_chance_lines():
    assert report.mqar_chance("pairs=32") == 1 / 32
    with pytest.raises(ValueError, match="pairs="):
        report.mqar_chance("needle")
    b = tasks.needles(6, 64, (1, 2, 3), seed=4)
    per_row = (b.kind == tasks.KIND_NEEDLE).sum(1)
    want = np.mean(np.concatenate([np.full(n, 1 / n) for n in per_row]))
    assert report.pick_any_chance(b, tasks.KIND_NEEDLE) == pytest.approx(want)
    with pytest.raises(ValueError, match="no answer"):
        report.pick_any_chance(b, tasks.KIND_LOCAL)


def test_the_dense_seeds_that_learn_mqar_have_a_previous_token_head():
    """The mechanistic claim of notebook 10: a dense seed that solves 32 pairs has a layer-0 previous-token head at
    the value positions; one that stays near chance has none."""
    rows = {r[1]: r for r in report.mqar_probe_rows(("dense",), seeds=(0, 3), n=4)}
    assert rows[0][3] >= 0.9 and rows[0][5][0] > 0.5
    assert rows[3][3] < 0.4 and rows[3][5][0] < 0.3


def test_why_hysparse2_9_rows_decide_from_the_per_seed_accuracies_at_the_pick_any_line():
    mix = train.eval_sets(train.EXPERIMENTS["retrieval9"])["mix"]
    chance = report.pick_any_chance(mix, tasks.KIND_NEEDLE)
    rows = report.why_hysparse2_9_rows(RES, chance)
    assert len(rows) == 3
    acc = {m: report.per_seed(RES, "retrieval9", m, "needle") for m in report.R9}
    assert all(len(v) == 10 for v in acc.values())                  # 10 seeds per model: the claims can be decided
    want = stats.compare(acc["hysparse2_9"], acc["hybrid_swa_9"], "better", level=report.LEVEL, chance=chance)
    assert rows[0][2].startswith(want["verdict"])
    assert "hybrid_swa_9" in rows[0][1] and "RULER-v2" in rows[0][3]
    # a model on the plateau (every seed at the pick-any line) makes the claim untestable, not "not reproduced"
    flat = dict(RES, retrieval9=dict(RES["retrieval9"], models=dict(RES["retrieval9"]["models"])))
    m = dict(flat["retrieval9"]["models"]["hybrid_swa_9"])
    m["per_seed"] = dict(m["per_seed"], needle=[chance] * 10)
    m2 = dict(flat["retrieval9"]["models"]["hysparse2_9"])
    m2["per_seed"] = dict(m2["per_seed"], needle=[chance + 0.005] * 10)
    flat["retrieval9"]["models"].update(hybrid_swa_9=m, hysparse2_9=m2)
    assert report.why_hysparse2_9_rows(flat, chance)[0][2].startswith(stats.UNTESTABLE)


def _ablation_res(learners: dict, acc_learned: dict, n: int = 10) -> dict:
    """A results dict of the ablation9 experiment: per model, ``learners[m]`` of n seeds learn (validation 4-needle
    accuracy 0.95 vs 0.3) and score ``acc_learned[m]`` (+ a small per-seed spread) on every test setting; the others
    0.3."""
    models = {}
    for m in {d.better for d in report.DIRECTIONS_9} | {d.worse for d in report.DIRECTIONS_9}:
        k, top = learners.get(m, 6), acc_learned.get(m, 0.8)
        test = [min(1.0, top + 0.004 * i) if i < k else 0.3 for i in range(n)]
        val = [0.95 if i < k else 0.3 for i in range(n)]
        settings = ("needle", "needles=4", "local")
        models[m] = {"seeds": list(range(n)), "n_params": 237592,
                     "per_seed": {s: list(test) for s in settings}, "per_seed_val": {s: list(val) for s in settings},
                     "accuracy": {s: {"mean": float(np.mean(test)), "std": float(np.std(test))} for s in settings}}
    return {"ablation9": {"models": models}}


def test_ablation_rows_compare_the_learners_only():
    res = _ablation_res({"hysparse2_9_block": 5}, {"hysparse2_9": 0.85, "hysparse2_9_block": 0.6})
    rows = {r[0]: r for r in report.ablation_rows(res, chance={"needles=4": 0.25})}
    token = rows[report.DIRECTIONS_9[0].name]
    assert token[1] == "hysparse2_9: 6/10 learned, 0.86" and token[2] == "hysparse2_9_block: 5/10 learned, 0.61"
    assert token[3] == "reproduced"
    # the learner is decided on validation: a seed at 0.3 there never counts, whatever its test accuracy
    few = _ablation_res({"hysparse2_9_nowindow": 3}, {})
    assert report.ablation_rows(few)[1][3] == "untestable here: fewer than 5 seeds learned"
    top = _ablation_res({}, {m: 0.995 for m in few["ablation9"]["models"]})
    assert report.ablation_rows(top)[2][3] == "untestable here: both at ceiling"


def test_ablation_rows_refuse_bad_arguments():
    res = _ablation_res({}, {})
    with pytest.raises(ValueError, match="exp"):
        report.ablation_rows(res, exp="retrieval9")
    with pytest.raises(ValueError, match="directions"):
        report.ablation_rows(res, directions=())
    with pytest.raises(ValueError, match="chance"):
        report.ablation_rows(res, chance=0.25)
    with pytest.raises(ValueError, match="level"):
        report.ablation_rows(res, level=1.5)
    with pytest.raises(ValueError, match="setting"):
        report.ablation_rows(res, learn="needles=8")


def test_ablation_lines_say_not_trained_then_print_the_table():
    lines = report.ablation_lines({})
    assert lines[0].startswith("ablation9: 5 models x 20 seeds") and "1.5% apart" in lines[0]
    assert lines[1].startswith("not trained yet: hybrid-lab train ablation9")
    res = _ablation_res({"hysparse2_9_block": 5}, {"hysparse2_9": 0.85, "hysparse2_9_block": 0.6})
    lines = report.ablation_lines(res)
    assert lines[1].startswith("chance / plateau lines: needles=4 0.250, needle 0.387")
    assert len(lines) == 2 + 5 * len(report.DIRECTIONS_9) and lines[4] == "    verdict: reproduced"
    # how often a seed learned, with the test of the two shares at 0.05 / 4 (four directions)
    assert lines[6] == ("    how often a seed learned [Wilson 95%]: 6/10 [0.31, 0.83] vs 5/10 [0.24, 0.76]: no "
                        "difference detected (p = 1 >= 0.0125)")
    with pytest.raises(ValueError, match="exp"):
        report.ablation_lines({}, exp="gpt")


def test_a_partly_trained_ablation_says_which_directions_wait():
    res = _ablation_res({"hysparse2_9_block": 5}, {"hysparse2_9": 0.85, "hysparse2_9_block": 0.6})
    del res["ablation9"]["models"]["hysparse2_9_nobridge"]
    rows = report.ablation_rows(res, chance={"needles=4": 0.25})
    assert rows[0][3] == "reproduced"                                 # the trained directions are still compared
    assert rows[3][1:4] == ["hysparse2_9: trained", "hysparse2_9_nobridge: not trained yet", "not trained yet"]
    lines = report.ablation_lines(res)
    assert lines[2] == ("not trained yet: hysparse2_9_nobridge (hybrid-lab train ablation9 --models "
                        "hysparse2_9_nobridge)")
    assert len(lines) == 3 + 5 * len(report.DIRECTIONS_9)
    with pytest.raises(ValueError, match="res"):
        report.ablation_lines([])


def test_probe_groups_split_every_seed_by_whether_it_learned():
    """The stored ablation metas: every seed in one group, the group sizes equal the learners ablation_rows counts."""
    res = report.load_results()
    for m, k, n, learners, others in report.probe_groups("ablation9"):
        val = report.per_seed(res, "ablation9", m, "needle", split="val")
        assert (k, n) == (sum(v >= report.LEVEL for v in val), 20)
        for g, size in ((learners, k), (others, n - k)):
            assert (g == {}) == (size == 0)
            for key in report.GROUP_KEYS if g else ():
                lo_mean_hi = g[key]
                assert lo_mean_hi[1] <= lo_mean_hi[0] <= lo_mean_hi[2]
        if k and n - k:        # a learner's cross FA finds the asked needle more often than a non-learner's
            assert learners["top1_asked"][0] > others["top1_asked"][0]
    with pytest.raises(ValueError, match="models"):
        report.probe_groups("ablation9", models=["dense_9"])
    with pytest.raises(ValueError, match="exp"):
        report.probe_groups("mqar")
