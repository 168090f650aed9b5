"""The bytes-and-FLOPs ledger of attention, SSM and hybrid models (lecture 10 §1 the three costs, §3 the hybrid's
batch, §4.1 the cost of snapshots; exercises 1, 2 and 5; Marconi appendix A).

Every number comes from the one shape, :class:`~hybrid_lab.costs.shape7b.HybridLayout` (its KV-per-token, state and
prefill-FLOP formulas); this module only combines them per sequence. All sizes in bytes; GB = 1e9 bytes (as in the
lecture). Models: ``TRANSFORMER_7B``, ``GQA_7B``, ``HYBRID_7B`` (Marconi's 7B hybrid: 4 attention + 24 SSM + 28 MLP
layers, d_model 4,096, 32 heads × 128, FP16; each SSM layer's state is 4,096 × 128 numbers, exercise 1).
"""
from __future__ import annotations

import warnings

import numpy as np

from hybrid_lab.core import checks
from hybrid_lab.costs.shape7b import GQA_7B, HYBRID_7B, TRANSFORMER_7B, HybridLayout, check_layout, token_counts

__all__ = ["GB", "HybridLayout", "TRANSFORMER_7B", "GQA_7B", "HYBRID_7B", "ModelShape", "kv_bytes_per_token",
           "ssm_state_bytes", "state_in_tokens", "sequence_bytes", "snapshot_bytes", "bounded_snapshot_bytes",
           "max_batch", "decode_bytes_read", "weight_bytes", "decode_step_bytes", "prefill_flops", "three_costs"]

GB = 1e9


def ModelShape(name: str, n_attn: int, n_ssm: int = 0, d_model: int = 4096, n_heads: int = 32,
               n_kv_heads: int | None = None, d_head: int | None = None, ssm_d_inner: int | None = None,
               ssm_d_state: int = 128, bytes_per_elem: int = 2, params=None) -> HybridLayout:
    """Deprecated, removed in the next release: build the one shape, :class:`HybridLayout`, from the old ledger's
    arguments (ssm_d_state -> d_state, bytes_per_elem -> dtype_bytes, one MLP per block: n_mlp = n_attn + n_ssm).

    The old free numbers are now derived, so a value that disagrees raises ValueError: d_head = d_model / n_heads;
    the state width is d_model (``ssm_d_inner``); P is counted from the widths (``params``).
    """
    warnings.warn("ledger.ModelShape is deprecated and will be removed; use hybrid_lab.costs.shape7b.HybridLayout",
                  DeprecationWarning, stacklevel=2)
    n_mlp = checks.nonneg_int("n_attn", n_attn) + checks.nonneg_int("n_ssm", n_ssm)
    m = HybridLayout(n_attn=n_attn, n_ssm=n_ssm, n_mlp=n_mlp, d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv_heads,
                     d_state=checks.pos_int("ssm_d_state", ssm_d_state),
                     dtype_bytes=checks.pos_int("bytes_per_elem", bytes_per_elem), name=name)
    for arg, given, derived in (("d_head", d_head, m.d_head), ("ssm_d_inner", ssm_d_inner, m.d_model),
                                ("params", params, m.params)):
        if given is not None and given != derived:
            raise ValueError(f"{arg} is derived by the one shape (HybridLayout): expected {derived:,}, got {given!r}")
    return m


def kv_bytes_per_token(m: HybridLayout) -> int:
    """K and V of every attention layer: 2 · n_attn · n_kv_heads · d_head · bytes (7B hybrid: 65,536 B)."""
    return check_layout("m", m).kv_bytes_per_token


def ssm_state_bytes(m: HybridLayout) -> int:
    """One full SSM state (all SSM layers), independent of length (7B hybrid: 25,165,824 B)."""
    return check_layout("m", m).state_bytes


def state_in_tokens(m: HybridLayout) -> float:
    """How many tokens of KV one full SSM state weighs (exercise 1: 384); also the length at which KV = state.
    ``inf`` for a model without attention layers (its KV never catches up), 0 for one without SSM layers."""
    return check_layout("m", m).state_in_tokens


def sequence_bytes(m: HybridLayout, L):
    """KV + one live SSM state of a sequence of L tokens (L: number or array, finite, >= 0). Returns float64."""
    return check_layout("m", m).entry_bytes(token_counts("L", L), 1)


def snapshot_bytes(m: HybridLayout, L, every: int):
    """A sequence of L tokens whose SSM states are snapshotted every ``every`` tokens: floor(L/every) states + its KV.

    (10K tokens every 16: 16.4 GB; every 32: 7.85 GB of states + 0.66 GB of KV.)
    """
    m, L = check_layout("m", m), token_counts("L", L)
    return m.entry_bytes(L, L // checks.pos_int("every", every))


def bounded_snapshot_bytes(m: HybridLayout, L, n_states: int = 2):
    """Marconi keeps at most ``n_states`` states per sequence (a branch point and the last decoded token)."""
    return check_layout("m", m).entry_bytes(token_counts("L", L), checks.nonneg_int("n_states", n_states))


def weight_bytes(m: HybridLayout) -> int:
    """Bytes of the non-embedding weights, P · dtype bytes (Transformer 7B: 7.78B parameters, 15.57 GB in FP16).
    Every decode step reads them once, whatever the batch; the embedding / LM head (vocabulary × d_model) is not in P."""
    m = check_layout("m", m)
    return int(m.params) * int(m.dtype_bytes)


def max_batch(m: HybridLayout, L, hbm_bytes: float = 80e9, weight_bytes=None):
    """How many sequences of L tokens fit in decode memory: floor((HBM − weights) / per-sequence bytes). Returns int
    array of L's shape. weight_bytes: None = the model's own non-embedding weights (``weight_bytes(m)``)."""
    hbm = checks.positive_number("hbm_bytes", hbm_bytes)
    if weight_bytes is None:
        weight_bytes = globals()["weight_bytes"](m)
    if hbm <= checks.nonneg_number("weight_bytes", weight_bytes):
        raise ValueError(f"hbm_bytes ({hbm_bytes}) must exceed weight_bytes ({weight_bytes})")
    per_seq = sequence_bytes(m, L)
    if (per_seq == 0).any():
        raise ValueError("L must be > 0 for a model without SSM state: an empty sequence holds no bytes, so any "
                         "batch fits")
    return np.floor((hbm - float(weight_bytes)) / per_seq).astype(int)


def decode_bytes_read(m: HybridLayout, L):
    """Bytes of history one decode step reads at context L: all KV + the SSM states (weights not counted)."""
    return sequence_bytes(m, L)


def decode_step_bytes(m: HybridLayout, L, batch: int = 1):
    """Bytes one decode step reads for `batch` sequences of L tokens: the weights once (shared by the batch) + every
    sequence's KV and SSM states. Divide by the batch for the bytes per generated token."""
    batch = checks.pos_int("batch", batch)
    return weight_bytes(m) + batch * decode_bytes_read(m, L)


def prefill_flops(m: HybridLayout, L):
    """Prefill FLOPs ≈ 2·P·L (every weight once per token) + 2·n_attn·d_model·L² (QKᵀ and PV, causal half)."""
    return check_layout("m", m).prefill_flops(L)


def three_costs(m: HybridLayout, L) -> dict:
    """The three costs of attention at context L (number or array, finite, >= 0): KV memory, bytes read per decode
    step, prefill FLOPs."""
    return {"kv_memory_bytes": sequence_bytes(m, L), "decode_read_bytes": decode_bytes_read(m, L),
            "prefill_flops": prefill_flops(m, L)}
