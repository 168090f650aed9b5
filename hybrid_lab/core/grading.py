"""A log of in-notebook verdicts: every ``check(...)`` appends one JSON line to the file ``HYBRID_LAB_GRADE_LOG``
names, when it is set (a tool that wants the practice verdicts of a run); unset, nothing is written and the check
only prints. No grade reads it: ``hybrid-lab grade`` decides every verdict in its own process
(``hybrid_lab.exercises.verdicts``), since anything in the student's kernel could write this file.
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
