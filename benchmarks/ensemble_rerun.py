"""Train the MQAR hybrid's learning-rate-grid ensemble (9 members: 3 learning rates x seeds 0-2, the stored
experiment's data and schedule) for its first 200 steps twice in one process and compare every weight bit for bit.
GPU only (CUDA graph); exits 3 unless the step ran as a CUDA graph and the two runs are bit-identical.

    PYTHONPATH=. python3 benchmarks/ensemble_rerun.py     # result: hybrid_lab/trained/checkpoints/mqar_rerun_h200.txt
"""
import os, time, dataclasses, sys
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import numpy as np, torch
from hybrid_lab.trained import train
from hybrid_lab.trained.ensemble import train_ensemble
exp = dataclasses.replace(train.EXPERIMENTS["mqar"], steps=200, eval_every=10**9)
m = [(s, lr) for lr in exp.lrs for s in (0, 1, 2)]
out = []
for rep in range(2):
    cfgs = [train.model_config(exp, "mamba2_hybrid", s) for s, _ in m]
    t0 = time.time()
    r = train_ensemble(cfgs, m, train._Schedule(exp), train._batch_fn(exp), lambda f: [{}] * len(m), "cuda", 10**9, None, 0.1)
    print(r["step_mode"], f"{(time.time()-t0)/200*1000:.1f} ms/step (K=9, incl. capture)", r["log"][0]["loss"][-1], flush=True)
    out.append(r)
same = all(np.array_equal(out[0]["weights"][k][n], out[1]["weights"][k][n]) for k in range(len(m)) for n in out[0]["weights"][k])
print("bit-identical:", same, flush=True)
sys.exit(0 if out[0]["step_mode"] == "CUDA graph" and same else 3)
