"""The ``hybrid-lab`` command: what students and lecturers do with the lab.

    hybrid-lab open                      # JupyterLab on labs/ (adds --allow-root when run as root)
    hybrid-lab grade labs/01_x.ipynb     # per-exercise table, exit 1 if anything fails
    hybrid-lab grade subs/ --lab 01 --csv book.csv --feedback fb/ -j 2     # a class (classgrade.py)
    hybrid-lab grade subs/ --lab 01 --roster r.csv --gradebook gb.csv --exports lms/   # the course (gradebook.py)
    hybrid-lab build [--force]           # regenerate labs/ from solutions/ (lecturers)
    hybrid-lab build --mode assignment --out DIR                           # assignments (release.py)
    hybrid-lab build --mode student --out DIR     # assignments + the package, no solutions (student_copy.py)
    hybrid-lab check                     # every solution executed, every lab in sync?
    hybrid-lab execute solutions/01_x.ipynb
    hybrid-lab slides solutions/01_x.ipynb [--out F] [--mark] [--pdf]     # an offline deck (slides.py)
    hybrid-lab export nbgrader DIR       # an nbgrader course (release.py)
    hybrid-lab bench [NAME ...]          # run benchmarks/bench_*.py (JSON under benchmarks/results/)
    hybrid-lab train EXPERIMENT [--quick] [--jobs N]   # train the small models of notebook 10 (trained/train.py)
    hybrid-lab hub-links --hub URL --repo URL [--branch main] [--lab 01]   # nbgitpuller links (hub.py)
    hybrid-lab colab-links [--repo URL] [--branch main]  # "Open in Colab" links (colab.py)
    hybrid-lab site [--out build/site]   # the course's static website, offline (Jupyter Book; site.py)

Every failure prints one line, ``hybrid-lab: what is wrong; the command that fixes it``, and exits non-zero (2 for a
usage or set-up mistake, 1 when grading finds a failing exercise); never a traceback (``HYBRID_LAB_DEBUG=1`` shows
it for an unexpected error).
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from hybrid_lab.course import classgrade, release, slides
from hybrid_lab.course import pipeline as course

COMMANDS = ("open", "grade", "build", "check", "execute", "bench", "slides", "export", "train", "hub-links", "colab-links",
            "site")
# JupyterLab's plugin that asks "Would you like to get notified about official Jupyter news?" on first start and
# checks for updates; it needs the internet, and its pop-up covers the notebook. (`--LabApp.news_url=None` alone
# does not stop the question: JupyterLab 4 asks as long as the `fetchNews` setting is "none".)
NEWS_PLUGIN = "@jupyterlab/apputils-extension:announcements"


class UsageError(Exception):
    """A mistake on the command line (argparse's error, as one line)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def _usage_line(message: str, argv) -> str:
    """argparse's complaint, rewritten as one line that says what to type."""
    cmd = next((a for a in argv if a in COMMANDS), None)
    if "invalid choice" in message:
        bad = next((a for a in argv if not a.startswith("-")), "?")
        return (f"unknown command {bad!r}; the commands are {', '.join(COMMANDS)} "
                f"(e.g. {course.example_lab()}; hybrid-lab --help)")
    if "required: cmd" in message:
        return (f"say what to do: hybrid-lab open (start the lab) or {course.example_lab()}; "
                f"hybrid-lab --help lists every command")
    if cmd == "grade" and "required" in message:
        return f"which notebook? {course.example_lab()}"
    if cmd == "execute" and "required" in message:
        return "which notebook? hybrid-lab execute solutions/01_selective_ssm.ipynb"
    return f"{message}; see hybrid-lab {cmd + ' ' if cmd else ''}--help"


def lab_config_dir(folder: Path) -> Path:
    """Write the Jupyter configuration `hybrid-lab open` adds (it goes first on JUPYTER_CONFIG_PATH); returns it.

    * labconfig/page_config.json disables :data:`NEWS_PLUGIN` (no news pop-up, no update check);
    * jupyter_server_config.json: the terminal starts the user's shell as a non-login shell, so that it keeps the
      PATH `hybrid-lab open` gives it (a login shell re-reads /etc/profile, which resets PATH on Debian/Ubuntu);
      no news feed or update check from the server either.
    """
    folder = Path(folder)
    (folder / "labconfig").mkdir(parents=True, exist_ok=True)
    (folder / "labconfig" / "page_config.json").write_text(json.dumps({"disabledExtensions": {NEWS_PLUGIN: True}}))
    shell = os.environ.get("SHELL") or shutil.which("bash") or shutil.which("sh") or "sh"
    (folder / "jupyter_server_config.json").write_text(json.dumps({
        "ServerApp": {"terminado_settings": {"shell_command": [shell]}},
        "LabApp": {"news_url": None, "check_for_updates_class": "jupyterlab.NeverCheckForUpdate"},
    }))
    return folder


def open_env(config_dir: Path) -> dict:
    """The environment of the `jupyter lab` process (kernels and terminals inherit it): this Python's bin folder first
    on PATH (the terminal finds `hybrid-lab`, `python`, `pip` of the lab's venv), the lab's config dir first on
    JUPYTER_CONFIG_PATH."""
    env = dict(os.environ)

    def first(folder, var):
        return os.pathsep.join([str(folder)] + [p for p in env.get(var, "").split(os.pathsep) if p])

    env["PATH"] = first(Path(sys.executable).parent, "PATH")
    env["JUPYTER_CONFIG_PATH"] = first(config_dir, "JUPYTER_CONFIG_PATH")
    return env


def _open(args) -> int:
    if importlib.util.find_spec("jupyterlab") is None:
        raise course.CourseError(f"JupyterLab is not installed in this Python; install the lab: "
                                 f"{course.install_hint()}")
    root = course.repo_root()
    folder = root / ("solutions" if args.solutions else "labs")
    cmd = [sys.executable, "-m", "jupyter", "lab", f"--ServerApp.root_dir={folder}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # JupyterLab refuses root without it (containers, CI machines)
    cmd += args.extra
    with tempfile.TemporaryDirectory(prefix="hybrid_lab_jupyter_") as tmp:  # lives as long as JupyterLab
        env = open_env(lab_config_dir(Path(tmp)))
        print(" ".join(cmd), flush=True)
        return subprocess.call(cmd, env=env)


def _bench(args) -> int:
    root = course.repo_root()
    scripts = sorted((root / "benchmarks").glob("bench_*.py"))
    names = [s.stem.removeprefix("bench_") for s in scripts]
    if args.names:
        scripts = [s for s in scripts if any(n in s.stem for n in args.names)]
    if not scripts:
        print(f"hybrid-lab: no benchmark matched {' '.join(args.names)}; the benchmarks are: {', '.join(names)} "
              f"(e.g. hybrid-lab bench {names[0] if names else 'ssm'})", file=sys.stderr)
        return 2
    rc = 0
    for s in scripts:
        print(f"== {s.relative_to(root)}")
        rc |= subprocess.call([sys.executable, str(s)], cwd=root)
    return rc


def _parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="hybrid-lab", description="hybrid-lab: open, grade and maintain the lab")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("open", help="start JupyterLab on labs/ (or --solutions); other arguments go to jupyter lab")
    p.add_argument("--solutions", action="store_true", help="open solutions/ instead of labs/")
    p = sub.add_parser("grade", help="grade a lab notebook against solutions/, or a class of them",
                       description="Grade one notebook (a table, exit 1 if an exercise fails), or a class: a folder "
                       "of submissions of one lab. A course: grade each lab's folder into the same --gradebook "
                       "with the same --roster; each run adds that lab's columns (a rerun replaces them) and "
                       "--exports rewrites the Gradescope / Canvas / Moodle files from the whole gradebook. Never "
                       "stopped by one submission: duplicates (the newest is graded), files no roster entry "
                       "matches, students with no submission and changed exercise headers are flagged.")
    p.add_argument("paths", nargs="+", metavar="SUBMISSION")
    p.add_argument("-x", "--fail-fast", action="store_true", help="stop at the first failing exercise")
    p.add_argument("--lab", help="the lab number (01 ...) when the file names do not start with it")
    p.add_argument("--csv", help="class grading: this lab's CSV to write (file names relative to SUBMISSION)")
    p.add_argument("--roster", help="class grading: a CSV with the columns id, name, email, pattern (a shell pattern "
                                    "matched against the file name, e.g. *oneil*; empty: *ID*)")
    p.add_argument("--gradebook", help="class grading: the course gradebook CSV (a row per student, a column per "
                                       "exercise and lab, totals); this lab is added to it or replaced in it, its "
                                       "results kept beside it as the same name .json")
    p.add_argument("--exports", metavar="DIR",
                   help="class grading: write DIR/gradescope/LAB/STUDENT/results.json, DIR/canvas.csv and "
                        "DIR/moodle.csv (grade-import files; their rows are the roster's students)")
    p.add_argument("--feedback", help="class grading: a folder for one feedback file per student")
    p.add_argument("--similarity", action="store_true",
                   help="class grading: flag exercise code that is a near copy of another student's or of the "
                        "library's; writes similarity_labNN.csv beside the gradebook (or --csv) and the gradebook's "
                        "similarity column; no score changes")
    p.add_argument("-j", "--jobs", type=int, help="class grading: submissions at once (default: all cores)")
    p.add_argument("--timeout", type=int, help="seconds per cell (default 300; class grading 120)")
    p.add_argument("--time-limit", type=int, help="class grading: seconds per submission (default 900)")
    p.add_argument("--memory-mb", type=int, help="class grading: memory per submission in MB (default 8192)")
    p.add_argument("--unsafe", action="store_true",
                   help="grade without the bubblewrap sandbox (a separate process and the audit hook only; a "
                        "determined student can then write files and read the library's source)")
    p.add_argument("--seed", type=int, help="the cases' seed (default: fresh ones per exercise; the lecturer's to "
                                            "reproduce a grade)")
    p.add_argument("--cases", help="the lecturer's hidden cases (default: solutions/hidden_cases.py)")
    p.add_argument("--require-sandbox", action="store_true", help=argparse.SUPPRESS)   # class grading's workers
    p.add_argument("--json", help=argparse.SUPPRESS)     # one submission's rows, for class grading's workers
    p = sub.add_parser("build", help="regenerate labs/ from solutions/")
    p.add_argument("paths", nargs="*")
    p.add_argument("--force", action="store_true", help="overwrite labs that hold edits (a student's work)")
    p.add_argument("--mode", choices=("practice", "assignment", "student"), default="practice",
                   help="assignment: no reference outputs, no verdicts (grading stays with hybrid-lab grade); "
                        "student: the assignments plus a pip-installable package without solutions/ or references")
    p.add_argument("--out", help="--mode assignment / student: the folder to write to")
    p = sub.add_parser("slides", help="write a notebook's slides as one HTML file that works offline")
    p.add_argument("paths", nargs="+")
    p.add_argument("--out", help="the HTML file (default slides/NN_name.html; with --pdf the PDF, slides/NN_name.pdf)")
    p.add_argument("--mark", action="store_true", help="set the cells' slide metadata (lecturers); a slide type set "
                                                         "by hand is kept")
    p.add_argument("--pdf", action="store_true", help="write the deck as a PDF, one page per slide (headless Chromium)")
    p = sub.add_parser("export", help="export nbgrader DIR [NN ...]: an nbgrader course folder of the labs",
                       description=release.EXPORT_HELP, epilog=f"e.g. {release.EXPORT_EXAMPLE}")
    p.add_argument("format", type=release.export_format, metavar="nbgrader", help="the format (nbgrader, the one)")
    p.add_argument("dir", type=release.course_folder, metavar="DIR",
                   help="the course folder to write (created if missing; a new folder or an nbgrader course)")
    p.add_argument("paths", nargs="*", default=[], type=release.solution_arg, metavar="NN",
                   help="the labs to export: 01, 01_selective_ssm or a lab's path (default: every lab)")
    sub.add_parser("check", help="exit 1 if a solution is stale or labs/ is out of sync with solutions/")
    p = sub.add_parser("execute", help="run notebooks in place, storing outputs")
    p.add_argument("paths", nargs="+")
    p = sub.add_parser("bench", help="run benchmarks/bench_*.py")
    p.add_argument("names", nargs="*")
    p = sub.add_parser("train", help="train the small models of notebook 10: train mqar|retrieval|all [--quick] "
                                     "[--jobs N] (hybrid-lab train --help-train for every option)")
    p.add_argument("experiment", nargs="?")
    p.add_argument("--help-train", action="store_true", help=argparse.SUPPRESS)
    p = sub.add_parser("hub-links", help="print an nbgitpuller link per lab (a JupyterHub course; docs/hub)")
    p.add_argument("--hub", required=True, help="the hub's URL, e.g. https://hub.example.edu")
    p.add_argument("--repo", required=True, help="the lab's git repository, e.g. https://github.com/ORG/hybrid-lab")
    p.add_argument("--branch", default="main", help="the branch to pull (default main)")
    p.add_argument("--lab", help="only this lab (01, or 01_selective_ssm)")
    p.add_argument("--target-dir", help="the folder to clone into (default: the repository's name)")
    p = sub.add_parser("colab-links", help="print an 'Open in Colab' link per lab (default: the repository in "
                                           "[tool.hybrid-lab] of pyproject.toml)")
    p.add_argument("--repo", help="the course's GitHub repository, e.g. https://github.com/ORG/hybrid-lab")
    p.add_argument("--branch", help="the branch (default: pyproject's, else main)")
    p = sub.add_parser("site", help="build the course's static website (Jupyter Book; the labs with their stored "
                                    "outputs, in the README's order; works offline)")
    p.add_argument("--out", help="the folder to write (default build/site; an earlier site there is replaced)")
    return ap


def _grade(a) -> int:
    """One notebook (no --csv / --feedback): the per-exercise table, exit 1 if anything fails. Several, or a folder:
    class grading (classgrade.py), exit 1 unless every submission scored full marks."""
    single = (len(a.paths) == 1 and not Path(a.paths[0]).is_dir() and not a.csv and not a.feedback and not a.roster
              and not a.gradebook and not a.exports and not a.similarity)
    if single:      # a class's worker (--json): a changed exercise header loses only that exercise
        rows = course.grade(a.paths[0], fail_fast=a.fail_fast, quiet=bool(a.json), timeout=a.timeout or 300,
                            lab=a.lab, unsafe=a.unsafe or None, seed=a.seed, hidden=a.cases,
                            require_sandbox=a.require_sandbox, partial=bool(a.json))
        if a.json:       # class grading's worker: the rows for the parent process
            Path(a.json).write_text(json.dumps([dataclasses.asdict(r) for r in rows]))
        return 0 if all(r.passed for r in rows) else 1
    results = classgrade.grade_class(a.paths, a.lab or classgrade.common_lab(a.paths), csv_path=a.csv,
                                     feedback=a.feedback, jobs=a.jobs, cell_timeout=a.timeout or 120,
                                     time_limit=a.time_limit or 900, memory_mb=a.memory_mb or 8192,
                                     unsafe=a.unsafe or None, seed=a.seed, hidden=a.cases, roster=a.roster,
                                     gradebook=a.gradebook, exports=a.exports)
    if a.similarity:
        from hybrid_lab.course import similarity
        similarity.report_class(a.paths, a.lab or classgrade.common_lab(a.paths), results, gradebook=a.gradebook,
                                csv_path=a.csv)
    return 0 if all(r.status == "graded" and r.total == r.max_points for r in results) else 1


def _build(a) -> int:
    if a.mode == "student":
        from hybrid_lab.course import student_copy
        if not a.out:
            raise course.CourseError("--mode student needs a folder to write to: hybrid-lab build --mode student "
                                     "--out build/student")
        m = student_copy.build_student_copy(a.out, a.paths or None)
        print(f"wrote {course.shown(a.out)}: {len(m['notebooks'])} assignments, the package without solutions/ "
              f"(pip install {course.shown(a.out)}); what was left out: {course.shown(a.out)}/student_copy.json")
        return 0
    if a.mode == "assignment":
        if not a.out:
            raise course.CourseError("--mode assignment needs a folder to write to: hybrid-lab build --mode "
                                     "assignment --out build/assignment")
        for path in release.build_assignments(a.out, a.paths or None):
            print(f"wrote {course.shown(path)}")
        return 0
    if a.out:
        raise course.CourseError("--out goes with --mode assignment or student (practice labs are always written "
                                 "to labs/)")
    for path in course.build(a.paths or None, force=a.force):
        print(f"wrote {path.relative_to(course.repo_root())}")
    return 0


def _slides(a) -> int:
    if a.out and len(a.paths) > 1:
        raise course.CourseError("--out names one file: give one notebook, or leave --out out (slides/NN_name.html)")
    for path in map(slides.notebook_path, a.paths):
        if a.mark:
            nb = course.read_notebook(path)
            kept = slides.mark_slides(nb)
            Path(path).write_text(course.dumps(nb))
            print(f"marked {course.shown(path)}" + (f" ({len(kept)} cells keep the slide type set by hand)"
                                                    if kept else ""))
        elif a.pdf:
            print(f"wrote {course.shown(slides.write_pdf(path, a.out))}")
        else:
            print(f"wrote {course.shown(slides.write_deck(path, a.out))}")
    return 0


def _export(a) -> int:
    for path in release.export_nbgrader(a.dir, a.paths or None):
        print(f"wrote {course.shown(path)}")
    print(f"an nbgrader course in {course.shown(a.dir)}: cd there, then nbgrader generate_assignment NN_name")
    return 0


def _execute(a) -> int:
    for path in a.paths:
        course.execute(path)
        print(f"executed {path}")
    return 0


def _check(a) -> int:
    bad = course.out_of_sync()
    print("\n".join(["out of sync:"] + ["  " + b for b in bad]) if bad else
          "solutions/ executed and labs/ in sync with them")
    return 1 if bad else 0


def _train(a) -> int:
    from hybrid_lab.trained import train      # torch is imported only by the training processes

    args = ([a.experiment] if a.experiment else []) + a.extra + (["--help"] if a.help_train else [])
    try:
        return train.main(args)
    except SystemExit as exc:                  # argparse's own --help / usage exit
        return int(exc.code or 0)
    except ValueError as exc:
        raise course.CourseError(str(exc)) from None


def _hub_links(a) -> int:
    from hybrid_lab.course import hub
    try:
        links = hub.hub_links(a.hub, a.repo, a.branch, lab=a.lab, target_dir=a.target_dir)
    except ValueError as exc:    # name the option as typed (--target-dir for target_dir)
        msg, first = str(exc), str(exc).split(" ", 1)[0]
        if first in ("hub", "repo", "branch", "lab", "target_dir"):
            msg = "--" + msg.replace("target_dir", "target-dir", 1)
        raise course.CourseError(msg) from None
    for name, link in links:
        print(f"{name}  {link}")
    return 0


def _colab_links(a) -> int:
    from hybrid_lab.course import colab
    try:
        links = colab.colab_links(course.repo_root(), a.repo, a.branch)
    except ValueError as exc:
        raise course.CourseError("--" + str(exc)) from None
    for name, link in links:
        print(f"{name}  {link}")
    return 0


def _site(a) -> int:
    from hybrid_lab.course import site
    index = site.build_site(a.out)
    print(f"wrote {course.shown(index.parent)}: open {course.shown(index)}")
    return 0


HANDLERS = {"site": _site, "hub-links": _hub_links, "colab-links": _colab_links, "train": _train, "open": _open, "bench": _bench, "grade": _grade, "build": _build, "slides": _slides, "export": _export,
            "execute": _execute, "check": _check}


def _dispatch(a) -> int:
    return HANDLERS[a.cmd](a)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        a, unknown = _parser().parse_known_args(argv)
        if a.cmd in ("open", "train"):
            a.extra = unknown  # what hybrid-lab does not know goes on to jupyter lab (--port 8890 --no-browser)
        elif unknown:
            raise UsageError(f"`{a.cmd}` does not take {' '.join(unknown)}")
        return _dispatch(a)
    except UsageError as exc:
        print(f"hybrid-lab: {_usage_line(str(exc), argv)}", file=sys.stderr)
        return 2
    except course.CourseError as exc:
        print(f"hybrid-lab: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("hybrid-lab: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug of ours: still one line, the traceback only on request
        if os.environ.get("HYBRID_LAB_DEBUG"):
            raise
        what = (str(exc).strip().splitlines() or [""])[0][:200]
        print(f"hybrid-lab: unexpected error {type(exc).__name__}: {what}; rerun with HYBRID_LAB_DEBUG=1 for the "
              f"traceback and report it", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
