"""Speed of the prefix-cache simulator: replay the 2,000-request agent trace (byte model, 7B sizes) per policy.

    .venv/bin/python benchmarks/bench_marconi.py            # writes benchmarks/results/marconi.json

Reports requests/s and tokens/s (input tokens replayed per second) at a contended capacity (8 GB) and a roomy one
(32 GB); "marconi (auto)" includes the bootstrap replay that tunes α over 7 values in 2 processes.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _bench import write_result  # noqa: E402

from hybrid_lab.serving.marconi import simulate  # noqa: E402
from hybrid_lab.serving.workloads import agent_trace, trace_stats  # noqa: E402


def bench(trace, policy, capacity, alpha, repeats=3):
    times, res = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = simulate(trace, policy, capacity, alpha=alpha, processes=2)
        times.append(time.perf_counter() - t0)
    best = min(times)
    n_tok = int(sum(r.n_input for r in trace))
    return {"policy": policy, "alpha": alpha if not isinstance(alpha, str) else f"auto -> {res.alpha}",
            "capacity_gb": capacity / 1e9, "seconds_best": round(best, 4), "seconds_all": [round(t, 4) for t in times],
            "requests_per_s": round(len(trace) / best, 1), "tokens_per_s": round(n_tok / best),
            "token_hit_rate": round(res.token_hit_rate, 4), "evictions": res.stats["evictions"]}


def main(name="marconi"):
    t0 = time.perf_counter()
    trace = agent_trace(2000, seed=0)
    gen_s = time.perf_counter() - t0
    rows = []
    for cap in (8e9, 32e9):
        for policy, alpha in (("vllm+", 0.0), ("sglang+", 0.0), ("marconi", 0.5), ("marconi", "auto")):
            rows.append(bench(trace, policy, cap, alpha))
            print(json.dumps(rows[-1]))
    result = {"benchmark": "prefix-cache simulator replay, byte model (7B hybrid sizes)",
              "trace": {"kind": "agent_trace(2000, seed=0)", **trace_stats(trace), "generate_seconds": round(gen_s, 3)},
              "results": rows}
    write_result(name, result)
    return result


if __name__ == "__main__":
    main()
