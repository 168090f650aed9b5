"""The one model shape behind every cost in the lab: layer counts and widths of a hybrid (or pure-attention) LM, and
ONE formula for each cost. The three-costs ledger (``costs.ledger``, notebooks 00 and 02), Marconi's byte model
(``serving.radix_cache.ByteModel``, notebook 03) and exercises 1, 4 and 5 of lecture 10 all read them from here.

Presets (FP16, d_model 4,096, 32 query heads × 128, SwiGLU MLPs of 14,336 hidden units):

    HYBRID_7B = L7B   Marconi's 7B hybrid: 4 attention / 24 SSM (Mamba-2) / 28 MLP layers (Marconi appendix A;
                      lecture 10 §3)
    TRANSFORMER_7B    32 attention + 32 MLP layers, multi-head attention
    GQA_7B            the same with 8 KV heads (grouped-query attention)

The formulas (bytes = ``dtype_bytes`` per number):

    KV bytes per token = n_attn · 2 (K, V) · n_kv_heads · d_head · bytes                (hybrid 7B: 65,536 B)
    SSM state bytes    = n_ssm · d_model · d_state · bytes          (hybrid 7B: 25,165,824 B = 384 tokens of KV)
    P                  = non-embedding parameters: attention (W_q, W_o: d×d; W_k, W_v: d × n_kv_heads·d_head),
                         SwiGLU MLPs, Mamba-2 mixers (expand 2, head dim 64), one RMSNorm per block + the final one
    prefill FLOPs(L)   ≈ 2 · P · L  +  2 · n_attn · d_model · L²           (lecture 10's approximation: every
                         weight once per token; causal QKᵀ and PV, 4·d·L² per attention layer halved by the mask)

State width (a decision). One SSM layer's state is counted as d_model × d_state numbers, as in lecture 10's
exercise 1 and Marconi appendix A; Marconi's reported 17.4 GB for a 10K-token sequence snapshotted every 16 tokens
matches this count (16.4 GB) plus the ~6 % conv state. A Mamba-2 mixer with expand 2 actually carries d_inner = 2·d_model
channels of state; counting those would double every state number of notebooks 00, 02 and 03, so the ledger's count
is kept (the parameter count does use d_inner). The mini hybrid of notebooks 01-03 has expand 1, where both agree.

The numbers are a model, not a measurement: exercise 4's reference answers are reproduced within 1 %.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from hybrid_lab.core import checks

__all__ = ["HybridLayout", "check_layout", "token_counts", "L7B", "HYBRID_7B", "TRANSFORMER_7B", "GQA_7B",
           "EXERCISE4_REPORTED", "exercise4", "efficiency_table"]


def token_counts(name: str, n) -> np.ndarray:
    """Token (or state) counts: a number or array of finite numbers >= 0, returned as float64 (fractions allowed:
    notebook 00 evaluates the FLOPs at a real-valued crossover length)."""
    n = checks.finite_array(name, n).astype(np.float64)
    if (n < 0).any():
        raise ValueError(f"{name} must be >= 0, got min {n.min():g}")
    return n


@dataclass(frozen=True)
class HybridLayout:
    """Layer counts and widths of an LM with attention and/or SSM layers (defaults: Marconi's 7B hybrid, FP16).

    n_attn, n_ssm, n_mlp: layer counts (n_attn + n_ssm > 0); d_model = n_heads · d_head; n_kv_heads < n_heads is GQA
    (default None: = n_heads, MHA); d_state: SSM state size N; dtype_bytes: bytes per number (2 = FP16);
    mlp_hidden: SwiGLU hidden units; expand, ssm_head_dim, d_conv: the Mamba-2 mixer (parameter count only);
    name: a display label (default: generated from the counts; not part of equality).
    """

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
    n_kv_heads: int | None = None
    name: str | None = field(default=None, compare=False)

    def __post_init__(self):
        def set_(f, v):                                   # frozen: store the checked values (plain ints)
            object.__setattr__(self, f, v)

        for f in ("n_attn", "n_ssm", "n_mlp"):
            set_(f, checks.nonneg_int(f, getattr(self, f)))
        for f in ("d_model", "n_heads", "d_state", "dtype_bytes", "mlp_hidden", "expand", "ssm_head_dim", "d_conv"):
            set_(f, checks.pos_int(f, getattr(self, f)))
        set_("n_kv_heads", self.n_heads if self.n_kv_heads is None else checks.pos_int("n_kv_heads", self.n_kv_heads))
        checks.heads(self.n_heads, self.n_kv_heads, "n_heads", "n_kv_heads")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads} (d_head = d_model "
                             f"/ n_heads)")
        if (self.expand * self.d_model) % self.ssm_head_dim:
            raise ValueError(f"expand·d_model={self.expand * self.d_model} must be divisible by "
                             f"ssm_head_dim={self.ssm_head_dim}")
        if self.n_attn + self.n_ssm == 0:
            raise ValueError("a model needs at least one attention or SSM layer (n_attn + n_ssm > 0), got 0 and 0")
        if self.name is None:
            gqa = f", {self.n_kv_heads} KV heads" if self.n_kv_heads != self.n_heads else ""
            set_("name", f"{self.n_attn} attention + {self.n_ssm} SSM + {self.n_mlp} MLP layers{gqa}")
        elif not isinstance(self.name, str):
            raise ValueError(f"name must be a string, got {self.name!r}")

    def with_(self, **changes) -> "HybridLayout":
        """A copy with some fields changed, e.g. ``L7B.with_(n_attn=9, n_ssm=19)``.

        The copy gets a generated name unless ``name`` is given (the old label would describe another model), and
        an MHA layout stays MHA when ``n_heads`` changes (n_kv_heads follows unless given).
        """
        changes.setdefault("name", None)
        if "n_heads" in changes and "n_kv_heads" not in changes and self.n_kv_heads == self.n_heads:
            changes["n_kv_heads"] = None
        return replace(self, **changes)

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def bytes_per_elem(self) -> int:
        """The ledger's name for ``dtype_bytes``."""
        return self.dtype_bytes

    # ---- bytes -------------------------------------------------------------------------------------------
    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of every attention layer for one token: n_attn · 2 · n_kv_heads · d_head · bytes."""
        return self.n_attn * 2 * self.n_kv_heads * self.d_head * self.dtype_bytes

    @property
    def state_bytes(self) -> int:
        """One SSM snapshot, the states of all SSM layers: n_ssm · d_model · d_state · bytes (see "State width")."""
        return self.n_ssm * self.d_model * self.d_state * self.dtype_bytes

    @property
    def state_in_tokens(self) -> float:
        """How many tokens of KV one SSM snapshot weighs (lecture 10 exercise 1: 384), i.e. the length at which a
        sequence's KV equals its state. A model without attention never catches up: ``inf``; without SSM: 0."""
        if self.kv_bytes_per_token == 0:
            return float("inf")
        return self.state_bytes / self.kv_bytes_per_token

    def entry_bytes(self, n_tokens, n_states=1):
        """Bytes holding the KV of ``n_tokens`` tokens and ``n_states`` SSM snapshots (numbers or arrays that
        broadcast, finite and >= 0). Returns float64."""
        n_tokens = token_counts("n_tokens", n_tokens)
        n_states = token_counts("n_states", n_states)
        return n_tokens * self.kv_bytes_per_token + n_states * self.state_bytes

    # ---- parameters ----------------------------------------------------------------------------------------
    @property
    def attn_params(self) -> int:
        """One attention layer, no bias: W_q and W_o (d × d), W_k and W_v (d × n_kv_heads · d_head)."""
        return 2 * self.d_model * self.d_model + 2 * self.d_model * self.n_kv_heads * self.d_head

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

        L: a number or array of finite numbers >= 0. Returns float64 of the same shape.
        """
        L = token_counts("L", L)
        return 2.0 * self.params * L + 2.0 * self.n_attn * self.d_model * L * L

    def saved_flops(self, end, start=0):
        """FLOPs a cache hit on tokens [start, end) saves, given [0, start) is reused anyway (Marconi §4.2: savings
        are counted relative to the parent node)."""
        end, start = token_counts("end", end), token_counts("start", start)
        if (start > end).any():
            raise ValueError("start must be <= end")
        return self.prefill_flops(end) - self.prefill_flops(start)

    def flop_efficiency(self, n_tokens, n_states=1):
        """Marconi §4.2, lecture 10 exercise 4: FLOPs saved by reusing a prefix of ``n_tokens`` / bytes of its entry
        (KV + ``n_states`` snapshots). An entry of 0 bytes has no efficiency: ValueError."""
        nbytes = self.entry_bytes(n_tokens, n_states)
        if (nbytes == 0).any():
            raise ValueError("n_tokens and n_states give an entry of 0 bytes (no KV, no state): its FLOPs per byte "
                             "is undefined")
        return self.prefill_flops(n_tokens) / nbytes


def check_layout(name: str, value) -> HybridLayout:
    """``value`` if it is a :class:`HybridLayout`, else a ValueError naming the argument."""
    if not isinstance(value, HybridLayout):
        raise ValueError(f"{name} must be a HybridLayout (e.g. L7B), got {type(value).__name__}")
    return value


HYBRID_7B = L7B = HybridLayout(name="Hybrid 7B (4 attention + 24 SSM + 28 MLP)")
"""Marconi's 7B hybrid: 4 attention / 24 SSM / 28 MLP, FP16, d_model 4096, 32 heads, N = 128."""
TRANSFORMER_7B = HybridLayout(n_attn=32, n_ssm=0, n_mlp=32, name="Transformer 7B (32 attention layers, MHA)")
# GQA: K and V projections shrink from d×d to d×(8·128), and so does the KV of every token (4x smaller).
GQA_7B = HybridLayout(n_attn=32, n_ssm=0, n_mlp=32, n_kv_heads=8, name="Transformer 7B, GQA 8 KV heads")

EXERCISE4_REPORTED = {
    "A": {"tokens": 500, "tflop": 7.7, "mb": 57.9, "kflop_per_byte": 133.0},
    "B": {"tokens": 8000, "tflop": 125.2, "mb": 549.5, "kflop_per_byte": 228.0},
}
"""Lecture 10 exercise 4's reference answers as printed in the lecture (reported, for comparison only)."""


def exercise4(layout: HybridLayout = L7B) -> dict:
    """Lecture 10 exercise 4 for prefixes A (500 tokens) and B (8,000 tokens): TFLOP saved, MB held, kFLOP/B."""
    layout = check_layout("layout", layout)
    out = {}
    for name, rep in EXERCISE4_REPORTED.items():
        n = rep["tokens"]
        fl = float(layout.prefill_flops(n))
        b = float(layout.entry_bytes(n))
        out[name] = {"tokens": n, "tflop": fl / 1e12, "mb": b / 1e6, "kflop_per_byte": fl / b / 1e3}
    return out


def efficiency_table(lengths, layouts: dict) -> dict:
    """kFLOP saved per byte held (one snapshot per entry) for each layout at each prefix length (lecture 10 §4.3's
    table). lengths: (n,) token counts; layouts: {name: HybridLayout}. Returns {name: (n,) float64}."""
    if not isinstance(layouts, dict) or not layouts:
        raise ValueError(f"layouts must be a non-empty dict name -> HybridLayout, got {layouts!r}")
    if token_counts("lengths", lengths).size == 0:
        raise ValueError("lengths must hold at least one prefix length, got none")
    return {name: check_layout(f"layouts[{name!r}]", lay).flop_efficiency(lengths) / 1e3
            for name, lay in layouts.items()}
