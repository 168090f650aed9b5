"""The course gradebook: a roster maps files to students; duplicates, unmatched files and missing students are flagged,
never the end of a run; a changed exercise header loses only that exercise; one gradebook across labs; exports checked
against Gradescope's, Canvas's and Moodle's published import formats (cited in hybrid_lab/course/gradebook.py)."""
import csv
import json
import os
import subprocess
import sys

import nbformat
import pytest

from hybrid_lab.course import classgrade
from hybrid_lab.course import gradebook as gb
from hybrid_lab.course import pipeline as course
from grading_helpers import edit_exercise  # noqa: E402

ROOT = course.repo_root()
LABS = {"00": ROOT / "solutions" / "00_three_costs.ipynb", "02": ROOT / "solutions" / "02_hybrid_snapshots.ipynb"}
ROSTER = [("s001", "Alice Ames", "alice@uni.example", "alice*"),
          ("s002", "Erin O'Neil", "erin@uni.example", "*oneil*"),
          ("s003", "Bob Brown", "bob@uni.example", "bob*"),
          ("s004", "Carl Cole", "carl@uni.example", "")]          # empty pattern: *s004*
UNMATCHED_NAME = "zed_unknown"


def _solved(lab):
    sol = nbformat.read(str(LABS[lab]), as_version=4)
    return course.fill_with_solutions(nbformat.read(str(course.lab_path_for(LABS[lab])), as_version=4), sol)


_edit = edit_exercise


def _roster(path):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "name", "email", "pattern"])
        w.writerows(ROSTER)
    return path


def _write(nb, path, mtime):
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
    os.utime(path, (mtime, mtime))


@pytest.fixture(scope="module")
def course_run(tmp_path_factory):
    """Lab 00 then lab 02 graded into one gradebook with a roster; lab 00's folder holds a duplicate (the newer one
    wrong), a renamed header, a file no roster entry matches; Carl submits nothing for lab 00."""
    d = tmp_path_factory.mktemp("course")
    ok0, ok2 = _solved("00"), _solved("02")
    s0, s2 = d / "lab00", d / "lab02"
    _write(ok0, s0 / "alice_lab00.ipynb", 1_000)
    _write(_edit(ok0, "00.1", "return 2 * n_attn", "return n_attn"), s0 / "alice_lab00_v2.ipynb", 2_000)  # newer
    _write(_edit(ok0, "00.2", "# Exercise 00.2 (2 points, warm-up, ~5 min)", "# Exercise 2 (my answer)"),
           s0 / "Erin ONeil - lab 0" / "work.ipynb", 1_000)                        # renamed header, 00.1 right
    _write(ok0, s0 / "bob.ipynb", 1_000)
    _write(ok0, s0 / "zed_unknown.ipynb", 1_000)                                   # no roster entry
    _write(ok2, s2 / "alice.ipynb", 1_000)
    _write(ok2, s2 / "s004-carl.ipynb", 1_000)
    roster, book, lms = _roster(d / "roster.csv"), d / "out" / "gradebook.csv", d / "out" / "lms"
    # the public cases only (a cases file that does not exist): these tests are about the gradebook, not the cases
    public = dict(jobs=2, cell_timeout=60, quiet=True, unsafe=True, seed=7, hidden=d / "no_hidden_cases.py")
    r0 = classgrade.grade_class([s0], "00", csv_path=d / "out" / "lab00.csv", roster=roster, gradebook=book,
                                exports=lms, **public)
    r2 = classgrade.grade_class([s2], "02", roster=roster, gradebook=book, exports=lms, **public)
    return d, r0, r2, book, lms


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_roster_flags_duplicates_unmatched_and_missing(course_run):
    d, r0, _, _, _ = course_run
    by = {r.student_id or r.path: r for r in r0}
    assert by["s001"].path == "alice_lab00_v2.ipynb" and by["s001"].total == 2     # the newest, the wrong one
    assert "not graded: alice_lab00.ipynb" in by["s001"].flags[0]
    assert by["s004"].status == gb.NO_SUBMISSION and by["s004"].flags == [gb.NO_SUBMISSION]
    assert by["zed_unknown.ipynb"].flags == [gb.UNMATCHED] and by["zed_unknown.ipynb"].total == 4
    assert by["s003"].total == 4 and not by["s003"].flags
    lab = _rows(d / "out" / "lab00.csv")
    assert {r["file"] for r in lab} == {"alice_lab00_v2.ipynb", "Erin ONeil - lab 0/work.ipynb", "bob.ipynb",
                                        "zed_unknown.ipynb", ""}


def test_a_changed_header_loses_only_that_exercise(course_run):
    _, r0, _, _, _ = course_run
    erin = next(r for r in r0 if r.student_id == "s002")
    assert erin.status == "graded" and erin.points == {"00.1": 2, "00.2": 0}, (erin.status, erin.points)
    row = next(x for x in erin.rows if x["exercise"] == "00.2")
    assert "no cell starts with '# Exercise 00.2 (2 points, warm-up, ~5 min)" in row["message"]
    assert erin.flags == [f"{gb.CHANGED_HEADER} of exercise 00.2: graded as not done"]


def test_one_gradebook_across_labs_with_relative_files_only(course_run):
    d, _, _, book, _ = course_run
    rows = _rows(book)
    head = list(rows[0])
    assert head == ["id", "name", "email", "00.1", "00.2", "lab 00", "02.1", "02.2", "lab 02", "total", "max",
                    "flags"]
    by = {r["id"] or r["name"]: r for r in rows}
    assert [r["id"] for r in rows[:4]] == ["s001", "s002", "s003", "s004"]      # the roster's order
    assert (by["s001"]["lab 00"], by["s001"]["lab 02"], by["s001"]["total"], by["s001"]["max"]) == ("2", "5", "7",
                                                                                                     "9")
    assert by["s003"]["lab 02"] == "0" and by["s003"]["flags"] == "lab 02: no submission"
    assert by["s002"]["flags"] == (f"lab 00: {gb.CHANGED_HEADER} of exercise 00.2: graded as not done; "
                                   f"lab 02: no submission")
    assert by["s004"]["lab 00"] == "0" and by["s004"]["lab 02"] == "5"
    assert UNMATCHED_NAME in by and gb.UNMATCHED in by[UNMATCHED_NAME]["flags"]
    text = book.read_text() + gb.store_path(book).read_text()
    assert str(d) not in text and "/tmp" not in text                              # no absolute path anywhere


def test_regrading_a_lab_replaces_its_columns(course_run, tmp_path):
    _, _, r2, book, _ = course_run
    copy_book = tmp_path / "gb.csv"
    copy_book.write_text(book.read_text())
    gb.store_path(copy_book).write_text(gb.store_path(book).read_text())
    rec = json.loads(gb.store_path(book).read_text())["labs"]["02"]
    for r in rec["results"]:
        r["total"], r["points"] = 0, {}
    gb.add_lab(copy_book, rec)
    rows = {r["id"]: r for r in _rows(copy_book) if r["id"]}
    assert rows["s001"]["lab 02"] == "0" and rows["s001"]["lab 00"] == "2" and len(rows) == 4


def test_gradescope_results_follow_the_published_schema(course_run):
    _, _, _, _, lms = course_run
    files = sorted((lms / "gradescope").rglob("results.json"))
    assert {f.relative_to(lms / "gradescope").parts[:2] for f in files} == {
        ("00", "s001"), ("00", "s002"), ("00", "s003"), ("00", "unmatched_zed_unknown"), ("02", "s001"),
        ("02", "s004")}
    for f in files:
        res = json.loads(f.read_text())
        assert isinstance(res["score"], float) and isinstance(res["tests"], list) and res["tests"]
        for t in res["tests"]:
            assert set(t) >= {"name", "score", "max_score", "output"}
            assert isinstance(t["name"], str) and isinstance(t["output"], str)
            assert 0 <= t["score"] <= t["max_score"]
        assert res["score"] == sum(t["score"] for t in res["tests"])
    erin = json.loads((lms / "gradescope" / "00" / "s002" / "results.json").read_text())
    assert [(t["name"][:4], t["score"], t["max_score"]) for t in erin["tests"]] == [("00.1", 2, 2), ("00.2", 0, 2)]
    assert "no cell starts with" in erin["tests"][1]["output"]


def test_canvas_csv_has_the_import_columns_and_points_possible(course_run):
    _, _, _, _, lms = course_run
    with open(lms / "canvas.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0][:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
    assert rows[0][5:] == ["hybrid-lab 00_three_costs", "hybrid-lab 02_hybrid_snapshots"]
    assert rows[1][0] == "Points Possible" and rows[1][5:] == ["4", "5"]
    people = {r[2]: r for r in rows[2:]}
    assert sorted(people) == ["s001", "s002", "s003", "s004"]                   # no row without an id
    assert people["s002"][0] == "Erin O'Neil" and people["s002"][3] == "erin@uni.example"
    assert people["s001"][5:] == ["2", "5"]
    assert all(len(r) == len(rows[0]) for r in rows)


def test_moodle_csv_identifies_users_and_has_one_column_per_grade_item(course_run):
    _, _, _, _, lms = course_run
    rows = _rows(lms / "moodle.csv")
    assert list(rows[0])[:4] == ["First name", "Last name", "ID number", "Email address"]
    assert all(r["Email address"] and r["ID number"] for r in rows)
    erin = next(r for r in rows if r["ID number"] == "s002")
    assert (erin["First name"], erin["Last name"]) == ("Erin", "O'Neil")
    assert erin["hybrid-lab 00_three_costs"] == "2" and erin["hybrid-lab 02_hybrid_snapshots"] == "0"
    assert all(float(r[k]) >= 0 for r in rows for k in r if k.startswith("hybrid-lab "))


def test_roster_mistakes_are_value_errors_naming_the_argument(tmp_path):
    bad = tmp_path / "r.csv"
    bad.write_text("id,name\ns1,A\n")
    with pytest.raises(ValueError, match="expected the columns id, name, email, pattern, got id, name"):
        gb.read_roster(bad)
    bad.write_text("id,name,email,pattern\ns1,A,a@x,a*\ns1,B,b@x,b*\n")
    with pytest.raises(ValueError, match="expected each id once, got 's1' again"):
        gb.read_roster(bad)
    with pytest.raises(ValueError, match="no such file"):
        gb.read_roster(tmp_path / "nope.csv")


def test_assign_without_roster_keeps_the_newest_of_one_name(tmp_path):
    for name, t in (("a.ipynb", 5), ("a/x.ipynb", 9), ("b.ipynb", 1)):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("{}")
        os.utime(tmp_path / name, (t, t))
    plan = gb.assign(classgrade.collect([tmp_path]), None)
    got = {s.student: (s.rel, flags) for _, s, flags in plan.chosen}
    assert got["a"][0] == "a/x.ipynb" and "not graded: a.ipynb" in got["a"][1][0]
    assert got["b"] == ("b.ipynb", []) and plan.missing == []
    roster = [gb.Student("s1", "A", "", "*"), gb.Student("s2", "B", "", "b*")]
    plan = gb.assign(classgrade.collect([tmp_path / "b.ipynb"]), roster)
    assert plan.chosen[0][0] is None and "several roster entries: s1, s2" in plan.chosen[0][2][0]


def test_cli_help_says_how_a_course_gradebook_is_built():
    p = subprocess.run([sys.executable, "-m", "hybrid_lab.course.cli", "grade", "--help"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0
    said = " ".join(p.stdout.split())
    for word in ("--roster", "--gradebook", "--exports", "same --gradebook", "id, name, email, pattern",
                 "canvas.csv", "moodle.csv", "results.json"):
        assert word in said, word


def test_a_pattern_matches_a_file_name_without_its_punctuation():
    s = gb.Student("s002", "Erin O'Neil", "erin@uni.example", "*oneil*")
    assert s.matches("Erin O'Neil - lab 1 (v2)", "Erin O'Neil - lab 1 (v2).ipynb")
    assert not s.matches("Erin Olsen", "erin_olsen.ipynb")
