"""The plots of widgets/dsa.py, hysparse.py, sparda.py and pd.py draw the numbers they are given or compute.

Each test reads the drawn artists back (bar heights and positions, line data, image arrays, scatter offsets) and
compares them with the input or with the pure function the plot is drawn from. Explorer widgets are built once
each (their callbacks are these plot functions).
"""
import ipywidgets
import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.collections import LineCollection, PathCollection
from matplotlib.image import AxesImage

from hybrid_lab.costs import hysparse_ledger as hl
from hybrid_lab.costs.bounds import check_bounds
from hybrid_lab.costs.dsa_cost import DEEPSEEK_V32, decode_bytes, prefill_flops
from hybrid_lab.models.hysparse2 import HySparse2Config
from hybrid_lab.serving import offload_sim as sim
from hybrid_lab.serving.pd_timeline import RESOURCES, PDTiming, schedule
from hybrid_lab.widgets import dsa, hysparse as hw, pd as pdw, sparda as sw


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def bars(ax):
    """(x, width, height, y) of every bar of an Axes, in drawing order."""
    return np.array([(p.get_x(), p.get_width(), p.get_height(), p.get_y()) for p in ax.patches])


def lines(ax):
    return [(ln.get_xdata(), ln.get_ydata()) for ln in ax.lines]


# ------------------------------------------------------------------------------------------- widgets/dsa.py
def test_dsa_plot_entropy_draws_every_head_and_the_maximum():
    ent = {"a": np.array([6.9, 6.8]), "b": np.array([3.0])}
    fig = dsa.plot_entropy(ent, {"a": 6.93, "b": 3.5})
    ax = fig.axes[0]
    np.testing.assert_allclose(bars(ax)[:, 2], [6.9, 6.8, 3.0])               # heights, in order
    np.testing.assert_allclose(bars(ax)[:, 0] + bars(ax)[:, 1] / 2, [0, 1, 3])  # one gap between sources
    dashed = [c for c in ax.collections if isinstance(c, LineCollection)]
    np.testing.assert_allclose([seg[0][0][1] for seg in (c.get_segments() for c in dashed)], [6.93, 3.5])


def test_dsa_plot_topk_curves_and_losses():
    fig = dsa.plot_topk_curves([16, 32, 64], {"c=1": [1.0, 0.5, 0.25], "c=2": [0.3, 0.2, 0.1]}, "error")
    (x1, y1), (x2, y2) = lines(fig.axes[0])
    np.testing.assert_array_equal(x1, [16, 32, 64])
    np.testing.assert_allclose(y1, [1.0, 0.5, 0.25])
    np.testing.assert_allclose(y2, [0.3, 0.2, 0.1])
    fig = dsa.plot_losses({"ok": [3.0, 1.0, 0.5], "diverged": [90.0, 1e9, np.inf]})
    (x_ok, y_ok), (x_d, y_d), (x_mark, y_mark) = lines(fig.axes[0])
    np.testing.assert_allclose(y_ok, [3.0, 1.0, 0.5])
    np.testing.assert_array_equal(x_d, [0])                                                 # cut at the divergence
    np.testing.assert_allclose(y_d, [90.0])
    np.testing.assert_allclose([x_mark[0], y_mark[0]], [0, 90.0])                          # ... and marked


def test_dsa_plot_topk_explorer_bars_are_the_stats():
    stats = {"mass": 0.8, "oracle_error": 0.1, "indexer_recall": float("nan"), "indexer_error": 0.3}
    fig = dsa.plot_topk_explorer(stats)
    np.testing.assert_allclose(bars(fig.axes[0])[:, 2], [0.8, 0.1, 0.3])    # NaN (no indexer) is skipped
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["mass", "oracle_error", "indexer_error"]


def test_dsa_plot_roofline_draws_the_cost_model():
    fig = dsa.plot_roofline(8192, L_max=65536)
    a1, a2 = fig.axes
    Ls = np.unique(np.geomspace(256, 65536, 200).astype(np.int64))
    dec, pre = decode_bytes(Ls, DEEPSEEK_V32), prefill_flops(Ls, DEEPSEEK_V32)
    (x_dense, y_dense), (_, y_dsa) = lines(a1)[:2]
    np.testing.assert_array_equal(x_dense, Ls)
    np.testing.assert_allclose(y_dense, dec["dense"] / 1e6)
    np.testing.assert_allclose(y_dsa, dec["dsa"] / 1e6)
    np.testing.assert_allclose(lines(a2)[0][1], pre["speedup"])
    np.testing.assert_allclose(lines(a2)[1][1], dec["speedup"])
    s = dsa.roofline_summary(8192)
    np.testing.assert_allclose(lines(a2)[-1][1], [s["prefill_speedup"], s["decode_speedup"]])    # the marked L


def test_dsa_explorers_build():
    assert isinstance(dsa.roofline_explorer(), ipywidgets.Widget)
    assert isinstance(dsa.topk_explorer(), ipywidgets.Widget)


@pytest.mark.parametrize("call, match", [
    (lambda: dsa.plot_entropy({}, 1.0), "entropy"),
    (lambda: dsa.plot_entropy({"a": [1.0, -0.5]}, 1.0), "entropy"),
    (lambda: dsa.plot_entropy({"a": [1.0, np.nan]}, 1.0), "entropy"),
    (lambda: dsa.plot_entropy({"a": [1.0]}, {"b": 1.0}), "max_entropy"),
    (lambda: dsa.plot_entropy({"a": [1.0]}, np.inf), "max_entropy"),
    (lambda: dsa.plot_entropy({"a": [1.0, 2.5]}, 2.0), "max_entropy"),             # above the uniform maximum
    (lambda: dsa.plot_entropy({"a": [0.3]}, 0.0), "max_entropy"),                  # ln 1 = 0: one key, entropy 0
    (lambda: dsa.plot_topk_curves([16, 32], {"c": [1.0]}, "y"), "curves"),
    (lambda: dsa.plot_topk_curves([16, 0], {"c": [1.0, 2.0]}, "y"), "ks"),
    (lambda: dsa.plot_losses({"a": [1.0, -2.0]}), "histories"),
    (lambda: dsa.plot_topk_explorer({"mass": np.inf}), "mass"),
    (lambda: dsa.topk_explorer_data(2.0, 0), "k"),
    (lambda: dsa.topk_explorer_data(2.0, 8, n_train=128), "n_train"),
    (lambda: dsa.topk_explorer_data(2.0, 8, n_train=0), "n_train"),                # no query the indexer saw
    (lambda: dsa.roofline_summary(2.5), "L"),
    (lambda: dsa.plot_roofline(L_max=100), "L_max"),
])
def test_dsa_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --------------------------------------------------------------------------------------- widgets/hysparse.py
CFG2 = HySparse2Config()


def test_hysparse_compute_map_image_is_the_map():
    fig = hw.plot_compute_map(CFG2, 12, cross_tail=3)
    (img,) = [a for a in fig.axes[0].get_children() if isinstance(a, AxesImage)]
    m = hw.compute_map(CFG2, 12, cross_tail=3)
    np.testing.assert_array_equal(img.get_array(), m)
    assert (m[:CFG2.n_self] == hw.FULL).all() and (m[CFG2.n_self:, -3:] == hw.FULL).all()


def test_hysparse_architecture_one_box_per_layer():
    fig = hw.plot_architecture(CFG2)
    boxes = fig.axes[0].patches
    assert len(boxes) == len(CFG2.layers) == 49
    colours = {"swa": "#c7e9c0", "fa": "#fdae6b", "sa": "#9ecae1"}
    from matplotlib.colors import to_hex
    assert [to_hex(b.get_facecolor()) for b in boxes] == [colours[k] for _, k in CFG2.layers]


def test_hysparse_plot_ledger_lines_are_the_ledger():
    Ls = [1024, 4096, 2 ** 20]
    fig = hw.plot_ledger(Ls, mark=4096)
    a, b = fig.axes
    for (x, y), d in zip(lines(a), hl.DESIGNS):
        np.testing.assert_array_equal(x, Ls)
        np.testing.assert_allclose(y, [hl.kv_gb(d, L) for L in Ls])
    for (_, y), d in zip(lines(b), hl.DESIGNS):
        np.testing.assert_allclose(y, [hl.prefill_flops(d, L)["total"] for L in Ls])
    np.testing.assert_allclose(lines(a)[-1][0], [4096, 4096])                     # the marked length


def test_hysparse_plot_bounds_scatters_bound_and_error():
    res = check_bounds(12, seed=3)
    fig = hw.plot_bounds(res)
    for ax, key in zip(fig.axes, ("sparse", "reuse")):
        (pts,) = [c for c in ax.collections if isinstance(c, PathCollection)]
        np.testing.assert_allclose(pts.get_offsets(), np.c_[res["bound_" + key], res["err_" + key]])


def test_hysparse_overlap_replay_selection_data():
    ov = {0.1: np.array([1.0, 0.8, 0.6]), 0.5: np.array([1.0, 0.3, 0.1])}
    fig = hw.plot_overlap(ov)
    for (x, y), want in zip(lines(fig.axes[0]), ov.values()):
        np.testing.assert_array_equal(x, [0, 1, 2])
        np.testing.assert_allclose(y, want)
    fig = hw.plot_replay({2: {"tails": np.arange(1, 4), "errors": np.array([1e-3, 0.0, 0.0])}})
    (x, y) = lines(fig.axes[0])[0]
    np.testing.assert_array_equal(x, [1, 2, 3])
    np.testing.assert_allclose(y, [1e-3, 1e-17, 1e-17])                         # exact 0 drawn at 1e-17
    fig = hw.plot_selection({"a": np.array([1, 4, -1]), "b": np.array([0, 2])}, 5)
    pts = [c for c in fig.axes[0].collections if isinstance(c, PathCollection)]
    np.testing.assert_allclose(pts[0].get_offsets(), [[1, 0], [4, 0]])           # -1 padding not drawn
    np.testing.assert_allclose(pts[1].get_offsets(), [[0, 1], [2, 1]])


def test_hysparse_overlap_curves_and_explorers():
    curves = hw.overlap_curves(drifts=(0.0, 0.5), L=128, n_layers=4, k=8, seed=0)
    np.testing.assert_allclose(curves[0.0], 1.0)
    assert curves[0.5][0] == 1.0 and curves[0.5][-1] < 0.9
    for w in (hw.overlap_explorer(), hw.architecture_explorer(CFG2), hw.ledger_slider()):
        assert isinstance(w, ipywidgets.Widget)


@pytest.mark.parametrize("call, match", [
    (lambda: hw.compute_map("cfg", 4), "cfg"),
    (lambda: hw.compute_map(CFG2, 0), "L"),
    (lambda: hw.compute_map(CFG2, 4, cross_tail=9), "cross_tail"),
    (lambda: hw.plot_ledger([1024, 0]), "lengths"),
    (lambda: hw.plot_bounds({"bound_sparse": [1.0]}), "err_sparse"),
    (lambda: hw.plot_overlap({0.1: [1.0, 1.5]}), "overlaps"),
    (lambda: hw.plot_replay({1: {"tails": [1, 2], "errors": [np.nan, 0.0]}}), "errors"),
    (lambda: hw.plot_replay({1: {"tails": [1, 2], "errors": [0.0]}}), "results"),
    (lambda: hw.plot_selection({"a": [1, 5]}, 5), "idx_sets"),
    (lambda: hw.plot_selection({"a": [1, 1]}, 5), "twice"),
    (lambda: hw.overlap_curves(drifts=()), "drifts"),
])
def test_hysparse_widgets_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ----------------------------------------------------------------------------------------- widgets/sparda.py
def test_sparda_plot_selection_bars_and_kinds():
    scores_c = np.array([0.5, -np.inf, 2.0, 1.0])
    block_scores = np.array([1.0, 3.0, 2.0, 0.5])
    fig = sw.plot_selection(scores_c, block_scores, [0, 1, 3, -1], q_pos=200, n_init=1, n_local=1)
    top, bottom = fig.axes
    np.testing.assert_allclose(bars(top)[:, 2], [0.5, 0.0, 2.0, 1.0])           # -inf (masked) drawn as 0
    np.testing.assert_allclose(bars(top)[:, 0], [0, 16, 32, 48])
    # blocks grouped by kind in the legend order init, local, top-k, not read: 0 init, 3 local (q_pos 200 is in
    # block 3), 1 top-k, 2 not read
    np.testing.assert_allclose(bars(bottom)[:, 0], [0, 192, 64, 128])
    np.testing.assert_allclose(bars(bottom)[:, 2], [1.0, 0.5, 3.0, 2.0])
    assert [t.get_text() for t in bottom.get_legend().get_texts()] == ["init", "local", "top-k", "not read"]


def test_sparda_teachers_training_recall():
    fine, coarse = np.array([0.0, 3.0, 1.0]), np.array([1.0, 1.0, 2.0])
    fig = sw.plot_teachers(fine, coarse, needles=[20], spans=[(16, 48)])
    (x1, y1), (_, y2), (xn, _) = lines(fig.axes[0])
    np.testing.assert_array_equal(x1, [0, 16, 32])
    np.testing.assert_allclose(y1, fine / 4)
    np.testing.assert_allclose(y2, coarse / 4)
    np.testing.assert_allclose(xn, [20, 20])                                     # the needle marker
    fig = sw.plot_training({"fine": [1.0, 0.5, 0.25], "coarse": [2.0, 1.5, 1.0]})
    np.testing.assert_allclose(lines(fig.axes[0])[0][1], [1.0, 0.5, 0.25])
    np.testing.assert_allclose(lines(fig.axes[0])[1][1], [2.0, 1.5, 1.0])
    res = {"a": {"recall": [0.5, 0.6], "error": [0.1, 0.2]}, "b": {"recall": [0.7, 0.9], "error": [0.05, 0.02]}}
    fig = sw.plot_recall(res)
    np.testing.assert_allclose(bars(fig.axes[0])[:, 2], [0.5, 0.6, 0.7, 0.9])
    np.testing.assert_allclose(bars(fig.axes[1])[:, 2], [0.1, 0.2, 0.05, 0.02])


def test_sparda_timeline_bars_are_the_segments():
    segs, tot = sim.layer_timeline(sim.H100, sim.MINICPM_8B, 16, 131072, 16, n_layers=2)
    fig = sw.plot_timeline(segs, tot)
    b = bars(fig.axes[0])
    assert len(b) == len(segs)
    np.testing.assert_allclose(b[:, 0], [s * 1e6 for _, s, _, _ in segs])
    np.testing.assert_allclose(b[:, 1], [(e - s) * 1e6 for _, s, e, _ in segs])
    np.testing.assert_allclose(b[:, 3] + 0.3, [sw.TIMELINE_LANES.index(lane) for lane, *_ in segs])
    assert max(b[:, 0] + b[:, 1]) == pytest.approx(max(tot.values()) * 1e6)


def test_sparda_batch_sweep_lines_skip_oom_and_none():
    sweep = {"Sparse": [100.0, 0.0, 150.0], "SparDA": [120.0, 200.0, 260.0]}
    fig = sw.plot_batch_sweep([4, 8, 16], sweep, {"Sparse": (90.0, None, 140.0)})
    (x1, y1), (xr, yr), (x2, y2) = lines(fig.axes[0])
    np.testing.assert_array_equal(x1, [4, 16])                                   # 0 = OOM: not drawn
    np.testing.assert_allclose(y1, [100.0, 150.0])
    np.testing.assert_array_equal(xr, [4, 16])                                   # None = not reported
    np.testing.assert_allclose(yr, [90.0, 140.0])
    np.testing.assert_allclose(y2, [120.0, 200.0, 260.0])


def test_sparda_explore_offload_summary_is_the_simulator():
    fig, s = sw.explore_offload(batch=16, ctas=16, pcie_gbps=55, context=131072)
    h = sim.with_(sim.H100, pcie_bw=55e9)
    segs, tot = sim.layer_timeline(h, sim.MINICPM_8B, 16, 131072, 16, n_layers=3)
    assert s["serial_us"] == pytest.approx(tot["serial"] / 3 * 1e6)
    assert s["overlapped_us"] == pytest.approx(tot["overlapped"] / 3 * 1e6) and s["overlapped_us"] < s["serial_us"]
    for meth in sim.METHODS:
        assert s["tok_s"][meth] == pytest.approx(sim.throughput(h, sim.MINICPM_8B, 16, 131072, meth, 16))
    assert s["tok_s"]["SparDA"] > s["tok_s"]["Sparse"] > 0 and s["tok_s"]["Sparse†"] == 0.0     # Sparse† OOMs
    np.testing.assert_allclose(bars(fig.axes[0])[:, 1], [(e - b) * 1e6 for _, b, e, _ in segs])
    line = sw.format_summary(s)
    assert f"serial {s['serial_us']:.1f}" in line and "Sparse† OOM" in line
    assert len(sw.offload_explorer().children) >= 5


@pytest.mark.parametrize("call, match", [
    (lambda: sw.plot_selection([np.nan, 1.0], [1.0], [0], 10), "scores_c"),
    (lambda: sw.plot_selection([1.0], [1.0, 2.0], [0, 2], 10), "block_ids"),
    (lambda: sw.plot_selection([1.0], [1.0, 2.0], [0, 0], 10), "twice"),
    (lambda: sw.plot_selection([1.0], [1.0, 2.0], [0], 128), "q_pos"),
    (lambda: sw.plot_teachers([1.0, -1.0], [1.0, 1.0]), "fine"),
    (lambda: sw.plot_teachers([1.0], [1.0], needles=[-3]), "needles"),
    (lambda: sw.plot_training({"a": [1.0, 0.0]}), "histories"),
    (lambda: sw.plot_recall({"a": {"recall": [0.5]}}), "error"),
    (lambda: sw.plot_recall({"a": {"recall": [0.5], "error": [0.1]}, "b": {"recall": [0.5, 0.4], "error": [0.1, 0.1]}}),
     "per layer"),
    (lambda: sw.plot_timeline([], {"serial": 1.0, "overlapped": 1.0}), "segments"),
    (lambda: sw.plot_timeline([("GPU 7", 0.0, 1.0, "x")], {"serial": 1.0, "overlapped": 1.0}), "lane"),
    (lambda: sw.plot_timeline([("serial: GPU", 1.0, 0.0, "x")], {"serial": 1.0, "overlapped": 1.0}), "before"),
    (lambda: sw.plot_batch_sweep([4, 8], {"Sparse": [1.0]}), "sweep"),
    (lambda: sw.plot_batch_sweep([4, 8.5], {"Sparse": [1.0, 2.0]}), "batches"),
    (lambda: sw.explore_offload(hw="B200"), "hw"),
    (lambda: sw.explore_offload(batch=2.5), "batch"),
    (lambda: sw.explore_offload(pcie_gbps=np.nan), "pcie_gbps"),
    (lambda: sw.format_summary({"serial_us": 1.0}), "summary"),
])
def test_sparda_widgets_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_sparda_reported_throughput_tables_and_the_ratios_the_notes_draw():
    """SparDA notes §4.4-§4.6: the ratios printed are those the notes compute from the reported tokens/s."""
    text = sw.throughput_tables_text()
    pre = sw.PAPER_PREFILL_H100_B4
    assert pre["MiniCPM"]["SparDA"][-1] == 17087.6 and pre["NOSA"]["Sparse"][-1] == 9805.2
    for needle in ("SparDA / Sparse 1.25x, SparDA / Dense† 2.11x",     # MiniCPM, 128K (§4.4)
                   "SparDA / Sparse 1.16x",                            # NOSA, 128K (§4.4)
                   "fastest by length (computed): Dense†, SparDA, SparDA",   # dense faster at short context
                   "MiniCPM 471.2 / 279.5 = 1.69x", "NOSA 399.3 / 285.4 = 1.40x",   # §4.5
                   "without prefetch below Sparse; prefetch adds +43.5%", "prefetch adds +37.6%"):   # §4.6
        assert needle in text, needle
    assert text.count("without prefetch below Sparse") == 2


def test_sparda_per_task_text_lists_every_excerpt_with_its_change():
    text = sw.per_task_text()
    assert len(sw.PAPER_PER_TASK) == 17 and text.count("\n") == 17
    assert "MiniCPM  niah_multikey_3     62.0 ->  56.0  (-6.0)" in text
    assert "NOSA     AIME 2025           40.0 ->  53.3  (+13.3)" in text

# --------------------------------------------------------------------------------------------- widgets/pd.py
def test_pd_plot_timeline_bars_are_the_schedule():
    t = PDTiming(n_requests=2, prompt_len=8192, chunk=4096)
    fig = pdw.plot_timeline(t)
    ax = fig.axes[0]
    s = schedule(t)
    tasks = s["dag"].tasks
    b = bars(ax)
    assert len(b) == len(tasks)
    np.testing.assert_allclose(b[:, 0], [s["start"][n] for n in tasks])
    np.testing.assert_allclose(b[:, 1], [task["duration"] for task in tasks.values()])
    np.testing.assert_allclose(b[:, 3] + 0.3, [RESOURCES.index(task["resource"]) for task in tasks.values()])
    outlined = [n for n, p in zip(tasks, ax.patches) if p.get_linewidth() > 0]
    assert outlined == [n for n in tasks if n in set(s["path"])]                 # the critical path, in black
    assert [t.get_text() for t in ax.get_yticklabels()] == list(RESOURCES)


def test_pd_plot_events_bars_are_the_log():
    ev = {"P": {"events": [(0, "prefill chunk 0", 10.0, 10.1), (1, "prefill chunk 0", 10.1, 10.3)]},
          "D": {"events": [(0, "receive", 10.05, 10.2), (0, "decode", 10.2, 10.4)]}}
    fig = pdw.plot_events(ev)
    b = bars(fig.axes[0])
    np.testing.assert_allclose(b[:, 0], [0.0, 100.0, 50.0, 200.0])               # ms from the first event
    np.testing.assert_allclose(b[:, 1], [100.0, 200.0, 150.0, 200.0])
    np.testing.assert_allclose(b[:, 2], [0.6, 0.6, 0.35, 0.6])                   # "receive" is the thin bar
    assert isinstance(pdw.timeline_widget(n_new=4), ipywidgets.Widget)


@pytest.mark.parametrize("call, match", [
    (lambda: pdw.plot_timeline({"prompt_len": 8}), "PDTiming"),
    (lambda: pdw.plot_events({"P": {}, "D": {}}), "no events"),
    (lambda: pdw.plot_events([1, 2]), "reports"),
    (lambda: pdw.plot_events({"P": {"events": [(0, "x", np.nan, 1.0)]}}), "t_start"),
    (lambda: pdw.plot_events({"P": {"events": [(0, "x", 2.0, 1.0)]}}), "ends before"),
    (lambda: pdw.timeline_widget(decode_ms=-1.0), "decode_ms"),
])
def test_pd_widgets_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
