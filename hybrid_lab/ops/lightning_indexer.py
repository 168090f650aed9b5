"""DeepSeek-V3.2's lightning indexer as a swappable op: score every cached token cheaply, keep the top-k.

    I[t, s] = Σ_j w[t, j] · ReLU(q[t, j] · k[s])        (j over a few index heads; ONE key k[s] per token)

q[t, j] (index-head queries) and w[t, j] (head weights) come from the query token's hidden state x_t, k[s] from the
cached token's hidden state x_s (DeepSeek-V3.2 report §2.1). Few heads, a small dimension and FP8 make it far
cheaper per (query, key) pair than the main MLA attention, but it still touches every pair: O(L²).
The trainable indexer and its KL losses live in ``hybrid_lab.models.lightning_indexer``; the Triton twin in
``gpu_track.lightning_indexer``. The arguments are checked once by ``contracts.check_lightning_indexer``.
"""
from __future__ import annotations

import numpy as np

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
    scores = np.where(visible[None], scores, -np.inf)
    return scores, topk_indices(scores, topk)
