"""Near-copies among a class's exercise code, as MOSS finds them: flags for a lecturer, never a change of score.

    hybrid-lab grade subs01/ --lab 01 --gradebook gradebook.csv --similarity    # writes similarity_lab01.csv beside it

For each exercise, each submission's *own* code is the exercise cell less the stub every student was given (the
lines of ``pipeline.stub_source``, matched with difflib), so untouched stubs are empty and never match. That code is
normalised and fingerprinted by ``copydetect`` (Pygments tokens; names become ``V``/``F``, strings ``S``, comments
and whitespace dropped, so renaming variables or rewording comments changes nothing) into hashes of every
``K``-character window of the normalised text. Then:

* every pair of students: the share of each one's code covered by windows the other has too; windows that more
  than ``common_limit(n)`` submissions share are dropped first (MOSS's ``-m``: what a fifth of the class wrote alike
  is the natural way to write it, not evidence);
* each student against the library code the exercise asks for: the exercise's reference, the library callables it
  calls, those its spec switches off (``forbidden``), and the solution notebook's code; the share of the student's
  code that the library text covers (common windows dropped as above; the best match only). Beside it,
  ``solution_score``: what the course's own solution scores against the same code. For some exercises the
  expected answer *is* the library's code (the reference of 01.2, 06.3, 07.1, 09.1, 09.3 is the solution; the
  solution of 03.3, 04.3, 07.2, 07.3, 09.2, 10.3 scores 0.5-0.7 against the library): there a library flag with a
  solution_score near the student's says "wrote the expected answer", weak evidence on its own.

A pair is flagged when the larger share is at least ``THRESHOLD`` (0.5) and at least ``MIN_OVERLAP`` normalised
characters are shared. Why these numbers, measured on exercise 01.3 (tests/test_similarity.py): a renamed copy
scores 1.0 (every window survives renaming); the library's body pasted with a batch axis and dtypes edited scores
0.70; independent correct answers score 0.0-0.30 against each other, the library and the solution. 0.5 sits in that
gap. Normalised code is dense (``np.exp(dt[t] * A)`` is ``V.V(V[V]*V)``, 11 characters), so ``K`` = 20 (copydetect's
default of 25 put the edited paste at 0.52, too close to the line); ``K`` = 12 lifted independent answers to 0.5.
``MIN_OVERLAP`` (about two lines of normalised code) keeps a one-line answer contained in a longer one from being a
flag by itself. The lecturer reads the report; nothing here touches a grade.
"""
from __future__ import annotations

import csv
import difflib
import importlib
import inspect
import textwrap
from dataclasses import dataclass
from pathlib import Path

from hybrid_lab.course import pipeline as course

THRESHOLD = 0.5
MIN_OVERLAP = 50          # normalised characters shared (a renamed line like `V=V.V(V[V,V]*V)` is ~20)
K = 20                    # characters per fingerprint window of normalised code (see the module docstring)
COMMON_SHARE = 0.2        # a window in more than this share of submissions (and more than COMMON_MIN) is common
COMMON_MIN = 4
REPORT_COLUMNS = ("exercise", "student", "other", "score", "student_share", "other_share", "overlap", "solution_score")
SOLUTION = "solution: "   # the label prefix of the solution notebook's code among the references


@dataclass
class Flag:
    exercise: str
    student: str
    other: str            # another student, or "library: module:function" / "solution: solutions/NN_x.ipynb"
    score: float          # max(student_share, other_share) for a pair; student_share against the library
    student_share: float  # share of the student's own code found in the other's
    other_share: float
    overlap: int          # normalised characters shared
    # against the library: what the course's own solution scores against the same code (1.0 for the solution
    # itself). Near the student's score: the expected answer is the library's code, weak evidence of copying
    solution_score: float | None = None

    def note(self, who: str) -> str:
        """The flag as the gradebook shows it on ``who``'s row."""
        other = self.other if who == self.student else self.student
        base = "" if self.solution_score is None else f"; the solution scores {self.solution_score:.2f}"
        return f"{self.exercise} similar to {other} ({self.score:.2f}{base})"


def _copydetect():
    try:
        from copydetect import utils
    except ImportError:
        raise course.CourseError(f"--similarity needs the Python package copydetect; install the lab: "
                                 f"{course.install_hint()}") from None
    return utils


# ------------------------------------------------------------------------------------------ the code compared
def own_code(cell_src: str, stub: str) -> str:
    """The lines of an exercise cell that are not the stub's (the student's own code), in order."""
    mine = [ln for ln in cell_src.splitlines()]
    given = [ln.strip() for ln in stub.splitlines()]
    sm = difflib.SequenceMatcher(None, [ln.strip() for ln in mine], given, autojunk=False)
    out = []
    for tag, i1, i2, _, _ in sm.get_opcodes():
        if tag in ("replace", "delete"):
            out += [ln for ln in mine[i1:i2] if ln.strip()]
    return textwrap.dedent("\n".join(out))


def exercise_codes(nb, sol_nb) -> dict[str, str]:
    """{exercise id: the student's own code} of a submitted notebook (the cells whose header names an exercise of the
    solution ``sol_nb``; an exercise whose header was changed is left out, as grading leaves it out)."""
    code_cells = [c for c in sol_nb.cells if c.cell_type == "code"]
    stubs = {e.id: course.stub_source(course.cell_source(code_cells[e.cell]), e) for e in course.exercises(sol_nb)}
    out = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        src = course.cell_source(cell)
        m = course.HEADER.match((src.lstrip().splitlines() or [""])[0])
        if m and m["id"] in stubs and m["id"] not in out:
            out[m["id"]] = own_code(src, stubs[m["id"]])
    return out


def _solution_region(src: str) -> str:
    lines, out, inside = src.splitlines(), [], False
    for ln in lines:
        if ln.strip() == course.BEGIN:
            inside = True
        elif ln.strip() == course.END:
            inside = False
        elif inside:
            out.append(ln)
    return textwrap.dedent("\n".join(out))


def _hybrid_lab_callees(fn) -> list:
    """The hybrid_lab functions ``fn``'s code names directly (``ssm.ssd_scan``, ``select_blocks``): one level."""
    code = getattr(fn, "__code__", None)
    if code is None:                       # a Triton kernel object, a class: nothing to follow
        return []
    mod = inspect.getmodule(fn)
    out = []
    for name in code.co_names:
        obj = getattr(mod, name, None)
        if inspect.ismodule(obj) and obj.__name__.startswith("hybrid_lab."):
            out += [getattr(obj, n) for n in code.co_names if inspect.isfunction(getattr(obj, n, None))]
        elif inspect.isfunction(obj) and (obj.__module__ or "").startswith("hybrid_lab.") and obj is not fn:
            out.append(obj)
    return out


def library_sources(exercise_id: str) -> dict[str, str]:
    """{"library: module:function": source} of the library code exercise ``exercise_id`` asks for (see the module
    docstring); {} for an exercise no spec registers."""
    from hybrid_lab.exercises import framework

    try:
        ex = framework.get(exercise_id)
    except ValueError:
        return {}
    fns = [ex.reference] + _hybrid_lab_callees(ex.reference)
    for spec in ex.forbidden:
        try:
            fns.append(framework.resolve_forbidden(spec))
        except (ImportError, AttributeError):        # gpu_track without Triton: nothing to compare with
            continue
    out = {}
    for fn in fns:
        fn = getattr(fn, "fn", fn) if not inspect.isroutine(fn) else fn      # a Triton kernel: its Python function
        fn = inspect.unwrap(getattr(fn, "__func__", fn))
        try:
            src = textwrap.dedent(inspect.getsource(fn))
        except (OSError, TypeError):
            continue
        out.setdefault(f"library: {fn.__module__}:{fn.__qualname__}", src)
    return out


# ------------------------------------------------------------------------------------------ fingerprints
@dataclass
class _Print:
    hashes: set
    at: dict              # hash -> positions in the normalised text

    def covered(self, keep) -> int:
        """Normalised characters covered by the windows whose hash is in ``keep``."""
        pos = set()
        for h in keep:
            for i in self.at[h]:
                pos.update(range(i, i + K))
        return len(pos)


def fingerprint(code: str) -> _Print:
    """copydetect's normalisation of Python ``code`` and the hashes of all its K-character windows."""
    utils = _copydetect()
    norm, _ = utils.filter_code(code, "cell.py", "python")
    if len(norm) < K:
        return _Print(set(), {})
    hashes, at = utils.get_document_fingerprints(norm, K, 1)
    return _Print(set(hashes), {h: list(v) for h, v in at.items()})


def common_limit(n: int) -> int:
    """A window shared by more than this many of ``n`` submissions is common code (not compared)."""
    return max(COMMON_MIN, int(COMMON_SHARE * n))


def _shares(a: _Print, b: _Print, drop=frozenset()):
    shared = (a.hashes & b.hashes) - drop
    if not shared:
        return 0.0, 0.0, 0
    ca, cb = a.covered(a.hashes - drop), b.covered(b.hashes - drop)
    sa, sb = a.covered(shared), b.covered(shared)
    return sa / ca, sb / cb, min(sa, sb)


def compare(codes: dict, references: dict | None = None, threshold: float = THRESHOLD,
            min_overlap: int = MIN_OVERLAP) -> list[Flag]:
    """The flags of one class. ``codes``: {student: {exercise id: own code}}; ``references``: {exercise id:
    {label: source}} (the library code; default none). Sorted by exercise, then score (highest first)."""
    if not isinstance(codes, dict) or not all(isinstance(v, dict) for v in codes.values()):
        raise ValueError(f"codes: expected {{student: {{exercise id: code}}}}, got {type(codes).__name__}")
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold: expected a share in (0, 1], got {threshold!r}")
    if min_overlap < 0:
        raise ValueError(f"min_overlap: expected a number of characters >= 0, got {min_overlap!r}")
    references = references or {}
    flags: list[Flag] = []
    for ex in sorted({e for v in codes.values() for e in v} | set(references)):
        prints = {s: fingerprint(v[ex]) for s, v in sorted(codes.items()) if v.get(ex, "").strip()}
        prints = {s: p for s, p in prints.items() if p.hashes}
        count: dict = {}
        for p in prints.values():
            for h in p.hashes:
                count[h] = count.get(h, 0) + 1
        limit = common_limit(len(prints))
        drop = frozenset(h for h, c in count.items() if c > limit)
        names = list(prints)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                sa, sb, over = _shares(prints[a], prints[b], drop)
                if max(sa, sb) >= threshold and over >= min_overlap:
                    flags.append(Flag(ex, a, b, round(max(sa, sb), 3), round(sa, 3), round(sb, 3), over))
        refs = references.get(ex, {})
        sol = next((fingerprint(v) for k, v in refs.items() if k.startswith(SOLUTION)), None)
        best: dict = {}                   # student -> the library flag with the highest score (one per student)
        for label, src in refs.items():
            ref = fingerprint(src)
            base = None if sol is None else round(_shares(sol, ref)[0], 3)
            for s in names:
                # common windows dropped here too: half the class matching the library is the natural answer
                sa, sb, over = _shares(prints[s], ref, drop)
                if sa >= threshold and over >= min_overlap and (s not in best or sa > best[s].score):
                    best[s] = Flag(ex, s, label, round(sa, 3), round(sa, 3), round(sb, 3), over, base)
        flags += best.values()
    flags.sort(key=lambda f: (f.exercise, -f.score, f.student, f.other))
    return flags


def lab_references(sol_path) -> dict:
    """{exercise id: {label: source}} for the lab whose solution notebook is ``sol_path``: the library code (see
    :func:`library_sources`) and the solution's own code, labelled ``solution: solutions/NN_x.ipynb``."""
    sol_nb = course.read_notebook(sol_path)
    code_cells = [c for c in sol_nb.cells if c.cell_type == "code"]
    out = {}
    for e in course.exercises(sol_nb):
        refs = library_sources(e.id)
        refs[f"solution: solutions/{Path(sol_path).name}"] = _solution_region(course.cell_source(code_cells[e.cell]))
        out[e.id] = refs
    return out


def check_class(submissions: dict, sol_path, threshold: float = THRESHOLD, min_overlap: int = MIN_OVERLAP):
    """The flags of a class: ``submissions`` {student: notebook path}, ``sol_path`` the lab's solution notebook. A
    notebook that cannot be read is left out (grading already reports it as FAIL)."""
    sol_nb = course.read_notebook(sol_path)
    codes = {}
    for student, path in submissions.items():
        try:
            codes[student] = exercise_codes(course.read_notebook(path), sol_nb)
        except course.CourseError:
            continue
    return compare(codes, lab_references(sol_path), threshold, min_overlap)


def write_report(flags, path) -> Path:
    """The flags as a CSV (``REPORT_COLUMNS``), a header only when there are none."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(REPORT_COLUMNS)
        for fl in flags:
            w.writerow([getattr(fl, c) for c in REPORT_COLUMNS])
    return path


def report_class(paths, lab: str, results, gradebook=None, csv_path=None, quiet: bool = False):
    """After ``classgrade.grade_class``: compare the graded submissions of ``results`` (collected again from
    ``paths``), write ``similarity_labNN.csv`` beside the gradebook (else beside ``csv_path``, else here), put each
    student's flags in the gradebook's ``similarity`` column and print them. Returns (flags, report path)."""
    from hybrid_lab.course import classgrade
    from hybrid_lab.course import gradebook as book

    by_rel = {(s.student, s.rel): s.path for s in classgrade.collect(paths)}
    who = {}
    for r in results:
        if (r.student, r.path) in by_rel:
            who[r.student_id or r.student] = (r.student, r.path)
    sol = sorted((course.repo_root() / "solutions").glob(f"{lab}_*.ipynb"))
    if len(sol) != 1:
        raise course.CourseError(f"--lab {lab}: no such lab")
    flags = check_class({k: by_rel[v] for k, v in who.items()}, sol[0])
    where = Path(gradebook).parent if gradebook else Path(csv_path).parent if csv_path else Path(".")
    out = write_report(flags, where / f"similarity_lab{lab}.csv")
    if gradebook:
        notes: dict = {}
        for fl in flags:
            for s in (fl.student, fl.other):
                if s in who:
                    notes.setdefault(who[s], []).append(fl.note(s))
        book.add_similarity(gradebook, lab, notes)
    if not quiet:
        lines = [f"  {f.exercise}: {f.student} ~ {f.other}: {f.score:.2f}" for f in flags]
        print(f"similarity (a lecturer's call, no score changed): {len(flags)} flag(s) in {course.shown(out)}"
              + ("".join("\n" + ln for ln in lines)))
    return flags, out
