"""Merge one run of ``gpu_track.bench`` into the stored results (``gpu_track/results/h200.json``).

    python3 benchmarks/merge_bench.py RUN.json [--into gpu_track/results/h200.json] [--name bench_x.json]

The rows of every (kernel, phase) the run has replace the stored rows of that (kernel, phase); each merged row names
its run (``run``). The run's ``config`` and ``checks`` keys replace the stored keys of the same name; its errors
are appended, each naming its file; ``lecture_2_3`` and ``launch_floor_ms`` are taken when the run has them; a
``runs`` entry records its date, command, ceilings and versions. The top-level ceilings and versions become the
newest run's. A run whose machine differs from the stored one is refused.
"""
import argparse
import json
import os
import sys

TAKEN_WHEN_PRESENT = ("lecture_2_3", "launch_floor_ms", "mamba_ssm", "fla")


def merge(stored: dict, run: dict, name: str) -> dict:
    """stored, run: bench JSON objects; name: the run's file name. Returns a new merged object."""
    if not run.get("rows"):
        raise ValueError(f"run {name!r} has no rows to merge")
    if stored.get("machine") and run.get("machine") != stored["machine"]:
        raise ValueError(f"run {name!r} is from {run.get('machine')!r}, the stored results from {stored['machine']!r}")
    out = json.loads(json.dumps(stored))
    pairs = sorted({(r["kernel"], r["phase"]) for r in run["rows"]})
    out["rows"] = [r for r in out["rows"] if (r["kernel"], r["phase"]) not in pairs]
    out["rows"] += [dict(r, run=name) for r in run["rows"]]
    out["rows"].sort(key=lambda r: (r["kernel"], r["phase"]))
    out.setdefault("config", {}).update(run.get("config", {}))
    out.setdefault("checks", {}).update(run.get("checks", {}))
    out.setdefault("errors", []).extend(dict(e, file=name) for e in run.get("errors", []))
    for k in TAKEN_WHEN_PRESENT:
        if run.get(k) is not None:
            out[k] = run[k]
    for k in ("date", "copy_GBps", "bf16_TFLOPs", "torch", "triton", "python", "machine", "sms"):
        if k in run:
            out[k] = run[k]
    out.setdefault("runs", []).append({
        "file": name, "date": run.get("date"), "command": run.get("command"), "copy_GBps": run.get("copy_GBps"),
        "bf16_TFLOPs": run.get("bf16_TFLOPs"), "torch": run.get("torch"), "triton": run.get("triton"),
        "pairs": [f"{k} {p}" for k, p in pairs]})
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", help="the JSON one bench run wrote")
    ap.add_argument("--into", default=os.path.join("gpu_track", "results", "h200.json"))
    ap.add_argument("--name", default=None, help="the run's name in the stored results (default: its file name)")
    a = ap.parse_args(argv)
    with open(a.run) as f:
        run = json.load(f)
    with open(a.into) as f:
        stored = json.load(f)
    try:
        merged = merge(stored, run, a.name or os.path.basename(a.run))
    except ValueError as e:
        sys.exit(str(e))
    with open(a.into, "w") as f:
        json.dump(merged, f, indent=1)
        f.write("\n")
    print(f"merged {len(run['rows'])} rows of {a.name or os.path.basename(a.run)} into {a.into}")


if __name__ == "__main__":
    main()
