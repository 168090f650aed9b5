"""The course site (``hybrid-lab site``) in headless Chromium with the network blocked, as a reader opens it offline:

- the site is built once, by the command (``hybrid-lab site --out DIR``), from labs/ with their stored outputs;
- the table of contents lists one page per notebook, in the order of the README's "Start here" table;
- each notebook's page has the notebook's title, no Colab setup cell, every figure of the lab's stored outputs
  (the explorers' static pictures included) loaded (``naturalWidth > 0``), every formula of its text typeset (a
  MathML element with a real size) and no TeX left as ``$...$`` in its prose;
- no page asks for anything but its own files (every other request is refused and recorded) and none raises a
  script error.

Needs Jupyter Book 1.x (the ``site`` extra, part of the ``test`` extra), the Python ``playwright`` package and Debian's
``chromium``: same rules and knobs as test_browser_e2e.py (``HYBRID_LAB_E2E=0`` skips; chromium installed with
apt-get only as root with ``CI=true``, else skipped).
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from hybrid_lab.course import cli
from hybrid_lab.course import pipeline as course
from hybrid_lab.course import site
from tests.e2e.test_browser_e2e import IN_CI, SHOTS
from tests.e2e.test_decks import browser, latin_only_browser, playwright  # noqa: F401  (the decks' fixtures)

ROOT = course.repo_root()
LABS = {p.stem: p for p in sorted((ROOT / "labs").glob("[0-9][0-9]_*.ipynb"))}
ORDER = [stem for stem, _ in site.readme_order((ROOT / "README.md").read_text(encoding="utf-8"), LABS)]
# a formula in a lab's markdown as JupyterLab reads it ($$...$$ or $...$, \$ a dollar sign): what the page must show
MATH = re.compile(r"(?<!\\)\$\$(.+?)\$\$|(?<![\\$])\$(?!\$)(.+?)(?<!\\)\$", re.S)
BUILD_LIMIT_S = 120
CJK = re.compile("[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef]")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("HYBRID_LAB_E2E", "1") == "0", reason="HYBRID_LAB_E2E=0"),
]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if importlib.util.find_spec("jupyter_book") is None:
        if IN_CI:
            pytest.fail("jupyter-book is missing: the `test` extra installs it (the `site` extra of pyproject.toml)")
        pytest.skip("the site test needs Jupyter Book 1.x: pip install -e '.[site]'")
    out = tmp_path_factory.mktemp("site") / "site"
    t0 = time.monotonic()
    assert cli.main(["site", "--out", str(out)]) == 0
    took = time.monotonic() - t0
    assert took < BUILD_LIMIT_S, f"the site took {took:.0f} s to build"
    return out


class Offline:
    """A page of its own with every request that is not a file:// one refused (and recorded), script errors kept."""

    def __init__(self, browser):
        self.blocked, self.errors = [], []
        self.ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        self.pg = self.ctx.new_page()
        self.pg.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file://")
                      else (self.blocked.append(route.request.url), route.abort()))
        self.pg.on("pageerror", lambda exc: self.errors.append(str(exc)))

    def open(self, path):
        self.pg.goto(path.as_uri(), wait_until="load")
        return self.pg

    def close(self):
        self.ctx.close()


@pytest.fixture
def offline(browser):
    o = Offline(browser)
    yield o
    o.close()
    assert not o.blocked, f"the site asked the network for: {o.blocked[:5]}"
    assert not o.errors, f"script errors: {o.errors[:3]}"


def test_the_table_of_contents_is_the_readmes_order(built, offline):
    pg = offline.open(built / "index.html")
    hrefs = pg.evaluate("""() => Array.from(document.querySelectorAll('nav.bd-docs-nav a.reference.internal'))
        .map(a => a.getAttribute('href'))""")
    pages = [h.split("#")[0].removesuffix(".html") for h in hrefs if re.match(r"\d\d_", h)]
    assert pages == ORDER, f"the sidebar's notebooks {pages}, the README's order {ORDER}"
    listed = pg.evaluate("""() => Array.from(document.querySelectorAll('article ol a.reference.internal'))
        .map(a => a.getAttribute('href'))""")
    assert [h.removesuffix(".html") for h in listed] == ORDER, "the intro page's list is not the README's order"
    assert sorted(p.name for p in built.glob("[0-9][0-9]_*.html")) == sorted(f"{s}.html" for s in LABS)


JS_PAGE = """() => {
    const art = document.querySelector('article.bd-article');
    art.querySelectorAll('details').forEach(d => { d.open = true; });     // the model answers, folded on the page
    const outImgs = Array.from(art.querySelectorAll('.cell_output img'));
    const maths = Array.from(art.querySelectorAll('math'));
    const prose = Array.from(art.querySelectorAll('p, li, td, th, h1, h2, h3, h4, summary'))
        .filter(e => !e.closest('.cell_output, .cell_input, pre'))
        .map(e => { const c = e.cloneNode(true); c.querySelectorAll('math, code, pre').forEach(x => x.remove());
                    return c.textContent; });
    const h1 = art.querySelector('h1').cloneNode(true);
    h1.querySelectorAll('a.headerlink').forEach(a => a.remove());
    return {h1: h1.textContent.trim(), title: document.title,
            noCjk: document.documentElement.classList.contains('no-cjk'), text: art.innerText,
            imgs: outImgs.map(i => ({src: i.getAttribute('src'), ok: i.complete && i.naturalWidth > 0,
                                     w: i.naturalWidth})),
            math: maths.length,
            typeset: maths.filter(m => { const r = m.getBoundingClientRect(); return r.width > 2 && r.height > 4; })
                          .length,
            tex: prose.filter(t => /\\$[^$\\n]{1,200}\\$|\\\\(frac|sum|mathrm|rm|text|left|right|tfrac)\\b/.test(t)),
            rawTex: art.querySelectorAll('code.tex').length};
}"""


def _expected(stem):
    """(first heading, PNG outputs, formulas) of the lab as stored in labs/."""
    nb = course.read_notebook(LABS[stem])
    heading = course.cell_source(nb.cells[0]).lstrip("# ").splitlines()[0].strip()
    pngs = sum(1 for c in nb.cells if c.cell_type == "code" for o in c.outputs
               if (o.get("data") or {}).get("image/png"))
    maths = sum(len(MATH.findall(course.cell_source(c))) for c in nb.cells if c.cell_type == "markdown")
    return heading, pngs, maths


def _plain(s: str) -> str:
    return s.replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')


@pytest.mark.timeout(300)
@pytest.mark.parametrize("stem", ORDER)
def test_a_page_per_notebook_with_its_figures_and_formulas(built, offline, stem):
    heading, pngs, maths = _expected(stem)
    pg = offline.open(built / f"{stem}.html")
    pg.wait_for_function("() => Array.from(document.images).every(i => i.complete)", timeout=30_000)
    got = pg.evaluate(JS_PAGE)
    if got["noCjk"]:         # no CJK font in this browser: the English parts only (the test below checks that)
        heading = " · ".join(part for part in heading.split(" · ") if not CJK.search(part))
    assert _plain(got["h1"]) == _plain(heading), (got["h1"], heading)
    assert _plain(heading) in _plain(got["title"])
    assert "Colab setup" not in got["text"] and "google.colab" not in got["text"], "the Colab setup cell is shown"
    assert "interactive explorer: run this cell" not in got["text"], "an explorer's placeholder, not its picture"
    # every figure, the explorers' pictures included, and each one loaded
    assert len(got["imgs"]) == pngs, f"{len(got['imgs'])} figures on the page, {pngs} PNG outputs in the lab"
    broken = [i["src"] for i in got["imgs"] if not i["ok"]]
    assert not broken, f"figures that did not load: {broken}"
    # every formula typeset (a MathML element with a real size), none left as TeX
    assert got["math"] == maths, f"{got['math']} MathML formulas on the page, {maths} in the lab's text"
    assert got["typeset"] == got["math"], f"{got['math'] - got['typeset']} formulas with no size"
    assert not got["tex"] and not got["rawTex"], f"TeX left in the text: {got['tex'][:3]}"
    if stem in ("01_selective_ssm", "03_marconi"):          # a page with formulas, one with an explorer's picture
        SHOTS.mkdir(parents=True, exist_ok=True)
        pg.screenshot(path=str(SHOTS / f"site_{stem}.png"))


LATIN_FONTS = Path("/usr/share/fonts/truetype/dejavu")
JS_TEXTS = """() => ({title: document.title, h1: document.querySelector('article h1').innerText,
    nav: Array.from(document.querySelectorAll('nav.bd-docs-nav a')).map(a => a.innerText),
    body: document.body.innerText, noCjk: document.documentElement.classList.contains('no-cjk')})"""


def _cjk_font() -> bool:
    fc = shutil.which("fc-list")
    return bool(fc and subprocess.run([fc, ":lang=zh", "family"], capture_output=True, text=True).stdout.strip())


@pytest.mark.timeout(120)
def test_chinese_headings_show_with_a_cjk_font_and_go_without(built, playwright, browser, tmp_path):
    """Bilingual headings ("01 · Selective SSM (Mamba) · 选择性...") keep their Chinese where the reader has a CJK
    font, and lose it (English only, never boxes) where none: a Chromium whose fontconfig knows only DejaVu."""
    if not LATIN_FONTS.is_dir():
        pytest.skip(f"no {LATIN_FONTS} for a fontconfig without CJK (apt-get install fonts-dejavu-core)")
    page = built / "01_selective_ssm.html"
    o = Offline(browser)
    try:
        got = o.open(page).evaluate(JS_TEXTS)
    finally:
        o.close()
    if _cjk_font():
        assert CJK.search(got["h1"]) and not got["noCjk"], got["h1"]
    latin = latin_only_browser(playwright, tmp_path)
    try:
        o = Offline(latin)
        got = o.open(page).evaluate(JS_TEXTS)
        assert not o.blocked and not o.errors, (o.blocked, o.errors)
    finally:
        latin.close()
    assert got["noCjk"]
    assert got["h1"].strip() == "01 · Selective SSM (Mamba)", got["h1"]
    assert got["title"] == "01 · Selective SSM (Mamba) — hybrid-lab", got["title"]
    assert "00 · The three costs of attention" in got["nav"], got["nav"]
    left = [ln for ln in [got["title"], *got["nav"], *got["body"].splitlines()] if CJK.search(ln)]
    assert not left, f"CJK (boxes) left: {left[:5]}"
