"""Wall time of the lightning indexer (numpy twin) and of one KL training step, against the number of keys S.

    .venv/bin/python benchmarks/bench_dsa.py          # writes benchmarks/results/dsa.json

Notebook 04 trains on S = 2,048 keys and 64 queries; the indexer is O(T·S) per step, so time should grow ~linearly
in S. On a shared 2-core machine multi-threaded BLAS can be several times slower than OPENBLAS_NUM_THREADS=1.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _bench import best_of, write_result  # noqa: E402

from hybrid_lab.models.lightning_indexer import LightningIndexer, attention_target  # noqa: E402
from hybrid_lab.models.tiny_llm import concentrated_attention  # noqa: E402
from hybrid_lab.ops.lightning_indexer import lightning_indexer  # noqa: E402


def main():
    rows = []
    for S in (1024, 2048, 4096, 8192):
        d = concentrated_attention(n_keys=S, n_queries=128, seed=0)
        p = attention_target(d.q, d.k, q_pos=d.q_pos)
        ix = LightningIndexer(64, 4, 16, seed=0)
        q, w, k = ix.project(d.x_queries, d.x_keys)
        fwd = best_of(repeats=5, fn=lambda: lightning_indexer(q[None], w[None], k[None], 512, d.q_pos))
        step = best_of(repeats=5, fn=lambda: ix.loss_and_grads(d.x_queries[:64], d.x_keys, p[:64], d.q_pos[:64]))
        rows.append({"S": S, "T_forward": 128, "forward_s": round(fwd, 5), "T_train": 64, "train_step_s": round(step, 5)})
        print(rows[-1])
    write_result("dsa", {"benchmark": "lightning indexer (numpy)", "index_heads": 4, "index_dim": 16,
                         "blas_threads_env": os.environ.get("OPENBLAS_NUM_THREADS", os.environ.get("OMP_NUM_THREADS")),
                         "results": rows})


if __name__ == "__main__":
    main()
