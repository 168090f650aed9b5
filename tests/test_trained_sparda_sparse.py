"""SparDA on a backbone trained with block-sparse attention (hybrid_lab.trained.sparda_sparse): the masks are
InfLLM-V2's selection, the torch twin under them gives the numpy sparse forward's logits, the continued training
trains what it says, and the stored summary agrees with the other SparDA experiments on the stored backbone."""
import dataclasses

import numpy as np
import pytest

from hybrid_lab.trained import dsa, sparda, sparda_sparse as ss, store, tasks, train


@pytest.fixture(scope="module")
def dense():
    return train.load_checkpoint(train.CHECKPOINTS / "retrieval" / "dense" / "seed0")[0]


@pytest.fixture(scope="module")
def batch():
    return tasks.mix(2, 128, seed=tasks.EVAL_SEED + 7, n_local=4)


def test_masks_are_the_infllm_selection_of_the_sparse_forward(dense, batch):
    k = 2
    masks = ss.block_masks(dense, batch.tokens, k)
    assert masks.shape == (2, dense.cfg.n_layers, 128, 128)
    assert not (masks & ~np.tri(128, dtype=bool)).any()                        # causal
    assert masks.sum(-1).max() == (k + 2) * sparda.BLOCK                      # init + own + k chosen blocks
    for n, row in enumerate(batch.tokens):
        pick, seen = sparda.block_selector(dense, "infllm", k), []

        def select(i, x, probs):
            idx = pick(i, x, probs)
            seen.append(idx[:, 0])
            return idx
        dsa.sparse_forward(dense, row, select)
        for i, idx in enumerate(seen):
            want = np.zeros((128, 128), bool)
            for t in range(128):
                want[t, idx[t][idx[t] >= 0]] = True
            assert np.array_equal(masks[n, i], want), (n, i)


def test_the_torch_twin_under_the_masks_gives_the_numpy_sparse_logits(dense, batch):
    import torch

    from hybrid_lab.trained.torch_stack import TorchStack
    masks = ss.block_masks(dense, batch.tokens, 4)
    net = TorchStack(dataclasses.replace(dense.cfg, dtype="float32"),
                     {n: np.asarray(a, np.float32) for n, a in dense.weights.items()})
    with torch.no_grad():
        got = net(torch.as_tensor(batch.tokens), [torch.as_tensor(masks[:, i]) for i in range(4)]).numpy()
    want = np.stack([dsa.sparse_forward(dense, t, sparda.block_selector(dense, "infllm", 4)) for t in batch.tokens])
    assert np.abs(got - want).max() < 1e-3 * np.abs(want).max()
    dense_logits = np.stack([dsa.sparse_forward(dense, t) for t in batch.tokens])
    assert np.abs(dense_logits - want).max() > 0.1                           # the masks do change the forward


def test_continued_training_trains_a_copy_and_is_seeded(dense):
    before = {n: a.copy() for n, a in dense.weights.items()}
    a, log_a = ss.continue_training(dense, "infllm", k=4, steps=2, batch=2, seed=3)
    b, log_b = ss.continue_training(dense, "infllm", k=4, steps=2, batch=2, seed=3)
    c, _ = ss.continue_training(dense, "dense", k=4, steps=2, batch=2, seed=3)
    assert all(np.array_equal(dense.weights[n], before[n]) for n in before)    # the stored model is not changed
    assert np.isfinite(log_a["loss"]).all() and np.array_equal(log_a["loss"], log_b["loss"])
    assert all(np.array_equal(a.weights[n], b.weights[n]) for n in before)
    assert any(not np.array_equal(a.weights[n], before[n]) for n in before)
    assert any(not np.array_equal(a.weights[n], c.weights[n]) for n in before)  # sparse and dense differ


def test_quick_run_writes_a_summary_its_table_reads(tmp_path):
    res = ss.run_experiment(tmp_path, seeds=(0,), ks=(2,), n_eval=4, command="test", quick=True, workers=1)
    again = ss.load_summary(tmp_path / "sparda_sparse" / "summary.json")
    assert again == res and res["recipe"]["steps"] == 3 and res["recipe"]["lrs"] == [ss.LRS[1]]
    rows = ss.summary_rows(res, 2)
    assert [r[0] for r in rows] == list(ss.BACKBONES)
    assert rows[0][2] == f"{res['accuracy']['stored: infllm k=2 needle']['mean']:.2f} ± 0.00"
    assert "trained on sparse" in ss.summary_table(res)


def test_stored_summary_agrees_with_the_other_sparda_experiments_on_the_stored_backbone():
    """The stored backbone's rows are computed as hybrid-lab train sparda computes them (InfLLM-V2 and the Forecast
    head by SparDA's recipe, same seeds, same evaluation set) and as sparda_bound computes the fine teacher: equal,
    seed by seed. The Forecast head is trained here with BLAS at one thread, in sparda's run at the machine's
    count: its float sums come in another order, which moves a few near-tied block choices (within 0.02)."""
    s = ss.load_summary()
    sp, bound = sparda.load_summary(), sparda.load_bound_summary()
    assert s["recipe"]["steps"] == ss.RECIPE["steps"] and s["seeds"] == [0, 1, 2]
    for seed in map(str, s["seeds"]):
        mine = s["per_seed"][seed]["final"]
        for k in s["ks"]:
            assert mine[f"stored: infllm k={k} needle"] == sp["per_seed"][seed]["final"][f"infllm k={k} needle"]
            assert abs(mine[f"stored: forecast k={k} needle"]
                       - sp["per_seed"][seed]["final"][f"forecast fine k={k} needle"]) <= 0.02
            assert mine[f"stored: fine teacher k={k} needle"] == \
                bound["per_seed"][seed]["final"][f"fine teacher k={k} needle"]
        assert mine["stored: dense needle"] == sp["per_seed"][seed]["final"]["dense needle"]
    rec = s["recipe"]
    for lab, by_lr in rec["val_loss_by_lr"].items():                 # the rate with the lowest validation loss
        assert rec["chosen_lr"][lab] == min(rec["lrs"], key=lambda lr: (by_lr[str(lr)], lr))
        for k, v in by_lr.items():          # the mean of the unrounded losses, rounded; the seeds' are rounded too
            assert abs(v - np.mean([s["per_seed"][x]["val_loss"][lab][k] for x in map(str, s["seeds"])])) <= 1.5e-5
    rows = ss.summary_rows(s, 4)
    for row, b in zip(rows, ss.BACKBONES):
        vals = [s["per_seed"][x]["final"][f"{b}: infllm k=4 needle"] for x in map(str, s["seeds"])]
        assert row[2] == f"{np.mean(vals):.2f} ± {np.std(vals):.2f}"
    assert store.CHECKPOINTS.joinpath("sparda_sparse", "summary.json").is_file()


@pytest.mark.parametrize("bad, match", [
    (dict(attention="sliding"), "attention must be one of"), (dict(k=0), "k must be"), (dict(steps=0), "steps"),
    (dict(lr=-1.0), "lr")])
def test_continue_training_refuses_bad_arguments(dense, bad, match):
    with pytest.raises(ValueError, match=match):
        ss.continue_training(dense, **dict(dict(steps=1, batch=1), **bad))
