"""The student copy: what students get for credit, as one folder (``hybrid-lab build --mode student --out DIR``).

``DIR`` holds the assignment notebooks (``assignments/``, from :func:`release.build_assignments`: no stored output
from the first exercise on) and a copy of the package that ``pip install DIR`` installs, with:

* no ``solutions/`` (so no worked notebooks and no ``solutions/hidden_cases.py``), no tests, docs or benchmarks;
* the references of the graded exercises withheld: in each copied ``hybrid_lab/exercises/labNN.py`` the body of every
  exercise's reference function is replaced by a ``raise`` (its docstring, the specification, stays) and the function
  is marked ``withheld``. A check whose reference is withheld only runs the student's function once
  (``framework.check``: "checked by your lecturer"); the verdicts come from ``hybrid-lab grade`` on the lecturer's
  side, with the full references and the hidden cases. The public case generators stay: the assignment's trial run
  draws its example from them, and the grader adds the hidden cases.
* :data:`KEEP`: references the public case generators call themselves stay whole (they are thin calls into the
  library).

The library itself ships: its functions are the answers to several exercises and the notebooks need them. The copy
does not try to hide them; the grader switches the answering functions off while a student's function runs (and
runs it in a process whose library has that answer removed), so delegating to the library scores nothing.
"""
from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

from hybrid_lab.course import pipeline as course
from hybrid_lab.course import release

# exercise id -> why its reference stays in the copy
KEEP = {
    "04.2": "the public cases call it to draw inputs whose gradient is not zero (a call into the library's "
            "LightningIndexer)",
    "08.3": "the public cases call it (grad_norm) to set max_norm relative to the gradient (a call into the "
            "library's forecast.train_step)",
}
WITHHELD = ("the reference of exercise {id} is not in the student copy: your lecturer's grader (hybrid-lab grade) "
            "checks this exercise")
PACKAGES = ("hybrid_lab", "gpu_track")
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".ipynb_checkpoints")
STUDENT_README = """# hybrid-lab: the assignments

Install, in a virtual environment, from this folder: `pip install ".[lab]"`; then `jupyter lab assignments/`.

Each notebook's exercise cells hold a function that raises `NotImplementedError`: write its body there and keep the
cell's first line (`# Exercise NN.K ...`). The cell below it runs your function once on an example and says whether
it ran; it gives no verdict. Your lecturer grades the notebook you hand in with fresh and hidden cases. This copy has
no worked solutions and no reference answers.
"""


def _references(tree) -> dict[str, str]:
    """reference name -> exercise id, from the module's ``Exercise("NN.K", "fn", reference, ...)`` calls."""
    refs = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Exercise":
            ref = node.args[2] if len(node.args) > 2 else next(
                (k.value for k in node.keywords if k.arg == "reference"), None)
            if not isinstance(node.args[0], ast.Constant) or not isinstance(ref, ast.Name):
                raise course.CourseError(f"line {node.lineno}: an Exercise(...) whose id is not a literal or whose "
                                         f"reference is not a plain name; the student copy cannot withhold it")
            refs[ref.id] = node.args[0].value
    return refs


def withhold_references(src: str, keep=KEEP) -> tuple[str, list[str]]:
    """``src`` (a labNN.py) with each reference's body replaced by a ``raise`` (the docstring kept) and the function
    marked ``withheld``; returns (new source, the ids withheld). References of exercises in ``keep`` stay whole."""
    tree = ast.parse(src)
    refs = {name: i for name, i in _references(tree).items() if i not in keep}
    lines = src.splitlines(keepends=True)
    found, edits = set(), []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in refs:
            body = node.body
            has_doc = isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant)
            first = body[1] if has_doc and len(body) > 1 else body[0]
            if first.lineno == node.lineno:
                raise course.CourseError(f"{node.name}: a one-line function; the student copy cannot withhold it")
            msg = WITHHELD.format(id=refs[node.name])
            stub = f"{' ' * first.col_offset}raise RuntimeError({msg!r})\n"
            edits.append((first.lineno - 1, node.end_lineno, stub))
            found.add(node.name)
    missing = sorted(set(refs) - found)
    if missing:
        raise course.CourseError(f"references without a def the student copy can empty: {missing}")
    for start, end, stub in sorted(edits, reverse=True):
        lines[start:end] = [stub]
    marks = "".join(f"{name}.withheld = True\n" for name in sorted(refs))
    tail = ("\n\n# hybrid-lab build --mode student: the references above are withheld (the grader keeps them)\n"
            + marks)
    return "".join(lines) + tail, sorted(refs.values())


def build_student_copy(out, paths=None) -> dict:
    """Write the student copy into ``out`` (see the module docstring); returns its manifest (also written to
    ``out/student_copy.json``). ``paths``: the solution notebooks to release (all by default)."""
    out = Path(out)
    root = course.repo_root()
    res, inside = out.resolve(), [(root / d).resolve() for d in ("labs", "solutions", *PACKAGES)]
    if res == root.resolve() or any(res == d or d in res.parents for d in inside):
        raise course.CourseError(f"--out {course.shown(out)}: the student copy goes to its own folder, e.g. "
                                 f"--out build/student")
    if out.exists() and any(out.iterdir()):
        raise course.CourseError(f"--out {course.shown(out)} is not empty; remove it or name a new folder "
                                 f"(a stale file there could be an answer)")
    out.mkdir(parents=True, exist_ok=True)
    notebooks = release.build_assignments(out / "assignments", paths)
    for pkg in PACKAGES:
        shutil.copytree(root / pkg, out / pkg, ignore=SKIP)
    withheld = {}
    for lab in sorted((out / "hybrid_lab" / "exercises").glob("lab[0-9][0-9].py")):
        src, ids = withhold_references(lab.read_text())
        lab.write_text(src)
        withheld[lab.stem] = ids
    shutil.copy2(root / "pyproject.toml", out / "pyproject.toml")
    (out / "README.md").write_text(STUDENT_README)
    manifest = {"notebooks": [p.name for p in notebooks], "packages": list(PACKAGES),
                "references_withheld": withheld, "references_kept": dict(KEEP),
                "left_out": ["solutions/ (worked notebooks, hidden_cases.py)", "labs/ (practice copies)", "tests/",
                             "docs/", "benchmarks/"]}
    (out / "student_copy.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest
