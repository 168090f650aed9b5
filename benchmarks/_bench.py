"""Shared helpers of the benchmark scripts: best-of-N timing and a JSON result file with the machine on it."""
from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


def best_of(fn, repeats: int = 3) -> float:
    """Smallest wall time of ``repeats`` calls (the least disturbed run on a shared machine)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def write_result(name: str, payload: dict, out=None) -> Path:
    """Write ``results/<name>.json`` (or ``out``) with the machine (platform, CPUs, Python, numpy) added."""
    out = RESULTS / f"{name}.json" if out is None else Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    machine = {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
               "numpy": np.__version__}
    out.write_text(json.dumps({**payload, "machine": machine}, indent=2, default=str))
    print("wrote", out)
    return out
