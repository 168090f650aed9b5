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


@pytest.mark.parametrize("kw, match", [
    (dict(lr=np.inf), "lr"), (dict(lr="0.01"), "lr"), (dict(lr=1j), "lr"),
    (dict(betas=()), "betas"), (dict(betas=(0.9,)), "betas"), (dict(betas=("0.9", 0.999)), "betas"),
    (dict(betas=(0.9, 1.0)), "betas"), (dict(betas=(np.nan, 0.999)), "betas"),
    (dict(eps=0.0), "eps"), (dict(eps=-1e-8), "eps"), (dict(eps=np.nan), "eps"), (dict(eps=np.inf), "eps"),
    (dict(eps="1e-8"), "eps"),
    (dict(weight_decay=-0.01), "weight_decay"), (dict(weight_decay=np.nan), "weight_decay"),
    (dict(weight_decay=np.inf), "weight_decay"), (dict(weight_decay="0"), "weight_decay"),
    (dict(params={}), "params"), (dict(params={"w": np.array([1.0, np.nan])}), "params"),
    (dict(params={"w": np.array([np.inf])}), "params"), (dict(params={"w": np.array(["1.0"])}), "params"),
    (dict(params={"w": np.arange(3)}), "params"),                       # ints cannot be updated in place
    (dict(params={"w": [1.0, 2.0]}), "params"),                          # a list is not updated in place
])
def test_adam_refuses_bad_hyperparameters_and_params(kw, match):
    """Each of these used to build an optimizer (or raise TypeError / IndexError) that then stepped silently."""
    args = dict(params={"w": np.zeros(3)}, lr=0.01)
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        Adam(**args)


def test_adam_step_refuses_non_finite_gradients_before_touching_state():
    p = {"w": np.zeros(3)}
    opt = Adam(p, lr=0.1)
    for g in (np.array([1.0, np.nan, 0.0]), np.array([np.inf, 0.0, 0.0]), np.array(["1", "2", "3"])):
        with pytest.raises(ValueError, match=r"grads\['w'\]"):
            opt.step({"w": g})
    assert opt.t == 0 and not p["w"].any() and not opt.m["w"].any()


@pytest.mark.parametrize("grads, max_norm, match", [
    ({}, 1.0, "grads"),                                                 # clipping nothing is a mistake
    ({"a": np.array(["1.0"])}, 1.0, "grads"),
    ({"a": [3.0, 4.0]}, 1.0, "grads"),                                  # a list would not be scaled in place
    ({"a": np.array([np.inf])}, 1.0, "NaN or inf"),
    ({"a": np.array([3.0])}, np.inf, "max_norm"),
    ({"a": np.array([3.0])}, "1.0", "max_norm"),
    ({"a": np.array([3.0])}, 1j, "max_norm"),
])
def test_clip_refuses_bad_input(grads, max_norm, match):
    with pytest.raises(ValueError, match=match):
        clip_grad_norm(grads, max_norm)
