"""Prefix caches for hybrid models: a radix tree of KV + SSM states and three policies (seed 003 §4, Marconi).

A prefix of a hybrid model is reusable only if the cache holds (1) the KV of every prefix token, for the attention
layers, and (2) the SSM states saved at exactly the prefix end (all-or-nothing: a state cannot be truncated).

Tree: a node holds the KV of its edge tokens and at most one SSM state, the state *at its end*. A request hits the
longest prefix of its input that ends at a node with a state (pure attention: the longest matched prefix).

Policies (one interface: ``make_cache(policy, capacity, model, alpha)`` -> object with ``serve(request)``):

- ``"vllm+"``   vLLM's block cache extended to hybrids: every full 32-token block is admitted with its KV *and* the
  SSM state at its end; LRU eviction of blocks (tail first). (:class:`BlockCache`)
- ``"sglang+"`` Marconi's admission + LRU eviction (α = 0). (:class:`RadixCache`)
- ``"marconi"`` Marconi's admission + FLOP-aware eviction, score = recency + α · FLOP efficiency. (:class:`RadixCache`)

Marconi admission: after a request, the state at its last decoded token (input + output sharing); before prefill,
speculative insertion: if the input would create a branch node inside an edge, the state at the branch point is
checkpointed during this prefill (pure-input sharing; the shared prefix hits from its 3rd occurrence).
Marconi eviction: candidates are all nodes with <= 1 child; a leaf frees its KV and state; an intermediate node
frees only its state and its KV merges into its only child. A hit refreshes only the accessed node.

Pure attention (no SSM layer): any matched prefix is a hit, and eviction trims a leaf's tail only as far as needed
(KV can be cut anywhere), so the policies nearly coincide.

Two state models: :class:`ByteModel` (sizes + FLOPs only: fast 7B-scale sweeps) and :class:`RealModel` (the mini
hybrid's actual KV and SSM states; every hit is restored and checked against recomputation).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hybrid_lab.costs.shape7b import L7B, HybridLayout
from hybrid_lab.serving.marconi import eviction_scores
from hybrid_lab.serving.workloads import Request, validate_trace

POLICIES = ("vllm+", "sglang+", "marconi")


# ---------------------------------------------------------------------------------------------------- state models
class ByteModel:
    """Sizes and FLOPs of a layout (default: Marconi's 7B hybrid). No tensors: the fast model for sweeps."""

    real = False

    def __init__(self, layout: HybridLayout = L7B):
        if not isinstance(layout, HybridLayout):
            raise ValueError(f"layout must be a HybridLayout, got {type(layout).__name__}")
        self.layout = layout
        self.kv_bytes_per_token = int(layout.kv_bytes_per_token)
        self.state_bytes = int(layout.state_bytes)
        self.needs_state = layout.n_ssm > 0

    def flops(self, L):
        return self.layout.prefill_flops(L)


class RealModel(ByteModel):
    """The mini hybrid's real KV and SSM states (``hybrid_lab.models.hybrid.MiniHybrid``).

    Sizes come from the model's arrays; FLOPs (for eviction scores only) from a layout of the same widths.
    ``verify=True`` restores every hit and compares it with a fresh prefill of the same prefix: a mismatch raises
    ``RuntimeError`` (a cache must never serve a wrong state). ``atol`` is the comparison tolerance.
    """

    real = True

    def __init__(self, model, verify: bool = True, atol: float | None = None):
        cfg = model.cfg
        itemsize = np.dtype(cfg.dtype).itemsize
        layout = HybridLayout(n_attn=cfg.n_attn, n_ssm=cfg.n_ssm, n_mlp=len(cfg.layers) if cfg.mlp else 0,
                              d_model=cfg.d_model, n_heads=cfg.n_heads, d_state=cfg.d_state, dtype_bytes=itemsize,
                              mlp_hidden=4 * cfg.d_model, expand=1, ssm_head_dim=cfg.d_model)
        super().__init__(layout)
        self.model = model
        self.verify = verify
        self.atol = atol if atol is not None else (1e-4 if itemsize == 4 else 1e-9)
        self.verified_hits = 0


def _nonneg_number(name, v) -> float:
    """float(v) if v is a finite number >= 0, else a ValueError naming the argument."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a finite number >= 0, got {v!r}") from None
    if isinstance(v, (bool, np.bool_)) or not np.isfinite(x) or x < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
    return x


def _full_sequence(req: Request) -> np.ndarray:
    """input + output as one array; a view (no copy) when the trace generator built them in one buffer."""
    a, b = req.input_ids, req.output_ids
    base = a.base
    if b.size == 0:
        return a
    if (base is not None and b.base is base and isinstance(base, np.ndarray) and base.ndim == 1
            and base.flags.c_contiguous and a.dtype == base.dtype == b.dtype and a.flags.c_contiguous):
        item = base.itemsize
        p0 = base.__array_interface__["data"][0]
        oa = (a.__array_interface__["data"][0] - p0) // item
        ob = (b.__array_interface__["data"][0] - p0) // item
        if ob == oa + a.size:
            return base[oa: ob + b.size]
    return np.concatenate([a, b])


@dataclass
class ServeRecord:
    """What the cache decided for one request (used by exercise 3 and the tests)."""

    session: int
    turn: int
    n_input: int
    hit: int                       # tokens reused
    checkpoint: int | None         # speculative-insertion branch point (absolute position), if any
    states_added: list = field(default_factory=list)   # positions of SSM states admitted for this request


# ---------------------------------------------------------------------------------------------------- shared base
class _CacheBase:
    """Node arrays (struct of arrays, ids recycled), byte/token accounting and statistics."""

    policy = "base"

    def __init__(self, capacity: float, model=None):
        self.capacity = _nonneg_number("capacity (bytes)", capacity)
        self.model = ByteModel() if model is None else model
        if not isinstance(self.model, ByteModel):
            raise ValueError(f"model must be a ByteModel or RealModel, got {type(self.model).__name__}")
        self.kvb = self.model.kv_bytes_per_token
        self.stb = self.model.state_bytes
        self._n = 0
        self._free: list = []
        self._grow(64)
        self.seq: list = []
        self.kv: list = []            # real model: per node, [(K_edge, V_edge) per attention layer]
        self.st: list = []            # real model: per node, [h per SSM layer] or None
        root = self._alloc()
        assert root == 0
        self.clock = 0
        self.bytes_held = 0.0
        self.n_tokens = 0
        self.stats = dict(requests=0, input_tokens=0, hit_tokens=0, kv_tokens_inserted=0, kv_tokens_reused=0,
                          states_inserted=0, states_reused=0, evictions=0, evicted_leaves=0, evicted_intermediate=0)
        self.log: list = []           # ServeRecord per request when keep_log
        self.keep_log = False
        self.eviction_log: list = None  # list of dicts when enabled (tests)

    # arrays ---------------------------------------------------------------------------------------------------
    _FIELDS = (("parent", np.int64, -1), ("end", np.int64, 0), ("elen", np.int64, 0), ("t", np.float64, 0.0),
               ("has_state", bool, False), ("nchild", np.int64, 0), ("alive", bool, False), ("kvc", np.int64, 0),
               ("shit", bool, False), ("hkey", np.uint64, 0))

    def _grow(self, n):
        old = getattr(self, "_cap", 0)
        for name, dt, fill in self._FIELDS:
            a = np.full(n, fill, dtype=dt)
            if old:
                a[:old] = getattr(self, name)
            setattr(self, name, a)
        self._cap = n

    def _alloc(self) -> int:
        if self._free:
            i = self._free.pop()
        else:
            if self._n == self._cap:
                self._grow(2 * self._cap)
            i = self._n
            self._n += 1
            self.seq.append(None)
            self.kv.append(None)
            self.st.append(None)
            self._extra_alloc()
        for name, dt, fill in self._FIELDS:
            getattr(self, name)[i] = fill
        self.alive[i] = True
        return i

    def _extra_alloc(self):
        pass

    def _alloc_many(self, k) -> np.ndarray:
        """k fresh node ids (recycled first), fields reset; used by the block cache's bulk insert."""
        take = min(k, len(self._free))
        ids = [self._free.pop() for _ in range(take)]
        rest = k - take
        if rest:
            while self._n + rest > self._cap:
                self._grow(2 * self._cap)
            ids.extend(range(self._n, self._n + rest))
            self._n += rest
            self.seq.extend([None] * rest)
            self.kv.extend([None] * rest)
            self.st.extend([None] * rest)
        ids = np.asarray(ids, dtype=np.int64)
        for name, dt, fill in self._FIELDS:
            getattr(self, name)[ids] = fill
        self.alive[ids] = True
        return ids

    def _release(self, i):
        self.alive[i] = False
        self.seq[i] = None
        self.kv[i] = None
        self.st[i] = None
        self._free.append(i)

    # public helpers -------------------------------------------------------------------------------------------
    @property
    def n_nodes(self) -> int:
        """Nodes in the tree, root excluded."""
        return int(self.alive[: self._n].sum()) - 1

    @property
    def n_states(self) -> int:
        return int((self.alive[: self._n] & self.has_state[: self._n]).sum())

    def recount(self) -> tuple:
        """(tokens, bytes) recomputed from the nodes, to check the incremental accounting."""
        a = self.alive[: self._n].copy()
        a[0] = False
        tok = int(self.elen[: self._n][a].sum())
        states = int(self.has_state[: self._n][a].sum())
        return tok, float(tok * self.kvb + states * self.stb)

    def node_prefix(self, i) -> np.ndarray:
        """Token ids from the root to the end of node i."""
        return self.seq[i][: self.end[i]]

    def state_prefixes(self) -> list:
        """Token prefixes (arrays) that end at a node holding a state: the only places a hybrid hit can end."""
        return [self.node_prefix(i) for i in np.flatnonzero(self.alive[: self._n] & self.has_state[: self._n]) if i]

    def serve_trace(self, trace, progress_desc=None):
        """Serve every request of a trace in order; returns a :class:`SimResult`."""
        trace = validate_trace(trace)
        hits = np.zeros(len(trace), np.int64)
        it = trace
        if progress_desc:
            from hybrid_lab.core.progress import progress
            it = progress(trace, desc=progress_desc)
        for i, r in enumerate(it):
            hits[i] = self.serve(r)
        return SimResult.from_run(self, trace, hits)

    # real-model helpers -------------------------------------------------------------------------------------
    def _restore(self, path_nodes, hit):
        """HybridCache of the first ``hit`` tokens from the KV of the path's edges + the state at the hit node."""
        from hybrid_lab.models.hybrid import HybridCache

        m = self.model.model
        n_attn = m.cfg.n_attn
        kv = []
        for a in range(n_attn):
            K = np.concatenate([self.kv[i][a][0] for i in path_nodes]) if path_nodes else None
            V = np.concatenate([self.kv[i][a][1] for i in path_nodes]) if path_nodes else None
            kv.append((K[:hit], V[:hit]))
        st = self.st[path_nodes[-1]] if self.model.needs_state else []
        return HybridCache.from_parts(kv, st if st is not None else [], hit)

    def _verify(self, restored, full, hit):
        """Compare a restored prefix with recomputation; raise if the cache would serve a wrong state."""
        mdl = self.model
        _, fresh, _ = mdl.model.prefill(full[:hit])
        ok = all(np.allclose(a, b, rtol=0, atol=mdl.atol) for a, b in zip(restored.ssm, fresh.ssm))
        ok = ok and all(np.allclose(k1, k2, rtol=0, atol=mdl.atol) and np.allclose(v1, v2, rtol=0, atol=mdl.atol)
                        for (k1, v1), (k2, v2) in zip(restored.kv, fresh.kv))
        if not ok:
            raise RuntimeError(f"{self.policy}: cache hit of {hit} tokens does not match recomputation")
        mdl.verified_hits += 1

    def _run_model(self, full, hit, path_nodes, positions):
        """Prefill full[hit:] on top of the restored prefix; returns (final cache, snapshots at ``positions``)."""
        mdl = self.model
        cache0 = None
        if hit > 0:
            cache0 = self._restore(path_nodes, hit)
            if mdl.verify:
                self._verify(cache0, full, hit)
        positions = sorted(p for p in set(positions) if hit < p <= len(full))
        _, cache, snaps = mdl.model.prefill(full[hit:], cache=cache0, snapshot_at=positions)
        return cache, snaps

    @staticmethod
    def _kv_slice(cache, a, b):
        return [(K[a:b].copy(), V[a:b].copy()) for K, V in cache.kv]


# ---------------------------------------------------------------------------------------------------- radix tree

    def _clone_tables(self):
        """A shallow copy whose node tables and lists are copied (what both policies' ``clone`` share)."""
        c = object.__new__(type(self))
        c.__dict__.update(self.__dict__)
        for name, _, _ in self._FIELDS:
            setattr(c, name, getattr(self, name).copy())
        c._free = list(self._free)
        c.seq, c.kv, c.st = list(self.seq), list(self.kv), list(self.st)
        return c


class RadixCache(_CacheBase):
    """Token-level radix tree with Marconi's admission; eviction by ``eviction_scores`` (α = 0: LRU = SGLang+).

    capacity: bytes; model: ByteModel / RealModel; alpha >= 0; score_fn(last_access, saved_flops, nbytes, alpha)
    -> scores (lowest is evicted) replaces :func:`hybrid_lab.serving.marconi.eviction_scores` (the notebook's exercise).
    """

    def __init__(self, capacity: float, model=None, alpha: float = 0.0, score_fn=None, policy: str | None = None):
        super().__init__(capacity, model)
        self.alpha = alpha
        self.score_fn = eviction_scores if score_fn is None else score_fn
        self.policy = policy or ("sglang+" if alpha == 0 else "marconi")
        self.children[0] = {}

    @property
    def alpha(self):
        return self._alpha

    @alpha.setter
    def alpha(self, a):
        self._alpha = _nonneg_number("alpha", a)

    def _extra_alloc(self):
        self.children.append(None)

    def _alloc(self) -> int:
        if not hasattr(self, "children"):
            self.children = []
        i = super()._alloc()
        self.children[i] = {}
        return i

    def _release(self, i):
        super()._release(i)
        self.children[i] = None

    def clone(self) -> "RadixCache":
        """An independent copy (token buffers and payload arrays are shared: they are never written)."""
        c = self._clone_tables()
        c.children = [None if d is None else dict(d) for d in self.children]
        c.stats = dict(self.stats)
        c.log = []
        c.eviction_log = None
        return c

    # matching --------------------------------------------------------------------------------------------------
    def _edge(self, c):
        e = self.end[c]
        return self.seq[c][e - self.elen[c]: e]

    def _walk(self, tokens, n):
        """Follow tokens[:n]. Returns (fully matched nodes, matched tokens m, diverging node or -1, offset in it)."""
        node, pos, path = 0, 0, []
        children = self.children
        while pos < n:
            c = children[node].get(int(tokens[pos]))
            if c is None:
                break
            e = int(self.elen[c])
            lim = min(e, n - pos)
            neq = np.flatnonzero(self._edge(c)[:lim] != tokens[pos: pos + lim])
            k = int(neq[0]) if neq.size else lim
            if k == e:
                path.append(c)
                pos += e
                node = c
                continue
            return path, pos + k, c, k
        return path, pos, -1, 0

    def match(self, tokens) -> int:
        """Tokens a request with this input would reuse now (no side effects)."""
        tokens = np.asarray(tokens)
        path, m, _, _ = self._walk(tokens, len(tokens))
        if not self.model.needs_state:
            return m
        for c in reversed(path):
            if self.has_state[c]:
                return int(self.end[c])
        return 0

    # structure edits -------------------------------------------------------------------------------------------
    def _split(self, c, k, now):
        """Cut node c's edge after k tokens: a new node ``mid`` takes the first k tokens and becomes c's parent."""
        mid = self._alloc()
        p = int(self.parent[c])
        first = int(self._edge(c)[0])
        self.parent[mid] = p
        self.end[mid] = self.end[c] - self.elen[c] + k
        self.elen[mid] = k
        self.t[mid] = self.t[c]
        self.seq[mid] = self.seq[c]
        self.nchild[mid] = 1
        self.children[p][first] = mid
        self.children[mid] = {int(self.seq[c][self.end[mid]]): c}
        self.parent[c] = mid
        self.elen[c] -= k
        kc = int(self.kvc[c])
        self.kvc[mid] = min(kc, k)
        self.kvc[c] = max(kc - k, 0)
        if self.model.real:
            self.kv[mid] = [(K[:k], V[:k]) for K, V in self.kv[c]]
            self.kv[c] = [(K[k:], V[k:]) for K, V in self.kv[c]]
        return mid

    def _add_state(self, i, now, snaps=None, pos=None, final=None):
        self.t[i] = now
        if self.has_state[i]:
            return False
        self.has_state[i] = True
        self.shit[i] = False
        self.bytes_held += self.stb
        self.stats["states_inserted"] += 1
        if self.model.real:
            self.st[i] = [h.copy() for h in (final.ssm if final is not None else snaps[pos])]
        return True

    def _merge_into_child(self, p):
        """Node p (one child, state already dropped) disappears; its edge KV is prepended to its child's."""
        (c,) = self.children[p].values()
        g = int(self.parent[p])
        self.children[g][int(self._edge(p)[0])] = c
        self.parent[c] = g
        kp = int(self.kvc[p])
        self.kvc[c] = kp + (int(self.kvc[c]) if kp == self.elen[p] else 0)
        self.elen[c] += self.elen[p]
        if self.model.real:
            self.kv[c] = [(np.concatenate([K1, K2]), np.concatenate([V1, V2]))
                          for (K1, V1), (K2, V2) in zip(self.kv[p], self.kv[c])]
        self._release(p)

    def _evict(self, v):
        nc = int(self.nchild[v])
        if nc > 1 or v == 0:
            raise AssertionError(f"refusing to evict node {v} with {nc} children")  # never happens by construction
        self.stats["evictions"] += 1
        if self.has_state[v]:
            self.bytes_held -= self.stb
            self.has_state[v] = False
        if nc == 1:                                  # intermediate: only the state goes, KV merges into the child
            self.stats["evicted_intermediate"] += 1
            self._merge_into_child(v)
            return
        self.stats["evicted_leaves"] += 1
        e = int(self.elen[v])
        self.bytes_held -= e * self.kvb
        self.n_tokens -= e
        p = int(self.parent[v])
        del self.children[p][int(self._edge(v)[0])]
        self.nchild[p] -= 1
        self._release(v)
        # a hybrid hit needs a state: a state-less node that is now a leaf is dead weight; with one child it is
        # just a split point, so compress the path.
        if p != 0 and self.model.needs_state and not self.has_state[p]:
            if self.nchild[p] == 0:
                self._evict(p)
            elif self.nchild[p] == 1:
                self._merge_into_child(p)

    def _pick_victim(self) -> int:
        n = self._n
        alive = self.alive[:n].copy()
        alive[0] = False
        idx = np.flatnonzero(alive)
        cand = self.nchild[idx] <= 1
        t, end, elen = self.t[idx], self.end[idx], self.elen[idx]
        saved = self.model.flops(end) - self.model.flops(end - elen)
        nbytes = elen * float(self.kvb) + self.has_state[idx] * float(self.stb)
        score = np.asarray(self.score_fn(t, saved, nbytes, self._alpha), dtype=np.float64)
        if score.shape != idx.shape:
            raise ValueError(f"score_fn must return one score per node, shape {idx.shape}, got {score.shape}")
        sc = score[cand]
        ci = idx[cand]
        best = sc.min()
        ties = ci[sc <= best + 1e-12 * max(1.0, abs(best))]
        v = int(ties[np.argmax(self.end[ties])]) if ties.size > 1 else int(ties[0])   # tie: deeper node first
        if self.eviction_log is not None:
            self.eviction_log.append(dict(node=v, nchild=int(self.nchild[v]), t=float(self.t[v]),
                                          min_t=float(t[cand].min()), clock=self.clock))
        return v

    def _evict_until(self, limit):
        while self.bytes_held > limit + 1e-6 and self.n_nodes > 0:
            v = self._pick_victim()
            if not self.model.needs_state and self.nchild[v] == 0 and self.kvb > 0:
                # pure attention: KV can be cut anywhere, so a leaf only loses as many tail tokens as needed
                cut = int(np.ceil((self.bytes_held - limit) / self.kvb - 1e-9))
                if 0 < cut < self.elen[v]:
                    self._trim(v, cut)
                    continue
            self._evict(v)

    def _trim(self, v, cut):
        self.stats["evictions"] += 1
        self.stats["evicted_leaves"] += 1
        self.elen[v] -= cut
        self.end[v] -= cut
        self.kvc[v] = min(int(self.kvc[v]), int(self.elen[v]))
        self.n_tokens -= cut
        self.bytes_held -= cut * self.kvb
        if self.model.real:
            self.kv[v] = [(K[:-cut], V[:-cut]) for K, V in self.kv[v]]

    # serving ---------------------------------------------------------------------------------------------------
    def serve(self, req: Request) -> int:
        """Serve one request: match, reuse, admit (Marconi), evict. Returns the number of input tokens reused."""
        if not isinstance(req, Request) or req.n_input == 0:
            raise ValueError("serve needs a Request with at least one input token")
        self.clock += 1
        now = float(self.clock)
        full = _full_sequence(req)
        n_in, n = req.n_input, len(full)
        path, m, pnode, k = self._walk(full, n_in)

        # 1. hit: the deepest fully matched node with a state (pure attention: any matched prefix)
        hit_i, hit_node = -1, 0
        if self.model.needs_state:
            for j in range(len(path) - 1, -1, -1):
                if self.has_state[path[j]]:
                    hit_i, hit_node = j, path[j]
                    break
            hit = int(self.end[hit_node])
        else:
            hit = m
            hit_i = len(path) - 1
            hit_node = pnode if pnode >= 0 else (path[-1] if path else 0)
        if hit > 0:
            self.t[hit_node] = now                       # only the accessed node is refreshed
            for c in path[: hit_i + 1]:
                e = int(self.elen[c])
                self.stats["kv_tokens_reused"] += e - int(self.kvc[c])
                self.kvc[c] = e
            if pnode >= 0 and not self.model.needs_state:
                self.stats["kv_tokens_reused"] += max(0, k - int(self.kvc[pnode]))
                self.kvc[pnode] = max(int(self.kvc[pnode]), k)
            if self.model.needs_state and not self.shit[hit_node]:
                self.shit[hit_node] = True
                self.stats["states_reused"] += 1

        # 2. speculative insertion: would this input create a branch node inside the tree?
        spec = None
        if 0 < m < n_in:
            if pnode >= 0:
                spec = m                                 # diverges inside an edge: a new branch node at m
            elif path and not self.has_state[path[-1]] and self.nchild[path[-1]] >= 1:
                spec = m                                 # a state-less split point becomes a branch
        # 3. (real model) restore + verify the hit, prefill the rest, take the states admission asks for
        final = snaps = None
        if self.model.real:
            positions = [n] + ([spec] if spec is not None else [])
            used = path[: hit_i + 1] + ([pnode] if pnode >= 0 and not self.model.needs_state else [])
            final, snaps = self._run_model(full, hit, used, positions)

        # 4. insert input + output; states at the branch point and at the last decoded token
        added = self._insert(full, spec, now, final, snaps)
        self.stats["requests"] += 1
        self.stats["input_tokens"] += n_in
        self.stats["hit_tokens"] += hit
        if self.keep_log:
            self.log.append(ServeRecord(req.session, req.turn, n_in, hit, spec, added))
        # 5. evict until the cache fits
        self._evict_until(self.capacity)
        return hit

    def _insert(self, full, spec, now, final, snaps):
        n = len(full)
        node, pos = 0, 0
        added = []
        real = self.model.real
        while True:
            if spec is not None and pos == spec and node != 0:
                if self._add_state(node, now, snaps=snaps, pos=spec):
                    added.append(spec)
            if pos == n:
                break
            c = self.children[node].get(int(full[pos]))
            if c is None:                                # new leaf for the rest of the sequence
                leaf = self._alloc()
                self.parent[leaf] = node
                self.end[leaf] = n
                self.elen[leaf] = n - pos
                self.seq[leaf] = full
                self.t[leaf] = now
                self.children[node][int(full[pos])] = leaf
                self.nchild[node] += 1
                self.n_tokens += n - pos
                self.bytes_held += (n - pos) * self.kvb
                self.stats["kv_tokens_inserted"] += n - pos
                if real:
                    self.kv[leaf] = self._kv_slice(final, pos, n)
                node, pos = leaf, n
                continue
            e = int(self.elen[c])
            lim = min(e, n - pos)
            neq = np.flatnonzero(self._edge(c)[:lim] != full[pos: pos + lim])
            stop = int(neq[0]) if neq.size else lim
            if spec is not None and pos < spec < pos + stop:
                stop = spec - pos
            if stop == e:
                node, pos = c, pos + e
                continue
            node, pos = self._split(c, stop, now), pos + stop
        if node != 0 and self._add_state(node, now, final=final):
            added.append(n)
        return added

    # checks ----------------------------------------------------------------------------------------------------
    def check_invariants(self):
        """Raise AssertionError if the accounting or the tree structure is inconsistent (used by the tests)."""
        tok, b = self.recount()
        assert tok == self.n_tokens, (tok, self.n_tokens)
        assert abs(b - self.bytes_held) < 1e-3, (b, self.bytes_held)
        assert self.bytes_held <= self.capacity + 1e-6, (self.bytes_held, self.capacity)
        for i in np.flatnonzero(self.alive[: self._n]):
            ch = self.children[i]
            assert len(ch) == self.nchild[i]
            for key, c in ch.items():
                assert self.parent[c] == i and self.alive[c]
                assert self.end[c] - self.elen[c] == self.end[i]
                assert int(self._edge(c)[0]) == key
                assert np.array_equal(self.seq[c][: self.end[i]], self.seq[i][: self.end[i]]) if i else True


# ---------------------------------------------------------------------------------------------------- vLLM+ blocks
_HASH_W = np.random.default_rng(12345).integers(1, 2 ** 63, size=4096, dtype=np.uint64) | np.uint64(1)


class BlockCache(_CacheBase):
    """vLLM+: fixed blocks of ``block`` tokens chained by (parent block, content hash); every block holds its KV and
    the SSM state at its end. LRU over blocks, touched on every use; a tail block is evicted before its parent.

    The 64-bit content hash is not checked against the tokens (as in vLLM); with the real model every hit is still
    verified against recomputation, so a collision could never go unnoticed there."""

    policy = "vllm+"

    def __init__(self, capacity: float, model=None, block: int = 32):
        if not (isinstance(block, (int, np.integer)) and 0 < block <= len(_HASH_W)):
            raise ValueError(f"block must be an integer in [1, {len(_HASH_W)}], got {block!r}")
        super().__init__(capacity, model)
        self.block = int(block)
        self.edges: dict = {}
        self.alpha = 0.0

    def clone(self) -> "BlockCache":
        c = self._clone_tables()
        c.edges = dict(self.edges)
        c.stats = dict(self.stats)
        c.log = []
        return c

    def _hashes(self, full, nb):
        blk = full[: nb * self.block].reshape(nb, self.block).astype(np.uint64)
        return blk @ _HASH_W[: self.block]            # wraps mod 2^64: a content hash per block

    def _walk(self, h):
        node, path, edges = 0, [], self.edges
        for x in h.tolist():
            c = edges.get((node, x))
            if c is None:
                break
            path.append(c)
            node = c
        return path

    def match(self, tokens) -> int:
        tokens = np.asarray(tokens)
        nb = len(tokens) // self.block
        return len(self._walk(self._hashes(tokens, nb))) * self.block if nb else 0

    def serve(self, req: Request) -> int:
        if not isinstance(req, Request) or req.n_input == 0:
            raise ValueError("serve needs a Request with at least one input token")
        self.clock += 1
        now = float(self.clock)
        B = self.block
        full = _full_sequence(req)
        n_in = req.n_input
        nb = len(full) // B
        h = self._hashes(full, nb) if nb else np.zeros(0, np.uint64)
        path = self._walk(h)
        hb = min(len(path), n_in // B)
        hit = hb * B
        if path:
            pa = np.asarray(path)
            self.t[pa] = now                              # LRU touch of every block this request uses
            used = pa[:hb]
            newly = int((self.kvc[used] == 0).sum())
            self.kvc[used] = B
            self.stats["kv_tokens_reused"] += newly * B
            if hb and not self.shit[path[hb - 1]]:
                self.shit[path[hb - 1]] = True
                self.stats["states_reused"] += 1
        final = snaps = None
        if self.model.real and nb > len(path):
            positions = [(i + 1) * B for i in range(len(path), nb)]
            final, snaps = self._run_model(full, hit, path[:hb], positions)
        elif self.model.real and hit > 0 and self.model.verify:
            self._verify(self._restore(path[:hb], hit), full, hit)
        # admit the missing blocks (vectorized: a block is one array row, its chain key one dict entry)
        node = path[-1] if path else 0
        i0 = len(path)
        k = nb - i0
        added = [(i + 1) * B for i in range(i0, nb)]
        if k:
            ids = self._alloc_many(k)
            par = np.concatenate([[node], ids[:-1]])
            self.parent[ids] = par
            self.end[ids] = np.arange(i0 + 1, nb + 1) * B
            self.elen[ids] = B
            self.t[ids] = now
            self.has_state[ids] = True
            self.hkey[ids] = h[i0:]
            self.nchild[ids[:-1]] = 1
            self.nchild[node] += 1
            self.edges.update(zip(zip(par.tolist(), h[i0:].tolist()), ids.tolist()))
            seq = self.seq
            for i in ids.tolist():
                seq[i] = full
            if self.model.real:
                for j, i in enumerate(ids.tolist()):
                    self.kv[i] = self._kv_slice(final, (i0 + j) * B, (i0 + j + 1) * B)
                    self.st[i] = [x.copy() for x in snaps[(i0 + j + 1) * B]]
        k = len(added)
        self.n_tokens += k * B
        self.bytes_held += k * (B * self.kvb + self.stb)
        self.stats["kv_tokens_inserted"] += k * B
        self.stats["states_inserted"] += k
        self.stats["requests"] += 1
        self.stats["input_tokens"] += n_in
        self.stats["hit_tokens"] += hit
        if self.keep_log:
            self.log.append(ServeRecord(req.session, req.turn, n_in, hit, None, added))
        self._evict_until(self.capacity)
        return hit

    def _evict_until(self, limit):
        over = self.bytes_held - limit
        if over <= 1e-6:
            return
        bb = float(self.block * self.kvb + self.stb)
        n = self._n
        alive = self.alive[:n].copy()
        alive[0] = False
        idx = np.flatnonzero(alive)
        # Children are never older than their parent (a use touches the whole path), so this global order
        # (oldest first, deeper first on ties) only ever reaches a block after all its descendants: it is exactly
        # the order of repeatedly evicting the least recently used leaf.
        order = idx[np.lexsort((-self.end[idx], self.t[idx]))]
        nv = min(len(order), int(np.ceil(over / bb - 1e-9)) if bb > 0 else len(order))
        victims = order[:nv]
        par = self.parent[victims]
        edges = self.edges
        for key in zip(par.tolist(), self.hkey[victims].tolist()):
            del edges[key]
        np.subtract.at(self.nchild, par, 1)
        if self.nchild[victims].any():        # every victim's children were victims before it
            raise AssertionError("vllm+ evicted a block that still has children")
        if self.eviction_log is not None:
            self.eviction_log.extend(dict(node=int(v), nchild=0, t=float(self.t[v]), clock=self.clock)
                                     for v in victims)
        self.alive[victims] = False
        for v in victims.tolist():
            self.seq[v] = self.kv[v] = self.st[v] = None
        self._free.extend(victims.tolist())
        self.stats["evictions"] += nv
        self.stats["evicted_leaves"] += nv
        self.n_tokens -= nv * self.block
        self.bytes_held -= nv * bb
        if bb == 0:
            self.bytes_held = 0.0

    def check_invariants(self):
        tok, b = self.recount()
        assert tok == self.n_tokens, (tok, self.n_tokens)
        assert abs(b - self.bytes_held) < 1e-3, (b, self.bytes_held)
        assert self.bytes_held <= self.capacity + 1e-6
        for (p, _), c in self.edges.items():
            assert self.alive[c] and self.parent[c] == p
            assert np.array_equal(self.seq[c][: self.end[p]], self.seq[p][: self.end[p]]) if p else True
        assert len(self.edges) == self.n_nodes


# ---------------------------------------------------------------------------------------------------- one interface
def make_cache(policy: str, capacity: float, model=None, alpha: float = 0.0, block: int = 32, score_fn=None):
    """A cache for ``policy`` in ("vllm+", "sglang+", "marconi"). ``alpha`` is used by "marconi" only."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    _nonneg_number("capacity (bytes)", capacity)
    _nonneg_number("alpha", alpha)
    if policy == "vllm+":
        return BlockCache(capacity, model, block=block)
    if policy == "sglang+":
        return RadixCache(capacity, model, alpha=0.0, score_fn=score_fn, policy="sglang+")
    return RadixCache(capacity, model, alpha=alpha, score_fn=score_fn, policy="marconi")


# ---------------------------------------------------------------------------------------------------- results
@dataclass
class SimResult:
    """Per-request hits plus the cache's counters. ``token_hit_rate`` = reused input tokens / input tokens."""

    policy: str
    capacity: float
    alpha: float
    n_input: np.ndarray
    hit: np.ndarray
    flops_total: np.ndarray
    flops_saved: np.ndarray
    stats: dict
    alpha_scores: dict = field(default_factory=dict)

    @classmethod
    def from_run(cls, cache, trace, hits, alpha_scores=None):
        n_in = np.array([r.n_input for r in trace], np.int64)
        fl = cache.model.flops
        return cls(cache.policy, cache.capacity, float(getattr(cache, "alpha", 0.0)), n_in, np.asarray(hits),
                   fl(n_in), fl(np.asarray(hits)), dict(cache.stats), alpha_scores or {})

    @property
    def token_hit_rate(self) -> float:
        return float(self.hit.sum() / max(1, self.n_input.sum()))

    @property
    def flops_saved_frac(self) -> float:
        return float(self.flops_saved.sum() / max(1.0, self.flops_total.sum()))

    @property
    def kv_reuse_frac(self) -> float:
        """Fraction of the KV tokens ever admitted that a later hit reused."""
        return self.stats["kv_tokens_reused"] / max(1, self.stats["kv_tokens_inserted"])

    @property
    def state_reuse_frac(self) -> float:
        """Fraction of the SSM states ever admitted that a later hit ended on."""
        return self.stats["states_reused"] / max(1, self.stats["states_inserted"])

    def breakdown(self, edges=(7000,)) -> list:
        """Token hit rate per input-length bucket: [(lo, hi, n_requests, hit_rate), ...]."""
        e = [0, *edges, np.inf]
        out = []
        for lo, hi in zip(e[:-1], e[1:]):
            m = (self.n_input >= lo) & (self.n_input < hi)
            out.append((lo, hi, int(m.sum()), float(self.hit[m].sum() / max(1, self.n_input[m].sum()))))
        return out


def simulate(trace, policy: str = "marconi", capacity: float = 50e9, model=None, alpha="auto", block: int = 32,
             bootstrap: float = 5.0, alphas=None, processes: int = 2, score_fn=None, progress_desc=None) -> SimResult:
    """Replay a trace through one policy. For "marconi", ``alpha="auto"`` tunes α by bootstrap replay
    (:func:`hybrid_lab.serving.marconi.run_marconi_auto`); a number fixes it."""
    trace = validate_trace(trace)
    if policy == "marconi" and isinstance(alpha, str):
        if alpha != "auto":
            raise ValueError(f"alpha must be a number >= 0 or 'auto', got {alpha!r}")
        from hybrid_lab.serving.marconi import run_marconi_auto

        return run_marconi_auto(trace, capacity, model=model, bootstrap=bootstrap, alphas=alphas,
                                processes=processes, score_fn=score_fn, progress_desc=progress_desc)
    cache = make_cache(policy, capacity, model, alpha=0.0 if isinstance(alpha, str) else alpha, block=block,
                       score_fn=score_fn)
    return cache.serve_trace(trace, progress_desc=progress_desc)
