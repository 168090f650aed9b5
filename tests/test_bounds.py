"""The 2εV and 2(ε+δ)V bounds: never violated on >= 1,000 random instances (seed 0), tight on the worst case;
bad input."""
import numpy as np
import pytest

from hybrid_lab.costs.bounds import (bound_reuse, bound_sparse, check_bounds, missing_mass, random_instance,
                                     renormalized_output, sparse_error, tight_instance, tv_distance)


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


def test_random_instance_is_reproducible():
    a = random_instance(np.random.default_rng(7), S=16, k=4, dv=3)
    b = random_instance(np.random.default_rng(7), S=16, k=4, dv=3)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    p, q, v, keep = a
    assert p.shape == q.shape == keep.shape == (16,) and v.shape == (16, 3) and keep.sum() == 4
    assert p[keep].min() >= p[~keep].max()                        # the kept set is p's top-k


P2, KEEP2, V2 = np.array([0.5, 0.5]), np.array([True, False]), np.ones((2, 1))
NAN = float("nan")


@pytest.mark.parametrize("call, msg", [
    (lambda: missing_mass(np.array([0.5, 0.6]), KEEP2), "sum to 1"),
    (lambda: missing_mass(np.array([1.5, -0.5]), KEEP2), "p must be >= 0"),
    (lambda: missing_mass(np.array([NAN, 0.5]), KEEP2), "p must be finite"),
    (lambda: missing_mass(np.array(1.0), np.array(True)), "scalar"),
    (lambda: missing_mass(P2, np.array([1, 0])), "keep must be a bool"),
    (lambda: missing_mass(P2, np.array([True, False, True])), "keep must be a bool mask of shape"),
    (lambda: renormalized_output(np.array([1.0, 0.0]), V2, np.array([False, True])), "positive"),
    (lambda: renormalized_output(P2, np.ones((3, 1)), KEEP2), "v must have shape"),
    (lambda: renormalized_output(P2, np.ones((2, 0)), KEEP2), "dv >= 1"),
    (lambda: sparse_error(P2, np.array([[NAN], [1.0]]), KEEP2), "v must be finite"),
    (lambda: sparse_error(P2, np.array([["a"], ["b"]]), KEEP2), "v must be"),
    (lambda: tv_distance(np.array([1.0]), P2), "same shape"),
    (lambda: tv_distance(P2, np.array([0.5, NAN])), "q must be finite"),
    (lambda: bound_sparse(NAN, 1.0), "eps"),
    (lambda: bound_sparse(1.5, 1.0), "eps must lie in"),
    (lambda: bound_sparse(0.1, -1.0), "V"),
    (lambda: bound_sparse(0.1, float("inf")), "V"),
    (lambda: bound_reuse(0.1, -0.1, 1.0), "delta"),
    (lambda: bound_reuse(0.1, 0.1, "1"), "V"),
    (lambda: random_instance(np.random.default_rng(0), S=8, k=0), "k"),
    (lambda: random_instance(np.random.default_rng(0), S=8, k=9), "k"),
    (lambda: random_instance(np.random.default_rng(0), S=8.0), "S"),
    (lambda: random_instance(np.random.default_rng(0), dv=0), "dv"),
    (lambda: random_instance(np.random.default_rng(0), peak=NAN), "peak"),
    (lambda: random_instance(np.random.default_rng(0), drift=-0.5), "drift"),
    (lambda: random_instance(0), "rng"),
    (lambda: check_bounds(n=0), "n"),
    (lambda: check_bounds(n=2.5), "n"),
    (lambda: check_bounds(n=2, seed=-1), "seed"),
    (lambda: tight_instance(1.0), "eps"),
    (lambda: tight_instance(NAN), "eps"),
    (lambda: tight_instance(0.1, V=0.0), "V"),
    (lambda: tight_instance(0.1, S=1), "S"),
    (lambda: tight_instance(0.1, S=8, k=8), "k"),
])
def test_bad_inputs(call, msg):
    with pytest.raises(ValueError, match=msg):
        call()


@pytest.mark.parametrize("call, name", [(lambda: check_bounds(n=2 ** 62), "n"),
                                        (lambda: random_instance(np.random.default_rng(0), S=2 ** 62), "S or dv"),
                                        (lambda: random_instance(np.random.default_rng(0), dv=2 ** 62), "S or dv"),
                                        (lambda: tight_instance(0.1, S=2 ** 62), "S")])
def test_huge_sizes_are_refused_by_name(call, name):
    with pytest.raises(ValueError, match=rf"^{name} .*more than {2 ** 40} \(2\*\*40\)"):
        call()
