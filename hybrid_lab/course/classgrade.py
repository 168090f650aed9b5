"""Grade a class: many submissions of one lab, in parallel, into a gradebook and one feedback file per student.

    hybrid-lab grade submissions/ --lab 01 --csv lab01.csv --feedback feedback/ -j 2
    hybrid-lab grade submissions/ --lab 01 --roster roster.csv --gradebook gradebook.csv --exports lms/

Submissions are notebook files or folders with any names: ``alice.ipynb`` is student ``alice``; a folder ``bob/``
holding one notebook is student ``bob``; a folder of notebooks is one submission per notebook. Each submission is
graded by ``python -m hybrid_lab.course grade`` in its own process and its own scratch folder (the grader's kernel
refuses writes elsewhere), with a per-cell timeout, a time limit for the whole submission and a memory limit
(the address space of the process and its kernel). A submission that loops, crashes its kernel, runs out of memory or
is not a readable lab is a row with status ``FAIL`` and the reason, never the end of the run; so is an exercise whose
header line was changed (only that exercise scores 0). Two submissions of one student: the newest is graded and the
row is flagged. A roster, the gradebook across labs and the LMS exports: :mod:`hybrid_lab.course.gradebook`.
File names in the CSV are relative to the folder named on the command line.
"""
from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from hybrid_lab.course import gradebook as book
from hybrid_lab.course import pipeline as course


@dataclass
class Submission:
    student: str
    path: Path
    rel: str = ""         # the file name inside the folder named on the command line (what the CSV shows)

    def __post_init__(self):
        self.rel = self.rel or self.path.name


@dataclass
class Result:
    student: str
    path: str
    status: str                                  # "graded" or "FAIL: why"
    points: dict = field(default_factory=dict)   # exercise id -> points earned
    total: int = 0
    max_points: int = 0
    rows: list = field(default_factory=list)     # the grader's rows (dicts), for the feedback file
    seconds: float = 0.0
    student_id: str = ""                         # the roster's id ('' without a roster or for an unmatched file)
    name: str = ""
    email: str = ""
    flags: list = field(default_factory=list)    # what the lecturer must look at (duplicates, no roster entry)


def collect(paths) -> list[Submission]:
    """The submissions named by ``paths`` (files and folders, see the module docstring), sorted by student name.
    Raises CourseError for a path that does not exist or holds no notebook. Two submissions of one student are both
    returned (:func:`hybrid_lab.course.gradebook.assign` picks one and flags it)."""
    subs: list[Submission] = []
    for p in map(Path, paths):
        if not p.exists():
            raise course.CourseError(f"{course.shown(p)}: no such file or folder; name submission notebooks or "
                                     f"folders of them, e.g. hybrid-lab grade submissions/ --lab 01")
        if p.is_file():
            if p.suffix != ".ipynb":
                raise course.CourseError(f"{course.shown(p)} is not a notebook (.ipynb)")
            subs.append(Submission(p.stem, p, p.name))
            continue
        found = sorted(p.glob("*.ipynb"))
        folders = sorted(d for d in p.iterdir() if d.is_dir() and not d.name.startswith("."))
        if found and not folders and len(found) == 1 and p != Path("."):
            subs.append(Submission(p.name, found[0], f"{p.name}/{found[0].name}"))   # alice/x.ipynb: the folder
            continue                                                                   # names the student
        subs += [Submission(f.stem, f, f.name) for f in found]
        for d in folders:
            inner = sorted(d.glob("*.ipynb"))
            if len(inner) == 1:
                subs.append(Submission(d.name, inner[0], f"{d.name}/{inner[0].name}"))
            elif len(inner) > 1:
                subs += [Submission(f"{d.name}/{f.stem}", f, f"{d.name}/{f.name}") for f in inner]
        if not found and not any(sorted(d.glob("*.ipynb")) for d in folders):
            raise course.CourseError(f"{course.shown(p)}: no notebook in this folder or its subfolders")
    unique = {s.path.resolve(): s for s in subs}          # one file named twice is one submission
    return sorted(unique.values(), key=lambda s: (s.student, s.rel))


def _limit_memory(mb: int):
    def apply():
        os.setsid()                               # its own process group: a timeout kills the kernel too
        if mb:
            import resource
            resource.setrlimit(resource.RLIMIT_AS, (mb << 20, mb << 20))
    return apply


def grade_one(sub: Submission, lab: str, cell_timeout: int, time_limit: int, memory_mb: int,
              threads: int = 1, unsafe: bool = False, seed: int | None = None, hidden=None) -> Result:
    """Grade one submission in a child process (see the module docstring), its BLAS / OpenMP pools limited to
    ``threads`` (parallel workers each with a pool of every core oversubscribe the CPU: measured 2.9 vs 6.4 lab-04
    submissions per minute on 2 cores)."""
    t0 = time.monotonic()
    env = dict(os.environ, **{v: str(threads) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")})
    res = Result(sub.student, sub.rel, "graded")
    with tempfile.TemporaryDirectory(prefix="hybrid_lab_class_") as tmp:
        out = Path(tmp) / "rows.json"
        cmd = [sys.executable, "-m", "hybrid_lab.course", "grade", str(sub.path.resolve()), "--lab", lab,
               "--timeout", str(cell_timeout), "--json", str(out),
               *(["--unsafe"] if unsafe else ["--require-sandbox"]), *(["--seed", str(seed)] if seed is not None
                                                                       else []),
               *(["--cases", str(Path(hidden).resolve())] if hidden else [])]
        proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=_limit_memory(memory_mb) if os.name == "posix" else None)
        try:
            _, err = proc.communicate(timeout=time_limit)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                proc.kill()
            proc.communicate()
            res.status = f"FAIL: took longer than {time_limit} s in all"
            res.seconds = time.monotonic() - t0
            return res
        if out.exists():
            res.rows = json.loads(out.read_text())
        else:
            last = [ln for ln in err.splitlines() if ln.strip()][-1:] or [f"exit code {proc.returncode}"]
            why = last[0].removeprefix("hybrid-lab: ")
            if "MemoryError" in err:                  # the known cause: it ran into the address-space limit
                why = f"the grader ran out of memory ({why}; limit {memory_mb} MB)"
            elif proc.returncode < 0:                   # a signal: named, not guessed at
                try:
                    name = signal.Signals(-proc.returncode).name
                except ValueError:
                    name = "an unknown signal"
                why = (f"the grader was killed by signal {-proc.returncode} ({name}: a crash, or the system's "
                       f"out-of-memory killer; its limit is {memory_mb} MB) ({why})")
            res.status = f"FAIL: {why[:300]}"
    for r in res.rows:
        if r["exercise"] != "setup":
            res.points[r["exercise"]] = r["points"] if r["passed"] else 0
            res.max_points += r["points"]
    res.flags = [f"{book.CHANGED_HEADER} of exercise {r['exercise']}: graded as not done" for r in res.rows
                 if r["message"].startswith("no cell starts with")]
    res.total = sum(res.points.values())
    res.seconds = time.monotonic() - t0
    return res


def grade_class(paths, lab: str, csv_path=None, feedback=None, jobs: int | None = None, cell_timeout: int = 120,
                time_limit: int = 900, memory_mb: int = 8192, quiet: bool = False, unsafe: bool | None = None,
                seed: int | None = None, hidden=None, roster=None, gradebook=None, exports=None) -> list[Result]:
    """Grade every submission under ``paths`` against solutions/ lab ``lab``; write the CSV and the feedback.
    Each submission runs in the bubblewrap sandbox (a CourseError when there is none, unless ``unsafe``; None:
    ``HYBRID_LAB_GRADE_UNSAFE=1``). ``roster``: a roster CSV (:mod:`hybrid_lab.course.gradebook`) naming the
    students; ``gradebook``: the course gradebook CSV this lab is added to (or replaced in); ``exports``: a folder for
    the Gradescope, Canvas and Moodle files of the whole gradebook. Returns one Result per graded submission and per
    roster student with none (status ``no submission``)."""
    from hybrid_lab.core import sandbox

    if unsafe is None:
        unsafe = os.environ.get(course.UNSAFE_ENV) == "1"
    ok, why = sandbox.available()
    if not ok and not unsafe:
        raise course.CourseError(f"{why}. A class is graded only inside the bubblewrap sandbox; install it, or pass "
                                 f"--unsafe (a separate process and the audit hook only)")
    sol = _solution(lab)
    exs = course.exercises(course.read_notebook(sol))
    try:
        students = book.read_roster(roster) if roster else None
    except ValueError as exc:
        raise course.CourseError(f"--roster: {exc}") from None
    subs = collect(paths)
    if not subs:
        raise course.CourseError("no submissions found")
    plan = book.assign(subs, students)
    jobs = max(1, jobs or os.cpu_count() or 1)
    if not quiet:
        print(f"Grading {len(plan.chosen)} submission(s) of {sol.name} with {jobs} worker(s) ...", flush=True)
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        threads = max(1, (os.cpu_count() or 1) // jobs)
        results = list(pool.map(lambda c: grade_one(c[1], lab, cell_timeout, time_limit, memory_mb, threads,
                                                    bool(unsafe) or not ok, seed, hidden), plan.chosen))
    took = time.monotonic() - t0
    for (st, _, flags), r in zip(plan.chosen, results):
        r.flags = list(flags) + r.flags
        if st is not None:
            r.student_id, r.name, r.email = st.id, st.name, st.email
    results += [Result(st.id, "", book.NO_SUBMISSION, student_id=st.id, name=st.name, email=st.email,
                       flags=[book.NO_SUBMISSION]) for st in plan.missing]
    results.sort(key=lambda r: (not r.student_id, r.student_id or r.student))
    max_points = sum(e.points for e in exs)
    for r in results:
        r.max_points = max_points
    book_data = None
    if gradebook:
        try:
            book_data = book.add_lab(gradebook, book.lab_record(lab, sol.stem, exs, results), students)
        except ValueError as exc:              # a JSON file of something else, or not JSON
            raise course.CourseError(f"--gradebook {course.shown(gradebook)}: {exc}; name a new file or one this "
                                     f"command wrote") from None
    if exports:
        book.write_exports(book_data or {"labs": {lab: book.lab_record(lab, sol.stem, exs, results)},
                                         "roster": [vars(s) for s in students or []]}, exports)
    if csv_path:
        write_csv(results, exs, csv_path)
    if feedback:
        write_feedback(results, feedback, sol.name)
    if not quiet:
        print(format_gradebook(results, exs))
        flagged = [f"  {r.student_id or r.path}: {x}" for r in results for x in r.flags]
        if flagged:
            print(f"flagged ({len(flagged)}), see the flags column:\n" + "\n".join(flagged))
        print(f"graded {len(plan.chosen)} submission(s) in {took:.0f} s ({len(plan.chosen) / took * 60:.1f} per "
              f"minute, {jobs} worker(s))" + (f"; lab CSV: {course.shown(csv_path)}" if csv_path else "")
              + (f"; gradebook: {course.shown(gradebook)}" if gradebook else "")
              + (f"; LMS exports: {course.shown(exports)}/" if exports else "")
              + (f"; feedback: {course.shown(feedback)}/" if feedback else ""))
    return results


def common_lab(paths) -> str:
    """The lab number all named files start with, else a CourseError asking for --lab."""
    nums = {Path(p).name[:2] for p in paths if Path(p).is_file()}
    if len(nums) == 1 and all(Path(p).is_file() for p in paths) and next(iter(nums)).isdigit():
        return nums.pop()
    raise course.CourseError("which lab are these submissions of? name it: hybrid-lab grade SUBMISSIONS... --lab 01")


def _solution(lab: str) -> Path:
    lab = str(lab)
    if not re.fullmatch(r"\d\d", lab):
        raise course.CourseError(f"--lab: expected a lab number like 01, got {lab!r}")
    sols = sorted((course.repo_root() / "solutions").glob(f"{lab}_*.ipynb"))
    if len(sols) != 1:
        raise course.CourseError(f"--lab {lab}: no such lab; the labs are "
                                 + ", ".join(p.name[:2] for p in sorted((course.repo_root() / "solutions").glob(
                                     "[0-9][0-9]_*.ipynb"))))
    return sols[0]


def write_csv(results, exs, path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student", "id", "name", "file"] + [e.id for e in exs] + ["total", "max", "status", "flags"])
        for r in results:
            w.writerow([r.student, r.student_id, r.name, r.path] + [r.points.get(e.id, 0) for e in exs]
                       + [r.total, r.max_points, r.status, "; ".join(r.flags)])


def write_feedback(results, folder, lab_name: str) -> None:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for r in results:
        if r.status == book.NO_SUBMISSION:
            continue
        name = re.sub(r"[^\w.-]+", "_", r.student_id or r.student) + ".txt"
        if r.rows:
            rows = [course.Row(**d) for d in r.rows]
            body = course.format_table(rows, lab_name)
        else:
            body = f"not graded: {r.status}"
        flags = "".join(f"flagged: {x}\n" for x in r.flags)
        (folder / name).write_text(f"{lab_name}, student {r.student_id or r.student} ({r.path})\n{flags}{body}\n")


def format_gradebook(results, exs) -> str:
    w = max([7] + [len(r.student_id or r.student) for r in results])
    head = f"{'student':<{w}}  " + "  ".join(f"{e.id:>5}" for e in exs) + "  total  status"
    lines = [head, "-" * len(head)]
    for r in results:
        lines.append(f"{r.student_id or r.student:<{w}}  " + "  ".join(f"{r.points.get(e.id, 0):>5}" for e in exs)
                     + f"  {r.total:>2}/{r.max_points:<2}  {r.status}")
    return "\n".join(lines)
