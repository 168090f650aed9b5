"""The stored checkpoints of issue 15: numpy inference equals torch training, results.json is what the checkpoints
say, the trained HySparse2 keeps its exact early exit, and a CPU smoke run of ``hybrid-lab train --quick`` learns and
round-trips through the numpy model."""
import json
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from trained_helpers import one_torch_thread  # noqa: E402, F401 (an autouse fixture)

from hybrid_lab.trained import families as fam  # noqa: E402
from hybrid_lab.trained import report, tasks, train  # noqa: E402

CKPTS = train.list_checkpoints()


def _name(p):
    return f"{p.parent.parent.name}/{p.parent.name}/{p.name}"


def test_every_experiment_model_and_seed_is_stored():
    stored = {(p.parent.parent.name, p.parent.name, p.name) for p in CKPTS}
    want = {(e.name, m, f"seed{s}") for e in train.EXPERIMENTS.values() for m in e.models for s in e.seeds}
    assert stored == want
    assert len({s for e in train.EXPERIMENTS.values() for s in e.seeds}) >= 3


def test_checkpoints_are_small_fp16_with_config_seed_log_command():
    total = 0
    for p in CKPTS:
        meta = json.loads(p.with_suffix(".json").read_text())
        with np.load(p.with_suffix(".npz")) as z:
            assert all(z[k].dtype == np.float16 for k in z.files)
            total += p.with_suffix(".npz").stat().st_size
        assert meta["seed"] == int(p.name[4:])
        assert meta["command"].startswith("hybrid-lab train ") and "--out" not in meta["command"]
        assert meta["tokens_per_s"] > 0 and meta["machine"]
        assert len(meta["log"]["loss"]) > 10 and meta["log"]["eval"]
        cfg = fam.config_from_json(meta["model_config"])
        assert fam.n_params(cfg) == meta["n_params"]
    assert total <= 20 * 2 ** 20


@pytest.mark.parametrize("path", CKPTS, ids=_name)
def test_numpy_forward_equals_torch_forward(path):
    model, _ = train.load_checkpoint(path, dtype="float32")
    net = fam.torch_model(model.cfg, model.weights)
    b = tasks.mix(2, 128, seed=tasks.EVAL_SEED + 9)
    with torch.no_grad():
        want = net(torch.as_tensor(b.tokens)).numpy()
    got = fam.numpy_logits(model, b.tokens)
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


@pytest.mark.parametrize("model_name", ["hysparse2", "hysparse2_block", "hysparse2_nowindow"])
def test_trained_hysparse2_early_exit_equals_full_prefill(model_name):
    for seed in (0, 1, 2):
        model, _ = train.load_checkpoint(train.CHECKPOINTS / "retrieval" / model_name / f"seed{seed}",
                                         dtype="float64")
        prompt = tasks.needles(1, 128, 3, seed=tasks.EVAL_SEED + seed).tokens[0][:-2]
        full, _ = model.prefill(prompt, early_exit=False)
        last, _ = model.prefill(prompt, early_exit=True)
        assert np.abs(full[-1] - last[-1]).max() <= 1e-10 * np.abs(full[-1]).max()


def test_results_json_is_the_aggregate_of_the_checkpoints(tmp_path):
    again = train.aggregate(train.CHECKPOINTS, out=tmp_path / "results.json")
    assert again == report.load_results()


@pytest.mark.parametrize("exp, model, seed", [("retrieval", "hysparse2", 1), ("mqar", "mamba2_hybrid", 0),
                                              ("retrieval", "swa", 2)])
def test_numpy_evaluation_reproduces_the_stored_gpu_accuracy(exp, model, seed):
    m, meta = train.load_checkpoint(train.CHECKPOINTS / exp / model / f"seed{seed}")
    got = train.evaluate(lambda t: fam.numpy_logits(m, t), train.eval_sets(train.EXPERIMENTS[exp]))
    for k, v in meta["final"].items():
        assert abs(got[k] - v) <= 0.01, (k, got[k], v)


def test_quick_training_learns_and_round_trips_through_numpy(tmp_path):
    """The CI smoke test: two families, a few dozen steps on the CPU (hybrid-lab train --quick)."""
    exp = train.quick(train.EXPERIMENTS["retrieval"], ["hysparse2", "hybrid_swa"])
    train.run_jobs([(exp, exp.models)], tmp_path, jobs=1, device="cpu", command="test")
    for m in exp.models:
        model, meta = train.load_checkpoint(tmp_path / "retrieval" / m / "seed0")
        loss = meta["log"]["loss"]
        assert np.mean(loss[-2:]) < loss[0] - 0.3, loss
        net = fam.torch_model(model.cfg, model.weights)
        b = tasks.mix(2, 64, seed=3, n_needles=(1, 2), n_local=2)
        with torch.no_grad():
            want = net(torch.as_tensor(b.tokens)).numpy()
        assert np.abs(fam.numpy_logits(model, b.tokens) - want).max() <= 1e-4 * np.abs(want).max()
    assert set(json.loads((tmp_path / "results.json").read_text())["retrieval"]["models"]) == set(exp.models)


def test_the_command_line(tmp_path):
    cmd = [sys.executable, "-m", "hybrid_lab.course", "train", "mqar", "--quick", "--models", "dense",
           "--out", str(tmp_path)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "mqar" / "dense" / "seed0.npz").exists()
    r = subprocess.run(cmd[:-4] + ["--models", "nope"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "nope" in r.stderr


@pytest.mark.parametrize("name", ["mamba2_hybrid", "hybrid_swa", "swa", "dense", "hysparse2", "hysparse2_nobridge"])
def test_decode_ledger_counts_the_caches_the_numpy_model_keeps(name):
    exp = "mqar" if name == "mamba2_hybrid" else "retrieval"
    model, _ = train.load_checkpoint(train.CHECKPOINTS / exp / name / "seed0")
    T = 40
    tokens = tasks.mix(1, 64, seed=1, n_needles=(1,), n_local=1).tokens[0][:T]
    if fam.SPECS[name].family == "hysparse2":
        _, cache = model.prefill(tokens, early_exit=False)
    else:
        _, cache = model.prefill(tokens)
    assert fam.decode_ledger(model.cfg, T, bytes_per=4)["cache_bytes"] == cache.nbytes()["total"]
