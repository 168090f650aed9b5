"""Statistics that decide a claim ("model A beats / matches model B") from per-seed final accuracies (numpy only).

Decision rules of ``compare`` (first match wins):

1. untestable here: fewer than ``min_seeds`` seeds on a side; both means >= ``ceiling``; every seed of both
   <= ``chance`` + 0.05 (plateau); no seed of either reaches ``level`` (for "same": no seed of b reaches it).
2. "better": reproduced when mean(a) > mean(b) and the two-sided permutation p < ``alpha``; reversed when
   mean(a) < mean(b) and p < alpha; otherwise (no difference detected) "not reproduced: no gain" only when the
   bootstrap 95% interval of mean(a) - mean(b) excludes every gain above ``tol``, and untestable (too noisy to
   decide) when it does not: no detected difference is not evidence against the claim unless the seeds could have
   shown the gain.
3. "same": reproduced when the bootstrap 95% interval of mean(a) - mean(b) lies inside [-tol, tol]; "differ" when
   p < alpha; otherwise untestable (too noisy to show equality).

Ceiling and chance are judged on both sides together: one side at the ceiling can still be shown better or worse
than a side below it (the ceiling only hides how much better), and one side on the chance line can be shown worse
than a side that left it; two sides at the ceiling, or both on the plateau, cannot be told apart.
"""
from __future__ import annotations

import itertools
import math
import numbers

import numpy as np

from hybrid_lab.core import checks

__all__ = ["wilson", "fisher_exact", "compare_shares", "first_step", "summarize", "compare", "compare_learners",
           "verdict_from_means"]

EXPECT = ("better", "same")
MIN_LEARNERS = 5                # compare_learners: fewer seeds that learned on a side decide nothing (with 4 vs 4 the
                                # smallest two-sided permutation p is 2/70 = 0.029; with 3 vs 3 it is 0.1)
PLATEAU_MARGIN = 0.05           # a seed within this of the chance line has not left the plateau
N_BOOT = 10_000                 # bootstrap resamples of the "same" interval
UNTESTABLE = "untestable here: "


# ------------------------------------------------------------------------------------------------- checks
def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))


def _frac(name: str, value, lo_open: bool = False, hi_open: bool = False) -> float:
    """A finite number in [0, 1], with either end excluded where asked."""
    v = checks.finite_number(name, value)
    if not ((0 < v if lo_open else 0 <= v) and (v < 1 if hi_open else v <= 1)):
        raise ValueError(f"{name} must lie in {'(' if lo_open else '['}0, 1{')' if hi_open else ']'}, "
                         f"got {value!r}")
    return v


def _accs(name: str, values) -> np.ndarray:
    """A non-empty list, tuple or 1-D array of accuracies in [0, 1] (no NaN, no bool, no str). Returns float64."""
    if isinstance(values, np.ndarray):
        a = checks.finite_array(name, values, 1, "(seeds,)")
    elif isinstance(values, (list, tuple)):
        for i, v in enumerate(values):
            if not isinstance(v, numbers.Real) or isinstance(v, (bool, np.bool_)) or not np.isfinite(v):
                raise ValueError(f"{name}[{i}] must be an accuracy (a finite number in [0, 1]), got {v!r}")
        a = np.asarray(values, dtype=np.float64)
    else:
        raise ValueError(f"{name} must be a list of per-seed accuracies in [0, 1], got {type(values).__name__}")
    if a.size == 0:
        raise ValueError(f"{name} must hold at least one accuracy, got an empty {type(values).__name__}")
    bad = np.flatnonzero((a < 0) | (a > 1))
    if bad.size:
        raise ValueError(f"{name}[{bad[0]}] must be an accuracy in [0, 1], got {a[bad[0]]!r}")
    return a.astype(np.float64)


def _steps(steps, n: int) -> list | None:
    """None, or n entries each an int >= 0 (steps to learn) or None (never learned)."""
    if steps is None:
        return None
    if isinstance(steps, np.ndarray):
        if steps.ndim != 1 or steps.dtype.kind not in "iuO":
            raise ValueError(f"steps must be a 1-D list of ints or None, got shape {steps.shape} dtype "
                             f"{steps.dtype}")
        steps = steps.tolist()
    if not isinstance(steps, (list, tuple)):
        raise ValueError(f"steps must be a list of per-seed steps to learn (int or None), got "
                         f"{type(steps).__name__}")
    if len(steps) != n:
        raise ValueError(f"steps must have one entry per seed of acc ({n}), got {len(steps)}")
    for i, s in enumerate(steps):
        if s is not None and (not _is_int(s) or s < 0):
            raise ValueError(f"steps[{i}] must be an int >= 0 (steps to learn) or None (never learned), got {s!r}")
    return [None if s is None else int(s) for s in steps]


def _expect(expect) -> str:
    if not isinstance(expect, str) or expect not in EXPECT:
        raise ValueError(f"expect must be one of {EXPECT}, got {expect!r}")
    return expect


def _chance(chance) -> float | None:
    return None if chance is None else _frac("chance", chance, hi_open=True)


# ------------------------------------------------------------------------------------------------- building blocks
def wilson(k, n, z=1.96) -> tuple:
    """Wilson score interval (lo, hi) of the binomial share k/n (ints, 0 <= k <= n, n >= 1; z: the normal quantile)."""
    n = checks.pos_int("n", n)
    k = checks.nonneg_int("k", k)
    if k > n:
        raise ValueError(f"k must be <= n = {n} (successes out of n trials), got {k}")
    z = checks.positive_number("z", z)
    p, z2 = k / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    lo = 0.0 if k == 0 else max(0.0, centre - half)        # exact ends: no float residue at 0 or n successes
    hi = 1.0 if k == n else min(1.0, centre + half)
    return lo, hi


def fisher_exact(ka, na, kb, nb) -> float:
    """Two-sided p of Fisher's exact test that two binomial shares are equal: ka of na seeds vs kb of nb (ints,
    0 <= k <= n, n >= 1). Conditioned on the total kt = ka + kb, ka follows the hypergeometric law; the p is the
    probability of every split at most as likely as the observed one (exact integer arithmetic, 1e-9 relative slack
    for ties). Returns 1.0 when the margins allow one split only (kt = 0 or kt = na + nb)."""
    na, nb = checks.pos_int("na", na), checks.pos_int("nb", nb)
    ka, kb = checks.nonneg_int("ka", ka), checks.nonneg_int("kb", kb)
    for name, k, n in (("ka", ka, na), ("kb", kb, nb)):
        if k > n:
            raise ValueError(f"{name} must be <= {n} (successes out of n trials), got {k}")
    kt = ka + kb
    weights = {x: math.comb(na, x) * math.comb(nb, kt - x) for x in range(max(0, kt - nb), min(na, kt) + 1)}
    seen = weights[ka]
    tail = sum(w for w in weights.values() if w <= seen * (1 + 1e-9))
    return min(1.0, tail / math.comb(na + nb, kt))


def compare_shares(ka, na, kb, nb, alpha=0.05) -> dict:
    """Did model a learn the task in a different share of seeds than model b? ka of na vs kb of nb seeds learned.
    Returns {"a": (lo, hi), "b": (lo, hi)} (Wilson 95%), "p" (:func:`fisher_exact`) and "verdict": "untestable here:
    ..." when no seed or every seed of both learned (nothing to compare), "differ (p = ...)" when p < alpha, else
    "no difference detected (p = ...)" (not evidence of equality). Pass alpha / m for m comparisons (Bonferroni)."""
    p = fisher_exact(ka, na, kb, nb)
    alpha = _frac("alpha", alpha, lo_open=True, hi_open=True)
    out = {"a": wilson(ka, na), "b": wilson(kb, nb), "p": p}
    if ka + kb == 0 or (ka == na and kb == nb):
        out["verdict"] = f"{UNTESTABLE}{'no seed' if ka + kb == 0 else 'every seed'} of either learned"
    else:
        out["verdict"] = (f"differ (p = {p:.2g} < {alpha:.3g})" if p < alpha
                          else f"no difference detected (p = {p:.2g} >= {alpha:.3g})")
    return out


def first_step(eval_steps, curve, level) -> int | None:
    """The first of eval_steps (increasing ints >= 0) whose accuracy in curve is >= level; None if never."""
    if isinstance(eval_steps, (list, tuple)) and not all(_is_int(s) for s in eval_steps):
        raise ValueError(f"eval_steps must be a list of ints (training steps), got {list(eval_steps)!r}")
    steps = checks.int_array("eval_steps", eval_steps, 1, "(evals,)", lo=0)
    if steps.size == 0:
        raise ValueError("eval_steps must hold at least one eval step, got none")
    if (np.diff(steps) <= 0).any():
        raise ValueError(f"eval_steps must be strictly increasing, got {steps.tolist()}")
    curve = _accs("curve", curve)
    if curve.shape != steps.shape:
        raise ValueError(f"curve must have one accuracy per entry of eval_steps ({steps.size}), got {curve.size}")
    level = _frac("level", level, lo_open=True)
    hit = np.flatnonzero(curve >= level)
    return int(steps[hit[0]]) if hit.size else None


def summarize(acc, steps=None, level=0.9) -> dict:
    """Per-seed final accuracies (and optional steps to learn) -> n, learned (seeds >= level), share with its Wilson
    interval, median_steps over learners, acc_learned (mean over learners, NaN if none), mean, std (ddof 0, as in
    results.json), median."""
    a = _accs("acc", acc)
    steps = _steps(steps, a.size)
    level = _frac("level", level, lo_open=True)
    learners = a >= level
    k, n = int(learners.sum()), int(a.size)
    lo, hi = wilson(k, n)
    learned_steps = [] if steps is None else [s for s, ok in zip(steps, learners) if ok and s is not None]
    return {"n": n, "learned": k, "share": k / n, "share_lo": lo, "share_hi": hi,
            "median_steps": float(np.median(learned_steps)) if learned_steps else None,
            "acc_learned": float(a[learners].mean()) if k else math.nan,
            "mean": float(a.mean()), "std": float(a.std()), "median": float(np.median(a))}


def _perm_p(a: np.ndarray, b: np.ndarray, n_perm: int, rng: np.random.Generator) -> float:
    """Two-sided permutation p of |mean(a) - mean(b)|: every split when there are <= n_perm, else n_perm seeded
    random splits with the add-one correction."""
    pooled = np.concatenate([a, b])
    N, na, nb = pooled.size, a.size, b.size
    total = pooled.sum()
    obs = abs(a.sum() / na - (total - a.sum()) / nb)
    tie = 1e-12                                                # a split with the same |diff| up to rounding counts
    n_splits = math.comb(N, na)
    chunk = max(1, 2 ** 20 // N)
    count = 0
    if n_splits <= n_perm:
        combos = itertools.combinations(range(N), na)
        while block := list(itertools.islice(combos, chunk)):
            sa = pooled[np.array(block)].sum(1)
            count += int((np.abs(sa / na - (total - sa) / nb) >= obs - tie).sum())
        return count / n_splits
    done = 0
    while done < n_perm:
        m = min(chunk, n_perm - done)
        idx = rng.permuted(np.broadcast_to(np.arange(N), (m, N)), axis=1)[:, :na]
        sa = pooled[idx].sum(1)
        count += int((np.abs(sa / na - (total - sa) / nb) >= obs - tie).sum())
        done += m
    return (count + 1) / (n_perm + 1)


def _bootstrap(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> tuple:
    """95% percentile interval of mean(a) - mean(b), each side resampled with replacement N_BOOT times."""
    d = np.concatenate([a[rng.integers(0, a.size, (m, a.size))].mean(1) -
                        b[rng.integers(0, b.size, (m, b.size))].mean(1)
                        for m in [N_BOOT // 4] * 4])
    lo, hi = np.percentile(d, [2.5, 97.5])
    return float(lo), float(hi)


def _untestable(ma, mb, seeds, chance, ceiling, min_seeds, maxes=None):
    """(verdict, reason) of the untestable checks shared by compare and verdict_from_means, else None.
    seeds: (n_a, n_b) or None; maxes: the best seed of each side, or None (only means known)."""
    if seeds is not None and min(seeds) < min_seeds:
        return (f"{UNTESTABLE}fewer than {min_seeds} seeds",
                f"{seeds[0]} and {seeds[1]} seeds; a verdict needs at least {min_seeds} per model")
    if ma >= ceiling and mb >= ceiling:
        return (f"{UNTESTABLE}both at ceiling",
                f"means {ma:.3f} and {mb:.3f} are both >= ceiling {ceiling:g}: the task cannot separate them")
    top = (ma, mb) if maxes is None else maxes
    if chance is not None and max(top) <= chance + PLATEAU_MARGIN:
        what = "mean" if maxes is None else "seed"
        return (f"{UNTESTABLE}both at chance / on the plateau",
                f"every {what} of both is <= chance {chance:.3f} + {PLATEAU_MARGIN:g} (highest {max(top):.3f}): "
                f"neither model left the plateau")
    return None


# ------------------------------------------------------------------------------------------------- verdicts
def compare(a, b, expect="better", level=0.9, chance=None, ceiling=0.99, min_seeds=10, tol=0.05, alpha=0.05,
            n_perm=20000, seed=0) -> dict:
    """Decide a claim from per-seed accuracies: a is the model claimed better (expect "better") or equal ("same"),
    b the other. Returns verdict, reason, diff (mean(a) - mean(b)), p (two-sided permutation p of the mean
    difference), interval (bootstrap 95% interval of diff), summary_a, summary_b. The rules:
    see the module docstring. Deterministic for a given seed."""
    a, b = _accs("a", a), _accs("b", b)
    expect = _expect(expect)
    level = _frac("level", level, lo_open=True)
    chance = _chance(chance)
    ceiling = _frac("ceiling", ceiling, lo_open=True)
    min_seeds = checks.pos_int("min_seeds", min_seeds)
    tol = _frac("tol", tol, lo_open=True, hi_open=True)
    alpha = _frac("alpha", alpha, lo_open=True, hi_open=True)
    n_perm = checks.pos_int("n_perm", n_perm)
    seed = checks.nonneg_int("seed", seed)

    perm_rng, boot_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    ma, mb = float(a.mean()), float(b.mean())
    diff = ma - mb
    p = _perm_p(a, b, n_perm, perm_rng)
    interval = _bootstrap(a, b, boot_rng)
    out = {"diff": diff, "p": p, "interval": interval, "summary_a": summarize(a, level=level),
           "summary_b": summarize(b, level=level)}
    iv = f"[{interval[0]:+.2f}, {interval[1]:+.2f}]"

    decided = _untestable(ma, mb, (a.size, b.size), chance, ceiling, min_seeds, (float(a.max()), float(b.max())))
    if decided is None and a.max() < level and b.max() < level:
        decided = (f"{UNTESTABLE}neither model learned the task",
                   f"no seed of either reaches level {level:g} (best {a.max():.3f} and {b.max():.3f}): a difference "
                   f"between two failures says nothing about the claim")
    if decided is None and expect == "same" and b.max() < level:
        decided = (f"{UNTESTABLE}the baseline did not learn the task",
                   f"no seed of b reaches level {level:g} (best {b.max():.3f}): a 'same' claim needs a baseline "
                   f"that learned")
    if decided is None and expect == "better":
        stat, n = f"diff {diff:+.3f}, p = {p:.3g}", f"({a.size} vs {b.size} seeds)"
        if diff > 0 and p < alpha:
            decided = ("reproduced", f"{stat} < alpha {alpha:g} {n}")
        elif diff < 0 and p < alpha:
            decided = ("not reproduced: reversed", f"{stat} < alpha {alpha:g} {n}: b is better")
        elif interval[1] <= tol:
            decided = (f"not reproduced: no gain (p = {p:.2f}, interval {iv})",
                       f"{stat} >= alpha {alpha:g} {n}, and the 95% bootstrap interval of the gain {iv} excludes "
                       f"every gain above {tol:g}: the seeds would have shown one")
        else:
            decided = (f"{UNTESTABLE}too noisy to decide (p = {p:.2f}, interval {iv})",
                       f"{stat} >= alpha {alpha:g} {n}: no difference detected, but the 95% bootstrap interval of "
                       f"the gain {iv} still holds gains above {tol:g}; more seeds needed")
    if decided is None:                                          # expect "same"
        lo, hi = interval
        if -tol <= lo and hi <= tol:
            decided = (f"reproduced (equal within ±{tol:g})",
                       f"the 95% bootstrap interval of the difference {iv} lies inside ±{tol:g}")
        elif p < alpha:
            decided = (f"not reproduced: differ by {abs(diff):.2f} (p = {p:.2g})",
                       f"diff {diff:+.3f}, p = {p:.3g} < alpha {alpha:g}; interval {iv}")
        else:
            decided = (f"{UNTESTABLE}too noisy to show equality (interval {iv})",
                       f"the interval {iv} is not inside ±{tol:g} and p = {p:.3g} >= alpha {alpha:g}: more seeds "
                       f"needed")
    out["verdict"], out["reason"] = decided
    return {k: out[k] for k in ("verdict", "reason", "diff", "p", "interval", "summary_a", "summary_b")}


def _mask(name: str, values, n: int) -> np.ndarray:
    """n booleans (a list, tuple or 1-D bool array): which seeds learned."""
    if isinstance(values, np.ndarray):
        if values.ndim != 1 or values.dtype != np.bool_:
            raise ValueError(f"{name} must be a 1-D bool array (one per seed), got shape {values.shape} dtype "
                             f"{values.dtype}")
        values = values.tolist()
    if not isinstance(values, (list, tuple)) or not all(isinstance(v, (bool, np.bool_)) for v in values):
        raise ValueError(f"{name} must be a list of True / False, one per seed (did it learn?), got {values!r:.80}")
    if len(values) != n:
        raise ValueError(f"{name} must have one entry per seed ({n}), got {len(values)}")
    return np.asarray(values, dtype=bool)


def compare_learners(a, b, learned_a, learned_b, expect="better", min_learners=MIN_LEARNERS, chance=None,
                     ceiling=0.99, tol=0.05, alpha=0.05, n_perm=20000, seed=0) -> dict:
    """Decide a claim from the seeds that LEARNED the task only (an ablation between two models that each learn in
    some seeds and not in others: a difference of means over all seeds would mostly count who learned).

    a, b: per-seed accuracies on the compared setting; learned_a, learned_b: one bool per seed, whether it learned
    (decided on another setting or split than the one compared, e.g. validation accuracy on 4 needles). Untestable
    with fewer than ``min_learners`` learners on a side; otherwise :func:`compare` on the learners' accuracies
    (at least ``min_learners`` each; its ceiling / plateau / noise rules). Returns compare's keys with the summaries
    replaced by ``learned_a`` / ``learned_b``: {"k", "n", "lo", "hi" (Wilson 95%), "acc" (mean over learners, NaN
    if none)}."""
    a, b = _accs("a", a), _accs("b", b)
    la, lb = _mask("learned_a", learned_a, a.size), _mask("learned_b", learned_b, b.size)
    _expect(expect)
    min_learners = checks.pos_int("min_learners", min_learners)
    _chance(chance)                                 # compare's own checks, also where it is not reached
    _frac("ceiling", ceiling, lo_open=True)
    _frac("tol", tol, lo_open=True, hi_open=True)
    _frac("alpha", alpha, lo_open=True, hi_open=True)
    checks.pos_int("n_perm", n_perm)
    checks.nonneg_int("seed", seed)
    shares = {}
    for key, acc, mask in (("learned_a", a, la), ("learned_b", b, lb)):
        k = int(mask.sum())
        lo, hi = wilson(k, mask.size)
        shares[key] = {"k": k, "n": int(mask.size), "lo": lo, "hi": hi,
                       "acc": float(acc[mask].mean()) if k else math.nan}
    ka, kb = shares["learned_a"]["k"], shares["learned_b"]["k"]
    if min(ka, kb) < min_learners:
        return dict({"verdict": f"{UNTESTABLE}fewer than {min_learners} seeds learned",
                     "reason": f"{ka} of {a.size} and {kb} of {b.size} seeds learned; comparing the learners needs "
                               f"at least {min_learners} on each side",
                     "diff": math.nan, "p": math.nan, "interval": None}, **shares)
    # every seed passed here learned (the masks say so): compare's own "learned" check is made vacuous (level ~ 0)
    out = compare(a[la], b[lb], expect, level=1e-12, chance=chance, ceiling=ceiling, min_seeds=min_learners,
                  tol=tol, alpha=alpha, n_perm=n_perm, seed=seed)
    return dict({k: out[k] for k in ("verdict", "reason", "diff", "p", "interval")}, **shares)


def verdict_from_means(better, worse, expect="better", chance=None, ceiling=0.99, n_seeds=None,
                       min_seeds=10) -> str:
    """For callers with only (mean, std) pairs: "untestable here: ..." for fewer than min_seeds seeds (n_seeds given),
    both means >= ceiling, or both means <= chance + 0.05; else "see compare(): per-seed values needed"."""
    for name, pair in (("better", better), ("worse", worse)):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(f"{name} must be a (mean, std) pair, got {pair!r}")
        _frac(f"{name} mean", pair[0])
        _frac(f"{name} std", pair[1])
    _expect(expect)
    chance = _chance(chance)
    ceiling = _frac("ceiling", ceiling, lo_open=True)
    min_seeds = checks.pos_int("min_seeds", min_seeds)
    seeds = None if n_seeds is None else (checks.pos_int("n_seeds", n_seeds),) * 2
    decided = _untestable(float(better[0]), float(worse[0]), seeds, chance, ceiling, min_seeds)
    return decided[0] if decided else "see compare(): per-seed values needed"
