"""Plots and widgets of notebooks 00-02: every figure is checked against the data it should draw."""
import numpy as np
import pytest

from hybrid_lab.costs import ledger
from hybrid_lab.widgets import basics

MODELS = basics.DEFAULT_MODELS


def test_default_models_are_the_ledgers():
    assert MODELS == (ledger.TRANSFORMER_7B, ledger.GQA_7B, ledger.HYBRID_7B)


def test_three_costs_rows():
    rows = basics.three_costs_rows(32768)
    assert [r[0] for r in rows] == [m.name for m in MODELS]
    assert [r[1] for r in rows] == [17.18, 4.295, 2.173]                 # notebook 00's memory column
    assert [r[3] for r in rows] == [0.792, 0.739, 0.537]                 # and its prefill column
    for m, r in zip(MODELS, rows):
        assert r[2] == round(float(ledger.decode_bytes_read(m, 32768)) / 1e9, 3)


def test_plot_three_costs_draws_the_ledger():
    fig = basics.plot_three_costs(MODELS, L_max=65536)
    assert len(fig.axes) == 3
    for ax, key, scale in zip(fig.axes, ("kv_memory_bytes", "decode_read_bytes", "prefill_flops"), (1e9, 1e9, 1e15)):
        assert [ln.get_label() for ln in ax.lines] == [m.name for m in MODELS]
        for m, ln in zip(MODELS, ax.lines):
            L = ln.get_xdata()
            assert L[0] == 256 and L[-1] == 65536 and np.all(np.diff(L) > 0)
            np.testing.assert_allclose(ln.get_ydata(), ledger.three_costs(m, L)[key] / scale, rtol=0)


def test_three_costs_figure_bar_heights():
    fig = basics.three_costs_figure(4096)
    rows = basics.three_costs_rows(4096)
    for j, ax in enumerate(fig.axes, start=1):
        assert [p.get_height() for p in ax.patches] == [r[j] for r in rows]
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["Transformer 7B", "GQA 8 KV heads", "Hybrid 7B"]


def test_three_costs_explorer_slider():
    w = basics.three_costs_explorer()
    slider = w.children[0]
    assert (slider.description, slider.min, slider.max, slider.value) == ("log2 L", 8, 20, 15)
    slider.value = 10
    assert w.kwargs == {"log2_L": 10}


def test_survival_figure_and_lti():
    fig = basics.plot_survival((0.5,), -1.0, 10)
    np.testing.assert_allclose(fig.axes[0].lines[0].get_ydata(), np.exp(-0.5 * np.arange(10)))
    lti, sel = basics.lti_vs_selective(20, [0, 5], dt=0.5)
    assert sel == pytest.approx(np.exp(-0.5)) and lti == pytest.approx(np.exp(-0.5 * 19))
    assert len(basics.survival_explorer().children) >= 3


def test_plot_state_vs_kv_data():
    fig = basics.plot_state_vs_kv([16, 256], [4096, 66560], [6144, 6144])
    kv, st = fig.axes[0].lines
    np.testing.assert_array_equal(kv.get_ydata(), [4.096, 66.56])
    np.testing.assert_array_equal(st.get_ydata(), [6.144, 6.144])


def test_reuse_options_and_figure():
    assert basics.reuse_options(40, 60, 16) == {"final state only": 0, "chunk boundaries (16)": 32,
                                                "two-pass at the branch": 40, "pure Transformer (KV only)": 40}
    assert basics.reuse_options(60, 60, 16)["final state only"] == 60
    fig = basics.reuse_figure(40, 16)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    widths = dict(zip(labels, (p.get_width() for p in ax.patches)))
    assert widths == basics.reuse_options(40, 60, 16)
    w = basics.reuse_explorer()
    assert [c.description for c in w.children[:2]] == ["shared", "chunk"]


def test_format_rows():
    s = basics.format_rows(("a", "b"), [("x", 1.5), ("yy", 2)])
    assert s.splitlines() == ["a       b", "x   1.500", "yy      2"]


@pytest.mark.parametrize("call, msg", [
    (lambda: basics.three_costs_rows(0), "L"),
    (lambda: basics.three_costs_rows(float("nan")), "L"),
    (lambda: basics.three_costs_rows(4096.5), "L"),
    (lambda: basics.three_costs_rows(4096, models=()), "models"),
    (lambda: basics.three_costs_rows(4096, models=("Hybrid 7B",)), r"models\[0\]"),
    (lambda: basics.plot_three_costs(L_max=100), "L_max"),
    (lambda: basics.lti_vs_selective(0, []), "length"),
    (lambda: basics.lti_vs_selective(5, [7]), "content"),
    (lambda: basics.lti_vs_selective(5, [1.5]), "content"),
    (lambda: basics.lti_vs_selective(5, [1], dt=float("nan")), "dt"),
    (lambda: basics.lti_vs_selective(5, [1], A=float("-inf")), "A"),
    (lambda: basics.reuse_options(70, 60, 16), "shared"),
    (lambda: basics.reuse_options(40.5, 60, 16), "shared"),
    (lambda: basics.reuse_options(40, 60, 0), "chunk_size"),
    (lambda: basics.reuse_options(0, -1, 16), "old_len"),
    (lambda: basics.lti_vs_selective(5, [1], A=0.0), "A must be < 0"),
    (lambda: basics.plot_survival((), -1.0, 8), "dts"),
    (lambda: basics.plot_survival((0.1, float("inf")), -1.0, 8), "dts"),
    (lambda: basics.plot_survival((0.1, -0.1), -1.0, 8), "dts"),
    (lambda: basics.plot_survival((0.1,), "-1", 8), "A"),
    (lambda: basics.plot_survival((0.1,), -1.0, 8.0), "length"),
    (lambda: basics.plot_state_vs_kv([16, 32], [1.0, 2.0], [1.0]), "ssm_bytes"),
    (lambda: basics.plot_state_vs_kv([16, 32], [1.0, float("nan")], [1.0, 1.0]), "kv_bytes"),
    (lambda: basics.plot_state_vs_kv([0, 32], [1.0, 2.0], [1.0, 1.0]), "lengths"),
    (lambda: basics.plot_state_vs_kv([16, 32], [1.0, -2.0], [1.0, 1.0]), "kv_bytes"),
    (lambda: basics.format_rows(("a", "b"), [("x", 1.5, 3)]), "rows"),
    (lambda: basics.format_rows(("a", "b"), 5), "rows"),
    (lambda: basics.format_rows((), []), "header"),
])
def test_bad_inputs(call, msg):
    with pytest.raises(ValueError, match=msg):
        call()
