"""Torch twin of :class:`hybrid_lab.models.stack.Stack`: the same layers, op for op, for training.

Same weight names and shapes as ``Stack.init_weights`` (stored in an ``nn.ParameterDict`` under the numpy name with
"." -> "__", which ParameterDict requires), so trained weights go back to the numpy model unchanged::

    tm = TorchStack(cfg)                       # weights = Stack.init_weights(cfg), as float32 parameters
    logits = tm(tokens)                        # tokens (B, T) long -> (B, T, vocab)
    w = tm.numpy_weights()                     # {name: float32 array} -> Stack(replace(cfg, dtype="float32"), w)

The forward is batched and full-sequence with no Python loop over T or B (it runs on CUDA). Where the numpy model
runs a chunked scan or a cache, the twin uses the whole-sequence form of the same maths:

- attention: a (T, T) causal mask (band of ``window`` for SWA), sink logits as an extra softmax column;
- Mamba-2: the SSD "quadratic" form y = ((C Bᵀ) ⊙ L) (Δ x) with L[t, s] = exp(Σ_{s<r≤t} Δ_r A) for s ≤ t,
  (B, H, T, T) floats per layer: fine up to T ~ 1k at toy width (B=64, T=512, H=4: 67M floats);
- the short convolution: ``F.conv1d`` with d_conv - 1 zeros on the left.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from hybrid_lab.models.stack import Stack, StackConfig
from hybrid_lab.trained.torch_blocks import TwinModule, apply_rope, attend, causal_mask, rms_norm

__all__ = ["TorchStack", "segsum"]


def segsum(a: torch.Tensor) -> torch.Tensor:
    """log L of Mamba-2's SSD: out[..., t, s] = Σ_{s<r≤t} a_r for s ≤ t, -inf above the diagonal. a: (..., T).

    Summed directly (a cumsum of the masked rows, as the Mamba-2 reference does) rather than as c_t - c_s: with c
    the running sum over a long sequence the difference of two large numbers loses float32 digits. The mask is
    applied BEFORE exp (-inf -> 0), so the backward sees no inf * 0 = NaN.
    """
    T = a.shape[-1]
    ones = torch.ones(T, T, dtype=torch.bool, device=a.device)
    x = a[..., :, None].expand(*a.shape, T)                          # x[..., r, s] = a_r
    x = x.masked_fill(~torch.tril(ones, diagonal=-1), 0.0)           # keep r > s
    x = torch.cumsum(x, dim=-2)                                      # Σ_{s<r≤t} a_r
    return x.masked_fill(~torch.tril(ones), float("-inf"))           # s > t: not visible


class TorchStack(TwinModule):
    """The layer stack in torch. ``weights``: a dict as ``Stack.init_weights(cfg)`` returns (checked by ``Stack``);
    default: ``Stack.init_weights(cfg)``. Parameters are float32 (``.double()`` works too), by numpy name:
    :class:`~hybrid_lab.trained.torch_blocks.TwinModule`."""

    def __init__(self, cfg: StackConfig, weights: dict | None = None):
        super().__init__(cfg, Stack(cfg, weights).weights)           # validates cfg, names and shapes

    # ---------------------------------------------------------------------------------------------- mixers
    def attention(self, i: int, x: torch.Tensor, select: torch.Tensor | None = None) -> torch.Tensor:
        """Layer i's causal attention (``attn``: full, ``swa``: band + gate + sink). x: (B, T, D) normed.
        select: optional (B, T, T) bool, the positions each query may read on top of the causal mask (sparse
        attention: a top-k selection; every row must keep at least one visible position)."""
        cfg, p = self.cfg, f"layer.{i}.attn."
        B, T, _ = x.shape
        Hq, dk, dv = cfg.n_heads_q, cfg.d_qk, cfg.d_v
        swa = cfg.layers[i] == "swa"
        q, k, v = self.qkv(x, p)
        rot = cfg.rope_dims_swa if swa else cfg.rope_dims_attn
        pos = torch.arange(T, device=x.device)
        q, k = apply_rope(q, pos, rot, cfg.rope_base), apply_rope(k, pos, rot, cfg.rope_base)
        mask = causal_mask(pos, cfg.window if swa else None)
        if select is not None:
            mask = mask & select[:, None, None]                                       # (B, 1, 1, T, T)
        sink = self.w(p + "sink") if swa and cfg.sinks else None                    # exp(sink) joins the denominator
        o, _ = attend(q, k, v, mask, dk ** -0.5, sink)                                # (B, T, Hq, dv)
        if swa and cfg.gates:
            o = o * torch.sigmoid(self.heads(x, p + "wg", Hq, dv))
        return o.reshape(B, T, Hq * dv) @ self.w(p + "wo")

    def mamba2(self, i: int, x: torch.Tensor) -> torch.Tensor:
        """Layer i's Mamba-2 block, whole sequence (SSD quadratic form). x: (B, T, D) normed -> (B, T, D)."""
        cfg, p = self.cfg, f"layer.{i}.mamba."
        B, T, _ = x.shape
        Di, N, H, P, K, Cd = cfg.d_inner, cfg.d_state, cfg.n_ssm_heads, cfg.head_dim, cfg.d_conv, cfg.conv_dim
        z, xBC, dt_raw = torch.split(x @ self.w(p + "in_proj"), [Di, Cd, H], dim=-1)
        # causal depthwise conv: K - 1 zeros on the left, out[t] = Σ_k conv_w[:, k] · in[t - K + 1 + k]
        xBC = F.conv1d(F.pad(xBC.transpose(1, 2), (K - 1, 0)), self.w(p + "conv_w")[:, None, :],
                       self.w(p + "conv_b"), groups=Cd).transpose(1, 2)
        xBC = F.silu(xBC)
        xs, Bm, Cm = torch.split(xBC, [Di, N, N], dim=-1)
        # softplus as log(1 + e^z) exactly (F.softplus switches to the identity above 20)
        dt = torch.logaddexp(dt_raw + self.w(p + "dt_bias"), torch.zeros((), dtype=x.dtype, device=x.device))
        A = -torch.exp(self.w(p + "A_log"))                                           # (H,)
        L = torch.exp(segsum((dt * A).transpose(1, 2)))                               # (B, H, T, T)
        M = torch.einsum("btn,bsn->bts", Cm, Bm)[:, None] * L                         # (C Bᵀ) ⊙ L
        u = dt[..., None] * xs.view(B, T, H, P)                                       # Δ x: (B, T, H, P)
        y = torch.einsum("bhts,bshp->bthp", M, u) + self.w(p + "D")[:, None] * xs.view(B, T, H, P)
        y = rms_norm(y.reshape(B, T, Di) * F.silu(z)) * self.w(p + "norm_w")         # gated RMSNorm
        return y @ self.w(p + "out_proj")

    # ------------------------------------------------------------------------------------------- the stack
    def forward(self, tokens: torch.Tensor, select: list | None = None) -> torch.Tensor:
        """tokens: (B, T) integer tensor in [0, vocab). Returns logits (B, T, vocab) at every position.
        select: optional list with one (B, T, T) bool selection (or None) per layer, for the attention layers
        (DSA's sparse stage: each query reads only its selected positions; ``hybrid_lab.trained.dsa``)."""
        cfg = self.cfg
        tokens = self.check_tokens(tokens)
        if select is not None and (not isinstance(select, (list, tuple)) or len(select) != cfg.n_layers):
            raise ValueError(f"select must be None or a list of {cfg.n_layers} (B, T, T) bool tensors or None (one "
                             f"per layer), got {type(select).__name__} of length {len(select) if isinstance(select, (list, tuple)) else '-'}")
        h = self.w("embed")[tokens]
        for i, kind in enumerate(cfg.layers):
            x = rms_norm(h)
            sel = None if select is None else select[i]
            h = h + (self.mamba2(i, x) if kind == "mamba2" else self.attention(i, x, sel))
            h = self.mlp(f"layer.{i}.", h)
        return self.lm_head(h)
