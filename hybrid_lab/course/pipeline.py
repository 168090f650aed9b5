"""The course pipeline: solutions -> labs -> grade.

* ``solutions/NN_name.ipynb`` are the source of truth: executed, outputs stored. Exercise code sits in a code cell
  whose first line is ``# Exercise NN.K (P points): title``, between ``### BEGIN SOLUTION`` / ``### END SOLUTION``.
* ``build`` turns each solution into ``labs/NN_name.ipynb``: every marked region becomes
  ``raise NotImplementedError("Exercise NN.K: title")``; every stored output stays (they are the answers).
* ``grade`` takes a student's lab, puts the student's exercise cells into the *solution* notebook (so the reference
  outputs and the checks come from ``solutions/``, never from what the student saved), runs nbval (strict, with the
  repo's sanitize file) and prints one row per exercise: id, points, passed/failed, first differing line.
  The code cells after an exercise, up to the next exercise, are its checks.

Command line::

    python -m hybrid_lab.course execute solutions/01_selective_ssm.ipynb   # run in place, store outputs
    python -m hybrid_lab.course build [solutions/NN_x.ipynb ...]           # regenerate labs/ (all by default)
    python -m hybrid_lab.course check                                      # labs/ in sync with solutions/?
    python -m hybrid_lab.course grade labs/01_selective_ssm.ipynb          # exit 1 if anything fails
"""
from __future__ import annotations

import argparse
import copy
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
HEADER = re.compile(r"^#\s*Exercise\s+(?P<id>[0-9A-Za-z._-]+)\s*\((?P<points>\d+)\s*points?\)\s*:\s*(?P<title>.+?)\s*$")


def repo_root() -> Path:
    """The checkout that holds ``solutions/`` and ``labs/`` (the package is installed editable from it)."""
    here = Path(__file__).resolve().parents[2]
    if (here / "solutions").is_dir():
        return here
    cwd = Path.cwd()
    for p in (cwd, *cwd.parents):
        if (p / "solutions").is_dir() and (p / "hybrid_lab").is_dir():
            return p
    raise FileNotFoundError("cannot find the hybrid-lab checkout (a folder with solutions/ and hybrid_lab/)")


def sanitize_file() -> Path:
    return repo_root() / "nbval_sanitize.cfg"


def _nbformat():
    import nbformat

    return nbformat


def _source(cell) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


@dataclass
class Exercise:
    id: str
    points: int
    title: str
    cell: int          # index among code cells (nbval's "Cell N")


def exercises(nb) -> list[Exercise]:
    """The exercises of a notebook, in order. Raises ValueError on a malformed exercise cell."""
    out, seen, k = [], set(), -1
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        k += 1
        src = _source(cell)
        if BEGIN not in src:
            continue
        first = src.lstrip().splitlines()[0]
        m = HEADER.match(first)
        if not m:
            raise ValueError(f"code cell {k} has '{BEGIN}' but its first line is not "
                             f"'# Exercise NN.K (P points): title': {first!r}")
        if src.count(BEGIN) != src.count(END):
            raise ValueError(f"exercise {m['id']}: unbalanced {BEGIN} / {END}")
        if m["id"] in seen:
            raise ValueError(f"exercise id {m['id']} appears twice")
        seen.add(m["id"])
        out.append(Exercise(m["id"], int(m["points"]), m["title"], k))
    return out


def stub_source(src: str, ex: Exercise) -> str:
    """Replace every BEGIN..END region by a ``raise NotImplementedError`` at the marker's indentation."""
    lines, out, inside = src.splitlines(), [], False
    for line in lines:
        if line.strip() == BEGIN:
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}# YOUR CODE HERE")
            out.append(f'{indent}raise NotImplementedError("Exercise {ex.id}: {ex.title}")')
            inside = True
        elif line.strip() == END:
            inside = False
        elif not inside:
            out.append(line)
    return "\n".join(out)


def make_lab(sol_nb):
    """The student version of a solution notebook (outputs kept: they are the reference answers)."""
    lab = copy.deepcopy(sol_nb)
    exs = {e.cell: e for e in exercises(sol_nb)}
    k = -1
    for cell in lab.cells:
        if cell.cell_type != "code":
            continue
        k += 1
        if k in exs:
            cell.source = stub_source(_source(cell), exs[k])
    lab.metadata["hybrid_lab"] = {"kind": "lab", "generated_from": "solutions/", "do_not_edit": "regenerate with "
                                  "python -m hybrid_lab.course build"}
    return lab


def lab_path_for(sol: Path) -> Path:
    return repo_root() / "labs" / Path(sol).name


def solution_path_for(lab: Path) -> Path:
    p = repo_root() / "solutions" / Path(lab).name
    if not p.exists():
        raise FileNotFoundError(f"no solution notebook {p} for {lab}")
    return p


def _dump(nb) -> str:
    return _nbformat().writes(nb) + "\n"


def build(paths=None) -> list[Path]:
    """Regenerate labs/ from solutions/ (all notebooks, or the given solution paths)."""
    nbf = _nbformat()
    sols = [Path(p) for p in paths] if paths else sorted((repo_root() / "solutions").glob("[0-9][0-9]_*.ipynb"))
    written = []
    for sol in sols:
        lab = make_lab(nbf.read(str(sol), as_version=4))
        dst = lab_path_for(sol)
        dst.parent.mkdir(exist_ok=True)
        dst.write_text(_dump(lab))
        written.append(dst)
    return written


def out_of_sync() -> list[str]:
    """Names of labs that differ from what ``build`` would write (or are missing / orphaned)."""
    nbf, root, bad = _nbformat(), repo_root(), []
    sols = sorted((root / "solutions").glob("[0-9][0-9]_*.ipynb"))
    for sol in sols:
        dst = lab_path_for(sol)
        if not dst.exists() or dst.read_text() != _dump(make_lab(nbf.read(str(sol), as_version=4))):
            bad.append(dst.name)
    names = {s.name for s in sols}
    bad += [p.name for p in sorted((root / "labs").glob("*.ipynb")) if p.name not in names]
    return bad


def execute(path, timeout: int = 600) -> None:
    """Run a notebook top to bottom in a fresh kernel (cwd = its folder) and store the outputs in place."""
    import nbclient

    nbf = _nbformat()
    path = Path(path)
    nb = nbf.read(str(path), as_version=4)
    client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    nb.metadata.pop("widgets", None)  # live widget state is session noise
    path.write_text(_dump(nb))


# ------------------------------------------------------------------------------------------------- grading
def merge_student(student_nb, sol_nb):
    """The solution notebook with the student's exercise cells swapped in (matched by exercise id)."""
    merged = copy.deepcopy(sol_nb)
    theirs = {}
    k = -1
    for cell in student_nb.cells:
        if cell.cell_type != "code":
            continue
        first = (_source(cell).lstrip().splitlines() or [""])[0]
        m = HEADER.match(first)
        if m:
            theirs[m["id"]] = _source(cell)
    code = [c for c in merged.cells if c.cell_type == "code"]
    for ex in exercises(sol_nb):
        if ex.id not in theirs:
            raise ValueError(f"the student notebook has no cell for exercise {ex.id} "
                             f"(its first line must stay '# Exercise {ex.id} ...')")
        code[ex.cell].source = theirs[ex.id]
    return merged


@dataclass
class Row:
    exercise: str
    points: int
    passed: bool
    first_diff: str


def _first_diff(message: str) -> str:
    """A one-line reason from nbval's failure text: the first differing output line, or the exception line."""
    message = re.sub(r"(\x1b|#x1B)\[[0-9;]*m", "", message)
    ref = re.search(r"Reference output from ipynb file:\s*\n(.*?)\n=+ disagrees with newly computed \(test\) output:"
                    r"\s*\n(.*?)\n>{3,}", message, re.S)
    if ref:
        a, b = ref.group(1).splitlines(), ref.group(2).splitlines()
        for i in range(max(len(a), len(b))):
            x = a[i] if i < len(a) else "<missing>"
            y = b[i] if i < len(b) else "<missing>"
            if x != y:
                return f"expected {x.strip()!r}, got {y.strip()!r}"
        return "outputs differ"
    if "assert reference_output == test_output failed" in message:
        # pytest's diff of (reference == test): "+ " lines are the reference, "- " lines what the student's code printed
        body = message.split("assert reference_output == test_output failed", 1)[1].splitlines()
        plus = next((ln.strip()[2:] for ln in body if ln.strip().startswith("+ ")), "<missing>")
        minus = next((ln.strip()[2:] for ln in body if ln.strip().startswith("- ")), "<missing>")
        return f"expected {plus.strip()!r}, got {minus.strip()!r}"[:240]
    errs = [ln.strip() for ln in message.splitlines() if re.match(r"^\s*\w*(Error|Exception|Interrupt)\b", ln.strip())]
    if errs:
        return errs[-1][:200]
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    return (lines[-1] if lines else "failed")[:200]


def grade(student_path, fail_fast: bool = False, quiet: bool = False) -> list[Row]:
    """Grade a student's notebook against solutions/. Returns one Row per exercise (and a 'setup' row on failure)."""
    nbf = _nbformat()
    student_path = Path(student_path)
    sol_path = solution_path_for(student_path)
    sol = nbf.read(str(sol_path), as_version=4)
    merged = merge_student(nbf.read(str(student_path), as_version=4), sol)
    exs = exercises(sol)
    n_code = sum(c.cell_type == "code" for c in sol.cells)
    with tempfile.TemporaryDirectory(prefix="hybrid_lab_grade_") as tmp:
        nb_path = Path(tmp) / sol_path.name
        nb_path.write_text(_dump(merged))
        xml = Path(tmp) / "report.xml"
        cmd = [sys.executable, "-m", "pytest", str(nb_path), "--nbval", "--nbval-current-env",
               f"--nbval-sanitize-with={sanitize_file()}", "--color=no", "-p", "no:cacheprovider", "-q",
               f"--junitxml={xml}", "--rootdir", tmp, "-c", os.devnull]
        if fail_fast:
            cmd.append("-x")
        # the kernel must see the environment a student's JupyterLab has: no headless matplotlib backend
        env = {k: v for k, v in os.environ.items() if k not in ("MPLBACKEND",)}
        proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, env=env)
        results = {}
        if xml.exists():
            for tc in ET.parse(xml).getroot().iter("testcase"):
                m = re.search(r"Cell (\d+)", tc.get("name", ""))
                if not m:
                    continue
                bad = tc.find("failure") if tc.find("failure") is not None else tc.find("error")
                results[int(m.group(1))] = None if bad is None else (bad.get("message", "") + "\n" + (bad.text or ""))
    if not results:
        raise RuntimeError(f"nbval produced no results (exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    bounds = [e.cell for e in exs] + [n_code]
    rows = []

    def verdict(cells):
        for c in cells:
            msg = results.get(c, "not run (an earlier cell failed)")
            if msg is not None:
                return False, f"cell {c}: " + (_first_diff(msg) if c in results else msg)
        return True, ""

    ok, why = verdict(range(0, bounds[0]))
    if not ok:
        rows.append(Row("setup", 0, False, why))
    for i, e in enumerate(exs):
        ok, why = verdict(range(bounds[i], bounds[i + 1]))
        rows.append(Row(e.id, e.points, ok, why))
    if not quiet:
        print(format_table(rows, student_path.name))
    return rows


def format_table(rows, name="") -> str:
    total = sum(r.points for r in rows)
    got = sum(r.points for r in rows if r.passed)
    w = max([8] + [len(r.exercise) for r in rows])
    lines = [f"Grading {name} against solutions/ (nbval, strict)", f"{'exercise':<{w}}  points  result  first difference",
             f"{'-' * w}  ------  ------  ----------------"]
    for r in rows:
        lines.append(f"{r.exercise:<{w}}  {r.points:>6}  {'PASS' if r.passed else 'FAIL':<6}  {r.first_diff}")
    lines.append(f"score: {got}/{total} points; {'all exercises pass' if all(r.passed for r in rows) else 'FAILED'}")
    return "\n".join(lines)


def fill_with_solutions(lab_nb, sol_nb):
    """A lab with the solution code put back into its exercise cells (the grader's self-test)."""
    filled = copy.deepcopy(lab_nb)
    sol_code = [c for c in sol_nb.cells if c.cell_type == "code"]
    lab_code = [c for c in filled.cells if c.cell_type == "code"]
    for e in exercises(sol_nb):
        lab_code[e.cell].source = _source(sol_code[e.cell])
    return filled


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hybrid_lab.course", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("execute", help="run solution notebooks in place and store their outputs")
    p.add_argument("paths", nargs="+")
    p = sub.add_parser("build", help="regenerate labs/ from solutions/")
    p.add_argument("paths", nargs="*")
    sub.add_parser("check", help="exit 1 if labs/ is out of sync with solutions/")
    p = sub.add_parser("grade", help="grade a student's lab notebook")
    p.add_argument("path")
    p.add_argument("-x", "--fail-fast", action="store_true", help="stop at the first failing cell")
    a = ap.parse_args(argv)
    if a.cmd == "execute":
        for path in a.paths:
            execute(path)
            print(f"executed {path}")
        return 0
    if a.cmd == "build":
        for path in build(a.paths or None):
            print(f"wrote {path.relative_to(repo_root())}")
        return 0
    if a.cmd == "check":
        bad = out_of_sync()
        print("labs/ in sync with solutions/" if not bad else "out of sync: " + ", ".join(bad))
        return 1 if bad else 0
    rows = grade(a.path, fail_fast=a.fail_fast)
    return 0 if all(r.passed for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
