"""The student copy (``hybrid-lab build --mode student``) holds no answer: built once, then scanned.

The scan looks for every solution body of ``solutions/*.ipynb`` (the text between ``### BEGIN SOLUTION`` and
``### END SOLUTION``), whitespace-normalised, in every file of the copy; notebooks and JSON files are read as the
strings they hold (a body inside a notebook is JSON-escaped on disk). A known-leaky folder proves that the scan finds
what it looks for, and the repository's own exercise modules (which hold three of the answers in their references)
prove that the withholding is needed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from hybrid_lab.course import cli, colab, student_copy
from hybrid_lab.course import pipeline as course

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
# A one-line body shorter than this (``return x``, ``pass``) is code any file may hold without giving an answer
# away; matching it would flag the library for ordinary lines. Every body the solutions have today is longer.
MIN_CHARS = 20


def _norm(text: str) -> str:
    return " ".join(text.split())


def solution_bodies() -> list[tuple[str, str]]:
    """(where, normalised body) for each BEGIN..END region of the solution notebooks (trivial ones left out)."""
    out = []
    for sol in SOLUTIONS:
        for n, cell in enumerate(nbformat.read(sol, as_version=4).cells):
            if cell.cell_type != "code":
                continue
            inside, body = False, []
            for line in course.cell_source(cell).splitlines():
                if line.strip() == course.BEGIN:
                    inside, body = True, []
                elif line.strip() == course.END:
                    inside = False
                    text = _norm("\n".join(body))
                    if len([b for b in body if b.strip()]) > 1 or len(text) >= MIN_CHARS:
                        out.append((f"{sol.name} cell {n}", text))
                elif inside:
                    body.append(line)
    return out


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _texts(folder: Path):
    """(path, normalised text) of every file that is text; JSON / notebooks as the strings they hold, one per line.
    Files that are not UTF-8 (the checkpoints' .npz: zipped arrays of numbers) are skipped."""
    for p in sorted(folder.rglob("*")):
        if not p.is_file():
            continue
        try:
            raw = p.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if p.suffix in (".ipynb", ".json"):
            try:
                raw = "\n".join(_strings(json.loads(raw)))
            except ValueError:
                pass
        yield p, _norm(raw)


def scan(folder: Path, bodies) -> list[tuple[str, str]]:
    """(solution body's place, file) for each solution body found in a file under ``folder``."""
    texts = list(_texts(folder))
    return [(where, str(p.relative_to(folder))) for where, body in bodies for p, t in texts if body in t]


@pytest.fixture(scope="module")
def copy_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("student") / "copy"
    assert cli.main(["build", "--mode", "student", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def bodies():
    found = solution_bodies()
    assert len(found) >= 30 and all(len(b) >= MIN_CHARS for _, b in found)   # the extraction found the exercises
    return found


def test_copy_holds_no_solution_text(copy_dir, bodies):
    assert scan(copy_dir, bodies) == []


def test_scan_catches_a_leak(tmp_path, bodies):
    where, body = bodies[2]
    # re-wrapped and indented differently: the scan compares whitespace-normalised text
    (tmp_path / "notes.py").write_text("def f():\n    " + body.replace(" ", "\n        ", 3) + "\n")
    # in a notebook a body with quotes is JSON-escaped on disk: the scan reads the strings the notebook holds
    quoted = next((w, b) for w, b in bodies if '"' in b and (w, b) != (where, body))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(quoted[1].replace(" ", "  "))])
    nbformat.write(nb, tmp_path / "leak.ipynb")
    assert sorted(scan(tmp_path, bodies)) == sorted([(where, "notes.py"), (quoted[0], "leak.ipynb")])
    # the repository's exercise modules hold answers in their references (01.2's decay matrix, two of lab 09's
    # kernels): copied as they are, they would leak
    leaks = scan(ROOT / "hybrid_lab" / "exercises", bodies)
    assert {f for _, f in leaks} >= {"lab01.py", "lab09.py"}


def test_no_solutions_hidden_cases_or_tests(copy_dir):
    names = {p.name for p in copy_dir.rglob("*")}
    assert not any(n.startswith("hidden_cases") for n in names)
    assert not (copy_dir / "solutions").exists() and "solutions" not in {p.name for p in copy_dir.rglob("*")
                                                                         if p.is_dir()}
    assert not (copy_dir / "tests").exists() and not (copy_dir / "labs").exists()
    assert (copy_dir / "pyproject.toml").is_file() and (copy_dir / "hybrid_lab" / "__init__.py").is_file()


def test_assignments_validate_and_hide_outputs(copy_dir):
    nbs = sorted((copy_dir / "assignments").glob("*.ipynb"))
    assert [p.name for p in nbs] == [s.name for s in SOLUTIONS]
    for p in nbs:
        nb = nbformat.read(p, as_version=4)
        nbformat.validate(nb)
        first = course.exercises(nbformat.read(ROOT / "solutions" / p.name, as_version=4))[0].cell
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(not c.outputs for c in code[first:]) and course.BEGIN not in course.cell_source(code[first]), p.name
        assert any(c.outputs for c in code[:first]), p.name      # the intro before it keeps its outputs
        assert nb.metadata["hybrid_lab"]["kind"] == "assignment"


def test_references_withheld_and_cases_still_drawn(copy_dir):
    """In the copy (imported from it, not from the checkout), every reference but KEEP's is withheld, every
    exercise still draws its public cases (the assignment's trial run needs one), and a practice check says that
    the lecturer checks it."""
    code = """if True:
        import importlib, json, numpy as np, hybrid_lab
        from hybrid_lab.exercises import framework as fw
        for n in range(12):
            importlib.import_module(f"hybrid_lab.exercises.lab{n:02d}")
        rows = {i: [bool(getattr(ex.reference, "withheld", False)), len(ex.cases(np.random.default_rng(1)))]
                for i, ex in fw.EXERCISES.items()}
        try:
            fw.get("01.2").reference(np.zeros(3))
            raised = ""
        except RuntimeError as exc:
            raised = str(exc)
        print(json.dumps({"file": hybrid_lab.__file__, "rows": rows, "raised": raised}))
    """
    env = dict(os.environ, PYTHONPATH=str(copy_dir))
    r = subprocess.run([sys.executable, "-c", code], cwd=copy_dir, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert Path(got["file"]).resolve().is_relative_to(copy_dir.resolve())
    assert len(got["rows"]) == 35
    assert {i for i, (withheld, _) in got["rows"].items() if not withheld} == set(student_copy.KEEP)
    assert all(n >= 1 for _, n in got["rows"].values())
    assert "not in the student copy" in got["raised"]
    manifest = json.loads((copy_dir / "student_copy.json").read_text())
    assert sum(len(v) for v in manifest["references_withheld"].values()) == 35 - len(student_copy.KEEP)


def test_a_lab_runs_from_the_copy(copy_dir, monkeypatch):
    """Lab 00's first cells in a kernel that imports the copy: the assignment's check runs a (wrong) answer once and
    gives no verdict; a practice check says the lecturer checks it."""
    nb = nbformat.read(copy_dir / "assignments" / "00_three_costs.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code" and not colab.is_setup_cell(c.source)]
    answer = nbformat.v4.new_code_cell("def kv_bytes_per_token(n_attn, n_heads, n_kv_heads, d_head, "
                                       "bytes_per_elem):\n    return 0")
    probe = nbformat.v4.new_code_cell('import hybrid_lab\nprint("FILE", hybrid_lab.__file__)\n'
                                      'check("00.1", kv_bytes_per_token)')
    nb.cells = [code[0], code[1], answer, code[2], probe]
    monkeypatch.setenv("PYTHONPATH", str(copy_dir))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(copy_dir / "assignments")}}).execute()
    out = ["".join(o.get("text", "") for o in c.outputs) for c in nb.cells]
    assert "Exercise 00.1: kv_bytes_per_token ran on an example" in out[3]
    assert "PASS" not in out[3] and "FAIL" not in out[3]
    assert "checked by your lecturer" in out[4]
    assert str(copy_dir.resolve()) in out[4].split("FILE ", 1)[1].splitlines()[0]


def test_withhold_references_edits_only_the_reference():
    src = ('from hybrid_lab.exercises.framework import Exercise, register\n\n\n'
           'def f_reference(x):\n    """x -> 2x."""\n    y = 2 * x\n    return y\n\n\n'
           'def _cases(rng):\n    return []\n\n\n'
           'register(Exercise("98.1", "f", f_reference, _cases))\n')
    new, ids = student_copy.withhold_references(src)
    assert ids == ["98.1"] and "2 * x" not in new and '"""x -> 2x."""' in new
    assert "def _cases(rng):\n    return []" in new and new.rstrip().endswith("f_reference.withheld = True")
    compile(new, "lab98.py", "exec")
    with pytest.raises(course.CourseError, match="one-line"):
        student_copy.withhold_references(src.replace('def f_reference(x):\n    """x -> 2x."""\n    y = 2 * x\n'
                                                     '    return y\n', "def f_reference(x): return 2 * x\n"))
    with pytest.raises(course.CourseError, match="plain name"):
        student_copy.withhold_references(src.replace('"f", f_reference', '"f", lambda x: 2 * x'))


def test_cli_refuses_a_used_folder(tmp_path, capsys):
    (tmp_path / "old.txt").write_text("x")
    assert cli.main(["build", "--mode", "student", "--out", str(tmp_path)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert cli.main(["build", "--mode", "student"]) == 2
    assert "--out build/student" in capsys.readouterr().err
