"""The tables of notebook 10, read from ``results.json``: our trained models beside the papers' reported numbers.

Every verdict is computed from the stored per-seed accuracies, never written by hand, by
:func:`hybrid_lab.trained.stats.compare`: "untestable here" first (fewer than 10 seeds, both at ceiling, both on
the chance / plateau line, or no model that learned the task), then a permutation test of the mean difference
("reproduced" / "not reproduced: reversed"; with no difference detected, "not reproduced: no gain" only when the
bootstrap interval of the difference excludes a gain above 0.05, else "untestable here: too noisy to decide") or,
for a claim of equality, a bootstrap interval inside ± 0.05. Seeds are summarized by the share that learned the task
(accuracy >= 0.9 on the experiment's ``learn`` setting, with a Wilson interval), the median steps they took, and the
accuracy among them.
"""
from __future__ import annotations

import json
import numbers
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hybrid_lab.core import checks
from hybrid_lab.trained import families as fam
from hybrid_lab.trained import stats

__all__ = ["RESULTS", "load_results", "acc", "fmt", "table", "Direction", "DIRECTIONS", "DIRECTIONS_9", "verdict",
           "direction_rows", "ablation_rows", "ablation_lines", "recovery_state", "ledger_rows", "why_hybrids_rows",
           "why_hysparse2_rows", "why_hysparse2_9_rows", "per_seed", "seed_rows", "mqar_chance", "pick_any_chance",
           "mqar_probe_rows", "retrieval_probe_rows", "probe_groups", "GROUP_KEYS", "LEVEL"]

RESULTS = Path(__file__).resolve().parent / "checkpoints" / "results.json"
MIN_NOISE = 0.01
LEVEL = 0.9                                     # learned the task: accuracy >= LEVEL


def load_results(path=RESULTS) -> dict:
    """The aggregated results (``hybrid-lab train`` writes them)."""
    try:
        res = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"path {path}: no results there; run hybrid-lab train all (GPU) or --quick (CPU) "
                         f"first") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"path {path} is not a results.json ({e})") from None
    if not isinstance(res, dict):
        raise ValueError(f"path {path} must hold a JSON object {{experiment: ...}}, got a {type(res).__name__}")
    return res


# ------------------------------------------------------------------------------------------------- checks
# The results dict (what train.aggregate writes): {exp: {"models": {model: {"accuracy": {setting: {"mean", "std"}},
# "per_seed": {setting: [accuracy per seed]}, "seeds": [...], "n_params": int, ...}}, ...}}. A mean is an accuracy in
# [0, 1], or NaN where a setting had no answer to score (not measured: shown as n/a, never compared).
def _models(res, exp) -> dict:
    """res[exp]["models"], checked to be a non-empty dict."""
    if not isinstance(res, dict):
        raise ValueError(f"res must be the dict of results.json (load_results()), got {type(res).__name__}")
    if not isinstance(exp, str) or exp not in res:
        raise ValueError(f"exp must be an experiment of res ({', '.join(sorted(map(str, res)))}), got {exp!r}")
    models = res[exp].get("models") if isinstance(res[exp], dict) else None
    if not isinstance(models, dict) or not models:
        raise ValueError(f"res[{exp!r}] must hold a non-empty 'models' dict (no trained model in it)")
    return models


def _model(res, exp, model, name: str = "model") -> dict:
    """res[exp]["models"][model], checked to hold its 'accuracy' dict (``name``: the argument that gave model)."""
    models = _models(res, exp)
    if not isinstance(model, str) or model not in models:
        raise ValueError(f"{name}: {model!r} is not a model of res[{exp!r}] ({', '.join(map(str, models))})")
    info = models[model]
    if not isinstance(info, dict) or not isinstance(info.get("accuracy"), dict):
        raise ValueError(f"res[{exp!r}]['models'][{model!r}] lacks its 'accuracy' dict")
    return info


def _is_real(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_))


def _check_stat(where: str, mean, std) -> None:
    """mean: an accuracy in [0, 1] or NaN (not measured); std: in [0, 1] (not read when the mean is NaN)."""
    for what, v in (("mean", mean), ("std", std)):
        if not _is_real(v):
            raise ValueError(f"{where}{what} must be a real number, got {v!r}")
    if np.isnan(mean):
        return
    if not 0.0 <= mean <= 1.0:
        raise ValueError(f"{where}mean must be an accuracy in [0, 1] (or NaN: not measured), got {mean!r}")
    if not 0.0 <= std <= 1.0:                                    # NaN fails too: a measured mean has a std
        raise ValueError(f"{where}std must be a standard deviation of accuracies, in [0, 1], got {std!r}")


def _names(name: str, names) -> list:
    """A non-empty list or tuple of strings (model names, settings)."""
    if not isinstance(names, (list, tuple)) or not names or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{name} must be a non-empty list of names (str), got {names!r}")
    return list(names)


def _setting_of(res, exp, model, name, setting) -> str:
    info = _model(res, exp, model)
    if not isinstance(setting, str) or setting not in info["accuracy"]:
        raise ValueError(f"{name} must be a setting of res[{exp!r}]['models'][{model!r}] "
                         f"({', '.join(map(str, info['accuracy']))}), got {setting!r}")
    return setting


# ------------------------------------------------------------------------------------------------- tables
def acc(res: dict, exp: str, model: str, setting: str) -> tuple:
    """(mean, std, n seeds) of one model's accuracy on one setting (the mean NaN where it was not measured)."""
    info = _model(res, exp, model)
    _setting_of(res, exp, model, "setting", setting)
    a, where = info["accuracy"][setting], f"res[{exp!r}]['models'][{model!r}]['accuracy'][{setting!r}]"
    if not isinstance(a, dict) or "mean" not in a or "std" not in a:
        raise ValueError(f"{where} must be a dict {{'mean': ..., 'std': ...}}, got {a!r}")
    _check_stat(where + " ", a["mean"], a["std"])
    seeds = info.get("seeds")
    if not isinstance(seeds, list) or not seeds:
        raise ValueError(f"res[{exp!r}]['models'][{model!r}] must list its training 'seeds', got {seeds!r}")
    return a["mean"], a["std"], len(seeds)


def fmt(mean: float, std: float) -> str:
    """'0.93 ± 0.02' (accuracies as fractions); '  n/a' when mean is None or NaN (not measured)."""
    if mean is None:
        return "  n/a"
    _check_stat("", mean, std)
    return "  n/a" if np.isnan(mean) else f"{mean:.2f} ± {std:.2f}"


def table(res: dict, exp: str, models, settings) -> list:
    """Rows [model, params, 'mean ± std' per setting] for a printed table."""
    models, settings = _names("models", models), _names("settings", settings)
    for m in models:
        info = _model(res, exp, m, "models")
        n = info.get("n_params")
        if not isinstance(n, numbers.Integral) or isinstance(n, (bool, np.bool_)) or n < 1:
            raise ValueError(f"res[{exp!r}]['models'][{m!r}] must hold its 'n_params' (an int >= 1), got "
                             f"{info.get('n_params')!r}")
        for s in settings:
            _setting_of(res, exp, m, "settings", s)
    rows = []
    for m in models:
        info = res[exp]["models"][m]
        rows.append([m, info["n_params"]] + [fmt(*acc(res, exp, m, s)[:2]) for s in settings])
    return rows


@dataclass(frozen=True)
class Direction:
    """One of the paper's ablation directions: ``better`` should beat ``worse`` on ``setting`` (``expect`` "better"),
    or match it (``expect`` "same"). ``reported``: the paper's numbers behind it, as text."""
    name: str
    better: str
    worse: str
    setting: str
    expect: str
    reported: str

    def __post_init__(self):
        for name in ("name", "better", "worse", "setting", "reported"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"{name} must be a non-empty str, got {getattr(self, name)!r}")
        for name in ("better", "worse"):
            if getattr(self, name) not in fam.SPECS:
                raise ValueError(f"{name} must be a model of families.SPECS, got {getattr(self, name)!r}")
        if self.expect not in EXPECT:
            raise ValueError(f"expect must be one of {EXPECT}, got {self.expect!r}")


EXPECT = ("better", "same")
DIRECTIONS = (
    Direction("token-level > block-level selection (multi-needle)", "hysparse2", "hysparse2_block", "needles=4",
              "better", "HySparse2 §17.2 (1,024-token budget): MRCR-v2 2-needle 21.08 vs 12.94, RULER-v2 56.13 vs "
              "49.56"),
    Direction("forced window > no window (retrieval)", "hysparse2", "hysparse2_nowindow", "needle", "better",
              "§17.3: RULER 89.84 (forced) vs 84.55 (no SWA); MRCR-v2 22.67 vs 20.73"),
    Direction("gated SWA > forced window (local)", "hysparse2_gatedswa", "hysparse2", "local", "better",
              "§17.3: GSM8K 64.52 (gated SWA) vs 59.44 (forced); MRCR-v2 27.66 vs 22.67"),
    Direction("bridging = no bridging (retrieval)", "hysparse2", "hysparse2_nobridge", "needle", "same",
              "§17.4 (290B-A8B, 1.8T tokens): RULER 96.01 vs 96.32, GSM8K 76.65 vs 77.63, MMLU 72.80 vs 72.68"),
)


# The same directions on the task with headroom (train.EXPERIMENTS "ablation9"), between the 9-layer variants
DIRECTIONS_9 = tuple(Direction(d.name, d.better.replace("hysparse2", "hysparse2_9"),
                               d.worse.replace("hysparse2", "hysparse2_9"), d.setting, d.expect, d.reported)
                     for d in DIRECTIONS)


def verdict(better: tuple, worse: tuple, expect: str = "better", chance=None, ceiling: float = 0.99,
            n_seeds=None) -> str:
    """better, worse: (mean, std) of the two models (accuracies in [0, 1]); expect: "better" or "same"; chance: the
    plateau / chance line or None; n_seeds: seeds per model (the smaller side) or None. Returns "n/a: not measured"
    when either mean is NaN; "untestable here: ..." at ceiling, on the plateau or with fewer than 10 seeds
    (:func:`stats.verdict_from_means`); otherwise the noise rule of the module's first version (a difference beyond
    the larger std and one point). Prefer :func:`stats.compare` on per-seed accuracies."""
    for name, pair in (("better", better), ("worse", worse)):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(f"{name} must be a (mean, std) pair, got {pair!r}")
        _check_stat(name + " ", *pair)
    if not isinstance(expect, str) or expect not in EXPECT:
        raise ValueError(f"expect must be one of {EXPECT}, got {expect!r}")
    if np.isnan(better[0]) or np.isnan(worse[0]):
        return "n/a: not measured"
    first = stats.verdict_from_means(tuple(better), tuple(worse), expect, chance=chance, ceiling=ceiling,
                                     n_seeds=n_seeds)
    if first.startswith(stats.UNTESTABLE):
        return first
    diff = better[0] - worse[0]
    noise = max(better[1], worse[1], MIN_NOISE)
    if expect == "same":
        return "reproduced (within noise)" if abs(diff) <= noise else \
            f"not reproduced ({'better' if diff > 0 else 'worse'} by {abs(diff):.2f})"
    if abs(diff) <= noise:
        return "not reproduced: no difference at this scale"
    return "reproduced" if diff > 0 else "not reproduced: reversed"


def per_seed(res: dict, exp: str, model: str, setting: str, split: str = "test") -> list:
    """One model's per-seed accuracies on one setting (split "test" or "val"), in seed order."""
    info = _model(res, exp, model)
    _setting_of(res, exp, model, "setting", setting)
    key = {"test": "per_seed", "val": "per_seed_val"}.get(split) if isinstance(split, str) else None
    if key is None:
        raise ValueError(f"split must be 'test' or 'val', got {split!r}")
    vals = info.get(key, {}).get(setting)
    if not isinstance(vals, list) or not vals or not all(_is_real(v) for v in vals):
        raise ValueError(f"res[{exp!r}]['models'][{model!r}][{key!r}][{setting!r}] must be a non-empty list of "
                         f"accuracies, got {vals!r:.80}")
    seeds = info.get("seeds")
    if not isinstance(seeds, list) or len(seeds) != len(vals):
        raise ValueError(f"res[{exp!r}]['models'][{model!r}] must list one training seed per accuracy in 'seeds', "
                         f"got {seeds!r:.80}")
    order = np.argsort(info["seeds"], kind="stable")
    return [float(vals[i]) for i in order]


def mqar_chance(setting: str) -> float:
    """MQAR's "pick any in-context value" line for a setting "pairs=n": 1 / n (values are distinct)."""
    if not isinstance(setting, str) or not re.fullmatch(r"pairs=[1-9][0-9]*", setting):
        raise ValueError(f"setting must be 'pairs=<n>', got {setting!r}")
    return 1.0 / int(setting.split("=")[1])


def pick_any_chance(batch, kind: int) -> float:
    """The accuracy of a model that answers each question of ``kind`` with a uniformly drawn one of its sequence's
    answers of that kind (every needle / pair is asked once): the mean of 1 / (answers in its row)."""
    from hybrid_lab.trained import tasks

    if not isinstance(batch, tasks.Batch):
        raise ValueError(f"batch must be a tasks.Batch, got {type(batch).__name__}")
    if kind not in tasks.KIND_NAMES:
        raise ValueError(f"kind must be one of {sorted(tasks.KIND_NAMES)} (KIND_*), got {kind!r}")
    per_row = (batch.kind == kind).sum(1)
    if not per_row.any():
        raise ValueError(f"batch has no answer of kind {kind}")
    return float((per_row[per_row > 0] * (1.0 / per_row[per_row > 0])).sum() / per_row.sum())


def seed_rows(res: dict, exp: str, models, settings, learn: str, level: float = LEVEL) -> list:
    """Per model: [model, params, lr, "k/n learned [lo, hi]", median steps to learn, then per setting "mean over all
    seeds / mean among the learners"]. learn: the setting that says who learned (accuracy >= level)."""
    models, settings = _names("models", models), _names("settings", settings)
    checks.number_in("level", level, 0.0, 1.0)
    rows = []
    for m in models:
        info = _model(res, exp, m, "models")
        learned = per_seed(res, exp, m, learn)
        steps = info.get("steps_to_learn")
        steps = [steps[i] for i in np.argsort(info["seeds"], kind="stable")] if isinstance(steps, list) else None
        summ = stats.summarize(learned, steps, level)
        who = [v >= level for v in learned]
        cells = []
        for st in settings:
            v = per_seed(res, exp, m, st)
            among = [x for x, w in zip(v, who) if w]
            cells.append(f"{np.mean(v):.2f} / " + (f"{np.mean(among):.2f}" if among else " -  "))
        med = summ["median_steps"]
        rows.append([m, info["n_params"], info.get("lr"),
                     f"{summ['learned']}/{summ['n']} [{summ['share_lo']:.2f}, {summ['share_hi']:.2f}]",
                     "-" if med is None else f"{med:.0f}"] + cells)
    return rows


def _direction_args(res, exp, directions, chance) -> None:
    """The checks direction_rows and ablation_rows share: exp in res, the directions, the chance lines."""
    _models(res, exp)
    if not isinstance(directions, (list, tuple)) or not directions \
            or not all(isinstance(d, Direction) for d in directions):
        raise ValueError(f"directions must be a non-empty sequence of report.Direction, got {directions!r:.200}")
    if chance is not None and not isinstance(chance, dict):
        raise ValueError(f"chance must be None or a dict setting -> chance line, got {type(chance).__name__}")


def direction_rows(res: dict, exp: str = "retrieval", directions=DIRECTIONS, chance: dict | None = None) -> list:
    """Rows [direction, ours (better), ours (worse), verdict, reported] for the ablation table, the verdict from
    :func:`stats.compare` on the per-seed accuracies. directions: a non-empty sequence of :class:`Direction`;
    chance: {setting: chance / plateau line} (None: no line)."""
    _direction_args(res, exp, directions, chance)
    rows = []
    for d in directions:
        b, w = acc(res, exp, d.better, d.setting), acc(res, exp, d.worse, d.setting)
        if np.isnan(b[0]) or np.isnan(w[0]):
            v = "n/a: not measured"
        else:
            v = stats.compare(per_seed(res, exp, d.better, d.setting), per_seed(res, exp, d.worse, d.setting),
                              d.expect, level=LEVEL, chance=(chance or {}).get(d.setting))["verdict"]
        rows.append([d.name, f"{d.better}: {fmt(*b[:2])}", f"{d.worse}: {fmt(*w[:2])}", v, d.reported])
    return rows


def ablation_rows(res: dict, exp: str = "ablation9", directions=DIRECTIONS_9, learn: str = "needle",
                  chance: dict | None = None, level: float = LEVEL) -> list:
    """Rows [direction, better, worse, verdict, reported, shares] of an ablation compared among the seeds that
    learned (:func:`stats.compare_learners`): a seed learned when its VALIDATION accuracy on ``learn`` is >=
    ``level``, and the compared accuracies are the TEST ones on the direction's setting. The better / worse cells
    read "model: k/n learned, acc among them". shares: how often each side learned, with Wilson 95% intervals and
    :func:`stats.compare_shares` at alpha 0.05 / len(directions) (Bonferroni over the directions): a separate
    measurement, since the paper's numbers are the quality of trained models, not how often a seed trains.
    chance: {setting: chance / plateau line} (None: no line). A direction with a model not in ``res`` yet (the
    experiment partly trained) reads "not trained yet"."""
    _direction_args(res, exp, directions, chance)
    level = checks.number_in("level", level, 0.0, 1.0)
    trained = res[exp]["models"]
    rows = []
    for d in directions:
        if d.better not in trained or d.worse not in trained:    # part of the experiment trained so far
            rows.append([d.name, *(f"{m}: {'not trained yet' if m not in trained else 'trained'}"
                                   for m in (d.better, d.worse)), "not trained yet", d.reported, "not trained yet"])
            continue
        learned = [[v >= level for v in per_seed(res, exp, m, learn, split="val")] for m in (d.better, d.worse)]
        out = stats.compare_learners(per_seed(res, exp, d.better, d.setting), per_seed(res, exp, d.worse, d.setting),
                                     learned[0], learned[1], d.expect, chance=(chance or {}).get(d.setting))
        cells = []
        for m, side in ((d.better, out["learned_a"]), (d.worse, out["learned_b"])):
            among = "-" if side["k"] == 0 else f"{side['acc']:.2f}"
            cells.append(f"{m}: {side['k']}/{side['n']} learned, {among}")
        (ka, na), (kb, nb) = ((out[s]["k"], out[s]["n"]) for s in ("learned_a", "learned_b"))
        test = stats.compare_shares(ka, na, kb, nb, alpha=0.05 / len(directions))
        shares = (f"{ka}/{na} [{test['a'][0]:.2f}, {test['a'][1]:.2f}] vs {kb}/{nb} [{test['b'][0]:.2f}, "
                  f"{test['b'][1]:.2f}]: {test['verdict']}")
        rows.append([d.name, *cells, out["verdict"], d.reported, shares])
    return rows


def ablation_lines(res: dict, exp: str = "ablation9") -> list:
    """Notebook 10's table of the ablation experiment, as printed lines: the plan (models, parameters from their
    configs, seeds, tokens) and, once ``exp`` is in ``res``, :func:`ablation_rows` with the chance lines (1/4 on 4
    needles, the pick-any line of the mixed set), each model's share of seeds that learned and the test of the two
    shares; until then a line saying it is not trained yet and the command that trains it."""
    from hybrid_lab.trained import tasks, train

    if not isinstance(res, dict):
        raise ValueError(f"res must be the dict of results.json (load_results()), got {type(res).__name__}")
    if not isinstance(exp, str) or exp not in train.EXPERIMENTS:
        raise ValueError(f"exp must be an experiment of train.EXPERIMENTS ({', '.join(train.EXPERIMENTS)}), got "
                         f"{exp!r}")
    e = train.EXPERIMENTS[exp]
    params = {m: fam.n_params(train.model_config(e, m, 0)) for m in e.models}
    lines = [f"{exp}: {len(e.models)} models x {len(e.seeds)} seeds, lr {', '.join(f'{lr:g}' for lr in e.lrs)}, "
             f"{e.steps} steps of {e.batch} x {e.seq_len} tokens ({e.steps * e.batch * e.seq_len:,} tokens each); "
             f"parameters {min(params.values()):,}-{max(params.values()):,} "
             f"({max(params.values()) / min(params.values()) - 1:.1%} apart)"]
    if exp not in res:
        return lines + [f"not trained yet: hybrid-lab train {exp} --jobs 3 (one GPU; the table appears here once "
                        f"results.json has it)"]
    mix = train.eval_sets(e)["mix"]
    chance = {"needles=4": 0.25, "needle": pick_any_chance(mix, tasks.KIND_NEEDLE)}
    lines.append("chance / plateau lines: " + ", ".join(f"{k} {v:.3f}" for k, v in chance.items()))
    missing = [m for m in e.models if m not in res[exp]["models"]]
    if missing:
        lines.append(f"not trained yet: {' '.join(missing)} (hybrid-lab train {exp} --models {' '.join(missing)})")
    for name, better, worse, verdict_, reported, shares in ablation_rows(res, exp, chance=chance):
        lines += [f"- {name}", f"    measured: {better}  vs  {worse}", f"    verdict: {verdict_}",
                  f"    reported: {reported}", f"    how often a seed learned [Wilson 95%]: {shares}"]
    return lines


def recovery_state(res: dict, setting: str = "pairs=32", exp: str = "mqar", level: float = 0.9):
    """The smallest state size N at which pure Mamba-2's mean accuracy over seeds on ``setting`` reaches ``level``
    (None if no trained N does). Returns (N or None, [(N, mean, std, seeds reaching level, seeds)]).
    res[exp] must hold pure Mamba-2 models ("mamba2", "mamba2_N<N>") with ``per_seed[setting]`` accuracies; level:
    in [0, 1]."""
    models = _models(res, exp)
    checks.number_in("level", level, 0.0, 1.0)
    curve = []
    for model, info in models.items():
        if model == "mamba2" or model.startswith("mamba2_N"):
            if model != "mamba2" and not re.fullmatch(r"mamba2_N[1-9][0-9]*", model):
                raise ValueError(f"res[{exp!r}] model names of pure Mamba-2 must be mamba2 or mamba2_N<state size>, "
                                 f"got {model!r}")
            _setting_of(res, exp, model, "setting", setting)
            per_seed = info.get("per_seed", {}).get(setting) if isinstance(info.get("per_seed"), dict) else None
            if not isinstance(per_seed, list) or not per_seed or not all(_is_real(v) for v in per_seed):
                raise ValueError(f"res[{exp!r}]['models'][{model!r}]['per_seed'][{setting!r}] must be a non-empty "
                                 f"list of accuracies, got {per_seed!r}")
            curve.append((_state(model),) + acc(res, exp, model, setting)[:2]
                         + (sum(v >= level for v in per_seed), len(per_seed)))
    if not curve:
        raise ValueError(f"res[{exp!r}] has no pure Mamba-2 model (mamba2, mamba2_N<N>): exp must be the MQAR "
                         f"experiment")
    curve.sort()
    ok = [c[0] for c in curve if c[1] >= level]
    return (ok[0] if ok else None), curve


def _state(model: str) -> int:
    return int(model.split("_N")[1]) if "_N" in model else int(fam.SPECS[model].kw["d_state"])


def ledger_rows(configs: dict, contexts=(256, 131072)) -> list:
    """Rows [model, cache bytes and bytes read per decode step at each context] from the models' configs (fp16),
    computed by :func:`hybrid_lab.trained.families.decode_ledger`. configs: a non-empty dict name -> config of a
    family; contexts: a non-empty sequence of context lengths (ints >= 1)."""
    kinds = tuple(c for c, _, _ in fam.FAMILIES.values())
    if not isinstance(configs, dict) or not configs:
        raise ValueError(f"configs must be a non-empty dict name -> model config, got {configs!r:.200}")
    for name, cfg in configs.items():
        if not isinstance(cfg, kinds):
            raise ValueError(f"configs[{name!r}] must be a config of one of {sorted(fam.FAMILIES)}, got "
                             f"{type(cfg).__name__}")
    if not isinstance(contexts, (list, tuple, np.ndarray)) or not len(contexts):
        raise ValueError(f"contexts must be a non-empty sequence of context lengths, got {contexts!r}")
    for i, S in enumerate(contexts):
        checks.pos_int(f"contexts[{i}]", S)
    rows = []
    for name, cfg in configs.items():
        row = [name]
        for S in contexts:
            d = fam.decode_ledger(cfg, S)
            row += [d["cache_bytes"], d["read_bytes"]]
        rows.append(row)
    return rows


def _row(res, exp, model, setting):
    return acc(res, exp, model, setting)[:2]


def why_hybrids_rows(res: dict, setting: str = "pairs=32") -> list:
    """Lecture §3's claims on MQAR, each as [claim, ours, verdict, reported], decided by :func:`stats.compare` on the
    per-seed accuracies at ``setting`` (chance: 1 / pairs). res: results with the "mqar" experiment's mamba2,
    mamba2_hybrid and dense models; where trained, also dense_local (attention with a local first layer: the
    attention baseline that learns) and the state-size models mamba2_N<N> (rows about a missing model say
    "untestable here: not trained")."""
    for m in ("mamba2", "mamba2_hybrid", "dense"):
        _setting_of(res, "mqar", m, "setting", setting)
    have = _models(res, "mqar")
    ssm, hyb, dense = (per_seed(res, "mqar", m, setting) for m in ("mamba2", "mamba2_hybrid", "dense"))
    small = _smallest(res)
    c = mqar_chance(setting)

    def learners(m):
        """the model's accuracies at ``setting`` among the seeds that learned the smallest pair count"""
        return [v for v, w in zip(per_seed(res, "mqar", m, setting), per_seed(res, "mqar", m, small)) if w >= LEVEL]

    def cmp(a, b, expect, **kw):
        r = stats.compare(a, b, expect, level=LEVEL, chance=c, **kw)
        return r["verdict"] + (f" (p = {r['p']:.3f})" if expect == "better" and "p =" not in r["verdict"]
                               and not r["verdict"].startswith(stats.UNTESTABLE) else "")

    def share(m):
        k = sum(v >= LEVEL for v in per_seed(res, "mqar", m, small))
        return f"{k}/{len(per_seed(res, 'mqar', m, small))}"

    ssm_l, hyb_l = learners("mamba2"), learners("mamba2_hybrid")
    rows = [
        ["pure SSMs lag on recall", f"{setting}: hybrid {_mean(hyb)} vs pure Mamba-2 {_mean(ssm)} "
         f"({len(hyb)} vs {len(ssm)} seeds, chance {c:.3f})", cmp(hyb, ssm, "better"),
         "lecture §3: pure SSMs still lag on strong recall / in-context retrieval"]]
    if "dense_local" in have:
        _setting_of(res, "mqar", "dense_local", "setting", setting)
        loc = per_seed(res, "mqar", "dense_local", setting)
        rows += [
            ["attention learns MQAR given a previous-token path",
             f"{setting}: local first layer {_mean(loc)} vs dense {_mean(dense)}; seeds that learned {small}: "
             f"{share('dense_local')} vs {share('dense')}", cmp(loc, dense, "better"),
             "no paper number: the mechanism the probe below measures (a head that reads position t - 1)"],
            ["hybrids match attention", f"{setting}: hybrid (1 attention in 4) {_mean(hyb)} vs attention with a local "
             f"first layer {_mean(loc)}", cmp(hyb, loc, "same"),
             "lecture §3 (Marconi §2.1): hybrids match or beat Transformers"]]
    else:
        rows.append(["hybrids match attention", f"{setting}: hybrid (1 attention in 4) {_mean(hyb)} vs dense "
                     f"{_mean(dense)}", cmp(hyb, dense, "same"),
                     "lecture §3 (Marconi §2.1): hybrids match or beat Transformers"])
    rows.append(["among seeds that learned, the fixed state loses recall as pairs grow",
                 f"{setting}, seeds that learned {small} (>= {LEVEL}): hybrid {_mean(hyb_l)} ({len(hyb_l)} seeds) vs "
                 f"pure Mamba-2 {_mean(ssm_l)} ({len(ssm_l)} seeds)",
                 cmp(hyb_l, ssm_l, "better", min_seeds=5) if hyb_l and ssm_l else "untestable here: no seed learned",
                 "lecture §3: the whole history is squeezed into a fixed-size state, so recall is lossy"])
    states = sorted((_state(m), m) for m in have if m == "mamba2" or m.startswith("mamba2_N"))
    if len(states) < 2:
        rows.append(["a larger state recovers recall", "state sizes trained: N = " +
                     ", ".join(str(n) for n, _ in states), "untestable here: not trained (one state size)",
                     "lecture §3: recall is bounded by the state size"])
    else:
        (n0, m0), (n1, m1) = states[0], states[-1]
        lo, hi = learners(m0), learners(m1)
        rows.append(["a larger state recovers recall",
                     f"{setting}, seeds that learned {small}: " + ", ".join(
                         f"N={n} {_mean(learners(m))} ({len(learners(m))} seeds)" for n, m in states)
                     + f"; all seeds: " + ", ".join(f"N={n} {_mean(per_seed(res, 'mqar', m, setting))}"
                                                    for n, m in states),
                     (cmp(hi, lo, "better", min_seeds=5) if lo and hi else "untestable here: no seed learned")
                     + f" (N={n1} vs N={n0}, learners)", "lecture §3: recall is bounded by the state size"])
    return rows


def _path_arg(name, value):
    import os

    if not isinstance(value, (str, os.PathLike)):
        raise ValueError(f"{name} must be None or a path (str or Path), got {type(value).__name__}")
    return Path(value)


def _mean(v) -> str:
    return f"{np.mean(v):.2f}" if len(v) else "n/a"


def _smallest(res) -> str:
    pairs = sorted(int(k.split("=")[1]) for k in _models(res, "mqar")["mamba2"]["accuracy"] if k.startswith("pairs="))
    return f"pairs={pairs[0]}"


def why_hysparse2_rows(res: dict, far: str = "needle d=64-128", near: str = "needle d=0-16") -> list:
    """[model, near accuracy, far accuracy, local accuracy, 4-needle accuracy] of the retrieval experiment (res's
    "retrieval" models, each with the settings far, near, "needle d=16-64", "local" and "needles=4")."""
    models = _models(res, "retrieval")
    for m in models:
        _setting_of(res, "retrieval", m, "far", far)
        _setting_of(res, "retrieval", m, "near", near)
    rows = []
    for m in models:
        rows.append([m] + [fmt(*_row(res, "retrieval", m, s)) for s in (near, "needle d=16-64", far, "local",
                                                                        "needles=4")])
    return rows


R9 = ("dense_9", "hybrid_swa_9", "hysparse_9", "hysparse2_9")


def why_hysparse2_9_rows(res: dict, chance: float, setting: str = "needle", exp: str = "retrieval9") -> list:
    """The HySparse2 paper's retrieval claims on the 9-layer experiment (models R9, 10 seeds each), each as [claim,
    ours, verdict, reported], decided by :func:`stats.compare` on the per-seed accuracies at ``setting`` with
    ``chance`` the pick-any-needle line (a model answering with a random needle of the sequence)."""
    checks.number_in("chance", chance, 0.0, 1.0)
    for m in R9:
        _setting_of(res, exp, m, "setting", setting)
    acc9 = {m: per_seed(res, exp, m, setting) for m in R9}

    def learned(m):
        return f"{sum(v >= LEVEL for v in acc9[m])}/{len(acc9[m])}"

    def cmp(a, b, expect):
        r = stats.compare(acc9[a], acc9[b], expect, level=LEVEL, chance=chance)
        return r["verdict"] + (f" (p = {r['p']:.2f})" if "p =" not in r["verdict"]
                               and not r["verdict"].startswith(stats.UNTESTABLE) else "")

    def ours(a, b):
        return (f"{setting}: {a} {_mean(acc9[a])} vs {b} {_mean(acc9[b])}; seeds >= {LEVEL}: {learned(a)} vs "
                f"{learned(b)}")

    return [
        ["HySparse2 retrieves better than hybrid SWA", ours("hysparse2_9", "hybrid_swa_9"),
         cmp("hysparse2_9", "hybrid_swa_9", "better"),
         "HySparse2 §17.6: RULER-v2 at 256K 58.45 vs hybrid SWA 35.74"],
        ["HySparse2 retrieves better than HySparse", ours("hysparse2_9", "hysparse_9"),
         cmp("hysparse2_9", "hysparse_9", "better"),
         "HySparse2 §17.6: +11.30 MRCR-v2, +19.81 RULER-v2 over HySparse after post-training"],
        ["HySparse2 matches dense attention here", ours("hysparse2_9", "dense_9"),
         cmp("hysparse2_9", "dense_9", "same"), "no paper number: our control (dense attention reads every "
                                                 "position)"],
    ]


# ------------------------------------------------------------------------------------------------- probes
def mqar_probe_rows(models=("dense",), seeds=None, n: int = 8, root=None) -> list:
    """Per (model, seed) of the MQAR experiment: [model, seed, accuracy at the smallest and largest pair count
    (stored, test), learned (>= LEVEL at the smallest), the previous-token score of each layer (max over heads, at
    the pairs' value positions; NaN for layers without attention)], on ``n`` held-out sequences of every pair count
    (:func:`probes.previous_token_scores` with :func:`probes.mqar_value_positions`)."""
    from hybrid_lab.trained import probes, store, tasks

    root = Path(store.CHECKPOINTS if root is None else _path_arg("root", root))
    n = checks.pos_int("n", n)
    checks.output_size("n (n held-out sequences of 128 tokens)", (n, 128))
    if seeds is not None and (isinstance(seeds, (str, bytes)) or not hasattr(seeds, "__iter__")):
        raise ValueError(f"seeds must be None or a list of training seeds, got {seeds!r}")
    b = tasks.mqar(n, 128, (2, 4, 8, 16, 32), seed=tasks.EVAL_SEED + 900)
    pos = probes.mqar_value_positions(b)
    rows = []
    for m in _names("models", list(models) if isinstance(models, (list, tuple)) else models):
        if not (root / "mqar" / m).is_dir():
            raise ValueError(f"models: {m!r} has no checkpoints under {root / 'mqar'}")
        for path in sorted((root / "mqar" / m).glob("seed*.npz"), key=lambda p: int(p.stem[4:])):
            if seeds is not None and int(path.stem[4:]) not in seeds:
                continue
            model, meta = store.load_checkpoint(path.with_suffix(""))
            sc = probes.previous_token_scores(model, b.tokens, positions=pos)
            top = [float("nan") if np.isnan(r).all() else float(np.nanmax(r)) for r in sc]
            small, large = meta["final"]["pairs=2"], meta["final"]["pairs=32"]
            rows.append([m, meta["seed"], small, large, small >= LEVEL, top])
    return rows




def retrieval_probe_rows(models=("dense", "hybrid_swa", "hysparse", "hysparse2"), seed: int = 0, n: int = 32,
                         root=None, exp: str = "retrieval") -> list:
    """Per model (one seed) of the retrieval experiment ``exp`` ("retrieval": 4 layers; "retrieval9": the 9-layer
    one; "ablation9"), :func:`probes.retrieval_summary` as a row: [model, needle accuracy, share of the wrong
    answers that are another needle's value, the pick-any chance line, cross FA mass on the asked needle, mean mass
    on each other needle, share of answers whose most-attended needle is the asked one, the best previous-token
    score over layers and heads, where]. A seed whose weights were not kept (store.KEEP_WEIGHTS) gives the numbers
    its meta stored, measured on the same ``n`` sequences (another n is refused)."""
    from hybrid_lab.trained import probes, store

    root = Path(store.CHECKPOINTS if root is None else _path_arg("root", root))
    n = checks.pos_int("n", n)
    checks.output_size("n (n held-out sequences of 128 tokens)", (n, 128))
    seed = checks.nonneg_int("seed", seed)
    if not isinstance(exp, str) or not (exp.startswith("retrieval") or exp == "ablation9"):
        raise ValueError(f"exp must name a retrieval experiment ('retrieval', 'retrieval9' or 'ablation9'), got "
                         f"{exp!r}")
    rows = []
    for m in _names("models", list(models) if isinstance(models, (list, tuple)) else models):
        path = root / exp / m / f"seed{seed}"
        if path.with_suffix(".npz").exists():
            pr = probes.retrieval_summary(store.load_checkpoint(path)[0], n)
        elif path.with_suffix(".json").exists() and "probe" in (meta := store.read_meta(path)):
            pr = meta["probe"]                       # measured before the weights were dropped
            if pr.get("n") != n:
                raise ValueError(f"n: {exp} {m!r} seed {seed} keeps the probe of n = {pr.get('n')} sequences, not "
                                 f"its weights; got n = {n}")
        else:
            raise ValueError(f"models / seed: no {exp} checkpoint {m!r} seed {seed} under {root}")
        rows.append([m] + [pr[k] for k in probes.SUMMARY_KEYS])
    return rows


GROUP_KEYS = ("prev", "asked", "other", "top1_asked")


def probe_groups(exp: str = "ablation9", models=None, learn: str = "needle", level: float = LEVEL, n: int = 32,
                 root=None) -> list:
    """Per model of the retrieval experiment ``exp``: every seed's probe (:func:`retrieval_probe_rows`; a seed
    without weights gives the probe its meta stored), split by whether the seed learned (its VALIDATION accuracy on
    ``learn`` >= ``level``, as :func:`ablation_rows` decides). Row: [model, learners k, seeds n, learners,
    others], where learners / others are {key: (mean, min, max) over the group} for GROUP_KEYS (previous-token
    score, cross FA mass on the asked needle, mean mass per other needle, share of answers whose most-attended
    needle is the asked one); {} for an empty group. models: None for every model of ``exp``."""
    from hybrid_lab.trained import probes, store, train

    if not isinstance(exp, str) or exp not in train.EXPERIMENTS or not (exp.startswith("retrieval")
                                                                        or exp.startswith("ablation")):
        raise ValueError(f"exp must name a retrieval experiment of train.EXPERIMENTS, got {exp!r}")
    e = train.EXPERIMENTS[exp]
    models = list(e.models) if models is None else _names("models", models)
    for m in models:
        if m not in e.models:
            raise ValueError(f"models: {m!r} is not a model of {exp} ({', '.join(e.models)})")
    level = checks.number_in("level", level, 0.0, 1.0)
    root = Path(store.CHECKPOINTS if root is None else _path_arg("root", root))
    keys = {k: i for i, k in enumerate(("model",) + probes.SUMMARY_KEYS)}     # the columns of a probe row
    rows = []
    for m in models:
        groups = ([], [])
        for seed in e.seeds:
            val = store.read_meta(root / exp / m / f"seed{seed}").get("val", {})
            if learn not in val:
                raise ValueError(f"learn: {exp} {m!r} seed {seed} has no validation accuracy on {learn!r} (it has "
                                 f"{', '.join(val) or 'none'})")
            row = retrieval_probe_rows([m], seed=seed, n=n, root=root, exp=exp)[0]
            groups[0 if val[learn] >= level else 1].append([row[keys[k]] for k in GROUP_KEYS])
        stat = [{k: (float(np.mean(c)), float(np.min(c)), float(np.max(c)))
                 for k, c in zip(GROUP_KEYS, np.array(g, dtype=float).T)} if g else {} for g in groups]
        rows.append([m, len(groups[0]), len(e.seeds), *stat])
    return rows
