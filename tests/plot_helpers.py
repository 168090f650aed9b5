"""Helpers shared by the plot tests of the trained-model widgets (tests/test_widgets_*trained.py)."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    """Every test's figures are closed after it (matplotlib keeps them alive otherwise)."""
    yield
    plt.close("all")


def bars(ax):
    """(x, width, height) of every bar of an Axes, in drawing order."""
    return np.array([(p.get_x(), p.get_width(), p.get_height()) for p in ax.patches])
