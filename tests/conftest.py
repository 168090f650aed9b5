"""Shared test setup. Nothing here may leak into the environment: nbval's kernels inherit it."""
import matplotlib

matplotlib.use("Agg")  # this process only; notebook kernels keep the inline backend

import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
