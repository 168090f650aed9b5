"""Checkpoints whose weights are not kept (store.KEEP_WEIGHTS): the meta stays, with the fingerprint of the dropped
weights and the probe numbers measured on them; listing, loading, aggregating and verifying all say so."""
import json

import numpy as np
import pytest

from hybrid_lab.trained import families as fam
from hybrid_lab.trained import probes, report, store, train


def _tiny(seed):
    spec = fam.SPECS["hysparse2_9_nowindow"]
    cfg = fam.make_config(spec, 256, 16, seed=seed, d_model=32, d_qk=8, d_v=8)
    return fam.numpy_model(cfg)


def _write(root, seeds=(0, 1, 2)):
    folder = root / "ablation9" / "hysparse2_9_nowindow"
    for s in seeds:
        m = _tiny(s)
        meta = {"experiment": "ablation9", "model": "hysparse2_9_nowindow", "label": "x", "seed": s,
                "model_config": fam.config_to_json(m.cfg), "n_params": fam.n_params(m.cfg), "task": "mix",
                "task_kw": {}, "train": {"lr": 3e-3}, "command": "hybrid-lab train ablation9", "machine": "cpu",
                "tokens_per_s": 1, "final": {"needle": 0.1 * s}, "val": {"needles=4": 0.3}, "steps_to_learn": None}
        store.save_checkpoint(folder / f"seed{s}", m.weights, meta)
    return folder


def test_prune_keeps_every_meta_with_fingerprint_and_probe(tmp_path):
    folder = _write(tmp_path)
    want_sha = {s: store.weights_sha256(store.read_checkpoint(folder / f"seed{s}")[0]) for s in (1, 2)}
    want_probe = probes.retrieval_summary(store.load_checkpoint(folder / "seed2")[0])
    pruned = store.prune_weights(folder, (0,), probes.retrieval_summary)
    assert [p.name for p in pruned] == ["seed1", "seed2"]
    assert sorted(p.name for p in folder.glob("*.npz")) == ["seed0.npz"]
    meta = json.loads((folder / "seed2.json").read_text())
    assert meta["weights_sha256"] == want_sha[2] and meta["probe"] == want_probe and meta["final"] == {"needle": 0.2}
    # listed as a checkpoint with a meta, not as one a model loads from; loading says why
    assert [p.name for p in store.list_checkpoints(tmp_path)] == ["seed0"]
    assert [p.name for p in store.list_checkpoints(tmp_path, weights=False)] == ["seed0", "seed1", "seed2"]
    with pytest.raises(ValueError, match="keeps its meta but not its weights"):
        store.load_checkpoint(folder / "seed1")
    # every seed is aggregated; the probe table reads the stored numbers where the weights are gone
    res = train.aggregate(tmp_path)
    assert res["ablation9"]["models"]["hysparse2_9_nowindow"]["per_seed"]["needle"] == [0.0, 0.1, 0.2]
    row = report.retrieval_probe_rows(["hysparse2_9_nowindow"], seed=2, root=tmp_path, exp="ablation9")[0]
    assert row == ["hysparse2_9_nowindow"] + [want_probe[k] for k in probes.SUMMARY_KEYS]
    with pytest.raises(ValueError, match="n: .* keeps the probe of n = 32"):     # no silent number for another n
        report.retrieval_probe_rows(["hysparse2_9_nowindow"], seed=2, n=8, root=tmp_path, exp="ablation9")
    # the fingerprint of a seed: from its weights where kept, from its meta where not
    assert store.fingerprint(folder / "seed2") == want_sha[2]
    assert store.fingerprint(folder / "seed0") == store.weights_sha256(store.read_checkpoint(folder / "seed0")[0])
    (folder / "seed1.json").write_text(json.dumps({"seed": 1}))
    with pytest.raises(ValueError, match="neither weights nor a fingerprint"):
        store.fingerprint(folder / "seed1")


def test_the_fingerprint_tells_bit_identical_weights_apart():
    w = _tiny(0).weights
    same = {k: np.asarray(v, np.float16).astype(np.float32) for k, v in w.items()}      # fp16 round trip
    assert store.weights_sha256(w) == store.weights_sha256(same)
    name = sorted(w)[3]
    flipped = dict(same, **{name: same[name].copy()})
    flat = flipped[name].reshape(-1)
    flat[0] = np.nextafter(np.float16(flat[0]), np.float16(np.inf), dtype=np.float16)   # one fp16 ulp
    assert store.weights_sha256(flipped) != store.weights_sha256(w)
    renamed = {("x" + k if k == name else k): v for k, v in w.items()}
    assert store.weights_sha256(renamed) != store.weights_sha256(w)


@pytest.mark.parametrize("kwargs, name", [
    (dict(keep="0"), "keep"), (dict(keep=[0.5]), "keep"), (dict(keep=[True]), "keep"),
    (dict(keep=[0], probe="report"), "probe"),
])
def test_bad_prune_arguments(tmp_path, kwargs, name):
    folder = _write(tmp_path, (0,))
    with pytest.raises(ValueError, match=name):
        store.prune_weights(folder, **kwargs)
    with pytest.raises(ValueError, match="folder must hold checkpoints"):
        store.prune_weights(tmp_path, [0])
    with pytest.raises(ValueError, match="weights must be True or False"):
        store.list_checkpoints(tmp_path, weights="yes")
    with pytest.raises(ValueError, match="weights must be a non-empty dict"):
        store.weights_sha256({})


def test_train_drops_the_weights_keep_weights_says_and_verify_uses_the_fingerprint(tmp_path, monkeypatch, capsys):
    """``hybrid-lab train ablation9`` (here the narrow smoke model, 20 CPU steps, 2 seeds) keeps no weights
    (store.KEEP_WEIGHTS), with probe numbers and the fingerprint in every seed's meta; ``--verify``
    retrains into a temporary folder and compares a dropped seed by the SHA-256 in its meta."""
    pytest.importorskip("torch")
    import dataclasses

    small = dataclasses.replace(train.quick(train.EXPERIMENTS["ablation9"]), steps=20, eval_every=10, seeds=(0, 1))
    monkeypatch.setitem(train.EXPERIMENTS, "ablation9", small)
    args = ["ablation9", "--models", "hysparse2_9", "--out", str(tmp_path)]
    assert train.main(args) == 0
    assert not list(tmp_path.rglob("*.npz"))                  # ablation9 keeps no seed's weights
    for s in (0, 1):
        meta = store.read_meta(tmp_path / "ablation9" / "hysparse2_9" / f"seed{s}")
        assert len(meta["weights_sha256"]) == 64 and set(meta["probe"]) == {*probes.SUMMARY_KEYS, "n"}
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["ablation9"]["models"]["hysparse2_9"]["seeds"] == [0, 1]
    capsys.readouterr()
    assert train.main(args + ["--verify"]) == 0
    assert "bit-identical" in capsys.readouterr().out
    p = tmp_path / "ablation9" / "hysparse2_9" / "seed1.json"
    p.write_text(json.dumps(dict(json.loads(p.read_text()), weights_sha256="0" * 64)))
    assert train.main(args + ["--verify"]) == 1
    assert "hysparse2_9 seed 1: weights differ (sha256)" in capsys.readouterr().out


def test_keep_weights_then_finish_gives_what_one_run_gives(tmp_path, monkeypatch, capsys):
    """A GPU run on a deadline trains with ``--keep-weights`` (no pruning, no probes: every seed's weights stay) and
    ``--finish`` prunes and probes afterwards, on any machine: the metas and results.json equal those of one plain
    run; the stored command is the plain one; --finish again changes nothing; --finish without checkpoints says so."""
    pytest.importorskip("torch")
    import dataclasses

    small = dataclasses.replace(train.quick(train.EXPERIMENTS["ablation9"]), steps=20, eval_every=10, seeds=(0, 1))
    monkeypatch.setitem(train.EXPERIMENTS, "ablation9", small)
    base = ["ablation9", "--models", "hysparse2_9", "--out"]
    assert train.main(base + [str(tmp_path / "one")]) == 0
    two = tmp_path / "two"
    assert train.main(base + [str(two), "--keep-weights"]) == 0
    folder = two / "ablation9" / "hysparse2_9"
    assert sorted(p.name for p in folder.glob("*.npz")) == ["seed0.npz", "seed1.npz"]
    assert "probe" not in store.read_meta(folder / "seed0")
    assert train.main(base + [str(two), "--finish"]) == 0
    assert not list(two.rglob("*.npz"))
    for s in (0, 1):
        a = store.read_meta(tmp_path / "one" / "ablation9" / "hysparse2_9" / f"seed{s}")
        b = store.read_meta(folder / f"seed{s}")
        assert a["command"] == b["command"] == "hybrid-lab train ablation9 --models hysparse2_9"
        drop = ("log", "tokens_per_s", "train_seconds")              # timings differ between two runs
        assert {k: v for k, v in a.items() if k not in drop} == {k: v for k, v in b.items() if k not in drop}
    results = (two / "results.json").read_text()
    assert train.main(base + [str(two), "--finish"]) == 0            # done already: nothing to prune
    assert (two / "results.json").read_text() == results
    with pytest.raises(ValueError, match="no checkpoints to finish"):
        train.main(base + [str(tmp_path / "empty"), "--finish"])
    with pytest.raises(ValueError, match="--finish"):
        train.main(base + [str(two), "--finish", "--keep-weights"])
