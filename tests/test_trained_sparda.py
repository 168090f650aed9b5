"""SparDA's block selection on the trained dense model: block-sparse reading, InfLLM-V2 against
the oracle, and recorded decode traces that replay through the offload simulator to their stored summaries."""
import json

import numpy as np
import pytest

from hybrid_lab.models import forecast as fc
from hybrid_lab.serving import offload_sim as osim
from hybrid_lab.trained import dsa, report, sparda, store, tasks

SUMMARY = json.loads((store.CHECKPOINTS / "sparda" / "summary.json").read_text())
EV = tasks.mix(64, 128, seed=tasks.EVAL_SEED + 1, n_local=4)        # the summary's evaluation set (traces: first 4)


def test_block_positions_are_the_causal_tokens_of_the_blocks():
    B, T = sparda.BLOCK, 3 * sparda.BLOCK
    t = np.arange(T)
    idx = np.stack([np.zeros(T, np.int64), t // B, np.full(T, 2)], 1)        # init, own block, block 2 (future for most)
    pos = sparda.blocks_to_positions(idx, T)
    assert pos.shape == (T, 1, 3 * B)
    for q in range(T):
        got = set(pos[q, 0][pos[q, 0] >= 0].tolist())
        want = set(range(B)) | set(range((q // B) * B, q + 1)) | set(range(2 * B, T))
        assert got == {p for p in want if p <= q}, q


def test_selecting_every_block_is_dense_attention():
    model, _ = store.load_checkpoint(store.CHECKPOINTS / "retrieval" / "dense" / "seed0", dtype="float64")
    t = EV.tokens[0]
    k = len(t) // sparda.BLOCK - 2                                          # every block beyond init and local
    got = dsa.sparse_forward(model, t, sparda.block_selector(model, "oracle", k))
    assert np.abs(got - model.forward(t)).max() <= 1e-10 * np.abs(got).max()


@pytest.mark.parametrize("kind", ["infllm", "oracle", "forecast fine"])
def test_recorded_traces_replay_to_their_stored_summary(kind):
    for seed, rec in SUMMARY["per_seed"].items():
        stored = rec["traces"][kind]
        for n, trace in enumerate(stored["trace"]):
            r = sparda.replay_layers([[np.array(s, np.int64) for s in layer] for layer in trace])
            assert r["hit_rate"] == pytest.approx(stored["hit_rate"][n], abs=1e-12)
            assert r["churn"] == pytest.approx(stored["churn"][n], abs=1e-12)
            assert r["copied"].sum(1).tolist() == stored["copied_per_layer"][n]


def test_the_trace_is_what_the_model_selects():
    model, _ = store.load_checkpoint(store.CHECKPOINTS / "retrieval" / "dense" / "seed0")
    trace = sparda.decode_trace(model, EV.tokens[0], "infllm", 2)
    stored = SUMMARY["per_seed"]["0"]["traces"]["infllm"]["trace"][0]
    assert [[s.tolist() for s in layer] for layer in trace] == stored


def test_results_json_carries_the_summary():
    res = report.load_results()
    assert res["sparda"]["accuracy"] == SUMMARY["accuracy"]
    a = SUMMARY["accuracy"]
    assert a["oracle k=1 needle"]["mean"] >= 0.99                           # the oracle's blocks keep the answers
    assert a["infllm k=4 needle"]["mean"] > a["infllm k=1 needle"]["mean"]


def test_offload_rows_are_the_simulator_at_the_measured_churn():
    rows = sparda.offload_rows(0.3)
    h100 = [r for r in rows if r[0] == "H100" and r[1] == "measured"][0]
    assert h100[3] == pytest.approx(1e3 * osim.step_time(osim.H100, osim.MINICPM_8B, 16, 131072, "Sparse", churn=0.3))
    assert h100[4] == pytest.approx(1e3 * osim.step_time(osim.H100, osim.MINICPM_8B, 16, 131072, "SparDA", churn=0.3))
    assumed = [r for r in rows if r[0] == "H100" and r[1] == "assumed"][0]
    assert h100[3] > assumed[3]                                             # more churn, more to copy


# ------------------------------------------------------------------ the Forecast head on the model's real hidden states
DENSE0 = store.CHECKPOINTS / "retrieval" / "dense" / "seed0"


@pytest.mark.parametrize("teacher", sparda.TEACHERS)
def test_forecast_loss_decreases_on_real_hidden_states(teacher):
    """CPU smoke run (a few seconds): the rest-bucket KL on the trained model's real hidden states goes down, on the
    training sequences and on held-out ones."""
    model, _ = store.load_checkpoint(DENSE0)
    tr = tasks.mix(16, 128, seed=60_000, n_local=4).tokens
    params, log = sparda.train_forecast_head(model, tr, teacher, steps=30, seed=0)
    assert log["loss"].shape == (30,) and np.isfinite(log["loss"]).all()
    assert log["loss"][-1] < 0.85 * log["loss"][0], log["loss"][[0, -1]]
    held = sparda.forecast_setup(model, EV.tokens[:8], teacher)
    untrained, _ = sparda.train_forecast_head(model, tr, teacher, steps=1, lr=1e-12, seed=0)
    assert fc.forecast_loss_and_grad(params, held)[0] < fc.forecast_loss_and_grad(untrained, held)[0]


@pytest.mark.parametrize("source,keys", [("previous", "coarse"), ("same", "coarse"), ("previous", "fine")])
def test_forecast_gradient_on_real_states_matches_finite_differences(source, keys):
    """The hand-written gradient of every head variant (a fine-key head's max passes its gradient to the window that
    won; h is small enough that no max changes hands)."""
    model, _ = store.load_checkpoint(DENSE0, dtype="float64")
    setup = sparda.forecast_setup(model, EV.tokens[:2], "fine", source=source, keys=keys)
    rng = np.random.default_rng(3)
    params = {f"W{i}": 0.3 * rng.normal(size=(64, 1, 16)) for i in range(4)}
    _, grads = fc.forecast_loss_and_grad(params, setup)
    for name in ("W0", "W2"):
        for _ in range(4):
            j = tuple(int(rng.integers(n)) for n in params[name].shape)
            h = 1e-6
            up = {n: a.copy() for n, a in params.items()}
            dn = {n: a.copy() for n, a in params.items()}
            up[name][j] += h
            dn[name][j] -= h
            fd = (fc.forecast_loss_and_grad(up, setup)[0] - fc.forecast_loss_and_grad(dn, setup)[0]) / (2 * h)
            assert grads[name][j] == pytest.approx(fd, rel=1e-4, abs=1e-8), (name, j)


def test_forecast_selector_reads_the_previous_layers_input():
    model, _ = store.load_checkpoint(DENSE0)
    heads = sparda.load_forecast_heads(0, "fine")
    cap: list = []
    picked = {}
    select = sparda.block_selector(model, "forecast", 2, heads)

    def spy(i, x, probs):
        picked[i] = select(i, x, probs)
        return picked[i]
    dsa.sparse_forward(model, EV.tokens[0], spy, capture=cap)
    T = EV.tokens.shape[1]
    for i in range(4):
        want = sparda.forecast_selection(model, i, cap[max(i - 1, 0)]["x"], cap[i]["x"], heads, 2)
        np.testing.assert_array_equal(picked[i], sparda.blocks_to_positions(want, T))


def test_head_variants_read_what_they_say():
    """source "same" reads layer l's own input at every layer, "previous" layer l-1's (layer 0 its own); keys "fine"
    holds (2, 1) keys and pools the logits onto the (8, 4) grid, the teacher and candidates unchanged."""
    model, _ = store.load_checkpoint(DENSE0)
    toks = EV.tokens[:2]
    hs = sparda.hidden_states(model, toks)
    prev = sparda.forecast_setup(model, toks, "fine")
    same = sparda.forecast_setup(model, toks, "fine", source="same")
    fine = sparda.forecast_setup(model, toks, "fine", keys="fine")
    for i in range(4):
        np.testing.assert_array_equal(same.x_src[i], hs["X"][i][:, prev.q_pos])
        np.testing.assert_array_equal(prev.x_src[i], hs["X"][max(i - 1, 0)][:, prev.q_pos])
        np.testing.assert_array_equal(fine.teacher[i], prev.teacher[i])
        assert fine.kc[i].shape[1] == 127 and prev.kc[i].shape[1] == 31       # (2, 1) and (8, 4) windows of 128
    assert "pool" in fine.extra and "pool" not in prev.extra
    np.testing.assert_array_equal(fine.mask, prev.mask)
    with pytest.raises(ValueError, match="source"):
        sparda.forecast_setup(model, toks, "fine", source="next")
    with pytest.raises(ValueError, match="keys"):
        sparda.block_selector(model, "infllm", 2, keys="medium")


def test_pooled_logits_are_the_max_of_the_fine_logits():
    rng = np.random.default_rng(5)
    x, W, kf = rng.normal(size=(2, 3, 8)), rng.normal(size=(8, 1, 4)), rng.normal(size=(2, 127, 1, 4))
    zf = fc.forecast_logits(x, W, kf)
    z, arg = fc.pooled_forecast_logits(x, W, kf, 31, sparda.FINE, (sparda.WINDOW, sparda.STRIDE))
    np.testing.assert_allclose(z, fc.pool_fine_to_coarse(zf, 31, sparda.FINE, (sparda.WINDOW, sparda.STRIDE)))
    np.testing.assert_array_equal(np.take_along_axis(zf, arg, -1), z)         # arg: where each max came from
    cols = fc.pool_columns(127, 31, sparda.FINE, (sparda.WINDOW, sparda.STRIDE))
    assert (cols[np.arange(31), 0] == 4 * np.arange(31)).all() and (arg >= 4 * np.arange(31)).all()
    assert (arg <= 4 * np.arange(31) + 6).all()                               # 7 (2, 1) windows inside an (8, 4) one
    with pytest.raises(ValueError, match="Nf"):
        fc.pooled_forecast_logits(x, W, kf[:, :100], 31)


def test_mini_batches_are_seeded_and_held_out_loss_is_logged():
    model, _ = store.load_checkpoint(DENSE0)
    tr = tasks.mix(8, 128, seed=60_000, n_local=4).tokens
    setup, held = sparda.forecast_setup(model, tr, "fine"), sparda.forecast_setup(model, EV.tokens[:4], "fine")
    a, la = sparda.train_forecast_head(model, tr, steps=6, seed=1, setup=setup, batch=2, held_out=held, every=4)
    b, lb = sparda.train_forecast_head(model, tr, steps=6, seed=1, setup=setup, batch=2, held_out=held, every=4)
    c, _ = sparda.train_forecast_head(model, tr, steps=6, seed=2, setup=setup, batch=2)
    full, _ = sparda.train_forecast_head(model, tr, steps=6, seed=1, setup=setup)
    assert all(np.array_equal(a[n], b[n]) for n in a) and np.array_equal(la["loss"], lb["loss"])
    assert not np.array_equal(a["W1"], c["W1"]) and not np.array_equal(a["W1"], full["W1"])
    assert la["held_step"] == [4, 6] and la["held_loss"][-1] == fc.forecast_loss_and_grad(a, held)[0]
    with pytest.raises(ValueError, match="batch"):
        sparda.train_forecast_head(model, tr, steps=1, setup=setup, batch=9)


BOUND = sparda.load_bound_summary()


def test_the_bound_experiments_recipe_row_is_the_sparda_experiments_head():
    """The bound experiment's "SparDA recipe" head is trained as hybrid-lab train sparda trains its fine head (same
    sequences, steps, seed): their stored accuracies on the same evaluation set agree, seed by seed."""
    for s, r in BOUND["per_seed"].items():
        for k in BOUND["ks"]:
            for kind in ("needle", "local"):
                assert r["final"][f"SparDA recipe k={k} {kind}"] == SUMMARY["per_seed"][s]["final"][
                    f"forecast fine k={k} {kind}"], (s, k, kind)
                for ref in ("infllm", "oracle"):
                    assert r["final"][f"{ref} k={k} {kind}"] == SUMMARY["per_seed"][s]["final"][f"{ref} k={k} {kind}"]


def test_bound_rows_print_the_stored_numbers():
    rows = sparda.bound_rows(BOUND, 4)
    assert [r[0] for r in rows] == [f"head: {v}" for v in sparda.BOUND_VARIANTS] + ["fine teacher", "infllm", "oracle"]
    acc = BOUND["accuracy"]["fine keys k=4 needle"]
    assert rows[3][2] == f"{acc['mean']:.2f} ± {acc['std']:.2f}"
    with pytest.raises(ValueError, match="k"):
        sparda.bound_rows(BOUND, 3)


def test_the_bound_experiment_runs_quick(tmp_path):
    """The command's quick mode (a smoke run: 16 sequences, 20 steps, one seed) writes a summary bound_rows reads."""
    s = sparda.run_bound_experiment(tmp_path, seeds=(0,), ks=(2,), n_eval=16, quick=True)
    assert json.loads((tmp_path / "sparda_bound" / "summary.json").read_text()) == s
    assert len(sparda.bound_rows(s, 2)) == 7 and s["variants"]["converged"]["steps"] == 20


def test_stored_forecast_heads_reproduce_their_accuracy():
    model, _ = store.load_checkpoint(DENSE0)
    heads = sparda.load_forecast_heads(0, "fine")
    lg = np.stack([dsa.sparse_forward(model, t, sparda.block_selector(model, "forecast", 2, heads)) for t in EV.tokens])
    got = tasks.accuracy(lg, EV, tasks.KIND_NEEDLE)[0]
    assert abs(got - SUMMARY["per_seed"]["0"]["final"]["forecast fine k=2 needle"]) <= 0.02


def test_forecast_needs_its_heads():
    model, _ = store.load_checkpoint(DENSE0)
    with pytest.raises(ValueError, match="params"):
        sparda.block_selector(model, "forecast", 2)
    with pytest.raises(ValueError, match="params"):
        sparda.block_recall(model, EV.tokens[:1], 1, "forecast", {"W0": np.zeros((64, 1, 16))})
    with pytest.raises(ValueError, match="teacher"):
        sparda.load_forecast_heads(0, "medium")


# ------------------------------------------------------------------ blocks read, and the teacher used as the selector
def test_blocks_read_counts_the_distinct_blocks_of_a_selection():
    idx = np.array([[0, 3, -1, -1], [0, 0, 2, 5], [-1, -1, -1, -1], [5, -1, 1, 0]])
    assert sparda.blocks_read(idx).tolist() == [2, 3, 0, 3]
    assert sparda.blocks_read(idx[None]).shape == (1, 4)
    with pytest.raises(ValueError, match="block_idx"):
        sparda.blocks_read(np.array([[0, -2]]))
    with pytest.raises(ValueError, match="block_idx"):
        sparda.blocks_read(3)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_a_query_reads_the_init_and_its_own_block_besides_the_k_chosen(k):
    T, B = 128, sparda.BLOCK
    got = sparda.position_reads(T, k)
    cur = np.arange(T) // B
    want = np.where(cur == 0, 1, 2) + np.minimum(k, np.maximum(cur - 1, 0))   # {0, own} + min(k, candidates)
    np.testing.assert_array_equal(got, want)
    assert got[-1] == k + sparda.N_INIT + sparda.N_LOCAL
    with pytest.raises(ValueError, match="k"):
        sparda.position_reads(T, T // B - 1)


def test_every_selector_reads_what_the_selection_rule_counts():
    model, _ = store.load_checkpoint(DENSE0)
    heads = sparda.load_forecast_heads(0, "fine")
    for k in (1, 4):
        want = sparda.position_reads(EV.tokens.shape[1], k)
        for kind in ("infllm", "oracle", "forecast", "fine teacher", "coarse teacher"):
            got = sparda.query_reads(model, EV.tokens[:1], k, kind, heads if kind == "forecast" else None)
            assert got.shape == (1, EV.tokens.shape[1], model.cfg.n_layers)
            np.testing.assert_array_equal(got[0], np.repeat(want[:, None], model.cfg.n_layers, 1), err_msg=kind)


def test_the_coarse_teacher_selects_what_infllm_selects_and_the_fine_one_is_the_training_target():
    model, _ = store.load_checkpoint(DENSE0)
    caps = dsa.layer_attention(model, EV.tokens[0])
    setup = sparda.forecast_setup(model, EV.tokens[:1], "fine")
    for i, c in enumerate(caps):
        np.testing.assert_array_equal(sparda.block_selection(model, i, c["x"], "coarse teacher", 2),
                                      sparda.block_selection(model, i, c["x"], "infllm", 2))
        sc = sparda._teacher_scores(model, i, c["x"], "fine")
        np.testing.assert_allclose(sc[:, setup.q_pos], setup.teacher[i], rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="teacher"):
        sparda.teacher_selection(model, 0, caps[0]["x"], 2, "medium")


def test_the_fine_teacher_as_the_selector_keeps_the_needles_its_head_misses():
    model, _ = store.load_checkpoint(DENSE0)
    got = sparda.block_accuracy(model, EV, "fine teacher", 4)               # the summary's 64 evaluation sequences
    assert set(got) == {"needle", "local"}
    head = SUMMARY["per_seed"]["0"]["final"]["forecast fine k=4 needle"]
    assert got["needle"] >= 0.95 and got["needle"] > head + 0.1                # notebook 11: 0.98 against 0.82
    with pytest.raises(ValueError, match="data"):
        sparda.block_accuracy(model, EV.tokens, "infllm", 4)


def test_reported_teacher_ablation_prints_table_6_and_its_gains():
    lines = sparda.reported_teacher_ablation().splitlines()
    assert lines[0].startswith("reported (SparDA Table 6, SparDA notes §4.6)")
    assert lines[1].split(": ")[1] == ("RULER 75.7 -> 78.7 (+3.0), reasoning 82.5 -> 84.7 (+2.2), four-family average "
                                       "60.4 -> 61.7 (+1.3)")
    assert lines[2].split(": ")[1] == ("RULER 71.4 -> 73.9 (+2.5), reasoning 55.4 -> 57.2 (+1.8), four-family average "
                                       "50.1 -> 51.7 (+1.6)")
