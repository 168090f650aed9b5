"""The README says where an overflow fails an exercise: warnings never fail one, except where avoiding the overflow
is the lesson (a decay matrix or an exponent clamped before ``exp``), whose check turns numpy's overflow into an
error (``float_errors``). The text and the checks' settings stay together: the exercises the README names there are
exactly those whose check fails an overflow."""
import importlib
import re

from hybrid_lab.course.pipeline import repo_root
from hybrid_lab.exercises.framework import EXERCISES


def test_readme_names_exactly_the_exercises_whose_check_fails_an_overflow():
    text = " ".join((repo_root() / "README.md").read_text().split())
    assert "never fails an exercise" in text
    # sentences end at a period before a space (01.2's own period is followed by a digit)
    rule = [t for t in re.split(r"\.\s", text) if "(`FloatingPointError: overflow`)" in t]
    assert rule, "README: no sentence saying where an overflow fails the case (FloatingPointError: overflow)"
    named = set(re.findall(r"\b(\d\d\.\d)'s\b", rule[0]))
    for lab in sorted(p.stem[3:] for p in (repo_root() / "hybrid_lab" / "exercises").glob("lab[0-9][0-9].py")):
        importlib.import_module(f"hybrid_lab.exercises.lab{lab}")
    strict = {e.id for e in EXERCISES.values() if e.float_errors}
    assert named == strict, f"README names {sorted(named)}; the checks that fail an overflow: {sorted(strict)}"
