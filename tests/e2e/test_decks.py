"""Every solution's deck in headless Chromium at 1280x720, as a projector shows it, with the network blocked:

- no slide overflows the screen (each section's scrollHeight / scrollWidth within its clientHeight / clientWidth);
- every formula of a slide is typeset (a MathML element with a real size, none left as TeX);
- speaker notes are there (``aside.notes``) and hidden until ``n`` is pressed;
- bullets come one by one: page down reveals a slide's fragments before moving to the next slide;
- the Chinese of the headings shows where a CJK font exists and is hidden (English headings, no boxes) where none
  does: the deck once more in a Chromium whose fontconfig knows only DejaVu;
- ``hybrid-lab slides --pdf`` writes one page per slide (pages counted with pypdf when installed, else the PDF's
  ``/Type /Page`` objects).

Same prerequisites and knobs as test_browser_e2e.py: the Python ``playwright`` package (the ``test`` extra) and
Debian's ``chromium`` (``HYBRID_LAB_CHROMIUM`` points at another); installed with apt-get only as root with
``CI=true``, else skipped; ``HYBRID_LAB_E2E=0`` skips; ``HYBRID_LAB_E2E_NOTEBOOKS=01,03`` keeps those decks.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from hybrid_lab.course import pipeline as course
from hybrid_lab.course import slides
from tests.e2e.test_browser_e2e import CHROMIUM, ensure_chromium, import_playwright  # one install rule

ROOT = course.repo_root()
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
KEEP = [s.strip() for s in os.environ.get("HYBRID_LAB_E2E_NOTEBOOKS", "").split(",") if s.strip()]
NOTES = re.compile(r'<aside class="notes">.*?</aside>', re.S)
DECKS = [p for p in sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
         if not KEEP or any(p.name.startswith(k) for k in KEEP)]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("HYBRID_LAB_E2E", "1") == "0", reason="HYBRID_LAB_E2E=0"),
]


@pytest.fixture(scope="module")
def playwright():
    with import_playwright()() as pw:
        yield pw


@pytest.fixture(scope="module")
def browser(playwright):
    b = playwright.chromium.launch(executable_path=ensure_chromium(), headless=True, args=CHROMIUM_ARGS)
    yield b
    b.close()


def latin_only_browser(playwright, tmp_path):
    """Chromium whose fontconfig knows only the DejaVu fonts (no CJK glyph), as on a bare Debian image."""
    conf = tmp_path / "fonts.conf"
    conf.write_text(f'<?xml version="1.0"?>\n<!DOCTYPE fontconfig SYSTEM "fonts.dtd">\n<fontconfig>\n'
                    f"  <dir>{LATIN_FONTS}</dir>\n  <cachedir>{tmp_path / 'fc-cache'}</cachedir>\n</fontconfig>\n")
    return playwright.chromium.launch(executable_path=ensure_chromium(), headless=True, args=CHROMIUM_ARGS,
                                      env={**os.environ, "FONTCONFIG_FILE": str(conf)})


def pdf_pages(path: Path) -> int:
    try:
        from pypdf import PdfReader
    except ImportError:
        return len(re.findall(rb"/Type\s*/Page(?![a-zA-Z])", path.read_bytes()))
    return len(PdfReader(str(path)).pages)


JS_MEASURE = """() => slides.map((s, k) => {
    show(k, true);
    const maths = Array.from(s.querySelectorAll('math')).filter(m => !m.closest('aside'));
    return {id: s.id, sh: s.scrollHeight, ch: s.clientHeight, sw: s.scrollWidth, cw: s.clientWidth,
            math: maths.length,
            typeset: maths.filter(m => m.getBoundingClientRect().width > 2 && m.getBoundingClientRect().height > 4)
                          .length,
            notes: Array.from(s.querySelectorAll('aside.notes')).map(a => a.textContent.trim().length),
            notesShown: Array.from(s.querySelectorAll('aside.notes')).some(a => a.getBoundingClientRect().height > 0),
            frags: s.querySelectorAll('.fragment').length};
})"""


@pytest.mark.timeout(600)
@pytest.mark.parametrize("sol", DECKS, ids=[p.stem for p in DECKS])
def test_deck_fits_1280x720_and_prints_one_page_per_slide(browser, sol, tmp_path, monkeypatch):
    deck = slides.write_deck(sol, tmp_path / f"{sol.stem}.html")
    expected_math = [NOTES.sub("", s).count("<math") for s in slides.slides_of(course.read_notebook(sol))]
    blocked, errors = [], []
    ctx = browser.new_context(viewport={"width": slides.PAGE_W, "height": slides.PAGE_H})
    pg = ctx.new_page()
    try:
        pg.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file://")
                 else (blocked.append(route.request.url), route.abort()))
        pg.on("pageerror", lambda exc: errors.append(str(exc)))
        pg.goto(deck.as_uri(), wait_until="load")
        got = pg.evaluate(JS_MEASURE)
        assert len(got) == len(expected_math) >= 5
        over = [(g["id"], g["sh"], g["ch"], g["sw"], g["cw"]) for g in got
                if g["sh"] > g["ch"] + 1 or g["sw"] > g["cw"] + 1]
        assert not over, f"slides overflowing 1280x720 (id, scrollHeight, clientHeight, scrollWidth, clientWidth): {over}"
        assert [g["math"] for g in got] == expected_math, "formulas missing from the slides"
        assert all(g["typeset"] == g["math"] for g in got), \
            [(g["id"], g["typeset"], g["math"]) for g in got]
        assert not pg.evaluate("document.querySelectorAll('code.tex').length"), "formulas left as raw TeX"
        with_notes = [g for g in got if g["notes"] and max(g["notes"]) > 50]
        assert len(with_notes) >= 3, f"{len(with_notes)} slides with speaker notes"
        assert not any(g["notesShown"] for g in got), "speaker notes visible on a slide"
        pg.evaluate(f"show({got.index(with_notes[0])}, true)")
        pg.keyboard.press("n")          # the lecturer's key: the notes under the slide
        assert pg.evaluate("document.querySelector('section.current aside.notes').getBoundingClientRect().height") > 0
        pg.keyboard.press("n")
        # fragments: page down first reveals the fragments of a slide that has some, then moves on
        k = next((i for i, g in enumerate(got) if g["frags"] >= 2), None)
        if k is not None:
            pg.evaluate(f"show({k}, false)")
            pg.keyboard.press("PageDown")
            assert pg.evaluate("document.querySelectorAll('section.current .fragment.visible').length") == 1
            for _ in range(got[k]["frags"]):
                pg.keyboard.press("PageDown")
            assert pg.evaluate("document.querySelector('section.current').id") == got[min(k + 1, len(got) - 1)]["id"]
        assert not blocked and not errors, (blocked, errors)
    finally:
        ctx.close()
    monkeypatch.setenv("HYBRID_LAB_CHROMIUM", CHROMIUM)
    pdf = slides.write_pdf(sol, tmp_path / f"{sol.stem}.pdf")
    assert pdf_pages(pdf) == len(got), f"{pdf_pages(pdf)} PDF pages for {len(got)} slides"


JS_HEADINGS = """() => Array.from(document.querySelectorAll('section')).map((s, k) => {
    show(k, true);
    return Array.from(s.querySelectorAll('h1, h2, h3')).filter(h => !h.closest('aside')).map(h => ({
        text: h.innerText, zh: Array.from(h.querySelectorAll('.zh')).map(z => getComputedStyle(z).display),
        zhWide: Array.from(h.querySelectorAll('.zh')).map(z => z.getBoundingClientRect().width)}));
}).flat()"""
CJK = re.compile(r"[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")
LATIN_FONTS = Path("/usr/share/fonts/truetype/dejavu")


def _headings(browser, deck):
    ctx = browser.new_context(viewport={"width": slides.PAGE_W, "height": slides.PAGE_H})
    try:
        pg = ctx.new_page()
        errors = []
        pg.on("pageerror", lambda exc: errors.append(str(exc)))
        pg.goto(deck.as_uri(), wait_until="load")
        got = pg.evaluate(JS_HEADINGS), pg.evaluate("document.documentElement.classList.contains('no-cjk')")
        assert not errors, errors
        return got
    finally:
        ctx.close()


@pytest.mark.timeout(120)
def test_chinese_headings_show_with_a_cjk_font_and_hide_without(browser, playwright, tmp_path):
    if not LATIN_FONTS.is_dir():
        pytest.skip(f"no {LATIN_FONTS} for a fontconfig without CJK (apt-get install fonts-dejavu-core)")
    deck = slides.write_deck(ROOT / "solutions" / "01_selective_ssm.ipynb", tmp_path / "01.html")
    heads, no_cjk = _headings(browser, deck)
    if no_cjk:
        pytest.fail("this browser found no CJK font (apt-get install fonts-wqy-zenhei): the deck hid the Chinese")
    bilingual = [h for h in heads if h["zh"]]
    assert len(bilingual) >= 4, heads
    if not any(CJK.search(h["text"]) for h in heads):
        pytest.fail("this browser found no CJK font (apt-get install fonts-wqy-zenhei): the check hid the Chinese")
    assert all(d == "inline" for h in bilingual for d in h["zh"]) and all(w > 20 for h in bilingual
                                                                          for w in h["zhWide"]), bilingual
    # the same deck where fontconfig knows only DejaVu (no CJK glyph): English headings, no boxes
    latin = latin_only_browser(playwright, tmp_path)
    try:
        heads, no_cjk = _headings(latin, deck)
    finally:
        latin.close()
    assert no_cjk and len([h for h in heads if h["zh"]]) == len(bilingual)
    assert all(d == "none" for h in heads for d in h["zh"]), heads
    assert not [h["text"] for h in heads if CJK.search(h["text"])], "CJK (boxes) left in a heading"
    assert all(re.search(r"[A-Za-z]{3}", h["text"]) and not h["text"].rstrip().endswith("·") for h in heads), heads
