"""A mini hybrid model (attention + selective SSM + MLP layers) with a KV cache, SSM states and snapshots.

It is small enough to print (d_model = 32, N = 16) and real enough to show the serving problem of hybrid models:
attention KV can be cut at any prefix, an SSM state only exists where it was saved (all-or-nothing reuse).

Each layer is pre-norm residual: ``x += mixer(norm(x))`` then ``x += mlp(norm(x))``; the mixer is causal multi-head
attention (no positional encoding: the SSM layers carry order) or a Mamba-1 selective SSM (``hybrid_lab.ops.ssm``).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np

from hybrid_lab.core import checks
from hybrid_lab.core.blocks import masked_attention, rms_norm, silu
from hybrid_lab.ops.ssm import init_ssm, selective_scan_step, ssm_chunked, ssm_inputs


@dataclass(frozen=True)
class HybridConfig:
    vocab: int = 64
    d_model: int = 32
    d_state: int = 16
    n_heads: int = 2
    layers: tuple = ("attn", "ssm", "ssm", "ssm")
    mlp: bool = True
    chunk_size: int = 16        # SSM prefill chunk: states at chunk ends are free snapshots
    seed: int = 0
    dtype: str = "float32"

    def __post_init__(self):
        for name in ("vocab", "d_model", "d_state", "n_heads", "chunk_size"):
            checks.pos_int(name, getattr(self, name))
        checks.nonneg_int("seed", self.seed)
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if not isinstance(self.layers, (tuple, list)) or not self.layers \
                or any(k not in ("attn", "ssm") for k in self.layers):
            raise ValueError(f"layers must be a non-empty sequence of 'attn'/'ssm', got {self.layers!r}")
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"dtype must be 'float32' or 'float64', got {self.dtype!r}")

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def n_attn(self) -> int:
        return sum(k == "attn" for k in self.layers)

    @property
    def n_ssm(self) -> int:
        return sum(k == "ssm" for k in self.layers)


@dataclass
class HybridCache:
    """What a sequence leaves behind after ``pos`` tokens.

    kv:  per attention layer, (K, V), each (pos, n_heads, d_head): grows with pos, can be cut to any prefix.
    ssm: per SSM layer, h: (d_model, d_state): fixed size, overwritten in place, valid only at exactly ``pos``.
    """

    pos: int
    kv: list = field(default_factory=list)
    ssm: list = field(default_factory=list)

    def __post_init__(self):
        checks.nonneg_int("pos", self.pos)
        if not isinstance(self.kv, list) or not isinstance(self.ssm, list):
            raise ValueError(f"kv and ssm must be lists, got {type(self.kv).__name__} and {type(self.ssm).__name__}")

    def copy(self) -> "HybridCache":
        return copy.deepcopy(self)

    def kv_bytes(self) -> int:
        return int(sum(k.nbytes + v.nbytes for k, v in self.kv))

    def ssm_bytes(self) -> int:
        return int(sum(h.nbytes for h in self.ssm))

    @classmethod
    def from_parts(cls, kv, ssm, pos: int) -> "HybridCache":
        """Restore a prefix of length ``pos``: KV (any longer KV is cut to pos) + SSM states saved exactly at pos.

        kv: [(K, V)] per attention layer, each (>= pos, n_heads, d_head); ssm: [h (d_model, d_state)] per SSM layer.
        """
        pos = checks.nonneg_int("pos", pos)
        for i, kv_i in enumerate(kv):
            if len(kv_i) != 2:
                raise ValueError(f"kv[{i}] must be a (K, V) pair, got {len(kv_i)} arrays")
            k = checks.finite_array(f"kv[{i}][0] (K)", kv_i[0], 3, "(positions, n_heads, d_head)")
            v = checks.finite_array(f"kv[{i}][1] (V)", kv_i[1], 3, "(positions, n_heads, d_head)")
            if k.shape[0] < pos or v.shape[0] < pos:
                raise ValueError(f"kv[{i}] holds {min(k.shape[0], v.shape[0])} positions, fewer than pos={pos}")
        for i, h in enumerate(ssm):
            checks.finite_array(f"ssm[{i}]", h, 2, "(d_model, d_state)")
        return cls(pos, [(k[:pos].copy(), v[:pos].copy()) for k, v in kv], [np.array(h, copy=True) for h in ssm])


class MiniHybrid:
    """The lab's mini hybrid LM. ``prefill`` (chunked SSM scan) and ``decode_step`` (recurrent) give the same results."""

    def __init__(self, cfg: HybridConfig = HybridConfig()):
        if not isinstance(cfg, HybridConfig):
            raise ValueError(f"cfg must be a HybridConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        rng = np.random.default_rng(cfg.seed)
        dt, D = cfg.dtype, cfg.d_model
        s = D ** -0.5
        self.emb = rng.normal(0, 1.0, (cfg.vocab, D)).astype(dt)
        self.layers = []
        for i, kind in enumerate(cfg.layers):
            p = {"kind": kind, "g1": np.ones(D, dt), "g2": np.ones(D, dt)}
            if kind == "attn":
                for w in ("Wq", "Wk", "Wv", "Wo"):
                    p[w] = rng.normal(0, s, (D, D)).astype(dt)
            else:
                p.update(init_ssm(D, cfg.d_state, seed=cfg.seed * 1000 + i, dtype=dt))
                p["Wo"] = rng.normal(0, s, (D, D)).astype(dt)
            if cfg.mlp:
                p["W1"] = rng.normal(0, s, (D, 4 * D)).astype(dt)
                p["W2"] = rng.normal(0, (4 * D) ** -0.5, (4 * D, D)).astype(dt)
            self.layers.append(p)
        self.g_out = np.ones(D, dt)

    # -------------------------------------------------------------------------------------------- helpers
    def init_cache(self) -> HybridCache:
        c, dt = self.cfg, self.cfg.dtype
        kv = [(np.zeros((0, c.n_heads, c.d_head), dt), np.zeros((0, c.n_heads, c.d_head), dt)) for _ in range(c.n_attn)]
        ssm = [np.zeros((c.d_model, c.d_state), dt) for _ in range(c.n_ssm)]
        return HybridCache(0, kv, ssm)

    def _tokens(self, tokens, name="tokens"):
        # an empty prompt is allowed (prefill of 0 tokens returns the cache unchanged)
        return checks.int_array(name, tokens, 1, "(T,) token ids", lo=0, hi=self.cfg.vocab)

    def _cache(self, cache, name="cache"):
        c = self.cfg
        if not isinstance(cache, HybridCache):
            raise ValueError(f"{name} must be a HybridCache, got {type(cache).__name__}")
        if len(cache.kv) != c.n_attn or len(cache.ssm) != c.n_ssm:
            raise ValueError(f"{name} does not match this model's layer layout: it has {len(cache.kv)} KV and "
                             f"{len(cache.ssm)} SSM entries, the model {c.n_attn} attention and {c.n_ssm} SSM layers")
        checks.nonneg_int(f"{name}.pos", cache.pos)
        for i, (k, v) in enumerate(cache.kv):
            if k.shape != (cache.pos, c.n_heads, c.d_head) or v.shape != k.shape:
                raise ValueError(f"{name}.kv[{i}] must hold (pos={cache.pos}, {c.n_heads}, {c.d_head}) K and V, "
                                 f"got {k.shape} and {v.shape}")
        for i, h in enumerate(cache.ssm):
            if h.shape != (c.d_model, c.d_state):
                raise ValueError(f"{name}.ssm[{i}] must be ({c.d_model}, {c.d_state}), got {h.shape}")
        return cache

    def _attn(self, p, xn, K_old, V_old):
        c = self.cfg
        T = xn.shape[0]
        q = (xn @ p["Wq"]).reshape(T, c.n_heads, c.d_head)
        K = np.concatenate([K_old, (xn @ p["Wk"]).reshape(T, c.n_heads, c.d_head)])
        V = np.concatenate([V_old, (xn @ p["Wv"]).reshape(T, c.n_heads, c.d_head)])
        P0 = K_old.shape[0]
        if T == 0:                                   # an empty prefill reads nothing
            return np.zeros((0, c.d_model), xn.dtype), K, V
        visible = np.arange(K.shape[0])[None, :] <= (P0 + np.arange(T))[:, None]
        o, _ = masked_attention(q, K, V, visible, c.d_head ** -0.5)
        return o.reshape(T, c.d_model) @ p["Wo"], K, V

    def _ssm(self, p, xn, h, cuts):
        """Chunked scan over xn (T, D) from state h; returns output and the states at the relative positions ``cuts``
        (a cut splits the scan there: the "two-pass prefill" that yields a state at an arbitrary position)."""
        dt, B, C = ssm_inputs(p, xn)
        ys, saved, start = [], {}, 0
        for end in sorted(set(cuts) | {xn.shape[0]}):
            if end <= start:
                continue
            y, h = ssm_chunked(xn[None, start:end], dt[None, start:end], p["A"], B[None, start:end],
                               C[None, start:end], p["D"], h[None], chunk_size=self.cfg.chunk_size)
            h = h[0]
            ys.append(y[0])
            saved[end] = h.copy()
            start = end
        y = np.concatenate(ys) if ys else np.zeros_like(xn)
        return y @ p["Wo"], h, saved

    # -------------------------------------------------------------------------------------------- public API
    def prefill(self, tokens, cache: HybridCache | None = None, snapshot_at=()):
        """Process ``tokens`` (continuing ``cache`` if given). tokens: (T,) ints.

        snapshot_at: absolute positions p (cache.pos < p <= cache.pos + T) where the SSM states are saved, or
        ``"chunks"`` for every chunk boundary (free in the chunked scan). Returns (logits (T, vocab), new cache,
        snapshots {p: [state per SSM layer]}). The input cache is not modified.
        """
        t = self._tokens(tokens)
        cache = self.init_cache() if cache is None else self._cache(cache)
        P0, T = cache.pos, t.size
        if isinstance(snapshot_at, str):
            if snapshot_at != "chunks":
                raise ValueError(f"snapshot_at must be positions or 'chunks', got {snapshot_at!r}")
            snapshot_at = list(range(P0 + self.cfg.chunk_size, P0 + T + 1, self.cfg.chunk_size))
        snapshot_at = sorted(set(checks.int_array("snapshot_at", snapshot_at, 1, "(positions,)").tolist()))
        if snapshot_at and (snapshot_at[0] <= P0 or snapshot_at[-1] > P0 + T):
            raise ValueError(f"snapshot_at positions must lie in ({P0}, {P0 + T}], got {snapshot_at}")
        cuts = [p - P0 for p in snapshot_at]
        logits, new, saved = self._forward(t, cache, lambda p, xn, h: self._ssm(p, xn, h, cuts))
        snaps = {q: [s[q - P0] for s in saved] for q in snapshot_at}
        if T == 0:
            new.ssm = [h.copy() for h in cache.ssm]
        return logits, new, snaps

    def decode_step(self, token: int, cache: HybridCache):
        """One token with the recurrent form of every SSM layer. Returns (logits (vocab,), new cache)."""
        def step(p, xn, h):
            dt, B, C = ssm_inputs(p, xn)
            y, h = selective_scan_step(xn, dt, p["A"], B, C, p["D"], h[None])
            return y @ p["Wo"], h[0], None

        token = checks.int_in("token", token, 0, self.cfg.vocab)
        logits, new, _ = self._forward(np.array([token]), self._cache(cache), step)
        return logits[0], new

    def _forward(self, t, cache: HybridCache, ssm_mixer):
        """Embed ``t``, run every layer (attention appends to its KV; an SSM layer runs ``ssm_mixer(p, x, h) ->
        (out, h_new, saved states)``), unembed. Returns (logits (T, vocab), new cache, saved states per SSM layer)."""
        x = self.emb[t]
        new, saved = HybridCache(cache.pos + t.size), []
        ia = is_ = 0
        for p in self.layers:
            xn = rms_norm(x) * p["g1"]
            if p["kind"] == "attn":
                out, K, V = self._attn(p, xn, *cache.kv[ia])
                new.kv.append((K, V))
                ia += 1
            else:
                out, h, snap = ssm_mixer(p, xn, cache.ssm[is_])
                new.ssm.append(h)
                saved.append(snap)
                is_ += 1
            x = x + out
            if self.cfg.mlp:
                x = x + silu(rms_norm(x) * p["g2"] @ p["W1"]) @ p["W2"]
        return rms_norm(x) * self.g_out @ self.emb.T, new, saved

    def generate(self, tokens, n_new: int):
        """Greedy generation: prefill then ``n_new`` decode steps. Returns the new token ids (a list of n_new);
        n_new past ``checks.MAX_ELEMENTS`` (2**40) is refused by name, not run as an endless loop."""
        n_new = checks.nonneg_int("n_new", n_new)
        checks.output_size("n_new (one token per decode step)", (n_new,))
        if self._tokens(tokens).size == 0:
            raise ValueError("tokens must hold at least one token to generate from, got an empty prompt")
        logits, cache, _ = self.prefill(tokens)
        out = []
        for _ in range(n_new):
            nxt = int(np.argmax(logits[-1] if logits.ndim == 2 else logits))
            out.append(nxt)
            logits, cache = self.decode_step(nxt, cache)
        return out


# ------------------------------------------------------------------------------------------------ prefix reuse
def reusable_prefix(shared: int, state_positions) -> int:
    """Longest prefix a hybrid model can reuse: the largest saved SSM-state position <= the shared length.

    Attention KV could serve any prefix <= shared, but every SSM layer needs its state at exactly that position,
    so reuse is all-or-nothing at the saved positions (0 = recompute everything). state_positions: integers >= 0
    (a list, or the keys of a {position: states} dict).
    """
    shared = checks.nonneg_int("shared", shared)
    positions = checks.int_array("state_positions", list(state_positions), 1, lo=0)
    ok = [int(p) for p in positions if 0 < p <= shared]
    return max(ok) if ok else 0


def chunk_boundary(want: int, chunk_size: int) -> int:
    """The chunked scan saves states only at multiples of ``chunk_size``: the best one at or before ``want``."""
    chunk_size = checks.pos_int("chunk_size", chunk_size)
    want = checks.nonneg_int("want", want)
    return (want // chunk_size) * chunk_size


def shared_prefix_len(a, b) -> int:
    """Number of leading tokens two sequences share. a, b: 1-D integer token arrays (either may be empty)."""
    a, b = checks.int_array("a", a, 1, "(T,) token ids"), checks.int_array("b", b, 1, "(T,) token ids")
    n = min(a.size, b.size)
    neq = np.nonzero(a[:n] != b[:n])[0]
    return int(neq[0]) if neq.size else n


def serve_with_reuse(model: MiniHybrid, new_tokens, old_cache: HybridCache, snapshots: dict, shared: int):
    """Serve ``new_tokens`` reusing an old request's KV and SSM snapshots for at most ``shared`` leading tokens.

    Returns (logits for the recomputed part, cache, reused length). ``snapshots``: {pos: [SSM states]} saved by the
    old request (its final state counts as a snapshot at old_cache.pos). ``shared`` may not exceed the old
    request's length nor the new one's.
    """
    if not isinstance(model, MiniHybrid):
        raise ValueError(f"model must be a MiniHybrid, got {type(model).__name__}")
    new_tokens = model._tokens(new_tokens, "new_tokens")
    old_cache = model._cache(old_cache, "old_cache")
    shared = checks.nonneg_int("shared", shared)
    if shared > min(old_cache.pos, new_tokens.size):
        raise ValueError(f"shared={shared} exceeds the old request ({old_cache.pos} tokens) or the new one "
                         f"({new_tokens.size} tokens)")
    if not isinstance(snapshots, dict):
        raise ValueError(f"snapshots must be a dict {{position: [SSM state per layer]}}, "
                         f"got {type(snapshots).__name__}")
    for pos, st in snapshots.items():
        if len(st) != model.cfg.n_ssm:
            raise ValueError(f"snapshots[{pos}] must hold one state per SSM layer ({model.cfg.n_ssm}), got {len(st)}")
    states = dict(snapshots)
    states[old_cache.pos] = old_cache.ssm
    p = reusable_prefix(shared, states)
    if p == 0:
        logits, cache, _ = model.prefill(new_tokens)
        return logits, cache, 0
    restored = HybridCache.from_parts(old_cache.kv, states[p], p)
    logits, cache, _ = model.prefill(new_tokens[p:], cache=restored)
    return logits, cache, p
