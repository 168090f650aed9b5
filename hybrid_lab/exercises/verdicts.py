"""Verdicts for credit, decided in the grader's process, never in the student's.

For each exercise of a submission the grader (this module, in its own process):

1. draws the cases itself (``seed``: the lecturer's, never the student's; plus the lecturer's hidden cases, see
   :func:`hidden_cases`) and runs the reference on them;
2. starts a fresh process in a sandbox (:mod:`hybrid_lab.core.sandbox`) whose ``hybrid_lab`` is a copy with the
   exercise's answers *removed from the source*: every function the exercise forbids and its reference have their
   bodies replaced by a ``LibraryCallError`` (so no alias, reload, ``sys.modules`` game or re-read of the module's
   file can reach them: the code is not on that disk);
3. there, :mod:`hybrid_lab.exercises.worker` runs the student's exercise cells and their function on the cases and
   sends back each outcome as plain data (:mod:`hybrid_lab.core.codec`: no pickle);
4. compares the outcomes with the reference's results here (:func:`hybrid_lab.exercises.framework.judge`, the same
   comparison as the in-notebook check); a case whose inputs the function changed (the worker compares them before
   and after each call and says which) fails. That report comes from the student's process, like the results: code
   that hid a change there could as well have left the input alone: hiding one gains nothing.

Nothing the student's code does can change a verdict: patching ``check`` or numpy, writing a verdict file, exiting,
forking, reading files: all of it happens in a process whose only output the grader reads is its function's results.
"""
from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import inspect
import os
import pickle
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

from hybrid_lab.core import codec, sandbox
from hybrid_lab.exercises import framework

__all__ = ["stripped_package", "run_exercise", "hidden_cases", "load_hidden", "HIDDEN_FILE"]

_PACKAGES = ("hybrid_lab", "gpu_track")
_SKIP = {"__pycache__", "checkpoints"}
HIDDEN_FILE = "hidden_cases.py"          # in solutions/: the lecturer's cases, not in the students' copy


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    locs = list(spec.submodule_search_locations or []) if spec else []
    return Path(locs[0]) if locs else None


def _targets(ex: framework.Exercise) -> list[tuple[str, str]]:
    """[(module name, qualname)] of the code an exercise's answer lives in: its forbidden callables and its
    reference, where they are *defined* (an alias is found through the object it names)."""
    out = []
    objs = [ex.reference]
    for spec in ex.forbidden:
        try:
            objs.append(framework.resolve_forbidden(spec))
        except (ImportError, AttributeError):
            continue
    for obj in objs:
        obj = getattr(obj, "fn", obj)                          # a @triton.jit kernel: its Python function
        obj = obj.fget if isinstance(obj, property) else getattr(obj, "__func__", obj)   # property, classmethod
        obj = inspect.unwrap(obj) if callable(obj) else obj
        mod, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
        if isinstance(mod, str) and isinstance(qual, str) and mod.split(".")[0] in _PACKAGES:
            out.append((mod, qual))                            # a closure: "outer.<locals>.inner"
    return sorted(set(out))


class _Strip(ast.NodeTransformer):
    """Replace the bodies of the functions at ``quals`` (dotted paths inside one module) by a raise."""

    def __init__(self, quals, module):
        self.quals, self.module, self.path, self.done = set(quals), module, [], set()

    def _visit_scope(self, node):
        self.path.append(node.name)
        qual = ".".join(self.path)
        inner = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        if qual in self.quals and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            msg = (f"{self.module}.{qual} is not available while an exercise is graded: it is the answer, and "
                   f"{framework.SWITCHED_OFF}")
            node.body = ast.parse("raise __import__('hybrid_lab.exercises.framework', fromlist=['x'])"
                                  f".LibraryCallError({msg!r})").body
            self.done.add(qual)
        else:
            if inner:                                          # what a function defines is "f.<locals>.g"
                self.path.append("<locals>")
            self.generic_visit(node)
            if inner:
                self.path.pop()
        self.path.pop()
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _visit_scope


def _copy_tree(src: Path, dst: Path) -> None:
    for root, dirs, files in os.walk(src):
        dirs[:] = [d for d in dirs if d not in _SKIP]
        rel = Path(root).relative_to(src)
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for f in files:
            if not f.endswith((".pyc", ".npz")):
                shutil.copyfile(Path(root) / f, dst / rel / f)


def stripped_package(ex: framework.Exercise, dest) -> list[str]:
    """Copy ``hybrid_lab`` and ``gpu_track`` into ``dest`` with the answer to ``ex`` removed (see the module
    docstring); the trained checkpoints are linked, not copied. Returns the folders the sandbox must show read-only
    (the real checkpoints)."""
    dest = Path(dest)
    by_module: dict = {}
    for mod, qual in _targets(ex):
        by_module.setdefault(mod, []).append(qual)
    readonly = []
    for name in _PACKAGES:
        src = _package_dir(name)
        if src is None:
            continue
        _copy_tree(src, dest / name)
        ck = src / "trained" / "checkpoints"
        if ck.is_dir():
            os.symlink(ck.resolve(), dest / name / "trained" / "checkpoints")
            readonly.append(str(ck.resolve()))
    for mod, quals in by_module.items():
        rel = Path(*mod.split("."))
        path = dest / rel.with_suffix(".py")
        if not path.exists():
            path = dest / rel / "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        strip = _Strip(quals, mod)
        path.write_text(ast.unparse(ast.fix_missing_locations(strip.visit(tree))) + "\n", encoding="utf-8")
    return readonly


# ------------------------------------------------------------------------------------------------ hidden cases
def load_hidden(path) -> dict:
    """The lecturer's hidden cases: a Python file defining ``CASES = {exercise id: fn(rng) -> [Case]}``
    (``solutions/hidden_cases.py``; it never ships to students). {} for None."""
    if path is None:
        return {}
    path = Path(path)
    spec = importlib.util.spec_from_file_location("hybrid_lab_hidden_cases", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cases = getattr(mod, "CASES", None)
    if not isinstance(cases, dict):
        raise ValueError(f"{path} must define CASES = {{exercise id: fn(rng) -> [Case]}}")
    return cases


def hidden_cases(hidden: dict, ex_id: str, rng) -> list:
    fn = hidden.get(ex_id)
    return list(fn(rng)) if fn is not None else []


# ------------------------------------------------------------------------------------------------ one exercise
@functools.lru_cache(maxsize=None)
def _stripped_cached(ex_id: str, root: str) -> tuple:
    dest = Path(root) / f"pkg_{ex_id.replace('.', '_')}"
    ro = stripped_package(framework.get(ex_id), dest)
    return str(dest), tuple(ro)


def run_exercise(ex_id: str, cells: list, cases: list, scratch, cache, timeout: int = 300,
                 unsafe: bool = False, stand_in=()) -> tuple[dict, list, str]:
    """Run the student's exercise cells and function on ``cases`` in a sandboxed worker.

    cells: [(exercise id, source)] of the student's exercise cells up to and including ``ex_id``'s, in notebook
    order; scratch: the worker's writable folder (fresh); cache: where the stripped packages are kept (the grader's,
    never shown to a worker); stand_in: earlier exercises that did not pass (their reference replaces the student's
    function after their cell, as in the notebook). Returns (cell outcome, [case outcomes], what the process wrote to stderr)."""
    scratch = Path(scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    pkg, ro = _stripped_cached(ex_id, str(cache))
    req = {"exercise": ex_id, "cases": cases, "stand_in": list(stand_in),
           "cells": [(tag, src, str(scratch / f"exercise_{tag.replace('.', '_')}.py")) for tag, src in cells]}
    with open(scratch / "request.pkl", "wb") as f:
        pickle.dump(req, f)
    argv = [sys.executable, "-s", "-B", "-m", "hybrid_lab.exercises.worker", str(scratch / "request.pkl")]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYBRID_LAB_GRADE", "COVERAGE"))}
    env["PYTHONPATH"] = pkg
    env["MPLBACKEND"] = "Agg"
    if unsafe:
        cmd = argv
        env.update(HOME=str(scratch), TMPDIR=str(scratch))
    else:
        cmd, env = sandbox.wrap(argv, scratch, readonly=(pkg, *ro), env=env)
    popen = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env, cwd=str(scratch))
    if os.name == "posix":
        popen["preexec_fn"] = sandbox.limits(timeout + 5)
    proc = subprocess.Popen(cmd, **popen)
    ended = None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        out, err = proc.communicate()
        ended = f"ran longer than {timeout} s (an endless loop?)"
    lines = []
    for raw in out.decode("utf-8", "replace").splitlines():
        try:
            rec = codec.decode(raw)
        except ValueError:
            continue                                     # not the worker's data (or broken): never a result
        if isinstance(rec, dict) and rec.get("line_kind") in ("cell", "case"):
            lines.append(rec)
    cell = next((r for r in lines if r["line_kind"] == "cell"), None)
    outcomes = [r for r in lines if r["line_kind"] == "case"][:len(cases)]
    if ended is None and proc.returncode != 0:
        ended = _ended_why(proc.returncode, bool(framework.get(ex_id).needs))
    elif ended is None and cell is not None and cell.get("callable") and len(outcomes) < len(cases):
        ended = "the process ended before it returned (sys.exit / os._exit in the student's code?)"
    if ended is not None and cell is not None and len(outcomes) < len(cases):
        outcomes.append({"ok": False, "kind": "ended", "why": ended})
    if cell is None:
        cell = {"ok": False, "kind": "ended", "why": ended or "the exercise cell did not run"}
    return cell, outcomes, err.decode("utf-8", "replace")


_CRASHES = {getattr(signal, n) for n in ("SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE") if hasattr(signal, n)}


def _ended_why(code: int, kernel: bool) -> str:
    """Why the worker ended with exit status ``code`` (negative: the signal that killed it). A crash (SIGSEGV, SIGBUS,
    ...) in a Triton exercise is the student's kernel: the interpreter reads and writes raw memory, unchecked."""
    if code < 0 and -code in _CRASHES:
        who = "your kernel crashed" if kernel else "the process crashed"
        hint = ("an out-of-bounds access? Triton's interpreter does not check addresses: mask every load and store "
                "that can reach past a buffer" if kernel else "an out-of-bounds access in native code?")
        return f"{who} (signal {-code}, {signal.Signals(-code).name}: {hint})"
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else "?"
        # Name what can send it, not a guess: the limits, or the code itself (os.kill).
        cause = {"SIGXCPU": "the CPU-time limit", "SIGKILL": "the memory or time limit, the system, or os.kill in "
                 "the code"}.get(name, "a signal sent to it")
        return f"the process was killed by signal {-code} ({name}: {cause})"
    return f"the process ended with exit status {code} before it returned"


def _kill(proc) -> None:
    try:
        os.killpg(proc.pid, 9) if os.name == "posix" else proc.kill()
    except (ProcessLookupError, PermissionError, OSError):
        proc.kill()


def verdict(ex_id: str, cells: list, seed: int, scratch, cache, hidden: dict | None = None, timeout: int = 300,
            unsafe: bool = False, stand_in=()) -> dict:
    """The trusted verdict of one exercise: {"status", "message", "details", "stderr"} (see the module docstring)."""
    ex = framework.get(ex_id)
    if framework.missing_modules(ex):                      # this machine cannot run it: not a FAIL, 0 points here
        return dict(status=framework.NEEDS_STATUS, message=framework.NEEDS_MESSAGE, details=[], stderr=[])
    rng = np.random.default_rng(seed)
    cases = ex.cases(rng) + hidden_cases(hidden or {}, ex_id, rng)
    wants = framework.reference_results(ex, cases)
    cell, outcomes, err = run_exercise(ex_id, cells, cases, scratch, cache, timeout, unsafe, stand_in)
    stderr = [ln for ln in err.splitlines() if ln.strip()]
    if not cell.get("ok"):
        kind = cell.get("kind")
        if kind == "stub":
            return dict(status="not_done", message=f"not done yet: {ex.function} raises NotImplementedError",
                        details=[], stderr=stderr, cell=True)
        if kind == "raised":
            line = f" (line {cell['line']} of your cell)" if cell.get("line") else ""
            return dict(status="fail", message=f"your exercise cell raised {cell.get('type')}: {cell.get('what')}"
                        f"{line}", details=[], stderr=stderr, cell=True)
        return dict(status="fail", message=f"your exercise cell did not run: {cell.get('why')}", details=[],
                    stderr=stderr, cell=True)
    if not cell.get("callable"):
        return dict(status="fail", message=f"{ex.function} is {cell.get('shown', 'missing')}, not a function "
                                           f"(define it in the exercise cell)", details=[], stderr=stderr)
    v = framework.judge(ex, cell.get("name") or ex.function, cases, outcomes, wants, seed)
    return dict(status=v.status, message=v.message, details=list(v.details), stderr=stderr)

