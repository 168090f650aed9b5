"""A generic layer-stack LM: any sequence of full attention, sliding-window attention and Mamba-2 layers.

One file, read top to bottom (nanoGPT style). Every layer is pre-norm residual with an MLP::

    h = embed[tokens]                                            embedding, std 1
    for kind in cfg.layers:                                      "attn" | "swa" | "mamba2"
        h = h + mixer(rms_norm(h))
        h = h + silu(rms_norm(h) @ w1) @ w2                      the MLP (as HySparse2's)
    logits = rms_norm(h) @ lm_head

Mixers:

- ``attn``   causal grouped-query attention over the whole prefix, partial RoPE on ``rope_dims_attn`` channels
  (0 = NoPE). Cache: the full KV, grows with the length.
- ``swa``    sliding-window attention (the last ``window`` positions, itself included), partial RoPE on
  ``rope_dims_swa`` channels, a sigmoid output gate ``wg`` and per-head sink logits (as HySparse2's SWA layers).
  Cache: a rolling window of ``window`` KV entries.
- ``mamba2`` the Mamba-2 block (Dao & Gu 2024)::

      z | xBC | dt_raw = x @ in_proj                             (d_inner | d_inner + 2N | H)
      xBC = silu(causal_depthwise_conv1d(xBC))                   width d_conv
      x | B | C = xBC                                            (d_inner | N | N)
      dt = softplus(dt_raw + dt_bias);  A = -exp(A_log)          (H,) one scalar decay per head
      y = SSD(x as (T, H, P), dt, A, B, C, D)                    h_t = exp(dt_t A) h_{t-1} + dt_t x_t ⊗ B_t
      out = (rms_norm(y * silu(z)) * norm_w) @ out_proj          gated RMSNorm, then back to d_model

  Cache: the last d_conv - 1 conv inputs and the SSM state (H, P, N): a constant size whatever the length.

API::

    cfg = StackConfig(layers=("mamba2", "mamba2", "attn") * 2)
    model = Stack(cfg)                                  # or Stack(cfg, weights) (names/shapes checked)
    logits = model.forward(tokens)                      # (T, vocab): every position
    logits, cache = model.prefill(tokens)               # same logits + the cache
    logits, cache = model.decode_step(token, cache)     # (vocab,): one more position
    model.forward(tokens, details=d)                    # d = {} collects d["attn_probs"] (the probes' hook)
    cache.nbytes()                                      # {"kv", "swa", "ssm", "total"}
    n_params(cfg)

The torch twin (same weight names, same logits) is ``hybrid_lab.trained.torch_stack.TorchStack``.
"""
from __future__ import annotations

import copy as _copy
from dataclasses import dataclass

import numpy as np

from hybrid_lab.core import checks
from hybrid_lab.core.blocks import (apply_rope, attn_weights, init_weight, masked_attention, mlp_weights, rms_norm,
                                    sigmoid, silu, softplus)
from hybrid_lab.models.hysparse2 import KVCache, WindowKVCache
from hybrid_lab.ops.ssm import ssd_chunked

__all__ = ["LAYER_KINDS", "StackConfig", "MambaState", "StackCache", "Stack", "weight_shapes", "n_params"]

LAYER_KINDS = ("attn", "swa", "mamba2")


# ---------------------------------------------------------------------------------------------------- config
@dataclass(frozen=True)
class StackConfig:
    """A stack of ``layers`` (kinds from ``LAYER_KINDS``) at toy width.

    Attention (``attn`` and ``swa``): ``n_heads_q`` query heads share ``n_heads_kv`` KV heads, widths ``d_qk`` /
    ``d_v``; ``window`` = the SWA window; RoPE on the first ``rope_dims_attn`` / ``rope_dims_swa`` channels of q and
    k; ``gates`` / ``sinks``: the SWA layers' output gate and sink logits (full attention has neither).
    Mamba-2: ``d_inner`` (None -> d_model, expand 1; resolved here, so ``dataclasses.replace`` of d_model keeps the
    old d_inner), ``d_state`` N, ``head_dim`` P (d_inner // P heads), ``d_conv`` conv width, ``chunk_size`` of the
    SSD scan (any value gives the same result; it sets where the chunked scan hands the state on).
    """
    vocab: int = 64
    d_model: int = 64
    layers: tuple = ("mamba2", "mamba2", "attn", "mamba2", "mamba2", "attn")
    n_heads_q: int = 4
    n_heads_kv: int = 1
    d_qk: int = 16
    d_v: int = 16
    d_ff: int = 128
    window: int = 16
    rope_dims_attn: int = 0
    rope_dims_swa: int = 8
    rope_base: float = 10000.0
    gates: bool = True
    sinks: bool = True
    d_inner: int | None = None
    d_state: int = 16
    head_dim: int = 16
    d_conv: int = 4
    chunk_size: int = 64
    seed: int = 0
    dtype: str = "float64"

    def __post_init__(self):
        if self.d_inner is None:
            object.__setattr__(self, "d_inner", self.d_model)
        for name in ("vocab", "d_model", "d_qk", "d_v", "d_ff", "window", "d_inner", "d_state", "head_dim",
                     "d_conv", "chunk_size"):
            checks.pos_int(name, getattr(self, name))
        checks.nonneg_int("seed", self.seed)
        checks.positive_number("rope_base", self.rope_base)
        checks.heads(self.n_heads_q, self.n_heads_kv)
        for name in ("rope_dims_attn", "rope_dims_swa"):
            r = checks.nonneg_int(name, getattr(self, name))
            if r % 2 or r > self.d_qk:
                raise ValueError(f"{name} must be even and in [0, d_qk={self.d_qk}], got {r}")
        for name in ("gates", "sinks"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.d_inner % self.head_dim:
            raise ValueError(f"d_inner={self.d_inner} must be a multiple of head_dim={self.head_dim} "
                             f"(the Mamba-2 heads split d_inner into d_inner // head_dim heads)")
        if isinstance(self.layers, str) or not isinstance(self.layers, (tuple, list)) or not self.layers:
            raise ValueError(f"layers must be a non-empty sequence of kinds from {LAYER_KINDS}, got {self.layers!r}")
        bad = [k for k in self.layers if k not in LAYER_KINDS]
        if bad:
            raise ValueError(f"layers: unknown kind {bad[0]!r}, expected one of {LAYER_KINDS}")
        object.__setattr__(self, "layers", tuple(self.layers))
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"dtype must be 'float32' or 'float64', got {self.dtype!r}")

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def n_ssm_heads(self) -> int:
        """Mamba-2 heads H = d_inner // head_dim."""
        return self.d_inner // self.head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the Mamba-2 short convolution: x, B and C (d_inner + 2N)."""
        return self.d_inner + 2 * self.d_state

    def counts(self) -> dict:
        """Layer counts by kind: {'attn', 'swa', 'mamba2', 'total'}."""
        out = {k: self.layers.count(k) for k in LAYER_KINDS}
        out["total"] = len(self.layers)
        return out


# ------------------------------------------------------------------------------------------------- weights
def weight_shapes(cfg: StackConfig) -> dict:
    """{name: shape} of every weight the config needs (what :meth:`Stack.init_weights` draws, without drawing)."""
    if not isinstance(cfg, StackConfig):
        raise ValueError(f"cfg must be a StackConfig, got {type(cfg).__name__}")
    D, Hq, Hkv, dk, dv = cfg.d_model, cfg.n_heads_q, cfg.n_heads_kv, cfg.d_qk, cfg.d_v
    H, Di, N = cfg.n_ssm_heads, cfg.d_inner, cfg.d_state
    out = {"embed": (cfg.vocab, D), "lm_head": (D, cfg.vocab)}
    for i, kind in enumerate(cfg.layers):
        p = f"layer.{i}."
        if kind == "mamba2":
            m = p + "mamba."
            out.update({m + "in_proj": (D, 2 * Di + 2 * N + H), m + "conv_w": (cfg.conv_dim, cfg.d_conv),
                        m + "conv_b": (cfg.conv_dim,), m + "dt_bias": (H,), m + "A_log": (H,), m + "D": (H,),
                        m + "norm_w": (Di,), m + "out_proj": (Di, D)})
        else:
            a = p + "attn."
            out.update({a + "wq": (D, Hq * dk), a + "wo": (Hq * dv, D), a + "wk": (D, Hkv * dk),
                        a + "wv": (D, Hkv * dv)})
            if kind == "swa" and cfg.gates:
                out[a + "wg"] = (D, Hq * dv)
            if kind == "swa" and cfg.sinks:
                out[a + "sink"] = (Hq,)
        out.update({p + "mlp.w1": (D, cfg.d_ff), p + "mlp.w2": (cfg.d_ff, D)})
    return out


def n_params(cfg: StackConfig) -> int:
    """Number of parameters: the sum of the weight sizes (embedding and lm_head included, untied)."""
    return int(sum(np.prod(s) for s in weight_shapes(cfg).values()))


def mamba2_weights(rng, prefix: str, cfg: StackConfig) -> dict:
    """One Mamba-2 block's weights, initialised as Mamba-2 does.

    A_log = log U[1, 16] (per-head decay rates 1..16); dt_bias = softplus⁻¹(dt) with dt log-uniform in
    [1e-3, 1e-1] (so the first steps neither forget everything nor nothing); D = 1; norm_w = 1; the depthwise conv
    as PyTorch's Conv1d default, U(±1/sqrt(fan_in)) with fan_in = d_conv (one input channel per group); in_proj and
    out_proj Gaussian with std 1/sqrt(fan_in) as every linear layer of the lab.
    """
    D, Di, N, H, K, dt = cfg.d_model, cfg.d_inner, cfg.d_state, cfg.n_ssm_heads, cfg.d_conv, cfg.dtype
    bound = 1.0 / np.sqrt(K)
    dt0 = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), H))
    return {
        prefix + "in_proj": init_weight(rng, (D, 2 * Di + 2 * N + H), D, dt),
        prefix + "conv_w": rng.uniform(-bound, bound, (cfg.conv_dim, K)).astype(dt),
        prefix + "conv_b": rng.uniform(-bound, bound, cfg.conv_dim).astype(dt),
        prefix + "dt_bias": (dt0 + np.log(-np.expm1(-dt0))).astype(dt),          # inverse softplus
        prefix + "A_log": np.log(rng.uniform(1.0, 16.0, H)).astype(dt),
        prefix + "D": np.ones(H, dt),
        prefix + "norm_w": np.ones(Di, dt),
        prefix + "out_proj": init_weight(rng, (Di, D), Di, dt),
    }


# ------------------------------------------------------------------------------------------------------ caches
@dataclass
class MambaState:
    """One Mamba-2 layer's decode state: conv (d_conv - 1, conv_dim) the last conv inputs (zeros before the
    start), ssm (H, P, N) the SSM state. Its size does not depend on the length."""
    conv: np.ndarray
    ssm: np.ndarray

    @property
    def nbytes(self) -> int:
        return self.conv.nbytes + self.ssm.nbytes


@dataclass
class StackCache:
    """What a sequence leaves behind after ``pos`` positions: one entry per layer of ``cfg.layers``, a
    :class:`KVCache` (attn, grows), a :class:`WindowKVCache` (swa, at most ``window`` entries) or a
    :class:`MambaState` (mamba2, constant)."""
    pos: int
    layers: list

    def copy(self) -> "StackCache":
        return _copy.deepcopy(self)

    def nbytes(self) -> dict:
        """Bytes by kind: {'kv' (full attention), 'swa' (windows), 'ssm' (conv + SSM states), 'total'}."""
        out = {"kv": sum(c.nbytes for c in self.layers if isinstance(c, KVCache)),
               "swa": sum(c.nbytes for c in self.layers if isinstance(c, WindowKVCache)),
               "ssm": sum(c.nbytes for c in self.layers if isinstance(c, MambaState))}
        out["total"] = sum(out.values())
        return out


# ------------------------------------------------------------------------------------------------------- model
def _details(details):
    if details is not None and not isinstance(details, dict):
        raise ValueError(f"details must be None or a dict (it receives 'attn_probs'), got {type(details).__name__}")
    return details


class Stack:
    """The layer-stack LM (numpy, one sequence). ``weights``: dict of named arrays (see :meth:`init_weights`)."""

    def __init__(self, cfg: StackConfig, weights: dict | None = None):
        shapes = weight_shapes(cfg)                          # also checks that cfg is a StackConfig
        self.cfg = cfg
        if weights is None:
            self.weights = self.init_weights(cfg)
            return
        if not isinstance(weights, dict) or set(weights) != set(shapes):
            if not isinstance(weights, dict):
                raise ValueError(f"weights must be a dict name -> array, got {type(weights).__name__}")
            diff = sorted(set(shapes) ^ set(weights))
            raise ValueError(f"weights must hold exactly the arrays of init_weights(cfg); {diff[0]!r} is "
                             f"{'missing' if diff[0] in shapes else 'unexpected'}")
        for n, a in weights.items():
            a = checks.finite_array(f"weights[{n!r}]", checks.array(f"weights[{n!r}]", a, kinds="f"))
            if a.shape != shapes[n]:
                raise ValueError(f"weights[{n!r}] must have shape {shapes[n]}, got {np.shape(a)}")
        self.weights = dict(weights)

    @staticmethod
    def init_weights(cfg: StackConfig) -> dict:
        """Fresh weights from ``cfg.seed``: embedding std 1, linear layers std 1/sqrt(fan_in), Mamba-2 init for
        the mamba2 layers (:func:`mamba2_weights`)."""
        weight_shapes(cfg)
        rng = np.random.default_rng(cfg.seed)
        D, Hq, Hkv, dk, dv, dt = cfg.d_model, cfg.n_heads_q, cfg.n_heads_kv, cfg.d_qk, cfg.d_v, cfg.dtype
        w = {"embed": rng.standard_normal((cfg.vocab, D)).astype(dt),
             "lm_head": init_weight(rng, (D, cfg.vocab), D, dt)}
        for i, kind in enumerate(cfg.layers):
            p = f"layer.{i}."
            if kind == "mamba2":
                w.update(mamba2_weights(rng, p + "mamba.", cfg))
            else:
                swa = kind == "swa"
                w.update(attn_weights(rng, p + "attn.", D, Hq, Hkv, dk, dv, dt, gate=swa and cfg.gates,
                                       sink=swa and cfg.sinks))
            w.update(mlp_weights(rng, p + "mlp.", D, cfg.d_ff, dt))
        return w

    def new_cache(self) -> StackCache:
        """The empty cache: empty KVs and windows, zero conv and SSM states."""
        cfg, dt = self.cfg, self.cfg.dtype
        layers = []
        for kind in cfg.layers:
            if kind == "attn":
                layers.append(KVCache.empty(cfg.n_heads_kv, cfg.d_qk, cfg.d_v, dt))
            elif kind == "swa":
                layers.append(WindowKVCache.empty(cfg.window, cfg.n_heads_kv, cfg.d_qk, cfg.d_v, dt))
            else:
                layers.append(MambaState(np.zeros((cfg.d_conv - 1, cfg.conv_dim), dt),
                                         np.zeros((cfg.n_ssm_heads, cfg.head_dim, cfg.d_state), dt)))
        return StackCache(pos=0, layers=layers)

    # ---------------------------------------------------------------------------------------------- checks
    # The public entry points (run, prefill, decode_step, attention, mamba2) check what they are given; the layer
    # loop calls the unchecked _attention / _mamba2 on activations it computed itself (not scanned in the hot loop).
    def _layer(self, i, kinds) -> int:
        i = checks.int_in("i", i, 0, self.cfg.n_layers)
        if self.cfg.layers[i] not in kinds:
            raise ValueError(f"i must index a {' or '.join(kinds)} layer of cfg.layers {self.cfg.layers}, got {i} "
                             f"({self.cfg.layers[i]!r})")
        return i

    def _rows(self, x) -> np.ndarray:
        x = checks.finite_array("x", checks.array("x", x, 2, "(T, d_model)", kinds="f"))
        if x.shape[0] == 0 or x.shape[1] != self.cfg.d_model:
            raise ValueError(f"x must be (T >= 1, d_model={self.cfg.d_model}), got shape {x.shape}")
        return x

    def _check_layer_cache(self, i: int, c, name: str, pos: int | None = None) -> None:
        """Layer i's cache entry: the type its kind keeps, this config's widths; ``pos``: positions it has seen."""
        cfg, kind = self.cfg, self.cfg.layers[i]
        want = {"attn": KVCache, "swa": WindowKVCache, "mamba2": MambaState}[kind]
        if not isinstance(c, want):
            raise ValueError(f"{name} must be the {want.__name__} of a {kind!r} layer, got {type(c).__name__}")
        if kind == "mamba2":
            shapes = {"conv": (cfg.d_conv - 1, cfg.conv_dim), "ssm": (cfg.n_ssm_heads, cfg.head_dim, cfg.d_state)}
            for f, shape in shapes.items():
                a = checks.finite_array(f"{name}.{f}", checks.array(f"{name}.{f}", getattr(c, f), kinds="f"))
                if a.shape != shape:
                    raise ValueError(f"{name}.{f} must have shape {shape} (this model's Mamba-2 layer), got {a.shape}")
            return
        if c.k.shape[1:] != (cfg.n_heads_kv, cfg.d_qk) or c.v.shape[1:] != (cfg.n_heads_kv, cfg.d_v):
            raise ValueError(f"{name} must hold k (S, {cfg.n_heads_kv}, {cfg.d_qk}) and v (S, {cfg.n_heads_kv}, "
                             f"{cfg.d_v}) (this model's KV heads), got k {c.k.shape} and v {c.v.shape}")
        if kind == "swa" and c.window != cfg.window:
            raise ValueError(f"{name} must be a window of cfg.window={cfg.window} entries, got window {c.window}")
        if pos is not None:
            n = pos if kind == "attn" else min(pos, cfg.window)
            if len(c) != n or (kind == "swa" and n and c.pos[-1] != pos - 1):
                raise ValueError(f"{name} must hold the last {n} of the {pos} positions seen (cache.pos), got "
                                 f"{len(c)} entries")

    def _check_cache(self, cache, name: str = "cache") -> None:
        """A StackCache of this model: one entry per layer, of its kind and widths, all at cache.pos positions."""
        if not isinstance(cache, StackCache):
            raise ValueError(f"{name} must be a StackCache (Stack.new_cache / prefill), got {type(cache).__name__}")
        pos = checks.nonneg_int(f"{name}.pos", cache.pos)
        if not isinstance(cache.layers, list) or len(cache.layers) != self.cfg.n_layers:
            got = f"{len(cache.layers)} entries" if isinstance(cache.layers, list) else type(cache.layers).__name__
            raise ValueError(f"{name}.layers must be a list of one entry per layer ({self.cfg.n_layers}), got {got}")
        for i, c in enumerate(cache.layers):
            self._check_layer_cache(i, c, f"{name}.layers[{i}]", pos)

    # ---------------------------------------------------------------------------------------------- mixers
    def attention(self, i: int, x, pos, cache):
        """Layer i's attention (``attn`` or ``swa``) on T new rows, continuing ``cache`` in place.

        x: (T, d_model) the normed input (finite floats); pos: (T,) their absolute positions, consecutive, following
        the cache's (full attention: len(cache) + arange(T)); cache: the layer's KVCache (attn) or WindowKVCache (swa).
        Returns (T, d_model).
        """
        i = self._layer(i, ("attn", "swa"))
        x = self._rows(x)
        self._check_layer_cache(i, cache, "cache")
        pos = checks.int_array("pos", pos, 1, "(T,)", lo=0)
        T = len(x)
        if len(pos) != T:
            raise ValueError(f"pos must give one position per row of x (T={T}), got shape {pos.shape}")
        if self.cfg.layers[i] == "attn":
            start = len(cache)
        else:
            start = int(cache.pos[-1]) + 1 if len(cache) else int(pos[0])
        if (pos != start + np.arange(T)).any():
            raise ValueError(f"pos must be the consecutive positions {start}..{start + T - 1} that follow the cache, "
                             f"got {pos.tolist()}")
        return self._attention(i, x, pos, cache)

    def _attention(self, i: int, x, pos, cache, probs: list | None = None):
        cfg, w, p = self.cfg, self.weights, f"layer.{i}.attn."
        T, swa = len(x), cfg.layers[i] == "swa"
        q = (x @ w[p + "wq"]).reshape(T, cfg.n_heads_q, cfg.d_qk)
        k = (x @ w[p + "wk"]).reshape(T, cfg.n_heads_kv, cfg.d_qk)
        v = (x @ w[p + "wv"]).reshape(T, cfg.n_heads_kv, cfg.d_v)
        rot = cfg.rope_dims_swa if swa else cfg.rope_dims_attn
        q, k = apply_rope(q, pos, rot, cfg.rope_base), apply_rope(k, pos, rot, cfg.rope_base)
        scale = cfg.d_qk ** -0.5
        if not swa:                                                   # full causal attention over the prefix
            cache.append(k, v)
            kpos = np.arange(len(cache))
            o, pr = masked_attention(q, cache.k, cache.v, kpos[None, :] <= pos[:, None], scale)
        else:                                                         # the window: cached rows + the new rows
            kk, vv = np.concatenate([cache.k, k]), np.concatenate([cache.v, v])
            kpos = np.concatenate([cache.pos, pos])
            band = (kpos[None, :] <= pos[:, None]) & (kpos[None, :] > pos[:, None] - cfg.window)
            o, pr = masked_attention(q, kk, vv, band, scale, sink=w.get(p + "sink"))
            cache.append(k, v, pos)                                   # keeps only the last `window` entries
            if cfg.gates:                                             # sigmoid output gate, per channel
                o = o * sigmoid(x @ w[p + "wg"]).reshape(o.shape)
        if probs is not None:                                         # the probes' hook: columns = absolute positions
            full = np.zeros((T, cfg.n_heads_q, int(pos[-1]) + 1), pr.dtype)
            full[:, :, kpos] = pr
            probs.append(full)
        return o.reshape(T, -1) @ w[p + "wo"]

    def mamba2(self, i: int, x, state: MambaState):
        """Layer i's Mamba-2 block on T new rows, continuing ``state`` in place. x: (T, d_model) finite floats ->
        (T, d_model); state: the layer's MambaState (this config's shapes)."""
        i = self._layer(i, ("mamba2",))
        x = self._rows(x)
        self._check_layer_cache(i, state, "state")
        return self._mamba2(i, x, state)

    def _mamba2(self, i: int, x, state: MambaState):
        cfg, w, p = self.cfg, self.weights, f"layer.{i}.mamba."
        T, Di, N, H, P, K = len(x), cfg.d_inner, cfg.d_state, cfg.n_ssm_heads, cfg.head_dim, cfg.d_conv
        zxbcdt = x @ w[p + "in_proj"]
        z, xBC, dt_raw = zxbcdt[:, :Di], zxbcdt[:, Di:Di + cfg.conv_dim], zxbcdt[:, Di + cfg.conv_dim:]
        # causal depthwise conv of width K: the state holds the K - 1 inputs before these rows (zeros at the start)
        xpad = np.concatenate([state.conv, xBC])                                  # (K - 1 + T, conv_dim)
        win = np.lib.stride_tricks.sliding_window_view(xpad, K, axis=0)           # (T, conv_dim, K)
        xBC = silu(np.einsum("tck,ck->tc", win, w[p + "conv_w"]) + w[p + "conv_b"])
        state.conv = xpad[len(xpad) - (K - 1):].copy()
        xs, B, C = xBC[:, :Di], xBC[:, Di:Di + N], xBC[:, Di + N:]
        dt = softplus(dt_raw + w[p + "dt_bias"])                                  # (T, H) step sizes >= 0
        A = -np.exp(w[p + "A_log"])                                               # (H,) decay rates <= 0
        y, h = ssd_chunked(xs.reshape(1, T, H, P), dt[None], A, B[None], C[None], w[p + "D"], state.ssm[None],
                           cfg.chunk_size)
        state.ssm = h[0]
        y = rms_norm(y.reshape(T, Di) * silu(z)) * w[p + "norm_w"]                # gated RMSNorm
        return y @ w[p + "out_proj"]

    # ------------------------------------------------------------------------------------------- the stack
    def run(self, tokens, cache: StackCache, details: dict | None = None) -> np.ndarray:
        """All layers on the new ``tokens`` (T,) ints in [0, vocab), continuing ``cache`` (a StackCache of this
        model) IN PLACE. Returns logits (T, vocab).

        details: None, or a dict that receives ``details["attn_probs"]``: one entry per layer, the attention
        probabilities (T, Hq, S) of an attn / swa layer (S = cache.pos + T keys by absolute position, 0 where a key
        is masked or out of the window; a swa row sums to 1 - its sink's mass) or None for a mamba2 layer."""
        tokens = checks.tokens("tokens", tokens, self.cfg.vocab)
        self._check_cache(cache)
        return self._run(tokens, cache, _details(details))

    def _run(self, tokens, cache: StackCache, details: dict | None = None) -> np.ndarray:
        cfg, w = self.cfg, self.weights
        pos = cache.pos + np.arange(len(tokens))
        h = w["embed"][tokens]
        probs = None
        if details is not None:                                       # a fresh list per call (never accumulates)
            probs = details["attn_probs"] = []
        for i, kind in enumerate(cfg.layers):
            x = rms_norm(h)
            if kind == "mamba2":
                h = h + self._mamba2(i, x, cache.layers[i])
                if probs is not None:
                    probs.append(None)
            else:
                h = h + self._attention(i, x, pos, cache.layers[i], probs)
            h = h + silu(rms_norm(h) @ w[f"layer.{i}.mlp.w1"]) @ w[f"layer.{i}.mlp.w2"]
        cache.pos += len(tokens)
        return rms_norm(h) @ w["lm_head"]

    def prefill(self, tokens, cache: StackCache | None = None, details: dict | None = None):
        """Prefill ``tokens`` (T,), continuing ``cache`` if given (not modified: a copy is returned).
        Returns (logits (T, vocab), cache). details: as in :meth:`run`."""
        tokens = checks.tokens("tokens", tokens, self.cfg.vocab)
        if cache is not None:
            self._check_cache(cache)
        cache = self.new_cache() if cache is None else cache.copy()
        return self._run(tokens, cache, _details(details)), cache

    def forward(self, tokens, details: dict | None = None) -> np.ndarray:
        """The reference full-sequence forward: logits (T, vocab) at every position of ``tokens`` (T,).
        details: as in :meth:`run` (a dict that receives the per-layer attention probabilities)."""
        return self.prefill(tokens, details=details)[0]

    def decode_step(self, token: int, cache: StackCache):
        """One more position. Returns (logits (vocab,), new cache); the input cache is not modified."""
        token = checks.int_in("token", token, 0, self.cfg.vocab)
        self._check_cache(cache)
        cache = cache.copy()
        return self._run(np.array([token]), cache)[0], cache
