"""The course pipeline: labs generated from solutions, the grader fails stubs and wrong code, passes solutions."""
import json
import subprocess
import sys

import nbformat
import pytest

from hybrid_lab.course import pipeline as course

ROOT = course.repo_root()
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
IDS = [p.stem for p in SOLUTIONS]

SRC = """# Exercise 9.1 (2 points): double
def double(a):
    ### BEGIN SOLUTION
    return 2 * a
    ### END SOLUTION
"""


def _nb(*sources):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    return nb


def test_exercise_parsing_and_stub():
    ex = course.exercises(_nb("x = 1", SRC))
    assert [(e.id, e.points, e.title, e.cell) for e in ex] == [("9.1", 2, "double", 1)]
    stub = course.stub_source(SRC, ex[0])
    assert "return 2 * a" not in stub and "BEGIN SOLUTION" not in stub
    assert '    raise NotImplementedError("Exercise 9.1: double")' in stub
    with pytest.raises(ValueError, match="first line"):
        course.exercises(_nb("### BEGIN SOLUTION\n### END SOLUTION"))
    with pytest.raises(ValueError, match="unbalanced"):
        course.exercises(_nb("# Exercise 1.1 (1 point): t\n### BEGIN SOLUTION\n"))
    with pytest.raises(ValueError, match="twice"):
        course.exercises(_nb(SRC, SRC))


def test_first_diff_messages():
    msg = "assert reference_output == test_output failed:\n\n  '[0 2 4]\\n' == '[0 3 6]\\n'\n\n  - [0 3 6]\n  + [0 2 4]\n"
    assert course._first_diff(msg) == "expected '[0 2 4]', got '[0 3 6]'"
    assert course._first_diff("Traceback\nNotImplementedError: Exercise 1.1: x") == "NotImplementedError: Exercise 1.1: x"


def test_labs_in_sync_with_solutions():
    assert SOLUTIONS, "no solution notebooks"
    assert course.out_of_sync() == [], "run: python -m hybrid_lab.course build"


@pytest.mark.parametrize("sol", SOLUTIONS, ids=IDS)
def test_solution_notebook_conventions(sol):
    nb = nbformat.read(str(sol), as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code if c.source.strip()), "execute the solution notebook"
    assert not [o for c in code for o in c.outputs if o.output_type == "error"], "stored errors"
    ignored = sum("NBVAL_IGNORE_OUTPUT" in c.source for c in code)
    assert ignored <= 0.15 * len(code), f"{ignored}/{len(code)} cells ignore their output (max 15%)"
    n = len(course.exercises(nb))
    assert 2 <= n <= 5, f"{n} graded exercises (syllabus: 2-5)"
    lab = nbformat.read(str(course.lab_path_for(sol)), as_version=4)
    assert "### BEGIN SOLUTION" not in json.dumps([c.source for c in lab.cells])


@pytest.mark.parametrize("sol", SOLUTIONS, ids=IDS)
def test_lab_fails_as_shipped(sol):
    rows = course.grade(course.lab_path_for(sol), fail_fast=True, quiet=True)
    assert not any(r.passed for r in rows if r.exercise != "setup")
    assert rows[0].exercise != "setup", "the cells before the first exercise must run in the lab"
    assert "NotImplementedError" in rows[0].first_diff


# Grading a lab with the solution code put back runs nbval on exactly the solution notebook, which
# `pytest --nbval` already checks for every notebook; the full grader run is repeated on the quick foundation
# notebooks, and for every notebook we check that the put-back lab merges into the solution cell for cell.
FULL_GRADE = {"00_three_costs", "01_selective_ssm", "02_hybrid_snapshots"}


@pytest.mark.parametrize("sol", SOLUTIONS, ids=IDS)
def test_grader_passes_with_solution_code_put_back(sol, tmp_path):
    sol_nb = nbformat.read(str(sol), as_version=4)
    lab = nbformat.read(str(course.lab_path_for(sol)), as_version=4)
    filled = course.fill_with_solutions(lab, sol_nb)
    merged = course.merge_student(filled, sol_nb)
    assert [c.source for c in merged.cells] == [c.source for c in sol_nb.cells]
    if sol.stem not in FULL_GRADE:
        return
    path = tmp_path / sol.name
    nbformat.write(filled, str(path))
    rows = course.grade(path, quiet=True)
    assert rows and all(r.passed for r in rows), course.format_table(rows)


def test_wrong_code_with_saved_wrong_outputs_still_fails(tmp_path):
    """A student who runs wrong code and saves the notebook (wrong outputs stored) must still fail."""
    sol = ROOT / "solutions" / "00_three_costs.ipynb"
    lab = nbformat.read(str(course.lab_path_for(sol)), as_version=4)
    filled = course.fill_with_solutions(lab, nbformat.read(str(sol), as_version=4))
    for c in filled.cells:
        if c.cell_type == "code" and c.source.startswith("# Exercise 00.1"):
            c.source = c.source.replace("return 2 * n_attn", "return 3 * n_attn")
    path = tmp_path / sol.name
    nbformat.write(filled, str(path))
    course.execute(path)                                   # the student's own (wrong) outputs are now stored
    rows = {r.exercise: r for r in course.grade(path, quiet=True)}
    assert not rows["00.1"].passed and "expected" in rows["00.1"].first_diff
    assert rows["00.2"].passed


def test_cli_grade_exit_code():
    lab = ROOT / "labs" / "00_three_costs.ipynb"
    p = subprocess.run([sys.executable, "-m", "hybrid_lab.course.cli", "grade", "-x", str(lab)], capture_output=True, text=True)
    assert p.returncode == 1
    assert "00.1" in p.stdout and "FAIL" in p.stdout
