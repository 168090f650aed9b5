"""The plots and the explorer of notebook 11 (widgets/dsa_trained.py) draw the numbers they are given or compute.

Each test reads the drawn artists back (line data, error bars, bar heights, markers) and compares them with the input
dict, with the stored results.json, or with the dsa functions the plot is drawn from. The random TinyLLM's entropy is
checked against uniform attention and against the trained model's stored entropies. The explorer runs on the stored
checkpoints (skipped when they are absent) and reads both indexer stages from them (``dsa.load_indexers``).
"""
import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.patches import StepPatch
from plot_helpers import bars, close_figures  # noqa: F401 (an autouse fixture)

from hybrid_lab.models.lightning_indexer import LightningIndexer
from hybrid_lab.models.stack import Stack, StackConfig
from hybrid_lab.trained import dsa, report, store, tasks
from hybrid_lab.widgets import dsa_trained as dw


def _acc(mean, std):
    return {"mean": mean, "std": std}


def _res():
    """A results dict of the dsa experiment with distinct numbers everywhere (k = 2 and 4 only; 3 layers)."""
    acc = {"dense needle": _acc(0.95, 0.01), "dense local": _acc(0.9, 0.02)}
    for j, name in enumerate(dsa.SELECTORS):
        for n, k in enumerate((4, 2)):                                     # stored out of order: the plot sorts
            acc[f"{name} k={k} needle"] = _acc(round(0.1 * j + 0.03 * n, 4), 0.01 * (j + 1))
            acc[f"{name} k={k} local"] = _acc(round(0.5 + 0.05 * j - 0.02 * n, 4), 0.02)
    for n, stage in enumerate(("stage 1", "stage 2", "untrained")):
        for i in range(3):
            acc[f"recall@8 {stage} layer {i}"] = _acc(round(0.2 + 0.2 * n + 0.05 * i, 4), 0.01 * (i + 1))
    for i, e in enumerate((3.5, 0.9, 2.2)):
        acc[f"entropy layer {i}"] = _acc(e, 0.1 * (i + 1))
    acc["entropy uniform"] = _acc(4.1461, 0.0)
    return {"dsa": {"models": {"indexer": {"label": "indexers", "seeds": [0, 1, 2], "accuracy": acc}}}}


RES = _res()
A = RES["dsa"]["models"]["indexer"]["accuracy"]


def _errorbar_halves(container):
    (bars_,) = container.lines[2]
    return [np.ptp(seg[:, 1]) / 2 for seg in bars_.get_segments()]


@pytest.mark.parametrize("kind", ["needle", "local"])
def test_plot_accuracy_vs_k_draws_the_stored_means_and_stds(kind):
    ax = dw.plot_accuracy_vs_k(RES, kind).axes[0]
    assert ax.get_xscale() == "log"
    assert [c.get_label() for c in ax.containers] == list(dsa.SELECTORS)
    for c, name in zip(ax.containers, dsa.SELECTORS):
        line = c.lines[0]
        np.testing.assert_array_equal(line.get_xdata(), [2, 4])
        np.testing.assert_allclose(line.get_ydata(), [A[f"{name} k={k} {kind}"]["mean"] for k in (2, 4)])
        np.testing.assert_allclose(_errorbar_halves(c), [A[f"{name} k={k} {kind}"]["std"] for k in (2, 4)])
    (dense,) = [ln for ln in ax.lines if ln.get_label().startswith("dense")]
    np.testing.assert_allclose(dense.get_ydata(), [A[f"dense {kind}"]["mean"]] * 2)


@pytest.mark.parametrize("kind", ["needle", "local"])
def test_plot_block_accuracy_draws_the_stored_sparda_means(kind):
    res = report.load_results()
    S = res["sparda"]["accuracy"]
    ax = dw.plot_block_accuracy(res, kind).axes[0]
    assert [c.get_label() for c in ax.containers] == list(dw.BLOCK_SELECTORS)
    for c, name in zip(ax.containers, dw.BLOCK_SELECTORS):
        np.testing.assert_array_equal(c.lines[0].get_xdata(), [1, 2, 4])
        np.testing.assert_allclose(c.lines[0].get_ydata(), [S[f"{name} k={k} {kind}"]["mean"] for k in (1, 2, 4)])
        np.testing.assert_allclose(_errorbar_halves(c), [S[f"{name} k={k} {kind}"]["std"] for k in (1, 2, 4)])
    (dense,) = [ln for ln in ax.lines if ln.get_label().startswith("dense")]
    np.testing.assert_allclose(dense.get_ydata(), [S[f"dense {kind}"]["mean"]] * 2)
    with pytest.raises(ValueError, match="sparda"):
        dw.plot_block_accuracy({"dsa": {}}, kind)


def test_block_table_prints_the_blocks_read_beside_the_stored_accuracies():
    acc = {f"{name} k={k} needle": _acc(round(0.1 * j + 0.01 * k, 4), 0.01 * (j + 1))
           for j, name in enumerate(dw.BLOCK_SELECTORS) for k in (1, 4)}
    del acc["forecast coarse k=1 needle"]                                   # absent: n/a
    res = {"sparda": {"accuracy": acc}}
    lines = dw.block_table(res, {4: np.array([[6, 6], [6, 6]]), 1: [2, 3, 3]}).splitlines()
    assert lines[0].split()[:4] == ["k", "chosen", "blocks", "read"] and "(needle accuracy, measured)" in lines[0]
    assert lines[1].split() == ["1", "2-3", "of", "16", "0.01", "±", "0.01", "0.11", "±", "0.02", "0.21", "±",
                                "0.03", "n/a"]                                 # rows sorted by k
    assert lines[2].split()[:4] == ["4", "6", "of", "16"]
    assert lines[2].split()[4:7] == [f"{acc['oracle k=4 needle']['mean']:.2f}", "±", "0.01"]
    assert dw.block_table(res, {1: [3]}, "local", n_blocks=32).splitlines()[1].split() == ["1", "3", "of", "32",
                                                                                          "n/a", "n/a", "n/a", "n/a"]
    real = report.load_results()
    S = real["sparda"]["accuracy"]
    row = dw.block_table(real, {4: [6]}).splitlines()[1]
    assert row.split()[4:] == " ".join(report.fmt(S[f"{n} k=4 needle"]["mean"], S[f"{n} k=4 needle"]["std"])
                                       for n in dw.BLOCK_SELECTORS).split()
    for call, match in [(lambda: dw.block_table({"dsa": {}}, {1: [3]}), "sparda"),
                        (lambda: dw.block_table(res, {}), "reads"),
                        (lambda: dw.block_table(res, {0: [3]}), "reads"),
                        (lambda: dw.block_table(res, {1: []}), "reads"),
                        (lambda: dw.block_table(res, {1: [-1]}), "reads"),
                        (lambda: dw.block_table(res, {1: [3]}, "far"), "kind"),
                        (lambda: dw.block_table(res, {1: [3]}, n_blocks=0), "n_blocks")]:
        with pytest.raises(ValueError, match=match):
            call()


def test_plot_recall_bar_heights_are_the_stored_means():
    ax = dw.plot_recall(RES, 8).axes[0]
    b = bars(ax)
    want = [A[f"recall@8 {s} layer {i}"]["mean"] for s in ("stage 1", "stage 2", "untrained") for i in range(3)]
    np.testing.assert_allclose(b[:, 2], want)
    centers = (b[:, 0] + b[:, 1] / 2).reshape(3, 3)
    np.testing.assert_allclose(centers.mean(0), np.arange(3), atol=1e-9)       # one group per layer
    (chance,) = [ln for ln in ax.lines if ln.get_label().startswith("k random")]
    t = np.arange(7, 128)
    np.testing.assert_allclose(chance.get_ydata(), [np.mean(8 / (t + 1))] * 2)  # k random keys of t + 1 visible


@pytest.fixture(scope="module")
def random_entropy():
    return dw.random_model_entropy(128, seed=0)


def test_random_model_is_nearly_uniform_and_above_every_trained_layer(random_entropy):
    r = random_entropy
    assert r.shape == (3,)                                                       # 2 layers + ln(#visible)
    np.testing.assert_allclose(r[-1], np.log(np.arange(16, 129)).mean())
    assert (r[:-1] <= r[-1]).all() and (r[-1] - r[:-1] < 0.01).all()             # random weights: ~uniform
    assert r[-1] == pytest.approx(4.1461, abs=1e-4)                              # dsa's uniform entry (T = 128)
    stored = report.load_results()["dsa"]["models"]["indexer"]["accuracy"] if report.RESULTS.exists() else A
    trained = [a["mean"] + a["std"] for s, a in stored.items() if s.startswith("entropy layer")]
    assert trained and r[:-1].min() > max(trained)
    assert not np.allclose(dw.random_model_entropy(64, seed=1)[:-1], r[:-1])    # T and seed are used


def test_plot_entropy_draws_the_trained_then_the_random_layers(random_entropy):
    ax = dw.plot_entropy(RES, random_entropy).axes[0]
    np.testing.assert_allclose(bars(ax)[:, 2], [A[f"entropy layer {i}"]["mean"] for i in range(3)] +
                               list(random_entropy[:-1]))
    (uniform,) = [ln for ln in ax.lines if ln.get_label().startswith("uniform")]   # same T: one uniform line
    np.testing.assert_allclose(uniform.get_ydata(), [A["entropy uniform"]["mean"]] * 2)
    ax = dw.plot_entropy(RES, np.array([1.0, 2.0])).axes[0]                     # another maximum: a second line
    assert len([ln for ln in ax.lines if ln.get_label().startswith("uniform")]) == 2


@pytest.mark.skipif(not report.RESULTS.exists(), reason="no stored results.json")
def test_plots_of_the_stored_results_show_the_stored_numbers():
    res = report.load_results()
    acc = res["dsa"]["models"]["indexer"]["accuracy"]
    ax = dw.plot_accuracy_vs_k(res, "needle").axes[0]
    for c, name in zip(ax.containers, dsa.SELECTORS):
        np.testing.assert_allclose(c.lines[0].get_ydata(), [acc[f"{name} k={k} needle"]["mean"] for k in dsa.KS])
    b = bars(dw.plot_recall(res).axes[0])
    n_layers = len(b) // 3
    np.testing.assert_allclose(b[:, 2], [acc[f"recall@8 {s} layer {i}"]["mean"] for s in ("stage 1", "stage 2",
                                                                                       "untrained")
                                         for i in range(n_layers)])


# ------------------------------------------------------------------------------------------------ one query
@pytest.fixture(scope="module")
def dense_model():
    """A random-init dense Stack (3 full-attention layers), the shape of the trained one at a smaller width."""
    return Stack(StackConfig(vocab=tasks.VOCAB, d_model=16, layers=("attn",) * 3, n_heads_q=2, n_heads_kv=1, d_qk=8,
                             d_v=8, d_ff=16, rope_dims_attn=4, seed=1))


def test_plot_selection_layers_marks_the_oracle_and_the_indexer_picks(dense_model):
    tok = np.random.default_rng(0).integers(0, tasks.VOCAB, 40)
    ixs = [LightningIndexer(16, 4, 16, seed=i, rope_dims=8) for i in range(3)]
    k, t = 5, 30
    fig = dw.plot_selection_layers(dense_model, ixs, tok, k, t, evidence=[3, 4])
    caps = dsa.layer_attention(dense_model, tok)
    axes = fig.axes[:3]
    for i, (ax, c) in enumerate(zip(axes, caps)):
        (st,) = [a for a in ax.patches if isinstance(a, StepPatch)]              # the bars: one step per key
        np.testing.assert_allclose(st.get_data().values, c["target"][t, :t + 1])
        np.testing.assert_allclose(st.get_data().edges, np.arange(t + 2) - 0.5)
        assert len(ax.patches) == 1 + 2                                            # + the two shaded evidence keys
        oracle = dsa.oracle_selector(k)(i, c["x"], c["probs"])[t, 0]
        mine = dsa.indexer_selector(ixs, k)(i, c["x"], c["probs"])[t, 0]
        lines = {ln.get_label(): ln for ln in ax.lines}
        np.testing.assert_array_equal(lines[f"oracle top-{k}"].get_xdata(), oracle)
        np.testing.assert_array_equal(lines[f"indexer top-{k}"].get_xdata(), mine)
        np.testing.assert_allclose(lines[f"indexer top-{k}"].get_ydata(), c["target"][t, mine])
        assert f"finds {len(np.intersect1d(oracle, mine))}/{k}" in ax.get_title(loc="left")
    ax = dw.plot_selection_layers(dense_model, None, tok, 50, 3).axes[0]       # k > visible: all 4 keys, no indexer
    assert [ln.get_label() for ln in ax.lines] == ["oracle top-50"]
    np.testing.assert_array_equal(np.sort(ax.lines[0].get_xdata()), np.arange(4))


# ------------------------------------------------------------------------------------------------ checkpoints
def _has_ckpt():
    return all((store.CHECKPOINTS / "dsa" / "indexer" / f"seed{s}.npz").exists() for s in (0, 1, 2)) \
        and (store.CHECKPOINTS / "retrieval" / "dense" / "seed0.npz").exists()


@pytest.mark.skipif(not _has_ckpt(), reason="no stored checkpoints")
def test_explore_builds_and_redraws(monkeypatch):
    loads, chosen = [], []
    real_load, real_selector = dsa.load_indexers, dsa.indexer_selector

    def spy_load(path, stage=2, **kw):                 # which checkpoint and stage the explorer reads
        loads.append((path.name, "2ft" if kw.get("finetuned") else stage))
        return real_load(path, stage, **kw)

    def spy_selector(indexers, k):                     # which indexers the explorer (and its plot) select with
        chosen.append(indexers)
        return real_selector(indexers, k)

    monkeypatch.setattr(dsa, "load_indexers", spy_load)
    monkeypatch.setattr(dsa, "indexer_selector", spy_selector)
    w = dw.explore()
    controls, out = w.children
    selector, k, seed, example = controls.children
    assert [c.description for c in controls.children] == ["selector", "k", "seed", "example"]
    assert list(selector.options) == list(dsa.SELECTORS) + [dsa.FT, "dense"] and tuple(k.options) == dsa.KS
    assert (example.min, example.max) == (0, 7) and list(seed.options) == [0, 1, 2]
    batch = tasks.mix(8, 128, seed=tasks.EVAL_SEED + 900, n_local=4)

    def check():
        outs = out.outputs
        assert not any(o.get("name") == "stderr" for o in outs), outs
        head = "dense (every key)" if selector.value == "dense" else f"{selector.value}, k={k.value}"
        assert outs[0]["text"].startswith(f"{head} (seed {seed.value}), 8 held-out sequences: needle accuracy ")
        assert any((o.get("data") or {}).get("image/png") for o in outs)

    check()
    assert w.static_png                                                          # with_picture: the first picture
    # the printed accuracy is the one of sparse_forward with that selector on the 8 sequences
    model, ixs, _ = real_load(store.CHECKPOINTS / "dsa" / "indexer" / "seed0")
    lg = np.stack([dsa.sparse_forward(model, t, real_selector(ixs, 8)) for t in batch.tokens])
    acc, n = tasks.accuracy(lg, batch, tasks.KIND_NEEDLE)
    assert f"needle accuracy {acc:.2f} ({n} answers)" in out.outputs[0]["text"]
    assert sorted(map(str, loads)) == sorted(map(str, [("seed0", 1), ("seed0", 2), ("seed0", "2ft")]))  # every stage
    first = out.outputs
    example.value = 3
    check()
    assert out.outputs != first
    for value in ("random", "oracle", "untrained indexer", "dense", "indexer stage 1"):
        selector.value = value
        check()
    # "indexer stage 1" selects with the checkpoint's stage-1 weights (not stage 2's: they differ), and the printed
    # accuracy is the one of those indexers
    _, st1, _ = real_load(store.CHECKPOINTS / "dsa" / "indexer" / "seed0", stage=1)
    _, st2, _ = real_load(store.CHECKPOINTS / "dsa" / "indexer" / "seed0", stage=2)
    assert not all(np.array_equal(a.params["Wq"], b.params["Wq"]) for a, b in zip(st1, st2))
    used = chosen[-1]
    assert len(used) == len(st1)
    for a, b in zip(used, st1):
        assert a.params.keys() == b.params.keys()
        assert all(np.array_equal(a.params[n], b.params[n]) for n in a.params)
    lg = np.stack([dsa.sparse_forward(model, t, real_selector(st1, 8)) for t in batch.tokens])
    acc, n = tasks.accuracy(lg, batch, tasks.KIND_NEEDLE)
    assert out.outputs[0]["text"].startswith(f"indexer stage 1, k=8 (seed 0), 8 held-out sequences: needle "
                                             f"accuracy {acc:.2f} ({n} answers)")
    # the report's sparse stage runs on ITS model (fine-tuned) with its indexers
    selector.value = dsa.FT
    check()
    ft_model, ft, _ = real_load(store.CHECKPOINTS / "dsa" / "indexer" / "seed0", finetuned=True)
    lg = np.stack([dsa.sparse_forward(ft_model, t, real_selector(ft, 8)) for t in batch.tokens])
    acc, n = tasks.accuracy(lg, batch, tasks.KIND_NEEDLE)
    assert f"needle accuracy {acc:.2f} ({n} answers)" in out.outputs[0]["text"]
    assert all(np.array_equal(a.params["Wq"], b.params["Wq"]) for a, b in zip(chosen[-1], ft))
    k.value = 2
    check()
    seed.value = 2
    check()
    assert sorted(map(str, loads)) == sorted(map(str, [("seed0", 1), ("seed0", 2), ("seed0", "2ft"), ("seed2", 1),
                                                       ("seed2", 2), ("seed2", "2ft")]))   # once per seed
    assert len(w.redraw_seconds) == 10
    # after the first load (of each seed), a redraw stays well under a second on 2 cores; loose bound for CI noise
    assert np.median(w.redraw_seconds[1:]) < 5.0, w.redraw_seconds


# ------------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("call, match", [
    (lambda: dw.plot_accuracy_vs_k([]), "res"),
    (lambda: dw.plot_accuracy_vs_k({"mqar": {}}), "res"),
    (lambda: dw.plot_accuracy_vs_k(RES, kind="far"), "kind"),
    (lambda: dw.plot_accuracy_vs_k({"dsa": {"models": {"indexer": {"accuracy": {"dense needle": _acc(1, 0)}}}}}),
     "k=K"),
    (lambda: dw.plot_accuracy_vs_k({"dsa": {"models": {"indexer": {"accuracy": {"oracle k=2 needle": _acc(2, 0)}}}}}),
     "oracle k=2 needle"),
    (lambda: dw.plot_recall(RES, k=16), "k"),
    (lambda: dw.plot_recall(RES, k=0), "k"),
    (lambda: dw.plot_recall(RES, k=8, seq_len=4), "seq_len"),
    (lambda: dw.random_model_entropy(T=8), "T"),
    (lambda: dw.random_model_entropy(T=64, seed=-1), "seed"),
    (lambda: dw.plot_entropy(RES, [4.2, 4.1]), "random_entropy"),
    (lambda: dw.plot_entropy(RES, [np.nan, 4.1]), "random_entropy"),
    (lambda: dw.plot_entropy(RES, [[3.0, 4.1]]), "random_entropy"),
    (lambda: dw.plot_entropy({"dsa": {"models": {"indexer": {"accuracy": {}}}}}, [3.0, 4.1]), "entropy layer"),
    (lambda: dw.explore(root="/nonexistent"), "root"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_bad_input_needing_a_model(dense_model):
    tok = np.arange(1, 21)
    ix = [LightningIndexer(16, 4, 16, rope_dims=8) for _ in range(3)]
    mixed = Stack(StackConfig(vocab=tasks.VOCAB, d_model=16, layers=("attn", "swa"), n_heads_q=2, d_qk=8, d_v=8,
                              d_ff=16))
    for call, match in [
        (lambda: dw.plot_selection_layers(mixed, None, tok, 4, 5), "model"),
        (lambda: dw.plot_selection_layers("model", None, tok, 4, 5), "model"),
        (lambda: dw.plot_selection_layers(dense_model, ix[:2], tok, 4, 5), "indexers"),
        (lambda: dw.plot_selection_layers(dense_model, [LightningIndexer(8)] * 3, tok, 4, 5), "indexers"),
        (lambda: dw.plot_selection_layers(dense_model, ix, [1, 999], 4, 1), "tokens"),
        (lambda: dw.plot_selection_layers(dense_model, ix, tok, 0, 5), "k"),
        (lambda: dw.plot_selection_layers(dense_model, ix, tok, 4, 20), "row_query"),
        (lambda: dw.plot_selection_layers(dense_model, ix, tok, 4, 5, evidence=[20]), "evidence"),
    ]:
        with pytest.raises(ValueError, match=match):
            call()
