"""Class grading throughput: a folder of mixed submissions of two labs (00 and 02) with a roster, graded into one
gradebook with the Gradescope, Canvas and Moodle exports.

    .venv/bin/python benchmarks/bench_class_grading.py               # 60 submissions; writes results/class_grading.json
    .venv/bin/python benchmarks/bench_class_grading.py --count 16    # fewer (the JSON records the count)

Students cycle through eight kinds: correct, wrong (one exercise), untouched, looping (an endless loop in the second
exercise), crashing (the kernel exits in the first exercise), memory hog (a 6 GB allocation), duplicate (an older wrong
file beside a newer correct one: the newest is graded, the older one is flagged and not graded), renamed header (the
second exercise's first line changed: only that exercise is lost). One roster student submits nothing (flagged).
Measured: graded submissions per minute of wall time (both labs, ``-j`` workers), and each kind's points, so that a
slow run that grades wrongly does not pass for a fast one. Without bubblewrap the run is unsandboxed and the JSON
says so (the sandbox's cost is then not measured).
"""
from __future__ import annotations

import argparse
import copy
import csv
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _bench import write_result  # noqa: E402

import nbformat  # noqa: E402

from hybrid_lab.core import sandbox  # noqa: E402
from hybrid_lab.course import classgrade  # noqa: E402
from hybrid_lab.course import pipeline as course  # noqa: E402

KINDS = ("correct", "wrong", "untouched", "looping", "crashing", "memory hog", "duplicate", "renamed header")
LABS = {"00": "00_three_costs", "02": "02_hybrid_snapshots"}
# per lab: (exercise made wrong, old, new), the second exercise's header (renamed), its body's first line (looped)
EDITS = {"00": (("00.1", "return 2 * n_attn", "return n_attn"), "# Exercise 00.2 (2 points, warm-up, ~5 min)",
                ("00.2", "    if n_attn == 0:")),
         "02": (("02.1", "n_snapshots = L // every", "n_snapshots = L // every + 1"),
                "# Exercise 02.2 (2 points, warm-up, ~10 min)", ("02.2", "    if not hybrid:"))}


def _edit(nb, ex_id, old, new):
    nb = copy.deepcopy(nb)
    cell = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith(f"# Exercise {ex_id} "))
    if old not in cell.source:
        raise ValueError(f"exercise {ex_id}: expected {old!r} in its solution, got a cell without it")
    cell.source = cell.source.replace(old, new)
    return nb


def submission(lab: str, kind: str):
    """The notebook of one kind for one lab (for "duplicate": the newer, correct one)."""
    sol = course.repo_root() / "solutions" / f"{LABS[lab]}.ipynb"
    untouched = nbformat.read(str(course.lab_path_for(sol)), as_version=4)
    ok = course.fill_with_solutions(untouched, nbformat.read(str(sol), as_version=4))
    (wrong_id, old, new), header, (loop_id, first) = EDITS[lab]
    first_id = wrong_id
    if kind in ("correct", "duplicate"):
        return ok
    if kind == "wrong":
        return _edit(ok, wrong_id, old, new)
    if kind == "untouched":
        return untouched
    if kind == "looping":
        return _edit(ok, loop_id, first, "    while True:\n        pass\n" + first)
    if kind == "crashing":
        return _edit(ok, first_id, "    ### BEGIN SOLUTION", "    import os\n    os._exit(3)\n    ### BEGIN SOLUTION")
    if kind == "memory hog":
        return _edit(ok, first_id, "    ### BEGIN SOLUTION",
                     "    hog = bytearray(6_000_000_000)\n    ### BEGIN SOLUTION")
    if kind == "renamed header":
        return _edit(ok, loop_id, header, f"# Exercise {loop_id[-1]} (my answer)")
    raise ValueError(f"kind: expected one of {', '.join(KINDS)}, got {kind!r}")


def make_class(folder: Path, count: int):
    """``count`` graded submissions, half per lab, students cycling through KINDS; a roster with one more student
    (no submission). Returns (roster path, {lab: folder}, {student id: kind})."""
    per_lab = {"00": (count + 1) // 2, "02": count // 2}
    n = max(per_lab.values())
    kinds = {f"s{i:03d}": KINDS[i % len(KINDS)] for i in range(n)}
    roster = folder / "roster.csv"
    with open(roster, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "name", "email", "pattern"])
        for i in range(n + 1):
            w.writerow([f"s{i:03d}", f"Student{i:03d} Example", f"s{i:03d}@uni.example", f"*student{i:03d}*"])
    dirs = {}
    for lab, k in per_lab.items():
        d = dirs[lab] = folder / f"lab{lab}"
        d.mkdir()
        cache = {}
        for i in range(k):
            kind = kinds[f"s{i:03d}"]
            nb = cache.setdefault(kind, submission(lab, kind))
            p = d / f"Student{i:03d} Example - lab {lab}.ipynb"
            nbformat.write(nb, str(p))
            os.utime(p, (2_000_000, 2_000_000))
            if kind == "duplicate":
                old = d / f"Student{i:03d} Example - lab {lab} (old).ipynb"
                nbformat.write(cache.setdefault("wrong", submission(lab, "wrong")), str(old))
                os.utime(old, (1_000_000, 1_000_000))
    return roster, dirs, kinds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=60, help="graded submissions in all, half per lab (default 60)")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="submissions at once (default 2)")
    ap.add_argument("--timeout", type=int, default=10, help="seconds per cell (default 10: the loops' cost)")
    ap.add_argument("--memory-mb", type=int, default=3000, help="memory per submission in MB (default 3000)")
    ap.add_argument("--keep", help="a folder to keep the class, gradebook and exports in (default: a temporary one)")
    a = ap.parse_args(argv)
    if a.count < 2:
        raise ValueError(f"--count: expected at least 2 (one per lab), got {a.count}")
    sandboxed = sandbox.available()[0]
    tmp = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="hybrid_lab_bench_class_"))
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        roster, dirs, kinds = make_class(tmp, a.count)
        book, lms = tmp / "gradebook.csv", tmp / "lms"
        graded, took, per_kind = 0, {}, {}
        t_all = time.perf_counter()
        for lab, d in dirs.items():
            t0 = time.perf_counter()
            results = classgrade.grade_class([d], lab, roster=roster, gradebook=book, exports=lms, jobs=a.jobs,
                                             cell_timeout=a.timeout, memory_mb=a.memory_mb, quiet=True,
                                             unsafe=not sandboxed, seed=0)
            took[lab] = round(time.perf_counter() - t0, 1)
            done = [r for r in results if r.status != "no submission"]
            graded += len(done)
            for r in done:
                per_kind.setdefault(kinds.get(r.student_id, "?"), {}).setdefault(lab, []).append(
                    f"{r.total}/{r.max_points}" + ("" if r.status == "graded" else " " + r.status[:60]))
        wall = time.perf_counter() - t_all
        with open(book, newline="") as f:
            rows = list(csv.DictReader(f))
        exports = sorted(str(p.relative_to(lms)) for p in lms.rglob("*") if p.is_file())
        payload = {
            "benchmark": "class grading, labs 00 and 02, mixed submissions with a roster",
            "submissions_graded": graded, "count_asked": a.count, "jobs": a.jobs, "cell_timeout_s": a.timeout,
            "memory_mb": a.memory_mb, "sandboxed": sandboxed, "wall_s": round(wall, 1), "wall_s_per_lab": took,
            "submissions_per_minute": round(graded / wall * 60, 2),
            "points_by_kind": {k: {lab: sorted(set(v)) for lab, v in labs.items()} for k, labs in per_kind.items()},
            "gradebook_rows": len(rows), "flagged_rows": sum(bool(r["flags"]) for r in rows),
            "exports": {"gradescope_results": sum(e.endswith("results.json") for e in exports),
                        "other": [e for e in exports if not e.endswith("results.json")]},
        }
        write_result("class_grading", payload)
        print(f"measured: {graded} submissions in {wall:.0f} s = {payload['submissions_per_minute']} per minute "
              f"({a.jobs} workers, sandboxed: {sandboxed})")
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
