"""Run All of every lab as a student first opens it: seconds and peak memory per notebook.

    .venv/bin/python benchmarks/bench_run_all.py            # writes benchmarks/results/run_all.json
    .venv/bin/python benchmarks/bench_run_all.py --only 03 10 --out /tmp/run_all.json

Each untouched lab (``labs/NN_*.ipynb``: exercises not done, the reference standing in) runs top to bottom in a
fresh kernel (nbclient, the numpy backend), one notebook at a time, nothing else running. ``seconds``: from the
kernel's first cell to its last (the kernel's start-up excluded); ``peak_rss_mb``: the kernel process's largest
resident set (``getrusage``), and ``children_peak_rss_mb`` the largest of the processes it started and waited for
(notebook 07's two workers). The targets are < 60 s and < 2 GB on 2 CPU cores (tests/test_exercises.py asserts both
on every CI run). The README's and notebook 00's "Run All (measured)" columns are this file's numbers
(tests/test_readme.py checks they agree).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _bench import write_result  # noqa: E402

from hybrid_lab.course.pipeline import run_all as course_run_all  # noqa: E402


def run_all(lab: Path, timeout: int = 300) -> dict:
    """Run one lab top to bottom in a fresh kernel; {"seconds", "peak_rss_mb", "children_peak_rss_mb"}."""
    r = course_run_all(lab, timeout)
    mb = (lambda b: None if b < 0 else round(b / 2 ** 20, 1))
    return {"seconds": round(r["seconds"], 1), "peak_rss_mb": mb(r["peak_rss"][0]),
            "children_peak_rss_mb": mb(r["peak_rss"][1])}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", default=None, help="notebook numbers, e.g. 03 10 (default: every lab)")
    ap.add_argument("--out", default=None, help="a JSON path (default: benchmarks/results/run_all.json)")
    a = ap.parse_args(argv)
    labs = sorted((ROOT / "labs").glob("[0-9][0-9]_*.ipynb"))
    if a.only is not None:
        unknown = sorted(set(a.only) - {p.name[:2] for p in labs})
        if unknown:
            raise ValueError(f"--only must name lab numbers ({', '.join(p.name[:2] for p in labs)}), got {unknown}")
        labs = [p for p in labs if p.name[:2] in a.only]
    results = {}
    for lab in labs:
        results[lab.stem] = run_all(lab)
        print(f"{lab.stem:28s} {results[lab.stem]}", flush=True)
    payload = {"benchmark": "Run All of every untouched lab (nbclient, fresh kernel, numpy backend)",
               "command": "python benchmarks/bench_run_all.py" + (f" --only {' '.join(a.only)}" if a.only else ""),
               "targets": {"seconds": 60, "peak_rss_mb": 2048}, "notebooks": results}
    write_result("run_all", payload, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
