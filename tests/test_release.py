"""Releases for credit: assignment notebooks without reference outputs
or verdicts that the grader still grades, and an nbgrader course that nbgrader itself (installed from the registry)
generates and autogrades, its test cells independent of each other (a failed or timed-out one never breaks the next),
scoring 6 submissions as the lab's own grader does; ``hybrid-lab export`` says what it takes."""
import csv
import json
import os
import subprocess
import sys

import nbformat
import pytest

from hybrid_lab.course import classgrade, release
from hybrid_lab.course import pipeline as course

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


def _fill(release_nb, sol_nb, edits=()):
    """The released notebook with the solution put into its solution cells, then ``edits`` applied: (exercise id,
    old, new), ``old`` must occur in that exercise's cell."""
    ids = {c.metadata["nbgrader"]["grade_id"]: c.source for c in release.make_nbgrader(sol_nb).cells}
    for c in release_nb.cells:
        md = c.metadata.get("nbgrader", {})
        if md.get("solution"):
            c.source = ids[md["grade_id"]]
            for ex_id, old, new in edits:
                if md["grade_id"] == f"exercise-{ex_id.replace('.', '-')}":
                    assert old in c.source, (ex_id, old)
                    c.source = c.source.replace(old, new)
    return release_nb


def test_nbgrader_test_cells_are_independent():
    """Each autograded test cell holds only the check line and what it needs itself (``check`` imported, the
    reference standing in for an earlier exercise whose test did not pass); what else the check cell did (01.3's
    defines ``x2`` for 01.4's demonstration) is a read-only cell of its own after it, not graded."""
    sol_nb = nbformat.read(str(LABS[1]), as_version=4)
    nb = release.make_nbgrader(sol_nb)
    nbformat.validate(nb)
    assert len({c.id for c in nb.cells}) == len(nb.cells)
    assert nb == release.make_nbgrader(sol_nb)                      # reproducible: no random cell ids
    tests = [c for c in nb.cells if c.metadata["nbgrader"]["grade"]]
    for c in tests:
        assert "x2" not in c.source and "from hybrid_lab.exercises import check" in c.source
        assert sum('mode="nbgrader"' in ln for ln in c.source.splitlines()) == 1
    after = nb.cells[nb.cells.index(tests[2]) + 1]                  # 01.3's demonstration, now its own cell
    assert after.source.startswith("H, P_, N2 = 4, 8, 16") and "x2 = " in after.source
    assert after.metadata["nbgrader"] == {"grade": False, "grade_id": after.metadata["nbgrader"]["grade_id"],
                                          "locked": True, "schema_version": 3, "solution": False}
    # the test cells alone, in a namespace with only numpy and the student's functions (no setup cell, no x2, no
    # check): each runs; then with 01.2's test never finishing (nbgrader's timeout interrupted it before it could say
    # anything) and a decay_matrix that raises, 01.4's test still passes: the reference stands in for decay_matrix
    import numpy as np
    code = [c for c in sol_nb.cells if c.cell_type == "code"]
    exs = course.exercises(sol_nb)
    ns = {"np": np}
    for e in exs:
        exec(code[e.cell].source, ns)
    for c in tests:
        exec(c.source, ns)
    assert ns[release.PASSED] == {e.id for e in exs}
    ns = {"np": np}
    for e in exs:
        exec(code[e.cell].source, ns)

    def decay_matrix(c):
        raise IndexError("a crash")
    ns["decay_matrix"] = decay_matrix
    for c in tests[:1] + tests[2:]:
        exec(c.source, ns)
    assert ns[release.PASSED] == {"01.1", "01.3", "01.4"}


def test_export_cli_says_what_it_takes(tmp_path, capsys):
    from hybrid_lab.course import cli
    with pytest.raises(SystemExit):
        cli.main(["export", "--help"])
    said = capsys.readouterr().out
    assert "course folder" in said and "NN_name" in said and "01_selective_ssm" in said and "every lab" in said
    assert cli.main(["export", "nbgrader", str(LABS[1])]) == 2               # a notebook where the folder goes
    err = capsys.readouterr().err
    assert "not a course folder" in err and "hybrid-lab export nbgrader" in err and "01_selective_ssm" in err
    assert cli.main(["export", str(tmp_path / "c")]) == 2                    # the format left out
    assert "the course folder to write" in capsys.readouterr().err
    assert cli.main(["export", "nbgrader", str(tmp_path / "c"), "42"]) == 2
    assert "no such lab to export" in capsys.readouterr().err
    assert cli.main(["export", "nbgrader", str(ROOT / "labs")]) == 2
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("x")
    assert cli.main(["export", "nbgrader", str(tmp_path / "busy")]) == 2
    assert "no nbgrader course" in capsys.readouterr().err
    # labs named by number, name or path (the lab's or the solution's): the issue's `export nbgrader DIR 01`
    assert cli.main(["export", "nbgrader", str(tmp_path / "c"), "01", "00_three_costs",
                     str(ROOT / "labs" / "00_three_costs.ipynb")]) == 0
    assert sorted(p.name for p in (tmp_path / "c" / "source").iterdir()) == ["00_three_costs", "01_selective_ssm"]
    cfg = (tmp_path / "c" / "nbgrader_config.py").read_text()
    assert "hybrid_lab.course.release.SlicedKernelClient" in cfg         # nbclient's replies polled in slices
    from jupyter_client.asynchronous import AsyncKernelClient
    assert issubclass(release.SlicedKernelClient, AsyncKernelClient)
    assert cli.main(["export", "nbgrader", str(tmp_path / "c"), "01"]) == 0   # again, into the course it wrote


# the 6 submissions of lab 01 both graders grade: (exercise id, old, new) edits of the solved notebook; None: the
# released notebook untouched
LOOP = "    ### BEGIN SOLUTION\n    L, H, P = x.shape"
SUBMISSIONS = {
    "alice": [],                                                                  # correct
    "bob": [("01.1", "y = h @ C_t + D * x_t", "y = h @ C_t - D * x_t")],           # one exercise wrong
    "carol": None,                                                                # untouched
    "dave": [("01.3", LOOP, "    while True:\n        pass\n" + LOOP)],             # an endless loop in 01.3
    "erin": [("01.2", "    diff = c[:, None]", "    c = c[None][5]\n    diff = c[:, None]")],   # crashes (IndexError)
    "frank": [("01.4", "def ssd_chunked(", "def chunked_ssd(")],                    # the exercise's function renamed
}
# what each scores, both graders: erin's 01.4 calls her decay_matrix, which failed: the reference stands in
EXPECTED = {"alice": 12, "bob": 10, "carol": 0, "dave": 9, "erin": 10, "frank": 7}
TIMEOUT = 20          # seconds per cell, both graders: dave's loop costs one timeout; every other cell takes < 5 s


def _nbgrader_scores(env, course_dir, assignment):
    """{student: {grade id: score}} from nbgrader's gradebook (its Python API, run where nbgrader is installed)."""
    code = ("import json, sys\nfrom nbgrader.api import Gradebook\nout = {}\n"
            "with Gradebook('sqlite:///gradebook.db') as gb:\n"
            f"    for sub in gb.assignment_submissions({assignment!r}):\n"
            "        for nb in sub.notebooks:\n"
            "            for g in nb.grades:\n"
            "                out.setdefault(sub.student_id, {})[g.name] = g.score\n"
            "json.dump(out, sys.stdout)\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=course_dir, env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


def test_nbgrader_round_trip_scores_as_the_lab_grader(nbgrader_env, tmp_path):
    """generate_assignment, then 6 submissions of lab 01 (correct, one exercise wrong, untouched, an endless loop in
    01.3, a crash in 01.2, 01.4's function renamed) autograded by nbgrader (its timeout interrupting the loop) and
    graded by the lab's own class grader: the same score per student and per exercise, the expected ones; and the
    export CSV agrees. Lab 00 goes through generate_assignment and a correct autograde too."""
    course_dir = tmp_path / "course"
    release.export_nbgrader(course_dir, ["00", "01"])
    with (course_dir / "nbgrader_config.py").open("a") as f:
        f.write(f"c.Execute.timeout = {TIMEOUT}\n")
    for sol in LABS:
        _nbgrader(nbgrader_env, course_dir, "generate_assignment", sol.stem, "--force")
    name, sol = LABS[1].stem, LABS[1]
    released = course_dir / "release" / name / sol.name
    assert released.exists() and "### BEGIN SOLUTION" not in released.read_text()
    sol_nb = nbformat.read(str(sol), as_version=4)
    exs = course.exercises(sol_nb)
    lab_dir = tmp_path / "class"
    lab_dir.mkdir()
    for student, edits in SUBMISSIONS.items():
        nb = nbformat.read(str(released), as_version=4)
        if edits is not None:
            nb = _fill(nb, sol_nb, edits)
        sub = course_dir / "submitted" / student / name / sol.name
        sub.parent.mkdir(parents=True)
        nbformat.write(nb, str(sub))
        nbformat.write(nb, str(lab_dir / f"{student}.ipynb"))      # the very same file for the lab's grader
    zero = LABS[0]
    sub = course_dir / "submitted" / "alice" / zero.stem / zero.name
    sub.parent.mkdir(parents=True)
    nbformat.write(_fill(nbformat.read(str(course_dir / "release" / zero.stem / zero.name), as_version=4),
                         nbformat.read(str(zero), as_version=4)), str(sub))
    for lab in LABS:
        _nbgrader(nbgrader_env, course_dir, "autograde", lab.stem, "--force")
    theirs = _nbgrader_scores(nbgrader_env, course_dir, name)
    ours = {r.student: r for r in classgrade.grade_class([lab_dir], "01", jobs=2, cell_timeout=TIMEOUT, quiet=True)}
    per_ex = {s: {e.id: theirs[s][f"check-{e.id.replace('.', '-')}"] for e in exs} for s in SUBMISSIONS}
    assert per_ex == {s: {e.id: float(ours[s].points[e.id]) for e in exs} for s in SUBMISSIONS}
    assert {s: ours[s].total for s in SUBMISSIONS} == EXPECTED
    _nbgrader(nbgrader_env, course_dir, "export", "--to", str(tmp_path / "grades.csv"))
    got = {(r["assignment"], r["student_id"]): (float(r["score"]), float(r["max_score"]))
           for r in csv.DictReader((tmp_path / "grades.csv").open())}
    assert got == {**{(name, s): (float(t), 12.0) for s, t in EXPECTED.items()},
                   **{(zero.stem, s): (4.0 if s == "alice" else 0.0, 4.0) for s in SUBMISSIONS}}
    loop = next(r for r in ours["dave"].rows if r["exercise"] == "01.3")
    assert "endless loop" in loop["message"], loop
