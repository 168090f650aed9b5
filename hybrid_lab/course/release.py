"""Releases of the notebooks beyond the practice labs: assignments for credit, and an nbgrader course.

* ``hybrid-lab build --mode assignment --out DIR``: each lab as an assignment. No stored output from the first
  exercise on (no reference answer under a stub or its check), and each check cell runs the student's function
  once without a verdict and without the reference standing in (``check(..., mode="assignment")``). The graded
  checks stay on the lecturer's side: ``hybrid-lab grade`` runs the checks of ``solutions/`` on the student's cells,
  as for practice labs. (The library itself ships with the package, its functions are the answers; an assignment
  hides outputs and verdicts, and the grader switches the library off while a student's function runs.)
* ``hybrid-lab export nbgrader DIR``: an nbgrader course folder, ``DIR/source/<NN_name>/<NN_name>.ipynb`` with
  nbgrader's cell metadata: exercise cells are solution cells (nbgrader's own ``### BEGIN SOLUTION`` markers, the
  ones solutions/ use), each check cell an autograded test cell worth the exercise's points
  (``check(..., mode="nbgrader")`` raises unless the exercise passes), every other cell read-only.
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


def make_nbgrader(sol_nb):
    """The nbgrader source version of a solution notebook (see the module docstring)."""
    import copy

    nb = copy.deepcopy(sol_nb)
    exs = course.exercises(sol_nb)
    by_cell = {e.cell: e for e in exs}
    k, current, checked = -1, None, set()
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            k += 1
            cell.outputs, cell.execution_count = [], None
            if k in by_cell:
                current = by_cell[k]
                _nbgrader(cell, f"exercise-{current.id.replace('.', '-')}", solution=True)
                continue
            src = course.cell_source(cell)
            m = CHECK_CALL.search(src)
            if current is not None and m and m["id"] == current.id and current.id not in checked:
                checked.add(current.id)
                cell.source = _with_mode(src, "nbgrader")
                _nbgrader(cell, f"check-{current.id.replace('.', '-')}", grade=True, locked=True,
                          points=current.points)
                continue
        _nbgrader(cell, f"cell-{i:03d}", locked=True)
    missing = [e.id for e in exs if e.id not in checked]
    if missing:
        raise course.CourseError(f"exercises without a check cell (check(\"NN.K\", fn) below them): {missing}")
    nb.metadata.pop("hybrid_lab", None)
    return nb


NBGRADER_CONFIG = '''c = get_config()  # noqa: F821 (nbgrader's config loader provides it)
c.CourseDirectory.course_id = "hybrid-lab"
c.ExecutePreprocessor.timeout = 300
'''


def export_nbgrader(course_dir, paths=None) -> list[Path]:
    """Write an nbgrader course into ``course_dir``: one assignment per solution notebook (all by default)."""
    course_dir = Path(course_dir)
    written = []
    for sol in _solutions(paths):
        dst = course_dir / "source" / sol.stem / sol.name
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_text(course.dumps(make_nbgrader(course.read_notebook(sol))))
        written.append(dst)
    cfg = course_dir / "nbgrader_config.py"
    if not cfg.exists():
        cfg.write_text(NBGRADER_CONFIG)
    return written
