"""The course site: ``hybrid-lab site [--out DIR]`` builds a static website of the course (default ``build/site``;
open ``index.html``, or put the folder on any web server).

What it is made of:

* **Jupyter Book 1.x** (Sphinx, myst-nb, sphinx-book-theme; the ``site`` extra of pyproject.toml). Version 2 is a
  different program (MyST's node tool) that downloads its theme at build time; 1.x builds offline.
* **The pages are the notebooks of ``labs/``, not ``solutions/``**, one page per notebook, in the order of the
  README's "Start here" table (:func:`readme_order`), with the outputs stored in them and nothing executed
  (``execute_notebooks: off``). A public site must not publish the worked solutions of the graded exercises; the labs
  hold the stubs where the solutions hold the answers, and carry the reference's outputs (every figure and printed
  number), so the pages show everything a student sees after Run All except the answers.
* **The explorers' pictures**: every explorer's stored output holds, beside the live widget's view, the PNG of its
  first drawing (``hybrid_lab/widgets/static.py``: what JupyterLab shows before the kernel runs). A static page has
  no kernel and no widget models, so :func:`site_notebook` keeps that picture and drops the widget view (and the
  progress bars, widget views with no picture, whose stored text is a stale "0%").
* **The Colab setup cell** (each notebook's first code cell, ``# Colab setup``) is left out: it does nothing
  outside Colab.
* **Formulas** become MathML when the site is built (:func:`mathml`, a Sphinx math renderer registered by
  :func:`setup`, with latex2mathml, which the lab installs anyway and the slides use on the same formulas). Sphinx's
  default is MathJax from a CDN, which an offline reader or a closed network does not get; a MathJax copy served
  from the site would be a second program to keep in step. MathML needs no script at all: browsers typeset it
  natively, and a formula latex2mathml cannot convert fails the build here, not on the reader's page. A ``$$...$$``
  that starts a line becomes a block of its own first (:func:`display_math_blocks`): JupyterLab typesets it inside
  a paragraph, MyST would pair the wrong dollar signs.
* Nothing loads from the network (no widget scripts, no thebe, no launch buttons, no analytics), so the site works
  from a file:// folder with the network off.
* The headings are bilingual; where the reader's browser has no CJK font, a small script (:data:`NO_CJK_JS`) takes
  their Chinese out instead of showing boxes, as the slides do.
"""
from __future__ import annotations

import copy
import html
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from hybrid_lab.course import colab
from hybrid_lab.course import pipeline as course

DEFAULT_OUT = Path("build") / "site"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
# a row of the README's "Start here" table: | 1 | [00 The three costs of attention](labs/00_three_costs.ipynb) | ...
_ROW = re.compile(r"^\|\s*\d+\s*\|\s*\[(?P<title>[^\]]+)\]\(labs/(?P<stem>\d\d_\w+)\.ipynb\)", re.M)
_BUILD_TIMEOUT_S = 900
# a $$...$$ formula that starts a line (Jupyter: display math wherever it stands, even inside a paragraph or over
# several lines; MyST: only a block of its own, else it pairs the wrong dollar signs)
_DISPLAY = re.compile(r"^(?P<indent>[ \t]*)\$\$(?P<tex>.+?)\$\$[ \t]*", re.S | re.M)


def readme_order(readme: str, labs=None) -> list[tuple[str, str]]:
    """(notebook stem, title) for each row of the README's "Start here" table, in its order. ``labs``: the stems
    that must all be there, once each (a lab missing from the table would be missing from the site)."""
    section = readme.split("\n## Start here", 1)[-1].split("\n## ", 1)[0] if "\n## Start here" in readme else ""
    rows = [(m["stem"], m["title"].strip()) for m in _ROW.finditer(section)]
    if not rows:
        raise course.CourseError("README.md has no \"Start here\" table of the labs (rows like | 1 | [00 Title]"
                                 "(labs/00_name.ipynb) |): the site takes its order from it")
    stems = [s for s, _ in rows]
    twice = sorted({s for s in stems if stems.count(s) > 1})
    missing = sorted(set(labs or ()) - set(stems))
    unknown = sorted(set(stems) - set(labs)) if labs is not None else []
    if twice or missing or unknown:
        what = "; ".join(f"{name}: {', '.join(v)}" for name, v in (("listed twice", twice), ("missing", missing),
                                                                    ("not in labs/", unknown)) if v)
        raise course.CourseError(f"README.md's \"Start here\" table does not list each lab once ({what}); fix the "
                                 f"table, it is the site's order")
    return rows


def display_math_blocks(md: str) -> str:
    """Markdown with each ``$$...$$`` that starts a line made a block of its own (blank lines around it, the
    dollar signs on their own lines, the line's indentation kept), so MyST reads the formulas as Jupyter does."""
    def block(m):
        ind = m["indent"]
        tex = "\n".join(ind + ln.strip() for ln in m["tex"].strip().splitlines())
        return f"\n{ind}$$\n{tex}\n{ind}$$\n\n"

    return _DISPLAY.sub(block, md)


def site_notebook(nb):
    """A copy of the lab ``nb`` as the site shows it: no Colab setup cell; display formulas as blocks
    (:func:`display_math_blocks`); each explorer's output reduced to its
    static picture (the widget view dropped, so the page shows the PNG); widget outputs without a picture (progress
    bars) dropped; no stored widget state."""
    nb = copy.deepcopy(nb)
    nb.cells = [c for c in nb.cells if not (c.cell_type == "code" and colab.is_setup_cell(course.cell_source(c)))]
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = display_math_blocks(course.cell_source(cell))
        if cell.cell_type != "code":
            continue
        kept = []
        for out in cell.get("outputs", []):
            data = out.get("data") or {}
            if WIDGET_VIEW in data:
                if not data.get("image/png"):
                    continue
                out = copy.deepcopy(out)
                del out["data"][WIDGET_VIEW]
                out["data"].pop("text/plain", None)     # "(an interactive explorer: run this cell ...)": it is not
            kept.append(out)
        cell.outputs = kept
    nb.metadata.pop("widgets", None)
    return nb


def mathml(tex: str, display: bool) -> str:
    """``tex`` as MathML (raises ValueError with the formula when latex2mathml cannot convert it)."""
    from latex2mathml.converter import convert

    try:
        return convert(tex.strip(), display="block" if display else "inline")
    except Exception as exc:      # latex2mathml raises its own exception types (and the odd IndexError)
        raise ValueError(f"latex2mathml cannot convert ${tex.strip()}$ ({type(exc).__name__}: {exc})") from None


def book_config(title: str) -> dict:
    """Jupyter Book's _config.yml (written as JSON, which YAML reads)."""
    return {
        "title": title,
        "author": "the hybrid-lab course",
        "copyright": "",
        "only_build_toc_files": True,
        "execute": {"execute_notebooks": "off"},          # the stored outputs: the site never runs a notebook
        "html": {"use_multitoc_numbering": False, "home_page_in_navbar": True,
                 "use_repository_button": False, "use_issues_button": False, "use_edit_page_button": False},
        "launch_buttons": {"thebe": False, "binderhub_url": "", "jupyterhub_url": "", "colab_url": ""},
        "sphinx": {
            "extra_extensions": ["hybrid_lab.course.site"],          # setup() below: the MathML renderer
            "config": {
                "html_math_renderer": "mathml",
                "nb_ipywidgets_js": {},      # myst-nb's default loads require.js and the widget manager from CDNs
                "html_show_copyright": False,
            },
        },
    }


def book_toc(stems) -> dict:
    """Jupyter Book's _toc.yml: the intro page, then the notebooks in ``stems``' order."""
    return {"format": "jb-book", "root": "index", "chapters": [{"file": s} for s in stems]}


def intro_page(readme: str, order) -> str:
    """The site's first page: the README's opening paragraphs, what the pages are, and the notebooks in order."""
    lead = readme.split("\n## ", 1)[0].split("\n", 1)[-1]
    lead = re.sub(r"^!\[[^\]]*\]\([^)]*\)\s*$", "", lead, flags=re.M).strip()
    items = "\n".join(f"{i}. [{title}]({stem}.ipynb)" for i, (stem, title) in enumerate(order, 1))
    return (f"# hybrid-lab\n\n{lead}\n\n"
            "These pages are the course's labs as students get them, with the outputs of the reference "
            "implementation stored in them (every figure and printed number); the worked solutions of the graded "
            "exercises are not published here. Each explorer shows its first picture: open the notebook in "
            "JupyterLab (`hybrid-lab open`) to run it and move its controls.\n\n"
            f"## The notebooks, in order\n\n{items}\n")


def write_book(src, root=None) -> list[tuple[str, str]]:
    """Write the book's source (config, table of contents, intro page, the site's copies of the labs) into ``src``;
    returns the order."""
    nbformat = course.nbformat_module()
    root = Path(root or course.repo_root())
    src = Path(src)
    src.mkdir(parents=True, exist_ok=True)
    readme = (root / "README.md").read_text(encoding="utf-8")
    labs = {p.stem: p for p in sorted((root / "labs").glob("[0-9][0-9]_*.ipynb"))}
    if not labs:
        raise course.CourseError(f"no labs in {course.shown(root / 'labs')}; write them: hybrid-lab build")
    order = readme_order(readme, labs)
    for stem, _ in order:
        nbformat.write(site_notebook(course.read_notebook(labs[stem])), src / f"{stem}.ipynb")
    (src / "index.md").write_text(intro_page(readme, order), encoding="utf-8")
    (src / "_config.yml").write_text(json.dumps(book_config("hybrid-lab"), indent=1), encoding="utf-8")
    (src / "_toc.yml").write_text(json.dumps(book_toc([s for s, _ in order]), indent=1), encoding="utf-8")
    return order


def _check_out(out: Path) -> None:
    """``out`` may take the new site: a folder that is missing, empty, or an earlier site (Sphinx's .buildinfo in
    it; build_site replaces it once the new one is built); anything else is not ours to delete."""
    if out.exists() and not out.is_dir():
        raise course.CourseError(f"{course.shown(out)} is a file; name a folder: hybrid-lab site --out build/site")
    if out.is_dir() and any(out.iterdir()) and not (out / ".buildinfo").is_file():
        raise course.CourseError(f"{course.shown(out)} is not empty and not an earlier site; name a new folder: "
                                 f"hybrid-lab site --out build/site")


def build_site(out=None, root=None) -> Path:
    """Build the site into ``out`` (default build/site in the checkout); returns its index.html."""
    if importlib.util.find_spec("jupyter_book") is None:
        raise course.CourseError(f"the site needs Jupyter Book 1.x, not installed in this Python; install it: "
                                 f"{course.install_hint('site')}")
    root = Path(root or course.repo_root())
    out = Path(out) if out else root / DEFAULT_OUT
    _check_out(out)
    with tempfile.TemporaryDirectory(prefix="hybrid_lab_site_") as tmp:
        src, build = Path(tmp) / "book", Path(tmp) / "out"
        write_book(src, root)
        cmd = [sys.executable, "-c", "import sys; from jupyter_book.cli.main import main; sys.exit(main())",
               "build", str(src), "--path-output", str(build), "--builder", "html", "--all"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=_BUILD_TIMEOUT_S)
        html_dir = build / "_build" / "html"
        log = (p.stdout + p.stderr).strip()
        if p.returncode != 0 or not (html_dir / "index.html").is_file():
            tail = " | ".join(log.splitlines()[-6:])
            raise course.CourseError(f"jupyter-book could not build the site (exit {p.returncode}): {tail}")
        bad = [ln for ln in log.splitlines() if "latex2mathml cannot convert" in ln]
        if bad:
            raise course.CourseError(f"a formula did not convert to MathML: {bad[0].strip()}")
        _check_out(out)                                  # (still) missing, empty or an earlier site
        if out.is_dir():
            shutil.rmtree(out)
        shutil.copytree(html_dir, out)
    return out / "index.html"


# ------------------------------------------------------------------------------------------- the Sphinx extension
# The headings are bilingual ("01 · Selective SSM (Mamba) · 选择性状态空间模型"). Where the reader's browser has no
# CJK font that Chinese would be boxes: then this script takes it out (a heading's, a link's or the title's parts
# with CJK after " · ", other CJK runs with the space or parenthesis around them), leaving the English. The test for
# a font is the decks' (slides.py): a CJK glyph drawn the same as a code point no font has (U+10FFFD) has no font
# either. Anything failing here leaves the text as it is.
NO_CJK_JS = r"""document.addEventListener('DOMContentLoaded', () => { try {
  const c = document.createElement('canvas'); c.width = 48; c.height = 48;
  const g = c.getContext('2d', {willReadFrequently: true});
  g.font = '32px ' + getComputedStyle(document.body).fontFamily;
  const draw = ch => {
    g.clearRect(0, 0, 48, 48); g.fillText(ch, 4, 36); return g.getImageData(0, 0, 48, 48).data.join();
  };
  const box = draw('\u{10FFFD}');
  if (draw('\u9009') !== box || !/[1-9]/.test(box)) return;
  const K = '\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef', ZH = new RegExp('[' + K + ']');
  const RUN = new RegExp('(?: \u00b7 |, | )?(?:\\([' + K + '][^():;]*?(?<=[' + K + '])\\)|[' + K + '](?:[^' + K +
                         '\u00b7()]*?[' + K + '])*)', 'g');
  const drop = (s, heading) => (heading && s.includes(' \u00b7 ')
      ? s.split(' \u00b7 ').filter(p => !ZH.test(p)).join(' \u00b7 ') : s).replace(RUN, '');
  const [page, ...site] = document.title.split(' \u2014 ');
  document.title = [drop(page, true), ...site].join(' \u2014 ');
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const texts = [];
  while (walk.nextNode()) if (ZH.test(walk.currentNode.data)) texts.push(walk.currentNode);
  for (const t of texts) {
    if (t.parentElement.closest('script, style, math, pre')) continue;   // code is shown as written
    t.data = drop(t.data, !!t.parentElement.closest('h1, h2, h3, h4, h5, h6, a, .caption-text'));
  }
  document.documentElement.classList.add('no-cjk');
} catch (e) { /* leave the text */ } });
"""


def _visit_math(self, node):
    self.body.append(self.starttag(node, "span", "", CLASS="math notranslate nohighlight"))
    self.body.append(_converted(self, node, display=False))
    self.body.append("</span>")
    raise _skip()


def _visit_displaymath(self, node):
    self.body.append(self.starttag(node, "div", CLASS="math notranslate nohighlight"))
    if node.get("number"):
        from sphinx.util.math import get_node_equation_number

        self.body.append(f'<span class="eqno">({get_node_equation_number(self, node)})</span>')
    self.body.append(_converted(self, node, display=True))
    self.body.append("</div>\n")
    raise _skip()


def _converted(translator, node, display: bool) -> str:
    """The node's formula as MathML; one the converter does not know: its TeX as code and a build warning
    (build_site turns that warning into an error)."""
    try:
        return mathml(node.astext(), display)
    except ValueError as exc:
        from sphinx.util import logging

        logging.getLogger(__name__).warning(f"math: {exc}", location=node)
        return f'<code class="tex">{html.escape(node.astext())}</code>'


def _skip():
    from docutils import nodes

    return nodes.SkipNode()


def setup(app):
    """Sphinx extension (``sphinx: extra_extensions`` in the book's config): formulas as MathML, no script."""
    app.add_html_math_renderer("mathml", inline_renderers=(_visit_math, None),
                               block_renderers=(_visit_displaymath, None))
    app.connect("html-page-context", _without_thebe)
    app.add_js_file(None, body=NO_CJK_JS)
    return {"parallel_read_safe": True, "parallel_write_safe": True}



def _without_thebe(app, pagename, templatename, context, doctree):
    """Leave out sphinx-thebe's scripts (Jupyter Book always loads that extension): the site has no live code, they
    name a CDN, and Jupyter Book 1 adds their configuration twice (a script error on every page)."""
    scripts = context.get("script_files")
    if scripts:
        context["script_files"] = [
            js for js in scripts if "thebe" not in str(getattr(js, "filename", js) or "")
            and "THEBE_JS_URL" not in str((getattr(js, "attributes", None) or {}).get("body", ""))]
