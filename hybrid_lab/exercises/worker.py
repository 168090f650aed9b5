"""The student's side of a trusted verdict: ``python -m hybrid_lab.exercises.worker REQUEST`` (inside the sandbox).

The grader (:mod:`hybrid_lab.exercises.verdicts`) writes REQUEST (a pickle it made itself: the exercise id, the
student's exercise cells, the cases) and starts this module in a sandbox whose ``hybrid_lab`` is a copy with the
exercise's answers removed. It defines the student's function from their cells and runs it on every case; each
outcome (:func:`hybrid_lab.exercises.framework.run_student`) goes back as one line of plain data
(:mod:`hybrid_lab.core.codec`) on the file descriptor the grader reads. It never sees a reference result and
decides nothing: whatever this process does, the grader compares the data with the reference it runs itself.
"""
from __future__ import annotations

import os
import pickle
import sys
import traceback


def _emit(out, line_kind: str, **fields) -> None:
    from hybrid_lab.core import codec

    try:
        line = codec.encode(dict(fields, line_kind=line_kind))
    except ValueError as exc:                       # a result that cannot cross: a failing case, said why
        line = codec.encode({"line_kind": line_kind, "ok": False, "kind": "raised", "type": "ValueError",
                             "what": f"the result cannot be sent back to the grader: {exc}", "line": ""})
    out.write(line + "\n")
    out.flush()


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    sys.stdout = sys.stderr                         # what the student's code prints is shown, never read as data
    with open(argv[0], "rb") as f:
        req = pickle.load(f)

    from hybrid_lab.exercises import framework

    ex = framework.get(req["exercise"])
    ns: dict = {"__name__": "__main__"}
    exec(compile(ex.preamble, "<preamble>", "exec"), ns)
    for tag, source, path in req["cells"]:
        with open(path, "w", encoding="utf-8") as f:
            f.write(source)                         # a real file: tracebacks and @triton.jit read the source
        try:
            exec(compile(source, path, "exec"), ns)
        except BaseException as exc:                # noqa: BLE001 - the student's cell, whatever it raises
            if tag != req["exercise"]:
                continue                            # an earlier exercise's cell: that exercise's own verdict
            if framework.is_stub_error(exc):
                _emit(out, "cell", ok=False, kind="stub")
            else:
                tb = [fr.lineno for fr in traceback.extract_tb(exc.__traceback__) if fr.filename == path]
                _emit(out, "cell", ok=False, kind="raised", type=type(exc).__name__,
                      what=(str(exc).strip().splitlines() or [""])[0][:200], line=tb[-1] if tb else 0)
            return 0
        if tag in req.get("stand_in", ()):          # as in the notebook: after a FAIL the reference stands in
            ns[framework.get(tag).function] = framework.get(tag).reference
    fn = ns.get(ex.function)
    _emit(out, "cell", ok=True, callable=callable(fn), name=getattr(fn, "__name__", ex.function) if fn else "",
          shown=framework.shown_value(fn))
    if not callable(fn):
        return 0
    for case in req["cases"]:
        outcome = framework.run_student(ex, fn, case, ns)
        _emit(out, "case", **outcome)
    return 0


if __name__ == "__main__":
    sys.exit(main())
