"""Slides: every solution notebook carries Jupyter slide metadata by the lab's conventions, and the deck writer turns
it into one self-contained HTML file (no network: MathML formulas, embedded figures) that reads as a lecture: long
prose goes to the speaker notes, bullets come one by one, no slide overflows or ends on a colon. ``--mark`` never
overwrites a slide type set by hand. The browser half (every deck at 1280x720, its PDF) is in
tests/e2e/test_decks.py and tests/e2e/test_browser_e2e.py::test_slides_render_offline."""
import copy
import re

import nbformat
import pytest

from hybrid_lab.course import cli
from hybrid_lab.course import pipeline as course
from hybrid_lab.course import slides

ROOT = course.repo_root()
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
NOTES = re.compile(r'<aside class="notes">.*?</aside>', re.S)


def visible(slide_html: str) -> tuple[str, int]:
    """A slide's text outside its notes (a formula counts as one word) and its lines (blocks: headings, paragraphs,
    bullets, display formulas, figures, lines of printed text)."""
    vis = NOTES.sub("", slide_html)
    lines = len(re.findall(r'<(?:h[1-6]|p|li|img)\b|<math[^>]*display="block"', vis))
    lines += sum(m.count("\n") + 1 for m in re.findall(r"<pre>(.*?)</pre>", vis, re.S))
    text = re.sub(r"<[^>]+>", " ", re.sub(r"<math.*?</math>", " F ", vis, flags=re.S))
    return " ".join(text.split()), lines


@pytest.mark.parametrize("sol", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_every_solution_carries_its_slide_metadata(sol):
    nb = nbformat.read(str(sol), as_version=4)
    marked = copy.deepcopy(nb)
    slides.mark_slides(marked)
    got = [(c.metadata.get("slideshow"), c.metadata.get("hybrid_lab", {}).get("slide_auto")) for c in nb.cells]
    assert got == [(c.metadata["slideshow"], c.metadata.get("hybrid_lab", {}).get("slide_auto"))
                   for c in marked.cells], f"run: hybrid-lab slides --mark {sol.name}"
    kinds = [g[0]["slide_type"] for g in got]
    assert kinds[0] == "slide" and kinds.count("slide") >= 4
    for e in course.exercises(nb):       # exercises and their checks never reach the slides
        code = [k for k, c in zip(kinds, nb.cells) if c.cell_type == "code"]
        assert code[e.cell] == "skip" and code[e.cell + 1] == "skip"


@pytest.mark.parametrize("sol", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_every_deck_fits_its_slides_and_has_notes(sol):
    """Every slide's visible text stays within one screen (<= 90 words, <= 12 lines) and never ends on a colon; the
    prose that did not fit is in the speaker notes."""
    nb = nbformat.read(str(sol), as_version=4)
    deck = slides.slides_of(nb)
    for k, s in enumerate(deck):
        text, lines = visible(s)
        assert len(text.split()) <= slides.LEAD_WORDS and lines <= slides.LEAD_LINES, \
            f"slide {k + 1}: {len(text.split())} words, {lines} lines: {text[:200]}"
        assert not text.endswith(":"), f"slide {k + 1} ends on a colon: ...{text[-120:]}"
    notes = [n for s in deck for n in NOTES.findall(s)]
    assert len(notes) >= 3 and sum(len(n) for n in notes) > 2000, f"{len(notes)} notes"
    # nothing of the title cell is lost: each of its words is on the slide or in its notes
    words = set(re.findall(r"[A-Za-z]{4,}", re.sub(r"\$.*?\$|`.*?`|\(.*?\)", " ", course.cell_source(nb.cells[0]))))
    missing = {w for w in words if w not in deck[0]}
    assert len(words) > 20 and not missing, missing


def _nb(*cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(c) if isinstance(c, str) else c for c in cells]
    return nb


def test_mark_keeps_slide_types_set_by_hand(tmp_path):
    nb = nbformat.read(str(ROOT / "solutions" / "01_selective_ssm.ipynb"), as_version=4)
    conventional = [c.metadata["slideshow"]["slide_type"] for c in nb.cells]
    by_hand, lecturer, stale, fresh = 2, 4, 6, 8      # cell 1 is the Colab setup cell
    assert conventional[by_hand] == conventional[lecturer] == "skip"
    nb.cells[by_hand].metadata["slideshow"]["slide_type"] = "subslide"     # changed in JupyterLab's inspector
    nb.cells[lecturer].metadata.pop("hybrid_lab")                         # set by a lecturer before --mark ran
    nb.cells[lecturer].metadata["slideshow"] = {"slide_type": "fragment"}
    nb.cells[stale].metadata["slideshow"]["slide_type"] = "notes"         # written by an older --mark
    nb.cells[stale].metadata["hybrid_lab"]["slide_auto"] = "notes"
    nb.cells[fresh].metadata.pop("slideshow")                             # a new cell
    nb.cells[fresh].metadata.pop("hybrid_lab", None)
    path = tmp_path / "01_selective_ssm.ipynb"
    path.write_text(course.dumps(nb))
    assert cli.main(["slides", "--mark", str(path)]) == 0
    again = nbformat.read(str(path), as_version=4)
    kinds = [c.metadata["slideshow"]["slide_type"] for c in again.cells]
    assert kinds[by_hand] == "subslide" and kinds[lecturer] == "fragment"
    assert kinds[stale] == conventional[stale] and kinds[fresh] == conventional[fresh]
    assert "slide_auto" not in again.cells[lecturer].metadata.get("hybrid_lab", {})
    assert [k for i, k in enumerate(kinds) if i not in (by_hand, lecturer)] == \
        [k for i, k in enumerate(conventional) if i not in (by_hand, lecturer)]
    assert slides.mark_slides(again) == [by_hand, lecturer]


def test_long_prose_goes_to_the_notes():
    prose = " ".join(f"Sentence number {k} says something about the recurrence and its state." for k in range(12))
    src = (f"## 2. The recurrence\n\n{prose}\n\n$$h_t = a_t h_{{t-1}} + b_t x_t$$\n\n"
           + "\n".join(f"* point {k}: a bullet whose text runs on well past what a slide shows in one line, and more"
                       for k in range(4)))
    lead, notes = slides.lead_and_notes(src)
    assert lead.startswith("## 2. The recurrence") and "Sentence number 0 says" in lead
    assert "Sentence number 1 " not in lead and "$$h_t = a_t" in lead and lead.count("* point") == 4
    assert prose in notes and "## 2." not in notes
    assert len(re.sub(r"\$\$.*?\$\$", "F", lead, flags=re.S).split()) <= slides.LEAD_WORDS
    short = "## 3. Short\n\nA slide that fits."
    assert slides.lead_and_notes(short) == (short, "")
    deck = slides.slides_of(_nb(src, nbformat.v4.new_code_cell("x = 1"), "A prose cell marked as notes."))
    assert deck == []                                 # no slide metadata: nothing shown
    nb = _nb(src, "A prose cell marked as notes.")
    nb.cells[0].metadata["slideshow"] = {"slide_type": "slide"}
    nb.cells[1].metadata["slideshow"] = {"slide_type": "notes"}
    (one,) = slides.slides_of(nb)
    notes_html = NOTES.findall(one)
    assert len(notes_html) == 1 and "Sentence number 11" in notes_html[0] and "prose cell marked" in notes_html[0]
    assert "Sentence number 11" not in NOTES.sub("", one)
    nb.cells[0].metadata["hybrid_lab"] = {"slide_full": True}            # a lecturer keeps the cell whole
    assert "Sentence number 11" in NOTES.sub("", slides.slides_of(nb)[0])


@pytest.mark.parametrize("src, shown, gone", [
    ("## A\n\nFirst things first. The filter skips tokens:", "First things first.", "skips tokens"),
    ("## A\n\nThe recurrence is:", "<h2", "recurrence is"),
    ("## A\n\n* one\n* two, as follows:", "two, as follows</li>", "follows:"),
])
def test_no_slide_ends_on_a_colon(src, shown, gone):
    nb = _nb(src)
    nb.cells[0].metadata["slideshow"] = {"slide_type": "slide"}
    (one,) = slides.slides_of(nb)
    assert shown in one and gone not in one
    assert not visible(one)[0].endswith(":")


def test_bullets_come_one_by_one():
    nb = _nb("## A\n\n* one\n* two\n* three", "## B\n\n* alone", "and then this")
    nb.cells[0].metadata["slideshow"] = {"slide_type": "slide"}
    nb.cells[1].metadata["slideshow"] = {"slide_type": "slide"}
    nb.cells[2].metadata["slideshow"] = {"slide_type": "fragment"}
    a, b = slides.slides_of(nb)
    assert a.count('<li class="fragment">') == 3
    assert '<li class="fragment">' not in b and '<div class="fragment">' in b and "and then this" in b


def test_deck_is_self_contained(tmp_path):
    out = slides.write_deck(ROOT / "solutions" / "01_selective_ssm.ipynb", tmp_path / "deck.html")
    text = out.read_text()
    assert not re.search(r"""(src|href)=["']https?:""", text), "the deck loads something from the network"
    assert text.count("<section") >= 5 and "<math" in text and "data:image/png;base64," in text
    assert '<aside class="notes">' in text and "print-pdf" in text and "@page { size: 1280px 720px" in text
    prose = re.sub(r"<pre>.*?</pre>|<math.*?</math>", "", text, flags=re.S)
    assert not re.search(r"\$[^$\s][^$]*\$", prose), "a formula left as TeX"


def test_markdown_formulas_become_mathml():
    h = slides.markdown_html("A $x_t$ and $$h_t = e^{c_t} h_0$$ but not \\$5.")
    assert h.count("<math") == 2 and 'display="block"' in h and "$5" in h


def test_a_notebook_by_its_number():
    assert slides.notebook_path("01") == ROOT / "solutions" / "01_selective_ssm.ipynb"
    assert slides.notebook_path("solutions/01_selective_ssm.ipynb").name == "01_selective_ssm.ipynb"
    with pytest.raises(course.CourseError, match="no solution notebook numbered 99"):
        slides.notebook_path("99")


def test_pdf_without_chromium_says_what_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("HYBRID_LAB_CHROMIUM", str(tmp_path / "no-such-browser"))
    assert cli.main(["slides", "01", "--pdf", "--out", str(tmp_path / "d.pdf")]) == 2
    err = capsys.readouterr().err
    assert "headless Chromium" in err and "apt-get install chromium" in err and not (tmp_path / "d.pdf").exists()
    with pytest.raises(ValueError, match="timeout"):
        slides.write_pdf(ROOT / "solutions" / "01_selective_ssm.ipynb", tmp_path / "d.pdf", timeout=0)


CJK = re.compile(r"[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")


def test_chinese_is_in_zh_spans_that_a_browser_without_cjk_font_hides():
    nb = _nb("## 1. From LTI to selective · 从线性时不变到选择性\n\nSnapshots are huge (快照大) and `code 中` stays.")
    nb.cells[0].metadata["slideshow"] = {"slide_type": "slide"}
    deck = slides.deck_html(nb, "t")
    h2 = re.search(r"<h2[^>]*>(.*?)</h2>", deck).group(1)
    assert h2 == '1. From LTI to selective<span class="zh" lang="zh"> · 从线性时不变到选择性</span>'
    assert 'huge<span class="zh" lang="zh"> (快照大)</span> and <code>code 中</code>' in deck
    assert "html.no-cjk .zh { display: none; }" in deck and "classList.add('no-cjk')" in deck
    # every heading of a real deck: its Chinese inside the spans, its English outside
    text = slides.deck_html(course.read_notebook(ROOT / "solutions" / "01_selective_ssm.ipynb"), "01")
    heads = re.findall(r"<h[1-6][^>]*>(.*?)</h[1-6]>", text, re.S)
    assert sum('class="zh"' in h for h in heads) >= 4
    outside = [re.sub(r'<span class="zh" lang="zh">.*?</span>', "", h) for h in heads]
    assert not any(CJK.search(o) for o in outside), outside
    assert all(re.search(r"[A-Za-z]", o) for o in outside), outside
