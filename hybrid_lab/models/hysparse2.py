"""HySparse2: two-level KV sharing (KV bridging + KV reuse) and the exact prefill early exit it enables.

HySparse2 (arXiv:2609.26368) §3.2-3.5 and §4.1. Layout (paper: 12 SWA, FA, 12 SWA | 4 x (FA + 5 SA) = 49 layers)::

    tokens -> Self-decoder: [SWA x n_before] -> FA -> [SWA x n_after] -> boundary state
                             \\__ input hidden of the self FA (the bridge source) __
                                                                                   \\ bridge.g: K_g, V_g = Proj_g(H_src)
    boundary -> Cross-decoder: group g = FA_g (queries from its own hidden, KV = the bridged K_g, V_g)
                                         -> SA x (group_size - 1) (own queries, REUSE K_g, V_g and FA_g's selection)
             -> logits

- KV bridging: each cross FA owns K/V projections (weights ``bridge.{g}.wk/wv``) applied to the INPUT hidden state
  of the self FA (not its output), so its cache is ready as soon as the Self-decoder has run.
- KV reuse: the SA layers of a group read the group's KV at the group FA's selection: forced window (the last
  ``window`` positions) ∪ top-``topk`` positions outside the window by the FA's attention probability (summed over
  a KV group's query heads), ONE softmax over the union (``sparse_attention``), read by index, no copy. The
  selection and the FA decode op live in ``hybrid_lab.ops.fa_decode`` (``forced_window_select``, ``fa_decode_topk``).
- SWA and SA layers have sigmoid output gates and per-head sink logits; Self SWA uses partial RoPE; FA and SA NoPE.
  MLP in place of MoE; no MTP head (it reads the boundary state and changes no dependency).

Three kinds of cache (explicit objects, plain numpy arrays): the self FA KV (:class:`KVCache`, grows), one rolling
window per self SWA layer (:class:`WindowKVCache`), one bridged KV per cross group (:class:`KVCache`, grows).
There is no cross-decoder local cache: that is what makes the early exit exact.

API for prefill/decode disaggregation (a P worker needs only ``embed``, ``self.*`` and ``bridge.*`` weights)::

    model = HySparse2(cfg)                       # or HySparse2(cfg, weights=subset)
    cache = model.prefill_self(tokens)           # P: Self-decoder + bridging; cache.boundary = last boundary state
    logits = model.first_token(cache)            # D: Cross-decoder at the last prompt position only -> (vocab,)
    logits, cache = model.decode_step(tok, cache)  # D: Self (1 position) + append to the cross KVs + Cross
    logits, cache = model.prefill(tokens, early_exit=False)   # reference: Cross on every position
    bundle = cache.to_arrays(); cache = HySparse2Cache.from_arrays(bundle)   # flat arrays for a transport

Ablations (paper §17; defaults = the paper model, outputs unchanged): ``select="block"`` (HySparse v1's rule at the
same budget: the top ``topk // select_block`` blocks of ``select_block`` positions by the FA's mass outside the
window), ``window=0`` (no forced window: top-k over everything visible), ``cross_swa_window > 0`` (a gated SWA branch
with its own KV in every SA layer), ``bridging=False`` (every cross FA projects its own K/V from its own input: no
early exit, no P/D split). ``forward(tokens)`` is the full-sequence reference; ``n_params(cfg)`` counts weights.

``HYSPARSE2_80B`` and the cache/FLOP accounting of the paper configuration live in ``hybrid_lab.costs.hysparse_ledger``.
"""
from __future__ import annotations

import copy as _copy
from dataclasses import dataclass, field

import numpy as np

from hybrid_lab.core import checks
from hybrid_lab.core.blocks import (apply_rope, attn_weights, init_weight, masked_attention, mlp_weights, rms_norm,
                                    sigmoid, silu)
from hybrid_lab.models.hysparse import block_scores, blocks_to_tokens
from hybrid_lab.ops.fa_decode import fa_attention, fa_decode_topk, forced_window_select, with_forced_window
from hybrid_lab.ops.sparse_attention import sparse_attention, topk_indices

__all__ = [
    "BRIDGE_SOURCES", "SELECTIONS", "HySparse2Config", "KVCache", "WindowKVCache", "HySparse2Cache", "HySparse2",
    "replay_tail", "self_decoder_weight_names", "captured_mass", "replay_errors", "n_params",
]

BRIDGE_SOURCES = ("self_fa_input", "boundary")
SELECTIONS = ("token", "block")


# ---------------------------------------------------------------------------------------------------- config
@dataclass(frozen=True)
class HySparse2Config:
    """HySparse2 at toy width. Defaults = the paper's 49-layer layout; widths, window and k are toy sized.

    Self-decoder: ``self_swa_before`` SWA, 1 FA, ``self_swa_after`` SWA. Cross-decoder: ``cross_layers`` layers in
    groups of ``group_size`` (1 FA + group_size - 1 SA). ``window`` = forced local positions of the SA selection,
    ``topk`` = global positions outside it (paper 128 / 1,024); ``swa_window`` = the self SWA window (paper 128).
    ``bridge_sources``: per cross group, ``"self_fa_input"`` (paper) or ``"boundary"`` (the Self/Cross boundary
    state, the other source the paper's Figure 2 also draws). ``cross_swa_window > 0`` adds a v1-style sliding-window
    branch with its OWN KV to every cross SA layer: a counterexample that breaks the exact early exit.

    Ablations of the paper's §17 (the defaults are the paper model): ``select="block"`` picks the SA positions as
    HySparse v1 does, by blocks of ``select_block`` positions (the FA's mass outside the window summed per block, top
    ``topk // select_block`` blocks, so the same budget; ``topk`` must be a multiple of ``select_block``);
    ``window=0`` drops the forced window (top-``topk`` of every visible position); ``bridging=False`` gives every
    cross FA its own K/V projections of its own input hidden state (``cross.{g}.fa.attn.wk/wv``, no ``bridge.*``):
    the cross KV then exists only where the Cross-decoder ran, so there is no early exit.
    """
    vocab: int = 64
    d_model: int = 32
    n_heads_q: int = 4
    n_heads_kv: int = 1
    d_qk: int = 8
    d_v: int = 8
    d_ff: int = 64
    self_swa_before: int = 12
    self_swa_after: int = 12
    cross_layers: int = 24
    group_size: int = 6
    window: int = 4
    topk: int = 8
    swa_window: int = 4
    rope_dims: int = 4
    rope_base: float = 10000.0
    bridge_sources: tuple | None = None
    gates: bool = True
    sinks: bool = True
    cross_swa_window: int = 0
    select: str = "token"
    select_block: int = 8
    bridging: bool = True
    seed: int = 0
    dtype: str = "float64"

    def __post_init__(self):
        for name in ("vocab", "d_model", "d_qk", "d_v", "d_ff", "cross_layers", "group_size", "topk", "swa_window",
                     "select_block"):
            checks.pos_int(name, getattr(self, name))
        for name in ("self_swa_before", "self_swa_after", "cross_swa_window", "window", "rope_dims", "seed"):
            checks.nonneg_int(name, getattr(self, name))
        checks.positive_number("rope_base", self.rope_base)
        checks.heads(self.n_heads_q, self.n_heads_kv)
        if self.cross_layers % self.group_size:
            raise ValueError(f"group_size={self.group_size} must divide cross_layers={self.cross_layers} "
                             f"(each group is 1 FA + {self.group_size - 1} SA)")
        if self.rope_dims < 0 or self.rope_dims % 2 or self.rope_dims > self.d_qk:
            raise ValueError(f"rope_dims must be even and in [0, d_qk={self.d_qk}], got {self.rope_dims}")
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"dtype must be 'float32' or 'float64', got {self.dtype!r}")
        if not isinstance(self.select, str) or self.select not in SELECTIONS:
            raise ValueError(f"select must be one of {SELECTIONS}, got {self.select!r}")
        if self.select == "block" and self.topk % self.select_block:
            raise ValueError(f"select='block' keeps the token budget: topk={self.topk} must be a multiple of "
                             f"select_block={self.select_block}")
        if not isinstance(self.bridging, (bool, np.bool_)):
            raise ValueError(f"bridging must be True or False, got {self.bridging!r}")
        if self.bridge_sources is not None and not self.bridging:
            raise ValueError("bridge_sources needs bridging=True (without bridging each cross FA projects its K/V "
                             "from its own input)")
        if self.bridge_sources is not None:
            src = tuple(self.bridge_sources)
            if len(src) != self.n_groups:
                raise ValueError(f"bridge_sources needs one entry per cross group ({self.n_groups}), got {len(src)}")
            bad = [s for s in src if s not in BRIDGE_SOURCES]
            if bad:
                raise ValueError(f"unknown bridge source {bad[0]!r}: expected one of {BRIDGE_SOURCES}")
            object.__setattr__(self, "bridge_sources", src)

    @property
    def n_groups(self) -> int:
        return self.cross_layers // self.group_size

    @property
    def n_self(self) -> int:
        return self.self_swa_before + 1 + self.self_swa_after

    @property
    def sources(self) -> tuple:
        return self.bridge_sources or ("self_fa_input",) * self.n_groups

    @property
    def layers(self) -> tuple:
        """(name, kind) for every layer in order: ('self.0', 'swa') ... ('cross.0.fa', 'fa'), ('cross.0.sa.0', 'sa')."""
        out = [(f"self.{i}", "fa" if i == self.self_swa_before else "swa") for i in range(self.n_self)]
        for g in range(self.n_groups):
            out.append((f"cross.{g}.fa", "fa"))
            out += [(f"cross.{g}.sa.{j}", "sa") for j in range(self.group_size - 1)]
        return tuple(out)

    def counts(self) -> dict:
        """Layer counts by kind: {'swa', 'fa', 'sa', 'total'} (paper: 24 / 5 / 20 / 49)."""
        kinds = [k for _, k in self.layers]
        return {"swa": kinds.count("swa"), "fa": kinds.count("fa"), "sa": kinds.count("sa"), "total": len(kinds)}


# ------------------------------------------------------------------------------------------------------ caches
def _check_kv(k, v):
    """A cache's keys (S, Hkv, d_qk) and values (S, Hkv, d_v): finite float arrays with the same S and Hkv."""
    k = checks.finite_array("k", k, 3, "(S, Hkv, d_qk)")
    v = checks.finite_array("v", v, 3, "(S, Hkv, d_v)")
    if v.shape[:2] != k.shape[:2]:
        raise ValueError(f"v must have shape (S={k.shape[0]}, Hkv={k.shape[1]}, d_v), got {v.shape}")
    return k, v


@dataclass
class KVCache:
    """A growing global KV (the self FA's, or one cross group's bridged KV). k: (S, Hkv, d_qk), v: (S, Hkv, d_v)."""
    k: np.ndarray
    v: np.ndarray

    def __post_init__(self):
        self.k, self.v = _check_kv(self.k, self.v)

    @classmethod
    def empty(cls, n_kv: int, d_qk: int, d_v: int, dtype) -> "KVCache":
        return cls(np.zeros((0, n_kv, d_qk), dtype), np.zeros((0, n_kv, d_v), dtype))

    def __len__(self) -> int:
        return self.k.shape[0]

    def append(self, k: np.ndarray, v: np.ndarray) -> None:
        """Append T new entries. k: (T, Hkv, d_qk); v: (T, Hkv, d_v)."""
        self.k = np.concatenate([self.k, k])
        self.v = np.concatenate([self.v, v])

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes


@dataclass
class WindowKVCache:
    """One self SWA layer's rolling window: the last ``window`` entries and their absolute positions."""
    k: np.ndarray
    v: np.ndarray
    pos: np.ndarray
    window: int

    def __post_init__(self):
        self.k, self.v = _check_kv(self.k, self.v)
        self.window = checks.pos_int("window", self.window)
        self.pos = checks.int_array("pos", self.pos, 1, "(n,)", lo=0)
        if len(self.pos) != len(self.k) or len(self.k) > self.window:
            raise ValueError(f"pos must give one position per cached entry ({len(self.k)}) and a window holds at most "
                             f"window={self.window} entries, got pos of length {len(self.pos)}")

    @classmethod
    def empty(cls, window: int, n_kv: int, d_qk: int, d_v: int, dtype) -> "WindowKVCache":
        return cls(np.zeros((0, n_kv, d_qk), dtype), np.zeros((0, n_kv, d_v), dtype), np.zeros(0, np.int64), window)

    def __len__(self) -> int:
        return self.k.shape[0]

    def append(self, k, v, pos) -> None:
        """Append entries, then drop all but the last ``window`` (older ones can never be read again)."""
        self.k = np.concatenate([self.k, k])[-self.window:]
        self.v = np.concatenate([self.v, v])[-self.window:]
        self.pos = np.concatenate([self.pos, np.asarray(pos, np.int64)])[-self.window:]

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes


@dataclass
class HySparse2Cache:
    """Everything a request needs to continue: the three kinds of KV, the length, the last boundary state.

    pos: number of positions processed; self_fa: KVCache; self_swa: [WindowKVCache] per self SWA layer in order;
    cross: [KVCache] per cross group; boundary: (d_model,) the Self/Cross boundary state at position pos - 1
    (the Cross-decoder's input for the first generated token), None before any token.
    """
    pos: int
    self_fa: KVCache
    self_swa: list
    cross: list
    boundary: np.ndarray | None = None
    meta: dict = field(default_factory=dict)

    def copy(self) -> "HySparse2Cache":
        return _copy.deepcopy(self)

    def to_arrays(self) -> dict:
        """Flat {name: numpy array} of everything (the hand-off bundle of a P worker): 'pos', 'boundary',
        'self_fa.k/v', 'self_swa.{i}.k/v/pos' + 'self_swa.window', 'cross.{g}.k/v'."""
        out = {"pos": np.array(self.pos, np.int64), "self_fa.k": self.self_fa.k, "self_fa.v": self.self_fa.v,
               "self_swa.window": np.array([w.window for w in self.self_swa], np.int64)}
        if self.boundary is not None:
            out["boundary"] = self.boundary
        for i, w in enumerate(self.self_swa):
            out[f"self_swa.{i}.k"], out[f"self_swa.{i}.v"], out[f"self_swa.{i}.pos"] = w.k, w.v, w.pos
        for g, c in enumerate(self.cross):
            out[f"cross.{g}.k"], out[f"cross.{g}.v"] = c.k, c.v
        return out

    @classmethod
    def from_arrays(cls, arrays: dict) -> "HySparse2Cache":
        """Inverse of :meth:`to_arrays` (arrays are copied)."""
        a = {k: np.array(v, copy=True) for k, v in arrays.items()}
        try:
            windows = a["self_swa.window"]
            n_groups = sum(1 for k in a if k.startswith("cross.") and k.endswith(".k"))
            return cls(pos=int(a["pos"]), self_fa=KVCache(a["self_fa.k"], a["self_fa.v"]),
                       self_swa=[WindowKVCache(a[f"self_swa.{i}.k"], a[f"self_swa.{i}.v"], a[f"self_swa.{i}.pos"],
                                               int(windows[i])) for i in range(len(windows))],
                       cross=[KVCache(a[f"cross.{g}.k"], a[f"cross.{g}.v"]) for g in range(n_groups)],
                       boundary=a.get("boundary"))
        except KeyError as e:
            raise ValueError(f"arrays lack the entry {e.args[0]!r} (expected the output of to_arrays)") from None

    def summary(self) -> list:
        """The three kinds of cache as rows: (kind, copies, entries per copy, bytes in all, grows with length?)."""
        return [("self FA KV", 1, len(self.self_fa), self.self_fa.nbytes, "yes"),
                ("self SWA windows", len(self.self_swa), max((len(w) for w in self.self_swa), default=0),
                 sum(w.nbytes for w in self.self_swa), "no (rolling)"),
                ("cross KV (bridged)", len(self.cross), len(self.cross[0]) if self.cross else 0,
                 sum(c.nbytes for c in self.cross), "yes")]

    def nbytes(self) -> dict:
        """Bytes by cache kind: {'self_fa', 'self_swa', 'cross', 'total'}."""
        out = {"self_fa": self.self_fa.nbytes, "self_swa": sum(c.nbytes for c in self.self_swa),
               "cross": sum(c.nbytes for c in self.cross)}
        out["total"] = sum(out.values())
        return out


# ------------------------------------------------------------------------------------------- analysis helpers
def captured_mass(score: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Share of the FA's score mass on an index set. score: (..., S) (e.g. probabilities), every row with some
    mass; idx: (..., K) -1 padded, no position twice in a row (it would be counted twice).
    Returns (...) = Σ_{s∈idx} score_s / Σ_s score_s."""
    score = checks.finite_array("score", score).astype(np.float64)
    if score.ndim < 1 or (score < 0).any():
        raise ValueError(f"score must be an array (..., S) of non-negative scores, got shape {score.shape}, "
                         f"min {score.min() if score.size else None}")
    idx = checks.index_sets("idx", idx, score.shape[-1])
    if score.shape[:-1] != idx.shape[:-1]:
        raise ValueError(f"score (..., S) and idx (..., K) must share leading axes, got {score.shape} and {idx.shape}")
    total = score.sum(-1)
    if (total == 0).any():
        row = tuple(int(i) for i in np.argwhere(total == 0)[0])
        raise ValueError(f"score must have some mass in every row (the share of nothing is undefined), got an "
                         f"all-zero row at {row}")
    picked = np.where(idx >= 0, np.take_along_axis(score, np.maximum(idx, 0), axis=-1), 0.0).sum(-1)
    return picked / total


def replay_tail(depth: int, width: int) -> int:
    """Positions to recompute so the last one is exact when ``depth`` stacked layers each read the same layer's
    previous ``width - 1`` positions (a window of ``width``, or a short convolution of width ``width``).

    Each such layer shrinks the exactly-known range by width - 1: tail = depth * (width - 1) + 1.
    (33 layers x width 4 -> 100: a stack of width-4 short convolutions; HySparse2's cross decoder has depth 0 -> 1.)
    """
    checks.nonneg_int("depth", depth)
    checks.pos_int("width", width)
    return depth * (width - 1) + 1


def n_params(cfg: HySparse2Config) -> int:
    """Total number of weight elements of the model ``cfg`` describes (every array of ``init_weights(cfg)``),
    counted from the shapes without drawing the weights (a budget search calls it many times)."""
    if not isinstance(cfg, HySparse2Config):
        raise ValueError(f"cfg must be a HySparse2Config, got {type(cfg).__name__}")
    D, Hq, Hkv, dk, dv = cfg.d_model, cfg.n_heads_q, cfg.n_heads_kv, cfg.d_qk, cfg.d_v

    def attn(kv, gate, sink):                      # as core.blocks.attn_weights
        return D * Hq * dk + Hq * dv * D + kv * D * Hkv * (dk + dv) + gate * D * Hq * dv + sink * Hq

    mlp = 2 * D * cfg.d_ff
    swa = attn(True, cfg.gates, cfg.sinks) + mlp
    group = (cfg.bridging * D * Hkv * (dk + dv) + attn(not cfg.bridging, False, False) + mlp
             + (cfg.group_size - 1) * (attn(False, cfg.gates, cfg.sinks) + mlp
                                       + (cfg.cross_swa_window > 0) * attn(True, True, False)))
    return int(2 * cfg.vocab * D + (cfg.n_self - 1) * swa + attn(True, False, False) + mlp + cfg.n_groups * group)


def self_decoder_weight_names(cfg: HySparse2Config) -> list:
    """Weight names a P worker needs: embedding, Self-decoder, bridging projections (no cross queries, no MLPs)."""
    if not isinstance(cfg, HySparse2Config):
        raise ValueError(f"cfg must be a HySparse2Config, got {type(cfg).__name__}")
    w = HySparse2.init_weights(cfg)
    return sorted(n for n in w if n == "embed" or n.startswith("self.") or n.startswith("bridge."))


# ------------------------------------------------------------------------------------------------------- model
class HySparse2:
    """The HySparse2 model at toy width (numpy, single sequence).

    ``weights``: dict of named arrays (see :meth:`init_weights`); a P worker may hold only
    :func:`self_decoder_weight_names`. ``trace`` counts, for the last call, the rows each layer computed
    (``'self.i'``, ``'bridge.g'`` (KV projection only), ``'cross.g.fa'``, ``'cross.g.sa.j'``).
    """

    def __init__(self, cfg: HySparse2Config, weights: dict | None = None):
        self.cfg = cfg
        self.weights = self.init_weights(cfg) if weights is None else dict(weights)
        self.trace: dict = {}

    @staticmethod
    def init_weights(cfg: HySparse2Config) -> dict:
        rng = np.random.default_rng(cfg.seed)
        D, Hq, Hkv, dk, dv, dt = cfg.d_model, cfg.n_heads_q, cfg.n_heads_kv, cfg.d_qk, cfg.d_v, cfg.dtype
        w = {"embed": rng.standard_normal((cfg.vocab, D)).astype(dt), "lm_head": init_weight(rng, (D, cfg.vocab), D, dt)}
        for i in range(cfg.n_self):
            p = f"self.{i}."
            swa = i != cfg.self_swa_before
            w.update(attn_weights(rng, p + "attn.", D, Hq, Hkv, dk, dv, dt, gate=swa and cfg.gates,
                                   sink=swa and cfg.sinks))
            w.update(mlp_weights(rng, p + "mlp.", D, cfg.d_ff, dt))
        for g in range(cfg.n_groups):
            if cfg.bridging:
                w[f"bridge.{g}.wk"] = init_weight(rng, (D, Hkv * dk), D, dt)  # the cross FA's own K/V projections
                w[f"bridge.{g}.wv"] = init_weight(rng, (D, Hkv * dv), D, dt)
            # without bridging the cross FA projects its K/V from its own input, like any FA layer
            w.update(attn_weights(rng, f"cross.{g}.fa.attn.", D, Hq, Hkv, dk, dv, dt, kv=not cfg.bridging))
            w.update(mlp_weights(rng, f"cross.{g}.fa.mlp.", D, cfg.d_ff, dt))
            for j in range(cfg.group_size - 1):
                p = f"cross.{g}.sa.{j}."
                w.update(attn_weights(rng, p + "attn.", D, Hq, Hkv, dk, dv, dt, kv=False, gate=cfg.gates,
                                       sink=cfg.sinks))
                if cfg.cross_swa_window:
                    w.update(attn_weights(rng, p + "swa.", D, Hq, Hkv, dk, dv, dt, gate=True))
                w.update(mlp_weights(rng, p + "mlp.", D, cfg.d_ff, dt))
        return w

    def _w(self, name):
        try:
            return self.weights[name]
        except KeyError:
            raise ValueError(f"weight {name!r} is not held by this model (a P worker holds only "
                             f"self_decoder_weight_names(cfg))") from None

    def new_cache(self) -> HySparse2Cache:
        cfg, dt = self.cfg, self.cfg.dtype
        Hkv, dk, dv = cfg.n_heads_kv, cfg.d_qk, cfg.d_v
        return HySparse2Cache(
            pos=0, self_fa=KVCache.empty(Hkv, dk, dv, dt),
            self_swa=[WindowKVCache.empty(cfg.swa_window, Hkv, dk, dv, dt) for _ in range(cfg.n_self - 1)],
            cross=[KVCache.empty(Hkv, dk, dv, dt) for _ in range(cfg.n_groups)])

    # ---------------------------------------------------------------------------------------------- blocks
    def _mlp(self, p, h):
        return h + silu(rms_norm(h) @ self._w(p + "mlp.w1")) @ self._w(p + "mlp.w2")

    def _gate(self, p, x, o):
        if not self.cfg.gates or p + "attn.wg" not in self.weights:
            return o
        return o * sigmoid(x @ self.weights[p + "attn.wg"]).reshape(o.shape)

    def _count(self, name, n):
        self.trace[name] = self.trace.get(name, 0) + int(n)

    # ------------------------------------------------------------------- per-layer building blocks (public)
    # The per-layer math of the model, for code that orchestrates the layers and caches itself (notebook 06's
    # decode step). They read weights only: no cache is read or written here.
    def _layer(self, layer) -> str:
        if not isinstance(layer, str) or layer not in dict(self.cfg.layers):
            raise ValueError(f"layer must be a layer name of cfg.layers ('self.0', 'cross.0.fa', 'cross.0.sa.0', "
                             f"...), got {layer!r}")
        return layer

    def layer_input(self, layer: str, h, pos=None):
        """The attention inputs of one layer for T rows: x = RMSNorm(h) and its projections.

        layer: a name of ``cfg.layers``; h: (T, d_model) the layer's input hidden state; pos: (T,) absolute
        positions, needed by the self SWA layers (partial RoPE on q and k; the FA layers are NoPE).
        Returns (x (T, d_model), q (T, Hq, d_qk), k (T, Hkv, d_qk), v (T, Hkv, d_v)); k and v are None for a
        cross layer (it has no K/V projection of its own: it reads its group's bridged KV), except a cross FA
        with ``bridging=False`` (it projects its group's KV from these rows).
        """
        cfg, layer = self.cfg, self._layer(layer)
        h = checks.finite_array("h", h, 2, "(T, d_model)")
        T, p = h.shape[0], layer + "."
        x = rms_norm(h)
        q = (x @ self._w(p + "attn.wq")).reshape(T, cfg.n_heads_q, cfg.d_qk)
        if layer.startswith("cross.") and (cfg.bridging or not layer.endswith(".fa")):
            return x, q, None, None
        k = (x @ self._w(p + "attn.wk")).reshape(T, cfg.n_heads_kv, cfg.d_qk)
        v = (x @ self._w(p + "attn.wv")).reshape(T, cfg.n_heads_kv, cfg.d_v)
        if layer.startswith("self.") and layer != f"self.{cfg.self_swa_before}":   # a self SWA: partial RoPE
            if pos is None:
                raise ValueError(f"pos: the self SWA layer {layer!r} rotates q and k by RoPE, pass the (T,) "
                                 f"absolute positions")
            pos = checks.int_array("pos", np.atleast_1d(pos), 1, f"(T={T},)", lo=0)
            if pos.shape != (T,):
                raise ValueError(f"pos must have shape (T={T},), got {pos.shape}")
            q = apply_rope(q, pos, cfg.rope_dims, cfg.rope_base)
            k = apply_rope(k, pos, cfg.rope_dims, cfg.rope_base)
        return x, q, k, v

    def layer_output(self, layer: str, h, x, o):
        """The rest of one layer after its attention: sigmoid output gate (SWA and SA layers), output
        projection, residual, then the MLP with its residual. h, x: (T, d_model) (x from :meth:`layer_input`);
        o: (T, Hq, d_v) the attention output. Returns the layer's output hidden state (T, d_model)."""
        layer, p = self._layer(layer), layer + "."
        o = self._gate(p, x, o)
        h = h + o.reshape(h.shape[0], -1) @ self._w(p + "attn.wo")
        return self._mlp(p, h)

    def sink(self, layer: str):
        """The per-head sink logits (Hq,) of a SWA / SA layer, None for FA layers (and with ``cfg.sinks`` off)."""
        layer = self._layer(layer)
        return self.weights.get(layer + ".attn.sink") if self.cfg.sinks else None

    def bridge_kv(self, g: int, src):
        """KV bridging: cross group g's own K/V projections of its source hidden state src (T, d_model) (the
        self FA's input, or the boundary state; RMSNorm applied here). Returns (k (T, Hkv, d_qk), v (T, Hkv, d_v))."""
        cfg = self.cfg
        if not cfg.bridging:
            raise ValueError("bridge_kv: this model has bridging=False (each cross FA projects its K/V from its own "
                             "input, in layer_input), there are no bridge projections")
        g = checks.int_in("g", g, 0, cfg.n_groups)
        src = checks.finite_array("src", src, 2, "(T, d_model)")
        xs = rms_norm(src)
        return ((xs @ self._w(f"bridge.{g}.wk")).reshape(len(src), cfg.n_heads_kv, cfg.d_qk),
                (xs @ self._w(f"bridge.{g}.wv")).reshape(len(src), cfg.n_heads_kv, cfg.d_v))

    def select(self, score, q_pos) -> np.ndarray:
        """The SA layers' index set from their group FA's scores, under this config's rule (``cfg.select``).

        score: (T, Hkv, S) the FA's attention probability summed over each KV group's query heads (finite, >= 0);
        q_pos: (T,) absolute positions in [0, S). Returns idx (T, Hkv, window + topk) int64, -1 padded: the forced
        window q_pos - window + 1 .. q_pos, then ``"token"``: the top-k positions s <= q_pos - window by score
        (``forced_window_select``); ``"block"``: the positions s <= q_pos - window of the top ``topk //
        select_block`` blocks of ``select_block`` positions by the score summed per block over those positions
        (HySparse v1's rule, ``block_scores``; ties -> the smaller block id).
        """
        cfg = self.cfg
        if cfg.select == "token":
            return forced_window_select(score, q_pos, cfg.window, cfg.topk)
        score = checks.finite_array("score", score, 3, "(T, Hkv, S)")
        T, Hkv, S = score.shape
        if Hkv == 0:
            raise ValueError(f"score must have at least one KV group (axis 1 of (T, Hkv, S)), got shape {score.shape}")
        if (score < 0).any():
            raise ValueError(f"score must be >= 0 (attention probabilities), got min {score.min():.6g}")
        q_pos = checks.query_positions(q_pos, T, S)
        bs, last = cfg.select_block, q_pos - cfg.window                    # last: the last position outside the window
        outside = np.arange(S)[None, :] <= last[:, None]                    # (T, S)
        # v1's block mass, over the positions outside the forced window (the window is read anyway); the KV-group
        # axis plays v1's head axis with one head per group (the score is already summed over the group)
        mass = block_scores(np.where(outside[:, None, :], score, 0.0), bs, Hkv)            # (T, Hkv, nb)
        has_outside = np.arange(mass.shape[-1])[None, :] * bs <= last[:, None]             # (T, nb)
        blocks = topk_indices(np.where(has_outside[:, None, :], mass, -np.inf), cfg.topk // bs)
        # a block's positions up to q_pos - window (the rest of it lies in the window); no block when last < 0
        top = blocks_to_tokens(blocks, bs, np.maximum(last, 0))                            # (T, Hkv, topk)
        return with_forced_window(top, q_pos, cfg.window)

    def logits(self, h):
        """The LM head: RMSNorm then the output projection. h: (T, d_model) -> (T, vocab)."""
        return rms_norm(h) @ self._w("lm_head")

    def _run_self(self, tokens, cache: HySparse2Cache):
        """Self-decoder on new positions (continuing ``cache`` in place) + bridging. Returns boundary rows (T, D)."""
        cfg = self.cfg
        T = len(tokens)
        Hkv, dk = cfg.n_heads_kv, cfg.d_qk
        scale = dk ** -0.5
        q_pos = cache.pos + np.arange(T)
        h = self._w("embed")[tokens]
        fa_input = None
        swa_i = 0
        for i in range(cfg.n_self):
            name = f"self.{i}"
            x, q, k, v = self.layer_input(name, h, q_pos)                # SWA: partial RoPE applied; FA: NoPE
            sink = self.sink(name)
            if i == cfg.self_swa_before:                                 # the self FA (NoPE), bridge source
                fa_input = h
                cache.self_fa.append(k, v)
                kpos = np.arange(len(cache.self_fa))
                mask = kpos[None, :] <= q_pos[:, None]
                o, _ = masked_attention(q, cache.self_fa.k, cache.self_fa.v, mask, scale)
            else:                                                        # SWA with partial RoPE over its window
                win = cache.self_swa[swa_i]
                kk, vv = np.concatenate([win.k, k]), np.concatenate([win.v, v])   # contiguous positions from k0
                k0 = cache.pos - len(win)
                band = q_pos[:, None] - cfg.swa_window + 1 + np.arange(cfg.swa_window)[None, :]   # (T, w)
                band = np.where(band >= k0, band - k0, -1)                        # rows of kk, -1 = none
                band = np.broadcast_to(band[:, None, :], (T, Hkv, cfg.swa_window))
                o = sparse_attention(q[None], kk[None], vv[None], band[None], scale=scale, sink=sink)[0]
                win.append(k, v, q_pos)
                swa_i += 1
            h = self.layer_output(name, h, x, o)
            self._count(name, T)
        for g, src in enumerate(cfg.sources if cfg.bridging else ()):  # KV bridging: projections only
            cache.cross[g].append(*self.bridge_kv(g, fa_input if src == "self_fa_input" else h))
            self._count(f"bridge.{g}", T)
        cache.pos += T
        cache.boundary = h[-1].copy()
        return h

    def _run_cross(self, h, q_pos, cache: HySparse2Cache, details=None):
        """Cross-decoder on rows h: (T, D) at absolute positions q_pos (contiguous). Returns logits (T, vocab).

        Reads only the bridged caches (and, in the cross_swa counterexample, the rows given: bounded replay).
        """
        cfg = self.cfg
        T = h.shape[0]
        Hq, Hkv, dk, dv = cfg.n_heads_q, cfg.n_heads_kv, cfg.d_qk, cfg.d_v
        scale = dk ** -0.5
        for g in range(cfg.n_groups):
            p = f"cross.{g}.fa."
            x, q, k, v = self.layer_input(p[:-1], h)
            if not cfg.bridging:                                          # no bridging: the FA's own KV, these rows
                if len(cache.cross[g]) != q_pos[0]:
                    raise ValueError(f"bridging=False: cross cache {g} holds {len(cache.cross[g])} positions but the "
                                     f"rows start at position {q_pos[0]}; the Cross-decoder must run on every position "
                                     f"(its FA projects the group's K/V from them)")
                cache.cross[g].append(k, v)
            K, V = cache.cross[g].k, cache.cross[g].v
            if len(cache.cross[g]) <= q_pos[-1]:
                raise ValueError(f"cross cache {g} holds {len(cache.cross[g])} positions, query at {q_pos[-1]}")
            # decode / early exit: the swappable op (token selection with a forced window only: its contract)
            if T == 1 and q_pos[0] == len(K) - 1 and details is None and cfg.select == "token" and cfg.window:
                o, top = fa_decode_topk(q, K[None], V[None], cfg.topk, cfg.window, scale)
                idx = with_forced_window(top, q_pos, cfg.window)
            else:
                o, score = fa_attention(q, K, V, q_pos, scale)
                idx = self.select(score, q_pos)
                if details is not None:
                    details.setdefault("scores", []).append(score)
            if details is not None:
                details.setdefault("idx", []).append(idx)
            h = self.layer_output(p[:-1], h, x, o)
            self._count(f"cross.{g}.fa", T)
            for j in range(cfg.group_size - 1):
                p = f"cross.{g}.sa.{j}."
                x, q, _, _ = self.layer_input(p[:-1], h)
                o = sparse_attention(q[None], K[None], V[None], idx[None], scale=scale, sink=self.sink(p[:-1]))[0]
                if cfg.cross_swa_window:                                  # v1-style branch: OWN KV from these rows
                    o = self._gate(p, x, o)
                    kl = (x @ self._w(p + "swa.wk")).reshape(T, Hkv, dk)
                    vl = (x @ self._w(p + "swa.wv")).reshape(T, Hkv, dv)
                    ql = (x @ self._w(p + "swa.wq")).reshape(T, Hq, dk)
                    mask = (q_pos[None, :] <= q_pos[:, None]) & (q_pos[None, :] > q_pos[:, None] - cfg.cross_swa_window)
                    ol, _ = masked_attention(ql, kl, vl, mask, scale)
                    o = o + ol * sigmoid(x @ self._w(p + "swa.wg")).reshape(ol.shape)
                    h = h + o.reshape(T, Hq * dv) @ self._w(p + "attn.wo")
                    h = self._mlp(p, h)
                else:
                    h = self.layer_output(p[:-1], h, x, o)
                self._count(p[:-1], T)
        return self.logits(h)

    # ------------------------------------------------------------------------------------------- public API
    def prefill_self(self, tokens, cache: HySparse2Cache | None = None) -> HySparse2Cache:
        """What a P worker runs: Self-decoder on every prompt position + the bridged KV of every cross group.

        tokens: (T,) int, continuing ``cache`` if given (a copy is returned; the input is not modified).
        Returns the cache with ``pos`` advanced by T and ``boundary`` = the boundary state at the last position.
        """
        self._no_bridging_refuses("prefill_self")
        self.trace = {}
        tokens = checks.tokens("tokens", tokens, self.cfg.vocab)
        cache = self.new_cache() if cache is None else cache.copy()
        self._run_self(tokens, cache)
        return cache

    def _no_bridging_refuses(self, what: str) -> None:
        if not self.cfg.bridging:
            raise ValueError(f"{what}: this model has bridging=False, so each cross FA projects its K/V from its own "
                             f"input hidden state, which exists only where the Cross-decoder ran: the cross KV of the "
                             f"prompt needs the Cross-decoder on every prompt position, there is no early exit (use "
                             f"prefill(tokens, early_exit=False))")

    def first_token(self, cache: HySparse2Cache) -> np.ndarray:
        """What a D worker runs first: the Cross-decoder at the last processed position only. Returns (vocab,)."""
        self._no_bridging_refuses("first_token")
        if cache.boundary is None or cache.pos == 0:
            raise ValueError("cache has no boundary state: run prefill_self on a non-empty prompt first")
        self.trace = {}
        return self._run_cross(cache.boundary[None], np.array([cache.pos - 1]), cache)[0]

    def prefill(self, tokens, cache: HySparse2Cache | None = None, early_exit: bool = True,
                cross_tail: int | None = None, details: dict | None = None):
        """Prefill a prompt. Returns (logits, cache).

        early_exit=True: Self on every position, Cross only at the last one -> logits (1, vocab).
        early_exit=False: Cross on every position (the reference) -> logits (T, vocab).
        cross_tail=R overrides both: Cross on the last R positions (bounded replay) -> logits (R, vocab).
        With ``bridging=False`` only the Cross-decoder on every position works (early_exit=False, cross_tail=T).
        ``details`` (a dict) collects per cross group the FA scores ``scores`` (R, Hkv, S) and selections ``idx``.
        """
        cfg = self.cfg
        tokens = checks.tokens("tokens", tokens, cfg.vocab)
        T = len(tokens)
        early_exit_asked = cross_tail is None and early_exit
        if cross_tail is None:
            cross_tail = 1 if early_exit else T
        checks.pos_int("cross_tail", cross_tail)
        if cross_tail > T:
            raise ValueError(f"cross_tail must be <= the number of new tokens {T}, got {cross_tail}")
        if early_exit_asked or cross_tail < T:
            self._no_bridging_refuses(f"prefill(early_exit={early_exit}, cross_tail={cross_tail})")
        if cfg.cross_swa_window and cache is not None:
            raise ValueError("cross_swa_window > 0 (the v1-style counterexample) supports prefill from an empty "
                             "cache only: its cross windows are not cached")
        self.trace = {}
        cache = self.new_cache() if cache is None else cache.copy()
        h = self._run_self(tokens, cache)
        q_pos = cache.pos - cross_tail + np.arange(cross_tail)
        logits = self._run_cross(h[-cross_tail:], q_pos, cache, details)
        return logits, cache

    def decode_step(self, token: int, cache: HySparse2Cache):
        """One decode step: Self on the new position, one new entry in every cache, Cross. Returns (logits (vocab,),
        new cache); the input cache is not modified."""
        if self.cfg.cross_swa_window:
            raise ValueError("decode is not supported with cross_swa_window > 0 (no cross window cache)")
        token = checks.int_in("token", token, 0, self.cfg.vocab)
        self.trace = {}
        cache = cache.copy()
        h = self._run_self(checks.tokens("tokens", np.array([token]), self.cfg.vocab), cache)
        return self._run_cross(h, np.array([cache.pos - 1]), cache)[0], cache

    def forward(self, tokens) -> np.ndarray:
        """The full-sequence reference: Cross on every position. tokens: (T,) int. Returns logits (T, vocab)."""
        return self.prefill(tokens, early_exit=False)[0]

    def generate(self, prompt, n_new: int, early_exit: bool = True):
        """Greedy generation: prefill then ``n_new - 1`` decode steps. Returns (tokens (n_new,), cache)."""
        checks.pos_int("n_new", n_new)
        checks.output_size("n_new", (n_new,))
        logits, cache = self.prefill(checks.tokens("prompt", prompt, self.cfg.vocab), early_exit=early_exit)
        out = [int(np.argmax(logits[-1]))]
        for _ in range(n_new - 1):
            lg, cache = self.decode_step(out[-1], cache)
            out.append(int(np.argmax(lg)))
        return np.array(out), cache


# ---------------------------------------------------------------------------------------- replay experiment
def replay_errors(model: HySparse2, tokens, tails=None) -> dict:
    """Last-position error of prefill with the Cross-decoder run on only the last R positions, for each R.

    Returns {'tails': (n,), 'errors': (n,) max |logits_R - logits_full|, 'min_exact': smallest R with error
    <= 1e-10 (None if none)}. With the paper model (no cross SWA) R = 1 is already exact; with a v1-style cross
    SWA branch (``cross_swa_window = c``) exactness needs R >= replay_tail(#cross SA layers, c).
    """
    tokens = checks.tokens("tokens", tokens, model.cfg.vocab)
    full, _ = model.prefill(tokens, early_exit=False)
    if tails is None:
        tails = np.arange(1, len(tokens) + 1)
    else:
        tails = checks.int_array("tails", tails, 1, "(n,)", lo=1, hi=len(tokens) + 1)
        if tails.size == 0:
            raise ValueError("tails must list at least one replay length R")
    errs = np.array([np.abs(model.prefill(tokens, cross_tail=int(r))[0][-1] - full[-1]).max() for r in tails])
    exact = tails[errs <= 1e-10]
    return {"tails": tails, "errors": errs, "min_exact": int(exact.min()) if exact.size else None}
