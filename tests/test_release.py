"""Releases for credit (issue 14, points 1 and 3): assignment notebooks without reference outputs or verdicts that
the grader still grades, and an nbgrader course that nbgrader itself (installed from the registry) generates and
autogrades."""
import csv
import os
import subprocess
import sys

import nbformat
import pytest

from hybrid_lab.course import pipeline as course
from hybrid_lab.course import release

ROOT = course.repo_root()
LABS = [ROOT / "solutions" / n for n in ("00_three_costs.ipynb", "01_selective_ssm.ipynb")]


def test_assignment_has_no_reference_outputs_and_still_grades(tmp_path):
    out = tmp_path / "assignment"
    written = release.build_assignments(out, LABS)
    for sol, path in zip(LABS, written):
        nb = nbformat.read(str(path), as_version=4)
        exs = course.exercises(nbformat.read(str(sol), as_version=4))
        code = [c for c in nb.cells if c.cell_type == "code"]
        after = code[exs[0].cell:]
        assert not any(c.outputs for c in after), f"{path.name}: outputs under an exercise or its check"
        assert "### BEGIN SOLUTION" not in path.read_text()
        checks = [c.source for c in after if "check(" in c.source]
        assert len(checks) == len(exs) and all('mode="assignment"' in s for s in checks)
        assert nb.metadata["hybrid_lab"]["kind"] == "assignment"
    # the grader grades it: untouched -> not done; solved -> all pass
    path = written[1]
    rows = course.grade(path, quiet=True)
    assert rows and all(r.not_done for r in rows), course.format_table(rows)
    sol_nb = nbformat.read(str(LABS[1]), as_version=4)
    solved = course.fill_with_solutions(nbformat.read(str(path), as_version=4), sol_nb)
    nbformat.write(solved, str(tmp_path / path.name))
    rows = course.grade(tmp_path / path.name, quiet=True)
    assert all(r.passed for r in rows), course.format_table(rows)
    with pytest.raises(course.CourseError, match="not over the practice labs"):
        release.build_assignments(ROOT / "labs", LABS)


def test_nbgrader_metadata():
    nb = release.make_nbgrader(nbformat.read(str(LABS[1]), as_version=4))
    md = [c.metadata["nbgrader"] for c in nb.cells]
    sols = [m for m in md if m["solution"]]
    tests = [m for m in md if m["grade"]]
    exs = course.exercises(nbformat.read(str(LABS[1]), as_version=4))
    assert [m["grade_id"] for m in sols] == [f"exercise-{e.id.replace('.', '-')}" for e in exs]
    assert [(m["grade_id"], m["points"]) for m in tests] == [(f"check-{e.id.replace('.', '-')}", e.points) for e in exs]
    assert all(m["locked"] for m in md if not m["solution"]) and len({m["grade_id"] for m in md}) == len(md)


NBGRADER_PKGS = ["nbgrader==0.9.6", "alembic", "sqlalchemy", "mako", "rapidfuzz", "notebook"]


@pytest.fixture(scope="module")
def nbgrader_env(tmp_path_factory):
    """nbgrader from the registry, in its own folder on PYTHONPATH (its dependencies that this venv lacks, no
    upgrade of anything the lab uses)."""
    target = tmp_path_factory.mktemp("nbgrader_pkgs")
    p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                        *NBGRADER_PKGS], capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        if os.environ.get("HYBRID_LAB_OFFLINE"):
            pytest.skip(f"HYBRID_LAB_OFFLINE set and nbgrader could not be installed: {p.stderr[-300:]}")
        raise AssertionError(f"pip install nbgrader failed: {p.stderr[-2000:]}")
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")]),
                PATH=os.pathsep.join([str(target / "bin"), os.environ.get("PATH", "")]))   # nbgrader runs `alembic`


def _nbgrader(env, cwd, *args):
    p = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=900)
    assert p.returncode == 0, f"nbgrader {' '.join(args)}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


def _fill(release_nb, sol_nb, wrong=None):
    """The released notebook with the solution put into its solution cells (and ``wrong`` (old, new) applied)."""
    ids = {c.metadata["nbgrader"]["grade_id"]: c.source for c in release.make_nbgrader(sol_nb).cells}
    for c in release_nb.cells:
        md = c.metadata.get("nbgrader", {})
        if md.get("solution"):
            c.source = ids[md["grade_id"]]
            if wrong and wrong[0] in c.source:
                c.source = c.source.replace(*wrong)
    return release_nb


def test_nbgrader_round_trip(nbgrader_env, tmp_path):
    """generate_assignment, then autograde a correct and a wrong submission of two labs; the scores add up."""
    course_dir = tmp_path / "course"
    release.export_nbgrader(course_dir, LABS)
    wrong = {"00": ("return 2 * n_attn", "return n_attn"), "01": ("y = h @ C_t + D * x_t", "y = h @ C_t - D * x_t")}
    for n in ("alice", "bob"):
        _nbgrader(nbgrader_env, course_dir, "db", "student", "add", n)
    expected = {}
    for sol in LABS:
        name = sol.stem
        _nbgrader(nbgrader_env, course_dir, "generate_assignment", name, "--force")
        released = course_dir / "release" / name / sol.name
        assert released.exists() and "### BEGIN SOLUTION" not in released.read_text()
        sol_nb = nbformat.read(str(sol), as_version=4)
        exs = course.exercises(sol_nb)
        for student, bad in (("alice", None), ("bob", wrong[name[:2]])):
            sub = course_dir / "submitted" / student / name / sol.name
            sub.parent.mkdir(parents=True)
            nbformat.write(_fill(nbformat.read(str(released), as_version=4), sol_nb, bad), str(sub))
        _nbgrader(nbgrader_env, course_dir, "autograde", name, "--force")
        full = sum(e.points for e in exs)
        broken = next(e for e in exs if wrong[name[:2]][0] in course.cell_source(
            [c for c in sol_nb.cells if c.cell_type == "code"][e.cell]))
        expected[(name, "alice")] = (full, full)
        expected[(name, "bob")] = (full - broken.points, full)
    _nbgrader(nbgrader_env, course_dir, "export", "--to", str(tmp_path / "grades.csv"))
    got = {(r["assignment"], r["student_id"]): (float(r["score"]), float(r["max_score"]))
           for r in csv.DictReader((tmp_path / "grades.csv").open())}
    assert got == {k: (float(a), float(b)) for k, (a, b) in expected.items()}
