"""The 80B-A3B ledger: the reported KV numbers exactly (2 decimals), FLOP ratios within 10%, attribution, decode."""
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


@pytest.mark.parametrize("call, msg", [(lambda: hl.kv_bytes(hl.HYSPARSE, 0), "L"),
                                       (lambda: hl.kv_bytes(hl.HYSPARSE, 10, bytes_per_elem=0), "bytes_per_elem"),
                                       (lambda: hl.AttnDesign("x", 1, 0, 0, 6, 4, 8, 8), "multiple"),
                                       (lambda: hl.prefill_flops(hl.HYSPARSE, 1.5), "L")])
def test_bad_inputs(call, msg):
    with pytest.raises(ValueError, match=msg):
        call()


def test_widgets_and_plots():
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from hybrid_lab.widgets import hysparse as hw
    from hybrid_lab.costs.bounds import check_bounds
    from hybrid_lab.models.hysparse2 import HySparse2Config

    cfg = HySparse2Config()
    m = hw.compute_map(cfg, 10, early_exit=True)
    assert m.shape == (49, 10) and (m[:25] == hw.FULL).all() and (m[25:, :-1] != hw.FULL).all()
    assert (m[25, :-1] == hw.KV_ONLY).all() and (m[26, :-1] == hw.SKIP).all()
    assert (hw.compute_map(cfg, 10, early_exit=False) == hw.FULL).all()
    rows = hw.ledger_rows(2 ** 20)
    assert [round(r["kv_gb"], 2) for r in rows] == [12.09, 6.72, 2.69]
    figs = [hw.plot_compute_map(cfg, 8), hw.plot_architecture(cfg), hw.plot_ledger([1024, 2048], mark=1024),
            hw.plot_bounds(check_bounds(20)), hw.plot_overlap({0.1: np.ones(3)}),
            hw.plot_replay({1: {"tails": np.arange(1, 4), "errors": np.array([1e-3, 0, 0])}}),
            hw.plot_selection({"a": np.array([1, 2, -1])}, 5)]
    assert all(isinstance(f, Figure) for f in figs)
    import ipywidgets
    assert isinstance(hw.architecture_explorer(cfg), ipywidgets.Widget)
    assert isinstance(hw.ledger_slider(), ipywidgets.Widget)
    with pytest.raises(ValueError, match="cross_tail"):
        hw.compute_map(cfg, 4, cross_tail=9)
    curves = hw.overlap_curves(drifts=(0.0, 0.5), L=128, n_layers=4, k=8)
    assert np.allclose(curves[0.0], 1.0) and curves[0.5][-1] < 0.9
    assert isinstance(hw.overlap_explorer(), ipywidgets.Widget)


def test_ablation_text_is_reported_data():
    for name in hl.ABLATIONS:
        txt = hl.ablation_text(name)
        assert txt.startswith("reported:") and len(txt.splitlines()) == 2 + len(hl.ABLATIONS[name]["rows"])
    assert "59.44" in hl.ablation_text("local branch")
    with pytest.raises(ValueError, match="name"):
        hl.ablation_text("nope")
