"""DSA on the trained dense model: the sparse forward, the indexer's gradient on real hidden
states, and the stored indexers' accuracies."""
import numpy as np
import pytest

from hybrid_lab.models.lightning_indexer import LightningIndexer
from hybrid_lab.trained import dsa, tasks, train

DENSE = train.CHECKPOINTS / "retrieval" / "dense" / "seed0"


def test_sparse_forward_without_selector_is_the_model():
    model, _ = train.load_checkpoint(DENSE)
    t = tasks.mix(1, 128, seed=3).tokens[0]
    assert np.array_equal(dsa.sparse_forward(model, t), model.forward(t))


def test_selecting_every_position_is_dense_attention():
    model, _ = train.load_checkpoint(DENSE, dtype="float64")
    t = tasks.mix(1, 64, seed=4, n_needles=(1, 2), n_local=2).tokens[0]
    got = dsa.sparse_forward(model, t, dsa.oracle_selector(64))
    assert np.abs(got - model.forward(t)).max() <= 1e-10 * np.abs(got).max()


def test_fixed_order_forward_is_the_model_to_rounding():
    model, _ = train.load_checkpoint(DENSE, dtype="float64")
    t = tasks.mix(1, 64, seed=8, n_local=2).tokens[0]
    got = dsa.sparse_forward(model, t, fixed_order=True)
    assert np.abs(got - model.forward(t)).max() <= 1e-12 * np.abs(got).max()
    for bad in (1, "yes", None):
        with pytest.raises(ValueError, match="fixed_order must be True or False"):
            dsa.sparse_forward(model, t, fixed_order=bad)


@pytest.mark.parametrize("layer", [1, 3])
def test_indexer_gradient_on_the_real_model_matches_finite_differences(layer):
    model, _ = train.load_checkpoint(DENSE, dtype="float64")
    c = dsa.layer_attention(model, tasks.mix(1, 128, seed=5).tokens[0])[layer]
    T = 24
    x, p = c["x"][:T], c["target"][:T, :T]
    p = p / p.sum(-1, keepdims=True)
    ix = LightningIndexer(model.cfg.d_model, 2, 8, init_scale=0.2, rope_dims=4, seed=1)
    _, grads = ix.loss_and_grads(x, x, p, np.arange(T))
    rng = np.random.default_rng(0)
    for name, g in grads.items():
        P = ix.params[name]
        for idx in [tuple(rng.integers(0, n) for n in P.shape) for _ in range(4)]:
            old = P[idx]
            P[idx] = old + 1e-6
            lp = ix.loss_and_grads(x, x, p, np.arange(T))[0]
            P[idx] = old - 1e-6
            lm = ix.loss_and_grads(x, x, p, np.arange(T))[0]
            P[idx] = old
            assert abs((lp - lm) / 2e-6 - g[idx]) <= 1e-5 * max(1.0, abs(g[idx])), (name, idx)


def test_rope_lets_the_indexer_learn_a_positional_head():
    """Layer 1 of the trained model attends by position; an indexer without RoPE cannot imitate it."""
    model, _ = train.load_checkpoint(DENSE)
    tr = tasks.mix(8, 128, seed=50_000, n_local=4).tokens
    ev = tasks.mix(4, 128, seed=tasks.EVAL_SEED + 1, n_local=4).tokens
    r = dsa.rope_ablation(model, tr, ev, steps=120, lr=1e-2, k=8, rope_dims=8)
    assert sorted(r) == ["kl no rope", "kl rope", "recall no rope", "recall rope"]
    assert all(v.shape == (model.cfg.n_layers,) for v in r.values())
    assert r["recall rope"][1] > r["recall no rope"][1] + 0.3, r
    assert r["kl no rope"][1] > r["kl rope"][1] + 1.0, r                   # the content-only indexer cannot fit it
    share = dsa.previous_token_share(model, ev)
    assert share[1] > 0.8 and np.delete(share, 1).max() < 0.2, share        # layer 1 attends to the token before
    with pytest.raises(ValueError, match="tokens"):
        dsa.previous_token_share(model, ev[:, :1])
    with pytest.raises(ValueError, match="rope_dims"):
        dsa.rope_ablation(model, tr, ev, steps=1, rope_dims=0)


def test_attention_targets_sum_and_find_the_previous_token_layer():
    """Where the trained model attends (notebook 11 §1): the three sets are disjoint parts of a row; on a sequence of
    one repeated token every key is the sink, recent or a match, so they sum to 1; layer 1 is the recent-token layer."""
    model, _ = train.load_checkpoint(DENSE)
    ev = tasks.mix(4, 128, seed=tasks.EVAL_SEED + 1, n_local=4).tokens
    w = dsa.attention_targets(model, ev)
    L, H = model.cfg.n_layers, model.cfg.n_heads_q
    assert all(w[n].shape == (L, H) for n in ("sink", "recent", "match", "top"))
    parts = w["sink"] + w["recent"] + w["match"]
    assert (parts <= 1 + 1e-9).all() and (w["top"] <= 1 + 1e-9).all()
    assert np.allclose(w["uniform_sink"], np.mean([1 / (t + 1) for t in range(16, 128)]))
    assert (w["recent"][1] > 2 * w["uniform_recent"][1]).sum() >= 3            # 3 of layer 1's 4 heads
    assert (np.delete(w["recent"], 1, axis=0) < 3 * w["uniform_recent"][0]).all()
    same = dsa.attention_targets(model, np.full((1, 40), 7), min_t=8)
    assert np.allclose(same["sink"] + same["recent"] + same["match"], 1.0)
    assert np.allclose(same["uniform_sink"] + same["uniform_recent"] + same["uniform_match"], 1.0)
    with pytest.raises(ValueError, match="min_t"):
        dsa.attention_targets(model, ev[:, :16])
    with pytest.raises(ValueError, match="recent"):
        dsa.attention_targets(model, ev, recent=0)


def test_stored_indexers_reproduce_their_accuracy():
    model, ixs, meta = dsa.load_indexers(train.CHECKPOINTS / "dsa" / "indexer" / "seed1")
    ev = tasks.mix(64, 128, seed=tasks.EVAL_SEED + 1, n_local=4)
    lg = np.stack([dsa.sparse_forward(model, t, dsa.indexer_selector(ixs, 4)) for t in ev.tokens])
    got = tasks.accuracy(lg, ev, tasks.KIND_NEEDLE)[0]
    assert abs(got - meta["final"]["indexer stage 2 k=4 needle"]) <= 0.02


def test_quick_run_trains_and_stores(tmp_path):
    metas = dsa.run_experiment(tmp_path, seeds=(0,), quick=True, command="test")
    loss = metas[0]["log"]["loss"]
    assert loss[-1] < loss[0]
    m, ixs, meta = dsa.load_indexers(tmp_path / "dsa" / "indexer" / "seed0")
    assert len(ixs) == m.cfg.n_layers and meta["final"]["dense needle"] == pytest.approx(1.0, abs=0.05)


# ---------------------------------------------------- the report's sparse stage: the model fine-tuned under top-k
def test_sparse_forward_is_the_torch_twin_under_the_same_selection():
    """What the fine-tuning trains (the torch twin reading each layer's selected positions only) is what the numpy
    model computes with the indexer selecting (checked on the stored fine-tuned model)."""
    import torch

    from hybrid_lab.trained.torch_stack import TorchStack

    model, ixs, _ = dsa.load_indexers(train.CHECKPOINTS / "dsa" / "indexer" / "seed0", finetuned=True)
    ev = tasks.mix(2, 128, seed=tasks.EVAL_SEED + 1, n_local=4)
    masks, _ = dsa.selection_masks(model, ev.tokens, ixs, 4)
    assert masks.shape == (2, 4, 128, 128) and (masks.sum(-1) == np.minimum(np.arange(128) + 1, 4)).all()
    assert not np.triu(masks, 1).any()                                              # causal
    net = TorchStack(model.cfg, model.weights).double()
    with torch.no_grad():
        got = net(torch.as_tensor(ev.tokens), [torch.as_tensor(masks[:, i]) for i in range(4)]).numpy()
    want = np.stack([dsa.sparse_forward(model, t, dsa.indexer_selector(ixs, 4)) for t in ev.tokens])
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


def test_finetune_sparse_trains_the_model_and_the_indexers_and_leaves_the_inputs():
    model, ixs, _ = dsa.load_indexers(train.CHECKPOINTS / "dsa" / "indexer" / "seed0", stage=1)
    before = {n: a.copy() for n, a in model.weights.items()}
    ix_before = {n: a.copy() for n, a in ixs[0].params.items()}
    ft, ft_ixs, log = dsa.finetune_sparse(model, ixs, steps=3, k=4, batch=2, seed=0)
    assert log["loss"].shape == (3,) and log["kl"].shape == (3, 4)
    assert np.isfinite(log["loss"]).all() and np.isfinite(log["kl"]).all()
    assert all(np.array_equal(model.weights[n], before[n]) for n in before)          # inputs untouched
    assert all(np.array_equal(ixs[0].params[n], ix_before[n]) for n in ix_before)
    assert any(not np.allclose(ft.weights[n], before[n]) for n in before)            # the model moved
    assert any(not np.allclose(ft_ixs[0].params[n], ix_before[n]) for n in ix_before)


def test_stored_finetuned_model_reproduces_its_accuracy():
    model, ixs, meta = dsa.load_indexers(train.CHECKPOINTS / "dsa" / "indexer" / "seed0", finetuned=True)
    ev = tasks.mix(64, 128, seed=tasks.EVAL_SEED + 1, n_local=4)
    lg = np.stack([dsa.sparse_forward(model, t, dsa.indexer_selector(ixs, 2)) for t in ev.tokens])
    got = tasks.accuracy(lg, ev, tasks.KIND_NEEDLE)[0]
    assert abs(got - meta["final"][f"{dsa.FT} k=2 needle"]) <= 0.02
    with pytest.raises(ValueError, match="finetuned"):
        dsa.load_indexers(train.CHECKPOINTS / "dsa" / "indexer" / "seed0", stage=1, finetuned=True)
