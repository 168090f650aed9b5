"""The bytes-and-FLOPs ledger of attention, SSM and hybrid models (seed 003 §1, §3, §4.1; exercises 1, 2, 5).

All sizes in bytes; GB = 1e9 bytes (as in the lecture). The 7B hybrid is Marconi's: 4 attention + 24 SSM + 28 MLP
layers, d_model 4,096, 32 heads × 128, FP16; each SSM layer's state is 4,096 × 128 numbers (exercise 1).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from hybrid_lab.costs.shape7b import L7B

GB = 1e9


@dataclass(frozen=True)
class ModelShape:
    """What the ledger needs of a model. ``n_kv_heads < n_heads`` is GQA; ``n_ssm > 0`` makes it hybrid."""

    name: str
    n_attn: int
    n_ssm: int = 0
    d_model: int = 4096
    n_heads: int = 32
    n_kv_heads: int = 32
    d_head: int = 128
    ssm_d_inner: int = 4096
    ssm_d_state: int = 128
    bytes_per_elem: int = 2
    params: float = L7B.params   # non-embedding parameters P, for the 2·P·L part of prefill FLOPs

    def __post_init__(self):
        for f in ("n_attn", "n_ssm"):
            if getattr(self, f) < 0:
                raise ValueError(f"{f} must be >= 0, got {getattr(self, f)}")
        for f in ("d_model", "n_heads", "n_kv_heads", "d_head", "ssm_d_inner", "ssm_d_state", "bytes_per_elem"):
            if getattr(self, f) <= 0:
                raise ValueError(f"{f} must be > 0, got {getattr(self, f)}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads={self.n_heads} must be a multiple of n_kv_heads={self.n_kv_heads}")


# P of each model from the parameter count in ``flops7b`` (SwiGLU MLPs of 14,336, Mamba-2 mixers, MHA).
_P_DENSE = L7B.with_(n_attn=32, n_ssm=0, n_mlp=32).params
TRANSFORMER_7B = ModelShape("Transformer 7B (32 attention layers, MHA)", n_attn=32, params=_P_DENSE)
# GQA: K and V projections shrink from d×d to d×(8·128)
GQA_7B = ModelShape("Transformer 7B, GQA 8 KV heads", n_attn=32, n_kv_heads=8,
                    params=_P_DENSE - 32 * 2 * 4096 * (4096 - 8 * 128))
HYBRID_7B = ModelShape("Hybrid 7B (4 attention + 24 SSM + 28 MLP)", n_attn=4, n_ssm=24, params=L7B.params)


def _nonneg(name, v):
    v = np.asarray(v)
    if (v < 0).any():
        raise ValueError(f"{name} must be >= 0, got {v}")
    return v


def kv_bytes_per_token(m: ModelShape) -> int:
    """K and V of every attention layer: 2 · n_attn · n_kv_heads · d_head · bytes (7B hybrid: 65,536 B)."""
    return 2 * m.n_attn * m.n_kv_heads * m.d_head * m.bytes_per_elem


def ssm_state_bytes(m: ModelShape) -> int:
    """One full SSM state (all SSM layers), independent of length (7B hybrid: 25,165,824 B)."""
    return m.n_ssm * m.ssm_d_inner * m.ssm_d_state * m.bytes_per_elem


def state_in_tokens(m: ModelShape) -> float:
    """How many tokens of KV one full SSM state weighs (exercise 1: 384). Also the length at which KV = state."""
    return ssm_state_bytes(m) / kv_bytes_per_token(m)


def sequence_bytes(m: ModelShape, L):
    """KV + one live SSM state of a sequence of L tokens."""
    L = _nonneg("L", L)
    return L * kv_bytes_per_token(m) + ssm_state_bytes(m)


def snapshot_bytes(m: ModelShape, L: int, every: int) -> int:
    """A sequence of L tokens whose SSM states are snapshotted every ``every`` tokens: floor(L/every) states + its KV.

    (10K tokens every 16: 16.4 GB; every 32: 7.85 GB of states + 0.66 GB of KV.)
    """
    _nonneg("L", L)
    if every <= 0:
        raise ValueError(f"every must be > 0, got {every}")
    return (L // every) * ssm_state_bytes(m) + L * kv_bytes_per_token(m)


def bounded_snapshot_bytes(m: ModelShape, L: int, n_states: int = 2) -> int:
    """Marconi keeps at most ``n_states`` states per sequence (a branch point and the last decoded token)."""
    _nonneg("L", L)
    _nonneg("n_states", n_states)
    return n_states * ssm_state_bytes(m) + L * kv_bytes_per_token(m)


def max_batch(m: ModelShape, L, hbm_bytes: float = 80e9, weight_bytes: float = 14e9):
    """How many sequences of L tokens fit in decode memory: floor((HBM − weights) / per-sequence bytes)."""
    if hbm_bytes <= weight_bytes:
        raise ValueError(f"hbm_bytes ({hbm_bytes}) must exceed weight_bytes ({weight_bytes})")
    return np.floor((hbm_bytes - weight_bytes) / sequence_bytes(m, L)).astype(int)


def decode_bytes_read(m: ModelShape, L):
    """Bytes of history one decode step reads at context L: all KV + the SSM states (weights not counted)."""
    return sequence_bytes(m, L)


def prefill_flops(m: ModelShape, L):
    """Prefill FLOPs ≈ 2·P·L (every weight once per token) + 2·n_attn·d_model·L² (QKᵀ and PV, causal half)."""
    L = _nonneg("L", np.asarray(L, dtype=np.float64))
    return 2.0 * m.params * L + 2.0 * m.n_attn * m.d_model * L ** 2


def three_costs(m: ModelShape, L):
    """The three costs of attention at context L: KV memory, bytes read per decode step, prefill FLOPs."""
    L = np.asarray(L)
    return {"kv_memory_bytes": sequence_bytes(m, L), "decode_read_bytes": decode_bytes_read(m, L),
            "prefill_flops": prefill_flops(m, L)}


def with_state_dim(m: ModelShape, d_state: int) -> ModelShape:
    return replace(m, ssm_d_state=d_state)
