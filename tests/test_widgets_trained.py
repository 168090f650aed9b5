"""The plots and the explorer of notebook 10 (widgets/trained.py) draw the numbers they are given or compute.

Each test reads the drawn artists back (line data, error bars, bar heights, image arrays, markers) and compares them
with the input dict or with the pure function the plot is drawn from. The explorer is built on the stored
checkpoints (skipped when they are absent) and moved once per control.
"""
import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.image import AxesImage
from plot_helpers import bars, close_figures  # noqa: F401 (an autouse fixture)

from hybrid_lab.models.hysparse2 import HySparse2
from hybrid_lab.trained import families as fam
from hybrid_lab.trained import tasks, train
from hybrid_lab.widgets import trained as tw


def images(ax):
    return {im.get_label(): im for im in ax.get_children() if isinstance(im, AxesImage)}


def _acc(mean, std):
    return {"mean": mean, "std": std}


MQAR = {"mqar": {"models": {
    "dense": {"label": "dense attention", "seeds": [0, 1],
              "accuracy": {"pairs=8": _acc(0.5, 0.1), "pairs=2": _acc(0.9, 0.05), "pairs=4": _acc(0.7, 0.0)}},
    "mamba2": {"label": "pure Mamba-2", "seeds": [0, 1],
               "accuracy": {"pairs=2": _acc(0.3, 0.2), "pairs=4": _acc(0.2, 0.1), "pairs=8": _acc(0.1, 0.05)}},
}}}


def test_plot_mqar_draws_the_means_and_stds_against_pairs():
    ax = tw.plot_mqar(MQAR).axes[0]
    assert ax.get_xscale() == "log"
    # lines in the experiment's model order (train.EXPERIMENTS["mqar"]: mamba2 before dense), labelled by the results
    assert [c.get_label() for c in ax.containers] == ["pure Mamba-2", "dense attention"]
    for c, model in zip(ax.containers, ["mamba2", "dense"]):
        line, _, (bars_,) = c.lines
        acc = MQAR["mqar"]["models"][model]["accuracy"]
        np.testing.assert_array_equal(line.get_xdata(), [2, 4, 8])                # sorted by N
        np.testing.assert_allclose(line.get_ydata(), [acc[f"pairs={p}"]["mean"] for p in (2, 4, 8)])
        half = [np.ptp(seg[:, 1]) / 2 for seg in bars_.get_segments()]           # error bar = ± std
        np.testing.assert_allclose(half, [acc[f"pairs={p}"]["std"] for p in (2, 4, 8)])


RETR = {"retrieval": {"models": {
    m: {"label": m, "seeds": [0, 1, 2],
        "accuracy": {s: _acc(round(0.1 * i + 0.02 * j, 4), 0.01 * (j + 1)) for j, s in enumerate(tw.RETRIEVAL_SETTINGS)}}
    for i, m in enumerate(["hysparse2", "swa", "dense"])}}}


def test_plot_retrieval_bar_heights_are_the_stored_means():
    fig = tw.plot_retrieval(RETR)
    ax = fig.axes[0]
    order = ["swa", "hysparse2", "dense"]                                         # train.EXPERIMENTS order
    want = [RETR["retrieval"]["models"][m]["accuracy"][s]["mean"] for s in tw.RETRIEVAL_SETTINGS for m in order]
    b = bars(ax)
    np.testing.assert_allclose(b[:, 2], want)
    centers = (b[:, 0] + b[:, 1] / 2).reshape(len(tw.RETRIEVAL_SETTINGS), len(order))
    np.testing.assert_allclose(np.round(centers.mean(0), 9), np.arange(3))        # one group per model
    assert [t.get_text() for t in ax.get_xticklabels()] == order
    assert any(f"reach {tw.swa_reach()} positions" in t.get_text() for t in fig.texts)
    assert tw.swa_reach() == 4 * 15                                               # 4 SWA layers of window 16
    b = bars(tw.plot_retrieval(RETR, models=["dense"]).axes[0])
    np.testing.assert_allclose(b[:, 2], [RETR["retrieval"]["models"]["dense"]["accuracy"][s]["mean"]
                                         for s in tw.RETRIEVAL_SETTINGS])


def _meta(model, seed, ys):
    return {"model": model, "seed": seed, "label": f"{model} label",
            "log": {"eval_step": [10, 20, 30], "eval": [{"needle": y, "local": 1.0} for y in ys]}}


def test_plot_curves_one_line_per_seed_one_colour_per_model():
    metas = [_meta("a", 0, [0.1, 0.2, 0.3]), _meta("a", 1, [0.0, 0.5, 0.6]), _meta("b", 0, [0.2, 0.2, 0.9])]
    ax = tw.plot_curves(metas, "needle").axes[0]
    assert len(ax.lines) == 3
    for ln, m in zip(ax.lines, metas):
        np.testing.assert_array_equal(ln.get_xdata(), [10, 20, 30])
        np.testing.assert_allclose(ln.get_ydata(), [e["needle"] for e in m["log"]["eval"]])
    assert ax.lines[0].get_color() == ax.lines[1].get_color() != ax.lines[2].get_color()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a label", "b label"]


@pytest.fixture(scope="module")
def hs2():
    """A random-init HySparse2 of the trained spec (window 8 + top-16), float32."""
    cfg = fam.make_config(fam.SPECS["hysparse2"], tasks.VOCAB, 64, seed=3)
    return HySparse2(cfg)


def test_selection_map_holds_the_forced_window_and_k_positions(hs2):
    tok = np.random.default_rng(0).integers(0, tasks.VOCAB, 48)
    m = tw.selection_map(hs2, tok)
    sel, sc = m["selected"], m["scores"]
    T, w, k = len(tok), hs2.cfg.window, hs2.cfg.topk
    assert sel.shape == sc.shape == (T, T) and sel.dtype == bool
    for t in range(T):
        assert sel[t, max(0, t - w + 1):t + 1].all()                               # the forced window
        assert not sel[t, t + 1:].any()                                            # causal
        assert sel[t].sum() == min(t + 1, w + k)
    assert (sc >= 0).all() and (sc.sum(1) <= 1 + 1e-5).all() and (np.triu(sc, 1) == 0).all()
    np.testing.assert_allclose(m["logits"], hs2.forward(tok), rtol=1e-6)


def test_plot_selection_draws_the_selection_and_the_evidence(hs2):
    batch = tasks.needles(2, 64, 2, seed=5)
    fig = tw.plot_selection(hs2, batch, row=1)
    left, right = fig.axes[:2]
    m = tw.selection_map(hs2, batch.tokens[1])
    ims = images(left)
    np.testing.assert_array_equal(ims["selected"].get_array(), m["selected"].astype(int))
    np.testing.assert_allclose(ims["FA probability"].get_array(), m["scores"])
    needle = (batch.kind[1] == tasks.KIND_NEEDLE)
    pos = np.nonzero(needle)[0]
    (x_line,) = [ln for ln in left.lines if ln.get_label() == "needle evidence"]
    np.testing.assert_array_equal(x_line.get_xdata(), pos - batch.dist[1, pos])
    np.testing.assert_array_equal(x_line.get_ydata(), pos)
    n_ok = int((m["logits"][pos].argmax(-1) == batch.targets[1, pos]).sum())
    assert f"{n_ok}/{len(pos)} answers right" in fig._suptitle.get_text()
    assert len(right.get_yticklabels()) == len(pos)                                # one zoomed row per answer


def test_plot_needles_bars_are_the_probabilities_of_the_right_value():
    batch = tasks.needles(2, 64, 3, seed=7)
    logits = np.random.default_rng(1).normal(size=(2, 64, tasks.VOCAB)).astype(np.float32)
    pos = np.nonzero(batch.kind[0] == tasks.KIND_NEEDLE)[0]
    logits[0, pos[0], batch.targets[0, pos[0]]] = 50.0                            # the first needle: right
    ax = tw.plot_needles(logits, batch, 0).axes[0]
    lg = logits[0, pos].astype(np.float64)
    p = np.exp(lg - lg.max(-1, keepdims=True))
    p = p[np.arange(len(pos)), batch.targets[0, pos]] / p.sum(-1)
    np.testing.assert_allclose(bars(ax)[:, 2], p, rtol=1e-6)
    assert ax.patches[0].get_facecolor() != ax.patches[1].get_facecolor()         # green vs red
    assert [f"distance {d}" in t.get_text() for t, d in zip(ax.get_xticklabels(), batch.dist[0, pos])] == \
        [True] * len(pos)


def _has_ckpt(model):
    return (train.CHECKPOINTS / "retrieval" / model / "seed0.npz").exists()


@pytest.mark.skipif(not (_has_ckpt("hysparse2") and _has_ckpt("hybrid_swa")), reason="no stored checkpoints")
def test_explore_builds_and_redraws():
    w = tw.explore()
    controls, out = w.children
    model, seed, needles, example = controls.children
    assert [c.description for c in controls.children] == ["model", "seed", "needles", "example"]
    assert model.value == "hysparse2" and (needles.min, needles.max, example.min, example.max) == (1, 4, 0, 15)
    assert set(train.EXPERIMENTS["retrieval"].models) >= set(model.options)

    def check():
        outs = out.outputs
        assert not any(o.get("name") == "stderr" for o in outs), outs
        assert outs[0]["text"].startswith(f"{model.value} (seed {seed.value}), 16 held-out sequences with "
                                          f"{needles.value} needle")
        assert any((o.get("data") or {}).get("image/png") for o in outs)

    check()
    assert w.static_png                                                            # with_picture: the first picture
    first = out.outputs
    example.value = 3
    check()
    assert out.outputs != first
    needles.value = 4
    check()
    model.value = "hybrid_swa"                                                     # not HySparse2: the needle bars
    check()
    assert len(w.redraw_seconds) == 4


@pytest.mark.parametrize("call, match", [
    (lambda: tw.plot_mqar([]), "res"),
    (lambda: tw.plot_mqar({"retrieval": RETR["retrieval"]}), "mqar"),
    (lambda: tw.plot_mqar(RETR, exp="retrieval"), "pairs"),
    (lambda: tw.plot_retrieval(RETR, models=["nope"]), "models"),
    (lambda: tw.plot_retrieval(RETR, models=[]), "models"),
    (lambda: tw.plot_retrieval(RETR, models="dense"), "models"),
    (lambda: tw.plot_curves([], "needle"), "metas"),
    (lambda: tw.plot_curves([{"model": "a"}], "needle"), "metas"),
    (lambda: tw.plot_curves([_meta("a", 0, [0.1, 0.2, 0.3])], "nope"), "setting"),
    (lambda: tw.swa_reach("dense_nope"), "model"),
    (lambda: tw.selection_map(object(), [1, 2]), "model"),
    (lambda: tw.plot_needles(np.zeros((1, 64, 256)), tasks.needles(2, 64, 1), 0), "logits"),
    (lambda: tw.plot_needles(np.zeros((2, 64, 256)), tasks.needles(2, 64, 1), 2), "row"),
    (lambda: tw.plot_needles(np.zeros((2, 64, 256)), "batch", 0), "batch"),
    (lambda: tw.explore(root="/nonexistent"), "root"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_bad_input_needing_a_model(hs2):
    with pytest.raises(ValueError, match="tokens"):
        tw.selection_map(hs2, [1, 999])
    with pytest.raises(ValueError, match="group"):
        tw.selection_map(hs2, [1, 2], group=5)
    with pytest.raises(ValueError, match="row"):
        tw.plot_selection(hs2, tasks.needles(1, 64, 1), row=1)
