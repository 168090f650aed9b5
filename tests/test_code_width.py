"""What a student sees in a code cell: every line whole, and no grading internals.

- No code line is longer than :data:`LIMIT` characters, so none is cut at the cell's right edge. JupyterLab 4 does not
  wrap code cells: a longer line runs under the edge and needs the horizontal scrollbar. LIMIT is what a code cell
  shows at 1280x720 (the size the decks are made for) with the file browser open, JupyterLab's default layout:
  measured in headless Chromium, the editor is 846 px wide and its monospace font (13 px) 7.83 px per character, so
  107 characters (116 at 1366x768, 123 at 1440x900).
- No nbval marker (``# NBVAL_IGNORE_OUTPUT``) or reason for it (``# (why: ...)``) in a code cell: the marker is the
  cell's ``nbval-ignore-output`` tag, the reason its ``metadata.hybrid_lab.why_output_ignored``
  (tests/test_course.py::test_nbval_markers_are_out_of_the_students_sight checks the tags).

Checked in the solutions and in the generated labs (the students' copies).
"""
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 107
NOTEBOOKS = [p for d in ("solutions", "labs") for p in sorted((ROOT / d).glob("[0-9][0-9]_*.ipynb"))]


def _code(path):
    for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
        if cell["cell_type"] == "code":
            src = cell["source"]
            yield i, src if isinstance(src, str) else "".join(src)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_no_code_line_is_cut_at_the_cell_edge(path):
    long = [(i, len(line), line.strip()[:60]) for i, src in _code(path) for line in src.splitlines()
            if len(line) > LIMIT]
    assert not long, f"{path.name}: code lines over {LIMIT} characters (cell, length, start): {long}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_no_grading_internals_in_code_cells(path):
    seen = [(i, line.strip()) for i, src in _code(path) for line in src.splitlines()
            if "NBVAL_" in line or line.lstrip().startswith("# (why")]
    assert not seen, f"{path.name}: move these into the cell's tags / metadata: {seen}"
