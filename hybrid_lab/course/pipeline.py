"""The course pipeline: solutions -> labs -> grade.

* ``solutions/NN_name.ipynb`` are the source of truth: executed, outputs stored. Exercise code sits in a code cell
  whose first line is ``# Exercise NN.K (P points): title``, between ``### BEGIN SOLUTION`` / ``### END SOLUTION``.
* ``build`` turns each solution into ``labs/NN_name.ipynb``: every marked region becomes
  ``raise NotImplementedError("Exercise NN.K: title")``; every stored output stays (they are the answers).
* ``grade`` takes a student's lab, puts the student's exercise cells into the *solution* notebook (so the reference
  outputs and the checks come from ``solutions/``, never from what the student saved), runs it in a fresh kernel
  with nbclient and compares what each check cell prints with the reference (nbval's rules: the repo's sanitize file,
  images and widget models not compared). One row per exercise: id, points, PASS/FAIL and the check's own lines that
  differ, with the cell to look at. The code cells after an exercise, up to the next exercise, are its checks.
  Not graded: the exercise cell's own output, anything the student's code prints (also when a check calls it), and
  stderr (warnings): they are shown next to the row.

Command line::

    python -m hybrid_lab.course execute solutions/01_selective_ssm.ipynb   # run in place, store outputs
    python -m hybrid_lab.course build [solutions/NN_x.ipynb ...]           # regenerate labs/ (all by default)
    python -m hybrid_lab.course check                                      # labs/ in sync with solutions/?
    python -m hybrid_lab.course grade labs/01_selective_ssm.ipynb          # exit 1 if anything fails
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import difflib
import importlib.util
import linecache
import os
import re
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
GRADE_DEPS = ("nbformat", "nbclient", "jupyter_client", "ipykernel")  # what grading imports (all in the `lab` extra)
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


def sanitize_file() -> Path:
    return repo_root() / "nbval_sanitize.cfg"


def _nbformat():
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
    nbf = _nbformat()
    try:
        with warnings.catch_warnings():  # nbformat's warnings on a hand-edited notebook (missing cell ids ...)
            warnings.simplefilter("ignore")
            return nbf.read(str(path), as_version=4)
    except Exception as exc:  # invalid JSON, not a notebook, an unknown nbformat version
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
        raise CourseError(f"{shown(path)} is not a readable notebook ({why}); open it in JupyterLab and save it "
                          f"again (File > Save Notebook), then grade it") from None


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
    """The solution a lab is graded against: same file name, else the one solution with the same ``NN_`` number
    (JupyterLab's "Duplicate" names a copy ``01_selective_ssm-Copy1.ipynb``)."""
    lab = Path(lab)
    sols = sorted((repo_root() / "solutions").glob("[0-9][0-9]_*.ipynb"))
    same = [s for s in sols if s.name == lab.name] or [s for s in sols if s.name[:3] == lab.name[:3]]
    if len(same) == 1:
        return same[0]
    names = ", ".join(s.stem[:2] for s in sols)
    raise CourseError(f"{shown(lab)} is not one of the lab's notebooks (its name must start with a lab number: "
                      f"{names}); grade a lab, e.g. {example_lab()}")


def _dump(nb) -> str:
    return _nbformat().writes(nb) + "\n"


def build(paths=None) -> list[Path]:
    """Regenerate labs/ from solutions/ (all notebooks, or the given solution paths)."""
    sols = [Path(p) for p in paths] if paths else sorted((repo_root() / "solutions").glob("[0-9][0-9]_*.ipynb"))
    written = []
    for sol in sols:
        lab = make_lab(read_notebook(sol))
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


def execute(path, timeout: int = 600) -> None:
    """Run a notebook top to bottom in a fresh kernel (cwd = its folder) and store the outputs in place."""
    import nbclient

    path = Path(path)
    nb = read_notebook(path)
    client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}},
                                     on_notebook_start=lambda notebook: poll_in_slices(client.kc))
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as exc:
        last = [ln for ln in str(exc).splitlines() if ln.strip()][-1:] or ["a cell raised"]
        raise CourseError(f"{shown(path)}: a cell raised ({last[0].strip()[:160]}); fix it, then run "
                          f"hybrid-lab execute {shown(path)} again; nothing was written") from None
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    nb.metadata.pop("widgets", None)  # live widget state is session noise
    path.write_text(_dump(nb))


# ------------------------------------------------------------------------------------------------- grading
def merge_student(student_nb, sol_nb, name: str = "the notebook"):
    """The solution notebook with the student's exercise cells swapped in (matched by exercise id)."""
    merged = copy.deepcopy(sol_nb)
    theirs = {}
    for cell in student_nb.cells:
        if cell.cell_type != "code":
            continue
        m = HEADER.match((_source(cell).lstrip().splitlines() or [""])[0])
        if m:
            if m["id"] in theirs:
                raise CourseError(f"{name}: two cells start with '# Exercise {m['id']} ...'; keep one (delete the "
                                  f"other or change its first line) and grade again")
            theirs[m["id"]] = _source(cell)
    exs = exercises(sol_nb)
    missing = [e for e in exs if e.id not in theirs]
    if exs and len(missing) == len(exs):
        raise CourseError(f"{name} is not a lab notebook: no cell starts with '# Exercise {exs[0].id} ...'; grade "
                          f"your copy of the lab, e.g. {example_lab()}")
    if missing:
        e = missing[0]
        raise CourseError(f"{name}: no cell starts with '# Exercise {e.id} ({e.points} points): {e.title}' (the line "
                          f"was changed or the cell deleted); put that line back at the top of the exercise cell")
    code = [c for c in merged.cells if c.cell_type == "code"]
    for ex in exs:
        code[ex.cell].source = theirs[ex.id]
    return merged


# Runs in the grader's kernel before the notebook (never in a student's JupyterLab): what the student's own code prints
# goes to stderr, which is shown and not compared. Without it a debugging print inside the student's function would
# land in the output of the check cell that calls it and fail a correct answer.
_GRADING_KERNEL_SETUP = "from hybrid_lab.course.pipeline import route_exercise_output; route_exercise_output()"
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


@dataclass
class CellRun:
    outputs: list
    error: tuple | None = None      # (ename, evalue) when the cell raised


def _kernel_manager(folder):
    """A kernel of this very Python (the venv the grader runs in), whatever kernelspecs the machine has; on POSIX it
    talks over local sockets in ``folder`` (nothing on the network, no "running over TCP without encryption")."""
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager

    class ThisPython(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):
            return KernelSpec(argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                              display_name="Python 3 (hybrid-lab grader)", language="python")

    ipc = {"transport": "ipc", "ip": str(Path(folder) / "kernel")} if os.name == "posix" else {}
    return AsyncKernelManager(kernel_name="python3", kernel_spec_manager=ThisPython(), **ipc)


def run_cells(nb, cwd, timeout: int = 300, skip=()):
    """Run the code cells of ``nb`` in order in a fresh kernel, going on after errors. Yields (cell index, CellRun).
    Cells whose index is in ``skip`` do not run. A cell over ``timeout`` seconds is interrupted and counts as raising
    TimeoutError; a dead kernel ends the run. The kernel's own log goes to ``cwd/kernel.log``."""
    import nbclient
    from nbclient.exceptions import DeadKernelError

    nb = copy.deepcopy(nb)
    nb.cells.append(_nbformat().v4.new_code_cell(_GRADING_KERNEL_SETUP))  # run first (see below), graded never
    setup = len(nb.cells) - 1
    errors = {}
    client = nbclient.NotebookClient(
        nb, km=_kernel_manager(cwd), timeout=timeout, allow_errors=True, interrupt_on_timeout=True,
        error_on_timeout={"ename": "TimeoutError", "evalue": f"the cell ran longer than {timeout} s (an endless loop?)",
                          "traceback": []},
        on_cell_error=lambda cell, cell_index, execute_reply: errors.__setitem__(cell_index, execute_reply["content"]),
        on_notebook_start=lambda notebook: poll_in_slices(client.kc))
    # the kernel sees the environment a student's JupyterLab has: no headless matplotlib backend
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    kernel = contextlib.ExitStack()
    log_path = Path(cwd) / "kernel.log"  # the kernel process's own messages, not the student's terminal
    log = kernel.enter_context(open(log_path, "w"))
    try:
        kernel.enter_context(client.setup_kernel(cwd=str(cwd), env=env, cleanup_kc=True, stdout=log, stderr=log))
    except Exception as exc:
        kernel.close()
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
        raise CourseError(f"the grader could not start a Python kernel ({why}); reinstall the lab: "
                          f"{install_hint()}") from None
    with kernel:
        for i in [setup] + list(range(setup)):
            cell = nb.cells[i]
            if cell.cell_type != "code" or i in skip:
                continue
            try:
                client.execute_cell(cell, i)
            except DeadKernelError:
                last = [ln for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()][-1:]
                yield i, CellRun([], ("DeadKernelError", "the kernel died while this cell ran (out of memory?)"
                                      + (f"; its last words: {last[0][:160]}" if last else "")))
                return
            cell = nb.cells[i]
            err = errors.get(i)
            if err is None:
                err = next((o for o in cell.outputs if o.output_type == "error"), None)
            run = CellRun(list(cell.outputs),
                          None if err is None else (err.get("ename", "Error"), err.get("evalue", "")))
            if i == setup:
                if run.error:
                    raise CourseError(f"the grader could not prepare its kernel ({run.error[0]}: {run.error[1]}); "
                                      f"reinstall the lab: {install_hint()}")
                continue
            yield i, run


# nbval's rules for comparing a cell's outputs (what `pytest --nbval` checks on the solutions), minus stderr
NOT_COMPARED = {"image/png", "image/jpeg", "application/vnd.jupyter.widget-view+json"}
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
    comments = {ln.strip().lstrip("#").strip() for ln in _source(cell).splitlines() if ln.strip().startswith("#")}
    for marker in (tags | comments) & set(NBVAL_MARKERS):
        key, value = NBVAL_MARKERS[marker]
        opts[key] = value
    return opts


def _sanitizer():
    """nbval's sanitizing with the repo's one sanitize file: regex -> replacement, applied to every text."""
    pats = re.findall(r"^regex: (.*)$\n^replace: (.*)$", sanitize_file().read_text(), flags=re.M)

    def clean(s):
        if isinstance(s, str):
            for regex, replace in pats:
                s = re.sub(regex, replace, s)
        return s

    return clean


def _stream(outputs, name: str) -> str:
    """One stream of a cell, its pieces joined, what a carriage return or a backspace overwrote dropped."""
    text = "".join(_source({"source": o.get("text", "")}) for o in outputs
                   if o.get("output_type") == "stream" and o.get("name") == name)
    old = None
    while old != text:
        old, text = text, re.sub("[^\n]\x08", "", text)
    return re.sub(r"(?m)^.*\r(?=[^\n])", "", text)


def _data(outputs, clean) -> dict:
    """{mime type: [value, ...]} of a cell's results and displays, images and widget models left out."""
    d = {}
    for o in outputs:
        if o.get("output_type") in ("display_data", "execute_result"):
            for k, v in o.get("data", {}).items():
                if k not in NOT_COMPARED:
                    d.setdefault(k, []).append(clean(_source({"source": v}) if isinstance(v, (str, list)) else v))
    return d


def line_diff(expected: str, got: str, label: str = "") -> list[str]:
    """The lines that differ, each in full: 'expected: ...' / 'got: ...' pairs ('(no line)' for a missing one)."""
    a, b = expected.splitlines(), got.splitlines()
    tag = f" ({label})" if label else ""
    out = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            continue
        for k in range(max(i2 - i1, j2 - j1)):
            out.append(f"expected{tag}: " + (a[i1 + k] if i1 + k < i2 else "(no line)"))
            out.append(f"got{tag}:      " + (b[j1 + k] if j1 + k < j2 else "(no line)"))
    return out


def output_diff(ref_outputs, test_outputs, clean) -> list[str]:
    """How a check cell's new outputs differ from the reference: stdout line by line, then other text results.
    stderr (warnings, and whatever the student's code printed) is never compared."""
    lines = line_diff(clean(_stream(ref_outputs, "stdout")), clean(_stream(test_outputs, "stdout")))
    ref, new = _data(ref_outputs, clean), _data(test_outputs, clean)
    for k in sorted(set(ref) | set(new)):
        a, b = ref.get(k, []), new.get(k, [])
        if a == b:
            continue
        if all(isinstance(v, str) for v in a + b):
            lines += line_diff("\n".join(a), "\n".join(b), label=k) or [f"{k}: {len(a)} outputs expected, got {len(b)}"]
        else:
            lines.append(f"{k}: the displayed value differs")
    return lines


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
        m = HEADER.match((_source(cell).lstrip().splitlines() or [""])[0])
        if m:
            key = m["id"]
            pos[key] = []
        pos[key].append(i + 1)
    return pos


def _verdict(ex, cells, runs, ref_nb, clean, where) -> Row:
    """Row of one exercise from its cells' runs. cells: notebook indices, the exercise cell first (none for setup)."""
    label = "setup" if ex is None else ex.id
    row = Row(label, 0 if ex is None else ex.points, True)
    if cells and not any(i in runs or nbval_options(ref_nb.cells[i])["skip"] for i in cells):
        row.passed, row.message = False, "not run: the grader stopped at the first failing exercise (-x)"
        return row
    fails = []
    for k, i in enumerate(cells):
        run = runs.get(i)
        name = (f"setup cell {k + 1}" if ex is None else
                "your exercise cell" if k == 0 else f"check cell {k} of exercise {ex.id}")
        place = f"{name} ({where(label, k)})"
        if run is None:
            if not nbval_options(ref_nb.cells[i])["skip"]:
                fails.append((f"not run: the grader stopped before {name}", []))
            continue
        row.notes += [n for n in _notes(run.outputs, ref_nb.cells[i].outputs) if n not in row.notes]
        stub = _stub_of(run.error)
        opts = nbval_options(ref_nb.cells[i])
        if ex is not None and stub == ex.id:
            why = run.error[1] if run.error[0] == "NotImplementedError" else f"{run.error[0]}: {run.error[1]}"
            fails.append((f"not done yet: NotImplementedError: {why}, raised in {place}", []))
        elif stub is not None:
            fails.append((f"needs exercise {stub}, which is not done yet: NotImplementedError in {place}", []))
        elif run.error and not (opts["raises"] and not (ex is not None and k == 0)):
            fails.append((f"{place} raised {run.error[0]}: {run.error[1]}", []))
        elif (ex is not None and k == 0) or not opts["check"]:
            continue  # the exercise cell's own output is the student's; NBVAL_IGNORE_OUTPUT: never compared
        else:
            diff = output_diff(ref_nb.cells[i].outputs, run.outputs, clean)
            if diff:
                fails.append((f"{place} printed lines that differ:", diff))
    row.notes.sort(key=lambda n: "Warning" not in n)  # warnings first, then what the student's code printed
    if fails:
        row.passed = False
        row.message, row.details = fails[0]
        if len(fails) > 1:
            row.details = row.details + [f"({len(fails) - 1} more failing cell(s) after it)"]
    return row


def grade(student_path, fail_fast: bool = False, quiet: bool = False, timeout: int = 300) -> list[Row]:
    """Grade a student's notebook against solutions/. Returns one Row per exercise (and a 'setup' row on failure)."""
    missing = missing_grade_deps()
    if missing:
        raise CourseError(f"grading needs the Python package(s) {', '.join(missing)}, not installed here; install "
                          f"the lab: {install_hint()}")
    student_path = Path(student_path)
    student = read_notebook(student_path)
    sol_path = solution_path_for(student_path)
    sol = read_notebook(sol_path)
    merged = merge_student(student, sol, name=shown(student_path))
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
    clean, runs, rows = _sanitizer(), {}, []
    end_of = {cells[-1]: n for n, (_, cells) in enumerate(ranges) if cells}
    with tempfile.TemporaryDirectory(prefix="hybrid_lab_grade_") as tmp:
        skip = {i for i in code_at if nbval_options(sol.cells[i])["skip"]}
        for i, run in run_cells(merged, tmp, timeout, skip=skip):
            runs[i] = run
            if fail_fast and (run.error or i in end_of):
                n = next(n for n, (_, cells) in enumerate(ranges) if i in cells)
                if not _verdict(*ranges[n], runs, sol, clean, where).passed:
                    break
    for ex, cells in ranges:
        row = _verdict(ex, cells, runs, sol, clean, where)
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
        lines.append(f"{r.exercise:<{w}}  {r.points:>6}  {'PASS' if r.passed else 'FAIL':<6}  {r.message}".rstrip())
        lines += [pad + "  " + d for d in r.details]
        if r.notes:
            more = f" (+{len(r.notes) - 4} more lines)" if len(r.notes) > 4 else ""
            lines.append(pad + f"not graded, printed by your code or a warning{more}:")
            lines += [pad + "  " + n for n in r.notes[:4]]
    n_pass = sum(r.passed for r in rows if r.exercise != "setup")
    n_todo = sum(r.not_done for r in rows)
    n_fail = sum(not r.passed for r in rows) - n_todo
    verdict = "all exercises pass" if all(r.passed for r in rows) else "FAILED"
    lines.append(f"score: {got}/{total} points ({n_pass} pass, {n_fail} fail, {n_todo} not done yet); {verdict}"
                 + (f" [{name}]" if name else ""))
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
    p.add_argument("-x", "--fail-fast", action="store_true", help="stop at the first failing exercise")
    a = ap.parse_args(argv)
    try:
        return _run(a)
    except CourseError as exc:
        print(f"hybrid-lab: {exc}", file=sys.stderr)
        return 2


def _run(a) -> int:
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
        print("labs/ in sync with solutions/" if not bad else
              "out of sync: " + ", ".join(bad) + "; regenerate them: hybrid-lab build")
        return 1 if bad else 0
    rows = grade(a.path, fail_fast=a.fail_fast)
    return 0 if all(r.passed for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
