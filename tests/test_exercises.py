"""Graded exercises cannot be fooled, and an untouched lab runs to the end.

For every exercise of every solution notebook:
* it is registered (``hybrid_lab/exercises/labNN.py``), its header gives points, level and minutes, and the cell
  below it hands the student's function to ``check("NN.K", ...)``;
* the solution's code passes on 20 seeds (fresh random cases each);
* every wrong answer kept in ``tests/wrong_answers/labNN.py`` (at least two per exercise: a missing term, a wrong
  sign, off by one, delegation to the library ...) fails on every one of 5 seeds, as "fail", not "not done".
The same through the real grader, one notebook run per set of wrong answers; a correct answer with a ``print`` and a
warning passes; every untouched lab runs top to bottom with nbclient (no ``allow_errors``) in < 60 s and 2 GB, and
its checks print "not done yet".
"""
from __future__ import annotations

import hashlib
import importlib
import re
import tempfile
from pathlib import Path

import nbformat
import pytest

from hybrid_lab.course import pipeline as course
from hybrid_lab.exercises import evaluate, get

ROOT = course.repo_root()
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
SOURCES = Path(tempfile.mkdtemp(prefix="hybrid_lab_exercise_src_"))   # the exercise code the tests run, as files


def _exercise_cells(sol):
    """[(Exercise, exercise cell source, source of the code cell after it)] of a solution notebook."""
    nb = nbformat.read(str(sol), as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    return [(e, code[e.cell].source, code[e.cell + 1].source if e.cell + 1 < len(code) else "")
            for e in course.exercises(nb)]


ALL = [(sol, e, src, nxt) for sol in SOLUTIONS for e, src, nxt in _exercise_cells(sol)]
IDS = [e.id for _, e, _, _ in ALL]


def _wrong(lab: str) -> dict:
    try:
        return importlib.import_module(f"tests.wrong_answers.lab{lab}").WRONG
    except ModuleNotFoundError:
        return {}


def _strip_markers(src: str) -> str:
    return "\n".join(ln for ln in src.splitlines() if ln.strip() not in (course.BEGIN, course.END))


def _exec_file(src: str, tag: str, ns: dict) -> None:
    """Run ``src`` in ``ns`` from a real file: a native @triton.jit reads its function's source with inspect (as it
    does from a notebook cell's file)."""
    path = SOURCES / f"{tag.replace('.', '_')}_{hashlib.sha256(src.encode()).hexdigest()[:12]}.py"
    path.write_text(src)
    exec(compile(src, str(path), "exec"), ns)


def _function(sol, ex_id: str, source: str):
    """The student's function as the notebook would define it: the exercise's preamble, the lab's earlier exercise
    solutions (a later exercise may use an earlier one), then ``source``."""
    ex = get(ex_id)
    ns: dict = {"__name__": f"exercise_{ex_id.replace('.', '_')}"}
    exec(compile(ex.preamble, "<preamble>", "exec"), ns)
    for e, src, _ in _exercise_cells(sol):
        if e.id == ex_id:
            break
        _exec_file(_strip_markers(src), f"solution_{e.id}", ns)
    _exec_file(_strip_markers(source), f"exercise_{ex_id}", ns)
    return ns[ex.function], ns


def _patched(src: str, old: str, new: str) -> str:
    assert old in src, f"the wrong answer's text {old!r} is not in the solution cell"
    return src.replace(old, new, 1)


@pytest.mark.parametrize("sol, ex, src, nxt", ALL, ids=IDS)
def test_exercise_is_registered_and_checked(sol, ex, src, nxt):
    spec = get(ex.id)
    assert ex.level in course.LEVELS and ex.minutes, f"{ex.id}: header needs '(P points, level, ~M min)'"
    assert re.search(rf'\bcheck\("{re.escape(ex.id)}",\s*{spec.function}\b', nxt), \
        f"{ex.id}: the cell after the exercise must start with {spec.function} = check(\"{ex.id}\", {spec.function})"
    assert re.search(rf"^(def|class)\s+{spec.function}\b", _strip_markers(src), re.M) or "@triton.jit" in src, \
        f"{ex.id}: the exercise cell must define {spec.function}"
    stub = course.stub_source(src, ex)
    compile(stub, "<stub>", "exec")                   # the stub cell itself runs: Run All goes past it


@pytest.mark.parametrize("sol, ex, src, nxt", ALL, ids=IDS)
def test_solution_passes_on_fresh_seeds(sol, ex, src, nxt):
    fn, ns = _function(sol, ex.id, src)
    for seed in range(20):
        v = evaluate(ex.id, fn, seed, globals_=ns)
        assert v.passed, f"{ex.id} seed {seed}: {v.message}; {v.details}"


@pytest.mark.parametrize("sol, ex, src, nxt", ALL, ids=IDS)
def test_every_wrong_answer_fails_on_every_seed(sol, ex, src, nxt):
    wrong = _wrong(sol.name[:2]).get(ex.id, [])
    assert len(wrong) >= 2, f"{ex.id}: keep at least two wrong answers in tests/wrong_answers/lab{sol.name[:2]}.py"
    for what, old, new in wrong:
        fn, ns = _function(sol, ex.id, _patched(src, old, new))
        for seed in range(5):
            v = evaluate(ex.id, fn, seed, globals_=ns)
            assert v.status == "fail", f"{ex.id} wrong answer '{what}' gave {v.status} on seed {seed}: {v.message}"


def test_stub_is_not_done_and_delegating_to_the_reference_fails():
    def stub(*args):
        raise NotImplementedError("Exercise 01.1: one step")
    assert evaluate("01.1", stub, 0).status == "not_done"
    ref = get("01.1").reference
    v = evaluate("01.1", lambda *a: ref(*a), 0, globals_={"ref": ref})
    assert v.status == "fail" and "switched off" in v.message


# ---------------------------------------------------------------------------------------------- through the grader
def _lab_variant(sol, tmp_path, edit, name):
    """The lab of ``sol`` with each exercise cell's source replaced by edit(exercise id, solution source)."""
    lab = nbformat.read(str(course.lab_path_for(sol)), as_version=4)
    filled = course.fill_with_solutions(lab, nbformat.read(str(sol), as_version=4))
    code = [c for c in filled.cells if c.cell_type == "code"]
    for e in course.exercises(filled):
        code[e.cell].source = edit(e.id, code[e.cell].source)
    path = tmp_path / f"{sol.name[:3]}{name}.ipynb"
    nbformat.write(filled, str(path))
    return path


def _with_print_and_warning(ex_id, src):
    head, _, body = src.partition("\n")
    return (head + "\nimport warnings\nprint('a debugging print')\nwarnings.warn('a harmless warning')\n" + body)


@pytest.mark.parametrize("sol", SOLUTIONS, ids=[s.stem for s in SOLUTIONS])
def test_grader_fails_every_wrong_answer_and_passes_the_solution(sol, tmp_path):
    wrong = _wrong(sol.name[:2])
    ok = course.grade(_lab_variant(sol, tmp_path, _with_print_and_warning, "solved"), quiet=True)
    assert all(r.passed for r in ok), course.format_table(ok)
    rounds = max((len(v) for v in wrong.values()), default=0)
    for j in range(min(rounds, 2)):
        def edit(ex_id, src, j=j):
            w = wrong[ex_id]
            _, old, new = w[min(j, len(w) - 1)]
            return _patched(src, old, new)
        rows = course.grade(_lab_variant(sol, tmp_path, edit, f"wrong{j}"), quiet=True)
        bad = [r for r in rows if r.passed or r.not_done]
        assert not bad, course.format_table(rows)


@pytest.mark.parametrize("lab", sorted((ROOT / "labs").glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.stem)
def test_untouched_lab_runs_to_the_end_in_under_a_minute(lab, tmp_path):
    r = course.run_all(lab)
    nb = r["nb"]
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
                   if o.get("output_type") == "stream")
    for e in course.exercises(nb):
        assert f"Exercise {e.id} not done yet" in text, f"{lab.name}: no 'not done yet' for {e.id}"
    assert r["wall"] < 60, f"{lab.name}: Run All took {r['wall']:.0f} s"
    own, children = r["peak_rss"]
    assert own < 2 * 2 ** 30 and children < 2 * 2 ** 30, f"{lab.name}: peak memory {own / 2 ** 20:.0f} MB " \
        f"(kernel), {children / 2 ** 20:.0f} MB (its largest child)"


# ------------------------------------------------------------------------------------------ integers of any size
def test_compare_values_compares_integers_of_any_size_exactly():
    import numpy as np

    from hybrid_lab.exercises.framework import compare_values
    big = 3 ** 50 + 7                                       # > 2^64, odd: no float holds it
    assert compare_values(big, big) is None
    assert compare_values(np.array([1, big, -big], dtype=object), np.array([1, big, -big], dtype=object)) is None
    assert compare_values([1, big], np.array([1, big], dtype=object)) is None      # a list of Python ints
    off = compare_values(big + 1, big)
    assert off is not None and f"got {big + 1}, expected {big} (an integer, exactly)" in off, off
    at = compare_values(np.array([1, big - 1], dtype=object), np.array([1, big], dtype=object), "n", ("i",))
    assert at is not None and at.startswith("n wrong at i=1 (1 of 2 entries)"), at
    # a float: right only when it is that very integer; a rounded one fails and says to return an int
    assert compare_values(2.0 ** 70, 2 ** 70) is None
    rounded = compare_values(float(big), big)
    assert rounded is not None and "2^53" in rounded and "return an int" in rounded, rounded
    # numpy's fixed-size integers cannot hold it: the wrapped value fails, with the reason
    wrapped = compare_values(np.int64((big + 2 ** 63) % 2 ** 64 - 2 ** 63), big)
    assert wrapped is not None and "int64 cannot hold it" in wrapped, wrapped
    assert compare_values("many", big) is not None and compare_values(None, big) is not None
    # past int64 but within uint64 (numpy would compare through float64 there): exactly too
    assert compare_values(2 ** 63 + 1, 2 ** 63 + 1) is None and compare_values(2 ** 63, 2 ** 63 + 1) is not None
    assert compare_values(float(2 ** 63), 2 ** 63 + 1) is not None
    # the ordinary paths are unchanged: int64 exactly, floats to the tolerance
    assert compare_values(np.array([1, 2]), np.array([1, 2])) is None
    assert compare_values(np.array([1, 3]), np.array([1, 2])) is not None
    assert compare_values(1.0 + 1e-9, 1.0) is None and compare_values(1.001, 1.0) is not None


def test_compare_values_agrees_with_00_1s_own_comparison_past_2_63():
    """00.1 compares its results past 2^63 itself; compare_values now gives the same pass / fail there."""
    import numpy as np

    from hybrid_lab.exercises.framework import compare_values
    ex = get("00.1")
    case = ex.cases(np.random.default_rng(0))[0]
    for want in (2 ** 63 + 5, 3 ** 45 * 8, 2 ** 70):
        wrapped = np.int64((want + 2 ** 63) % 2 ** 64 - 2 ** 63)             # what numpy's int64 makes of it
        for got in (want, want + 1, want - 8, float(want), np.float64(want), wrapped, np.uint64(want % 2 ** 64), "x"):
            assert (compare_values(got, want) is None) == (ex.compare(got, want, case) is None), (got, want)
