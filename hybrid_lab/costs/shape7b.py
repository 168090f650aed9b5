"""FLOP and byte model of the 7B hybrid used by Marconi (seed 003 §3-§4, exercise 4).

Layout (Marconi's main model): 4 attention / 24 SSM (Mamba-2) / 28 MLP layers, FP16, d_model 4096, 32 heads.

- KV bytes per token   = n_attn · 2 (K, V) · n_heads · d_head · bytes          (7B: 65,536 B)
- SSM state bytes      = n_ssm · d_model · d_state · bytes                       (7B: 25,165,824 B = 384 tokens of KV)
  This is the lecture's (and Marconi appendix A's) state ledger: d_model × N per layer. A Mamba-2 mixer with
  expand 2 actually carries d_inner × N = 2× that (plus a small conv state); we keep the ledger's number so the
  byte model matches the lecture and exercise 4.
- Prefill FLOPs of L tokens ≈ 2 · P · L + 2 · n_attn · d_model · L²
  P = non-embedding parameters (MHA, SwiGLU MLPs with 14,336 hidden units, Mamba-2 mixers with expand 2 and head
  dim 64); the L² term is causal QKᵀ plus PV (4·d·L² halved by the mask) per attention layer.

The numbers are a model, not a measurement: exercise 4's reference answers are reproduced within 1 %.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class HybridLayout:
    """Layer counts and widths of a hybrid LM (defaults: Marconi's 7B, FP16)."""

    n_attn: int = 4
    n_ssm: int = 24
    n_mlp: int = 28
    d_model: int = 4096
    n_heads: int = 32
    d_state: int = 128
    dtype_bytes: int = 2
    mlp_hidden: int = 14336
    expand: int = 2
    ssm_head_dim: int = 64
    d_conv: int = 4

    def __post_init__(self):
        for name in ("n_attn", "n_ssm", "n_mlp"):
            v = getattr(self, name)
            if not (isinstance(v, (int, np.integer)) and v >= 0):
                raise ValueError(f"{name} must be an integer >= 0, got {v!r}")
        for name in ("d_model", "n_heads", "d_state", "dtype_bytes", "mlp_hidden", "expand", "ssm_head_dim", "d_conv"):
            v = getattr(self, name)
            if not (isinstance(v, (int, np.integer)) and v > 0):
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if self.n_attn + self.n_ssm == 0:
            raise ValueError("a model needs at least one attention or SSM layer (n_attn + n_ssm > 0)")

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    def with_(self, **changes) -> "HybridLayout":
        """A copy with some fields changed, e.g. ``L7B.with_(n_attn=9, n_ssm=19)``."""
        return replace(self, **changes)

    # ---- bytes -------------------------------------------------------------------------------------------
    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of every attention layer for one token."""
        return self.n_attn * 2 * self.n_heads * self.d_head * self.dtype_bytes

    @property
    def state_bytes(self) -> int:
        """One SSM snapshot: the states of all SSM layers (d_model × d_state each, the lecture's ledger)."""
        return self.n_ssm * self.d_model * self.d_state * self.dtype_bytes

    def entry_bytes(self, n_tokens, n_states=1):
        """Bytes of a cache entry holding the KV of ``n_tokens`` tokens and ``n_states`` SSM snapshots."""
        return np.asarray(n_tokens, dtype=np.float64) * self.kv_bytes_per_token + n_states * self.state_bytes

    # ---- parameters ----------------------------------------------------------------------------------------
    @property
    def attn_params(self) -> int:
        """MHA: W_q, W_k, W_v, W_o, no bias."""
        return 4 * self.d_model * self.d_model

    @property
    def mlp_params(self) -> int:
        """SwiGLU: gate, up (d -> hidden) and down (hidden -> d)."""
        return 3 * self.d_model * self.mlp_hidden

    @property
    def ssm_params(self) -> int:
        """Mamba-2 mixer (one group): in_proj -> [z, x, B, C, dt], depthwise conv on [x, B, C], gated norm, out_proj."""
        d_inner = self.expand * self.d_model
        heads = d_inner // self.ssm_head_dim
        in_proj = self.d_model * (2 * d_inner + 2 * self.d_state + heads)
        conv_ch = d_inner + 2 * self.d_state
        conv = conv_ch * self.d_conv + conv_ch
        per_head = 3 * heads                       # dt_bias, A_log, D
        return in_proj + conv + per_head + d_inner + d_inner * self.d_model

    @property
    def params(self) -> int:
        """Non-embedding parameters P (mixers + MLPs + one pre-norm per block + final norm)."""
        blocks = self.n_attn + self.n_ssm + self.n_mlp
        return (self.n_attn * self.attn_params + self.n_ssm * self.ssm_params + self.n_mlp * self.mlp_params
                + (blocks + 1) * self.d_model)

    # ---- FLOPs ---------------------------------------------------------------------------------------------
    def prefill_flops(self, L):
        """FLOPs to prefill the first L tokens: 2·P·L (every weight, every token) + 2·n_attn·d·L² (causal attention).

        L: int or array of ints >= 0. Returns float64 of the same shape.
        """
        L = np.asarray(L, dtype=np.float64)
        if (L < 0).any():
            raise ValueError(f"L must be >= 0, got min {L.min()}")
        return 2.0 * self.params * L + 2.0 * self.n_attn * self.d_model * L * L

    def saved_flops(self, end, start=0):
        """FLOPs a cache hit on tokens [start, end) saves, given [0, start) is reused anyway (Marconi's 'relative to
        the parent')."""
        end = np.asarray(end, dtype=np.float64)
        start = np.asarray(start, dtype=np.float64)
        if (start > end).any():
            raise ValueError("start must be <= end")
        return self.prefill_flops(end) - self.prefill_flops(start)

    def flop_efficiency(self, n_tokens, n_states=1):
        """Exercise 4: FLOPs saved by reusing a prefix of ``n_tokens`` / bytes of its entry (KV + states)."""
        return self.prefill_flops(n_tokens) / self.entry_bytes(n_tokens, n_states)


L7B = HybridLayout()
"""Marconi's 7B hybrid: 4 attention / 24 SSM / 28 MLP, FP16, d_model 4096, 32 heads, N = 128."""

EXERCISE4_REPORTED = {
    "A": {"tokens": 500, "tflop": 7.7, "mb": 57.9, "kflop_per_byte": 133.0},
    "B": {"tokens": 8000, "tflop": 125.2, "mb": 549.5, "kflop_per_byte": 228.0},
}
"""Exercise 4's reference answers as printed in the lecture (reported, for comparison only)."""


def exercise4(layout: HybridLayout = L7B) -> dict:
    """Compute exercise 4 for prefixes A (500 tokens) and B (8,000 tokens): TFLOP saved, MB held, kFLOP/B."""
    out = {}
    for name, rep in EXERCISE4_REPORTED.items():
        n = rep["tokens"]
        fl = float(layout.prefill_flops(n))
        b = float(layout.entry_bytes(n))
        out[name] = {"tokens": n, "tflop": fl / 1e12, "mb": b / 1e6, "kflop_per_byte": fl / b / 1e3}
    return out


def efficiency_table(lengths, layouts: dict) -> dict:
    """kFLOP saved per byte held for each layout (name -> HybridLayout) at each prefix length (seed code 02 demo 1)."""
    lengths = np.asarray(lengths)
    return {name: lay.flop_efficiency(lengths) / 1e3 for name, lay in layouts.items()}
