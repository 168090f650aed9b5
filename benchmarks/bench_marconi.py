"""Speed of the prefix-cache simulator: replay the 2,000-request agent trace (byte model, 7B sizes) per policy.

    .venv/bin/python benchmarks/bench_marconi.py            # writes benchmarks/results/marconi.json

Reports requests/s and tokens/s (input tokens replayed per second) at a contended capacity (8 GB) and a roomy one
(32 GB). Every policy evicts before it admits (the bytes held never exceed the capacity); "sglang+" is the paper's
baseline (LRU over leaves), "marconi" the paper's score at a fixed α; "marconi (auto, lecture)" includes the
bootstrap replay that tunes α over 7 values in 2 processes, "marconi (auto, official)" the official procedure
(21 values, the first 5·n0 requests replayed from an empty tree). Target: >= 5,000 requests/s for SGLang+ and Marconi
at a fixed α on 2 cores.
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


def bench(trace, policy, capacity, alpha, repeats=3, tuning="lecture"):
    times, res = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = simulate(trace, policy, capacity, alpha=alpha, processes=2, tuning=tuning)
        times.append(time.perf_counter() - t0)
    best = min(times)
    n_tok = int(sum(r.n_input for r in trace))
    return {"policy": policy, "alpha": alpha if not isinstance(alpha, str) else f"auto ({tuning}) -> {res.alpha}",
            "capacity_gb": capacity / 1e9, "seconds_best": round(best, 4), "seconds_all": [round(t, 4) for t in times],
            "requests_per_s": round(len(trace) / best, 1), "tokens_per_s": round(n_tok / best),
            "token_hit_rate": round(res.token_hit_rate, 4), "evictions": res.stats["evictions"]}


def main(name="marconi"):
    t0 = time.perf_counter()
    trace = agent_trace(2000, seed=0)
    gen_s = time.perf_counter() - t0
    rows = []
    for cap in (8e9, 32e9):
        for policy, alpha, tuning in (("vllm+", 0.0, "lecture"), ("sglang+", 0.0, "lecture"),
                                      ("marconi", 0.5, "lecture"), ("marconi", "auto", "lecture"),
                                      ("marconi", "auto", "official")):
            rows.append(bench(trace, policy, cap, alpha, tuning=tuning))
            print(json.dumps(rows[-1]))
    result = {"benchmark": "prefix-cache simulator replay, byte model (7B hybrid sizes)",
              "trace": {"kind": "agent_trace(2000, seed=0)", **trace_stats(trace), "generate_seconds": round(gen_s, 3)},
              "results": rows}
    write_result(name, result)
    return result


if __name__ == "__main__":
    main()
