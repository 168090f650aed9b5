"""The README says where an overflow fails an exercise (issue 26, point 8): warnings never fail one, except where
avoiding the overflow is the lesson, 01.2's decay matrix, whose check turns numpy's overflow into an error. The text
and the check's setting stay together: a README that stops saying it, or a 01.2 that stops doing it, fails here."""
import re

from hybrid_lab.course.pipeline import repo_root
from hybrid_lab.exercises import get


def test_readme_states_the_01_2_overflow_rule_and_the_check_applies_it():
    text = " ".join((repo_root() / "README.md").read_text().split())
    assert "never fails an exercise" in text
    rule = re.search(r"[^.]*01\.2[^.]*overflow[^.]*\(`FloatingPointError: overflow`\)[^.]*\.", text)
    assert rule, "README: no sentence saying that an overflow fails 01.2 (FloatingPointError: overflow)"
    assert get("01.2").float_errors, "01.2's check no longer fails an overflow, but the README says it does"
