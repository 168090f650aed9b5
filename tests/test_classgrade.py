"""Grading a class in one command: a folder of lab 01 submissions with arbitrary names, graded
in parallel into a gradebook and feedback files; a submission that loops, eats memory or writes outside its folder is
a FAIL with the reason, never the end of the run."""
import csv
import subprocess
import sys

import nbformat
import pytest

from hybrid_lab.course import classgrade
from hybrid_lab.course import pipeline as course
from grading_helpers import edit_exercise  # noqa: E402

ROOT = course.repo_root()
SSM = ROOT / "solutions" / "01_selective_ssm.ipynb"


def _solved():
    lab = nbformat.read(str(course.lab_path_for(SSM)), as_version=4)
    return course.fill_with_solutions(lab, nbformat.read(str(SSM), as_version=4))


_edit = edit_exercise


@pytest.fixture(scope="module")
def class_folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("submissions")
    ok = _solved()
    (d / "bob_smith").mkdir()
    (d / "carol").mkdir()
    nbformat.write(ok, str(d / "alice.ipynb"))                                    # correct
    nbformat.write(ok, str(d / "bob_smith" / "lab1 final (2).ipynb"))             # correct, in a folder
    nbformat.write(_edit(ok, "01.1", "y = h @ C_t + D * x_t", "y = h @ C_t - D * x_t"), str(d / "dave.ipynb"))
    nbformat.write(_edit(ok, "01.4", " + np.exp(c)[:, None] * (C[s0:s1] @ h[hd].T)", ""),
                   str(d / "carol" / "work.ipynb"))                               # wrong
    (d / "erin.ipynb").write_bytes(course.lab_path_for(SSM).read_bytes())         # untouched
    nbformat.write(_edit(ok, "01.2", "    diff = c[:, None]", "    while True:\n        pass\n    diff = c[:, None]"),
                   str(d / "frank.ipynb"))                                        # loops forever
    return d


def test_a_class_folder_becomes_a_gradebook(class_folder, tmp_path):
    book, fb = tmp_path / "gradebook.csv", tmp_path / "feedback"
    results = classgrade.grade_class([class_folder], "01", csv_path=book, feedback=fb, jobs=2, cell_timeout=10,
                                     quiet=True)
    rows = {r["student"]: r for r in csv.DictReader(book.open())}
    totals = {s: (int(r["total"]), r["status"]) for s, r in rows.items()}
    assert totals == {"alice": (12, "graded"), "bob_smith": (12, "graded"), "carol": (7, "graded"),
                      "dave": (10, "graded"), "erin": (0, "graded"), "frank": (10, "graded")}
    assert rows["dave"]["01.1"] == "0" and rows["carol"]["01.4"] == "0" and rows["frank"]["01.2"] == "0"
    assert all(r["max"] == "12" for r in rows.values())
    assert rows["bob_smith"]["file"] == "bob_smith/lab1 final (2).ipynb"            # relative, never absolute
    assert str(class_folder) not in book.read_text()
    frank = (fb / "frank.txt").read_text()
    assert "01.2" in frank and "an endless loop?" in frank
    assert "not done yet" in (fb / "erin.txt").read_text()
    assert "h right" in (fb / "dave.txt").read_text()
    assert sorted(p.name for p in fb.iterdir()) == [f"{s}.txt" for s in sorted(rows)]
    assert len(results) == 6


def test_memory_hog_and_writes_outside_fail_with_the_reason(tmp_path):
    ok = _solved()
    nbformat.write(_edit(ok, "01.1", "    ### BEGIN SOLUTION", "    big = np.ones(800_000_000)  # 6.4 GB\n"
                                                            "    ### BEGIN SOLUTION"), str(tmp_path / "hog.ipynb"))
    outside = tmp_path.parent / f"{tmp_path.name}_outside.txt"
    nbformat.write(_edit(ok, "01.3", "    ### BEGIN SOLUTION", f"    open({str(outside)!r}, 'w').write('x')\n"
                                                            "    ### BEGIN SOLUTION"), str(tmp_path / "writer.ipynb"))
    (tmp_path / "broken.ipynb").write_text("{not a notebook")
    res = {r.student: r for r in classgrade.grade_class([tmp_path], "01", jobs=2, memory_mb=3000, quiet=True)}
    assert res["hog"].points["01.1"] == 0 and res["hog"].total == 10
    hog = next(r for r in res["hog"].rows if r["exercise"] == "01.1")
    assert "MemoryError" in " ".join([hog["message"]] + hog["details"])
    writer = next(r for r in res["writer"].rows if r["exercise"] == "01.3")
    # refused by the audit hook, or (in the sandbox) the folder does not even exist there
    said = " ".join([writer["message"]] + writer["details"])
    assert not writer["passed"] and ("outside the submission's folder" in said or "No such file" in said), said
    assert not outside.exists()
    assert res["broken"].status.startswith("FAIL: ") and "not a readable notebook" in res["broken"].status


def test_collect_names_students_by_file_or_folder(tmp_path):
    for p in ("a.ipynb", "b/x.ipynb", "c/one.ipynb", "c/two.ipynb"):
        (tmp_path / p).parent.mkdir(exist_ok=True)
        (tmp_path / p).write_text("{}")
    assert [(s.student, s.rel) for s in classgrade.collect([tmp_path])] == [
        ("a", "a.ipynb"), ("b", "b/x.ipynb"), ("c/one", "c/one.ipynb"), ("c/two", "c/two.ipynb")]
    assert [(s.student, s.rel) for s in classgrade.collect([tmp_path / "b"])] == [("b", "b/x.ipynb")]
    # one file named twice is one submission; two files of one student are both kept (the gradebook flags them)
    assert len(classgrade.collect([tmp_path / "a.ipynb", tmp_path / "a.ipynb"])) == 1
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "late.ipynb").write_text("{}")
    assert [s.rel for s in classgrade.collect([tmp_path]) if s.student == "a"] == ["a.ipynb", "a/late.ipynb"]
    with pytest.raises(course.CourseError, match="no such file or folder"):
        classgrade.collect([tmp_path / "nope"])


def test_cli_class_grading_needs_the_lab_and_says_so(tmp_path):
    (tmp_path / "alice.ipynb").write_text("{}")
    p = subprocess.run([sys.executable, "-m", "hybrid_lab.course.cli", "grade", str(tmp_path)], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and p.stderr.strip().endswith("--lab 01") and "Traceback" not in p.stderr


CRASHES = {   # how exercise 01.2 kills its kernel -> what the grader must say of it
    "os.kill(getpid, 9) in the function": ("    ### BEGIN SOLUTION", "    import os\n    os.kill(os.getpid(), 9)\n"
                                           "    ### BEGIN SOLUTION", "it was killed by signal 9 (SIGKILL)"),
    "os._exit(3) in the cell": ("def decay_matrix(c):", "import os\nos._exit(3)\ndef decay_matrix(c):",
                                "the kernel exited with status 3"),
}


@pytest.mark.parametrize("how", sorted(CRASHES))
def test_a_kernel_that_dies_costs_only_its_exercise(how, tmp_path):
    """Exercise 01.2 kills the kernel; the grader restarts one (the reference standing in for decay_matrix, which
    01.4 calls) and grades 01.3 and 01.4 on their own: they are right, so they get their points."""
    old, new, said = CRASHES[how]
    path = tmp_path / SSM.name
    nbformat.write(_edit(_solved(), "01.2", old, new), str(path))
    rows = {r.exercise: r for r in course.grade(path, quiet=True, timeout=60)}
    table = course.format_table(list(rows.values()))
    assert [e for e, r in rows.items() if r.passed] == ["01.1", "01.3", "01.4"], table
    crash = rows["01.2"].message
    assert "the kernel" in crash and "out of memory?" not in crash, table
    from hybrid_lab.core import sandbox
    if not sandbox.available()[0] or "exit" in how:       # bubblewrap reports a signal as 128 + its number
        assert said in crash, table


def test_a_dead_kernel_is_named_by_its_signal_or_exit_status_never_guessed():
    assert course.kernel_death(None) == course.KERNEL_DIED and "memory limit" in course.KERNEL_DIED
    assert course.kernel_death(-9).endswith("killed by signal 9 (SIGKILL)")
    assert course.kernel_death(128 + 11, sandboxed=True).endswith("killed by signal 11 (SIGSEGV)")
    assert "exited with status 139" in course.kernel_death(139)         # outside the sandbox 139 is an exit status
    assert "exited with status 3" in course.kernel_death(3)
    assert all("out of memory?" not in course.kernel_death(c) for c in (None, -9, -11, 3, 0))
