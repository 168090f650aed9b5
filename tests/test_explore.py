import numpy as np
import pytest

from hybrid_lab.widgets import basics as explore


def test_three_costs_rows_and_figure():
    rows = explore.three_costs_rows(32768)
    assert [r[1] for r in rows] == [17.18, 4.295, 2.173]
    fig = explore.three_costs_figure(4096)
    heights = [p.get_height() for p in fig.axes[0].patches]
    assert heights == pytest.approx([r[1] for r in explore.three_costs_rows(4096)])
    assert len(explore.plot_three_costs().axes) == 3


def test_survival_figure_and_lti():
    fig = explore.plot_survival((0.5,), -1.0, 10)
    y = fig.axes[0].lines[0].get_ydata()
    np.testing.assert_allclose(y, np.exp(-0.5 * np.arange(10)))
    lti, sel = explore.lti_vs_selective(20, [0, 5], dt=0.5)
    assert sel == pytest.approx(np.exp(-0.5)) and lti == pytest.approx(np.exp(-0.5 * 19))
    with pytest.raises(ValueError, match="content"):
        explore.lti_vs_selective(5, [7])


def test_reuse_options_and_figure():
    assert explore.reuse_options(40, 60, 16) == {"final state only": 0, "chunk boundaries (16)": 32,
                                                 "two-pass at the branch": 40, "pure Transformer (KV only)": 40}
    assert explore.reuse_options(60, 60, 16)["final state only"] == 60
    fig = explore.reuse_figure(40, 16)
    assert sorted(p.get_width() for p in fig.axes[0].patches) == [0, 32, 40, 40]
    with pytest.raises(ValueError, match="shared"):
        explore.reuse_options(70, 60, 16)


def test_widgets_build_and_react():
    w = explore.reuse_explorer()
    sliders = [c for c in w.children if hasattr(c, "value") and c.description == "shared"]
    assert sliders
    for make in (explore.three_costs_explorer, explore.survival_explorer):
        assert len(make().children) >= 2


def test_format_rows():
    s = explore.format_rows(("a", "b"), [("x", 1.5), ("yy", 2)])
    assert s.splitlines() == ["a       b", "x   1.500", "yy      2"]
