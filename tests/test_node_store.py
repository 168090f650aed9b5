"""NodeStore refuses bad arguments with a ValueError that names the argument, says what it expects and what it got,
and leaves the store as it was: a refused call allocates, frees and recycles nothing. A row freed twice would be
handed out twice (two nodes sharing one row), so freeing a free row, the root or a row never used is refused too.
(The store's normal behaviour, recycling last freed first and copies, is tested in tests/test_radix_cache.py.)"""
from __future__ import annotations

import numpy as np
import pytest

from hybrid_lab.core.checks import MAX_ELEMENTS
from hybrid_lab.serving.node_store import ROOT, NodeStore


def _store():
    """Nodes 1-5, of which 2 and 4 are freed (4 last), each live node holding 10 tokens on a 3-token edge."""
    s = NodeStore(rows=4)
    for _ in range(5):
        i = s.new()
        s.tokens[i], s.end[i], s.edge_len[i] = np.arange(10 * i, 10 * i + 10), 10, 3
    s.free(2)
    s.free(4)
    return s


def _snapshot(s: NodeStore):
    return (s.rows, s.size, list(s.free_ids), s.alive.copy(), [t is None for t in s.tokens])


def _unchanged(before, s: NodeStore):
    after = _snapshot(s)
    assert before[:3] == after[:3] and np.array_equal(before[3], after[3]) and before[4] == after[4]


@pytest.mark.parametrize("k, given", [(-1, "-1"), (2.0, "2.0"), (True, "True"), (np.float64(3), "3.0"),
                                      ("3", "'3'"), (None, "None"), (np.bool_(True), "True")])
def test_new_many_refuses_a_k_that_is_not_a_count(k, given):
    s = _store()
    before = _snapshot(s)
    with pytest.raises(ValueError, match=rf"^k must be an integer >= 0, got .*{given}"):
        s.new_many(k)
    _unchanged(before, s)


@pytest.mark.parametrize("k", [MAX_ELEMENTS, 2 ** 62, 10 ** 30])
def test_new_many_refuses_a_huge_k_before_allocating(k):
    s = _store()
    before = _snapshot(s)
    with pytest.raises(ValueError, match=r"^k \(the rows in use after k more nodes\) asks for .* more than 1099511627776 \(2\*\*40\)"):
        s.new_many(k)
    _unchanged(before, s)


def test_new_many_takes_zero_and_numpy_integers():
    s = _store()
    before = _snapshot(s)
    none = s.new_many(0)
    assert none.dtype == np.int64 and none.shape == (0,)
    _unchanged(before, s)
    assert s.new_many(np.int64(3)).tolist() == [4, 2, 6]          # recycled (last freed first), then a new row
    assert s.count() == 6


@pytest.mark.parametrize("i, match", [(ROOT, r"node must be an integer in \[1, 6\), got 0"),
                                      (6, r"node must be an integer in \[1, 6\), got 6"),
                                      (-1, r"node must be an integer in \[1, 6\), got -1"),
                                      (1.0, r"node must be an integer in \[1, 6\), got 1.0"),
                                      (True, r"node must be an integer in \[1, 6\), got True"),
                                      (np.bool_(True), r"node must be an integer in \[1, 6\), got .*True"),
                                      (2, r"node 2 is not in the tree"), (np.int64(4), r"node 4 is not in the tree")])
@pytest.mark.parametrize("method", ["free", "prefix", "edge", "check_id"])
def test_node_arguments_must_be_live_nodes_other_than_the_root(method, i, match):
    s = _store()
    before = _snapshot(s)
    with pytest.raises(ValueError, match=match):
        getattr(s, method)(i)
    _unchanged(before, s)


def test_a_row_freed_twice_is_not_handed_out_twice():
    s = _store()
    with pytest.raises(ValueError, match="node 4 is not in the tree"):
        s.free(4)
    ids = [s.new() for _ in range(3)]
    assert ids == [4, 2, 6] and len(set(ids)) == 3


@pytest.mark.parametrize("ids, match", [
    (np.array([1, 1]), r"ids must not repeat a node \(it would be freed twice\), got 1 twice"),
    (np.array([3, 2]), r"ids must be nodes in the tree, got 2 \(evicted or never used\)"),
    (np.array([ROOT, 1]), r"ids entries must lie in \[1, 6\), got range \[0, 1\]"),
    (np.array([1, 6]), r"ids entries must lie in \[1, 6\), got range \[1, 6\]"),
    (np.array([[1, 3]]), r"ids must be 1-D \(n,\) node ids, got shape \(1, 2\)"),
    (np.array([1.0, 3.0]), r"ids must be an integer array, got dtype float64"),
    (np.array([True, False]), r"ids must be an integer array, got dtype bool"),
    (3, r"ids must be 1-D \(n,\) node ids, got shape \(\)"),
])
def test_free_many_refuses_ids_that_are_not_distinct_live_nodes(ids, match):
    s = _store()
    before = _snapshot(s)
    with pytest.raises(ValueError, match=match):
        s.free_many(ids)
    _unchanged(before, s)


def test_free_many_takes_a_list_and_an_empty_array():
    s = _store()
    s.free_many([])
    s.free_many(np.zeros(0, np.int64))
    assert s.count() == 3
    s.free_many([5, 1])
    assert s.live().tolist() == [3] and s.new() == 1 and s.new() == 5     # the last one is reused first


def test_prefix_and_edge_of_a_live_node():
    s = _store()
    assert s.prefix(np.int64(3)).tolist() == list(range(30, 40))
    assert s.edge(3).tolist() == [37, 38, 39]
