"""Storage of a prefix cache's tree: one row per node, in parallel numpy arrays (a struct of arrays).

Why arrays and not one Python object per node: Marconi's eviction scores every node at once (recency and FLOP
efficiency are normalized over all current nodes, Marconi §4.2), which is one vectorized expression over columns;
and the vLLM+ block cache admits or evicts thousands of blocks in a few numpy calls.

Node 0 is the root (the empty prefix). A node's id is its row; rows of evicted nodes are recycled, last freed first
(so the same trace always gives the same ids: eviction ties are broken by id order).
"""
from __future__ import annotations

import numpy as np

from hybrid_lab.core.checks import int_array, int_in, nonneg_int, output_size, pos_int

ROOT = 0
_PLAIN_INTS = frozenset((int, np.int64, np.int32, np.intp))


class NodeStore:
    """The nodes of one prefix cache. ``store.<column>[i]`` is a field of node i.

    Columns (numpy arrays, one entry per row)::

        parent        int64    parent node id (-1: the root, or a free row)
        end           int64    prefix length at the node: the node stands for tokens[:end]
        edge_len      int64    tokens on the edge from the parent, tokens[end - edge_len : end]; their KV lives here
        last_access   float64  clock of the last request that used the node (recency, Marconi §4.2)
        has_state     bool     the node holds the SSM states at position ``end`` (a hybrid hit can end only here)
        n_children    int64    children in the tree (a node with >= 2 is a branch point, never evicted)
        alive         bool     the row is a node of the tree (False: free for reuse)
        kv_reused     int64    tokens of the edge whose KV some hit has reused (statistics: KV reuse)
        state_reused  bool     some hit has ended on this node's state (statistics: state reuse)
        block_hash    uint64   vLLM+ only: content hash of the block, the key of its edge
        locked        bool     in use by the request being served (its path): never evicted while set

    Python lists (one entry per row, ``None`` when unused)::

        tokens        the token array whose first ``end`` tokens are the node's prefix (shared, never written)
        kv            real model: per attention layer, (K, V) of the edge's tokens, each (edge_len, heads, d_head)
        state         real model: per SSM layer, the state h at ``end`` (d_model, d_state)
        children      radix tree only: {first token of the child's edge: child id}
    """

    COLUMNS = (("parent", np.int64, -1), ("end", np.int64, 0), ("edge_len", np.int64, 0),
               ("last_access", np.float64, 0.0), ("has_state", bool, False), ("n_children", np.int64, 0),
               ("alive", bool, False), ("kv_reused", np.int64, 0), ("state_reused", bool, False),
               ("block_hash", np.uint64, 0), ("locked", bool, False))
    LISTS = ("tokens", "kv", "state", "children")

    def __init__(self, rows: int = 64):
        rows = pos_int("rows", rows)
        output_size("rows (the rows allocated at first, one entry per column)", (rows,))
        self.rows = 0              # rows allocated in the arrays
        self.size = 0              # rows ever used (ids < size); the live ones have alive[id]
        self.free_ids: list = []   # recycled rows, the last freed is reused first
        for name in self.LISTS:
            setattr(self, name, [])
        self._grow(rows)
        root = self.new()
        assert root == ROOT

    def _grow(self, rows):
        for name, dtype, fill in self.COLUMNS:
            a = np.full(rows, fill, dtype=dtype)
            if self.rows:
                a[: self.rows] = getattr(self, name)
            setattr(self, name, a)
        self.rows = rows

    def _reset(self, ids):
        for name, _, fill in self.COLUMNS:
            getattr(self, name)[ids] = fill
        self.alive[ids] = True

    def new(self) -> int:
        """A fresh node id (a recycled row first), every column at its default, ``alive`` set."""
        if self.free_ids:
            i = self.free_ids.pop()
        else:
            if self.size == self.rows:
                self._grow(2 * self.rows)
            i = self.size
            self.size += 1
            for name in self.LISTS:
                getattr(self, name).append(None)
        self._reset(i)
        return i

    def new_many(self, k: int) -> np.ndarray:
        """k >= 0 fresh node ids (recycled rows first, in the order ``new`` would give them), reset like ``new``."""
        k = nonneg_int("k", k)
        take = min(k, len(self.free_ids))
        # the rows in use afterwards, each an entry of every column: refused past the size limit (numpy's
        # MemoryError would name no argument)
        output_size("k (the rows in use after k more nodes)", (self.size + k - take,))
        ids = [self.free_ids.pop() for _ in range(take)]
        rest = k - take
        if rest:
            while self.size + rest > self.rows:
                self._grow(2 * self.rows)
            ids.extend(range(self.size, self.size + rest))
            self.size += rest
            for name in self.LISTS:
                getattr(self, name).extend([None] * rest)
        ids = np.asarray(ids, dtype=np.int64)
        self._reset(ids)
        return ids

    def free(self, i: int):
        """Drop node i (a live node other than the root): its row is recycled and its payloads released. A row
        freed twice would be handed out twice, so a free row is refused."""
        i = self.check_id(i)
        self.alive[i] = False
        self.tokens[i] = self.kv[i] = self.state[i] = self.children[i] = None
        self.free_ids.append(i)

    def free_many(self, ids: np.ndarray):
        """Drop the nodes ``ids`` (1-D, live nodes other than the root, each once; recycled in this order: the last
        one is reused first)."""
        ids = self.check_ids(ids)
        self.alive[ids] = False
        for i in ids.tolist():
            self.tokens[i] = self.kv[i] = self.state[i] = self.children[i] = None
        self.free_ids.extend(ids.tolist())

    def live(self) -> np.ndarray:
        """Ids of the nodes in the tree, root excluded, ascending. (n,) int64."""
        alive = self.alive[: self.size].copy()
        alive[ROOT] = False
        return np.flatnonzero(alive)

    def count(self) -> int:
        """Nodes in the tree, root excluded."""
        return int(self.alive[: self.size].sum()) - 1

    def check_id(self, i) -> int:
        """``i`` as an int if it is a live node other than the root, else ``ValueError``."""
        if type(i) in _PLAIN_INTS and 0 < i < self.size:   # the common case, without int_in's checks: edge()
            i = int(i)                                       # runs this on every step of the radix walk
        else:
            i = int_in("node", i, 1, max(self.size, 1))
        if not self.alive[i]:
            raise ValueError(f"node {i} is not in the tree (evicted or never used)")
        return i

    def check_ids(self, ids) -> np.ndarray:
        """``ids`` as a 1-D int64 array if they are distinct live nodes other than the root, else ``ValueError``."""
        ids = int_array("ids", ids, ndim=1, shape_doc="(n,) node ids", lo=1, hi=max(self.size, 1))
        dead = ids[~self.alive[ids]]
        if dead.size:
            raise ValueError(f"ids must be nodes in the tree, got {int(dead[0])} (evicted or never used)")
        if np.unique(ids).size != ids.size:
            u, c = np.unique(ids, return_counts=True)
            raise ValueError(f"ids must not repeat a node (it would be freed twice), got {int(u[c > 1][0])} twice")
        return ids

    def prefix(self, i: int) -> np.ndarray:
        """The token ids from the root to the end of node i (a live node other than the root): (end[i],)."""
        i = self.check_id(i)
        return self.tokens[i][: self.end[i]]

    def edge(self, i: int) -> np.ndarray:
        """The token ids on node i's edge (a live node other than the root): (edge_len[i],)."""
        i = self.check_id(i)
        e = self.end[i]
        return self.tokens[i][e - self.edge_len[i]: e]

    def copy(self) -> "NodeStore":
        """An independent copy: new columns, lists and child dicts; token arrays and payloads are shared (never
        written in place)."""
        c = object.__new__(NodeStore)
        c.rows, c.size, c.free_ids = self.rows, self.size, list(self.free_ids)
        for name, _, _ in self.COLUMNS:
            setattr(c, name, getattr(self, name).copy())
        c.tokens, c.kv, c.state = list(self.tokens), list(self.kv), list(self.state)
        c.children = [None if d is None else dict(d) for d in self.children]
        return c
