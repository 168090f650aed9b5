"""One check for every graded exercise: the student's function against the reference, on fresh cases.

A lab's exercise cell defines one function (or class) and its check cell hands it to :func:`check`::

    # Exercise 01.1 (2 points, warm-up, ~10 min): one step of the selective recurrence
    def ssm_step(h, x_t, dt_t, A, B_t, C_t, D):
        ...

    ssm_step = check("01.1", ssm_step)

``check`` looks the exercise up (``hybrid_lab/exercises/labNN.py`` registers an :class:`Exercise` per id), draws
*fresh* random cases plus the exercise's edge cases (a new seed every run, printed when something fails so the
student can reproduce it), runs the reference and the student's function on copies of each, and compares them
with a tolerance that catches a 1e-3 relative error. It prints one verdict:

* ``PASS``: the student's function is returned and the cells below use it;
* ``FAIL``: which case, which output, where, got vs expected (``y wrong at t=0: ...; h right``);
* ``not done yet``: the function still raises the stub's NotImplementedError;
* ``needs Triton``: the exercise is a Triton kernel and Triton is not installed here (macOS, Windows); nothing is
  run, it is worth 0 points here and is graded where Triton runs (Linux, Colab, the course hub).

Every call's inputs are compared before and after it: a function that changes an array, list or dict it was given
(``params[name] -= lr * g``, ``h *= decay``, ``preds.setdefault(...)``) fails that case, naming the input, unless
the exercise's contract is to change it (:attr:`Exercise.mutates`).

After a FAIL or a stub the *reference* is returned, so Run All goes on and every later cell prints what the
reference prints. While the student's function runs, the library functions that solve the exercise are switched off
(calling one fails the case with a message): an exercise cannot be passed by delegating to the library.
Under ``hybrid-lab grade`` the verdict is also appended to the grader's log (``hybrid_lab.core.grading``).
"""
from __future__ import annotations

import copy
import importlib
import inspect
import re
import secrets
import sys
import traceback
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from hybrid_lab.core import grading

SWITCHED_OFF = "it is switched off while the check runs"
STANDS_IN = "The reference implementation stands in for the cells below, so they run as in the reference."
CHECKED_BY_LECTURER = ("checked by your lecturer: this copy has no reference answers, so your function "
                       "only runs once here; the grader (hybrid-lab grade) gives the verdict.")


@dataclass(frozen=True)
class Case:
    """One input to both functions. name: what it tests ("random", "t = 0", "k >= L"); note: the shapes / values
    shown when it fails; copy: hand each function a deep copy (False for big read-only inputs)."""
    name: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    note: str = ""
    copy: bool = True


@dataclass
class Exercise:
    """What a check needs to know about one exercise.

    id: "01.1"; function: the name the student defines; reference: a callable with the student's signature.
    cases(rng) -> [Case]: fresh random cases and the edge cases (rng is seeded per run).
    outputs: names of the parts of a tuple result ("y", "h"), for "y wrong, h right"; axes: {output: index names}.
    forbidden: "module:attr.path" of library callables that solve the exercise; they (and ``reference``) raise
      while the student's function runs. forbidden_names: names in the notebook switched off the same way (the
      student's own recurrent scan while their chunked scan is checked).
    run(fn, case) -> result: how a case is run (default ``fn(*case.args, **case.kwargs)``): a class, a kernel
      launch, a loop over a trace.
    compare(got, want, case) -> str | None: a custom comparison (default: :func:`compare`, numbers to rtol / atol).
    preamble: the imports the exercise cell may rely on (the tests run the solution code with it).
    float_errors: run the student's function under ``np.errstate(over="raise", invalid="raise")``: an overflow or
      an invalid operation fails the case (when avoiding it is the lesson, e.g. clamping before ``exp``; a Triton
      kernel too, under Triton's interpreter, which computes with numpy; not on a GPU).
    mutates: names of the inputs the exercise's contract lets the function change in place (06.2: "updating
      ``cache`` in place and returning it is fine"). Every other array / list / dict input (and what it holds) is
      compared before and after each call: a change fails the case (:func:`changed_input`).
    inputs: names of a case's positional arguments, where they are not the function's parameters (an exercise with
      its own ``run`` that passes them on in another order); default: the reference's parameter names.
    """
    id: str
    function: str
    reference: Callable
    cases: Callable[[np.random.Generator], list]
    outputs: tuple = ()
    axes: dict = field(default_factory=dict)
    forbidden: tuple = ()
    forbidden_names: tuple = ()
    run: Callable | None = None
    compare: Callable | None = None
    rtol: float = 1e-6
    atol: float = 1e-9
    preamble: str = "import numpy as np"
    float_errors: bool = False
    mutates: tuple = ()
    inputs: tuple = ()
    needs: tuple = ()           # modules the exercise cannot run without ("triton"): missing -> "needs Triton"


NEEDS_STATUS = "needs_triton"
NEEDS_MESSAGE = ("needs Triton, which installs on Linux only (not on macOS or Windows): not run here, 0 points "
                 "here; run it on Linux, Colab, or the course hub")


def missing_modules(ex: Exercise) -> list[str]:
    """The modules of ``ex.needs`` that cannot be imported here."""
    out = []
    for name in ex.needs:
        try:
            importlib.import_module(name)
        except ImportError:
            out.append(name)
    return out


EXERCISES: dict[str, Exercise] = {}


def register(ex: Exercise) -> Exercise:
    if ex.id in EXERCISES:
        raise ValueError(f"exercise {ex.id}: registered twice")
    EXERCISES[ex.id] = ex
    return ex


def get(exercise_id: str) -> Exercise:
    """The registered exercise ``exercise_id`` ("01.1"); imports ``hybrid_lab.exercises.lab01`` on first use."""
    if not isinstance(exercise_id, str) or "." not in exercise_id:
        raise ValueError(f"exercise_id: expected a string like '01.1', got {exercise_id!r}")
    if exercise_id not in EXERCISES:
        try:
            importlib.import_module(f"hybrid_lab.exercises.lab{exercise_id.split('.')[0]}")
        except ModuleNotFoundError:
            pass
    if exercise_id not in EXERCISES:
        raise ValueError(f"exercise_id: no exercise {exercise_id!r}; known: {', '.join(sorted(EXERCISES)) or 'none'}")
    return EXERCISES[exercise_id]


# ----------------------------------------------------------------------------------------------- comparing
class LibraryCallError(RuntimeError):
    """The student's function called a library function that is the answer to the exercise."""


class RuleBroken(RuntimeError):
    """The student's function returned a result without doing what the exercise asks (a Triton exercise whose
    output was computed without launching the student's own ``@triton.jit`` kernel)."""


def shown_value(v) -> str:
    """``v`` as a message shows it (numbers to 6 digits, long reprs cut)."""
    return _fmt(v)


def _fmt(v) -> str:
    if isinstance(v, (float, np.floating)):
        return f"{float(v):.6g}"
    if isinstance(v, (np.bool_, bool)):
        return str(bool(v))
    if isinstance(v, (np.integer,)):
        return str(int(v))
    s = repr(v)
    return s if len(s) <= 120 else s[:117] + "..."


def _where(idx, axes) -> str:
    names = list(axes or ())
    if len(names) == len(idx):
        return ", ".join(f"{n}={i}" for n, i in zip(names, idx))
    return "[" + ", ".join(str(i) for i in idx) + "]"


def _plain(v):
    """Numbers and containers as plain Python (np scalars -> int/float, arrays and tuples -> lists)."""
    if isinstance(v, np.ndarray):
        return [_plain(x) for x in v.tolist()] if v.ndim else _plain(v.item())
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    return v


def _is_numeric(v) -> bool:
    if isinstance(v, (bool, np.bool_)):
        return True
    if isinstance(v, (int, float, np.integer, np.floating)):
        return True
    if isinstance(v, np.ndarray):
        return v.dtype.kind in "biuf"
    torch = sys.modules.get("torch")                        # a tensor means torch is loaded: never import it here
    return torch is not None and isinstance(v, torch.Tensor)


def _array(v):
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(v, torch.Tensor):
        return v.detach().cpu().numpy()
    return np.asarray(v)


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _int_array(v):
    """v as an array when it holds only integers (an object array: Python ints of any size), else None."""
    if not (_is_numeric(v) or isinstance(v, np.ndarray)):
        return None
    a = _array(v)
    if a.dtype.kind in "iu" or (a.dtype == object and a.size and all(_is_int(x) for x in a.flat)):
        return a
    return None


def _py_number(x):
    """A number as a Python int / float (exact: Python compares an int and a float by their exact values)."""
    if isinstance(x, (bool, np.bool_)):
        return int(x)
    return int(x) if _is_int(x) else float(x) if isinstance(x, (float, np.floating)) else x


def _compare_exact_ints(got, w, name, axes) -> str | None:
    """compare_values for an integer reference that int64 cannot hold (or mixed signed / unsigned, or Python ints in
    an object array): every entry exactly, as Python ints (numpy would go through float64 and round past 2^53); a
    float equals only the very integer."""
    try:
        g = _array(got)
    except Exception:
        return f"{name} is {_fmt(got)}, expected an int / array of ints"
    if g.dtype.kind not in "biufO" or (g.dtype == object and not all(
            isinstance(x, (int, float, np.integer, np.floating, bool, np.bool_)) for x in g.flat)):
        return f"{name} is {_fmt(got)}, expected integers"
    if g.shape != w.shape:
        return f"{name} has shape {g.shape}, expected {w.shape}"
    gl = [_py_number(x) for x in g.flat]
    wl = [int(x) for x in w.flat]
    bad = [i for i, (a, b) in enumerate(zip(gl, wl)) if not a == b]
    if not bad:
        return None
    idx = tuple(int(i) for i in np.unravel_index(bad[0], w.shape)) if w.ndim else ()
    gv, wv = gl[bad[0]], wl[bad[0]]
    where = f" at {_where(idx, axes)}" if w.ndim else ""
    count = f" ({len(bad)} of {w.size} entries)" if w.ndim and w.size > 1 else ""
    why = ""
    if isinstance(gv, float) and abs(wv) > 2 ** 53:
        why = "; a float holds integers exactly only up to 2^53: return an int"
    elif g.dtype.kind in "iu" and not np.iinfo(g.dtype).min <= wv <= np.iinfo(g.dtype).max:
        why = f"; numpy's {g.dtype} cannot hold it (it wraps around): compute with Python ints"
    verb = "is wrong" if name == "the result" else "wrong"
    return f"{name} {verb}{where}{count}: got {_fmt(gv)}, expected {wv} (an integer, exactly){why}"


def compare_values(got, want, name: str = "the result", axes=(), rtol: float = 1e-6, atol: float = 1e-9) -> str | None:
    """None when ``got`` matches ``want``, else one phrase saying how it differs.

    Numbers / arrays: same shape, NaN where the reference has NaN, and |got - want| <= atol * max(1, max|want|) +
    rtol * |want| elementwise (a 1e-3 relative error fails); integers and booleans exactly, integers of any size
    too (a Python int past 2^64, an object array of them: compared as Python ints; a float there equals only the very
    integer). Anything else (lists of ints, tuples, dicts, strings): equal as plain Python values."""
    w_int = _int_array(want)
    if w_int is not None:
        try:
            g_kind = _array(got).dtype.kind
        except Exception:
            g_kind = "?"
        # past int64 (Python ints: uint64 up to 2^64, object arrays beyond) numpy's comparisons go through float64
        past_int64 = w_int.dtype == object or (w_int.dtype.kind == "u" and w_int.size
                                               and int(w_int.max()) > np.iinfo(np.int64).max)
        if past_int64 or g_kind == "O" or {w_int.dtype.kind, g_kind} == {"i", "u"}:
            return _compare_exact_ints(got, w_int, name, axes)
    if _is_numeric(want):
        try:
            g = _array(got)
        except Exception:
            return f"{name} is {_fmt(got)}, expected a number / array"
        w = _array(want)
        if g.dtype.kind not in "biuf":
            return f"{name} is {_fmt(got)}, expected numbers"
        if g.shape != w.shape:
            return f"{name} has shape {g.shape}, expected {w.shape}"
        if w.dtype.kind in "biu" and w.size:
            bad = g != w
        else:
            g, w = g.astype(np.float64), w.astype(np.float64)
            if not w.size:
                return None
            scale = max(1.0, float(np.nanmax(np.abs(np.where(np.isfinite(w), w, 0.0)))))
            with np.errstate(invalid="ignore", over="ignore"):
                close = np.isfinite(w) & (np.abs(g - w) <= atol * scale + rtol * np.abs(w))
            close |= (g == w)                                   # equal infinities (an inf never matches a finite)
            close |= np.isnan(g) & np.isnan(w)
            bad = ~close
        if not bad.any():
            return None
        idx = tuple(int(i) for i in np.argwhere(bad)[0]) if g.ndim else ()
        gv, wv = (g[idx], w[idx]) if g.ndim else (g.item(), w.item())
        where = f" at {_where(idx, axes)}" if g.ndim else ""
        count = f" ({int(bad.sum())} of {bad.size} entries)" if g.ndim and bad.size > 1 else ""
        rel = ""
        if np.isfinite(gv) and np.isfinite(wv) and wv != 0 and w.dtype.kind == "f":
            rel = f", relative error {abs(float(gv) - float(wv)) / abs(float(wv)):.1e}"
        verb = "is wrong" if name == "the result" else "wrong"
        return f"{name} {verb}{where}{count}: got {_fmt(gv)}, expected {_fmt(wv)}{rel}"
    if _plain(got) != _plain(want):
        return f"{name} is {_fmt(_plain(got))}, expected {_fmt(_plain(want))}"
    return None


def compare(ex: Exercise, got, want, case: Case) -> str | None:
    """The default comparison: part by part for a tuple result with named outputs ("y wrong at t=3: ...; h right")."""
    if ex.compare is not None:
        return ex.compare(got, want, case)
    if ex.outputs:
        n = len(ex.outputs)
        if not isinstance(got, (tuple, list)) or len(got) != n:
            return (f"{ex.function} returned {type(got).__name__}"
                    + (f" of length {len(got)}" if isinstance(got, (tuple, list)) else "")
                    + f"; expected a tuple ({', '.join(ex.outputs)})")
        probs = [compare_values(g, w, nm, ex.axes.get(nm, ()), ex.rtol, ex.atol)
                 for g, w, nm in zip(got, want, ex.outputs)]
        if not any(probs):
            return None
        right = [nm for nm, p in zip(ex.outputs, probs) if p is None]
        return "; ".join(p for p in probs if p) + (f"; {', '.join(right)} right" if right else "")
    return compare_values(got, want, "the result", ex.axes.get("result", ()), ex.rtol, ex.atol)


# ----------------------------------------------------------------------------------------------- inputs left unchanged
def _scalar_equal(a, b) -> bool:
    if a is b:
        return True
    try:
        if bool(a == b):
            return True
    except Exception:                                     # an object whose == is not a truth value
        return False
    try:
        return bool(np.isnan(a)) and bool(np.isnan(b))
    except (TypeError, ValueError):
        return False


def _index(idx) -> str:
    return "[" + ", ".join(str(int(i)) for i in idx) + "]"


def input_change(before, after, path: str) -> str | None:
    """None when the input ``after`` (as it is after the call) equals ``before`` (a deep copy of it from before the
    call), else where it changed, in one phrase ("params['Wq'] at [0, 1, 0] was 0.31, now 0.28 (8 of 8 entries)").

    Arrays (numpy, torch): shape, dtype and every entry (NaN equals NaN); dicts: keys and values; lists and tuples:
    length and entries; numbers and strings inside them: equal. Other objects (a model, a cache, a tree) are not
    compared: only the arrays, lists and dicts a function is handed."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(before, torch.Tensor):
        if not isinstance(after, torch.Tensor):
            return f"{path} is now a {type(after).__name__}"
        before, after = before.detach().cpu().numpy(), after.detach().cpu().numpy()
    if isinstance(before, np.ndarray):
        if not isinstance(after, np.ndarray):
            return f"{path} is now a {type(after).__name__}"
        if after.shape != before.shape:
            return f"{path} now has shape {after.shape}, it had {before.shape}"
        if after.dtype != before.dtype:
            return f"{path} now has dtype {after.dtype}, it had {before.dtype}"
        if before.dtype.kind == "O":
            same = np.array([_scalar_equal(a, b) for a, b in zip(after.flat, before.flat)], bool).reshape(before.shape)
        else:
            with np.errstate(invalid="ignore"):
                same = np.asarray(after == before)
                if before.dtype.kind in "fc":
                    same = same | (np.isnan(after) & np.isnan(before))
        if same.all():
            return None
        bad = ~same
        if before.ndim == 0:
            return f"{path} was {_fmt(before.item())}, now {_fmt(after.item())}"
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        count = f" ({int(bad.sum())} of {bad.size} entries)" if bad.size > 1 else ""
        return f"{path} at {_index(idx)} was {_fmt(before[idx])}, now {_fmt(after[idx])}{count}"
    if isinstance(before, dict):
        if not isinstance(after, dict):
            return f"{path} is now a {type(after).__name__}"
        gone = [k for k in before if k not in after]
        if gone:
            return f"{path} lost its key {gone[0]!r}"
        added = [k for k in after if k not in before]
        if added:
            return f"{path} gained a key {added[0]!r}"
        for k in before:
            why = input_change(before[k], after[k], f"{path}[{k!r}]")
            if why:
                return why
        return None
    if isinstance(before, (list, tuple)):
        if not isinstance(after, (list, tuple)):
            return f"{path} is now a {type(after).__name__}"
        if len(after) != len(before):
            return f"{path} now has {len(after)} entries, it had {len(before)}"
        for i, (b, a) in enumerate(zip(before, after)):
            why = input_change(b, a, f"{path}[{i}]")
            if why:
                return why
        return None
    if isinstance(before, (set, frozenset)):
        return None if before == after else f"{path} was {_fmt(before)}, now {_fmt(after)}"
    if isinstance(before, (bool, int, float, complex, str, bytes, np.generic, type(None))):
        return None if _scalar_equal(before, after) else f"{path} was {_fmt(before)}, now {_fmt(after)}"
    return None                                            # an object: not compared


def input_names(ex: Exercise) -> list:
    """The names of a case's positional arguments: ``ex.inputs``, else the reference's parameters."""
    if ex.inputs:
        return list(ex.inputs)
    ref = getattr(ex.reference, "fn", ex.reference)         # a @triton.jit kernel: its Python function
    try:
        params = inspect.signature(ref).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def changed_input(ex: Exercise, before: Case, after: Case) -> dict | None:
    """The first input of the case that the call changed, {"input": its name, "where": what changed}, or None.
    before: the case as drawn (untouched); after: the copy the function was handed. Inputs named in
    ``ex.mutates`` are not compared."""
    names = input_names(ex)
    pairs = [(names[i] if i < len(names) else f"argument {i + 1}", b, a)
             for i, (b, a) in enumerate(zip(before.args, after.args))]
    pairs += [(k, before.kwargs[k], after.kwargs.get(k)) for k in before.kwargs]
    for name, b, a in pairs:
        if name in ex.mutates:
            continue
        where = input_change(b, a, name)
        if where:
            return {"input": name, "where": where}
    return None


def changed_message(ex: Exercise, changed: dict) -> str:
    """'04.2: your function changed its input params (params['Wq'] at [0, 1, 0] was 0.31, now 0.28; params must be
    left unchanged: ...)'."""
    name = changed.get("input", "?")
    return (f"{ex.id}: your function changed its input {name} ({changed.get('where', '')}; {name} must be left "
            f"unchanged: build new arrays, or change a copy)")


# ----------------------------------------------------------------------------------------------- the library switched off
def _resolve(spec: str):
    """'pkg.mod:Class.attr' -> (owner object, attribute name, the callable)."""
    mod, _, path = spec.partition(":")
    owner = importlib.import_module(mod)
    parts = path.split(".")
    for p in parts[:-1]:
        owner = getattr(owner, p)
    return owner, parts[-1], getattr(owner, parts[-1])


def resolve_forbidden(spec: str):
    """The callable a ``forbidden`` entry ('pkg.mod:Class.attr') names."""
    return _resolve(spec)[2]


def _guard(ex: Exercise, qualname: str):
    def guard(*args, **kwargs):
        raise LibraryCallError(f"{ex.function} calls {qualname}; exercise {ex.id} asks you to write this part "
                               f"yourself ({SWITCHED_OFF})")
    guard.__name__ = guard.__qualname__ = qualname.rsplit(".", 1)[-1]
    return guard


@contextmanager
def library_switched_off(ex: Exercise, globals_: dict | None = None):
    """Inside the block, the exercise's forbidden callables (and its reference) raise LibraryCallError wherever
    they are reached from: their own module, any hybrid_lab / gpu_track module that imported them, a class, or the
    notebook's namespace ``globals_`` (under any alias)."""
    targets = {}
    for spec in ex.forbidden:
        owner, name, obj = _resolve(spec)
        raw = inspect.getattr_static(owner, name) if inspect.isclass(owner) else obj
        targets[id(raw)] = (spec.replace(":", "."), raw)
        targets.setdefault(id(obj), (spec.replace(":", "."), obj))
    ref = ex.reference
    targets.setdefault(id(ref), (f"the reference of exercise {ex.id}", ref))
    patched = []
    spaces = [m for n, m in list(sys.modules.items())
              if m is not None and (n == "hybrid_lab" or n.startswith(("hybrid_lab.", "gpu_track")))]
    for m in spaces:
        for name, value in list(vars(m).items()):
            if id(value) in targets and callable(value):
                patched.append((m, name, value))
        for name, cls in list(vars(m).items()):
            if inspect.isclass(cls) and cls.__module__ == m.__name__:
                for attr, value in list(vars(cls).items()):
                    if id(value) in targets:
                        patched.append((cls, attr, value))
    if globals_ is not None:
        for name in ex.forbidden_names:
            if callable(globals_.get(name)):
                targets.setdefault(id(globals_[name]), (f"your own {name}", globals_[name]))
        for name, value in list(globals_.items()):
            if id(value) in targets and callable(value) and not name.startswith("__"):
                patched.append((globals_, name, value))
    done = []
    try:
        for owner, name, value in patched:
            qual = targets[id(value)][0]
            guard = _guard(ex, qual)
            if isinstance(value, (staticmethod, classmethod)):
                guard = type(value)(guard)
            elif isinstance(value, property):                  # reading it raises, with the same message
                guard = property(guard)
            if isinstance(owner, dict):
                owner[name] = guard
            else:
                setattr(owner, name, guard)
            done.append((owner, name, value))
        yield
    finally:
        for owner, name, value in reversed(done):
            if isinstance(owner, dict):
                owner[name] = value
            else:
                setattr(owner, name, value)


# ----------------------------------------------------------------------------------------------- one run
@dataclass
class Verdict:
    exercise: str
    status: str                 # "pass", "fail", "not_done", "needs_triton"
    message: str                # one line
    details: list = field(default_factory=list)
    cases: list = field(default_factory=list)   # names of the cases run

    @property
    def passed(self) -> bool:
        return self.status == "pass"


def is_stub_error(exc: BaseException) -> bool:
    """The stub's NotImplementedError, also when wrapped (Triton's interpreter re-raises it inside its own error)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, NotImplementedError) or "NotImplementedError" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _library_call(exc: BaseException) -> LibraryCallError | None:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, LibraryCallError):
            return exc
        if SWITCHED_OFF in str(exc):
            return LibraryCallError(str(exc).split("LibraryCallError: ")[-1].strip("'\")"))
        exc = exc.__cause__ or exc.__context__
    return None


def _student_line(exc: BaseException, fn) -> str:
    """' (line N of your cell)' for the innermost frame of the traceback that is in the student's cell."""
    code = getattr(fn, "__code__", None) or getattr(getattr(fn, "fn", None), "__code__", None)
    if code is None and inspect.isclass(fn):
        try:
            fname = inspect.getsourcefile(fn)
        except TypeError:
            fname = None
    else:
        fname = code.co_filename if code else None
    if not fname:
        return ""
    lines = [fr.lineno for fr in traceback.extract_tb(exc.__traceback__) if fr.filename == fname]
    return f" (line {lines[-1]} of your cell)" if lines else ""


def _call(ex: Exercise, fn, c: Case):
    if ex.run is not None:
        return ex.run(fn, c)
    return fn(*c.args, **c.kwargs)


def _run(ex: Exercise, fn, case: Case):
    return _call(ex, fn, copy.deepcopy(case) if case.copy else case)


def _label(cases) -> list[str]:
    """Case names made unique: a name used n > 1 times becomes 'name #1' ... 'name #n'."""
    count, seen, out = Counter(c.name for c in cases), Counter(), []
    for c in cases:
        seen[c.name] += 1
        out.append(c.name if count[c.name] == 1 else f"{c.name} #{seen[c.name]}")
    return out


def _summary(cases) -> str:
    count = Counter(c.name for c in cases)
    return ", ".join(n if k == 1 else f"{n} ×{k}" for n, k in count.items())


def fresh_seed() -> int:
    return secrets.randbelow(10 ** 7)


def run_student(ex: Exercise, fn, case: Case, globals_: dict | None = None) -> dict:
    """Run the student's ``fn`` on one case with the library switched off: an *outcome*, plain data that the grader
    can carry between processes. ``{"ok": True, "value": result}``, or ``{"ok": False, "kind": k, ...}`` with k one
    of "stub" (the stub's NotImplementedError), "library" (a switched-off library function was called;
    "message"), "rule" (:class:`RuleBroken`: "message"), "interrupted" (stop button / timeout) or "raised" ("type", "what", "line": where in the cell). The
    grader adds "ended" ("why") for a case its sandboxed process did not finish (it died, or ran out of time).
    ``SystemExit`` counts as raised: ``sys.exit()`` in an exercise is a wrong answer, not the end of the check.
    A result comes with "changed" ({"input", "where"}: :func:`changed_input`) when the call changed one of its inputs;
    :func:`judge` fails that case."""
    given = copy.deepcopy(case) if case.copy else case          # the function's own copy of the inputs
    before = case if case.copy else copy.deepcopy(case)          # ... and what they were
    try:
        with library_switched_off(ex, globals_), np.errstate(**(
                {"over": "raise", "invalid": "raise"} if ex.float_errors else {})):
            value = _call(ex, fn, given)
        out = {"ok": True, "value": value}
        changed = changed_input(ex, before, given)
        if changed:
            out["changed"] = changed
        return out
    except KeyboardInterrupt:                                      # the stop button, or the grader's cell timeout
        return {"ok": False, "kind": "interrupted"}
    except (Exception, SystemExit) as exc:                         # the student's code raised: a verdict, not a crash
        lib = _library_call(exc)
        if lib is not None:
            return {"ok": False, "kind": "library", "message": str(lib)}
        if isinstance(exc, RuleBroken):
            return {"ok": False, "kind": "rule", "message": str(exc)}
        if is_stub_error(exc):
            return {"ok": False, "kind": "stub"}
        kind, what = type(exc).__name__, (str(exc).strip().splitlines() or [""])[0][:200]
        fpe = _float_error(exc) if ex.float_errors else None
        if fpe is not None:           # also from inside Triton's interpreter, which wraps it in its own error
            kind, what = "FloatingPointError", f"{fpe} ({FLOAT_ERRORS_WHY})"
        return {"ok": False, "kind": "raised", "type": kind, "what": what, "line": _student_line(exc, fn)}


FLOAT_ERRORS_WHY = ("this check fails an overflow even when a mask hides the inf afterwards: keep exp's argument "
                    "in range, e.g. clamp it before exp")


def _float_error(exc: BaseException) -> str | None:
    """The message of a FloatingPointError (np.errstate's) in ``exc``'s chain, or named in its text (Triton's
    interpreter re-raises it as "InterpreterError: FloatingPointError('overflow encountered in exp')")."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, FloatingPointError):
            return (str(exc).strip().splitlines() or ["overflow"])[0][:200]
        m = re.search(r"FloatingPointError\((['\"])(.*?)\1\)", str(exc))
        if m:
            return m.group(2)[:200]
        exc = exc.__cause__ or exc.__context__
    return None


def judge(ex: Exercise, name: str, cases: list, outcomes, wants, seed: int) -> Verdict:
    """The verdict on the student's outcomes (:func:`run_student`, one per case, in order; fewer when the run
    stopped) against the reference's results ``wants``. The one comparison of both modes: the in-notebook check
    (outcomes from this process) and the grader (outcomes brought back from the student's sandboxed process)."""
    labels = _label(cases)
    failures = []
    reproduce = f'reproduce these cases: check("{ex.id}", {name}, seed={seed})'
    outcomes = list(outcomes)
    for i, (label, case) in enumerate(zip(labels, cases)):
        out = outcomes[i] if i < len(outcomes) else {"ok": False, "kind": "interrupted"}
        if not out.get("ok"):
            kind = out.get("kind")
            if kind == "interrupted":
                return Verdict(ex.id, "fail", f'case "{label}": {name} was interrupted before it returned (an '
                                              f'endless loop?)', [reproduce], labels)
            if kind in ("library", "rule"):
                return Verdict(ex.id, "fail", f'case "{label}": {out.get("message", "")}', [], labels)
            if kind == "ended":                                    # the student's process died or was stopped
                return Verdict(ex.id, "fail", f'case "{label}": {out.get("why", "")}', [reproduce], labels)
            if kind == "stub" and not failures:
                return Verdict(ex.id, "not_done", f"not done yet: {name} raises NotImplementedError", [], labels)
            if kind == "stub":
                failures.append((label, case, f"{name} raised NotImplementedError"))
            else:
                failures.append((label, case, f"{name} raised {out.get('type', 'an exception')}: "
                                              f"{out.get('what', '')}{out.get('line', '')}"))
            continue
        problem = compare(ex, out["value"], wants[i], case)
        if out.get("changed"):                                     # the inputs must come back as they were given
            problem = changed_message(ex, out["changed"]) + (f"; and {problem}" if problem else "")
        if problem:
            failures.append((label, case, problem))
    if not failures:
        return Verdict(ex.id, "pass", f"{name} agrees with the reference on {len(cases)} cases ({_summary(cases)})",
                       [], labels)
    label, case, problem = failures[0]
    details = [f'case "{label}"' + (f" ({case.note})" if case.note else "") + f": {problem}"]
    if len(failures) > 1:
        details.append("also wrong: " + ", ".join(f'"{f[0]}"' for f in failures[1:6])
                       + (f" and {len(failures) - 6} more" if len(failures) > 6 else ""))
    details.append(reproduce)
    return Verdict(ex.id, "fail", f"{name} is wrong on {len(failures)} of {len(cases)} cases", details, labels)


def reference_results(ex: Exercise, cases: list) -> list:
    """The reference's result on every case (each on its own copy of the inputs)."""
    return [_run(ex, ex.reference, case) for case in cases]


def evaluate(exercise_id: str, fn, seed: int | None = None, globals_: dict | None = None) -> Verdict:
    """Run the student's ``fn`` on the exercise's cases (``seed``: None draws a fresh one). Prints nothing."""
    ex = get(exercise_id)
    seed = fresh_seed() if seed is None else int(seed)
    name = getattr(fn, "__name__", ex.function)
    if not callable(fn):
        return Verdict(ex.id, "fail", f"{ex.function} is {_fmt(fn)}, not a function", [])
    if missing_modules(ex):
        return Verdict(ex.id, NEEDS_STATUS, NEEDS_MESSAGE, [])
    cases = ex.cases(np.random.default_rng(seed))
    if globals_ is None:
        globals_ = getattr(fn, "__globals__", None)
    wants, outcomes = [], []
    for case in cases:                      # one case at a time: a stub or an interrupt ends the run, as judged
        wants.append(_run(ex, ex.reference, case))
        outcomes.append(run_student(ex, fn, case, globals_))
        if not outcomes[-1]["ok"] and outcomes[-1]["kind"] in ("interrupted", "library", "rule"):
            break
    return judge(ex, name, cases, outcomes, wants, seed)


MODES = ("practice", "assignment", "nbgrader")


class ExerciseFailed(AssertionError):
    """Raised by ``check(..., mode="nbgrader")`` when the exercise does not pass: nbgrader's autograder counts a test
    cell that raises as failed."""


def check(exercise_id: str, fn, *, seed: int | None = None, mode: str = "practice"):
    """Check the student's ``fn`` for exercise ``exercise_id`` and print the verdict (see the module docstring).

    mode "practice" (the labs): returns ``fn`` when it passes, else the reference implementation (so the cells below
    still run). "assignment" (``hybrid-lab build --mode assignment``): no verdict and no reference; it only runs
    ``fn`` once and says whether it ran (grading happens on the lecturer's side); returns ``fn``. "nbgrader" (the
    autograded test cell of ``hybrid-lab export nbgrader``): as practice, and raises ExerciseFailed unless it
    passes."""
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
    ex = get(exercise_id)
    caller = sys._getframe(1).f_globals
    if mode == "assignment" or getattr(ex.reference, "withheld", False):
        if mode != "assignment":        # the student copy (hybrid-lab build --mode student) has no reference
            print(f"Exercise {ex.id}: {CHECKED_BY_LECTURER}")
        return _smoke(ex, fn, seed, caller)
    v = evaluate(exercise_id, fn, seed, globals_=caller)
    if v.status == "pass":
        print(f"Exercise {ex.id} PASS: {v.message}.")
    elif v.status == "not_done":
        print(f"Exercise {ex.id} {v.message}. {STANDS_IN}")
    elif v.status == NEEDS_STATUS:
        print(f"Exercise {ex.id} {v.message}.")
    else:
        print(f"Exercise {ex.id} FAIL: {v.message}.")
        for d in v.details:
            print("  " + d)
        print("  " + STANDS_IN)
    if v.status != NEEDS_STATUS:          # the grader decides that status itself (it may have Triton)
        grading.record(ex.id, v.status, v.message, v.details)
    if mode == "nbgrader" and v.status != "pass":
        if caller.get(ex.function) is fn:      # the cells below (and later exercises) run with the reference
            caller[ex.function] = ex.reference
        raise ExerciseFailed(f"Exercise {ex.id}: {v.message}")
    return fn if v.status == "pass" else ex.reference


def _smoke(ex: Exercise, fn, seed, globals_):
    """Assignment mode: run ``fn`` on one fresh case, say whether it ran; no comparison, no reference."""
    name = getattr(fn, "__name__", ex.function)
    if missing_modules(ex):
        print(f"Exercise {ex.id} {NEEDS_MESSAGE}.")
        return fn
    case = ex.cases(np.random.default_rng(fresh_seed() if seed is None else seed))[0]
    try:
        with library_switched_off(ex, globals_):
            _run(ex, fn, case)
    except Exception as exc:
        if _library_call(exc) is not None:
            print(f"Exercise {ex.id}: {_library_call(exc)}.")
        elif isinstance(exc, RuleBroken):
            print(f"Exercise {ex.id}: {exc}.")
        elif is_stub_error(exc):
            print(f"Exercise {ex.id} not done yet: {name} raises NotImplementedError.")
        else:
            what = (str(exc).strip().splitlines() or [""])[0][:200]
            print(f"Exercise {ex.id}: {name} raised {type(exc).__name__}: {what}{_student_line(exc, fn)}.")
        return fn
    print(f"Exercise {ex.id}: {name} ran on an example. It is graded when you hand in the notebook.")
    return fn
