"""core.checks: the shared validators. The bounds they compare against (n, S, T, vocab) are validated too: a float
or NaN bound used to make every comparison pass or fail silently."""
import math

import numpy as np
import pytest

from hybrid_lab.core import checks


def test_validators_return_the_checked_values():
    assert checks.pos_int("x", np.int64(3)) == 3 and type(checks.pos_int("x", np.int64(3))) is int
    np.testing.assert_array_equal(checks.query_positions(None, 2, 5), [3, 4])
    np.testing.assert_array_equal(checks.query_positions(np.array([0, 4]), 2, 5), [0, 4])
    np.testing.assert_array_equal(checks.tokens("ids", np.array([1, 7]), 8), [1, 7])
    np.testing.assert_array_equal(checks.index_sets("idx", np.array([[0, 2, -1]]), 3), [[0, 2, -1]])
    assert checks.query_positions(None, 0, 0).shape == (0,)              # no query, no key: valid


@pytest.mark.parametrize("bad", [2.0, 5.5, math.nan, math.inf, "5", True, 5 + 1j, -1])
def test_bounds_must_be_integers(bad):
    with pytest.raises(ValueError, match="S"):
        checks.query_positions(np.array([3, 4]), 2, bad)
    with pytest.raises(ValueError, match="vocab"):
        checks.tokens("ids", np.array([1, 2]), bad)
    with pytest.raises(ValueError, match=r"\bn\b"):
        checks.index_sets("idx", np.array([[0, 2, -1]]), bad)


@pytest.mark.parametrize("bad", [2.0, math.nan, "2", True, -1])
def test_query_count_must_be_an_integer(bad):
    with pytest.raises(ValueError, match="T"):
        checks.query_positions(np.array([3, 4]), bad, 5)
