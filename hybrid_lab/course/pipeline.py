"""The course pipeline: solutions -> labs -> grade.

* ``solutions/NN_name.ipynb`` are the source of truth: executed, outputs stored. Exercise code sits in a code cell
  whose first line is ``# Exercise NN.K (P points): title``, between ``### BEGIN SOLUTION`` / ``### END SOLUTION``.
* ``build`` turns each solution into ``labs/NN_name.ipynb``: every marked region becomes
  ``raise NotImplementedError("Exercise NN.K: title")``; every stored output stays (they are the answers).
* Each exercise cell defines a function (or class); the code cell below it hands it to
  ``hybrid_lab.exercises.check("NN.K", fn)``, which tests it against the reference on fresh random and edge cases,
  prints PASS / FAIL (what is wrong, where) / "not done yet", and returns the reference when it does not pass, so
  Run All goes on with the reference standing in.
* ``grade`` takes a student's lab, puts the student's exercise cells into the *solution* notebook (so the checks
  come from ``solutions/``, never from what the student saved) and runs it in a fresh, sandboxed kernel with
  nbclient (what runs, what raises, what is printed). Each verdict is decided by the grader itself
  (``hybrid_lab.exercises.verdicts``: its own cases and reference, the student's function in a sandboxed worker with
  the answer removed from the library); nothing the kernel records counts. One row per exercise: id, points,
  PASS/FAIL and the check's own message, with the cell to look at.
  Not graded: the exercise cell's own output, anything the student's code prints (also when a check calls it), and
  stderr (warnings): they are shown next to the row.

The command line is ``hybrid-lab`` (``hybrid_lab/course/cli.py``; ``python -m hybrid_lab.course`` is the same).
"""
from __future__ import annotations

import contextlib
import copy
import hashlib
import importlib.util
import linecache
import os
import re
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from hybrid_lab.course import colab

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
GRADE_DEPS = ("nbformat", "nbclient", "jupyter_client", "ipykernel")  # what grading imports (all in the `lab` extra)
# '# Exercise 01.3 (3 points, medium, ~20 min): the recurrent SSD scan' (level and minutes: every lab has them; a
# test checks it)
LEVELS = ("warm-up", "medium", "hard")
HEADER = re.compile(r"^#\s*Exercise\s+(?P<id>[0-9A-Za-z._-]+)\s*\((?P<points>\d+)\s*points?"
                    r"(?:\s*,\s*(?P<level>warm-up|medium|hard))?(?:\s*,\s*~?(?P<minutes>\d+)\s*min)?\s*\)"
                    r"\s*:\s*(?P<title>.+?)\s*$")


def repo_root() -> Path:
    """The checkout that holds ``solutions/`` and ``labs/`` (the package is installed editable from it)."""
    here = Path(__file__).resolve().parents[2]
    if (here / "solutions").is_dir():
        return here
    cwd = Path.cwd()
    for p in (cwd, *cwd.parents):
        if (p / "solutions").is_dir() and (p / "hybrid_lab").is_dir():
            return p
    raise CourseError("cannot find the hybrid-lab checkout (a folder with solutions/ and hybrid_lab/); "
                      "run the command from the repository: cd path/to/hybrid-lab && .venv/bin/hybrid-lab ...")


class CourseError(Exception):
    """A mistake the user can fix. The message is one line: what is wrong and the command that fixes it
    (``hybrid-lab`` prints it instead of a traceback)."""


def shown(path) -> str:
    """``path`` as the user would type it: relative to the current folder when it is inside it."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def install_hint(extra: str = "lab") -> str:
    """The command that installs an extra of this checkout into the running Python (the venv's own pip)."""
    return f'{shown(sys.executable)} -m pip install -e "{shown(repo_root()) if _has_root() else "."}[{extra}]"'


def _has_root() -> bool:
    try:
        repo_root()
        return True
    except CourseError:
        return False


def example_lab() -> str:
    """``hybrid-lab grade <a lab>`` as the user can type it from the current folder."""
    lab = repo_root() / "labs" / "01_selective_ssm.ipynb" if _has_root() else Path("labs/01_selective_ssm.ipynb")
    return f"hybrid-lab grade {shown(lab)}"


def missing_grade_deps() -> list[str]:
    """The packages grading needs that this Python cannot import."""
    return [m for m in GRADE_DEPS if importlib.util.find_spec(m) is None]


def nbformat_module():
    try:
        import nbformat
    except ImportError:
        raise CourseError(f"the Python package nbformat is missing; install the lab: {install_hint()}") from None
    return nbformat


def read_notebook(path):
    """The notebook at ``path`` (nbformat 4), or a CourseError that says why it is not one."""
    path = Path(path)
    if not path.exists():
        labs = shown(repo_root() / "labs")
        raise CourseError(f"{shown(path)}: no such file; the labs are in "
                          f"{'this folder' if labs == '.' else labs + '/'}, e.g. {example_lab()}")
    if path.is_dir():
        raise CourseError(f"{shown(path)} is a folder, not a notebook; name one notebook, e.g. {example_lab()}")
    if path.suffix != ".ipynb":
        raise CourseError(f"{shown(path)} is not a notebook (.ipynb); name a lab notebook, e.g. {example_lab()}")
    nbf = nbformat_module()
    try:
        with warnings.catch_warnings():  # nbformat's warnings on a hand-edited notebook (missing cell ids ...)
            warnings.simplefilter("ignore")
            return nbf.read(str(path), as_version=4)
    except Exception as exc:  # invalid JSON, not a notebook, an unknown nbformat version
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
        raise CourseError(f"{shown(path)} is not a readable notebook ({why}); open it in JupyterLab and save it "
                          f"again (File > Save Notebook), then grade it") from None


def cell_source(cell) -> str:
    """A cell's (or output's) source / text as one string (nbformat may hold a list of lines)."""
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


@dataclass
class Exercise:
    id: str
    points: int
    title: str
    cell: int          # index among code cells (nbval's "Cell N")
    level: str | None = None
    minutes: int | None = None


def exercises(nb) -> list[Exercise]:
    """The exercises of a notebook, in order. Raises ValueError on a malformed exercise cell."""
    out, seen, k = [], set(), -1
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        k += 1
        src = cell_source(cell)
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
        out.append(Exercise(m["id"], int(m["points"]), m["title"], k, m["level"],
                            int(m["minutes"]) if m["minutes"] else None))
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


NOT_RUN_YET = "(not run yet: run this cell to check your function)\n"
# JupyterLab copies the started kernel's spec into metadata.kernelspec: any other display name than the one ipykernel
# installs for python3 marks a notebook modified the moment it opens (tests/e2e/test_open_unmodified.py). Labs and
# executed solutions both carry it.
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
_CHECK_CALL = re.compile(r"""\bcheck\(\s*["'][0-9A-Za-z._-]+["']""")


def make_lab(sol_nb):
    """The student version of a solution notebook. Outputs are kept (they are the reference answers), except under
    each check: a stored "PASS" under an untouched stub would be a verdict the student never earned, so a check
    cell shows "not run yet" until it runs."""
    lab = copy.deepcopy(sol_nb)
    exs = {e.cell: e for e in exercises(sol_nb)}
    k = -1
    for cell in lab.cells:
        if cell.cell_type != "code":
            continue
        k += 1
        if k in exs:
            cell.source = stub_source(cell_source(cell), exs[k])
        elif k - 1 in exs and _CHECK_CALL.search(cell_source(cell)):
            cell.outputs = [nbformat_module().v4.new_output("stream", name="stdout", text=NOT_RUN_YET)]
            # The student's run prints a verdict, not this line: nbval compares nothing here (a tag, out of the
            # student's sight), and the cell keeps its execution count (nbval refuses an unrun cell with outputs).
            tags = cell.metadata.setdefault("tags", [])
            if "nbval-ignore-output" not in tags:
                tags.append("nbval-ignore-output")
    repo, branch = colab.course_repo(repo_root() / "pyproject.toml")
    for cell in lab.cells:      # the Colab setup cell names the course's repository (pyproject's [tool.hybrid-lab])
        if cell.cell_type == "code" and colab.is_setup_cell(cell_source(cell)):
            cell.source = colab.setup_cell_source(repo, branch)
    lab.metadata["kernelspec"] = dict(KERNELSPEC)
    lab.metadata["hybrid_lab"] = {"kind": "lab", "generated_from": "solutions/", "do_not_edit": "regenerate with "
                                  "hybrid-lab build", "cells_sha256": cells_hash(lab)}
    return lab


def cells_hash(nb) -> str:
    """sha256 of a notebook's cell types and sources: what an author or a student edits (not outputs, not metadata)."""
    h = hashlib.sha256()
    for cell in nb.cells:
        h.update(cell.cell_type.encode() + b"\0" + cell_source(cell).encode() + b"\0")
    return h.hexdigest()


def edited_since_build(lab_nb) -> bool:
    """Did someone change the cells of this generated lab (a student's work)? A lab without the recorded hash counts
    as unedited (built before the hash existed)."""
    recorded = lab_nb.metadata.get("hybrid_lab", {}).get("cells_sha256")
    return recorded is not None and recorded != cells_hash(lab_nb)


def stale_solution(sol_nb) -> bool:
    """Was this solution's source edited after its outputs were stored (``execute`` records the hash it ran)?"""
    return sol_nb.metadata.get("hybrid_lab", {}).get("executed_cells_sha256") != cells_hash(sol_nb)


def lab_path_for(sol: Path) -> Path:
    return repo_root() / "labs" / Path(sol).name


def solution_path_for(lab: Path, number: str | None = None) -> Path:
    """The solution a lab is graded against: lab ``number`` ("01") when given, else the same file name, else the one
    solution with the same ``NN_`` number (JupyterLab's "Duplicate" names a copy ``01_selective_ssm-Copy1.ipynb``)."""
    lab = Path(lab)
    sols = sorted((repo_root() / "solutions").glob("[0-9][0-9]_*.ipynb"))
    if number is not None:
        same = [s for s in sols if s.name[:3] == f"{number}_"]
        if len(same) != 1:
            raise CourseError(f"--lab {number}: no such lab; the labs are {', '.join(s.stem[:2] for s in sols)}")
        return same[0]
    same = [s for s in sols if s.name == lab.name] or [s for s in sols if s.name[:3] == lab.name[:3]]
    if len(same) == 1:
        return same[0]
    names = ", ".join(s.stem[:2] for s in sols)
    raise CourseError(f"{shown(lab)} is not one of the lab's notebooks (its name must start with a lab number: "
                      f"{names}); grade a lab, e.g. {example_lab()}, or name the lab: --lab 01")


def dumps(nb) -> str:
    """The notebook as the pipeline writes it: nbformat's JSON plus a final newline."""
    return nbformat_module().writes(nb) + "\n"


def build(paths=None, force: bool = False) -> list[Path]:
    """Regenerate labs/ from solutions/ (all notebooks, or the given solution paths). Refuses (CourseError, nothing
    written) to overwrite a lab whose cells were edited since it was built (a student's work) unless ``force``."""
    sols = [Path(p) for p in paths] if paths else sorted((repo_root() / "solutions").glob("[0-9][0-9]_*.ipynb"))
    todo = []
    for sol in sols:
        dst = lab_path_for(sol)
        if dst.exists() and not force and edited_since_build(read_notebook(dst)):
            raise CourseError(f"{shown(dst)} holds edits made after it was built (a student's work?); copy it "
                              f"elsewhere first, or overwrite it: hybrid-lab build --force {shown(sol)}")
        todo.append((make_lab(read_notebook(sol)), dst))
    written = []
    for lab, dst in todo:
        dst.parent.mkdir(exist_ok=True)
        dst.write_text(dumps(lab))
        written.append(dst)
    return written


def out_of_sync() -> list[str]:
    """What is wrong between solutions/ and labs/, one line each with the command that fixes it: a solution edited
    since it was last executed, a lab that differs from what ``build`` would write, a missing or orphaned lab."""
    nbf, root, bad = nbformat_module(), repo_root(), []
    sols = sorted((root / "solutions").glob("[0-9][0-9]_*.ipynb"))
    rel = lambda p: p.relative_to(root).as_posix()  # noqa: E731
    for sol in sols:
        sol_nb = nbf.read(str(sol), as_version=4)
        dst = lab_path_for(sol)
        if stale_solution(sol_nb):
            bad.append(f"{rel(sol)}: edited since its outputs were stored; run hybrid-lab execute {rel(sol)} && "
                       f"hybrid-lab build {rel(sol)}")
        elif not dst.exists():
            bad.append(f"{rel(dst)}: missing; run hybrid-lab build {rel(sol)}")
        elif dst.read_text() != dumps(fresh := make_lab(sol_nb)):
            lab_nb = nbf.read(str(dst), as_version=4)
            if edited_since_build(lab_nb):
                why = "edited by hand (never edit labs/); run hybrid-lab build --force "
            elif cells_hash(lab_nb) == cells_hash(fresh):
                # Same cells as a fresh build: only outputs or metadata differ (Run All, then JupyterLab's autosave;
                # or the solution was re-executed after the build). Not "older": nothing a student wrote is stale.
                why = ("cells current, outputs or metadata differ (the lab was run and saved, or its solution "
                       "re-executed since the build); to restore the stored outputs run hybrid-lab build ")
            else:
                why = "older than its solution; run hybrid-lab build "
            bad.append(f"{rel(dst)}: {why}{rel(sol)}")
    names = {s.name for s in sols}
    bad += [f"labs/{p.name}: no solutions/{p.name} (orphan); delete it"
            for p in sorted((root / "labs").glob("*.ipynb")) if p.name not in names]
    return bad


def poll_in_slices(kc, step: float = 0.5) -> None:
    """Make the kernel client's shell and iopub channels wait for a message in ``step``-second slices.

    nbclient waits for a cell's reply with one long poll (as long as the cell timeout). On this lab's machines
    zmq.asyncio now and then misses the wake-up of a message that has arrived, and that poll returns only at its
    timeout: measured here, 4 notebook runs in about 210 stalled for exactly the timeout (60 s, 300 s) with the kernel
    long idle. A slice ends with a fresh look at the socket, so a missed wake-up costs at most ``step`` seconds."""
    import time
    from queue import Empty

    def sliced(get_msg):
        async def get(timeout=None):
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                left = step if deadline is None else min(step, max(0.0, deadline - time.monotonic()))
                try:
                    return await get_msg(timeout=left)
                except Empty:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise
        return get

    for channel in (kc.shell_channel, kc.iopub_channel):
        channel.get_msg = sliced(channel.get_msg)


# A last cell to append to a notebook before running it: prints the kernel's own peak resident set and the largest
# of the processes it started and waited for, in bytes (Linux reports kB, macOS bytes; -1 where there is no resource
# module, i.e. on Windows). peak_rss reads it back.
PEAK_RSS_CELL = """\
import sys
try:
    import resource
    _unit = 1 if sys.platform == "darwin" else 1024
    print("PEAK_RSS_BYTES", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * _unit,
          resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * _unit)
except ImportError:
    print("PEAK_RSS_BYTES -1 -1")
"""


def peak_rss(nb) -> tuple:
    """(kernel, children) peak resident bytes that :data:`PEAK_RSS_CELL`, run as ``nb``'s last cell, printed; -1
    where the platform cannot tell."""
    text = "".join(o.get("text", "") for o in nb.cells[-1].get("outputs", []) if o.get("output_type") == "stream")
    fields = text.split()
    if len(fields) != 3 or fields[0] != "PEAK_RSS_BYTES":
        raise ValueError(f"nb's last cell must be PEAK_RSS_CELL, run; it printed {text!r}")
    return int(fields[1]), int(fields[2])


def run_all(path, timeout: int = 120) -> dict:
    """Run All on the notebook at ``path`` as it is, in a fresh kernel (cwd = its folder), nothing saved: what a
    student's first Run All does. Returns {"nb": the notebook with its outputs (:data:`PEAK_RSS_CELL` appended and
    run last), "wall": seconds from the kernel's start, "seconds": from the first cell's start, "peak_rss":
    (kernel, children) peak resident bytes, -1 where the platform cannot tell}. A cell that raises raises."""
    import time

    import nbclient
    import nbformat

    path = Path(path)
    nb = read_notebook(path)
    nb.cells.append(nbformat.v4.new_code_cell(PEAK_RSS_CELL))
    t = {"start": time.perf_counter()}
    client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=False,
                                     resources={"metadata": {"path": str(path.parent)}},
                                     on_notebook_start=lambda notebook: poll_in_slices(client.kc),
                                     on_cell_start=lambda cell, cell_index: t.setdefault("first", time.perf_counter()))
    client.execute()        # poll_in_slices: a missed zmq wake-up must not count as the notebook's time
    end = time.perf_counter()
    return {"nb": nb, "wall": end - t["start"], "seconds": end - t["first"], "peak_rss": peak_rss(nb)}


def execute(path, timeout: int = 600) -> None:
    """Run a notebook top to bottom in a fresh kernel (cwd = its folder) and store the outputs in place."""
    import nbclient

    path = Path(path)
    nb = read_notebook(path)
    try:
        with tempfile.TemporaryDirectory(prefix="hybrid_lab_exec_") as tmp:
            client = nbclient.NotebookClient(nb, km=_kernel_manager(tmp), timeout=timeout, kernel_name="python3",
                                             resources={"metadata": {"path": str(path.parent)}},
                                             on_notebook_start=lambda notebook: poll_in_slices(client.kc))
            with open(Path(tmp) / "kernel.log", "w") as log:   # the kernel process's own chatter, not the user's
                client.execute(stdout=log, stderr=log)
    except nbclient.exceptions.CellExecutionError as exc:
        last = [ln for ln in str(exc).splitlines() if ln.strip()][-1:] or ["a cell raised"]
        raise CourseError(f"{shown(path)}: a cell raised ({last[0].strip()[:160]}); fix it, then run "
                          f"hybrid-lab execute {shown(path)} again; nothing was written") from None
    normalize_outputs(nb, path.name)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata.setdefault("hybrid_lab", {})["executed_cells_sha256"] = cells_hash(nb)
    path.write_text(dumps(nb))


def normalize_outputs(nb, name: str) -> None:
    """Make stored outputs a function of the code alone, so executing an unchanged notebook rewrites the same bytes:
    consecutive stream pieces merged (how a kernel splits them depends on timing), widget model ids replaced by ids
    derived from the notebook name and the cell (the kernel draws random ones), per-run metadata dropped."""
    nb.metadata.pop("widgets", None)  # live widget state is session noise
    for i, cell in enumerate(nb.cells):
        cell.metadata.pop("execution", None)
        if cell.cell_type != "code":
            continue
        merged = []
        for o in cell.outputs:
            if (o.get("output_type") == "stream" and merged and merged[-1].get("output_type") == "stream"
                    and merged[-1].get("name") == o.get("name")):
                merged[-1]["text"] = cell_source({"source": merged[-1]["text"]}) + cell_source({"source": o["text"]})
            else:
                merged.append(o)
        for k, o in enumerate(merged):
            view = o.get("data", {}).get("application/vnd.jupyter.widget-view+json")
            if isinstance(view, dict) and "model_id" in view:
                view["model_id"] = hashlib.sha256(f"{name}:{i}:{k}".encode()).hexdigest()[:32]
        cell.outputs = merged


# ------------------------------------------------------------------------------------------------- grading
def merge_student(student_nb, sol_nb, name: str = "the notebook", missing: list | None = None):
    """The solution notebook with the student's exercise cells swapped in (matched by exercise id).

    An exercise whose header line the student changed (or whose cell they deleted) is a CourseError; with a list as
    ``missing`` (class grading) its cell gets the lab's stub instead, its id is appended to ``missing`` and only
    that exercise is lost."""
    merged = copy.deepcopy(sol_nb)
    theirs = {}
    for cell in student_nb.cells:
        if cell.cell_type != "code":
            continue
        m = HEADER.match((cell_source(cell).lstrip().splitlines() or [""])[0])
        if m:
            if m["id"] in theirs:
                raise CourseError(f"{name}: two cells start with '# Exercise {m['id']} ...'; keep one (delete the "
                                  f"other or change its first line) and grade again")
            theirs[m["id"]] = cell_source(cell)
    exs = exercises(sol_nb)
    if exs and not any(e.id in theirs for e in exs):
        raise CourseError(f"{name} is not a lab notebook: no cell starts with '# Exercise {exs[0].id} ...'; grade "
                          f"your copy of the lab, e.g. {example_lab()}")
    code = [c for c in merged.cells if c.cell_type == "code"]
    lost = [e for e in exs if e.id not in theirs]
    if lost and missing is None:
        line = cell_source(code[lost[0].cell]).lstrip().splitlines()[0]
        raise CourseError(f"{name}: no cell starts with '{line}' (the line was changed or the cell deleted); put that "
                          f"line back at the top of the exercise cell")
    for ex in exs:
        if ex.id in theirs:
            code[ex.cell].source = theirs[ex.id]
        else:     # never the solution's code: the stub, which fails as "not done yet"
            missing.append(ex.id)
            code[ex.cell].source = stub_source(cell_source(code[ex.cell]), ex)
    return merged


# Runs in the grader's kernel before the notebook (never in a student's JupyterLab): what the student's own code prints
# goes to stderr, which is shown and not compared. Without it a debugging print inside the student's function would
# land in the output of the check cell that calls it and fail a correct answer.
_GRADING_KERNEL_SETUP = ("from hybrid_lab.course.pipeline import guard_writes, route_exercise_output\n"
                         "route_exercise_output()\nguard_writes()")
ALLOW_ENV = "HYBRID_LAB_GRADE_ALLOW"    # folders the graded code may write to (os.pathsep-separated)
_exercise_files: dict[str, bool] = {}


def _is_exercise_code(filename: str) -> bool:
    """Is ``filename`` (a frame's ``co_filename``) an exercise cell? IPython registers each cell's code in linecache
    under its own name, so the cell's first line tells."""
    hit = _exercise_files.get(filename)
    if hit is None:
        first = next((ln.strip() for ln in linecache.getlines(filename)[:5] if ln.strip()), "")
        hit = _exercise_files[filename] = bool(HEADER.match(first))
    return hit


class ExerciseOutputToStderr:
    """A ``sys.stdout`` stand-in: a write made while exercise code is on the call stack goes to stderr."""

    def __init__(self, stdout, stderr):
        self._stdout, self._stderr = stdout, stderr

    def write(self, text):
        frame = sys._getframe(1)
        while frame is not None and not _is_exercise_code(frame.f_code.co_filename):
            frame = frame.f_back
        return (self._stdout if frame is None else self._stderr).write(text)

    def __getattr__(self, name):  # flush, isatty, encoding, fileno, ...: the kernel's own stream
        return getattr(self._stdout, name)


def route_exercise_output() -> None:
    """Install :class:`ExerciseOutputToStderr` as ``sys.stdout`` (in the grader's kernel)."""
    if not isinstance(sys.stdout, ExerciseOutputToStderr):
        sys.stdout = ExerciseOutputToStderr(sys.stdout, sys.stderr)


_WRITE_EVENTS = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "shutil.rmtree", "os.truncate", "os.link",
                 "os.symlink", "os.chmod", "os.chown", "os.utime"}


def _writes(event: str, args) -> list:
    """The paths an audit event would write or change (none for a read)."""
    if event == "open":
        path, mode, flags = (list(args) + [None, None, None])[:3]
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND))
        return [path] if writing and isinstance(path, (str, bytes, os.PathLike)) else []
    if event in _WRITE_EVENTS:
        return [a for a in args[:2] if isinstance(a, (str, bytes, os.PathLike))]
    return []


def guard_writes(allowed=None) -> None:
    """In the grader's kernel: refuse (PermissionError) any write through Python outside the submission's scratch
    folder and the caches libraries keep (``HYBRID_LAB_GRADE_ALLOW``); the exercise then fails with that message.
    A Python audit hook: it sees open(), os.* and shutil calls, not what a subprocess or C code writes."""
    roots = allowed if allowed is not None else [r for r in os.environ.get(ALLOW_ENV, "").split(os.pathsep) if r]
    if not roots:
        return
    roots = [os.path.realpath(r) for r in roots] + ["/dev"]

    def inside(path) -> bool:
        p = os.path.realpath(os.fsdecode(path) if not isinstance(path, int) else "/dev/null")
        return any(p == r or p.startswith(r.rstrip(os.sep) + os.sep) for r in roots)

    def hook(event, args):
        if event == "open" or event in _WRITE_EVENTS:
            for path in _writes(event, args):
                if not isinstance(path, int) and not inside(path):
                    raise PermissionError(f"hybrid-lab grader: writing {os.fsdecode(path)} is outside the "
                                          f"submission's folder; graded code may write only there")

    sys.addaudithook(hook)


def write_roots(scratch) -> list[str]:
    """Where graded code may write: its scratch folder and the per-user caches (matplotlib, IPython, triton, torch)."""
    home = Path.home()
    roots = [Path(scratch), home / ".cache", home / ".ipython", home / ".config" / "matplotlib", home / ".triton",
             home / ".local" / "share" / "jupyter", Path(tempfile.gettempdir()) / "matplotlib"]
    for var in ("MPLCONFIGDIR", "TRITON_CACHE_DIR", "IPYTHONDIR", "XDG_CACHE_HOME"):
        if os.environ.get(var):
            roots.append(Path(os.environ[var]))
    return [str(r) for r in roots]


@dataclass
class CellRun:
    outputs: list
    error: tuple | None = None      # (ename, evalue) when the cell raised


def package_folders() -> list[str]:
    """The folders of the installed ``hybrid_lab`` and ``gpu_track`` packages (what a sandboxed kernel may read)."""
    out = []
    for name in ("hybrid_lab", "gpu_track"):
        spec = importlib.util.find_spec(name)
        out += [str(Path(p).resolve()) for p in (spec.submodule_search_locations or [])] if spec else []
    return out


def _kernel_manager(folder, sandboxed: bool = False, name: str = "kernel"):
    """A kernel of this very Python (the venv the grader runs in), whatever kernelspecs the machine has; on POSIX it
    talks over local sockets in ``folder`` (nothing on the network, no "running over TCP without encryption").
    ``sandboxed``: the kernel runs inside bubblewrap (:mod:`hybrid_lab.core.sandbox`): it sees the system, this
    Python and the packages read-only, ``folder`` writable, nothing else (not solutions/, not other submissions)."""
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager

    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    if sandboxed:
        from hybrid_lab.core import sandbox
        # JPY_PARENT_PID names the grader's pid, which the kernel's own pid namespace does not have: ipykernel would
        # take its parent for dead and exit (--die-with-parent ends it with the grader instead)
        argv = sandbox.wrap(argv, folder, readonly=package_folders(), unsetenv=("JPY_PARENT_PID",),
                            interruptible=True)[0]

    class ThisPython(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):
            return KernelSpec(argv=argv, display_name="Python 3 (hybrid-lab grader)", language="python")

    ipc = {"transport": "ipc", "ip": str(Path(folder) / name)} if os.name == "posix" else {}
    km = AsyncKernelManager(kernel_name="python3", kernel_spec_manager=ThisPython(), **ipc)
    km.connection_file = str(Path(folder) / f"{name}.json")    # inside the folder the sandbox shows
    return km


KERNEL_DIED = ("the kernel died while running this cell (a crash in your code: an out-of-bounds access, a segfault, "
               "or the memory limit)")


def kernel_death(code, sandboxed: bool = False) -> str:
    """What the grader says of a kernel that died in a cell, from its process's exit status ``code`` (None: not
    known; negative: the signal that killed it; in the sandbox bubblewrap exits with 128 + the signal)."""
    import signal

    sig = (-code if code is not None and code < 0 else
           code - 128 if sandboxed and code is not None and 128 < code < 128 + signal.NSIG else None)
    if sig is not None:
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = "an unknown signal"
        return f"{KERNEL_DIED}; it was killed by signal {sig} ({name})"
    if code is not None:
        return (f"the kernel exited with status {code} while running this cell (os._exit, or a library that ends "
                f"the process, in your code?)")
    return KERNEL_DIED


def _exit_status(client) -> int | None:
    """The exit status of the kernel's process once it is gone (None if it cannot be read)."""
    proc = getattr(getattr(client.km, "provisioner", None), "process", None)
    try:
        return None if proc is None else proc.wait(timeout=5)
    except Exception:                               # still running (a dead channel, not a dead process), or gone
        return None


def run_cells(nb, cwd, timeout: int = 300, skip=(), sandboxed: bool = False, resume=None):
    """Run the code cells of ``nb`` in order in a fresh kernel, going on after errors. Yields (cell index, CellRun).
    Cells whose index is in ``skip`` do not run. A cell over ``timeout`` seconds is interrupted and counts as raising
    TimeoutError. A cell the kernel dies in counts as raising DeadKernelError (named by the kernel's signal or exit
    status); the run then ends, unless ``resume``: ``resume(i)`` for that cell returns None (end) or (replay, code,
    cells): a fresh kernel runs the cells ``replay`` again (their outputs are not yielded: what the rest needs),
    then the source ``code`` (a stand-in), and goes on with ``cells``. The kernels' own log goes to
    ``cwd/kernel.log``. ``sandboxed``: the kernel runs inside bubblewrap (see :func:`_kernel_manager`)."""
    import nbclient
    from nbclient.exceptions import DeadKernelError

    nb = copy.deepcopy(nb)
    nb.cells.append(nbformat_module().v4.new_code_cell(_GRADING_KERNEL_SETUP))  # run first (see below), graded never
    setup = len(nb.cells) - 1
    errors = {}
    # the kernel sees the environment a student's JupyterLab has: no headless matplotlib backend
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    env[ALLOW_ENV] = os.pathsep.join(write_roots(cwd))
    env["TMPDIR"] = str(Path(cwd))                  # tempfile in graded code lands in the scratch folder
    if sandboxed:                                   # its home, caches and runtime files in the scratch folder too
        from hybrid_lab.core import sandbox
        env = sandbox.wrap([], cwd, env=env)[1]
    log_path = Path(cwd) / "kernel.log"  # the kernel process's own messages, not the student's terminal
    log_path.write_text("")
    started = [0]                        # kernels started; [1]: where the current one's log begins

    def start():
        """(client, the ExitStack that ends its kernel): a fresh kernel that has run the grading setup cell."""
        name = "kernel" if not started[0] else f"kernel{started[0] + 1}"
        started[0] += 1
        client = nbclient.NotebookClient(
            nb, km=_kernel_manager(cwd, sandboxed, name), timeout=timeout, allow_errors=True,
            interrupt_on_timeout=True,
            error_on_timeout={"ename": "TimeoutError", "evalue": f"the cell ran longer than {timeout} s (an endless "
                              f"loop?)", "traceback": []},
            on_cell_error=lambda cell, cell_index, execute_reply: errors.__setitem__(cell_index,
                                                                                     execute_reply["content"]),
            on_notebook_start=lambda notebook: poll_in_slices(client.kc))
        stack = contextlib.ExitStack()
        started[1:] = [log_path.stat().st_size]
        log = stack.enter_context(open(log_path, "a"))
        try:
            stack.enter_context(client.setup_kernel(cwd=str(cwd), env=env, cleanup_kc=True, stdout=log, stderr=log))
        except Exception as exc:
            stack.close()
            why = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
            raise CourseError(f"the grader could not start a Python kernel ({why}); reinstall the lab: "
                              f"{install_hint()}") from None
        errors.pop(setup, None)
        try:
            client.execute_cell(nb.cells[setup], setup)
        except DeadKernelError:
            stack.close()
            raise CourseError(f"the grader's kernel died while it was prepared; reinstall the lab: {install_hint()}")
        err = errors.get(setup) or next((o for o in nb.cells[setup].outputs if o.output_type == "error"), None)
        if err is not None:
            stack.close()
            raise CourseError(f"the grader could not prepare its kernel ({err.get('ename', 'Error')}: "
                              f"{err.get('evalue', '')}); reinstall the lab: {install_hint()}")
        return client, stack

    def last_words() -> str:
        with open(log_path, errors="replace") as f:
            f.seek(started[1])
            last = [ln for ln in f.read().splitlines() if ln.strip()][-1:]
        return f"; its last words: {last[0][:160]}" if last else ""

    todo = [i for i in range(setup) if nb.cells[i].cell_type == "code" and i not in skip]
    client, kernel = start()
    try:
        while todo:
            i = todo.pop(0)
            cell = nb.cells[i]
            try:
                client.execute_cell(cell, i)
            except DeadKernelError:
                yield i, CellRun([], ("DeadKernelError", kernel_death(_exit_status(client), sandboxed) + last_words()))
                kernel.close()
                plan = resume(i) if resume is not None else None
                if plan is None:
                    return
                replay, code, todo = plan[0], plan[1], list(plan[2])
                client, kernel = start()
                if code:
                    nb.cells.append(nbformat_module().v4.new_code_cell(code))
                    replay = list(replay) + [len(nb.cells) - 1]
                try:
                    for j in replay:
                        client.execute_cell(nb.cells[j], j)
                except DeadKernelError:      # an earlier cell that ran before: not reproducible, so stop here
                    return
                continue
            cell = nb.cells[i]
            err = errors.get(i)
            if err is None:
                err = next((o for o in cell.outputs if o.output_type == "error"), None)
            yield i, CellRun(list(cell.outputs),
                             None if err is None else (err.get("ename", "Error"), err.get("evalue", "")))
    finally:
        kernel.close()


# nbval's markers, as nbval reads them (a skipped cell is not run by the grader either)
NBVAL_MARKERS = {"NBVAL_IGNORE_OUTPUT": ("check", False), "PYTEST_VALIDATE_IGNORE_OUTPUT": ("check", False),
                 "NBVAL_CHECK_OUTPUT": ("check", True), "NBVAL_RAISES_EXCEPTION": ("raises", True),
                 "NBVAL_SKIP": ("skip", True)}


def nbval_options(cell) -> dict:
    """What nbval does with a cell: run it ('skip'), compare its outputs ('check'), accept an error ('raises').
    From a comment alone on its line (``# NBVAL_IGNORE_OUTPUT``) or the cell's tags (``nbval-ignore-output``)."""
    opts = {"check": True, "skip": False, "raises": False}
    tags = {t.upper().replace("-", "_") for t in cell.get("metadata", {}).get("tags", []) or []}
    if "RAISES_EXCEPTION" in tags:
        tags.add("NBVAL_RAISES_EXCEPTION")
    comments = {ln.strip().lstrip("#").strip() for ln in cell_source(cell).splitlines() if ln.strip().startswith("#")}
    for marker in (tags | comments) & set(NBVAL_MARKERS):
        key, value = NBVAL_MARKERS[marker]
        opts[key] = value
    return opts


def _stream(outputs, name: str) -> str:
    """One stream of a cell, its pieces joined, what a carriage return or a backspace overwrote dropped."""
    text = "".join(cell_source({"source": o.get("text", "")}) for o in outputs
                   if o.get("output_type") == "stream" and o.get("name") == name)
    old = None
    while old != text:
        old, text = text, re.sub("[^\n]\x08", "", text)
    return re.sub(r"(?m)^.*\r(?=[^\n])", "", text)


def _notes(outputs, ref_outputs) -> list[str]:
    """stderr lines of a cell that the reference does not have: warnings and the student's own prints."""
    seen = set(_stream(ref_outputs, "stderr").splitlines())
    out = []
    for ln in _stream(outputs, "stderr").splitlines():
        if ln.strip() and ln not in seen:
            # '/tmp/ipykernel_81/2931.py:4: RuntimeWarning: ...' -> 'line 4: RuntimeWarning: ...'
            out.append(re.sub(r"^\S*ipykernel_\d+/\d+\.py:(\d+): ", r"line \1: ", ln.rstrip()))
    return out


@dataclass
class Row:
    exercise: str
    points: int
    passed: bool
    message: str = ""                              # one line: what failed, or '' when it passed
    details: list = field(default_factory=list)    # the check's own lines that differ ('expected: ...' / 'got: ...')
    notes: list = field(default_factory=list)      # not graded: warnings and what the student's code printed

    @property
    def not_done(self) -> bool:
        return self.message.startswith("not done yet")

    @property
    def needs_triton(self) -> bool:                # not run here (no Triton on macOS / Windows): 0 points, not FAIL
        return self.message.startswith("needs Triton")


def _stub_of(err) -> str | None:
    """The exercise id of a stub's NotImplementedError("Exercise NN.K: title"), else None. Also when another
    exception wraps it with the message intact (Triton's interpreter:
    ``InterpreterError: NotImplementedError(...)``)."""
    if not err:
        return None
    m = (re.match(r"Exercise\s+([0-9A-Za-z._-]+):", str(err[1])) if err[0] == "NotImplementedError" else
         re.search(r"NotImplementedError\(['\"]Exercise\s+([0-9A-Za-z._-]+):", str(err[1])))
    return m.group(1) if m else None


def _positions(nb) -> dict:
    """{exercise id: [notebook cell number (1-based, markdown cells included) of the exercise cell, of its check cell
    1, 2, ...]} up to the next exercise cell; key None: the cells before the first exercise."""
    pos, key = {None: []}, None
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        m = HEADER.match((cell_source(cell).lstrip().splitlines() or [""])[0])
        if m:
            key = m["id"]
            pos[key] = []
        pos[key].append(i + 1)
    return pos


def _verdict(ex, cells, runs, ref_nb, where, trusted=None) -> Row:
    """Row of one exercise from its cells' runs. cells: notebook indices, the exercise cell first (none for setup).

    The verdict is the grader's own (``trusted``: {exercise id: verdict} of :mod:`hybrid_lab.exercises.verdicts`,
    decided in this process from the outcomes of the student's sandboxed function), shown at the exercise's first
    check cell; nothing the notebook's kernel records counts. A cell of the exercise that raises fails the row."""
    trusted = trusted or {}
    label = "setup" if ex is None else ex.id
    row = Row(label, 0 if ex is None else ex.points, True)
    if cells and not any(i in runs or nbval_options(ref_nb.cells[i])["skip"] for i in cells):
        row.passed, row.message = False, "not run: the grader stopped at the first failing exercise (-x)"
        return row
    fails, verdict, died = [], None, None
    for k, i in enumerate(cells):
        run = runs.get(i)
        name = (f"setup cell {k + 1}" if ex is None else
                "your exercise cell" if k == 0 else f"check cell {k} of exercise {ex.id}")
        place = f"{name} ({where(label, k)})"
        if run is None:
            if not nbval_options(ref_nb.cells[i])["skip"]:
                fails.append((f"not run: the grader stopped before {name}", []))
            continue
        row.notes = list(dict.fromkeys(row.notes + _notes(run.outputs, ref_nb.cells[i].outputs)))
        mine = trusted.get(ex.id) if ex is not None else None
        if mine is not None and k == (0 if mine.get("cell") else 1) and verdict is None:
            verdict = dict(mine, place=place)
        if run.error and run.error[0] == "DeadKernelError":
            died = (f"{place}: {run.error[1]}", [])     # the exercise scores 0, whatever the verdict says
            continue
        if run.error and mine is not None and (k == 1 or (k == 0 and mine.get("cell"))):
            continue                        # the check cell (or the cell the verdict is about): the verdict says it
        if run.error and not (nbval_options(ref_nb.cells[i])["raises"] and k > 0):
            stub = _stub_of(run.error)
            if stub is not None and stub == label:
                fails.append((f"not done yet: NotImplementedError raised in {place}", []))
            elif stub is not None:
                fails.append((f"needs exercise {stub}, which is not done yet: NotImplementedError in {place}", []))
            else:
                fails.append((f"{place} raised {run.error[0]}: {run.error[1]}", []))
    row.notes.sort(key=lambda n: "Warning" not in n)  # warnings first, then what the student's code printed
    if ex is not None and verdict is not None:
        if verdict["status"] in ("not_done", "needs_triton"):
            fails.insert(0, (verdict["message"], []))
        elif verdict["status"] == "fail" and verdict.get("cell"):        # "your exercise cell raised ...": where
            fails.insert(0, (verdict["message"].replace("your exercise cell", verdict["place"], 1),
                             list(verdict["details"])))
        elif verdict["status"] == "fail":
            fails.insert(0, (f"{verdict['place']}: {verdict['message']}", list(verdict["details"])))
    elif ex is not None and not fails and died is None:
        fails.append((f"no verdict: the check of exercise {ex.id} did not run (is check(\"{ex.id}\", ...) still in "
                      f"the cell below your exercise?)", []))
    if died is not None:            # the crash first; what else failed (the verdict on the function) below it
        row.passed, row.message = False, died[0]
        row.details = [m for m, _ in fails if not m.startswith("not run: the grader stopped before")]
        return row
    if fails:
        row.passed = False
        row.message, row.details = fails[0]
        if len(fails) > 1:
            row.details = row.details + [f"({len(fails) - 1} more failing cell(s) after it)"]
    return row


UNSAFE_ENV = "HYBRID_LAB_GRADE_UNSAFE"   # "1": the default of --unsafe (the test suite on a machine without bwrap)
NO_SANDBOX = "not sandboxed"


def grade(student_path, fail_fast: bool = False, quiet: bool = False, timeout: int = 300,
          lab: str | None = None, unsafe: bool | None = None, seed: int | None = None,
          hidden=None, require_sandbox: bool = False, partial: bool = False) -> list[Row]:
    """Grade a student's notebook against solutions/ (lab ``lab``, e.g. "01", else found from the file name).
    Returns one Row per exercise (and a 'setup' row on failure). ``timeout``: seconds per cell.

    The notebook runs in a sandboxed kernel (for what it prints and whether its cells run); each exercise's verdict
    is decided here (:mod:`hybrid_lab.exercises.verdicts`): the student's function runs in a separate sandboxed
    process with the answer removed from the library, on cases this process draws (``seed``: None draws fresh ones
    per exercise) plus the lecturer's hidden cases (``hidden``: a file, default ``solutions/hidden_cases.py``).
    Without bubblewrap (macOS, Windows): a student grading their own notebook gets one line saying so and the
    grade runs unsandboxed (a separate process and the audit hook); ``require_sandbox`` (class grading: other
    people's code) refuses with a CourseError instead, unless ``unsafe`` (None: ``HYBRID_LAB_GRADE_UNSAFE=1``).
    ``partial`` (class grading): an exercise whose header line was changed scores 0 with a row saying so, the
    others are graded (else the whole notebook is a CourseError naming the line)."""
    from hybrid_lab.core import sandbox
    from hybrid_lab.exercises import verdicts
    from hybrid_lab.exercises import framework

    missing = missing_grade_deps()
    if missing:
        raise CourseError(f"grading needs the Python package(s) {', '.join(missing)}, not installed here; install "
                          f"the lab: {install_hint()}")
    if unsafe is None:
        unsafe = os.environ.get(UNSAFE_ENV) == "1"
    ok, why = sandbox.available()
    if not ok and require_sandbox and not unsafe:
        raise CourseError(f"{why}. Other people's code is graded only inside the bubblewrap sandbox; install it, or "
                          f"pass --unsafe to grade with a separate process and Python's audit hook only (a "
                          f"determined student can then write files and read the library's source)")
    if not ok and not unsafe:
        print(f"hybrid-lab grade: {NO_SANDBOX} ({why}); fine for your own notebook, not for other people's code",
              file=sys.stderr, flush=True)
    sandboxed = ok and not unsafe
    hidden_path = Path(hidden) if hidden is not None else repo_root() / "solutions" / verdicts.HIDDEN_FILE
    hidden_cases = verdicts.load_hidden(hidden_path if hidden_path.exists() else None)
    student_path = Path(student_path)
    student = read_notebook(student_path)
    sol_path = solution_path_for(student_path, lab)
    sol = read_notebook(sol_path)
    lost = [] if partial else None
    merged = merge_student(student, sol, name=shown(student_path), missing=lost)
    exs = exercises(sol)
    code_at = [i for i, c in enumerate(sol.cells) if c.cell_type == "code"]
    bounds = [e.cell for e in exs] + [len(code_at)]
    ranges = [(None, code_at[:bounds[0]])] + [(e, code_at[bounds[j]:bounds[j + 1]]) for j, e in enumerate(exs)]
    theirs, ours = _positions(student), _positions(sol)

    def where(label, k):
        """'JupyterLab: Cell n/N', the cell's number in JupyterLab's status bar, in the student's notebook (in the
        solution's if they removed cells)."""
        key = None if label == "setup" else label
        p = theirs.get(key, [])
        return (f"JupyterLab: Cell {p[k]}/{len(student.cells)}" if k < len(p) else
                f"JupyterLab: Cell {ours[key][k]}/{len(sol.cells)}")

    if not quiet:
        print(f"Grading {shown(student_path)}: your exercise cells with the checks of solutions/{sol_path.name}, in "
              f"a fresh kernel ...", flush=True)
    runs, rows, trusted = {}, [], {}
    end_of = {cells[-1]: n for n, (_, cells) in enumerate(ranges) if cells}
    skip = {i for i in code_at if nbval_options(sol.cells[i])["skip"]}
    merged_code = [c for c in merged.cells if c.cell_type == "code"]
    student_cells = [(e.id, cell_source(merged_code[e.cell])) for e in exs]

    crashed = set()                 # exercises whose cells the kernel died in: the reference stands in after them

    def judge_exercise(n):
        """The trusted verdict of exercise n (once its cell ran in the kernel), in a fresh sandboxed worker."""
        ex = ranges[n][0]
        if ex is None or ex.id in trusted:
            return
        k = [e.id for e in exs].index(ex.id)
        s = framework.fresh_seed() if seed is None else int(seed)
        stand_in = [e.id for e in exs[:k] if trusted.get(e.id, {}).get("status") != "pass" or e.id in crashed]
        # an earlier exercise that killed the kernel would kill this worker too: its cell is left out there
        cells = [(e, "" if e in crashed else src) for e, src in student_cells[:k]] + [student_cells[k]]
        trusted[ex.id] = verdicts.verdict(ex.id, cells, s, Path(work) / f"worker_{ex.id}", cache,
                                          hidden_cases, timeout, unsafe=not sandboxed, stand_in=stand_in)

    def resume(i):
        """After the kernel died in cell i: a fresh kernel runs again the cells before that exercise, the reference
        stands in for its function, and grading goes on with the next exercise (nothing to resume in the setup)."""
        ex, cells = next(r for r in ranges if i in r[1])
        later = [c for c in code_at if c > cells[-1] and c not in skip]
        if ex is None or not later:
            return None
        crashed.add(ex.id)
        fn = framework.get(ex.id).function
        stand_in = (f"from hybrid_lab.exercises import framework as _grader_framework\n"
                    f"{fn} = _grader_framework.get({ex.id!r}).reference\ndel _grader_framework\n")
        return [c for c in code_at if c < cells[0] and c not in skip], stand_in, later

    with tempfile.TemporaryDirectory(prefix="hybrid_lab_grade_") as work, \
            tempfile.TemporaryDirectory(prefix="hybrid_lab_answers_removed_") as cache:
        tmp = Path(work) / "kernel"                 # the kernel's scratch: it never sees the workers' folders
        tmp.mkdir()
        for i, run in run_cells(merged, tmp, timeout, skip=skip, sandboxed=sandboxed, resume=resume):
            runs[i] = run
            if fail_fast and (run.error or i in end_of):
                n = next(n for n, (_, cells) in enumerate(ranges) if i in cells)
                judge_exercise(n)
                if not _verdict(*ranges[n], runs, sol, where, trusted).passed:
                    break
        for n, (ex, cells) in enumerate(ranges):
            if ex is not None and cells and cells[0] in runs:
                judge_exercise(n)
    for ex, cells in ranges:
        row = _verdict(ex, cells, runs, sol, where, trusted)
        if ex is not None and lost and ex.id in lost:
            row.passed, row.details = False, []
            row.message = (f"no cell starts with '{cell_source(sol.cells[cells[0]]).lstrip().splitlines()[0]}' "
                           f"(the line was changed or the cell deleted): graded as not done")
        if ex is not None or not row.passed:
            rows.append(row)
    if not quiet:
        print(format_table(rows, student_path.name))
    return rows


def format_table(rows, name: str = "") -> str:
    total = sum(r.points for r in rows)
    got = sum(r.points for r in rows if r.passed)
    w = max([8] + [len(r.exercise) for r in rows])
    pad = " " * (w + 18)
    lines = [f"{'exercise':<{w}}  points  result  what the check says (Cell n/N: as JupyterLab's status bar "
             f"numbers the selected cell)", f"{'-' * w}  ------  ------  {'-' * 40}"]
    for r in rows:
        lines.append(f"{r.exercise:<{w}}  {r.points:>6}  {'PASS' if r.passed else 'NEEDS' if r.needs_triton else 'FAIL':<6}  {r.message}".rstrip())
        lines += [pad + "  " + d for d in r.details]
        if r.notes:
            more = f" (+{len(r.notes) - 4} more lines)" if len(r.notes) > 4 else ""
            lines.append(pad + f"not graded, printed by your code or a warning{more}:")
            lines += [pad + "  " + n for n in r.notes[:4]]
    n_pass = sum(r.passed for r in rows if r.exercise != "setup")
    n_todo = sum(r.not_done for r in rows)
    n_triton = sum(r.needs_triton for r in rows)
    n_fail = sum(not r.passed for r in rows) - n_todo - n_triton
    verdict = ("all exercises pass" if all(r.passed for r in rows) else
               "the exercises that run here pass; grade the rest where Triton runs"
               if all(r.passed or r.needs_triton for r in rows) else "FAILED")
    lines.append(f"score: {got}/{total} points ({n_pass} pass, {n_fail} fail, {n_todo} not done yet"
                 + (f", {n_triton} need Triton" if n_triton else "") + f"); {verdict}"
                 + (f" [{name}]" if name else ""))
    return "\n".join(lines)


def fill_with_solutions(lab_nb, sol_nb):
    """A lab with the solution code put back into its exercise cells (the grader's self-test)."""
    filled = copy.deepcopy(lab_nb)
    sol_code = [c for c in sol_nb.cells if c.cell_type == "code"]
    lab_code = [c for c in filled.cells if c.cell_type == "code"]
    for e in exercises(sol_nb):
        lab_code[e.cell].source = cell_source(sol_code[e.cell])
    return filled
