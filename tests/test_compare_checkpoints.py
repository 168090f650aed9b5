"""benchmarks/compare_checkpoints.py, the bit-for-bit check of a retraining against the stored checkpoints: a copy
passes; a changed weight or a changed recorded number fails; a new code version alone is reported, not a failure
(a retraining after a change that computes nothing new, such as an input check)."""
import json
import shutil

import numpy as np

from bench_scripts import load
from hybrid_lab.trained import train


def _compare():
    return load("compare_checkpoints").compare


def _copy(tmp_path, exp="mqar", model="dense_mha"):
    new = tmp_path / "new"
    shutil.copytree(train.CHECKPOINTS / exp / model, new / exp / model)
    shutil.copy(train.CHECKPOINTS / "results.json", new / "results.json")
    return new


def test_a_copy_passes_and_a_new_code_version_is_reported(tmp_path):
    compare = _compare()
    new = _copy(tmp_path)
    lines, ok = compare(new, train.CHECKPOINTS, "mqar", ["dense_mha"])
    assert ok and "10/10" in lines[0] and "(same)" in lines[0]
    p = new / "mqar" / "dense_mha" / "seed3.json"
    meta = json.loads(p.read_text())
    old = meta["versions"]["code_version"]
    meta["versions"]["code_version"], meta["command"], meta["train_seconds"] = "0" * 16, "elsewhere", 1.0
    p.write_text(json.dumps(meta))
    lines, ok = compare(new, train.CHECKPOINTS, "mqar", ["dense_mha"])
    assert ok and f"{old} -> {'0' * 16}" in lines[0]


def test_a_changed_weight_or_number_fails(tmp_path):
    compare = _compare()
    new = _copy(tmp_path)
    p = new / "mqar" / "dense_mha" / "seed5.npz"
    w = dict(np.load(p))
    name = sorted(w)[0]
    w[name] = w[name].copy()
    w[name].flat[0] = np.nextafter(w[name].flat[0], np.inf, dtype=w[name].dtype)
    np.savez(p, **w)
    lines, ok = compare(new, train.CHECKPOINTS, "mqar", ["dense_mha"])
    assert not ok and "weight identical 9/10" in lines[0]
    new2 = _copy(tmp_path / "b")
    p = new2 / "mqar" / "dense_mha" / "seed0.json"
    meta = json.loads(p.read_text())
    k = sorted(meta["final"])[0]
    meta["final"][k] += 0.01
    p.write_text(json.dumps(meta))
    lines, ok = compare(new2, train.CHECKPOINTS, "mqar", ["dense_mha"])
    assert not ok and "number identical 9/10" in lines[0]


def test_a_seed_without_weights_is_compared_by_its_fingerprint(tmp_path):
    """mamba2 keeps seed 0's weights only (store.KEEP_WEIGHTS): a retraining that kept them all matches by the
    SHA-256 its meta holds, and one changed weight of a pruned seed fails."""
    from hybrid_lab.trained import store

    compare = _compare()
    new = _copy(tmp_path, model="mamba2")
    assert sorted(p.name for p in (new / "mqar" / "mamba2").glob("*.npz")) == ["seed0.npz"]
    lines, ok = compare(new, train.CHECKPOINTS, "mqar", ["mamba2"])
    assert ok and "10/10" in lines[0]
    # the new run kept seed 4's weights (same bits): write them from a twin whose fingerprint is the stored one
    stored = store.read_meta(train.CHECKPOINTS / "mqar" / "mamba2" / "seed4")
    w0, _ = store.read_checkpoint(train.CHECKPOINTS / "mqar" / "mamba2" / "seed0")
    store.save_checkpoint(new / "mqar" / "mamba2" / "seed4", w0, stored)     # seed 0's weights under seed 4
    lines, ok = compare(new, train.CHECKPOINTS, "mqar", ["mamba2"])
    assert not ok and "weight identical 9/10" in lines[0]


def test_another_gpu_is_reported_not_failed_and_two_runs_compare_with_each_other(tmp_path):
    """A run on another GPU model with the same bits passes and names both GPUs; a second run is compared with the
    first (--against) the same way as with the stored checkpoints."""
    compare = _compare()
    new = _copy(tmp_path)
    p = new / "mqar" / "dense_mha" / "seed2.json"
    meta = json.loads(p.read_text())
    old = meta["versions"]["device"]
    assert meta["machine"] == old                       # train.py writes the GPU's name in both places
    meta["versions"]["device"] = meta["machine"] = "Some Other GPU"
    p.write_text(json.dumps(meta))
    lines, ok = compare(new, train.CHECKPOINTS, "mqar", ["dense_mha"])
    assert ok and f"GPU {old} (same), {old} -> Some Other GPU" in lines[0]
    second = _copy(tmp_path / "b")
    lines, ok = compare(second, new, "mqar", ["dense_mha"])
    assert ok and "10/10" in lines[0] and f"Some Other GPU -> {old}" in lines[0]
