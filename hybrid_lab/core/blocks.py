"""The building blocks every model of the lab shares: norms, activations, RoPE, softmax with an attention sink,
grouped-query attention under an explicit mask. Pure numpy, no argument checks (callers validate), no state.
"""
from __future__ import annotations

import numpy as np

__all__ = ["rms_norm", "layer_norm", "silu", "sigmoid", "softplus", "apply_rope", "softmax_with_sink",
           "masked_attention_probs", "masked_attention",
           "init_weight", "attn_weights", "mlp_weights"]


def layer_norm(x: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """Weightless LayerNorm over the last axis. x: (..., D)."""
    mu = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps)


def softplus(z):
    """log(1 + e^z), computed without overflow."""
    z = np.asarray(z)
    return np.logaddexp(0.0, z)


def softmax_with_sink(logits, sink=None):
    """Softmax over the last axis with ``-inf`` entries masked out; rows with nothing visible give all zeros.

    sink: optional logit broadcastable to ``logits[..., :1]``: it adds ``exp(sink)`` to the denominator (a slot that
    absorbs probability mass), so a row then sums to < 1.
    """
    m = logits.max(axis=-1, keepdims=True)
    if sink is not None:
        m = np.maximum(m, sink)
    m = np.where(np.isfinite(m), m, 0.0)          # all-masked rows: avoid inf - inf
    p = np.exp(logits - m)
    den = p.sum(axis=-1, keepdims=True)
    if sink is not None:
        den = den + np.exp(sink - m)
    return p / np.where(den > 0, den, 1.0)


def rms_norm(x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Weightless RMSNorm over the last axis. x: (..., D)."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def apply_rope(x: np.ndarray, pos: np.ndarray, rot_dims: int, base: float = 10000.0) -> np.ndarray:
    """Partial rotary embedding on the first ``rot_dims`` channels (rotate-half form); the rest pass through.

    x: (T, H, d); pos: (T,) absolute positions. ``rot_dims`` must be even and <= d (0 = NoPE).
    """
    d = x.shape[-1]
    if rot_dims < 0 or rot_dims % 2 or rot_dims > d:
        raise ValueError(f"rot_dims must be an even integer in [0, d={d}], got {rot_dims}")
    if rot_dims == 0:
        return x
    half = rot_dims // 2
    inv = base ** (-np.arange(half) / half)                         # (half,)
    ang = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]  # (T, half)
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:rot_dims]
    out = x.copy()
    out[..., :half] = x1 * cos - x2 * sin
    out[..., half:rot_dims] = x1 * sin + x2 * cos
    return out


def masked_attention_probs(q, k, mask, scale, sink=None):
    """Softmax probabilities of grouped-query attention.

    q: (T, Hq, d); k: (S, Hkv, d); mask: (T, S) bool (True = visible); sink: (Hq,) or None.
    Returns p: (T, Hq, S), rows with no visible key are 0. With a sink the row sums to < 1 (mass absorbed by it).
    """
    T, Hq, d = q.shape
    Hkv = k.shape[1]
    G = Hq // Hkv
    qg = q.reshape(T, Hkv, G, d)
    logits = np.einsum("tgjd,sgd->tgjs", qg, k) * scale              # (T, Hkv, G, S)
    logits = np.where(mask[:, None, None, :], logits, -np.inf)
    s = None if sink is None else np.asarray(sink, dtype=logits.dtype).reshape(1, Hkv, G, 1)
    return softmax_with_sink(logits, s).reshape(T, Hq, k.shape[0])   # explicit S: T = 0 must work


def masked_attention(q, k, v, mask, scale, sink=None):
    """Dense attention with an explicit visibility mask (GQA: Hq // Hkv query heads share a KV head).

    q: (T, Hq, d); k: (S, Hkv, d); v: (S, Hkv, dv); mask: (T, S) bool. Returns (o: (T, Hq, dv), p: (T, Hq, S)).
    """
    p = masked_attention_probs(q, k, mask, scale, sink)
    T, Hq, S = p.shape
    Hkv = k.shape[1]
    o = np.einsum("tgjs,sgd->tgjd", p.reshape(T, Hkv, Hq // Hkv, S), v).reshape(T, Hq, v.shape[-1])
    return o, p


# ------------------------------------------------------------------- weight initialisation (shared by the models)
def init_weight(rng, shape, fan_in, dtype):
    return (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(dtype)


def attn_weights(rng, prefix, D, Hq, Hkv, dk, dv, dtype, kv=True, gate=False, sink=False):
    w = {prefix + "wq": init_weight(rng, (D, Hq * dk), D, dtype), prefix + "wo": init_weight(rng, (Hq * dv, D), Hq * dv, dtype)}
    if kv:
        w[prefix + "wk"] = init_weight(rng, (D, Hkv * dk), D, dtype)
        w[prefix + "wv"] = init_weight(rng, (D, Hkv * dv), D, dtype)
    if gate:
        w[prefix + "wg"] = init_weight(rng, (D, Hq * dv), D, dtype)
    if sink:
        w[prefix + "sink"] = rng.standard_normal(Hq).astype(dtype)
    return w


def mlp_weights(rng, prefix, D, F, dtype):
    return {prefix + "w1": init_weight(rng, (D, F), D, dtype), prefix + "w2": init_weight(rng, (F, D), F, dtype)}
