"""The stored checkpoints are reproducible: retraining them on the GPU gives the same bits, for every model family.

``hybrid-lab train mqar --models mamba2 mamba2_hybrid dense --jobs 3 --verify`` (train.verify) trains every (seed, lr)
of the three models again into a temporary folder (vmapped ensembles, CUDA graphs, deterministic kernels) and
compares every weight, every per-seed accuracy and the validation sweep with the stored checkpoints; so does
``hybrid-lab train retrieval9 --models hysparse_9 hysparse2_9 --jobs 2 --verify`` for the HySparse and HySparse2
families (the stack family is MQAR's), and ``hybrid-lab train retrieval --models dense hysparse hysparse2 --jobs 3
--verify`` for all three families of the 4-layer experiment (stored from an H100, so that part runs on an H100, the
other two on an H200). A whole ensemble, not one seed, is trained again: its members are computed
together, so one seed alone is another computation. Bit-identity is promised for the same GPU, torch and CUDA
versions as the stored runs (their ``versions`` record): on another machine the test is skipped and says what
differs. ``HYBRID_LAB_REPRO_OTHER_GPU=1`` runs it on another GPU model all the same (torch and CUDA must still
match): an observation, not a promise. The H200-trained MQAR and retrieval9 checkpoints came back bit for bit on an
H100 that way (2026-12-06, ``checkpoints/mqar_retrieval9_rerun_h100.txt``), and the H100-trained 4-layer retrieval
checkpoints on an H200 (``checkpoints/retrieval_rerun_h200.txt``). About 8 minutes each on one H200, 3 on one H100: ``pytest -m gpu tests/test_gpu_training_repro.py``. The CPU side (an ensemble member is a plain AdamW training, two
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
# (experiment, models): every family once per GPU kind (stack: mamba2, the hybrid, dense; hysparse; hysparse2)
RUNS = [("mqar", ("mamba2", "mamba2_hybrid", "dense")), ("retrieval9", ("hysparse_9", "hysparse2_9")),
        ("retrieval", ("dense", "hysparse", "hysparse2"))]
TIMEOUT_S = 3600                 # about 8 minutes each on one H200; a slower GPU or a busy one gets room


def _stored_versions(exp: str, models) -> dict:
    """{what: value} the stored runs of ``models`` were made with (one value each, or the test cannot promise bits)."""
    seen = {}
    for m in models:
        v = json.loads((train.CHECKPOINTS / exp / m / "sweep.json").read_text())["versions"]
        for k in ("device", "torch", "cuda"):
            seen.setdefault(k, set()).add(v[k])
    return {k: vs.pop() for k, vs in seen.items() if len(vs) == 1}


@pytest.mark.parametrize("exp, models", RUNS, ids=[e for e, _ in RUNS])
def test_retraining_is_bit_identical_to_the_stored_checkpoints(exp, models):
    stored = _stored_versions(exp, models)
    here = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda}
    compared = ("torch", "cuda") if os.environ.get("HYBRID_LAB_REPRO_OTHER_GPU") == "1" else tuple(here)
    differ = {k: (stored.get(k), here[k]) for k in compared if stored.get(k) != here[k]}
    if differ:
        pytest.skip("bit-identity holds only on the stored runs' machine and versions; here: " +
                    ", ".join(f"{k} {h} (stored {s})" for k, (s, h) in differ.items()))
    env = dict(os.environ)
    env.pop("HYBRID_LAB_CUDA_GRAPHS", None)          # the stored runs replayed CUDA graphs (their logs say so)
    cmd = [sys.executable, "-m", "hybrid_lab.trained.train", exp, "--models", *models, "--jobs", str(len(models)),
           "--verify"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=TIMEOUT_S, check=False)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert "bit-identical" in r.stdout, out[-6000:]
    for m in models:                                  # every model was trained again (run_jobs prints one line each)
        assert any(line.split()[:1] == [m] for line in r.stdout.splitlines()), (m, r.stdout[-3000:])
