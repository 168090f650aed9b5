"""Slides from a solution notebook: one self-contained HTML file that works offline.

    hybrid-lab slides solutions/01_selective_ssm.ipynb --out slides/01.html

Each cell's ``metadata.slideshow.slide_type`` (Jupyter's own slide metadata, as RISE and nbconvert read it) says
what the deck shows: ``slide`` starts a new slide, ``subslide`` too (a key figure on its own), ``-`` continues the
slide, ``skip`` is left out (code, exercises, checks). :func:`mark_slides` sets it by the lab's conventions: the
title cell, each ``## N.`` section, the first figure of each section, the summary; everything else skipped.

The deck needs nothing from the network: formulas are converted to MathML when the deck is written (the browser
typesets MathML itself: no MathJax), figures are embedded as data URLs, and the slide navigation is a few lines of
inline JavaScript (arrow keys, space, click; ``#3`` opens slide 3). No reveal.js and no CDN.
"""
from __future__ import annotations

import html
import re
from pathlib import Path

from hybrid_lab.course import pipeline as course

SLIDE_TYPES = ("slide", "subslide", "fragment", "-", "skip", "notes")


def _has_figure(cell) -> bool:
    return any("image/png" in o.get("data", {}) for o in cell.get("outputs", []))


def mark_slides(nb) -> None:
    """Set every cell's slide type by the conventions in the module docstring (in place)."""
    exercise_cells = {id(c) for c in nb.cells if c.cell_type == "code"
                      and course.HEADER.match((course.cell_source(c).lstrip().splitlines() or [""])[0])}
    figure_shown = True
    for i, cell in enumerate(nb.cells):
        src = course.cell_source(cell).lstrip()
        kind = "skip"
        if cell.cell_type == "markdown":
            if i == 0 or src.startswith("## "):
                kind = "slide"
                figure_shown = src.startswith(("## Summary", "## Pitfalls", "## Exercises"))
        elif cell.cell_type == "code" and id(cell) not in exercise_cells and not figure_shown and _has_figure(cell) \
                and "check(" not in src:
            kind, figure_shown = "subslide", True
        cell.metadata["slideshow"] = {"slide_type": kind}


# ------------------------------------------------------------------------------------------------- rendering
_MATH = re.compile(r"\$\$(.+?)\$\$|(?<![\\$])\$(?!\s)(.+?)(?<![\\\s])\$", re.S)


def _math_to_mathml(tex: str, block: bool) -> str:
    from latex2mathml.converter import convert

    try:
        return convert(tex.strip(), display="block" if block else "inline")
    except Exception:                                   # a construct latex2mathml does not know: show the TeX
        return f'<code class="tex">{html.escape(tex)}</code>'


def markdown_html(src: str) -> str:
    """Markdown to HTML with every $...$ / $$...$$ formula as MathML."""
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    found = []

    def stash(m):
        found.append(_math_to_mathml(m.group(1) or m.group(2), block=m.group(1) is not None))
        return f"HLMATH{len(found) - 1}X"

    body = markdown2html_mistune(_MATH.sub(stash, src))
    body = re.sub(r'<a class="anchor-link"[^>]*>.*?</a>', "", body)        # the ¶ links of nbconvert's headings
    return re.sub(r"HLMATH(\d+)X", lambda m: found[int(m.group(1))], body)


def _outputs_html(cell) -> str:
    parts = []
    for o in cell.get("outputs", []):
        data = o.get("data", {})
        if "image/png" in data:
            png = course.cell_source({"source": data["image/png"]}).replace("\n", "")
            parts.append(f'<img alt="figure" src="data:image/png;base64,{png}">')
        elif o.get("output_type") == "stream" and o.get("name") == "stdout":
            parts.append(f"<pre>{html.escape(course.cell_source({'source': o.get('text', '')}))}</pre>")
    return "\n".join(parts)


def slides_of(nb) -> list[str]:
    """The deck's slides as HTML fragments, from the cells' slide metadata (cells without it are skipped)."""
    slides: list[list[str]] = []
    for cell in nb.cells:
        kind = cell.get("metadata", {}).get("slideshow", {}).get("slide_type", "skip")
        if kind in ("skip", "notes"):
            continue
        body = markdown_html(course.cell_source(cell)) if cell.cell_type == "markdown" else _outputs_html(cell)
        if kind in ("slide", "subslide") or not slides:
            slides.append([])
        slides[-1].append(body)
    return ["\n".join(s) for s in slides]


CSS = """
html, body { margin: 0; height: 100%; background: #fff; font-family: system-ui, sans-serif; font-size: 22px; }
section { display: none; box-sizing: border-box; height: 100vh; padding: 3vh 6vw; overflow: auto; }
section.current { display: block; }
h1 { font-size: 2.2em; } h2 { font-size: 1.7em; border-bottom: 2px solid #ddd; }
section img { display: block; max-width: 100%; max-height: 80vh; margin: 1em auto; }
pre { background: #f6f6f6; padding: .6em; font-size: .8em; overflow-x: auto; }
math[display="block"] { margin: .6em 0; font-size: 1.15em; }
#counter { position: fixed; right: 1em; bottom: .6em; color: #888; font-size: .9em; }
"""

JS = """
const slides = Array.from(document.querySelectorAll('section'));
let at = 0;
function show(i) {
  at = Math.max(0, Math.min(slides.length - 1, i));
  slides.forEach((s, k) => s.classList.toggle('current', k === at));
  document.getElementById('counter').textContent = (at + 1) + ' / ' + slides.length;
  history.replaceState(null, '', '#' + (at + 1));
}
document.addEventListener('keydown', e => {
  if (['ArrowRight', 'PageDown', ' '].includes(e.key)) { show(at + 1); e.preventDefault(); }
  if (['ArrowLeft', 'PageUp'].includes(e.key)) { show(at - 1); e.preventDefault(); }
  if (e.key === 'Home') show(0);
  if (e.key === 'End') show(slides.length - 1);
});
document.addEventListener('click', e => { if (!e.target.closest('a')) show(at + (e.clientX > innerWidth / 3 ? 1 : -1)); });
show((parseInt(location.hash.slice(1)) || 1) - 1);
"""


def deck_html(nb, title: str) -> str:
    sections = "\n".join(f'<section id="s{k + 1}">\n{body}\n</section>' for k, body in enumerate(slides_of(nb)))
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n<title>{html.escape(title)}</title>\n'
            f"<style>{CSS}</style></head>\n<body>\n{sections}\n<div id=\"counter\"></div>\n<script>{JS}</script>\n"
            f"</body></html>\n")


def write_deck(path, out=None) -> Path:
    """Write the deck of the notebook at ``path`` to ``out`` (default: slides/<name>.html in the checkout)."""
    path = Path(path)
    nb = course.read_notebook(path)
    if not any(c.get("metadata", {}).get("slideshow") for c in nb.cells):
        raise course.CourseError(f"{course.shown(path)} has no slide metadata; mark it: hybrid-lab slides --mark "
                                 f"{course.shown(path)}")
    out = Path(out) if out else course.repo_root() / "slides" / f"{path.stem}.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    first = course.cell_source(nb.cells[0]).lstrip().splitlines()[0].lstrip("# ").strip() if nb.cells else path.stem
    out.write_text(deck_html(nb, first))
    return out
