"""Near-copy flags (hybrid_lab/course/similarity.py) on lab 01's recurrent SSD scan (exercise 01.3): a renamed copy
of another student's answer and a pasted library body are flagged; independent answers and untouched stubs are not;
the gradebook gets a similarity column and no score changes."""
from __future__ import annotations

import csv
import json

import nbformat
import pytest

from hybrid_lab.course import classgrade, similarity
from hybrid_lab.course import gradebook as book
from hybrid_lab.course import pipeline as course

LAB = course.repo_root() / "labs" / "01_selective_ssm.ipynb"
SOL = course.repo_root() / "solutions" / "01_selective_ssm.ipynb"


def _stub_head() -> str:
    """Exercise 01.3's cell in the lab down to its stub body (header line, signature, docstring)."""
    nb = nbformat.read(str(LAB), as_version=4)
    src = next(c.source for c in nb.cells if c.cell_type == "code" and c.source.startswith("# Exercise 01.3"))
    return src[:src.index("    # YOUR CODE HERE")]


HEAD = _stub_head()

ALICE = HEAD + '''\
    n_steps, n_heads, p_dim = x.shape
    state = np.zeros((n_heads, p_dim, B.shape[-1]))
    outputs = []
    # walk through time, one token after another
    for step in range(n_steps):
        decay = np.exp(A * dt[step])
        state = decay[:, None, None] * state + np.einsum("h,hp,n->hpn", dt[step], x[step], B[step])
        outputs.append(np.einsum("hpn,n->hp", state, C[step]) + D[:, None] * x[step])
    return np.stack(outputs), state
'''
# alice's answer, every name changed, comments rewritten, spacing changed
BOB = HEAD + '''\
    T, nh, pd = x.shape   # sizes
    s = np.zeros(( nh, pd, B.shape[-1] ))
    ys = []
    for i in range(T):    # the recurrence
        a = np.exp(A*dt[i])
        s = a[:, None, None]*s + np.einsum("h,hp,n->hpn", dt[i], x[i], B[i])
        ys.append(np.einsum("hpn,n->hp", s, C[i]) + D[:, None]*x[i])   # read out
    return np.stack(ys), s
'''
# an independent correct answer, written another way
CAROL = HEAD + '''\
    hs = np.zeros(x.shape + (B.shape[1],))
    cur = np.zeros(hs.shape[1:])
    for t in range(x.shape[0]):
        keep = np.exp(dt[t] * A).reshape(-1, 1, 1)
        cur = keep * cur + (dt[t].reshape(-1, 1) * x[t])[..., None] * B[t].reshape(1, 1, -1)
        hs[t] = cur
    return (hs * C[:, None, None, :]).sum(-1) + D.reshape(1, -1, 1) * x, cur
'''
# hybrid_lab.ops.ssm.ssd_scan's body pasted, with a batch axis added around it
FRANK = HEAD + '''\
    x, dt, B, C = x[None], dt[None], B[None], C[None]
    Bt, L, H, P = x.shape
    h = np.zeros((Bt, H, P, B.shape[2]), np.float64)
    y = np.empty(x.shape, np.float64)
    for t in range(L):
        h = np.exp(dt[:, t] * A)[:, :, None, None] * h + (dt[:, t, :, None] * x[:, t])[..., None] * B[:, t, None, None, :]
        y[:, t] = np.einsum("bhpn,bn->bhp", h, C[:, t])
    y = y + D[:, None] * x
    return y[0], h[0]
'''


def _notebook(folder, name, code=None):
    nb = nbformat.read(str(LAB), as_version=4)
    if code is not None:
        cell = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith("# Exercise 01.3"))
        cell.source = code
    path = folder / f"{name}.ipynb"
    nbformat.write(nb, str(path))
    return path


@pytest.fixture(scope="module")
def klass(tmp_path_factory):
    folder = tmp_path_factory.mktemp("subs")
    subs = {"alice": ALICE, "bob": BOB, "carol": CAROL, "dave": None, "erin": None, "frank": FRANK}
    return folder, {name: _notebook(folder, name, code) for name, code in subs.items()}


@pytest.fixture(scope="module")
def flags(klass):
    return similarity.check_class(klass[1], SOL)


def _pairs(flags):
    return {(f.exercise, f.student, f.other): f for f in flags}


def test_renamed_copy_is_flagged(flags):
    f = _pairs(flags).get(("01.3", "alice", "bob"))
    assert f is not None, [(x.exercise, x.student, x.other, x.score) for x in flags]
    assert f.score >= 0.9 and f.score >= similarity.THRESHOLD


def test_pasted_library_body_is_flagged_as_a_library_copy(flags):
    lib = [f for f in flags if f.student == "frank" and f.other.startswith("library: ")]
    assert [f.other for f in lib] == ["library: hybrid_lab.ops.ssm:ssd_scan"]
    assert lib[0].score >= similarity.THRESHOLD
    # the course's own solution is written differently from ssd_scan: strong evidence, and the report says so
    assert lib[0].solution_score is not None and lib[0].solution_score < 0.3


def test_independent_answers_and_untouched_stubs_are_not_flagged(flags):
    named = {n for f in flags for n in (f.student, f.other)}
    assert not named & {"carol", "dave", "erin"}, flags
    assert {(f.student, f.other) for f in flags} == {("alice", "bob"),
                                                     ("frank", "library: hybrid_lab.ops.ssm:ssd_scan")}
    # and the independent answers do score low against each other: the threshold has room
    codes = {n: {"01.3": c} for n, c in (("alice", ALICE), ("carol", CAROL))}
    assert similarity.compare(codes, threshold=0.3, min_overlap=0) == []


def test_untouched_stub_has_no_own_code():
    nb = nbformat.read(str(LAB), as_version=4)
    codes = similarity.exercise_codes(nb, nbformat.read(str(SOL), as_version=4))
    assert set(codes) == {"01.1", "01.2", "01.3", "01.4"} and all(not c.strip() for c in codes.values())


def test_a_common_answer_is_not_evidence():
    # seven students with the same answer: what most of a class writes alike is dropped (MOSS's -m), not flagged
    codes = {f"s{i}": {"01.3": ALICE} for i in range(7)}
    codes.update({f"t{i}": {"01.3": CAROL.replace("cur", f"c{i}")} for i in range(20)})
    assert not [f for f in similarity.compare(codes) if f.student.startswith("s")]


def test_bad_arguments_say_what_was_expected():
    with pytest.raises(ValueError, match="threshold"):
        similarity.compare({}, threshold=1.5)
    with pytest.raises(ValueError, match="codes"):
        similarity.compare({"alice": "code"})


def test_report_and_gradebook_column_change_no_score(klass, tmp_path, capsys):
    folder, paths = klass
    exs = course.exercises(course.read_notebook(SOL))
    results = [classgrade.Result(n, p.name, "graded", points={"01.3": 3}, total=3, max_points=12)
               for n, p in sorted(paths.items())]
    gb = tmp_path / "gradebook.csv"
    book.add_lab(gb, book.lab_record("01", SOL.stem, exs, results))
    before = list(csv.DictReader(open(gb)))
    flags, report = similarity.report_class([folder], "01", results, gradebook=gb)
    assert report == tmp_path / "similarity_lab01.csv"
    rows = list(csv.DictReader(open(report)))
    assert {(r["student"], r["other"]) for r in rows} == {(f.student, f.other) for f in flags}
    after = {r["name"]: r for r in csv.DictReader(open(gb))}
    for r in before:                        # every score and flag as it was
        assert {k: after[r["name"]][k] for k in r} == r
    assert after["bob"]["similarity"] == "lab 01: 01.3 similar to alice (%.2f)" % _pairs(flags)[
        ("01.3", "alice", "bob")].score
    assert "library: hybrid_lab.ops.ssm:ssd_scan" in after["frank"]["similarity"]
    assert after["carol"]["similarity"] == ""
    stored = json.loads(gb.with_suffix(".json").read_text())
    assert all(r["flags"] == [] for r in stored["labs"]["01"]["results"])     # never in what Gradescope shows
    assert "2 flag(s)" in capsys.readouterr().out


def test_grade_similarity_runs_the_report_after_grading(monkeypatch):
    from hybrid_lab.course import cli

    seen = []
    monkeypatch.setattr(cli.classgrade, "grade_class", lambda *a, **kw: seen.append("graded") or [])
    monkeypatch.setattr(similarity, "report_class", lambda *a, **kw: seen.append(("report", a, kw)))
    cli.main(["grade", "subs/", "--lab", "01", "--gradebook", "gb.csv", "--similarity"])
    assert seen == ["graded", ("report", (["subs/"], "01", []), {"gradebook": "gb.csv", "csv_path": None})]
    seen.clear()
    cli.main(["grade", "subs/", "--lab", "01", "--gradebook", "gb.csv"])       # off unless asked for
    assert seen == ["graded"]
