"""The ``hybrid-lab`` command: what students and lecturers do with the lab.

    hybrid-lab open                      # JupyterLab on labs/ (adds --allow-root when run as root)
    hybrid-lab grade labs/01_x.ipynb     # per-exercise table, exit 1 if anything fails
    hybrid-lab build                     # regenerate labs/ from solutions/ (lecturers)
    hybrid-lab check                     # labs/ in sync with solutions/?
    hybrid-lab execute solutions/01_x.ipynb
    hybrid-lab bench [NAME ...]          # run benchmarks/bench_*.py (JSON under benchmarks/results/)
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

from hybrid_lab.course import pipeline as course


def _open(args) -> int:
    root = course.repo_root()
    folder = root / ("solutions" if args.solutions else "labs")
    cmd = [sys.executable, "-m", "jupyter", "lab", f"--ServerApp.root_dir={folder}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # JupyterLab refuses root without it (containers, CI machines)
    cmd += args.extra
    print(" ".join(cmd))
    return subprocess.call(cmd)


def _bench(args) -> int:
    root = course.repo_root()
    scripts = sorted((root / "benchmarks").glob("bench_*.py"))
    if args.names:
        scripts = [s for s in scripts if any(n in s.stem for n in args.names)]
    if not scripts:
        print("no benchmark matched", file=sys.stderr)
        return 2
    rc = 0
    for s in scripts:
        print(f"== {s.relative_to(root)}")
        rc |= subprocess.call([sys.executable, str(s)], cwd=root)
    return rc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="hybrid-lab", description="hybrid-lab: open, grade and maintain the lab")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("open", help="start JupyterLab on labs/ (or --solutions); other arguments go to jupyter lab")
    p.add_argument("--solutions", action="store_true", help="open solutions/ instead of labs/")
    p = sub.add_parser("grade", help="grade a lab notebook against solutions/")
    p.add_argument("path")
    p.add_argument("-x", "--fail-fast", action="store_true")
    p = sub.add_parser("build", help="regenerate labs/ from solutions/")
    p.add_argument("paths", nargs="*")
    sub.add_parser("check", help="exit 1 if labs/ is out of sync with solutions/")
    p = sub.add_parser("execute", help="run notebooks in place, storing outputs")
    p.add_argument("paths", nargs="+")
    p = sub.add_parser("bench", help="run benchmarks/bench_*.py")
    p.add_argument("names", nargs="*")
    a, unknown = ap.parse_known_args(argv)
    if a.cmd == "open":
        a.extra = unknown  # what hybrid-lab does not know goes on to jupyter lab (--port 8890 --no-browser)
    elif unknown:
        ap.error(f"unrecognized arguments: {' '.join(unknown)}")
    if a.cmd == "open":
        return _open(a)
    if a.cmd == "bench":
        return _bench(a)
    if a.cmd == "grade":
        return course.main(["grade", a.path] + (["-x"] if a.fail_fast else []))
    if a.cmd == "build":
        return course.main(["build"] + a.paths)
    if a.cmd == "execute":
        return course.main(["execute"] + a.paths)
    return course.main(["check"])


if __name__ == "__main__":
    sys.exit(main())
