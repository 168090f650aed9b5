"""The torch blocks the twins share (``torch_stack``, ``torch_hysparse``, ``torch_hysparse2``), op for op as the numpy
ones in ``hybrid_lab.core.blocks``.

- :class:`TwinModule`: the base of every twin: float32 parameters stored by numpy weight name (``w``, ``has``),
  ``numpy_weights()`` for the numpy model, the token check of ``forward`` and the weightless-RMSNorm SiLU MLP and LM
  head every model ends its layers with.
- :func:`rms_norm`, :func:`apply_rope` (partial rotate-half), :func:`causal_mask` (optionally banded),
  :func:`attend` (grouped-query attention under a mask, with numpy's ``softmax_with_sink``).

Everything here is batched, full-sequence and numpy-free, so the twins run on CUDA and inside a CUDA graph (the
training loop of ``hybrid_lab.trained.train`` captures one).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["TwinModule", "param_key", "rms_norm", "apply_rope", "causal_mask", "attend"]


def param_key(name: str) -> str:
    """The ``nn.ParameterDict`` key of a numpy weight name (ParameterDict forbids dots): '.' -> '__'."""
    return name.replace(".", "__")


# ----------------------------------------------------------------------------------------------- the blocks
def rms_norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Weightless RMSNorm over the last axis, as ``hybrid_lab.core.blocks.rms_norm``. x: (..., D)."""
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)


def apply_rope(x: torch.Tensor, pos: torch.Tensor, rot_dims: int, base: float = 10000.0) -> torch.Tensor:
    """Partial RoPE (rotate-half) on the first ``rot_dims`` channels, as ``core.blocks.apply_rope``.

    x: (B, T, H, d); pos: (T,) integer positions. rot_dims even, <= d (0 = NoPE: x is returned as is).
    The angles are computed in float64 (as numpy does), then cast: the rotation runs in x's dtype, and a float32 run
    matches numpy's to ~1e-7.
    """
    if rot_dims == 0:
        return x
    half = rot_dims // 2
    # a Python base (not a tensor made from it): no host-to-device copy, so a CUDA graph can capture this
    inv = float(base) ** (-torch.arange(half, dtype=torch.float64, device=x.device) / half)   # (half,)
    ang = pos.to(torch.float64)[:, None] * inv[None, :]                                         # (T, half)
    cos, sin = torch.cos(ang).to(x.dtype)[:, None, :], torch.sin(ang).to(x.dtype)[:, None, :]   # (T, 1, half)
    x1, x2 = x[..., :half], x[..., half:rot_dims]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos, x[..., rot_dims:]], dim=-1)


def causal_mask(pos: torch.Tensor, window: int | None = None) -> torch.Tensor:
    """(T, S=T) bool, True = visible: s <= t, and with ``window`` also s > t - window (the sliding window, or
    HySparse2's forced window; all False for window 0). pos: (T,) positions."""
    mask = pos[None, :] <= pos[:, None]
    if window is None:
        return mask
    return mask & (pos[None, :] > pos[:, None] - window)


def attend(q, k, v, mask, scale: float, sink=None):
    """Grouped-query attention under a boolean mask, with numpy's ``softmax_with_sink`` (Hq // Hkv query heads share
    a KV head; query head j reads KV head j // G, as numpy's reshape).

    q: (B, T, Hq, d); k: (B, S, Hkv, d); v: (B, S, Hkv, dv); mask: bool broadcastable to (B, Hkv, G, T, S), True =
    visible, every row must see at least one key (true of every layer of the twins: the own position, or at least one
    selected one); sink: (Hq,) logits or None (``exp(sink)`` joins the denominator).
    Returns (o: (B, T, Hq, dv), p: (B, Hkv, G, T, S) probabilities).
    """
    B, T, Hq, d = q.shape
    Hkv = k.shape[2]
    G = Hq // Hkv
    logits = torch.einsum("btgjd,bsgd->bgjts", q.view(B, T, Hkv, G, d), k) * scale        # (B, Hkv, G, T, S)
    logits = logits.masked_fill(~mask, float("-inf"))
    if sink is None:
        p = torch.softmax(logits, dim=-1)
    else:   # the sink as one more logit column whose probability is dropped: numpy's max, exp and sum, same ratio
        col = sink.view(1, Hkv, G, 1, 1).expand(B, Hkv, G, T, 1)
        p = torch.softmax(torch.cat([logits, col], dim=-1), dim=-1)[..., :-1]
    o = torch.einsum("bgjts,bsgd->btgjd", p, v).reshape(B, T, Hq, v.shape[-1])
    return o, p


# ------------------------------------------------------------------------------------------------ the base
class TwinModule(nn.Module):
    """The base of a torch twin: its numpy model's weights as trainable float32 parameters, by numpy name.

    cfg: the numpy model's config (its ``dtype`` only sets the numpy init; ``cfg.vocab`` bounds the tokens; the
    attention dims are ``n_heads_q``, ``n_heads_kv``, ``d_qk``, ``d_v``); weights: {numpy name: float array}, already
    checked by the twin against its numpy model (exactly the names and shapes of its ``init_weights(cfg)``, finite),
    in ``init_weights`` order. Parameters live in ``self.params`` (an ``nn.ParameterDict``) under ``param_key(name)``;
    ``self.names`` keeps the order. ``.double()`` works: the parameters follow, ``numpy_weights()`` stays float32.
    """

    check_values = True     # False under torch.func.vmap (an ensemble): a value check would read a batched tensor

    def __init__(self, cfg, weights: dict):
        super().__init__()
        self.cfg = cfg
        self.names = tuple(weights)
        self.params = nn.ParameterDict({param_key(n): nn.Parameter(torch.tensor(np.asarray(a, np.float32)))
                                        for n, a in weights.items()})

    def w(self, name: str) -> torch.Tensor:
        """The parameter of a numpy weight name (e.g. 'layer.0.attn.wq')."""
        return self.params[param_key(name)]

    def has(self, name: str) -> bool:
        """Whether the model has a weight of this numpy name (optional ones: sinks, gates)."""
        return param_key(name) in self.params

    def numpy_weights(self) -> dict:
        """{numpy name: float32 np.ndarray} (detached copies on the CPU), the same names and shapes as init_weights."""
        return {n: self.w(n).detach().to("cpu", torch.float32).numpy().copy() for n in self.names}

    def check_tokens(self, tokens) -> torch.Tensor:
        """tokens: an integer torch tensor (B, T), B, T >= 1, ids in [0, vocab). Returns them as int64.

        The value check reads the tokens on the host, which is not possible while a CUDA graph is being captured,
        nor inside ``torch.func.vmap`` (``hybrid_lab.trained.ensemble`` sets ``check_values = False``; its tokens
        come from the task generators).
        """
        if not isinstance(tokens, torch.Tensor) or tokens.ndim != 2 or tokens.shape[0] < 1 or tokens.shape[1] < 1 \
                or tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
            raise ValueError(f"tokens must be an integer torch tensor (B, T) with B, T >= 1, got "
                             f"{getattr(tokens, 'shape', type(tokens).__name__)} "
                             f"{getattr(tokens, 'dtype', '')}".rstrip())
        capturing = torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
        if self.check_values and not capturing and bool((tokens.min() < 0) | (tokens.max() >= self.cfg.vocab)):
            raise ValueError(f"tokens must lie in [0, vocab={self.cfg.vocab}), got min {int(tokens.min())} "
                             f"max {int(tokens.max())}")
        return tokens.long()

    def heads(self, x: torch.Tensor, name: str, n: int, d: int) -> torch.Tensor:
        """x (B, T, D) @ the weight ``name``, split in ``n`` heads of ``d`` channels: (B, T, n, d)."""
        return (x @ self.w(name)).view(*x.shape[:-1], n, d)

    def qkv(self, x: torch.Tensor, p: str):
        """The projections ``{p}wq``, ``{p}wk``, ``{p}wv`` of x (B, T, D) in heads: q (B, T, n_heads_q, d_qk),
        k (B, T, n_heads_kv, d_qk), v (B, T, n_heads_kv, d_v)."""
        c = self.cfg
        return (self.heads(x, p + "wq", c.n_heads_q, c.d_qk), self.heads(x, p + "wk", c.n_heads_kv, c.d_qk),
                self.heads(x, p + "wv", c.n_heads_kv, c.d_v))

    def mlp(self, p: str, h: torch.Tensor) -> torch.Tensor:
        """The MLP sublayer with its residual: h + SiLU(RMSNorm(h) @ ``{p}mlp.w1``) @ ``{p}mlp.w2``. h: (B, T, D)."""
        return h + F.silu(rms_norm(h) @ self.w(p + "mlp.w1")) @ self.w(p + "mlp.w2")

    def lm_head(self, h: torch.Tensor) -> torch.Tensor:
        """The final RMSNorm and the LM head. h: (B, T, D) -> logits (B, T, vocab)."""
        return rms_norm(h) @ self.w("lm_head")
