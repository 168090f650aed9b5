"""The 80B-A3B ledger: the reported KV numbers exactly (2 decimals), FLOP ratios within 10%, attribution, decode;
bad input; the notebook-05/06 plots drawn from it (asserted on their data)."""
import numpy as np
import pytest

from hybrid_lab.costs import hysparse_ledger as hl


def test_kv_gb_at_1m_matches_reported_to_two_decimals():
    for d in hl.DESIGNS:
        assert round(hl.kv_gb(d, 2 ** 20), 2) == hl.REPORTED["kv_gb_1m_fp8"][d.name]


def test_kv_bytes_exact():
    assert hl.HYBRID_SWA.bytes_per_token == 1280 and hl.HYSPARSE2.bytes_per_token == 512
    kv = hl.kv_bytes(hl.HYSPARSE2, 2 ** 20)
    assert kv["global"] == 5 * 2 ** 20 * 512 and kv["local"] == 24 * 128 * 512
    assert hl.kv_bytes(hl.HYSPARSE, 100)["local"] == 44 * 100 * 1280     # windows not yet full


def test_prefill_flop_ratios_within_10_percent_of_reported():
    f = {d.name: hl.prefill_flops(d, 2 ** 20)["total"] for d in hl.DESIGNS}
    for key, rep in hl.REPORTED["prefill_flops_ratio_1m"].items():
        num, den = key.split(" / ")
        assert abs(f[num] / f[den] / rep - 1) < 0.10


def test_prefill_flops_small_case_by_hand():
    d = hl.AttnDesign("t", n_fa=1, n_sa=0, n_swa=0, heads_q=1, heads_kv=1, d_qk=1, d_v=1, n_layers=1,
                      active_params=10.0)
    f = hl.prefill_flops(d, 3)
    assert f["dense"] == 2 * 10 * 3 and f["attn_global"] == 2 * 2 * 6 and f["total"] == 60 + 24


def test_early_exit_is_what_cuts_hysparse2_prefill():
    L = 2 ** 20
    full = hl.prefill_flops(hl.HYSPARSE2_FULL_PREFILL, L)["total"]
    ee = hl.prefill_flops(hl.HYSPARSE2, L)["total"]
    assert full / ee > 4


def test_attribution_head_config_is_2_5x():
    steps = hl.kv_attribution()
    assert steps[1][2] == pytest.approx(2.5)
    assert abs(steps[2][2] - 1) < 0.01                          # the bridging layout barely moves the cache


def test_decode_work_grows_with_L():
    L = 10_000
    assert hl.decode_work(hl.HYSPARSE2, L)["entries"] == 5 * L + 20 * 1152 + 24 * 128
    assert hl.decode_work(hl.HYBRID_SWA, L)["entries"] == 9 * L + 40 * 128
    assert hl.decode_work(hl.HYSPARSE, L)["entries"] == 5 * L + 44 * (1024 + 128)
    assert hl.decode_work(hl.HYSPARSE2, 2 * L)["entries"] > hl.decode_work(hl.HYSPARSE2, L)["entries"]


BAD_L = [0, -1, 1.5, 1024.0, float("nan"), float("inf"), "1024", True, None]


@pytest.mark.parametrize("fn", [hl.kv_bytes, hl.kv_gb, hl.prefill_flops, hl.decode_work])
@pytest.mark.parametrize("L", BAD_L, ids=repr)
def test_bad_lengths_raise(fn, L):
    with pytest.raises(ValueError, match=r"^L must"):
        fn(hl.HYSPARSE2, L)


@pytest.mark.parametrize("L", BAD_L, ids=repr)
def test_bad_lengths_raise_in_tables(L):
    with pytest.raises(ValueError, match=r"^L must"):
        hl.kv_attribution(L)
    with pytest.raises(ValueError, match=r"^L must"):
        hl.ledger_table(L)


DESIGN = dict(name="x", n_fa=1, n_sa=2, n_swa=1, heads_q=8, heads_kv=2, d_qk=16, d_v=16, n_layers=4)


@pytest.mark.parametrize("change, msg", [
    ({"heads_q": 6, "heads_kv": 4}, "multiple"), ({"heads_kv": 0}, "heads_kv"), ({"n_fa": -1}, "n_fa"),
    ({"d_qk": 0}, "d_qk"), ({"window": 2.0}, "window"), ({"n_sa": True}, "n_sa"),
    ({"active_params": float("nan")}, "active_params"), ({"active_params": -3e9}, "active_params"),
    ({"n_layers": 5}, "n_layers"), ({"n_fa_prefill": 2}, "n_fa_prefill"), ({"sa_own_window": "yes"}, "sa_own_window"),
    ({"early_exit_layers": 9}, "early_exit_layers"), ({"name": None}, "name"), ({"sa_tokens": 0}, "sa_tokens"),
])
def test_bad_designs(change, msg):
    with pytest.raises(ValueError, match=msg):
        hl.AttnDesign(**{**DESIGN, **change})


@pytest.mark.parametrize("call, msg", [
    (lambda: hl.kv_bytes(hl.HYSPARSE, 10, bytes_per_elem=0), "bytes_per_elem"),
    (lambda: hl.kv_bytes(hl.HYSPARSE, 10, bytes_per_elem=float("nan")), "bytes_per_elem"),
    (lambda: hl.kv_gb(hl.HYSPARSE, 10, bytes_per_elem=float("inf")), "bytes_per_elem"),
    (lambda: hl.kv_bytes("HySparse", 10), "design"),
    (lambda: hl.prefill_flops(None, 10), "design"),
    (lambda: hl.ablation_text(["local branch"]), "name"),
])
def test_bad_inputs(call, msg):
    with pytest.raises(ValueError, match=msg):
        call()


# ---- the notebook-05/06 plots: assert on the data they draw ----------------------------------------------------
@pytest.fixture(scope="module")
def hw():
    from hybrid_lab.widgets import hysparse
    return hysparse


def test_compute_map(hw):
    from hybrid_lab.models.hysparse2 import HySparse2Config

    cfg = HySparse2Config()
    m = hw.compute_map(cfg, 10, early_exit=True)
    assert m.shape == (49, 10) and (m[:25] == hw.FULL).all() and (m[25:, :-1] != hw.FULL).all()
    assert (m[25, :-1] == hw.KV_ONLY).all() and (m[26, :-1] == hw.SKIP).all()
    assert (hw.compute_map(cfg, 10, early_exit=False) == hw.FULL).all()
    with pytest.raises(ValueError, match="cross_tail"):
        hw.compute_map(cfg, 4, cross_tail=9)
    fig = hw.plot_compute_map(cfg, 8)
    np.testing.assert_array_equal(fig.axes[0].images[0].get_array(), hw.compute_map(cfg, 8))
    arch = hw.plot_architecture(cfg)
    assert len(arch.axes[0].patches) == len(cfg.layers)                          # one box per layer
    kinds = [t.get_text() for t in arch.axes[0].texts if t.get_text() in ("SWA", "FA", "SA")]
    assert kinds == [k.upper() for _, k in cfg.layers]


def test_plot_ledger_draws_the_ledger(hw):
    lengths = [1024, 2048, 2 ** 20]
    fig = hw.plot_ledger(lengths, mark=1024)
    kv_ax, fl_ax = fig.axes
    for ax, value in ((kv_ax, lambda d, L: hl.kv_gb(d, L)), (fl_ax, lambda d, L: hl.prefill_flops(d, L)["total"])):
        lines = {ln.get_label(): ln for ln in ax.lines if not ln.get_label().startswith("_")}
        assert list(lines) == [d.name for d in hl.DESIGNS]
        for d in hl.DESIGNS:
            np.testing.assert_array_equal(lines[d.name].get_xdata(), lengths)
            np.testing.assert_allclose(lines[d.name].get_ydata(), [value(d, L) for L in lengths], rtol=0)
        assert [ln.get_xdata()[0] for ln in ax.lines if ln.get_label().startswith("_")] == [1024]   # the mark
    assert [round(r["kv_gb"], 2) for r in hw.ledger_rows(2 ** 20)] == [12.09, 6.72, 2.69]


def test_plot_bounds_draws_each_instance(hw):
    from hybrid_lab.costs.bounds import check_bounds

    res = check_bounds(20, seed=3)
    fig = hw.plot_bounds(res)
    for ax, key in zip(fig.axes, ("sparse", "reuse")):
        np.testing.assert_array_equal(ax.collections[0].get_offsets(),
                                      np.column_stack([res["bound_" + key], res["err_" + key]]))
        diag = ax.lines[0]
        assert diag.get_xdata()[1] == diag.get_ydata()[1] == max(res["bound_" + key].max(), res["err_" + key].max())


def test_plot_overlap_replay_selection_data(hw):
    ov = {0.1: np.array([1.0, 0.8, 0.5])}
    line = hw.plot_overlap(ov).axes[0].lines[0]
    np.testing.assert_array_equal(line.get_xdata(), [0, 1, 2])
    np.testing.assert_array_equal(line.get_ydata(), ov[0.1])
    fig = hw.plot_replay({1: {"tails": np.arange(1, 4), "errors": np.array([1e-3, 0, 0])}})
    np.testing.assert_array_equal(fig.axes[0].lines[0].get_ydata(), [1e-3, 1e-17, 1e-17])   # zeros floored for log
    sel = hw.plot_selection({"a": np.array([1, 2, -1]), "b": np.array([4])}, 5).axes[0]
    np.testing.assert_array_equal(sel.collections[0].get_offsets(), [[1, 0], [2, 0]])       # -1 padding not drawn
    np.testing.assert_array_equal(sel.collections[1].get_offsets(), [[4, 1]])


def test_widgets_build(hw):
    import ipywidgets
    from hybrid_lab.models.hysparse2 import HySparse2Config

    slider = hw.ledger_slider().children[0].children[0]
    assert (slider.min, slider.max, slider.value) == (10, 20, 20)
    assert isinstance(hw.architecture_explorer(HySparse2Config()), ipywidgets.VBox)
    curves = hw.overlap_curves(drifts=(0.0, 0.5), L=128, n_layers=4, k=8, seed=0)
    assert np.allclose(curves[0.0], 1.0) and curves[0.5][-1] < 0.9
    assert isinstance(hw.overlap_explorer(), ipywidgets.VBox)


def test_ablation_text_is_reported_data():
    for name in hl.ABLATIONS:
        txt = hl.ablation_text(name)
        assert txt.startswith("reported:") and len(txt.splitlines()) == 2 + len(hl.ABLATIONS[name]["rows"])
    assert "59.44" in hl.ablation_text("local branch")
    with pytest.raises(ValueError, match="name"):
        hl.ablation_text("nope")
