"""Every call's inputs are compared before and after it: a function that changes an array, list or
dict it was handed fails the case, with a message naming the input, in the in-notebook check and in the grader's
verdict alike (both judge with :func:`framework.judge`); an exercise whose contract is to change an input says so
with its ``mutates`` flag (06.2's cache: "updating ``cache`` in place and returning it is fine").

The kept wrong answers that change their inputs (04.2's params updated in place and returned, 01.1's state, 02.2's
positions, 03.2's byte counts, 07.3's predecessors, 08.3's Adam moments) sit in ``tests/wrong_answers/`` with the
others, so tests/test_exercises.py fails them on every seed and through ``hybrid-lab grade``; here: the message, the
grader with the lecturer's hidden cases, the flag, and the comparison itself."""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from hybrid_lab.core import sandbox
from hybrid_lab.exercises import evaluate, framework, get, verdicts
from tests.test_exercises import ALL, ROOT, _function, _patched, _wrong
from tests.test_trusted_verdicts import _cells

get("09.1")      # imports gpu_track now, at collection: it sets TRITON_INTERPRET once (conftest fails a test that does)
SOLUTION = {e.id: (sol, src) for sol, e, src, _ in ALL}
HIDDEN = verdicts.load_hidden(ROOT / "solutions" / verdicts.HIDDEN_FILE)
UNSAFE = not sandbox.available()[0]
IN_PLACE = "params updated in place and returned (params must be left unchanged)"


def _mutating_04_2():
    sol, src = SOLUTION["04.2"]
    (_, old, new), = [w for w in _wrong("04")["04.2"] if w[0] == IN_PLACE]
    return sol, _patched(src, old, new)


# ------------------------------------------------------------------------------------------------ the comparison
@pytest.mark.parametrize("before, change, where", [
    (np.arange(6.0).reshape(2, 3), lambda a: a.__setitem__((1, 2), -1.0), "x at [1, 2] was 5, now -1"),
    (np.array([1.0, np.nan]), lambda a: None, None),                                  # NaN stays NaN: unchanged
    (np.array([1.0, np.nan]), lambda a: a.__setitem__(1, 0.0), "x at [1] was nan, now 0"),
    (np.zeros(3), lambda a: a.resize(4, refcheck=False), "x now has shape (4,), it had (3,)"),
    ({"W": np.ones(2)}, lambda d: d["W"].__imul__(2), "x['W'] at [0] was 1, now 2"),
    ({"W": np.ones(2)}, lambda d: d.setdefault("b", 0), "x gained a key 'b'"),
    ({"W": np.ones(2), "b": 1}, lambda d: d.pop("b"), "x lost its key 'b'"),
    ([3, 1, 2], lambda l: l.sort(), "x[0] was 3, now 1"),
    ([3, 1, 2], lambda l: l.append(0), "x now has 4 entries, it had 3"),
    ((np.ones(2), [1]), lambda t: t[1].append(2), "x[1] now has 2 entries, it had 1"),
    (np.array([1, 2 ** 70], dtype=object), lambda a: a.__setitem__(1, 2 ** 70 + 1), "x at [1] was"),
    ("text", lambda s: None, None),
])
def test_input_change_says_what_changed(before, change, where):
    import copy
    after = copy.deepcopy(before)
    change(after)
    got = framework.input_change(before, after, "x")
    if where is None:
        assert got is None
    else:
        assert got is not None and got.startswith(where), got


def test_objects_are_not_compared_only_the_arrays_lists_and_dicts():
    class Model:
        def __init__(self):
            self.step = 0
    a, b = Model(), Model()
    b.step = 1
    assert framework.input_change(a, b, "model") is None


def test_input_names_come_from_the_reference_or_the_exercise():
    assert framework.input_names(get("04.2"))[:2] == ["params", "x_queries"]
    assert framework.input_names(get("06.2")) == ["model", "cache", "tokens"]            # its own run's order
    assert framework.input_names(get("09.1")) == ["K", "IDX", "BLOCK_K"]


# ------------------------------------------------------------------------------------------------ 04.2 in place
def test_04_2_updating_params_in_place_passes_every_comparison_of_the_outputs():
    """The wrong answer is right on every output: the old check (outputs only) let it through."""
    sol, src = _mutating_04_2()
    fn, ns = _function(sol, "04.2", src)
    ex = get("04.2")
    for seed in range(3):
        cases = ex.cases(np.random.default_rng(seed))
        wants = framework.reference_results(ex, cases)
        for case, want in zip(cases, wants):
            got = framework._run(ex, fn, case)
            assert framework.compare(ex, got, want, case) is None


def test_04_2_updating_params_in_place_fails_the_check_naming_params():
    sol, src = _mutating_04_2()
    fn, ns = _function(sol, "04.2", src)
    v = evaluate("04.2", fn, 3, globals_=ns)
    assert v.status == "fail", v.message
    assert re.search(r"04\.2: your function changed its input params \(params\['\w+'\] at \[[\d, ]+\] was .+, now "
                     r".+; params must be left unchanged", v.details[0]), v.details


def test_04_2_updating_params_in_place_fails_through_the_grader_with_the_hidden_cases(tmp_path):
    """The grader's own path (cases pickled to the sandboxed worker, outcomes back as data, judged in the grader's
    process), with the lecturer's hidden cases added: fail, and the same message."""
    sol, src = _mutating_04_2()
    v = verdicts.verdict("04.2", _cells(sol, "04.2", src), 3, tmp_path / "w", tmp_path / "cache", HIDDEN,
                         unsafe=UNSAFE)
    assert v["status"] == "fail", (v["message"], v["details"], v["stderr"][-5:])
    assert "04.2: your function changed its input params" in v["details"][0], v["details"]
    assert "params must be left unchanged" in v["details"][0], v["details"]
    rng = np.random.default_rng(3)
    n = len(get("04.2").cases(rng)) + len(verdicts.hidden_cases(HIDDEN, "04.2", rng))
    assert re.search(rf"wrong on \d+ of {n} cases", v["message"]), v["message"]        # the hidden ones were run


def test_the_solution_does_not_change_its_inputs_on_any_case():
    """No false alarm: the 04.2 solution, every public and hidden case of 5 seeds (its inputs compared)."""
    sol, src = SOLUTION["04.2"]
    fn, ns = _function(sol, "04.2", src)
    ex = get("04.2")
    for seed in range(5):
        rng = np.random.default_rng(seed)
        cases = ex.cases(rng) + verdicts.hidden_cases(HIDDEN, "04.2", rng)
        for c in cases:
            out = framework.run_student(ex, fn, c, ns)
            assert out["ok"] and "changed" not in out, (seed, c.name, out.get("changed"))


# ------------------------------------------------------------------------------------------------ the flag
def test_an_exercise_whose_contract_is_to_mutate_is_exempt_by_its_flag():
    """The same in-place 04.2 passes when the exercise declares params mutable (``mutates``), and only then."""
    sol, src = _mutating_04_2()
    fn, ns = _function(sol, "04.2", src)
    ex = get("04.2")
    exempt = dataclasses.replace(ex, mutates=("params",))
    cases = ex.cases(np.random.default_rng(4))
    wants = framework.reference_results(ex, cases)
    for e, status in ((ex, "fail"), (exempt, "pass")):
        outs = [framework.run_student(e, fn, c, ns) for c in cases]
        assert framework.judge(e, "indexer_step", cases, outs, wants, 4).status == status


def test_06_2_may_update_its_cache_in_place_as_its_text_says():
    """06.2's solution appends to the cache it is given, which its text allows ("updating ``cache`` in place and
    returning it is fine"): the exercise carries the flag, and the solution passes."""
    assert get("06.2").mutates == ("cache",)
    sol, src = SOLUTION["06.2"]
    assert "updating ``cache`` in place and returning it is fine" in src
    fn, ns = _function(sol, "06.2", src)
    assert evaluate("06.2", fn, 0, globals_=ns).passed


def test_only_exercises_whose_text_allows_it_may_change_an_input():
    """The flag is set where the exercise's text allows a change in place, and nowhere else."""
    flagged = {e for e in SOLUTION if get(e).mutates}
    assert flagged == {"06.2"}, flagged
    for e in flagged:
        assert "in place" in SOLUTION[e][1], f"{e}: flagged mutable, but its exercise cell does not say so"
