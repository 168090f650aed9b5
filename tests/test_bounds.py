"""The 2εV and 2(ε+δ)V bounds: never violated on >= 1,000 random instances, tight on the worst case."""
import numpy as np
import pytest

from hybrid_lab.costs.bounds import (bound_reuse, bound_sparse, check_bounds, missing_mass, renormalized_output,
                               sparse_error, tight_instance, tv_distance)


def test_bounds_never_violated_on_random_instances():
    r = check_bounds(n=1500, seed=0)
    assert r["violations_sparse"] == 0 and r["violations_reuse"] == 0
    assert (r["err_sparse"] <= r["bound_sparse"] + 1e-12).all()
    assert r["err_sparse"].max() > 1e-3 and r["eps"].max() > 0.1 and r["delta"].max() > 0.1   # non-trivial draws


def test_bound_is_attained():
    for eps in (0.0, 0.05, 0.3):
        p, v, keep = tight_instance(eps, V=2.0)
        assert missing_mass(p, keep) == pytest.approx(eps)
        assert sparse_error(p, v, keep) == pytest.approx(bound_sparse(eps, 2.0), abs=1e-12)


def test_renormalized_output_hand_example():
    p = np.array([0.5, 0.3, 0.2])
    v = np.array([[1.0], [2.0], [10.0]])
    keep = np.array([True, True, False])
    np.testing.assert_allclose(renormalized_output(p, v, keep), [(0.5 + 0.6) / 0.8])
    assert sparse_error(p, v, keep) == pytest.approx(abs(3.1 - 1.375))
    assert tv_distance(p, np.array([0.2, 0.3, 0.5])) == pytest.approx(0.3)
    assert bound_reuse(0.6, 0.6, 1.0) == 2.0                      # capped at 2V


@pytest.mark.parametrize("call, msg", [
    (lambda: missing_mass(np.array([0.5, 0.6]), np.array([True, False])), "sum to 1"),
    (lambda: missing_mass(np.array([0.5, 0.5]), np.array([1, 0])), "boolean mask"),
    (lambda: renormalized_output(np.array([1.0, 0.0]), np.ones((2, 1)), np.array([False, True])), "positive"),
    (lambda: tv_distance(np.array([1.0]), np.array([0.5, 0.5])), "same shape"),
    (lambda: tight_instance(1.0), "eps"),
])
def test_bad_inputs(call, msg):
    with pytest.raises(ValueError, match=msg):
        call()
