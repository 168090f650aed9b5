"""Slides (issue 14, point 5): every solution notebook carries Jupyter slide metadata by the lab's conventions, and
the deck writer turns it into one self-contained HTML file (no network: MathML formulas, embedded figures). The
browser half (the deck rendering offline) is in tests/e2e/test_browser_e2e.py::test_slides_render_offline."""
import copy
import re

import nbformat
import pytest

from hybrid_lab.course import pipeline as course
from hybrid_lab.course import slides

ROOT = course.repo_root()
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("sol", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_every_solution_carries_its_slide_metadata(sol):
    nb = nbformat.read(str(sol), as_version=4)
    marked = copy.deepcopy(nb)
    slides.mark_slides(marked)
    got = [c.metadata.get("slideshow") for c in nb.cells]
    assert got == [c.metadata["slideshow"] for c in marked.cells], f"run: hybrid-lab slides --mark {sol.name}"
    kinds = [g["slide_type"] for g in got]
    assert kinds[0] == "slide" and kinds.count("slide") >= 4
    for e in course.exercises(nb):       # exercises and their checks never reach the slides
        code = [k for k, c in zip(kinds, nb.cells) if c.cell_type == "code"]
        assert code[e.cell] == "skip" and code[e.cell + 1] == "skip"


def test_deck_is_self_contained(tmp_path):
    out = slides.write_deck(ROOT / "solutions" / "01_selective_ssm.ipynb", tmp_path / "deck.html")
    text = out.read_text()
    assert not re.search(r"""(src|href)=["']https?:""", text), "the deck loads something from the network"
    assert text.count("<section") >= 5 and "<math" in text and "data:image/png;base64," in text
    prose = re.sub(r"<pre>.*?</pre>|<math.*?</math>", "", text, flags=re.S)
    assert not re.search(r"\$[^$\s][^$]*\$", prose), "a formula left as TeX"


def test_markdown_formulas_become_mathml():
    h = slides.markdown_html("A $x_t$ and $$h_t = e^{c_t} h_0$$ but not \\$5.")
    assert h.count("<math") == 2 and 'display="block"' in h and "$5" in h
