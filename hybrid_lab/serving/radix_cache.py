"""Prefix caches for hybrid models: Marconi's radix tree of KV + SSM states, and the vLLM+ block cache it is compared
with (Marconi §3-§4; lecture 10 §4).

Why hybrids are different (Marconi §3): a prefix of a hybrid model is reusable only if the cache holds (1) the KV of
every prefix token, for the attention layers, and (2) the SSM states saved at exactly the prefix end. A state is
updated in place, so it cannot be rolled back to a shorter prefix: reuse is all-or-nothing, and a state weighs as
much as hundreds of tokens of KV (7B: 25 MB = 384 tokens). Saving one every few tokens floods the cache with
states that are almost never reused.

The tree: a node holds the KV of its edge's tokens and at most one SSM state, the state *at its end*. A request
hits the longest prefix of its input that ends at a node with a state (pure attention: any matched prefix).

Serving one request, :meth:`RadixCache.serve` (Marconi §4):

1. **match**: walk the input down the tree; the hit is the deepest matched node holding a state. Marconi refreshes
   only the accessed node's recency; SGLang+ refreshes the whole path of the request.
2. **admit, judiciously** (Marconi §4.1). Prefix reuse comes in two kinds, and only the states that serve one of
   them are admitted, at most two per sequence:
   - *input + output* (a conversation's next turn continues from the last decoded token): after the request, the
     state at its last decoded token;
   - *pure input* (a shared system prompt, few-shot block or document), found by **speculative insertion**: if the
     walk of the input stops where the tree continues without a state (midway along an edge, or at a state-less
     node with children), inserting the request creates a branch there: a prefix several requests share, and its
     state is checkpointed during this prefill. This includes an input that ends *inside* an edge (the same prompt
     again, with a different answer: n samples per prompt, regenerations): the branch point is the input's end,
     the output splits the edge there, and the state at the end of the prefill is saved. The price: a shared prefix
     hits from its 3rd occurrence.
3. **evict before admitting** (Marconi §4.2): the bytes this request adds (the KV of its new tokens and its new
   states) are counted first, and nodes are evicted until they fit; the request's own path is locked meanwhile (a
   server cannot drop what the running request reads). So the bytes held never exceed the capacity, not even inside
   one request. A sequence that does not fit even in the empty cache is served and not cached.

Policies (one interface: :func:`make_cache` -> an object with ``serve(request)``):

- ``"vllm+"``   vLLM's block cache extended to hybrids: every full 32-token block is admitted with its KV *and* the
  SSM state at its end; LRU over blocks, tail first (:class:`BlockCache`).
- ``"sglang+"`` the paper's baseline: Marconi's admission, SGLang's eviction: LRU over **leaves only**, every node
  of the request's path refreshed (:class:`RadixCache` with ``policy="sglang+"``).
- ``"marconi"`` Marconi's admission + FLOP-aware eviction of any node with <= 1 child (:class:`RadixCache`): the
  lowest S = recency + α · FLOP efficiency goes (:mod:`hybrid_lab.serving.eviction`). A leaf frees its KV and state;
  a node with one child frees only its state, and its KV merges into the child. ``score="paper"`` (default) is the
  official simulator's score, ``score="lecture"`` this lab's earlier variant (see the eviction module: α means
  different things in the two). α tuned by replay in :mod:`hybrid_lab.serving.marconi`.

Pure attention (no SSM layer): any matched prefix is a hit and eviction trims a leaf's tail only as far as needed
(KV can be cut anywhere), so the policies nearly coincide.

The two decisions can be handed to the cache as functions (the notebook's exercises): ``admit_fn`` with the
signature of :func:`marconi_admission` (where to save states, from the walk of the input) and ``evict_fn`` with the
signature of :func:`marconi_evict` (which nodes to drop, through a :class:`TreeView`); by default the cache decides
itself, exactly as these two functions do.

What a node holds is given by a state model (:mod:`hybrid_lab.serving.state_models`): ``ByteModel`` (sizes and
FLOPs only, from :mod:`hybrid_lab.costs.shape7b`: fast 7B-scale sweeps) or ``RealModel`` (the mini hybrid's actual
KV and SSM states; every hit is restored and checked against recomputation). The nodes themselves live in a
:class:`~hybrid_lab.serving.node_store.NodeStore`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hybrid_lab.core import checks
from hybrid_lab.core.checks import finite_array, int_in, nonneg_number
from hybrid_lab.core.progress import progress
from hybrid_lab.serving.eviction import SCORES, eviction_scores, node_scores
from hybrid_lab.serving.node_store import ROOT, NodeStore
from hybrid_lab.serving.state_models import ByteModel
from hybrid_lab.serving.workloads import Request, token_ids, validate_trace

POLICIES = ("vllm+", "sglang+", "marconi")


# ---------------------------------------------------------------------------------------------------- shared base
@dataclass
class ServeRecord:
    """What the cache decided for one request (lecture 10, exercise 3, and the tests)."""

    session: int
    turn: int
    n_input: int
    hit: int                       # input tokens reused
    checkpoint: int | None         # speculative insertion's branch point (absolute position), if any
    states_added: list = field(default_factory=list)   # positions of the SSM states admitted for this request


class PrefixCache:
    """What both policies share: the nodes (a :class:`NodeStore`), bytes held against ``capacity``, statistics,
    and the real model's restore / verify / prefill.

    capacity: bytes (>= 0; 0 caches nothing); model: a :class:`ByteModel` or :class:`RealModel` (default: 7B bytes).
    """

    policy = "base"

    def __init__(self, capacity: float, model: ByteModel | None = None):
        self.capacity = nonneg_number("capacity", capacity)
        self.model = ByteModel() if model is None else model
        if not isinstance(self.model, ByteModel):
            raise ValueError(f"model must be a ByteModel or RealModel, got {type(self.model).__name__}")
        self.kv_bytes_per_token = self.model.kv_bytes_per_token
        self.state_bytes = self.model.state_bytes
        self.nodes = NodeStore()
        self.clock = 0                 # one tick per request: the recency of a node is the tick of its last use
        self.bytes_held = 0.0          # KV of every edge + every state
        self.n_tokens = 0              # tokens of KV held
        self.stats = dict(requests=0, input_tokens=0, hit_tokens=0, kv_tokens_inserted=0, kv_tokens_reused=0,
                          states_inserted=0, states_reused=0, evictions=0, evicted_leaves=0, evicted_intermediate=0)
        self.keep_log = False          # True: a ServeRecord per request in ``log``
        self.log: list = []
        self.eviction_log: list | None = None   # a list: one dict per eviction (the tests)

    @property
    def n_nodes(self) -> int:
        """Nodes in the tree, root excluded."""
        return self.nodes.count()

    @property
    def n_states(self) -> int:
        """SSM states held."""
        return int(self.nodes.has_state[self.nodes.live()].sum())

    def recount(self) -> tuple:
        """(tokens, bytes) recomputed from the nodes, to check the incremental accounting."""
        ids = self.nodes.live()
        tok = int(self.nodes.edge_len[ids].sum())
        states = int(self.nodes.has_state[ids].sum())
        return tok, float(tok * self.kv_bytes_per_token + states * self.state_bytes)

    def node_prefix(self, node: int) -> np.ndarray:
        """Token ids from the root to the end of ``node`` (a live node id)."""
        return self.nodes.prefix(self.nodes.check_id(node))

    def state_prefixes(self) -> list:
        """Token prefixes (arrays) that end at a node holding a state: the only places a hybrid hit can end."""
        ids = self.nodes.live()
        return [self.nodes.prefix(i) for i in ids[self.nodes.has_state[ids]]]

    def serve(self, req: Request) -> int:
        raise NotImplementedError

    def serve_trace(self, trace, progress_desc: str | None = None) -> "SimResult":
        """Serve every request of a trace in order; returns a :class:`SimResult`. ``progress_desc``: a progress
        bar's label (None: no bar)."""
        trace = validate_trace(trace)
        if progress_desc is not None and not isinstance(progress_desc, str):
            raise ValueError(f"progress_desc must be a string or None, got {progress_desc!r}")
        hits = np.zeros(len(trace), np.int64)
        for i, r in enumerate(progress(trace, desc=progress_desc) if progress_desc else trace):
            hits[i] = self.serve(r)
        return SimResult.from_run(self, trace, hits)

    def _check_request(self, req):
        if not isinstance(req, Request):
            raise ValueError(f"req must be a Request, got {type(req).__name__}")

    def _record(self, req, n_in, hit, branch, added):
        """Count one served request (and log it when ``keep_log``)."""
        self.stats["requests"] += 1
        self.stats["input_tokens"] += n_in
        self.stats["hit_tokens"] += hit
        if self.keep_log:
            self.log.append(ServeRecord(req.session, req.turn, n_in, hit, branch, added))

    def _copy(self):
        """A copy with its own nodes and counters (both policies' ``clone``)."""
        c = object.__new__(type(self))
        c.__dict__.update(self.__dict__)
        c.nodes = self.nodes.copy()
        c.stats = dict(self.stats)
        c.log = []
        c.eviction_log = None
        return c

    # real model ---------------------------------------------------------------------------------------------
    def _run_model(self, tokens, hit, path, positions):
        """Restore (and verify) the hit from the KV along ``path`` + the state at its last node, then prefill the
        rest; returns (the cache at the end, {position: SSM states} at ``positions``)."""
        mdl = self.model
        restored = None
        if hit > 0:
            restored = self._restore(path, hit)
            if mdl.verify:
                mdl.check_hit(restored, tokens, hit, self.policy)
        return mdl.resume(tokens, hit, restored, positions)

    def _restore(self, path, hit):
        state = self.nodes.state[path[-1]] if self.model.needs_state else []
        return self.model.restore([self.nodes.kv[i] for i in path], state, hit)


# ---------------------------------------------------------------------------------------------------- Marconi
class RadixCache(PrefixCache):
    """Token-level radix tree with Marconi's admission (§4.1) and eviction (§4.2), or the SGLang+ baseline.

    capacity: bytes; model: ByteModel / RealModel; alpha >= 0 (Marconi only); policy: "marconi" (default) or
    "sglang+" (LRU over leaves, the whole path refreshed; alpha must be 0); score: Marconi's score, "paper" (default,
    the official simulator's) or "lecture" (this lab's earlier variant; :mod:`hybrid_lab.serving.eviction`).
    ``score_fn(last_access, saved_flops, nbytes, alpha, now) -> scores`` (lowest evicted) replaces the paper's score
    (:func:`hybrid_lab.serving.eviction.eviction_scores`; the notebook's exercise): it is called on the candidates
    (nodes with <= 1 child, not locked) with the bytes of each candidate's whole prefix.

    Hooks (the notebook's exercises; None: the cache's own decisions, which equal these functions'):
    ``admit_fn(n_input, n_tokens, m, inside_edge, node_children, node_has_state) -> positions`` replaces Marconi's
    admission (see :func:`marconi_admission`); ``evict_fn(tree, bytes_to_free, alpha)`` replaces the eviction loop
    (see :func:`marconi_evict`; Marconi on a hybrid model only, and ``score`` / ``score_fn`` are then not used).
    """

    def __init__(self, capacity: float, model: ByteModel | None = None, alpha: float = 0.0, score_fn=None,
                 policy: str | None = None, admit_fn=None, evict_fn=None, score: str = "paper"):
        super().__init__(capacity, model)
        self.alpha = alpha
        if score not in SCORES:
            raise ValueError(f"score must be one of {SCORES}, got {score!r}")
        self.score = score
        if score_fn is not None and not callable(score_fn):
            raise ValueError(f"score_fn must be a function (last_access, saved_flops, nbytes, alpha, now) -> scores "
                             f"or None, got {score_fn!r}")
        self.score_fn = score_fn
        if admit_fn is not None and not callable(admit_fn):
            raise ValueError(f"admit_fn must be a function (n_input, n_tokens, m, inside_edge, node_children, "
                             f"node_has_state) -> positions or None, got {admit_fn!r}")
        if evict_fn is not None and not callable(evict_fn):
            raise ValueError(f"evict_fn must be a function (tree, bytes_to_free, alpha) or None, got {evict_fn!r}")
        if evict_fn is not None and not self.model.needs_state:
            raise ValueError("evict_fn needs a hybrid model (pure attention trims leaves token by token); this model "
                             "has no SSM layer")
        self.admit_fn, self.evict_fn = admit_fn, evict_fn
        if policy is not None and policy not in ("sglang+", "marconi"):
            raise ValueError(f"policy must be 'sglang+', 'marconi' or None, got {policy!r}")
        self.policy = policy or "marconi"
        if self.policy == "sglang+":
            if self._alpha != 0:
                raise ValueError(f"alpha must be 0 for policy 'sglang+' (LRU over leaves has no FLOP term), got "
                                 f"{alpha!r}")
            if evict_fn is not None or score_fn is not None:
                raise ValueError("evict_fn and score_fn replace Marconi's eviction; policy 'sglang+' evicts the least "
                                 "recently used leaf")
        self.nodes.children[ROOT] = {}
        self._flops_table = np.zeros(0)    # prefill FLOPs of every prefix length 0..L (see _prefill_flops)

    @property
    def alpha(self) -> float:
        """Weight of FLOP efficiency against recency in the eviction score (Marconi §4.2)."""
        return self._alpha

    @alpha.setter
    def alpha(self, a):
        self._alpha = nonneg_number("alpha", a)

    def clone(self) -> "RadixCache":
        """An independent copy (token arrays and payloads are shared: they are never written in place)."""
        return self._copy()

    # serving ---------------------------------------------------------------------------------------------------
    def serve(self, req: Request) -> int:
        """Serve one request: match, reuse, admit (Marconi §4.1) after evicting room for it (§4.2). Returns the
        input tokens reused."""
        self._check_request(req)
        self.clock += 1
        now = float(self.clock)
        tokens, n_in = req.tokens, req.n_input

        # 1. match: walk the input down the tree; the hit, and the nodes whose KV and state it reuses
        path, m, split_node, split_at = self._walk(tokens, n_in)
        hit, used = self._reuse(path, m, split_node, split_at, now)

        # 2. admission (Marconi §4.1): the branch point found by speculative insertion, if any, and the last token
        n = len(tokens)
        if self.admit_fn is None:
            branch = self._speculative_insertion(path, m, split_node, n_in, n)
            positions = ([branch] if branch is not None else []) + [n]
        else:
            positions = self._admit_hook(path, m, split_node, n_in, n, hit)
            branch = next((p for p in positions if p < n), None)
        final = snaps = None
        if self.model.real:                              # restore + verify the hit, prefill the rest, snapshot
            final, snaps = self._run_model(tokens, hit, used, positions)

        # 3. evict before admitting (Marconi §4.2), then insert the whole sequence with the admitted states
        added = []
        if self._make_room(tokens, positions, n - m):
            added, last = self._insert(tokens, positions, now, final, snaps)
            if self.policy == "sglang+":                 # SGLang: every node of the request's path is refreshed
                self._touch_path(last, now)
        self._record(req, n_in, hit, branch, added)
        return hit

    def _make_room(self, tokens, positions, new_max) -> bool:
        """Evict until the bytes this request adds fit (its own path locked); False if the sequence cannot fit even
        in an empty cache (it is then not cached). ``new_max``: an upper bound of its new tokens."""
        cap, kvb, sb = self.capacity + 1e-6, float(self.kv_bytes_per_token), float(self.state_bytes)
        k = len(set(positions))
        if self.bytes_held + new_max * kvb + k * sb <= cap:      # fits even if nothing more were shared: no walk
            return True
        nodes = self.nodes
        path, M, split_node, _ = self._walk(tokens, len(tokens))
        have = {int(nodes.end[c]) for c in path if nodes.has_state[c]}
        need = (len(tokens) - M) * kvb + sum(1 for p in set(positions) if p not in have) * sb
        if self.bytes_held + need <= cap:
            return True
        lock = path + ([split_node] if split_node >= 0 else [])
        nodes.locked[lock] = True
        try:
            self._evict_until(self.capacity - need)
        finally:
            nodes.locked[lock] = False
        if self.bytes_held + need <= cap:
            return True
        full = len(tokens) * kvb + k * sb                    # the request's own path must go too
        self._evict_until(self.capacity - full)
        return self.bytes_held + full <= cap

    def _touch_path(self, node, now):
        nodes = self.nodes
        while node != ROOT:
            nodes.last_access[node] = now
            node = int(nodes.parent[node])

    def match(self, tokens) -> int:
        """Tokens a request with this input would reuse now (no side effects). tokens: (L,) token ids."""
        tokens = token_ids("tokens", tokens)
        path, m, _, _ = self._walk(tokens, len(tokens))
        if not self.model.needs_state:
            return m
        for c in reversed(path):
            if self.nodes.has_state[c]:
                return int(self.nodes.end[c])
        return 0

    # 1. match ----------------------------------------------------------------------------------------------
    def _walk(self, tokens, n):
        """Follow tokens[:n] down the tree. Returns (fully matched nodes root first, matched tokens m, the node whose
        edge the input leaves midway or -1, tokens matched on that edge)."""
        nodes = self.nodes
        node, pos, path = ROOT, 0, []
        children = nodes.children
        while pos < n:
            c = children[node].get(int(tokens[pos]))
            if c is None:
                break
            e = int(nodes.edge_len[c])
            lim = min(e, n - pos)
            neq = np.flatnonzero(nodes.edge(c)[:lim] != tokens[pos: pos + lim])
            k = int(neq[0]) if neq.size else lim
            if k == e:
                path.append(c)
                pos += e
                node = c
                continue
            return path, pos + k, c, k
        return path, pos, -1, 0

    def _reuse(self, path, m, split_node, split_at, now):
        """The hit (tokens reused) and the nodes whose KV/state it reads; refreshes the accessed node and counts
        reuse. Hybrid: the deepest matched node with a state. Pure attention: all m matched tokens."""
        nodes = self.nodes
        if self.model.needs_state:
            hit_i, hit_node = -1, ROOT
            for j in range(len(path) - 1, -1, -1):
                if nodes.has_state[path[j]]:
                    hit_i, hit_node = j, path[j]
                    break
            hit = int(nodes.end[hit_node])
        else:
            hit = m
            hit_i = len(path) - 1
            hit_node = split_node if split_node >= 0 else (path[-1] if path else ROOT)
        if hit > 0:
            nodes.last_access[hit_node] = now            # only the accessed node is refreshed (Marconi §4.2)
            for c in path[: hit_i + 1]:
                e = int(nodes.edge_len[c])
                self.stats["kv_tokens_reused"] += e - int(nodes.kv_reused[c])
                nodes.kv_reused[c] = e
            if split_node >= 0 and not self.model.needs_state:
                self.stats["kv_tokens_reused"] += max(0, split_at - int(nodes.kv_reused[split_node]))
                nodes.kv_reused[split_node] = max(int(nodes.kv_reused[split_node]), split_at)
            if self.model.needs_state and not nodes.state_reused[hit_node]:
                nodes.state_reused[hit_node] = True
                self.stats["states_reused"] += 1
        used = path[: hit_i + 1] + ([split_node] if split_node >= 0 and not self.model.needs_state else [])
        return hit, used

    # 2. admit ----------------------------------------------------------------------------------------------
    def _speculative_insertion(self, path, m, split_node, n_in, n):
        """The position where inserting this request creates a new branch node inside the tree, or None. A branch
        point is a prefix several requests share (a system prompt, a document, the same prompt sampled again): its
        state is checkpointed during this prefill, so the prefix hits from its 3rd occurrence on (Marconi §4.1).
        The input may end there (m = n_input): then the output splits the edge, and the checkpoint is the state at
        the end of the prefill."""
        if not 0 < m <= n_in or m == n:
            return None
        if split_node >= 0:
            return m                                     # the walk stops midway along an edge: a new node at m
        last = path[-1] if path else ROOT
        if path and not self.nodes.has_state[last] and self.nodes.n_children[last] >= 1:
            return m                                     # a state-less split point becomes a branch
        return None

    def _admit_hook(self, path, m, split_node, n_in, n, hit) -> list:
        """``admit_fn``'s positions for this request: checked, sorted, without repeats."""
        if split_node >= 0:
            inside, children, has_state = True, 0, False
        else:
            last = path[-1] if path else ROOT
            inside, children, has_state = False, int(self.nodes.n_children[last]), bool(self.nodes.has_state[last])
        out = self.admit_fn(n_in, n, m, inside, children, has_state)
        try:
            out = list(out)
            pos = sorted({int(p) for p in out})
            ok = all(float(p) == int(p) for p in out)
        except (TypeError, ValueError):
            ok = False
        if not ok or (pos and not 1 <= pos[0] <= pos[-1] <= n):
            raise ValueError(f"admit_fn must return a list of positions (integers in [1, n_tokens = {n}]), got "
                             f"{out!r}")
        if self.model.real and pos and pos[0] <= hit:
            raise ValueError(f"admit_fn: with the real model every position must lie after the hit ({hit}), got {pos}")
        return pos

    def _insert(self, tokens, positions, now, final, snaps):
        """Insert the whole sequence (input + output) and admit the SSM states at ``positions`` (ascending, in
        [1, len(tokens)]: Marconi's are the branch point found by speculative insertion and the last token). Returns
        the positions of the states admitted (those the tree did not hold yet)."""
        nodes = self.nodes
        n = len(tokens)
        node, pos = ROOT, 0
        added = []
        for target in list(positions) + ([n] if not positions or positions[-1] < n else []):
            while pos < target:
                c = nodes.children[node].get(int(tokens[pos]))
                if c is None:                            # a new leaf for the tokens up to the target
                    node, pos = self._new_leaf(node, tokens, pos, now, final, stop=target), target
                    break
                e = int(nodes.edge_len[c])
                lim = min(e, target - pos)
                neq = np.flatnonzero(nodes.edge(c)[:lim] != tokens[pos: pos + lim])
                stop = int(neq[0]) if neq.size else lim
                if stop == e:
                    node, pos = c, pos + e
                    continue
                node, pos = self._split(c, stop), pos + stop
            if target not in positions or node == ROOT:
                continue
            new = (self._add_state(node, now, final=final) if target == n
                   else self._add_state(node, now, snaps=snaps, pos=target))
            if new:
                added.append(target)
        return added, node

    def _new_leaf(self, parent, tokens, pos, now, final, stop=None) -> int:
        """A new leaf under ``parent`` holding tokens[pos:stop] (default: to the end; and their KV); returns its id."""
        nodes = self.nodes
        n = len(tokens) if stop is None else stop
        leaf = nodes.new()
        nodes.children[leaf] = {}
        nodes.parent[leaf] = parent
        nodes.end[leaf] = n
        nodes.edge_len[leaf] = n - pos
        nodes.tokens[leaf] = tokens
        nodes.last_access[leaf] = now
        nodes.children[parent][int(tokens[pos])] = leaf
        nodes.n_children[parent] += 1
        self.n_tokens += n - pos
        self.bytes_held += (n - pos) * self.kv_bytes_per_token
        self.stats["kv_tokens_inserted"] += n - pos
        if self.model.real:
            nodes.kv[leaf] = self.model.kv_slice(final, pos, n)
        return leaf

    def _split(self, c, k):
        """Cut node c's edge after k tokens: a new node ``mid`` takes the first k tokens and becomes c's parent."""
        nodes = self.nodes
        mid = nodes.new()
        p = int(nodes.parent[c])
        first = int(nodes.edge(c)[0])
        nodes.parent[mid] = p
        nodes.end[mid] = nodes.end[c] - nodes.edge_len[c] + k
        nodes.edge_len[mid] = k
        nodes.last_access[mid] = nodes.last_access[c]
        nodes.tokens[mid] = nodes.tokens[c]
        nodes.n_children[mid] = 1
        nodes.children[p][first] = mid
        nodes.children[mid] = {int(nodes.tokens[c][nodes.end[mid]]): c}
        nodes.parent[c] = mid
        nodes.edge_len[c] -= k
        kc = int(nodes.kv_reused[c])
        nodes.kv_reused[mid] = min(kc, k)
        nodes.kv_reused[c] = max(kc - k, 0)
        if self.model.real:
            nodes.kv[mid] = [(K[:k], V[:k]) for K, V in nodes.kv[c]]
            nodes.kv[c] = [(K[k:], V[k:]) for K, V in nodes.kv[c]]
        return mid

    def _add_state(self, i, now, snaps=None, pos=None, final=None):
        """Admit the SSM states at node i's end (from the final cache or a snapshot); False if it already has them."""
        nodes = self.nodes
        nodes.last_access[i] = now
        if nodes.has_state[i]:
            return False
        nodes.has_state[i] = True
        nodes.state_reused[i] = False
        self.bytes_held += self.state_bytes
        self.stats["states_inserted"] += 1
        if self.model.real:
            nodes.state[i] = [h.copy() for h in (final.ssm if final is not None else snaps[pos])]
        return True

    # 3. evict ----------------------------------------------------------------------------------------------
    def _n_evictable(self) -> int:
        ids = self.nodes.live()
        return int((~self.nodes.locked[ids]).sum())

    def _evict_until(self, limit):
        if self.evict_fn is not None:
            if self.bytes_held > limit + 1e-6 and self._n_evictable() > 0:
                need = self.bytes_held - limit
                self.evict_fn(TreeView(self), need, self._alpha)
                if self.bytes_held > limit + 1e-6 and self._n_evictable() > 0:
                    raise ValueError(f"evict_fn freed {need - (self.bytes_held - limit):.0f} of the {need:.0f} bytes "
                                     f"to free: evict until at least bytes_to_free bytes are freed (or the tree is "
                                     f"empty)")
            return
        while self.bytes_held > limit + 1e-6 and self.n_nodes > 0:
            v = self._pick_victim()
            if v is None:                                # only the request's own (locked) path is left
                return
            if not self.model.needs_state and self.nodes.n_children[v] == 0 and self.kv_bytes_per_token > 0:
                # pure attention: KV can be cut anywhere, so a leaf only loses as many tail tokens as needed
                cut = int(np.ceil((self.bytes_held - limit) / self.kv_bytes_per_token - 1e-9))
                if 0 < cut < self.nodes.edge_len[v]:
                    self._trim(v, cut)
                    continue
            self._evict(v)

    def _pick_victim(self):
        """The node to evict next, None if every node is locked. SGLang+: the least recently used leaf. Marconi: the
        candidate (<= 1 child) with the lowest score. Ties go to the deeper node, then the lower id."""
        nodes = self.nodes
        idx = nodes.live()
        idx = idx[~nodes.locked[idx]]
        if not idx.size:
            return None
        nch = nodes.n_children[idx]
        if self.policy == "sglang+":
            ci = idx[nch == 0]
            sc = t_c = nodes.last_access[ci]
        else:
            if self.score == "lecture":                  # scored over every node, own bytes, linear recency
                scored, cand = idx, nch <= 1
            else:                                        # the paper's: scored over the candidates, prefix bytes
                scored = idx[nch <= 1]
                cand = np.ones(len(scored), bool)
            t, end, edge_len = nodes.last_access[scored], nodes.end[scored], nodes.edge_len[scored]
            saved = self._prefill_flops(end) - self._prefill_flops(end - edge_len)   # relative to the parent
            own = edge_len if self.score == "lecture" else end
            nbytes = own * float(self.kv_bytes_per_token) + nodes.has_state[scored] * float(self.state_bytes)
            now = float(self.clock + 1)
            if self.score_fn is None:
                score = node_scores(t, saved, nbytes, self._alpha, now, self.score)
            else:
                score = np.asarray(self.score_fn(t, saved, nbytes, self._alpha, now), dtype=np.float64)
                if score.shape != scored.shape:
                    raise ValueError(f"score_fn must return one score per node, shape {scored.shape}, got "
                                     f"{score.shape}")
            sc, ci, t_c = score[cand], scored[cand], t[cand]
            if not np.isfinite(sc).all():
                raise ValueError(f"score_fn must return finite scores, got {sc[~np.isfinite(sc)][0]}")
        if not ci.size:
            return None
        best = sc.min()
        ties = ci[sc <= best + 1e-12 * max(1.0, abs(best))]
        v = int(ties[np.argmax(nodes.end[ties])]) if ties.size > 1 else int(ties[0])
        if self.eviction_log is not None:
            self.eviction_log.append(dict(node=v, nchild=int(nodes.n_children[v]), t=float(nodes.last_access[v]),
                                          min_t=float(t_c.min()), clock=self.clock))
        return v

    def _prefill_flops(self, lengths):
        """The model's prefill FLOPs of prefixes of these lengths, (n,). Looked up in a table of
        ``model.flops(0..L)`` that grows by doubling: the formula runs once per doubling, not once per eviction."""
        need = int(lengths.max()) + 1
        if need > len(self._flops_table):
            self._flops_table = self.model.flops(np.arange(max(need, 2 * len(self._flops_table))))
        return self._flops_table[lengths]

    def _evict(self, v):
        """Drop node v's state; a leaf also drops its KV, a node with one child merges its KV into the child."""
        nodes = self.nodes
        nc = int(nodes.n_children[v])
        if nc > 1 or v == ROOT:
            raise AssertionError(f"refusing to evict node {v} with {nc} children")  # never happens by construction
        self.stats["evictions"] += 1
        if nodes.has_state[v]:
            self.bytes_held -= self.state_bytes
            nodes.has_state[v] = False
        if nc == 1:                                  # intermediate: only the state goes, KV merges into the child
            self.stats["evicted_intermediate"] += 1
            self._merge_into_child(v)
            return
        self.stats["evicted_leaves"] += 1
        e = int(nodes.edge_len[v])
        self.bytes_held -= e * self.kv_bytes_per_token
        self.n_tokens -= e
        p = int(nodes.parent[v])
        del nodes.children[p][int(nodes.edge(v)[0])]
        nodes.n_children[p] -= 1
        nodes.free(v)
        # a hybrid hit needs a state: a state-less node that is now a leaf is dead weight; with one child it is
        # just a split point, so compress the path.
        if p != ROOT and self.model.needs_state and not nodes.has_state[p] and not nodes.locked[p]:
            if nodes.n_children[p] == 0:
                self._evict(p)
            elif nodes.n_children[p] == 1:
                self._merge_into_child(p)

    def _merge_into_child(self, p):
        """Node p (one child, no state) disappears; its edge's KV is prepended to its child's."""
        nodes = self.nodes
        (c,) = nodes.children[p].values()
        g = int(nodes.parent[p])
        nodes.children[g][int(nodes.edge(p)[0])] = c
        nodes.parent[c] = g
        kp = int(nodes.kv_reused[p])
        nodes.kv_reused[c] = kp + (int(nodes.kv_reused[c]) if kp == nodes.edge_len[p] else 0)
        nodes.edge_len[c] += nodes.edge_len[p]
        if self.model.real:
            nodes.kv[c] = [(np.concatenate([K1, K2]), np.concatenate([V1, V2]))
                           for (K1, V1), (K2, V2) in zip(nodes.kv[p], nodes.kv[c])]
        nodes.free(p)

    def _trim(self, v, cut):
        """Pure attention: cut the last ``cut`` tokens of leaf v."""
        nodes = self.nodes
        self.stats["evictions"] += 1
        self.stats["evicted_leaves"] += 1
        nodes.edge_len[v] -= cut
        nodes.end[v] -= cut
        nodes.kv_reused[v] = min(int(nodes.kv_reused[v]), int(nodes.edge_len[v]))
        self.n_tokens -= cut
        self.bytes_held -= cut * self.kv_bytes_per_token
        if self.model.real:
            nodes.kv[v] = [(K[:-cut], V[:-cut]) for K, V in nodes.kv[v]]

    # checks ------------------------------------------------------------------------------------------------
    def check_invariants(self):
        """Raise AssertionError if the accounting or the tree structure is inconsistent (used by the tests)."""
        nodes = self.nodes
        tok, b = self.recount()
        assert tok == self.n_tokens, (tok, self.n_tokens)
        assert abs(b - self.bytes_held) < 1e-3, (b, self.bytes_held)
        assert self.bytes_held <= self.capacity + 1e-6, (self.bytes_held, self.capacity)
        for i in np.flatnonzero(nodes.alive[: nodes.size]):
            ch = nodes.children[i]
            assert len(ch) == nodes.n_children[i]
            for key, c in ch.items():
                assert nodes.parent[c] == i and nodes.alive[c]
                assert nodes.end[c] - nodes.edge_len[c] == nodes.end[i]
                assert int(nodes.edge(c)[0]) == key
                assert np.array_equal(nodes.tokens[c][: nodes.end[i]], nodes.prefix(i)) if i else True


# ---------------------------------------------------------------------------------------------------- the decisions
def marconi_admission(n_input: int, n_tokens: int, m: int, inside_edge: bool, node_children: int,
                      node_has_state: bool) -> list:
    """Marconi's admission (§4.1) for one request: the positions where the cache saves SSM states while serving it.

    The walk of the request's input (``n_input`` tokens) down the tree matched ``m`` tokens and stopped either midway
    along an edge (``inside_edge``: inserting the request splits the edge there) or exactly at the end of a node
    (the root when m = 0) with ``node_children`` children, holding a state or not (``node_has_state``); inside an
    edge there is no node at m yet (0, False). The request's sequence, input + output, has ``n_tokens`` tokens.

    Speculative insertion: if the walk stops at 0 < m <= n_input where the tree goes on without a state (inside an
    edge, or at a state-less node that has children), inserting the request creates a new branch node there: a
    prefix several requests share. Checkpoint it (pure-input sharing). m = n_input counts too: the same prompt again
    with another answer (n samples per prompt, a regeneration) branches where the input ends. Then the state at the
    last decoded token, n_tokens (input + output sharing). Returns the ascending list of positions; the cache skips
    those where it already holds a state.

    Refused (ValueError): counts that are not integers, n_tokens < max(n_input, 1) (the sequence holds its input),
    m > n_input (the walk matches input tokens only), flags that are not bools, and a walk no tree can give: inside
    an edge (inside_edge) at m = 0 (the root is a node) or with a node's children or state.
    """
    n_input, m = checks.nonneg_int("n_input", n_input), checks.nonneg_int("m", m)
    n_tokens = checks.pos_int("n_tokens", n_tokens, max(n_input, 1))
    node_children = checks.nonneg_int("node_children", node_children)
    for name, flag in (("inside_edge", inside_edge), ("node_has_state", node_has_state)):
        if not isinstance(flag, (bool, np.bool_)):
            raise ValueError(f"{name} must be a bool, got {flag!r}")
    if m > n_input:
        raise ValueError(f"m (tokens matched) must be <= n_input={n_input}, got {m}")
    if inside_edge and (m == 0 or node_children or node_has_state):
        raise ValueError(f"inside_edge=True needs m >= 1, node_children=0 and node_has_state=False (there is no node "
                         f"inside an edge), got m={m}, node_children={node_children}, node_has_state={node_has_state}")
    branch = 0 < m <= n_input and m < n_tokens and (inside_edge or (node_children >= 1 and not node_has_state))
    return ([m] if branch else []) + [n_tokens]


class TreeView:
    """What an eviction function (``RadixCache(evict_fn=...)``, :func:`marconi_evict`) sees of the tree.

    Columns over the nodes it may evict (the live nodes, root excluded, minus the path of the request being served,
    which is locked), ids ascending (arrays (n,), fresh copies, read again after every :meth:`evict`): ``ids``,
    ``last_access`` (clock of the last request that used the node), ``end`` (prefix length at the node), ``edge_len``
    (tokens on the edge from its parent: the KV it holds), ``has_state``, ``n_children``. ``now``: the eviction's
    time, later than every ``last_access`` (the current request's clock + 1). ``kv_bytes_per_token``,
    ``state_bytes``: the model's sizes; ``flops(L)``: prefill FLOPs of prefixes of L tokens.
    ``evict(node_id)`` drops a node with at most one child and returns the bytes freed: a leaf frees its KV and its
    state, a node with one child frees only its state (its KV merges into the child); a parent left without a state
    and without children (or with one child) goes with it.
    """

    def __init__(self, cache: RadixCache):
        self._cache = cache
        self.kv_bytes_per_token = cache.kv_bytes_per_token
        self.state_bytes = cache.state_bytes
        self.now = float(cache.clock + 1)
        self._ids = None

    def __len__(self) -> int:
        return len(self.ids)

    def _col(self, name):
        return getattr(self._cache.nodes, name)[self.ids]

    @property
    def ids(self) -> np.ndarray:
        if self._ids is None:
            ids = self._cache.nodes.live()
            self._ids = ids[~self._cache.nodes.locked[ids]]
        return self._ids.copy()

    @property
    def last_access(self) -> np.ndarray:
        return self._col("last_access")

    @property
    def end(self) -> np.ndarray:
        return self._col("end")

    @property
    def edge_len(self) -> np.ndarray:
        return self._col("edge_len")

    @property
    def has_state(self) -> np.ndarray:
        return self._col("has_state")

    @property
    def n_children(self) -> np.ndarray:
        return self._col("n_children")

    def flops(self, lengths) -> np.ndarray:
        """Prefill FLOPs of prefixes of these lengths (ints >= 0), the shape of ``lengths``."""
        L = np.asarray(lengths)
        if L.dtype.kind not in "iu" or (L.size and L.min() < 0):
            raise ValueError(f"lengths must be integers >= 0, got {lengths!r}")
        return self._cache._prefill_flops(L) if L.size else np.zeros(L.shape)

    def evict(self, node) -> float:
        """Drop ``node`` (an id from ``ids`` with at most one child); returns the bytes freed."""
        c = self._cache
        nodes = c.nodes
        try:
            v = nodes.check_id(node)
        except ValueError as e:
            raise ValueError(f"tree.evict({node!r}): {e}") from None
        nc = int(nodes.n_children[v])
        if nc > 1:
            raise ValueError(f"tree.evict({v}): node {v} has {nc} children; a branch point (a prefix several "
                             f"requests share) is never evicted")
        if nodes.locked[v]:
            raise ValueError(f"tree.evict({v}): node {v} is on the path of the request being served (locked)")
        entry = {"node": v, "nchild": nc, "t": float(nodes.last_access[v]), "end": int(nodes.end[v]),
                 "edge_len": int(nodes.edge_len[v]), "clock": c.clock}
        before = c.bytes_held
        c._evict(v)
        self._ids = None
        if c.eviction_log is not None:
            c.eviction_log.append({**entry, "freed": before - c.bytes_held})
        return before - c.bytes_held


def marconi_evict(tree: TreeView, bytes_to_free: float, alpha: float) -> None:
    """Marconi's eviction (§4.2), the paper's score: drop nodes until at least ``bytes_to_free`` bytes are freed (or
    the tree is empty).

    Each round takes the candidates of the tree as it is now (nodes with at most one child) and scores them,
    S = normalize(1 / (now − last_access)) + α · normalize(FLOP efficiency), both normalized over the candidates
    (:func:`hybrid_lab.serving.eviction.eviction_scores`), with FLOPs saved relative to the parent
    (F(end) − F(end − edge_len)) over the bytes of the node's whole prefix (end tokens of KV + its state, if any). The
    candidate with the lowest score goes. Ties (within 1e-12 · max(1, |lowest|)) go to the deeper node (larger
    ``end``), then to the lower id. Scores are recomputed after every eviction: the tree has changed (a parent may
    have become a candidate, a child has absorbed its parent's KV, the normalization's range moved).
    """
    freed = 0.0
    while freed < bytes_to_free and len(tree):
        cand = np.flatnonzero(tree.n_children <= 1)
        end, edge = tree.end[cand], tree.edge_len[cand]
        saved = tree.flops(end) - tree.flops(end - edge)
        nbytes = end * float(tree.kv_bytes_per_token) + tree.has_state[cand] * float(tree.state_bytes)
        sc = eviction_scores(tree.last_access[cand], saved, nbytes, alpha, now=tree.now)
        best = sc.min()
        ties = cand[sc <= best + 1e-12 * max(1.0, abs(best))]
        freed += tree.evict(tree.ids[ties[np.argmax(tree.end[ties])]])


# ---------------------------------------------------------------------------------------------------- vLLM+ blocks
_HASH_WEIGHTS = np.random.default_rng(12345).integers(1, 2 ** 63, size=4096, dtype=np.uint64) | np.uint64(1)


def check_block(block) -> int:
    """vLLM+'s block size in tokens: an integer in [1, 4096]."""
    return int_in("block", block, 1, len(_HASH_WEIGHTS) + 1)


class BlockCache(PrefixCache):
    """vLLM+: fixed blocks of ``block`` tokens chained by (parent block, content hash); every block holds its KV and
    the SSM state at its end. LRU over blocks, touched on every use; a tail block is evicted before its parent.

    The 64-bit content hash is not checked against the tokens (as in vLLM); with the real model every hit is still
    verified against recomputation, so a collision could never go unnoticed there.
    """

    policy = "vllm+"

    def __init__(self, capacity: float, model: ByteModel | None = None, block: int = 32):
        self.block = check_block(block)
        super().__init__(capacity, model)
        self.chain: dict = {}          # (parent block id, content hash) -> block id
        self.alpha = 0.0

    def clone(self) -> "BlockCache":
        """An independent copy (token arrays and payloads are shared: they are never written in place)."""
        c = self._copy()
        c.chain = dict(self.chain)
        return c

    def _hashes(self, tokens, nb):
        """Content hash of each of the first ``nb`` blocks: (nb,) uint64."""
        blk = tokens[: nb * self.block].reshape(nb, self.block).astype(np.uint64)
        return blk @ _HASH_WEIGHTS[: self.block]            # wraps mod 2^64

    def _walk(self, hashes):
        """Block ids of the longest cached chain of these block hashes."""
        node, path, chain = ROOT, [], self.chain
        for x in hashes.tolist():
            c = chain.get((node, x))
            if c is None:
                break
            path.append(c)
            node = c
        return path

    def match(self, tokens) -> int:
        """Tokens a request with this input would reuse now (no side effects). tokens: (L,) token ids."""
        tokens = token_ids("tokens", tokens)
        nb = len(tokens) // self.block
        return len(self._walk(self._hashes(tokens, nb))) * self.block if nb else 0

    def serve(self, req: Request) -> int:
        """Serve one request: reuse the longest chain of cached blocks (whole blocks of the input), evict LRU blocks
        to make room, admit every new full block with its state (as many as fit, from the first). Returns the input
        tokens reused."""
        self._check_request(req)
        self.clock += 1
        now = float(self.clock)
        nodes, B = self.nodes, self.block
        tokens, n_in = req.tokens, req.n_input
        nb = len(tokens) // B
        h = self._hashes(tokens, nb) if nb else np.zeros(0, np.uint64)
        path = self._walk(h)
        hb = min(len(path), n_in // B)                   # blocks of the input reused
        hit = hb * B
        if path:
            pa = np.asarray(path)
            nodes.last_access[pa] = now                  # LRU touch of every block this request uses
            used = pa[:hb]
            newly = int((nodes.kv_reused[used] == 0).sum())
            nodes.kv_reused[used] = B
            self.stats["kv_tokens_reused"] += newly * B
            if hb and not nodes.state_reused[path[hb - 1]]:
                nodes.state_reused[path[hb - 1]] = True
                self.stats["states_reused"] += 1
        nb = len(path) + self._make_room(nb - len(path), path)    # evict before admitting; the path is in use
        final = snaps = None
        if self.model.real and nb > len(path):
            final, snaps = self._run_model(tokens, hit, path[:hb], [(i + 1) * B for i in range(len(path), nb)])
        elif self.model.real and hit > 0 and self.model.verify:
            self.model.check_hit(self._restore(path[:hb], hit), tokens, hit, self.policy)
        added = self._admit(tokens, path, h, nb, now, final, snaps)
        self._record(req, n_in, hit, None, added)
        return hit

    def _make_room(self, k, path) -> int:
        """Evict LRU blocks (not those of ``path``) until ``k`` new blocks fit; returns how many fit (<= k)."""
        bb = float(self.block * self.kv_bytes_per_token + self.state_bytes)
        if k == 0 or bb == 0 or self.bytes_held + k * bb <= self.capacity + 1e-6:
            return k
        nodes = self.nodes
        nodes.locked[path] = True
        try:
            self._evict_until(self.capacity - k * bb)
        finally:
            nodes.locked[path] = False
        return min(k, int(np.floor((self.capacity - self.bytes_held) / bb + 1e-9)))

    def _admit(self, tokens, path, h, nb, now, final, snaps):
        """Admit the blocks after ``path``, each with the state at its end (vectorized: a block is one row, its
        chain key one dict entry). Returns the positions of the states admitted."""
        nodes, B = self.nodes, self.block
        node = path[-1] if path else ROOT
        i0 = len(path)
        k = nb - i0
        added = [(i + 1) * B for i in range(i0, nb)]
        if k:
            ids = nodes.new_many(k)
            par = np.concatenate([[node], ids[:-1]])
            nodes.parent[ids] = par
            nodes.end[ids] = np.arange(i0 + 1, nb + 1) * B
            nodes.edge_len[ids] = B
            nodes.last_access[ids] = now
            nodes.has_state[ids] = True
            nodes.block_hash[ids] = h[i0:nb]
            nodes.n_children[ids[:-1]] = 1
            nodes.n_children[node] += 1
            self.chain.update(zip(zip(par.tolist(), h[i0:nb].tolist()), ids.tolist()))
            seq = nodes.tokens
            for i in ids.tolist():
                seq[i] = tokens
            if self.model.real:
                for j, i in enumerate(ids.tolist()):
                    nodes.kv[i] = self.model.kv_slice(final, (i0 + j) * B, (i0 + j + 1) * B)
                    nodes.state[i] = [x.copy() for x in snaps[(i0 + j + 1) * B]]
        k = len(added)
        self.n_tokens += k * B
        self.bytes_held += k * (B * self.kv_bytes_per_token + self.state_bytes)
        self.stats["kv_tokens_inserted"] += k * B
        self.stats["states_inserted"] += k
        return added

    def _evict_until(self, limit):
        over = self.bytes_held - limit
        if over <= 1e-6:
            return
        nodes = self.nodes
        bb = float(self.block * self.kv_bytes_per_token + self.state_bytes)
        idx = nodes.live()
        idx = idx[~nodes.locked[idx]]
        # Children are never older than their parent (a use touches the whole path), so this global order
        # (oldest first, deeper first on ties) only ever reaches a block after all its descendants: it is exactly
        # the order of repeatedly evicting the least recently used leaf.
        order = idx[np.lexsort((-nodes.end[idx], nodes.last_access[idx]))]
        nv = min(len(order), int(np.ceil(over / bb - 1e-9)) if bb > 0 else len(order))
        victims = order[:nv]
        par = nodes.parent[victims]
        chain = self.chain
        for key in zip(par.tolist(), nodes.block_hash[victims].tolist()):
            del chain[key]
        np.subtract.at(nodes.n_children, par, 1)
        if nodes.n_children[victims].any():        # every victim's children were victims before it
            raise AssertionError("vllm+ evicted a block that still has children")
        if self.eviction_log is not None:
            self.eviction_log.extend(dict(node=int(v), nchild=0, t=float(nodes.last_access[v]), clock=self.clock)
                                     for v in victims)
        nodes.free_many(victims)
        self.stats["evictions"] += nv
        self.stats["evicted_leaves"] += nv
        self.n_tokens -= nv * self.block
        self.bytes_held -= nv * bb
        if bb == 0:
            self.bytes_held = 0.0

    def check_invariants(self):
        """Raise AssertionError if the accounting or the block chain is inconsistent (used by the tests)."""
        nodes = self.nodes
        tok, b = self.recount()
        assert tok == self.n_tokens, (tok, self.n_tokens)
        assert abs(b - self.bytes_held) < 1e-3, (b, self.bytes_held)
        assert self.bytes_held <= self.capacity + 1e-6
        for (p, _), c in self.chain.items():
            assert nodes.alive[c] and nodes.parent[c] == p
            assert np.array_equal(nodes.tokens[c][: nodes.end[p]], nodes.prefix(p)) if p else True
        assert len(self.chain) == self.n_nodes


# ---------------------------------------------------------------------------------------------------- one interface
def make_cache(policy: str, capacity: float, model: ByteModel | None = None, alpha: float = 0.0, block: int = 32,
               score_fn=None, score: str = "paper") -> PrefixCache:
    """A cache for ``policy`` in ("vllm+", "sglang+", "marconi"). capacity: bytes >= 0; ``alpha`` >= 0, ``score``
    ("paper" / "lecture") and ``score_fn`` are used by "marconi" only, ``block`` (tokens) by "vllm+" only."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    nonneg_number("alpha", alpha)
    check_block(block)
    if score not in SCORES:
        raise ValueError(f"score must be one of {SCORES}, got {score!r}")
    if policy == "vllm+":
        return BlockCache(capacity, model, block=block)
    if policy == "sglang+":
        return RadixCache(capacity, model, policy="sglang+")
    return RadixCache(capacity, model, alpha=alpha, score_fn=score_fn, policy="marconi", score=score)


# ---------------------------------------------------------------------------------------------------- results
@dataclass
class SimResult:
    """Per-request hits plus the cache's counters. ``token_hit_rate`` = reused input tokens / input tokens.
    ``alpha``: the α the eviction applied (with α tuned online: the tuned α if any request was served with it,
    else the α of the bootstrap phase, 0).

    n_input, hit: (R,) tokens per request; flops_total, flops_saved: (R,) prefill FLOPs of the input and of the hit.
    """

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
    def from_run(cls, cache: PrefixCache, trace, hits, alpha_scores=None, alpha=None) -> "SimResult":
        """The result of serving ``trace`` with ``cache``: hits[i] tokens reused by trace[i]. ``alpha``: the α
        to report (default: the cache's), the one that was applied."""
        if not isinstance(cache, PrefixCache):
            raise ValueError(f"cache must be a RadixCache or BlockCache, got {type(cache).__name__}")
        n_in = np.array([r.n_input for r in trace], np.int64)
        hits = np.asarray(hits)
        if hits.shape != n_in.shape or hits.dtype.kind not in "iu" or (hits < 0).any() or (hits > n_in).any():
            raise ValueError(f"hits must be ({len(n_in)},) integers in [0, n_input], got shape {hits.shape}")
        fl = cache.model.flops
        alpha = float(getattr(cache, "alpha", 0.0)) if alpha is None else float(alpha)
        return cls(cache.policy, cache.capacity, alpha, n_in, hits,
                   fl(n_in), fl(hits), dict(cache.stats), alpha_scores or {})

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
        """Token hit rate per input-length bucket: [(lo, hi, n_requests, hit_rate), ...]. edges: increasing
        lengths > 0 between the buckets."""
        e = finite_array("edges", edges, ndim=1, shape_doc="(k,) of lengths")
        if (e <= 0).any() or (np.diff(e) <= 0).any():
            raise ValueError(f"edges must be increasing lengths > 0, got {list(edges)}")
        e = [0, *edges, np.inf]
        out = []
        for lo, hi in zip(e[:-1], e[1:]):
            m = (self.n_input >= lo) & (self.n_input < hi)
            out.append((lo, hi, int(m.sum()), float(self.hit[m].sum() / max(1, self.n_input[m].sum()))))
        return out
