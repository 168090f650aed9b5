"""The one link between an exercise check (``hybrid_lab.exercises``) and the grader (``hybrid_lab.course``).

While ``hybrid-lab grade`` runs a notebook it sets ``HYBRID_LAB_GRADE_LOG`` to a file in its scratch folder; every
``check(...)`` appends one JSON line there with its verdict. In a student's JupyterLab the variable is unset and
nothing is written: the check only prints.
"""
from __future__ import annotations

import json
import os

GRADE_LOG_ENV = "HYBRID_LAB_GRADE_LOG"
STATUSES = ("pass", "fail", "not_done")


def record(exercise: str, status: str, message: str, details=()) -> None:
    """Append one verdict to the grader's log (no-op outside grading).

    exercise: id like "01.3"; status: one of STATUSES; message: one line; details: more lines (cases that fail,
    how to reproduce)."""
    if status not in STATUSES:
        raise ValueError(f"status: expected one of {STATUSES}, got {status!r}")
    path = os.environ.get(GRADE_LOG_ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"exercise": exercise, "status": status, "message": message,
                            "details": list(details)}) + "\n")


def read_log(path) -> list[dict]:
    """The records a grading run wrote, in order (an unreadable line is skipped: a student's print cannot forge a
    well-formed record by accident)."""
    out = []
    try:
        text = open(path, encoding="utf-8").read()
    except FileNotFoundError:
        return out
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("status") in STATUSES and isinstance(rec.get("exercise"), str):
            out.append(rec)
    return out
