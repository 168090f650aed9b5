"""DeepSeek-V3.2's lightning indexer as a swappable op: score every cached token cheaply, keep the top-k.

    I[t, s] = Σ_j w[t, j] · ReLU(q[t, j] · k[s])        (j over a few index heads; ONE key k[s] per token)

q[t, j] (index-head queries) and w[t, j] (head weights) come from the query token's hidden state x_t, k[s] from the
cached token's hidden state x_s (DeepSeek-V3.2 report §2.1). Few heads, a small dimension and FP8 make it far
cheaper per (query, key) pair than the main MLA attention, but it still touches every pair: O(L²).
``lightning_indexer_fp8`` is the FP8 form (e4m3 queries and keys with per-row power-of-two scales, ``quantize_fp8``):
the numpy twin of the FP8 Triton path, not a swappable op.
The trainable indexer and its KL losses live in ``hybrid_lab.models.lightning_indexer``; the Triton twin in
``gpu_track.lightning_indexer``. The arguments are checked once by ``contracts.check_lightning_indexer``.
"""
from __future__ import annotations

import numpy as np

from hybrid_lab.core import checks
from hybrid_lab.ops import contracts
from hybrid_lab.ops.contracts import float_dtype
from hybrid_lab.ops.registry import swappable
from hybrid_lab.ops.sparse_attention import topk_indices


@swappable("lightning_indexer")
def lightning_indexer(q, w, k, topk, q_pos=None):
    """Lightning-indexer scores and the top-k selection (MQA: one index set per query, shared by all its heads).

    q: (B, T, Hi, di) index queries; w: (B, T, Hi) head weights; k: (B, S, di) one shared index key per token;
    topk: int > 0; q_pos: (T,) absolute query positions, default S - T + arange(T); key s is visible to query t iff
    s <= q_pos[t] (so q_pos >= S - 1 sees every key).
    Returns scores: (B, T, S) float, I[t,s] = Σ_j w[t,j]·ReLU(q[t,j]·k[s]), -inf where not visible; and
    idx: (B, T, topk) int64 = ``topk_indices(scores, topk)`` (descending, ties to the smaller position, -1 padded when
    fewer than topk keys are visible: topk >= #visible means "all").
    """
    S = k.shape[1]
    z = np.einsum("btjd,bsd->btjs", q, k)                               # (B, T, Hi, S) per-head dot products
    scores = np.einsum("btj,btjs->bts", w, np.maximum(z, 0.0)).astype(float_dtype(q, w, k), copy=False)
    visible = np.arange(S)[None, :] <= q_pos[:, None]                    # (T, S)
    scores = contracts.check_scores(np.where(visible[None], scores, -np.inf), "q, w and k")
    return scores, topk_indices(scores, topk)


# ------------------------------------------------------------------------------------------------ FP8 (e4m3)
E4M3_MAX = 448.0        # the largest finite float8 e4m3 value (4 exponent bits, bias 7; 3 mantissa bits)


def _round_e4m3(x: np.ndarray) -> np.ndarray:
    """Round float64 values with |x| <= 448 to the nearest float8 e4m3 value, ties to even (as torch's
    ``.to(torch.float8_e4m3fn)``): quantum 2^(E - 3) for |x| in [2^E, 2^(E+1)), E >= -6; 2^-9 below 2^-6."""
    _, ex = np.frexp(x)                                     # |x| = m · 2^ex, m in [0.5, 1)
    quantum = np.exp2(np.maximum(ex - 1, -6) - 3.0)
    return np.round(x / quantum) * quantum                 # x / quantum is exact (a power of two); np.round: even


def quantize_fp8(x):
    """Per-row FP8 quantization over the last axis, as DeepSeek-V3.2 stores its indexer keys.

    scale: the smallest power of two with max|x| / scale <= 448 (1 for an all-zero row); x8 = e4m3(float32(x /
    scale)). Returns (x8, scale): x8 float64 holding e4m3 values (same shape as x), scale float64 x.shape[:-1];
    x ≈ x8 · scale[..., None], with a relative error <= 2^-4 per element. Twin of ``gpu_track.lightning_indexer
    .quantize_fp8``; powers of two make x / scale exact, so both round the same numbers.
    """
    x = checks.finite_array("x", x).astype(np.float64)
    if x.ndim < 1:
        raise ValueError(f"x must have at least one axis (rows over the last), got a scalar {x!r}")
    amax = np.abs(x).max(axis=-1, initial=0.0)
    e = np.ceil(np.log2(np.where(amax > 0, amax / E4M3_MAX, 1.0)))
    e += amax > E4M3_MAX * np.exp2(e)                      # fix a log2 rounded down ...
    e -= (amax > 0) & (amax <= E4M3_MAX * np.exp2(e - 1))  # ... or up
    scale = np.exp2(e)
    return _round_e4m3((x / scale[..., None]).astype(np.float32).astype(np.float64)), scale


def lightning_indexer_fp8(q, w, k, topk, q_pos=None):
    """The FP8 indexer as DeepSeek-V3.2 runs it, same arguments and results as :func:`lightning_indexer`.

    q is quantized per (token, head), k per token (:func:`quantize_fp8`); the query scale is folded into the head
    weight in float32 (it is > 0, so it passes through the ReLU), the key scale multiplies the summed score:
    I[t, s] = ks[s] · Σ_j wq[t, j] · ReLU(q8[t, j] · k8[s]), wq = float32(w) · qs. Computed here in float64 from the
    quantized values; the Triton path (``gpu_track.lightning_indexer.lightning_indexer_fp8``) multiplies e4m3 on
    tensor cores with float32 accumulation. Returns (scores float32, idx int64).
    """
    q, w, k, topk, q_pos = contracts.check_lightning_indexer(q, w, k, topk, q_pos)
    q8, qs = quantize_fp8(q)
    k8, ks = quantize_fp8(k)
    wq = w.astype(np.float32).astype(np.float64) * qs
    S = k.shape[1]
    z = np.einsum("btjd,bsd->btjs", q8, k8)
    scores = np.einsum("btj,btjs->bts", wq, np.maximum(z, 0.0)) * ks[:, None, :]
    scores = np.where((np.arange(S)[None, :] <= q_pos[:, None])[None], scores, -np.inf).astype(np.float32)
    return scores, topk_indices(scores, topk)
