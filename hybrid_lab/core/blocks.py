"""The building blocks every model of the lab shares: norms, activations, RoPE, softmax with an attention sink,
grouped-query attention under an explicit mask, weight initialisation. Pure numpy, no state.

Checks are cheap on purpose (these functions run inside the models' hot loops): scalar parameters (eps, scale,
base, rot_dims, sink), dtypes (real numbers; RoPE's x a float array) and the shapes that must agree raise a
``ValueError`` naming the argument. float16 inputs are computed in float32 (other float dtypes in their own).
Activation VALUES are not scanned: NaN in -> NaN out. A NaN in x, q, k, v or
the logits reaches every output it touches (an elementwise op: that element; a norm or a softmax: its whole row),
never a finite number. ±inf follows IEEE arithmetic: an activation gives its exact limit (sigmoid(-inf) = 0) or
NaN (silu(-inf) = -inf/inf), a -inf logit is a masked position and a +inf logit makes its row NaN. The callers
that take user data (the ops' contracts, the models' entry points) check values once, at the door.
"""
from __future__ import annotations

import numpy as np

from hybrid_lab.core import checks

__all__ = ["rms_norm", "layer_norm", "silu", "sigmoid", "softplus", "apply_rope", "softmax_with_sink",
           "masked_attention_probs", "masked_attention",
           "init_weight", "attn_weights", "mlp_weights"]


def _floats(name, a, ndim=None, shape_doc="", kinds="fiu"):
    """checks.array, float16 widened to float32: every block computes in at least float32 (as the ops' contracts
    say), so a float16 input is rounded once, at the door, not at every step."""
    a = checks.array(name, a, ndim, shape_doc, kinds)
    return a.astype(np.float32) if a.dtype == np.float16 else a


def _rows(name, a):
    """An array (..., D) with D >= 1, reduced over its last axis (a norm or a softmax), float16 widened."""
    a = _floats(name, a)
    if a.ndim < 1 or a.shape[-1] == 0:
        raise ValueError(f"{name} must be an array (..., D) with D >= 1 (reduced over its last axis), got shape "
                         f"{a.shape}")
    return a


def layer_norm(x: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """Weightless LayerNorm over the last axis. x: (..., D), D >= 1."""
    x = _rows("x", x)
    checks.positive_number("eps", eps)           # checked, used as given (its type sets the result's precision)
    mu = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps)


def softplus(z):
    """log(1 + e^z), computed without overflow."""
    z = _floats("z", z)
    return np.logaddexp(0.0, z)


def softmax_with_sink(logits, sink=None):
    """Softmax over the last axis with ``-inf`` entries masked out; rows with nothing visible give all zeros.

    sink: optional finite logit broadcastable to ``logits[..., :1]``: it adds ``exp(sink)`` to the denominator (a
    slot that absorbs probability mass), so a row then sums to < 1. A NaN or +inf logit makes its whole row NaN.
    """
    logits = _rows("logits", logits)
    m = logits.max(axis=-1, keepdims=True)
    if sink is not None:
        sink = _sink(sink, m.shape, "logits[..., :1]")
        m = np.maximum(m, sink)
    m = np.where(m == -np.inf, 0.0, m)            # all-masked rows: avoid inf - inf (NaN / +inf rows stay NaN)
    p = np.exp(logits - m)
    den = p.sum(axis=-1, keepdims=True)
    if sink is not None:
        den = den + np.exp(sink - m)
    return p / np.where(den == 0, 1.0, den)       # 0: nothing visible (p is 0 too); NaN stays NaN


def _sink(sink, shape, shape_doc):
    """A finite real sink logit broadcastable to ``shape`` (no bigger than it)."""
    sink = checks.array("sink", sink)
    try:
        fits = np.broadcast_shapes(sink.shape, shape) == tuple(shape)
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"sink must broadcast to {shape_doc} {tuple(shape)}, got shape {sink.shape}")
    if not np.isfinite(sink).all():
        raise ValueError(f"sink must be finite (a logit), got {sink.ravel()[~np.isfinite(sink.ravel())][0]}")
    return sink


def rms_norm(x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Weightless RMSNorm over the last axis. x: (..., D), D >= 1."""
    x = _rows("x", x)
    checks.positive_number("eps", eps)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def silu(x: np.ndarray) -> np.ndarray:
    x = _floats("x", x)
    return x / (1.0 + np.exp(-x))


def sigmoid(x: np.ndarray) -> np.ndarray:
    x = _floats("x", x)
    return 1.0 / (1.0 + np.exp(-x))


def apply_rope(x: np.ndarray, pos: np.ndarray, rot_dims: int, base: float = 10000.0) -> np.ndarray:
    """Partial rotary embedding on the first ``rot_dims`` channels (rotate-half form); the rest pass through.

    x: (T, H, d) float; pos: (T,) absolute positions (integers >= 0). ``rot_dims`` must be even and <= d
    (0 = NoPE); base > 0.
    """
    x = _floats("x", x, 3, "(T, H, d)", kinds="f")       # float: the rotation is written back into a copy
    T, _, d = x.shape
    rot_dims = checks.nonneg_int("rot_dims", rot_dims)
    if rot_dims % 2 or rot_dims > d:
        raise ValueError(f"rot_dims must be an even integer in [0, d={d}] (d: the last axis of x {x.shape}), "
                         f"got {rot_dims}")
    checks.positive_number("base", base)
    pos = checks.int_array("pos", pos, 1, f"(T={T},)", lo=0)
    if pos.shape != (T,):
        raise ValueError(f"pos must be (T={T},) like x {x.shape}, got shape {pos.shape}")
    if rot_dims == 0:
        return x
    half = rot_dims // 2
    inv = base ** (-np.arange(half) / half)                         # (half,)
    ang = pos.astype(np.float64)[:, None] * inv[None, :]            # (T, half)
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:rot_dims]
    out = x.copy()
    out[..., :half] = x1 * cos - x2 * sin
    out[..., half:rot_dims] = x1 * sin + x2 * cos
    return out


def _check_attention(q, k, mask, scale, sink):
    """The shapes of one sequence's grouped-query attention: q (T, Hq, d), k (S, Hkv, d), mask (T, S) bool."""
    q = _floats("q", q, 3, "(T, Hq, d)")
    k = _floats("k", k, 3, "(S, Hkv, d)")
    T, Hq, d = q.shape
    S, Hkv = k.shape[:2]
    if k.shape[2] != d:
        raise ValueError(f"k must be (S, Hkv, d={d}) like q {q.shape}, got shape {k.shape}")
    G = checks.heads(Hq, Hkv, "Hq (q.shape[1])", "Hkv (k.shape[1])")
    mask = np.asarray(mask)
    if mask.dtype != np.bool_ or mask.shape != (T, S):
        raise ValueError(f"mask must be a bool (T={T}, S={S}) array (True = visible; T from q {q.shape}, S from "
                         f"k {k.shape}), got shape {mask.shape} dtype {mask.dtype}")
    checks.positive_number("scale", scale)       # checked, used as given (its type sets the result's precision)
    if sink is not None:
        sink = checks.array("sink", sink, 1, f"(Hq={Hq},)")
        if sink.shape != (Hq,) or not np.isfinite(sink).all():
            raise ValueError(f"sink must be (Hq={Hq},) finite logits, got {sink.tolist()}")
        sink = sink.reshape(1, Hkv, G, 1)
    return q, k, mask, scale, sink


def masked_attention_probs(q, k, mask, scale, sink=None):
    """Softmax probabilities of grouped-query attention.

    q: (T, Hq, d); k: (S, Hkv, d); mask: (T, S) bool (True = visible); scale > 0; sink: (Hq,) finite or None.
    Returns p: (T, Hq, S), rows with no visible key are 0. With a sink the row sums to < 1 (mass absorbed by it).
    """
    return _probs(*_check_attention(q, k, mask, scale, sink))


def masked_attention(q, k, v, mask, scale, sink=None):
    """Dense attention with an explicit visibility mask (GQA: Hq // Hkv query heads share a KV head).

    q: (T, Hq, d); k: (S, Hkv, d); v: (S, Hkv, dv); mask: (T, S) bool. Returns (o: (T, Hq, dv), p: (T, Hq, S)).
    """
    q, k, mask, scale, sink = _check_attention(q, k, mask, scale, sink)
    v = _floats("v", v, 3, "(S, Hkv, dv)")
    if v.shape[:2] != k.shape[:2]:
        raise ValueError(f"v must be (S, Hkv, dv) with the (S, Hkv) = {k.shape[:2]} of k, got shape {v.shape}")
    p = _probs(q, k, mask, scale, sink)
    T, Hq, S = p.shape
    Hkv = k.shape[1]
    o = np.einsum("tgjs,sgd->tgjd", p.reshape(T, Hkv, Hq // Hkv, S), v).reshape(T, Hq, v.shape[-1])
    return o, p


def _probs(q, k, mask, scale, sink):
    T, Hq, d = q.shape
    Hkv = k.shape[1]
    qg = q.reshape(T, Hkv, Hq // Hkv, d)
    logits = np.einsum("tgjd,sgd->tgjs", qg, k) * scale              # (T, Hkv, G, S)
    logits = np.where(mask[:, None, None, :], logits, -np.inf)
    s = None if sink is None else sink.astype(logits.dtype)
    return softmax_with_sink(logits, s).reshape(T, Hq, k.shape[0])   # explicit S: T = 0 must work


# ------------------------------------------------------------------- weight initialisation (shared by the models)
def _float_dtype(dtype) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or dt.kind != "f":
        raise ValueError(f"dtype must be a float dtype such as 'float32' or 'float64', got {dtype!r}")
    return dt


def init_weight(rng, shape, fan_in, dtype):
    """Gaussian weights of std 1/sqrt(fan_in). shape: a tuple of sizes >= 1; fan_in >= 1; dtype a float dtype."""
    if not isinstance(shape, (tuple, list)) or not shape:
        raise ValueError(f"shape must be a non-empty tuple of sizes, got {shape!r}")
    shape = tuple(checks.pos_int(f"shape[{i}]", n) for i, n in enumerate(shape))
    fan_in = checks.pos_int("fan_in", fan_in)
    return (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(_float_dtype(dtype))


def attn_weights(rng, prefix, D, Hq, Hkv, dk, dv, dtype, kv=True, gate=False, sink=False):
    """One attention layer's weights {prefix + name: array}: wq (D, Hq·dk), wo (Hq·dv, D), [wk, wv (D, Hkv·dk/dv)],
    [wg (D, Hq·dv)], [sink (Hq,)]. Sizes are integers >= 1, Hq a multiple of Hkv."""
    D, dk, dv = (checks.pos_int(n, v) for n, v in (("D", D), ("dk", dk), ("dv", dv)))
    checks.heads(Hq, Hkv, "Hq", "Hkv")
    checks.output_size("D, Hq, dk or dv (a projection D x Hq·dk or Hq·dv x D)", (D, int(Hq) * max(dk, dv)))
    dtype = _float_dtype(dtype)
    w = {prefix + "wq": init_weight(rng, (D, Hq * dk), D, dtype),
         prefix + "wo": init_weight(rng, (Hq * dv, D), Hq * dv, dtype)}
    if kv:
        w[prefix + "wk"] = init_weight(rng, (D, Hkv * dk), D, dtype)
        w[prefix + "wv"] = init_weight(rng, (D, Hkv * dv), D, dtype)
    if gate:
        w[prefix + "wg"] = init_weight(rng, (D, Hq * dv), D, dtype)
    if sink:
        w[prefix + "sink"] = rng.standard_normal(Hq).astype(dtype)
    return w


def mlp_weights(rng, prefix, D, F, dtype):
    """An MLP's weights {prefix + "w1": (D, F), prefix + "w2": (F, D)}; D, F integers >= 1."""
    D, F = checks.pos_int("D", D), checks.pos_int("F", F)
    return {prefix + "w1": init_weight(rng, (D, F), D, dtype), prefix + "w2": init_weight(rng, (F, D), F, dtype)}
