"""Wall time of HySparse2 prefill with and without the early exit (numpy, toy width, the paper's 49-layer layout).

    .venv/bin/python benchmarks/bench_hysparse2.py          # writes benchmarks/results/hysparse2.json

The early exit runs 25 of 49 layers on every prompt position (+ 4 bridge projections) and the Cross-decoder once;
the measured speed-up at toy width mostly reflects skipped layer-positions, not the paper's FLOP ratios.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _bench import best_of, write_result  # noqa: E402

from hybrid_lab.models.hysparse2 import HySparse2, HySparse2Config  # noqa: E402


def main():
    cfg = HySparse2Config(window=16, topk=64, swa_window=16, dtype="float32")
    model = HySparse2(cfg)
    rows = []
    for L in (128, 512, 1024):
        tokens = np.random.default_rng(0).integers(0, cfg.vocab, L)
        full = best_of(lambda: model.prefill(tokens, early_exit=False))
        early = best_of(lambda: model.prefill(tokens, early_exit=True))
        _, cache = model.prefill(tokens)
        dec = best_of(lambda: model.decode_step(1, cache))
        rows.append({"L": L, "full_prefill_s": round(full, 4), "early_exit_prefill_s": round(early, 4),
                     "speedup": round(full / early, 2), "decode_step_s": round(dec, 5)})
        print(rows[-1])
    write_result("hysparse2", {"benchmark": "hysparse2 prefill", "config": cfg.__dict__ | {"bridge_sources": None},
                               "results": rows})


if __name__ == "__main__":
    main()
