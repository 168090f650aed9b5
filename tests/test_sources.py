"""Every solution notebook ends with a "## Sources" cell that lists the source sections it covers (issue 18).

The items are written exactly as "Lecture 10 §4.1", "HySparse2 notes §17.6", "SparDA notes §2.4": the document's
name, one space, §, the section number. A notebook must list at least the sections below; students never see the
word "seed" (the source documents are the lecture and the two study notes, not files of ours).
"""
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))

REQUIRED = {
    "00": ["Lecture 10 §1", "Lecture 10 §3"],
    "01": ["Lecture 10 §2.1", "Lecture 10 §2.2", "Lecture 10 §2.3"],
    "02": ["Lecture 10 §3", "Lecture 10 §4.1"],
    "03": ["Lecture 10 §4.1", "Lecture 10 §4.2", "Lecture 10 §4.3", "Lecture 10 §4.4"],
    "04": ["Lecture 10 §5.1", "Lecture 10 §5.2", "Lecture 10 §5.3", "Lecture 10 §5.4", "Lecture 10 §5.5",
           "Lecture 10 §6"],
    "05": ["HySparse2 notes §15", "HySparse2 notes §18"],
    "06": ["HySparse2 notes §3", "HySparse2 notes §6", "HySparse2 notes §8", "HySparse2 notes §10",
           "HySparse2 notes §14", "HySparse2 notes §16", "HySparse2 notes §17.1", "HySparse2 notes §17.6"],
    "07": ["HySparse2 notes §11", "HySparse2 notes §12", "HySparse2 notes §13"],
    "08": ["SparDA notes §2.1", "SparDA notes §2.2", "SparDA notes §2.4", "SparDA notes §2.5", "SparDA notes §2.6",
           "SparDA notes §3.2", "SparDA notes §4.1", "SparDA notes §4.2", "SparDA notes §4.5", "SparDA notes §4.7"],
    "09": ["Lecture 10 §2.3", "Lecture 10 §5.3"],
    "10": ["Lecture 10 §3", "HySparse2 notes §17.2", "HySparse2 notes §17.3", "HySparse2 notes §17.4"],
    "11": ["Lecture 10 §5.2", "Lecture 10 §5.4", "SparDA notes §2.1", "SparDA notes §2.4", "SparDA notes §2.5"],
}
ITEM = re.compile(r"(Lecture 10|HySparse2 notes|SparDA notes) §(\d+(?:\.\d+)*)")


def _cells(path):
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _text(cell):
    src = cell["source"]
    return src if isinstance(src, str) else "".join(src)


def _mentions(text, item):
    """`item` appears as a whole section number: "Lecture 10 §4.1" is not found inside "Lecture 10 §4.10"."""
    return re.search(re.escape(item) + r"(?![0-9]|\.[0-9])", text) is not None


def test_every_notebook_has_a_required_list():
    assert sorted(p.name[:2] for p in SOLUTIONS) == sorted(REQUIRED)


def test_the_matcher_respects_section_boundaries():
    assert _mentions("- Lecture 10 §4.1: admission", "Lecture 10 §4.1")
    assert not _mentions("- Lecture 10 §4.10", "Lecture 10 §4.1")
    assert not _mentions("- Lecture 10 §4.1.2", "Lecture 10 §4.1")
    assert _mentions("Lecture 10 §3, the ratios", "Lecture 10 §3")
    assert not _mentions("Lecture 10 §3.1", "Lecture 10 §3")


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_sources_cell_lists_the_required_sections(path):
    last = _cells(path)[-1]
    text = _text(last)
    assert last["cell_type"] == "markdown" and text.lstrip().startswith("## Sources"), \
        f"{path.name}: the last cell must be markdown starting with '## Sources'"
    bullets = [ln for ln in text.splitlines() if ln.lstrip().startswith(("-", "*"))]
    assert bullets, f"{path.name}: the Sources cell lists its items as bullets"
    missing = [item for item in REQUIRED[path.name[:2]] if not _mentions(text, item)]
    assert not missing, f"{path.name}: the Sources cell does not list {missing}"
    for doc, num in ITEM.findall(text):          # every cited item is a well-formed "Document §N[.M]"
        assert num[0] != "0", f"{path.name}: {doc} §{num}"


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_no_seed_citations(path):
    for i, cell in enumerate(_cells(path)):
        outputs = "".join(_text({"source": o.get("text", "")}) for o in cell.get("outputs", []))
        assert not re.search(r"seed\s+00\d", _text(cell) + outputs, re.IGNORECASE), \
            f"{path.name} cell {i}: cite the document ('Lecture 10 §..', 'HySparse2 notes §..', 'SparDA notes §..')"
