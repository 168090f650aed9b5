import numpy as np
import pytest

from hybrid_lab.core.optim import Adam, clip_grad_norm


def test_adam_minimizes_quadratic():
    target = np.array([1.0, -2.0, 3.0])
    p = {"w": np.zeros(3)}
    opt = Adam(p, lr=0.1)
    for _ in range(300):
        opt.step({"w": 2 * (p["w"] - target)})
    np.testing.assert_allclose(p["w"], target, atol=1e-2)


def test_clip():
    g = {"a": np.array([3.0, 0.0]), "b": np.array([4.0])}
    n = clip_grad_norm(g, 1.0)
    assert n == 5.0
    np.testing.assert_allclose(np.sqrt(sum((v ** 2).sum() for v in g.values())), 1.0)
    small = {"a": np.array([0.1])}
    clip_grad_norm(small, 1.0)
    assert small["a"][0] == 0.1


def test_errors():
    with pytest.raises(ValueError, match="lr"):
        Adam({"w": np.zeros(1)}, lr=0)
    opt = Adam({"w": np.zeros(2)})
    with pytest.raises(ValueError, match="shape"):
        opt.step({"w": np.zeros(3)})
    with pytest.raises(ValueError, match="keys"):
        opt.step({"v": np.zeros(2)})
    with pytest.raises(ValueError, match="NaN"):
        clip_grad_norm({"w": np.array([np.nan])}, 1.0)
