"""The bad-input run over the public API: how many bad inputs come back as a silent result or
as another exception than a ValueError, and how many returns the allowlists document.

It runs the tables the property tests hold, every case of each, without the shortcuts CI takes:

- ``round1``: ``tests/test_bad_input_property.py``'s TABLE, every (callable, argument, mutation), each mutation
  with the survey's four draws (the first, then three seeded ones); expected: a ValueError naming an argument.
- ``round2``: the same TABLE's extreme and equivalent inputs (layouts, float16 / float32 / bfloat16, magnitudes
  1e30 and 1e-30, one extreme entry, every axis 0, sizes near 2**62, None and scalars for arrays, duplicates),
  the slow modules CI leaves out (``ROUND2_SKIP``: trained, widgets) included; each case has its rule.
- ``gpu``: ``tests/test_gpu_bad_input.py``'s GPU_TABLE, every public gpu_track wrapper (the Triton interpreter
  without a GPU); skipped, with the reason, where torch or triton is missing.

Every case lands in one bucket:

    ok                     refused with a ValueError naming an argument, or the rule's result (equal numbers, ...)
    allowlisted            returned, and the allowlist entry's documented result shows (ALLOW + its check)
    pending                a round-2 case listed in PENDING with why (not run)
    silent                 returned where a ValueError was due, or a wrong number (other numbers than the equal
                           input's, NaN where the rule wants none, an allowlisted result without what it documents)
    other_exception        TypeError, IndexError, MemoryError, ... (anything but a ValueError), or a hang
    unnamed_value_error    a ValueError whose message names no argument (numpy's "array is too big", ...)
    refused_valid          a ValueError for an input that must give the baseline's numbers (a layout, np.int32)

The acceptance wants ``silent`` and ``other_exception`` at 0 (``unnamed_value_error`` and ``refused_valid`` are
failures of the message rule and of the layout rule). Usage:

    .venv/bin/python benchmarks/bad_input_report.py [--out PATH] [--only SUBSTRING ...] [--no-gpu]

Prints the counts and every failing case, writes JSON (default ``benchmarks/results/bad_input_report.json``), and
exits 1 when any case is silent or raises another exception.
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

FAILING = ("silent", "other_exception", "unnamed_value_error", "refused_valid")


def _short(s, n=160):
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: n - 3] + "..."


# ------------------------------------------------------------------------------------------------ round 1
def round1_bucket(t, name, fn, entry, arg, label, d):
    kinds = t.baseline(name, fn, entry)
    kwargs = {k: a.v for k, a in kinds.items()}
    kwargs[arg] = kinds[arg].mutate(label, d)
    try:
        result = t.call(fn, kwargs, entry.timeout_s)
    except ValueError as e:
        return ("ok", None) if t.names_a_parameter(str(e), fn, kwargs) else ("unnamed_value_error", str(e))
    except t.Hang as e:
        return "other_exception", f"hangs ({e})"
    except Exception as e:  # noqa: BLE001
        if t.allowed(name, arg, label):
            return "allowlisted", f"{type(e).__name__} (allowed: {t.allowed(name, arg, label)})"
        return "other_exception", f"{type(e).__name__}: {e}"
    if t.allowed(name, arg, label):
        failed = t.failed_allow_check(name, arg, label, result)
        if failed is not None:
            return "silent", failed
        checked = t.ALLOW_CHECKS.get(t._allow_key(name, arg, label)) is not None
        return "allowlisted", ("checked: " if checked else "valid input: ") + t.allowed(name, arg, label)
    return "silent", f"returns {t._short(result, 80)}"


def run_round1(t, names):
    out = []
    for name in names:
        fn, entry = t.resolve(name), t.TABLE[name]
        for arg, label in t.cases_of(name, fn, entry):
            bucket, what = "ok", None
            for d in (t.FirstDraw(), t.SeededDraw(0), t.SeededDraw(1), t.SeededDraw(2)):
                bucket, what = round1_bucket(t, name, fn, entry, arg, label, d)
                if bucket in FAILING:
                    break
            out.append((name, arg, label, bucket, what))
    return out


# ------------------------------------------------------------------------------------------------ round 2
def round2_bucket(t, name, fn, entry, arg, label):
    if t._pending(name, arg, label):
        return "pending", t._pending(name, arg, label)
    returned = []
    real = t._round2_allowed
    t._round2_allowed = lambda *c: returned.append(real(*c)) or real(*c)    # asked only after a return
    try:
        what = t.run_round2(name, fn, entry, arg, label, t.FirstDraw())
    finally:
        t._round2_allowed = real
    if what is None:
        return ("allowlisted", returned[0][0]) if returned and returned[0] else ("ok", None)
    if what.startswith("raises ValueError, unlike"):
        return "refused_valid", what
    if what.startswith("ValueError names no argument"):
        return "unnamed_value_error", what
    if what.startswith(("raises ", "hangs")):
        return "other_exception", what
    return "silent", what               # returns where refused, NaN, or other numbers than the equal input's


def run_round2(t, names):
    return [(name, arg, label, *round2_bucket(t, name, t.resolve(name), t.TABLE[name], arg, label))
            for name in names for arg, label in t.round2_cases(name, t.resolve(name), t.TABLE[name])]


# ------------------------------------------------------------------------------------------------ gpu wrappers
def run_gpu(only):
    try:
        import test_gpu_bad_input as g
    except BaseException as e:  # noqa: BLE001  (pytest.importorskip raises Skipped, a BaseException)
        return None, f"not run: {type(e).__name__}: {e}"
    returned = set()
    real_allowed = g._allowed

    def allowed(name, arg, label):        # _outcome asks only after a return: an allowlisted result
        v = real_allowed(name, arg, label)
        if v is not None:
            returned.add((name, arg, label))
        return v

    g._allowed = allowed
    out = []
    for name, arg, label in g.CASES:
        if only and not any(o in name for o in only):
            continue
        what = g._outcome(name, arg, label)
        if what is None:
            bucket = "allowlisted" if (name, arg, label) in returned else "ok"
        elif what.startswith("raised ValueError for a valid"):
            bucket = "refused_valid"
        elif what.startswith("ValueError not naming") or what.startswith("ValueError naming no"):
            bucket = "unnamed_value_error"
        elif what.startswith(("returned", "allowed return failed")) or "rounded other operands" in what:
            bucket = "silent"
        else:
            bucket = "other_exception"
        out.append((name, arg, label, bucket, what))
    g._allowed = real_allowed
    return out, None


# ------------------------------------------------------------------------------------------------ report
def summarize(rows):
    counts = collections.Counter(r[3] for r in rows)
    out = {"cases": len(rows), **{b: counts.get(b, 0) for b in ("ok", "allowlisted", "pending", *FAILING)}}
    # round 1's allowlisted returns whose entry has no check of the result: the mutation is a valid input there
    # (any shape of an elementwise function, 0 where 0 is allowed); the others are checked to show what they document
    out["allowlisted_valid_input"] = sum(1 for r in rows if r[3] == "allowlisted" and str(r[4]).startswith("valid"))
    return out


def report(only=(), gpu=True):
    import test_bad_input_property as t     # each call runs with progress bars and warnings off (_quiet_call)
    names = [n for n in sorted(t.TABLE) if not only or any(o in n for o in only)]
    res, t0 = {}, time.perf_counter()
    parts = {"round1": lambda: run_round1(t, names), "round2": lambda: run_round2(t, names)}
    rows = {}
    for part, run in parts.items():
        t1 = time.perf_counter()
        rows[part] = run()
        res[part] = dict(summarize(rows[part]), seconds=round(time.perf_counter() - t1, 1))
    if gpu:
        t1 = time.perf_counter()
        g_rows, why = run_gpu(only)
        if g_rows is None:
            res["gpu"] = {"skipped": why}
        else:
            rows["gpu"] = g_rows
            res["gpu"] = dict(summarize(g_rows), seconds=round(time.perf_counter() - t1, 1))
    every = [r for part in rows.values() for r in part]
    res["total"] = summarize(every)
    res["public_callables"] = {"tabled": len(names), "skipped_with_reason": len(t.SKIP),
                               "without_entry": sorted(set(t.PUBLIC) - set(t.TABLE) - set(t.SKIP))}
    res["allowlist_entries"] = {"round1": len(t.ALLOW), "round1_with_check": len(t.ALLOW_CHECKS)}
    res["failing_cases"] = [{"part": part, "callable": r[0], "argument": r[1], "mutation": r[2], "bucket": r[3],
                             "what": _short(r[4])} for part, prow in rows.items() for r in prow if r[3] in FAILING]
    res["seconds"] = round(time.perf_counter() - t0, 1)
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "bad_input_report.json"))
    ap.add_argument("--only", nargs="*", default=[], help="callables whose name contains one of these")
    ap.add_argument("--no-gpu", action="store_true", help="leave out the gpu_track wrappers")
    args = ap.parse_args(argv)
    res = report(args.only, gpu=not args.no_gpu)
    for part in ("round1", "round2", "gpu", "total"):
        if part in res:
            print(f"{part:7s} " + "  ".join(f"{k} {v}" for k, v in res[part].items()))
    for f in res["failing_cases"]:
        print(f"  [{f['part']}] {f['bucket']:20s} {f['callable']}({f['argument']} <- {f['mutation']}): {f['what']}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    print("wrote", args.out)
    return 1 if res["total"]["silent"] or res["total"]["other_exception"] else 0


if __name__ == "__main__":
    sys.exit(main())
