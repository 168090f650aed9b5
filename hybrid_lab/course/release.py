"""Releases of the notebooks beyond the practice labs: assignments for credit, and an nbgrader course.

* ``hybrid-lab build --mode assignment --out DIR``: each lab as an assignment. No stored output from the first
  exercise on (no reference answer under a stub or its check), and each check cell runs the student's function
  once without a verdict and without the reference standing in (``check(..., mode="assignment")``). The graded
  checks stay on the lecturer's side: ``hybrid-lab grade`` runs the checks of ``solutions/`` on the student's cells,
  as for practice labs. (The library itself ships with the package, its functions are the answers; an assignment
  hides outputs and verdicts, and the grader switches the library off while a student's function runs.)
* ``hybrid-lab export nbgrader DIR [NN ...]``: an nbgrader course folder, ``DIR/source/<NN_name>/<NN_name>.ipynb``
  for each lab of solutions/ (all, or the ones named: ``01``, ``01_selective_ssm``, or a path to the lab or its
  solution) and ``DIR/nbgrader_config.py``, with nbgrader's cell metadata: exercise cells are solution cells
  (nbgrader's own ``### BEGIN SOLUTION`` markers, the ones solutions/ use); each exercise's check line becomes an
  autograded test cell worth the exercise's points (``check(..., mode="nbgrader")`` raises unless the exercise
  passes) that sets up all it needs, so a failing or timed-out test never breaks the next; every other cell
  (the rest of the check cell included) is read-only and not graded.
"""
from __future__ import annotations

import re
from pathlib import Path

from hybrid_lab.course import pipeline as course

CHECK_CALL = re.compile(r'check\(\s*"(?P<id>[0-9A-Za-z._-]+)"\s*,\s*(?P<fn>\w+)\s*\)')


def _with_mode(src: str, mode: str) -> str:
    return CHECK_CALL.sub(lambda m: f'check("{m["id"]}", {m["fn"]}, mode="{mode}")', src)


def _solutions(paths=None) -> list[Path]:
    return [Path(p) for p in paths] if paths else sorted((course.repo_root() / "solutions").glob("[0-9][0-9]_*.ipynb"))


def make_assignment(sol_nb):
    """The assignment version of a solution notebook (see the module docstring)."""
    nb = course.make_lab(sol_nb)
    exs = course.exercises(sol_nb)
    first = exs[0].cell if exs else None
    k = -1
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        k += 1
        if first is not None and k >= first:
            cell.outputs, cell.execution_count = [], None
            cell.source = _with_mode(course.cell_source(cell), "assignment")
    nb.metadata["hybrid_lab"] = {"kind": "assignment", "generated_from": "solutions/", "do_not_edit": "regenerate "
                                 "with hybrid-lab build --mode assignment", "cells_sha256": course.cells_hash(nb)}
    return nb


def build_assignments(out, paths=None) -> list[Path]:
    """Write the assignment version of each solution (all by default) into ``out`` (not labs/ or solutions/)."""
    out = Path(out)
    root = course.repo_root()
    if out.resolve() in ((root / "labs").resolve(), (root / "solutions").resolve()):
        raise course.CourseError(f"--out {course.shown(out)}: assignments go to their own folder, not over the "
                                 f"practice labs or the solutions; e.g. --out build/assignment")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for sol in _solutions(paths):
        dst = out / sol.name
        dst.write_text(course.dumps(make_assignment(course.read_notebook(sol))))
        written.append(dst)
    return written


def _nbgrader(cell, grade_id: str, *, solution=False, grade=False, locked=False, points=None) -> None:
    md = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": 3, "solution": solution}
    if points is not None:
        md["points"] = points
    cell.metadata["nbgrader"] = md


PASSED = "_hybrid_lab_passed"       # the kernel's record of the test cells that passed (ids), kept by the test cells


def nbgrader_test_source(ex, fn: str, earlier, check_line: str) -> str:
    """The autograded test cell of exercise ``ex`` (its function ``fn``): it depends on no other test cell and on
    nothing the lab's cells define, only on the student's function (and the functions of ``earlier`` exercises, if
    it calls them). ``check`` is imported here; an earlier exercise whose test did not pass (it failed, raised, or was
    interrupted by nbgrader's timeout before it could say so) has its reference stand in, as ``hybrid-lab grade``
    does for an exercise that builds on one that failed; the exercise passes iff ``check`` does."""
    lines = [f"# Autograded test of exercise {ex.id} ({ex.points} points). It sets up all it needs: a failed or "
             f"timed-out test above",
             "# never breaks it (an exercise above that did not pass has its reference stand in, as with hybrid-lab "
             "grade).",
             "from hybrid_lab.exercises import check"]
    if earlier:
        ids = ", ".join(f'"{e.id}"' for e in earlier) + ("," if len(earlier) == 1 else "")
        lines += ["from hybrid_lab.exercises import framework as _exercises",
                  f"for _id in ({ids}):",
                  f"    if _id not in globals().get({PASSED!r}, ()):",
                  "        globals()[_exercises.get(_id).function] = _exercises.get(_id).reference"]
    lines += [_with_mode(check_line, "nbgrader"),
              f"globals().setdefault({PASSED!r}, set()).add({ex.id!r})"]
    return "\n".join(lines)


def _split_check_cell(src: str, ex, fn: str):
    """(before, check line, after) of a check cell whose check call is a top-level statement of its own line."""
    lines = src.splitlines()
    at = [i for i, ln in enumerate(lines) if CHECK_CALL.search(ln)]
    if not at or lines[at[0]] != lines[at[0]].lstrip() or not lines[at[0]].startswith(f"{fn} = check("):
        raise course.CourseError(f"exercise {ex.id}: its check cell must have `{fn} = check(\"{ex.id}\", {fn})` "
                                 f"on a line of its own (not inside a block) for the nbgrader export")
    i = at[0]
    return "\n".join(lines[:i]).strip("\n"), lines[i], "\n".join(lines[i + 1:]).strip("\n")


def make_nbgrader(sol_nb):
    """The nbgrader source version of a solution notebook (see the module docstring).

    Each exercise's check cell becomes up to three cells: what came before the check line and what came after it
    (read-only cells, not graded: the lab's demonstration, which may use the exercise's function) and, between
    them, the autograded test cell of :func:`nbgrader_test_source`, which needs nothing from any other cell but the
    student's function. So an endless loop that nbgrader's timeout interrupts, or a test that raises, costs only its
    own exercise (when the test was the whole check cell, 01.3's also defined the input ``x2`` of 01.4's
    demonstration: a timeout in 01.3 failed 01.4 with a NameError)."""
    import copy

    nbf = course.nbformat_module()
    nb = copy.deepcopy(sol_nb)
    exs = course.exercises(sol_nb)
    by_cell = {e.cell: e for e in exs}
    out, k, current, checked = [], -1, None, []         # out: (cell, role, exercise)
    for cell in nb.cells:
        if cell.cell_type != "code":
            out.append((cell, "locked", None))
            continue
        k += 1
        cell.outputs, cell.execution_count = [], None
        if k in by_cell:
            current = by_cell[k]
            out.append((cell, "solution", current))
            continue
        src = course.cell_source(cell)
        m = CHECK_CALL.search(src)
        if current is None or not m or m["id"] != current.id or current.id in checked:
            out.append((cell, "locked", None))
            continue
        before, line, after = _split_check_cell(src, current, m["fn"])
        if before:
            out.append((nbf.v4.new_code_cell(before), "added", None))
        cell.source = nbgrader_test_source(current, m["fn"], exs[:exs.index(current)], line)
        out.append((cell, "test", current))
        if after:
            out.append((nbf.v4.new_code_cell(after), "added", None))
        checked.append(current.id)
    missing = [e.id for e in exs if e.id not in checked]
    if missing:
        raise course.CourseError(f"exercises without a check cell (check(\"NN.K\", fn) below them): {missing}")
    nb.cells = [c for c, _, _ in out]
    for i, (cell, role, ex) in enumerate(out):
        if role == "solution":
            _nbgrader(cell, f"exercise-{ex.id.replace('.', '-')}", solution=True)
        elif role == "test":
            _nbgrader(cell, f"check-{ex.id.replace('.', '-')}", grade=True, locked=True, points=ex.points)
        else:
            _nbgrader(cell, f"cell-{i:03d}", locked=True)
        if role == "added":
            cell["id"] = f"nbgrader-{i:03d}"     # a fixed id, not nbformat's random one: the export is reproducible
    nb.metadata.pop("hybrid_lab", None)
    return nb


NBGRADER_CONFIG = '''c = get_config()  # noqa: F821 (nbgrader's config loader provides it)
c.CourseDirectory.course_id = "hybrid-lab"
c.ExecutePreprocessor.timeout = 300
# nbclient waits for a cell's reply in one long poll, which on some machines misses the wake-up and lasts the whole
# timeout (a false "timed out"): its kernel client polls in 0.5 s slices, as hybrid-lab's own notebook runs do
c.AsyncKernelManager.client_factory = "hybrid_lab.course.release.SlicedKernelClient"
'''


def __getattr__(name: str):
    """``SlicedKernelClient``, built when nbgrader_config.py names it (jupyter_client is imported only then): an
    asynchronous kernel client whose channels wait in slices (:func:`hybrid_lab.course.pipeline.poll_in_slices`)."""
    if name != "SlicedKernelClient":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from jupyter_client.asynchronous import AsyncKernelClient

    class SlicedKernelClient(AsyncKernelClient):
        def start_channels(self, *args, **kwargs):
            super().start_channels(*args, **kwargs)
            course.poll_in_slices(self)

    SlicedKernelClient.__qualname__ = name
    globals()[name] = SlicedKernelClient
    return SlicedKernelClient


EXPORT_HELP = ("Write an nbgrader course folder DIR: DIR/source/NN_name/NN_name.ipynb for each lab of solutions/ (all "
               "of them, or the labs named: 01, 01_selective_ssm or the lab's path) and DIR/nbgrader_config.py. "
               "Exercise cells become nbgrader solution cells; each exercise's check becomes an autograded test "
               "cell worth its points that sets up all it needs (a failed or timed-out test never breaks the next); "
               "every other cell is read-only. Then: cd DIR; nbgrader generate_assignment NN_name; nbgrader "
               "autograde NN_name.")
EXPORT_EXAMPLE = "hybrid-lab export nbgrader build/nbgrader 00 01"


def export_format(value: str) -> str:
    """argparse type of ``export``'s first argument: the one format there is."""
    if value != "nbgrader":
        raise _usage(f"got {value!r}; the one export is an nbgrader course: hybrid-lab export nbgrader DIR [NN ...] "
                     f"(DIR: the course folder to write, NN: the labs, default all), e.g. {EXPORT_EXAMPLE}")
    return value


def _usage(message: str):
    import argparse
    return argparse.ArgumentTypeError(message)


def _check_course_dir(course_dir) -> Path:
    """``course_dir`` if it can take an nbgrader course (a new or empty folder, or an nbgrader course), else a
    CourseError saying what it wants."""
    d = Path(course_dir)
    want = f"DIR is the folder the nbgrader course is written to (created if missing), e.g. {EXPORT_EXAMPLE}"
    if d.suffix == ".ipynb" or d.is_file():
        raise course.CourseError(f"{course.shown(d)} is {'a file' if d.is_file() else 'a notebook'}, not a course "
                                 f"folder: {want}; the labs to export come after it (01 or "
                                 f"{d.stem if d.suffix == '.ipynb' else '01_selective_ssm'})")
    root = course.repo_root().resolve()
    for kept in (root / "labs", root / "solutions"):
        if d.resolve() == kept or kept in d.resolve().parents:
            raise course.CourseError(f"{course.shown(d)}: the nbgrader course goes to its own folder, not into "
                                     f"{kept.name}/; {want}")
    if d.is_dir() and any(d.iterdir()) and not ((d / "nbgrader_config.py").exists() or (d / "source").is_dir()):
        raise course.CourseError(f"{course.shown(d)} is a folder with other things in it and no nbgrader course "
                                 f"(no nbgrader_config.py or source/): {want}; name a new folder")
    return d


def course_folder(value: str) -> str:
    """argparse type of ``export nbgrader DIR``: checked (see :func:`_check_course_dir`), returned as given."""
    try:
        _check_course_dir(value)
    except course.CourseError as exc:
        raise _usage(str(exc)) from None
    return value


def solution_for(name) -> Path:
    """The solution notebook a lab names: ``01``, ``01_selective_ssm``, ``labs/01_selective_ssm.ipynb`` or
    ``solutions/01_selective_ssm.ipynb`` (a CourseError listing the labs otherwise)."""
    sols = sorted((course.repo_root() / "solutions").glob("[0-9][0-9]_*.ipynb"))
    p = Path(str(name))
    if p.suffix == ".ipynb" and p.is_file() and p.resolve() in [s.resolve() for s in sols]:
        return p
    stem = p.stem if p.suffix == ".ipynb" else p.name
    same = [s for s in sols if s.stem == stem] or [s for s in sols if len(stem) >= 2 and stem[:2].isdigit() and
                                                   s.name[:2] == stem[:2] and (len(stem) == 2 or stem[2] == "_")]
    if len(same) != 1:
        raise course.CourseError(f"{name}: no such lab to export; name labs by number "
                                 f"({', '.join(s.stem[:2] for s in sols)}) or name, e.g. {EXPORT_EXAMPLE}")
    return same[0]


def solution_arg(value: str) -> str:
    """argparse type of ``export nbgrader DIR NN ...``: the solution notebook's path."""
    try:
        return str(solution_for(value))
    except course.CourseError as exc:
        raise _usage(str(exc)) from None


def export_nbgrader(course_dir, paths=None) -> list[Path]:
    """Write an nbgrader course into ``course_dir``: one assignment per lab named in ``paths`` (see
    :func:`solution_for`; all by default)."""
    course_dir = _check_course_dir(course_dir)
    written = []
    for sol in [solution_for(p) for p in paths] if paths else _solutions():
        dst = course_dir / "source" / sol.stem / sol.name
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_text(course.dumps(make_nbgrader(course.read_notebook(sol))))
        written.append(dst)
    cfg = course_dir / "nbgrader_config.py"
    if not cfg.exists():
        cfg.write_text(NBGRADER_CONFIG)
    return written
