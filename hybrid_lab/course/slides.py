"""Slides from a solution notebook: one self-contained HTML file that works offline, and its PDF.

    hybrid-lab slides solutions/01_selective_ssm.ipynb --out slides/01.html
    hybrid-lab slides 01 --pdf                        # slides/01_selective_ssm.pdf, one page per slide

Each cell's ``metadata.slideshow.slide_type`` (Jupyter's own slide metadata, as RISE and nbconvert read it) says
what the deck shows: ``slide`` starts a new slide, ``subslide`` too (a key figure on its own), ``-`` continues the
slide, ``fragment`` continues it one step later, ``notes`` goes to the slide's speaker notes, ``skip`` is left out
(code, exercises, checks). :func:`mark_slides` sets it by the lab's conventions: the title cell, each ``## N.``
section, the first figure of each section, the summary; other prose as notes; everything else skipped. It records
what it wrote (``metadata.hybrid_lab.slide_auto``), so a slide type a lecturer changed by hand is never overwritten.

A slide is a lecture's slide, not the notebook's page: a markdown cell longer than :data:`LEAD_WORDS` words or
:data:`LEAD_LINES` lines keeps only its lead on the slide (its headings, the first sentence of its prose, its display
formulas and figures, each bullet's first sentence) and its whole text goes to the speaker notes (``<aside
class="notes">``, the markup reveal.js uses; key ``n`` shows them). A slide never ends on a colon. Bullets reveal one
by one (``class="fragment"``): space, page down, arrow down or a click steps through them, then to the next slide;
the left / right arrows move a whole slide. ``metadata.hybrid_lab.slide_full = true`` keeps a cell whole.

The deck needs nothing from the network: formulas are converted to MathML when the deck is written (the browser
typesets MathML itself: no MathJax), figures are embedded as data URLs, and the slide navigation is a few lines of
inline JavaScript (``#3`` opens slide 3). No reveal.js and no CDN; but, as in reveal.js, ``deck.html?print-pdf``
(and the browser's own print) lays every slide out as one 1280x720 page, which :func:`write_pdf` prints with
headless Chromium. The Chinese of the bilingual headings ("2. The selective recurrence · 选择性递推") is in ``<span
class="zh">``: a browser without a CJK font hides it (the English heading, not boxes).

Presenting live instead: the ``lab`` extra installs ``jupyterlab-rise``, whose button in a notebook's toolbar (or
``RISE:slideshow`` in the command palette) shows the notebook as a reveal.js slideshow from the same metadata, with
live cells; the whole text of a cell is on its slide there (no lead / notes split) and the notes cells are the speaker
notes (key ``s``). tests/e2e/test_rise.py opens one in headless Chromium.
"""
from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from hybrid_lab.course import pipeline as course

SLIDE_TYPES = ("slide", "subslide", "fragment", "-", "skip", "notes")
LEAD_WORDS, LEAD_LINES = 90, 12     # what a 1280x720 slide holds at a readable size (a formula counts as a word)
ITEM_WORDS = 16                     # one bullet's lead
PAGE_W, PAGE_H = 1280, 720


def _has_figure(cell) -> bool:
    return any("image/png" in o.get("data", {}) for o in cell.get("outputs", []))


def _conventional_kinds(nb) -> list[str]:
    """Each cell's slide type by the lab's conventions (the module docstring)."""
    code = [c for c in nb.cells if c.cell_type == "code"]
    exercise_cells = {id(c) for c in code if course.HEADER.match((course.cell_source(c).lstrip().splitlines()
                                                                  or [""])[0])}
    # the prose just before an exercise is its task: students read it in the notebook, the lecture skips it
    task_cells = {id(a) for a, b in zip(nb.cells, nb.cells[1:]) if a.cell_type == "markdown" and id(b) in
                  exercise_cells}
    kinds, figure_shown = [], True
    for i, cell in enumerate(nb.cells):
        src = course.cell_source(cell).lstrip()
        kind = "skip"
        if cell.cell_type == "markdown":
            if i == 0 or src.startswith("## "):
                kind = "slide"
                figure_shown = src.startswith(("## Summary", "## Pitfalls", "## Exercises"))
            elif id(cell) not in task_cells and src:
                kind = "notes"
        elif cell.cell_type == "code" and id(cell) not in exercise_cells and not figure_shown and _has_figure(cell) \
                and "check(" not in src:
            kind, figure_shown = "subslide", True
        kinds.append(kind)
    return kinds


def _hand_set(cell) -> bool:
    """True when the cell's slide type is not the one --mark last wrote there (a lecturer's, or another tool's)."""
    now = cell.get("metadata", {}).get("slideshow", {}).get("slide_type")
    return now is not None and now != cell.get("metadata", {}).get("hybrid_lab", {}).get("slide_auto")


def mark_slides(nb) -> list[int]:
    """Set the slide type of every cell by the conventions in the module docstring (in place), except where it was
    set by hand; returns the indices of the cells kept as set by hand."""
    kept = []
    for i, (cell, kind) in enumerate(zip(nb.cells, _conventional_kinds(nb))):
        if _hand_set(cell):
            kept.append(i)
            continue
        cell.metadata.setdefault("slideshow", {})["slide_type"] = kind
        cell.metadata.setdefault("hybrid_lab", {})["slide_auto"] = kind
    return kept


# ------------------------------------------------------------------------------------------------- the lead
_MATH = re.compile(r"\$\$(.+?)\$\$|(?<![\\$])\$(?!\s)(.+?)(?<![\\\s])\$", re.S)
_ITEM = re.compile(r"^\s{0,3}(?:[*+-]|\d+[.)])\s+")
_NOT_AN_END = ("e.g.", "i.e.", "vs.", "cf.", "al.", "Fig.", "Eq.", "Eqs.", "§")


def _blocks(src: str) -> list[tuple[str, list[str]]]:
    """Markdown as (kind, lines) blocks; kind: heading, formula, figure, code, list (one line per item), prose."""
    lines, out, i = src.strip().splitlines(), [], 0
    while i < len(lines):
        line = lines[i]
        s = line.strip()
        if not s:
            i += 1
        elif s.startswith("#"):
            out.append(("heading", [line]))
            i += 1
        elif s.startswith(("$$", "```")):
            fence, j = s[:3] if s.startswith("```") else "$$", i
            text = line
            while (text.count(fence) % 2 if fence == "$$" else text.count(fence) < 2) and j + 1 < len(lines):
                j += 1
                text += "\n" + lines[j]
            out.append(("formula" if fence == "$$" else "code", text.splitlines()))
            i = j + 1
        elif s.startswith("!["):
            out.append(("figure", [line]))
            i += 1
        elif _ITEM.match(line):
            items = []
            while i < len(lines) and lines[i].strip() and (_ITEM.match(lines[i]) or lines[i][:1].isspace()):
                if _ITEM.match(lines[i]):
                    items.append(lines[i].rstrip())
                else:
                    items[-1] += " " + lines[i].strip()
                i += 1
            out.append(("list", items))
        else:
            para = []
            while i < len(lines) and lines[i].strip() and not _ITEM.match(lines[i]) \
                    and not lines[i].strip().startswith(("#", "$$", "```", "![")):
                para.append(lines[i].strip())
                i += 1
            out.append(("prose", [" ".join(para)]))
    return out


def _masked(text: str) -> tuple[str, list[str]]:
    """``text`` with each formula replaced by a one-word placeholder (a formula is neither split nor counted)."""
    found = []

    def stash(m):
        found.append(m.group(0))
        return f"HLMATH{len(found) - 1}X"

    return _MATH.sub(stash, text), found


def _unmasked(text: str, found: list[str]) -> str:
    return re.sub(r"HLMATH(\d+)X", lambda m: found[int(m.group(1))], text)


def _balanced(text: str) -> str:
    """Close the emphasis and code spans a cut left open."""
    if text.count("`") % 2:
        text += "`"
    if text.count("**") % 2:
        text += "**"
    if text.replace("**", "").count("*") % 2:
        text += "*"
    return text


def _sentences(text: str) -> list[str]:
    masked, found = _masked(text)
    parts, start = [], 0
    for m in re.finditer(r"[.!?](?=\s+\S)", masked):
        head = masked[start:m.end()]
        if head.endswith(_NOT_AN_END) or re.search(r"\b[A-Z]\.$", head):     # e.g. / initials, not a full stop
            continue
        parts.append(head.strip())
        start = m.end()
    parts.append(masked[start:].strip())
    return [_unmasked(p, found) for p in parts if p]


def _words(md: str) -> int:
    return len(_masked(md)[0].replace("**", "").split())


def _short(text: str, limit: int) -> str:
    """The first sentence of ``text``, cut to ``limit`` words (at a clause boundary when there is one)."""
    first = (_sentences(text) or [""])[0]
    masked, found = _masked(first)
    words = masked.split()
    if len(words) > limit:
        cut = " ".join(words[:limit])
        clause = max(cut.rfind(c) for c in (":", ";", ",", " ("))
        cut = cut[:clause] if clause > len(cut) // 2 else cut
        masked = cut.rstrip(" ,;:(") + " …"
    return _balanced(_unmasked(masked, found))


def _no_trailing_colon(blocks: list[tuple[str, list[str]]]) -> list[tuple[str, list[str]]]:
    """Drop (or end) the text that would leave the slide on a colon: what it announces is not on the slide."""
    blocks = [(k, list(v)) for k, v in blocks]
    while blocks and blocks[-1][0] in ("prose", "list") and blocks[-1][1][-1].rstrip("* ").endswith(":"):
        kind, lines = blocks[-1]
        if kind == "list":          # a bullet that announces more: end it there
            lines[-1] = re.sub(r":(\**)\s*$", r"\1", lines[-1].rstrip())
            break
        sentences = _sentences(lines[0])[:-1]
        if sentences:
            blocks[-1] = (kind, [" ".join(sentences)])
        else:
            blocks.pop()
    return blocks


def _render_blocks(blocks) -> str:
    return "\n\n".join("\n".join(lines) for _, lines in blocks)


def lead_and_notes(src: str) -> tuple[str, str]:
    """A markdown cell as (what the slide shows, what goes to the speaker notes), both markdown; see the module
    docstring. A short cell stays whole (notes empty)."""
    if not isinstance(src, str):
        raise ValueError(f"src: expected a markdown string, got {type(src).__name__}")
    blocks = _blocks(src)
    lines = sum(len(v) for k, v in blocks if k != "code")
    if _words(src) <= LEAD_WORDS and lines <= LEAD_LINES and not any(k == "code" for k, _ in blocks):
        return src.strip(), ""
    kept, words, n, prose_seen = [], 0, 0, False
    for kind, block in blocks:
        if kind == "heading":
            kept.append((kind, block))
            words, n = words + _words(block[0]), n + 1
            continue
        if kind == "code":
            continue
        if kind == "prose":
            if prose_seen:
                continue
            prose_seen, block = True, [_short(block[0], 2 * ITEM_WORDS)]
        elif kind == "list":
            block = [_ITEM.match(item).group(0) + _short(item[_ITEM.match(item).end():], ITEM_WORDS)
                     for item in block]
        room = LEAD_WORDS - words
        take = []
        for line in block:
            if n + 1 > LEAD_LINES or _words(line) > room:
                break
            take.append(line)
            room -= _words(line)
            n += 1
        if take:
            kept.append((kind, take))
            words = LEAD_WORDS - room
    while len(kept) > 1 and kept[-1][0] == "heading":     # a heading whose whole section went to the notes
        kept.pop()
    notes = _render_blocks([(k, v) for k, v in blocks if k != "heading"])
    return _render_blocks(kept), notes


# ------------------------------------------------------------------------------------------------- rendering
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


# CJK ideographs, kana, hangul and their punctuation (fullwidth forms included): what a font without CJK shows as boxes
_CJK = "\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef"
_HAS_CJK = re.compile(f"[{_CJK}]")
# a run of CJK text (ASCII inside it, as in "Decode 与状态生命周期", belongs to it), with the " · ", comma or space
# before it; a parenthetical that is all CJK goes whole, else its parentheses would stay behind empty
_CJK_RUN = re.compile(f"(?: · |, | )?(?:\\([{_CJK}][^():;]*?(?<=[{_CJK}])\\)"
                      f"|[{_CJK}](?:[^<>{_CJK}·()]*?[{_CJK}])*)")
_NOT_TEXT = ("math", "code", "pre", "script", "style")


def _zh(text: str) -> str:
    return f'<span class="zh" lang="zh">{html.escape(text, quote=False)}</span>'


def _zh_runs(text: str) -> str:
    """``text`` (plain, unescaped) as HTML with each CJK run in a ``.zh`` span."""
    out, at = [], 0
    for m in _CJK_RUN.finditer(text):
        out += [html.escape(text[at:m.start()], quote=False), _zh(m.group(0))]
        at = m.end()
    return "".join(out) + html.escape(text[at:], quote=False)


def _zh_heading(text: str) -> str:
    """A heading's text: each " · " part with CJK in it (the notebooks' Chinese title, "Mamba-2：标量衰减") is one
    ``.zh`` span with its separator, so hiding it leaves the English heading whole."""
    parts = text.split(" · ")
    out = [_zh_runs(parts[0])]
    for part in parts[1:]:
        out.append(_zh(" · " + part) if _HAS_CJK.search(part) else html.escape(" · ", quote=False) + _zh_runs(part))
    return "".join(out)


def _zh_spans(body: str) -> str:
    """HTML with every run of CJK text outside formulas and code in ``<span class="zh" lang="zh">``: where the
    browser has no CJK font the deck hides them (:data:`JS`) instead of showing boxes."""
    out, inside, heading = [], [], 0
    for tok in re.split(r"(<[^>]*>)", body):
        if tok.startswith("<"):
            m = re.match(r"<(/?)([a-zA-Z][a-zA-Z0-9]*)", tok)
            if m:
                name, closing = m.group(2).lower(), bool(m.group(1))
                if name in _NOT_TEXT and not tok.endswith("/>"):
                    if closing and name in inside:
                        del inside[len(inside) - 1 - inside[::-1].index(name)]
                    elif not closing:
                        inside.append(name)
                elif re.fullmatch(r"h[1-6]", name):
                    heading += -1 if closing else 1
            out.append(tok)
        elif inside or not _HAS_CJK.search(html.unescape(tok)):
            out.append(tok)
        else:
            text = html.unescape(tok)
            out.append(_zh_heading(text) if heading > 0 else _zh_runs(text))
    return "".join(out)


def _fragments(body: str) -> str:
    """Every bullet of a list of two or more revealed one step at a time."""
    def per_list(m):
        items = m.group(0)
        return items.replace("<li>", '<li class="fragment">') if items.count("<li>") >= 2 else items
    return re.sub(r"<(ul|ol)\b.*?</\1>", per_list, body, flags=re.S)


def _outputs_html(cell) -> str:
    """A figure cell shows its figures; printed text only when it has none (a few lines: it is a slide)."""
    imgs, text = [], []
    for o in cell.get("outputs", []):
        data = o.get("data", {})
        if "image/png" in data:
            png = course.cell_source({"source": data["image/png"]}).replace("\n", "")
            imgs.append(f'<img alt="figure" src="data:image/png;base64,{png}">')
        elif o.get("output_type") == "stream" and o.get("name") == "stdout":
            text.append(course.cell_source({"source": o.get("text", "")}))
    if imgs:
        return "\n".join(imgs)
    shown = "".join(text).splitlines()[:LEAD_LINES]
    return f"<pre>{html.escape(chr(10).join(shown))}</pre>" if shown else ""


def slides_of(nb) -> list[str]:
    """The deck's slides as HTML fragments, from the cells' slide metadata (cells without it are skipped)."""
    slides: list[dict] = []

    def new():
        slides.append({"parts": [], "notes": []})

    for cell in nb.cells:
        meta = cell.get("metadata", {})
        kind = meta.get("slideshow", {}).get("slide_type", "skip")
        if kind == "skip" or kind not in SLIDE_TYPES:
            continue
        src = course.cell_source(cell)
        if kind == "notes":
            if not slides:
                new()
            if cell.cell_type == "markdown":
                slides[-1]["notes"].append(src)
            continue
        if kind in ("slide", "subslide") or not slides:
            new()
        if cell.cell_type == "markdown":
            lead, notes = (src, "") if meta.get("hybrid_lab", {}).get("slide_full") else lead_and_notes(src)
            slides[-1]["parts"].append(("md", lead, kind == "fragment"))
            if notes:
                slides[-1]["notes"].append(notes)
        else:
            slides[-1]["parts"].append(("html", _outputs_html(cell), kind == "fragment"))
    out = []
    for s in slides:
        parts = s["parts"]
        if parts and parts[-1][0] == "md":      # the slide's last words: never a colon
            kind, md, frag = parts[-1]
            parts[-1] = (kind, _render_blocks(_no_trailing_colon(_blocks(md))), frag)
        bodies = []
        for kind, text, frag in parts:
            body = _fragments(_zh_spans(markdown_html(text))) if kind == "md" else text
            bodies.append(f'<div class="fragment">\n{body}\n</div>' if frag else body)
        if s["notes"]:
            notes = "\n".join(_zh_spans(markdown_html(n)) for n in s["notes"])
            bodies.append(f'<aside class="notes">\n{notes}\n</aside>')
        out.append("\n".join(bodies))
    return out


CSS = """
html, body { margin: 0; height: 100%; background: #fff; font-family: system-ui, sans-serif; font-size: 22px; }
section { display: none; box-sizing: border-box; height: 100vh; padding: 3vh 6vw; overflow: auto; }
section.current { display: block; }
h1 { font-size: 2em; margin: .3em 0 .5em; } h2 { font-size: 1.6em; margin: .2em 0 .5em; border-bottom: 2px solid #ddd; }
p, li { line-height: 1.35; } li { margin: .25em 0; }
section img { display: block; max-width: 100%; max-height: 78vh; margin: .5em auto; }
pre { background: #f6f6f6; padding: .6em; font-size: .8em; overflow-x: auto; }
math[display="block"] { margin: .5em 0; font-size: 1.15em; }
.fragment { opacity: 0; transition: opacity .2s; } .fragment.visible { opacity: 1; }
aside.notes { display: none; }
body.show-notes aside.notes { display: block; border-top: 2px dashed #aaa; margin-top: 1em; color: #555;
  font-size: .8em; }
html.no-cjk .zh { display: none; }
#counter { position: fixed; right: 1em; bottom: .6em; color: #888; font-size: .9em; }
@page { size: @Wpx @Hpx; margin: 0; }
@media print {
  html, body { height: auto; }
  section { display: block; width: @Wpx; height: @Hpx; overflow: hidden; break-after: page; }
  section:last-of-type { break-after: auto; }
  .fragment { opacity: 1; transition: none; } aside.notes, #counter { display: none !important; }
}
html.print-pdf section { display: block; width: @Wpx; height: @Hpx; overflow: hidden; }
html.print-pdf .fragment { opacity: 1; } html.print-pdf #counter { display: none; }
""".replace("@W", str(PAGE_W)).replace("@H", str(PAGE_H))

JS = """
// no CJK font (the Chinese of the headings would be boxes): hide the .zh spans. A glyph no font has (U+10FFFD, a
// private-use code point) is drawn as the font's .notdef box; when a CJK character draws the same pixels it has no
// font either. Anything failing here leaves the text shown. (Firefox draws a hex box per code point instead: the
// two differ and the text stays, boxes and all.)
try {
  const c = document.createElement('canvas'); c.width = 48; c.height = 48;
  const g = c.getContext('2d', {willReadFrequently: true});
  const draw = ch => {
    g.clearRect(0, 0, 48, 48); g.fillText(ch, 4, 36); return g.getImageData(0, 0, 48, 48).data.join();
  };
  g.font = '32px ' + getComputedStyle(document.body).fontFamily;
  const zh = draw('\\u9009'), box = draw('\\u{10FFFD}');
  // a blank canvas (drawing blocked) tells nothing
  if (zh === box && /[1-9]/.test(box)) document.documentElement.classList.add('no-cjk');
} catch (e) { /* show the text */ }
if (/[?&]print-pdf\\b/.test(location.search)) document.documentElement.classList.add('print-pdf');
const slides = Array.from(document.querySelectorAll('section'));
let at = 0;
// a display formula wider than the slide is set smaller until it fits (a projector cannot scroll)
function fit(s) {
  s.querySelectorAll('math[display="block"]').forEach(m => {
    m.style.fontSize = '';
    const css = getComputedStyle(s), w = m.getBoundingClientRect().width;
    const room = s.clientWidth - parseFloat(css.paddingLeft) - parseFloat(css.paddingRight);
    if (w > room && room > 0) m.style.fontSize = Math.floor(95 * room / w) + '%';
  });
}
function frags(i) { return Array.from(slides[i].querySelectorAll('.fragment')); }
function show(i, revealed) {
  at = Math.max(0, Math.min(slides.length - 1, i));
  slides.forEach((s, k) => s.classList.toggle('current', k === at));
  fit(slides[at]);
  frags(at).forEach(f => f.classList.toggle('visible', !!revealed));
  document.getElementById('counter').textContent = (at + 1) + ' / ' + slides.length;
  history.replaceState(null, '', location.search + '#' + (at + 1));
}
// a step: the next hidden fragment of this slide, else the next slide
function step(d) {
  const f = frags(at);
  if (d > 0) { const h = f.find(x => !x.classList.contains('visible')); if (h) return h.classList.add('visible'); }
  else { const v = f.filter(x => x.classList.contains('visible')); if (v.length) return v.pop().classList.remove('visible'); }
  show(at + d, d < 0);
}
document.addEventListener('keydown', e => {
  if (['PageDown', ' ', 'ArrowDown'].includes(e.key)) { step(1); e.preventDefault(); }
  if (['PageUp', 'ArrowUp'].includes(e.key)) { step(-1); e.preventDefault(); }
  if (e.key === 'ArrowRight') { show(at + 1, true); e.preventDefault(); }
  if (e.key === 'ArrowLeft') { show(at - 1, true); e.preventDefault(); }
  if (e.key === 'Home') show(0, true);
  if (e.key === 'End') show(slides.length - 1, true);
  if (e.key === 'n') document.body.classList.toggle('show-notes');
});
document.addEventListener('click', e => { if (!e.target.closest('a')) step(e.clientX > innerWidth / 3 ? 1 : -1); });
show((parseInt(location.hash.slice(1)) || 1) - 1, true);
if (document.documentElement.classList.contains('print-pdf')) slides.forEach(fit);
addEventListener('beforeprint', () => slides.forEach(s => { s.style.display = 'block'; fit(s); s.style.display = ''; }));
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
    out.write_text(deck_html(nb, first), encoding="utf-8")
    return out


def chromium() -> str:
    """The headless browser that prints decks: $HYBRID_LAB_CHROMIUM, else chromium (Debian's) on the PATH."""
    for name in filter(None, (os.environ.get("HYBRID_LAB_CHROMIUM"), "chromium", "chromium-browser",
                              "google-chrome")):
        found = shutil.which(name)
        if found:
            return found
    raise course.CourseError("--pdf prints the deck with headless Chromium, which is not installed; install it "
                             "(apt-get install chromium) or point HYBRID_LAB_CHROMIUM at one")


def write_pdf(path, out=None, timeout: float = 180) -> Path:
    """Write the notebook's deck as a PDF (default slides/<name>.pdf), one 1280x720 page per slide: the deck's
    ``?print-pdf`` layout printed by headless Chromium."""
    if not (isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and 0 < timeout < float("inf")):
        raise ValueError(f"timeout: expected a positive number of seconds, got {timeout!r}")
    path = Path(path)
    out = Path(out) if out else course.repo_root() / "slides" / f"{path.stem}.pdf"
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        deck = write_deck(path, Path(tmp) / f"{path.stem}.html")
        cmd = [chromium(), "--headless", "--disable-gpu", "--no-first-run", "--disable-background-networking",
               "--no-pdf-header-footer", f"--user-data-dir={Path(tmp) / 'profile'}", f"--print-to-pdf={out}",
               f"{deck.as_uri()}?print-pdf"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.insert(1, "--no-sandbox")              # chromium refuses to run as root inside its sandbox
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise course.CourseError(f"chromium did not print {course.shown(path)} within {timeout:g} s") from None
    if r.returncode != 0 or not out.exists() or out.stat().st_size == 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no message"]
        raise course.CourseError(f"chromium could not print the deck of {course.shown(path)} (exit {r.returncode}: "
                                 f"{tail[0]})")
    return out


def notebook_path(arg) -> Path:
    """A notebook named on the command line: a path, or a solution's number (``01`` -> solutions/01_*.ipynb)."""
    p = Path(arg)
    if p.exists() or not re.fullmatch(r"\d{2}", str(arg)):
        return p
    found = sorted((course.repo_root() / "solutions").glob(f"{arg}_*.ipynb"))
    if not found:
        raise course.CourseError(f"no solution notebook numbered {arg}: ls solutions/ lists them")
    return found[0]
