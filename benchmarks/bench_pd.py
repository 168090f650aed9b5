"""Live P/D runs on gloo (two local processes): time to first token and bytes per request vs chunk size.

    .venv/bin/python benchmarks/bench_pd.py          # writes benchmarks/results/pd.json

TTFT here = D's first token end - P's header send for that request (one host, one clock), HySparse2 at toy width
(float32). On localhost the link is far faster than the numpy prefill (~0.36 MB per request), so a TTFT change
with chunk size comes from compute (numpy at different row counts, per-chunk cache copies) and machine noise, not
from hiding the transfer; the first request also pays the workers' start-up.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _bench import write_result  # noqa: E402

from hybrid_lab.models.hysparse2 import HySparse2Config  # noqa: E402
from hybrid_lab.serving.pd_workers import reference_tokens, run_pd  # noqa: E402


def ttft(reports, req):
    p0 = min(a for r, w, a, b in reports["P"]["events"] if r == req)
    d1 = max(b for r, w, a, b in reports["D"]["events"] if r == req and w == "first token")
    return d1 - p0


def main():
    cfg = HySparse2Config(window=16, topk=64, swa_window=16, dtype="float32")
    rng = np.random.default_rng(0)
    L, n_req, n_new = 1024, 3, 4
    prompts = [rng.integers(0, cfg.vocab, L) for _ in range(n_req)]
    ref = reference_tokens(cfg, prompts, n_new)
    rows = []
    for chunk in (1024, 256, 64):
        r = run_pd(prompts, n_new, cfg, chunk_size=chunk, timeout_s=60)
        assert r["P"]["error"] is None and r["D"]["error"] is None, (r["P"]["error"], r["D"]["error"])
        rows.append({"prompt_len": L, "chunk": chunk, "requests": n_req,
                     "tokens_equal_single_process": r["D"]["tokens"] == dict(enumerate(ref)),
                     "bytes_per_request": r["P"]["bytes"][0],
                     "ttft_s": [round(ttft(r, q), 4) for q in range(n_req)]})
        print(rows[-1])
    write_result("pd", {"benchmark": "pd gloo live", "config": cfg.__dict__ | {"bridge_sources": None},
                        "results": rows})


if __name__ == "__main__":
    main()
