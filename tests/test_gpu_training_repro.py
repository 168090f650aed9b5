"""The stored MQAR checkpoints are reproducible: retraining them on the GPU gives the same bits.

``hybrid-lab train mqar --models mamba2 mamba2_hybrid dense --jobs 3 --verify`` (train.verify) trains every (seed, lr)
of the three models again into a temporary folder (vmapped ensembles, CUDA graphs, deterministic kernels) and
compares every weight, every per-seed accuracy and the validation sweep with the stored checkpoints. Bit-identity is
promised for the same GPU, torch and CUDA versions as the stored runs (their ``versions`` record): on another machine
the test is skipped and says what differs. About 8 minutes on one H200:
``pytest -m gpu tests/test_gpu_training_repro.py``. The CPU side (an ensemble member is a plain AdamW training, two
runs are bit-identical, the code version) is tests/test_trained_ensemble.py.
"""
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from hybrid_lab.trained import train  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.slow,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the stored checkpoints "
                                                                         "were trained on one)")]
MODELS = ("mamba2", "mamba2_hybrid", "dense")
TIMEOUT_S = 3600                 # about 8 minutes on one H200; a slower GPU or a busy one gets room


def _stored_versions() -> dict:
    """{what: value} the stored runs of MODELS were made with (one value each, or the test cannot promise bits)."""
    seen = {}
    for m in MODELS:
        v = json.loads((train.CHECKPOINTS / "mqar" / m / "sweep.json").read_text())["versions"]
        for k in ("device", "torch", "cuda"):
            seen.setdefault(k, set()).add(v[k])
    return {k: vs.pop() for k, vs in seen.items() if len(vs) == 1}


def test_retraining_mqar_is_bit_identical_to_the_stored_checkpoints():
    stored = _stored_versions()
    here = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda}
    differ = {k: (stored.get(k), here[k]) for k in here if stored.get(k) != here[k]}
    if differ:
        pytest.skip("bit-identity holds only on the stored runs' machine and versions; here: " +
                    ", ".join(f"{k} {h} (stored {s})" for k, (s, h) in differ.items()))
    env = dict(os.environ)
    env.pop("HYBRID_LAB_CUDA_GRAPHS", None)          # the stored runs replayed CUDA graphs (their logs say so)
    cmd = [sys.executable, "-m", "hybrid_lab.trained.train", "mqar", "--models", *MODELS, "--jobs", "3", "--verify"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=TIMEOUT_S, check=False)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert "bit-identical" in r.stdout, out[-6000:]
    for m in MODELS:                                  # every model was trained again (run_jobs prints one line each)
        assert any(line.split()[:1] == [m] for line in r.stdout.splitlines()), (m, r.stdout[-3000:])
