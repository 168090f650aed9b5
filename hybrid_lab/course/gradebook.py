"""A course gradebook: a roster maps submission files to students, one gradebook holds every lab, and exports that an
LMS imports (Gradescope, Canvas, Moodle).

    hybrid-lab grade subs01/ --lab 01 --roster roster.csv --gradebook gradebook.csv --exports lms/
    hybrid-lab grade subs02/ --lab 02 --roster roster.csv --gradebook gradebook.csv --exports lms/

The roster is a CSV with the columns ``id, name, email, pattern``: ``pattern`` is a shell pattern (``*``, ``?``,
``[abc]``; case-insensitive) matched against a submission's file name and its path inside the class folder
(``erin_oneil/lab1.ipynb``); an empty pattern means ``*<id>*``. Nothing here ends a run: what does not fit is a flag
on the student's row (the ``flags`` column) and in the printed summary:

* a file no roster entry matches (or that two entries match) is graded and listed under its file name, with no id;
* a student with no submission gets 0 for the lab and the flag ``no submission``;
* a student with several submissions: the newest (file modification time) is graded, the others are named in the
  flag and not graded (Canvas, too, keeps a student's most recent submission);
* an exercise whose header line was changed scores 0 (the others are graded) and is flagged.

The gradebook CSV has a row per student and a column per exercise, per lab total, the grand total and its maximum;
file names in it are relative to the class folder. Beside it, ``<name>.json`` keeps each lab's results: grading
another lab into the same gradebook adds that lab's columns, grading a lab again replaces them.
"""
from __future__ import annotations

import csv
import fnmatch
import json
import re
from dataclasses import dataclass
from pathlib import Path

ROSTER_COLUMNS = ("id", "name", "email", "pattern")
NO_SUBMISSION = "no submission"
UNMATCHED = "no roster entry matches this file"
CHANGED_HEADER = "changed header line"     # the grader's row message then starts "no cell starts with"


@dataclass
class Student:
    id: str
    name: str
    email: str
    pattern: str

    def matches(self, student: str, rel: str) -> bool:
        pat = (self.pattern or f"*{self.id}*").lower()
        names = {student.lower(), rel.lower(), Path(rel).name.lower(), Path(rel).stem.lower()}
        # also without punctuation and spaces, so that *oneil* finds "Erin O'Neil - lab 1 (v2)"
        names |= {re.sub(r"[^0-9a-z]", "", n) for n in names}
        return any(fnmatch.fnmatchcase(n, pat) for n in names)


def read_roster(path) -> list[Student]:
    """The roster's students, in the file's order. Raises ValueError for a missing column, an empty or repeated id."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"roster: expected a CSV file with the columns {', '.join(ROSTER_COLUMNS)}, got {str(path)!r} "
                         f"(no such file)")
    with open(path, newline="", encoding="utf-8-sig") as f:      # utf-8-sig: a spreadsheet's byte-order mark
        reader = csv.DictReader(f)
        head = [(h or "").strip().lower() for h in (reader.fieldnames or [])]
        if not set(ROSTER_COLUMNS) <= set(head):
            raise ValueError(f"roster {path.name}: expected the columns {', '.join(ROSTER_COLUMNS)}, got "
                             f"{', '.join(head) or 'none'}")
        out, seen = [], set()
        for n, raw in enumerate(reader, start=2):
            row = {(k or "").strip().lower(): (v or "").strip() for k, v in raw.items()}
            if not any(row.values()):
                continue
            if not row["id"]:
                raise ValueError(f"roster {path.name} line {n}: expected a student id, got an empty one")
            if row["id"] in seen:
                raise ValueError(f"roster {path.name} line {n}: expected each id once, got {row['id']!r} again")
            seen.add(row["id"])
            out.append(Student(row["id"], row["name"], row["email"], row["pattern"]))
    return out


@dataclass
class Assignment:
    """Which submission is graded for whom, and what is flagged."""
    chosen: list          # (Student or None, Submission, flags): the submissions to grade
    missing: list         # the roster's students with no submission


def assign(subs, roster) -> Assignment:
    """Map the collected submissions (``classgrade.Submission``: student, path, rel) to the roster's students; with
    no roster (None) the student is the name the file or folder gives. See the module docstring for the rules."""
    by_key: dict = {}
    chosen = []
    if roster is None:
        for s in subs:
            by_key.setdefault(s.student, []).append(s)
        keyed = [(None, group) for group in by_key.values()]
    else:
        keyed = []
        groups: dict = {st.id: [] for st in roster}
        for s in subs:
            hits = [st for st in roster if st.matches(s.student, s.rel)]
            if len(hits) == 1:
                groups[hits[0].id].append(s)
            else:
                why = UNMATCHED if not hits else "matches several roster entries: " + ", ".join(h.id for h in hits)
                chosen.append((None, s, [why]))
        keyed = [(st, groups[st.id]) for st in roster if groups[st.id]]
    for st, group in keyed:
        group = sorted(group, key=lambda s: (s.path.stat().st_mtime, s.rel), reverse=True)
        flags = []
        if len(group) > 1:
            flags.append(f"{len(group)} submissions: graded the newest, {group[0].rel}; not graded: "
                         + ", ".join(s.rel for s in group[1:]))
        chosen.append((st, group[0], flags))
    missing = [] if roster is None else [st for st in roster if not any(c[0] is st for c in chosen)]
    return Assignment(chosen, missing)


# ------------------------------------------------------------------------------------------- the gradebook file
def lab_record(lab: str, lab_name: str, exs, results) -> dict:
    """One lab's results as stored in the gradebook's JSON (``results``: classgrade.Result)."""
    return {"lab": lab, "name": lab_name,
            "exercises": [{"id": e.id, "points": e.points, "title": e.title} for e in exs],
            "results": [{"id": r.student_id, "student": r.student, "name": r.name, "email": r.email,
                         "file": r.path, "status": r.status, "points": r.points, "total": r.total,
                         "max": r.max_points, "flags": r.flags,
                         "rows": [{k: d[k] for k in ("exercise", "points", "passed", "message", "details")}
                                  for d in r.rows if d.get("exercise") != "setup"]}
                        for r in results]}


def store_path(csv_path) -> Path:
    return Path(csv_path).with_suffix(".json")


def load_book(csv_path) -> dict:
    """The gradebook's stored labs ({} for a new one)."""
    p = store_path(csv_path)
    if not p.exists():
        return {"labs": {}}
    book = json.loads(p.read_text())
    if not isinstance(book, dict) or "labs" not in book:
        raise ValueError(f"gradebook: expected {p.name} written by hybrid-lab grade --gradebook, got another file")
    return book


def add_lab(csv_path, record: dict, roster=None) -> dict:
    """Put (or replace) one lab in the gradebook at ``csv_path``, rewrite its CSV and JSON; returns the book."""
    book = load_book(csv_path)
    book["labs"][record["lab"]] = record
    if roster is not None:
        book["roster"] = [vars(s) for s in roster]
    book["labs"] = dict(sorted(book["labs"].items()))
    store_path(csv_path).parent.mkdir(parents=True, exist_ok=True)
    store_path(csv_path).write_text(json.dumps(book, indent=1))
    write_gradebook(book, csv_path)
    return book


def _rows(book: dict) -> list[dict]:
    """One dict per student across labs: id, name, email, {lab: result}; the roster's order first, then students
    only some lab's results know (no roster, or files no roster entry matched)."""
    people: dict = {}
    for st in book.get("roster", []):
        people[st["id"]] = {"id": st["id"], "name": st["name"], "email": st["email"], "labs": {}}
    for lab, rec in book["labs"].items():
        for r in rec["results"]:
            key = r["id"] or f"?{r['student']}"
            p = people.setdefault(key, {"id": r["id"], "name": r["name"] or r["student"], "email": r["email"],
                                        "labs": {}})
            p["labs"][lab] = r
    return list(people.values())


def write_gradebook(book: dict, csv_path) -> None:
    labs = book["labs"]
    head = ["id", "name", "email"]
    for lab, rec in labs.items():
        head += [e["id"] for e in rec["exercises"]] + [f"lab {lab}"]
    head += ["total", "max", "flags"]
    # similarity (course/similarity.py) has its own column, only once a lab has it: never in "flags", which the
    # Gradescope export shows students
    similar = any("similarity" in r for rec in labs.values() for r in rec["results"])
    head += ["similarity"] if similar else []
    grand_max = sum(sum(e["points"] for e in rec["exercises"]) for rec in labs.values())
    with open(csv_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(head)
        for p in _rows(book):
            line, flags, total = [p["id"], p["name"], p["email"]], [], 0
            for lab, rec in labs.items():
                r = p["labs"].get(lab)
                pts = r["points"] if r else {}
                line += [pts.get(e["id"], 0) for e in rec["exercises"]] + [r["total"] if r else 0]
                total += r["total"] if r else 0
                if r is None:
                    flags.append(f"lab {lab}: {NO_SUBMISSION}")
                else:
                    flags += [f"lab {lab}: {x}" for x in r["flags"]]
                    if r["status"] not in ("graded", NO_SUBMISSION):
                        flags.append(f"lab {lab}: {r['status']} ({r['file']})")
            sim = [f"lab {lab}: {x}" for lab in labs if p["labs"].get(lab)
                   for x in p["labs"][lab].get("similarity", [])]
            w.writerow(line + [total, grand_max, "; ".join(flags)] + (["; ".join(sim)] if similar else []))


def add_similarity(csv_path, lab: str, notes: dict) -> dict:
    """Store lab ``lab``'s similarity notes ({(student, file): [note]}, course/similarity.py) in the gradebook at
    ``csv_path`` and rewrite its CSV; scores and flags stay as they are. Returns the book."""
    book = load_book(csv_path)
    if lab not in book["labs"]:
        raise ValueError(f"lab: expected a lab the gradebook holds ({', '.join(book['labs']) or 'none'}), got {lab!r}")
    for r in book["labs"][lab]["results"]:
        r["similarity"] = list(notes.get((r["student"], r["file"]), []))
    store_path(csv_path).write_text(json.dumps(book, indent=1))
    write_gradebook(book, csv_path)
    return book


def flag_lines(book: dict) -> list[str]:
    """Every flag of the gradebook, one line each (for the summary a lecturer reads after a run)."""
    out = []
    for p in _rows(book):
        who = p["id"] or "(no id)"
        for lab in book["labs"]:
            r = p["labs"].get(lab)
            if r is None:
                out.append(f"{who} {p['name']}: lab {lab}: {NO_SUBMISSION}")
            else:
                out += [f"{who} {p['name']}: lab {lab}: {x}" for x in r["flags"]]
    return out


# ------------------------------------------------------------------------------------------------------ exports
def _safe(name: str) -> str:
    return re.sub(r"[^\w.-]+", "_", name).strip("_") or "student"


def gradescope_results(result: dict, rec: dict) -> dict:
    """One submission as Gradescope's autograder ``results.json``. Format followed: Gradescope's "Autograder
    Specifications", output format (https://gradescope-autograders.readthedocs.io/en/latest/specs/): a top-level
    ``score`` and ``tests``, each test with ``name``, ``score``, ``max_score`` and ``output``."""
    rows = {d["exercise"]: d for d in result.get("rows", [])}
    tests = []
    for e in rec["exercises"]:
        d = rows.get(e["id"])
        output = (result["status"] if d is None else
                  "\n".join(["PASS" if d["passed"] else "FAIL"] + ([d["message"]] if d["message"] else [])
                            + list(d["details"])))
        tests.append({"name": f"{e['id']}: {e['title']}", "score": float(result["points"].get(e["id"], 0)),
                      "max_score": float(e["points"]), "output": output})
    return {"score": float(sum(t["score"] for t in tests)),
            "output": "; ".join([result["status"]] + result["flags"]), "tests": tests}


def _split_name(name: str) -> tuple[str, str]:
    first, _, last = name.strip().rpartition(" ")
    return (first, last) if first else (last, "")


def write_exports(book: dict, folder) -> list[Path]:
    """Write, under ``folder``: ``gradescope/LAB/<student>/results.json`` per graded submission, ``canvas.csv`` and
    ``moodle.csv`` (one column per lab; students with an id only). Returns the files written."""
    folder = Path(folder)
    written = []
    for lab, rec in book["labs"].items():
        for r in rec["results"]:
            if not r["file"]:
                continue                                    # no submission: nothing to upload
            p = folder / "gradescope" / lab / _safe(r["id"] or f"unmatched_{r['student']}") / "results.json"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(json.dumps(gradescope_results(r, rec), indent=1))
            written.append(p)
    people = [p for p in _rows(book) if p["id"]]
    labs = book["labs"]
    maxes = [sum(e["points"] for e in rec["exercises"]) for rec in labs.values()]

    def score(p, lab):
        r = p["labs"].get(lab)
        return r["total"] if r else 0

    # Canvas: "How do I import grades in the Gradebook?" (Canvas Instructor Guide) and the Ohio State page
    # https://teaching.resources.osu.edu/toolsets/carmencanvas/guides/calculating-final-grades/import-csv-file-carmen-grades:
    # the columns Student, ID, SIS User ID, SIS Login ID, Section, then one column per assignment (a header without
    # "(canvas id)" creates the assignment), an optional "Points Possible" row. Canvas matches a row by ID, SIS User
    # ID or SIS Login ID: ID (Canvas's own number) stays empty, SIS User ID is the roster's id, SIS Login ID its email.
    folder.mkdir(parents=True, exist_ok=True)
    canvas = folder / "canvas.csv"
    with open(canvas, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
                   + [f"hybrid-lab {rec['name']}" for rec in labs.values()])
        w.writerow(["Points Possible", "", "", "", ""] + maxes)
        for p in people:
            w.writerow([p["name"], "", p["id"], p["email"], ""] + [score(p, lab) for lab in labs])
    # Moodle: Grade import, CSV file (docs.moodle.org/en/Grade_import; grade/import/csv in moodle/moodle): a header
    # row, one row per user, a column that identifies the user ("Identify user by": map "Email address" to email
    # address, or "ID number" to ID number) and one column per grade item, mapped to the item on import. The
    # columns follow Moodle's own plain-text grade export (First name, Last name, ID number, Email address, items).
    moodle = folder / "moodle.csv"
    with open(moodle, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["First name", "Last name", "ID number", "Email address"]
                   + [f"hybrid-lab {rec['name']}" for rec in labs.values()])
        for p in people:
            w.writerow([*_split_name(p["name"]), p["id"], p["email"]] + [score(p, lab) for lab in labs])
    return written + [canvas, moodle]
