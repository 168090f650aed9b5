"""The course site's pure parts (hybrid_lab/course/site.py): the README's order, the site's copy of a lab, display
formulas as MyST reads them, MathML, the book's configuration, the output folder. The build itself and the pages in a
browser: tests/e2e/test_site.py."""
from __future__ import annotations

import re
import types

import nbformat
import pytest

from hybrid_lab.course import cli, colab, site
from hybrid_lab.course import pipeline as course

ROOT = course.repo_root()
README = (ROOT / "README.md").read_text(encoding="utf-8")
LABS = sorted(p.stem for p in (ROOT / "labs").glob("[0-9][0-9]_*.ipynb"))
VIEW = site.WIDGET_VIEW
# a formula as JupyterLab reads a lab's markdown: $$...$$ or $...$ (\$ is a dollar sign)
JUPYTER_MATH = re.compile(r"(?<!\\)\$\$(.+?)\$\$|(?<![\\$])\$(?!\$)(.+?)(?<!\\)\$", re.S)


# --- the order: the README's "Start here" table -------------------------------------------------------------
def test_the_order_is_the_readmes_start_here_table():
    order = site.readme_order(README, LABS)
    section = README.split("\n## Start here", 1)[1].split("\n## ", 1)[0]
    assert [s for s, _ in order] == re.findall(r"\]\(labs/(\d\d_\w+)\.ipynb\)", section)
    assert sorted(s for s, _ in order) == LABS
    assert all(re.match(rf"{s[:2]} \w", t) for s, t in order), order   # "00 The three costs of attention"


TABLE = """# x

## Start here

| order | notebook | time |
|---|---|---|
| 1 | [00 Zero](labs/00_zero.ipynb) | 1 s |
| 2 | [02 Two](labs/02_two.ipynb) | 1 s |
| 3 | [01 One](labs/01_one.ipynb) | 1 s |

## Set up

| 9 | [03 Elsewhere](labs/03_three.ipynb) | not the table |
"""


def test_readme_order_parses_only_its_section_and_checks_every_lab():
    assert site.readme_order(TABLE) == [("00_zero", "00 Zero"), ("02_two", "02 Two"), ("01_one", "01 One")]
    assert [s for s, _ in site.readme_order(TABLE, ["00_zero", "01_one", "02_two"])] == ["00_zero", "02_two",
                                                                                         "01_one"]
    with pytest.raises(course.CourseError, match="missing: 03_three"):
        site.readme_order(TABLE, ["00_zero", "01_one", "02_two", "03_three"])
    with pytest.raises(course.CourseError, match="not in labs/: 02_two"):
        site.readme_order(TABLE, ["00_zero", "01_one"])
    with pytest.raises(course.CourseError, match="listed twice: 00_zero"):
        site.readme_order(TABLE.replace("labs/02_two", "labs/00_zero"))
    with pytest.raises(course.CourseError, match="no \"Start here\" table"):
        site.readme_order("# x\n\n## Set up\n")


# --- the site's copy of a lab ---------------------------------------------------------------------------------
def _lab():
    v4 = nbformat.v4
    nb = v4.new_notebook()
    explorer = v4.new_output("execute_result", data={VIEW: {"model_id": "m"}, "image/png": "PNG1",
                                                     "text/plain": "(an interactive explorer: run this cell ...)"},
                             execution_count=3)
    progress = v4.new_output("display_data", data={VIEW: {"model_id": "p"}, "text/plain": "train:   0%|  | 0/9"})
    figure = v4.new_output("display_data", data={"image/png": "PNG2", "text/plain": "<Figure>"})
    printed = v4.new_output("stream", name="stdout", text="computed: 1.0\n")
    nb.cells = [v4.new_markdown_cell("# 00 · Title\n\nText $x$ and\n$$a\n+ b.$$\nafter."),
                v4.new_code_cell(colab.setup_cell_source()),
                v4.new_code_cell("explorer()", outputs=[explorer]),
                v4.new_code_cell("train()", outputs=[progress, figure, printed])]
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    return nb


def test_site_notebook_keeps_pictures_and_drops_the_colab_cell_widget_views_and_progress_bars():
    lab = _lab()
    before = nbformat.writes(lab)
    nb = site.site_notebook(lab)
    assert nbformat.writes(lab) == before, "the lab itself was changed"
    assert [c.cell_type for c in nb.cells] == ["markdown", "code", "code"]
    assert not any(colab.is_setup_cell(course.cell_source(c)) for c in nb.cells)
    [explorer] = nb.cells[1].outputs
    assert explorer.output_type == "execute_result" and dict(explorer.data) == {"image/png": "PNG1"}
    assert [o.get("data", {}).get("image/png") or o.get("text") for o in nb.cells[2].outputs] == ["PNG2",
                                                                                                  "computed: 1.0\n"]
    assert "widgets" not in nb.metadata
    assert "$$\na\n+ b.\n$$" in nb.cells[0].source
    nbformat.validate(nb)


@pytest.mark.parametrize("stem", LABS)
def test_site_copy_of_each_lab_keeps_every_picture(stem):
    lab = course.read_notebook(ROOT / "labs" / f"{stem}.ipynb")
    nb = site.site_notebook(lab)

    def pngs(n):
        return [o["data"]["image/png"] for c in n.cells if c.cell_type == "code" for o in c.outputs
                if (o.get("data") or {}).get("image/png")]

    assert pngs(nb) == pngs(lab) and pngs(lab), "a figure or an explorer's picture went missing"
    outs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outs if VIEW in (o.get("data") or {})], "a widget view left (a static page cannot show it)"
    assert not any(colab.is_setup_cell(course.cell_source(c)) for c in nb.cells)
    assert len(nb.cells) == len(lab.cells) - 1


# --- formulas --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("md, want", [
    ("Per step:\n$$t = a,\\qquad\nb.$$\nThe simulator", "Per step:\n\n$$\nt = a,\\qquad\nb.\n$$\n\nThe simulator"),
    ("$$a$$\n$$b$$\n\nnext", "\n$$\na\n$$\n\n$$\nb\n$$\n\nnext"),
    ("1. item\n   $$x$$\n   more", "1. item\n\n   $$\n   x\n   $$\n\n   more"),
    ("inline $x$ and mid-line $$y$$ stay", "inline $x$ and mid-line $$y$$ stay"),
])
def test_display_math_becomes_a_block(md, want):
    """(blank lines counted once: Markdown reads one blank line as it reads several)"""
    assert re.sub(r"\n\n+", "\n\n", site.display_math_blocks(md)) == want


@pytest.mark.parametrize("stem", LABS)
def test_myst_reads_every_formula_of_a_lab_as_jupyterlab_does(stem):
    """MyST's dollarmath (what the site parses with) finds the formulas JupyterLab finds in each lab's text, once
    :func:`site.display_math_blocks` has made the display ones blocks; and latex2mathml converts every one."""
    markdown_it = pytest.importorskip("markdown_it", reason="the site extra (jupyter-book) brings markdown-it")
    dollarmath = pytest.importorskip("mdit_py_plugins.dollarmath")
    md = markdown_it.MarkdownIt().use(dollarmath.dollarmath_plugin, allow_space=True, allow_digits=True)
    lab = course.read_notebook(ROOT / "labs" / f"{stem}.ipynb")
    nb = site.site_notebook(lab)
    for before, after in zip([c for c in lab.cells if c.cell_type == "markdown"],
                             [c for c in nb.cells if c.cell_type == "markdown"]):
        jupyter = [(m[1] or m[2]).strip() for m in JUPYTER_MATH.finditer(course.cell_source(before))]
        myst = []
        for tok in md.parse(after.source):
            if tok.type.startswith("math_block"):
                myst.append(tok.content.strip())
            myst += [t.content.strip() for t in tok.children or () if t.type.startswith("math")]
        assert [re.sub(r"\s+", " ", t) for t in myst] == [re.sub(r"\s+", " ", t) for t in jupyter]
        for tex in myst:
            assert site.mathml(tex, display=False).startswith("<math")


def test_mathml():
    assert re.match(r'<math[^>]*display="inline"', site.mathml(r"\frac{a}{b}", display=False))
    assert re.match(r'<math[^>]*display="block"', site.mathml(r" x^2 ", display=True))
    with pytest.raises(ValueError, match="latex2mathml cannot convert"):
        site.mathml(r"\left( x", display=False)


# --- the book --------------------------------------------------------------------------------------------------
def test_book_config_and_toc():
    conf = site.book_config("hybrid-lab")
    assert conf["execute"]["execute_notebooks"] == "off"
    assert conf["only_build_toc_files"] is True
    sphinx = conf["sphinx"]
    assert sphinx["extra_extensions"] == [site.__name__] and callable(site.setup)
    assert sphinx["config"]["html_math_renderer"] == "mathml"           # no MathJax (a CDN)
    assert sphinx["config"]["nb_ipywidgets_js"] == {}                   # no widget scripts (CDNs)
    assert not conf["launch_buttons"]["thebe"] and not any(conf["launch_buttons"][k] for k in
                                                           ("binderhub_url", "jupyterhub_url", "colab_url"))
    toc = site.book_toc(["00_a", "02_b", "01_c"])
    assert toc["root"] == "index" and [c["file"] for c in toc["chapters"]] == ["00_a", "02_b", "01_c"]


def test_intro_page():
    order = site.readme_order(README, LABS)
    page = site.intro_page(README, order)
    assert page.startswith("# hybrid-lab\n") and "An interactive teaching lab" in page
    assert "![" not in page and "## Start here" not in page
    assert "worked solutions of the graded exercises are not published" in page
    listed = re.findall(r"^\d+\. \[[^\]]+\]\((\d\d_\w+)\.ipynb\)$", page, re.M)
    assert listed == [s for s, _ in order]


def test_write_book(tmp_path):
    order = site.write_book(tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted(["_config.yml", "_toc.yml", "index.md"] + [f"{s}.ipynb" for s in LABS])
    yaml = pytest.importorskip("yaml", reason="jupyter-book reads its config with PyYAML")
    assert yaml.safe_load((tmp_path / "_config.yml").read_text()) == site.book_config("hybrid-lab")
    assert [c["file"] for c in yaml.safe_load((tmp_path / "_toc.yml").read_text())["chapters"]] == \
        [s for s, _ in order]


# --- the output folder and the command ------------------------------------------------------------------------
def test_out_folder_must_be_new_empty_or_an_earlier_site(tmp_path):
    site._check_out(tmp_path / "new")                          # missing: fine
    empty = tmp_path / "empty"
    empty.mkdir()
    site._check_out(empty)
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / ".buildinfo").write_text("# Sphinx build info")
    (earlier / "index.html").write_text("old")
    site._check_out(earlier)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(course.CourseError, match="not empty and not an earlier site"):
        site._check_out(mine)
    with pytest.raises(course.CourseError, match="is a file"):
        site._check_out(mine / "notes.txt")


def test_a_failed_build_keeps_the_earlier_site(monkeypatch, tmp_path):
    earlier = tmp_path / "site"
    earlier.mkdir()
    (earlier / ".buildinfo").write_text("# Sphinx build info")
    (earlier / "index.html").write_text("old")
    real = site.importlib.util.find_spec
    monkeypatch.setattr(site.importlib.util, "find_spec", lambda name, *a: object() if name == "jupyter_book"
                        else real(name, *a))
    monkeypatch.setattr(site.subprocess, "run", lambda *a, **k: types.SimpleNamespace(
        returncode=2, stdout="", stderr="Extension error: something broke"))
    with pytest.raises(course.CourseError, match="could not build the site .exit 2.: Extension error"):
        site.build_site(earlier)
    assert (earlier / "index.html").read_text() == "old"


def test_site_without_jupyter_book_says_how_to_install_it(monkeypatch, capsys, tmp_path):
    real = site.importlib.util.find_spec
    monkeypatch.setattr(site.importlib.util, "find_spec", lambda name, *a: None if name == "jupyter_book"
                        else real(name, *a))
    assert cli.main(["site", "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Jupyter Book" in err and "[site]" in err, err
    assert not (tmp_path / "s").exists()


def test_without_thebe_drops_only_thebes_scripts():
    keep = types.SimpleNamespace(filename="_static/doctools.js", attributes={})
    ctx = {"script_files": [keep, types.SimpleNamespace(filename="_static/sphinx-thebe.js", attributes={}),
                            types.SimpleNamespace(filename=None, attributes={"body": 'const THEBE_JS_URL = "x"'})]}
    site._without_thebe(None, "index", "page.html", ctx, None)
    assert ctx["script_files"] == [keep]
