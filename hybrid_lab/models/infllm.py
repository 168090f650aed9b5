"""InfLLM-V2 block selection (the sparse backbone SparDA builds on); the attention over the selected blocks is the
swappable op ``hybrid_lab.ops.block_sparse.block_sparse_attention``.

For query i of layer l the attended KV blocks are (SparDA §3.1, Eq. 1)

    B_l(i) = B_init ∪ B_local(i) ∪ B_topk(i)

and the dynamic part B_topk comes from a three-step selector:

1. compressed keys: overlapping mean pooling of the keys, window l_C = 32, stride s_C = 16
   (``compress_keys``); compressed position j summarizes tokens [j·s_C, j·s_C + l_C);
2. per GQA group, each of the G query heads takes a softmax over the visible compressed keys and the G
   distributions are summed (``group_scores``);
3. the compressed-grid scores are max-pooled onto 64-token KV blocks (``pool_to_blocks``) and the top-k
   candidate blocks are kept (``select_blocks``).

Compressed positions (a grid of stride 16, about T/16 entries) and KV blocks (64 tokens, the unit that is moved
and attended) are different objects: functions here say which one they take (``_c`` = compressed grid,
``_b`` = blocks). Causality: compressed position j is visible to the query at absolute position p iff its whole
window is in the past (j·s_C + l_C - 1 <= p); block b is visible iff it starts at or before p, and attention
inside a visible block still masks tokens s > p.
"""
from __future__ import annotations

import numpy as np

from hybrid_lab.core import checks
from hybrid_lab.core.blocks import softmax_with_sink
from hybrid_lab.ops.contracts import n_blocks
from hybrid_lab.ops.sparse_attention import topk_indices

__all__ = [
    "compress_keys", "compressed_spans", "compressed_visible", "group_scores", "block_overlap",
    "pool_to_blocks", "select_blocks", "infllm_v2_select", "blocks_from_compressed",
]


def _check_window(window, stride):
    window, stride = checks.pos_int("window", window), checks.pos_int("stride", stride)
    if window < stride:
        raise ValueError(f"window must be >= stride (overlapping or touching windows cover every token), "
                         f"got window={window} < stride={stride}")
    return window, stride


def _n_compressed(S: int, window: int, stride: int) -> int:
    """Full compression windows over S tokens: (S - window) // stride + 1, or 0 when S < window."""
    return 0 if S < window else (S - window) // stride + 1


def compress_keys(k: np.ndarray, window: int = 32, stride: int = 16) -> np.ndarray:
    """Overlapping mean pooling of keys: kc[:, j] = mean(k[:, j·stride : j·stride + window]).

    k: (B, S, Hkv, d). Returns kc: (B, Nc, Hkv, d) with Nc = (S - window) // stride + 1 full windows (0 if
    S < window). Trailing tokens not covered by a full window have no compressed key yet (they are recent, so
    the local blocks cover them), which is how ragged lengths (S not a multiple of the stride) are handled.
    """
    window, stride = _check_window(window, stride)
    k = checks.finite_array("k", k, 4, "(B, S, Hkv, d)")
    B, S, H, d = k.shape
    Nc = _n_compressed(S, window, stride)
    out_dtype = np.result_type(k.dtype, np.float32)
    if Nc == 0:
        return np.zeros((B, 0, H, d), out_dtype)
    # prefix sums make every window an O(1) difference (vectorized, no Python loop over windows)
    cs = np.concatenate([np.zeros((B, 1, H, d)), np.cumsum(k, axis=1, dtype=np.float64)], axis=1)
    starts = np.arange(Nc) * stride
    kc = (cs[:, starts + window] - cs[:, starts]) / window
    return kc.astype(out_dtype, copy=False)


def compressed_spans(Nc: int, window: int = 32, stride: int = 16):
    """Token span [start, end) summarized by each compressed position: two (Nc,) int arrays."""
    window, stride = _check_window(window, stride)
    Nc = checks.nonneg_int("Nc", Nc)
    checks.output_size("Nc", (Nc,))
    starts = np.arange(Nc, dtype=np.int64) * stride
    return starts, starts + window


def compressed_visible(q_pos, Nc: int, window: int = 32, stride: int = 16) -> np.ndarray:
    """(T, Nc) bool: compressed position j is visible to a query at q_pos[t] iff its window ended by then."""
    _, ends = compressed_spans(Nc, window, stride)
    q_pos = checks.int_array("q_pos", q_pos, 1, "(T,)", lo=0)
    checks.output_size("Nc (the mask is T x Nc, T = len(q_pos))", (len(q_pos), len(ends)))
    return (ends[None, :] - 1) <= q_pos[:, None]


def _check_qk(q, kc):
    q = checks.finite_array("q", q, 4, "(B, T, Hq, d)")
    kc = checks.finite_array("kc", kc, 4, "(B, Nc, Hkv, d)")
    B, T, Hq, d = q.shape
    if kc.shape[0] != B or kc.shape[3] != d:
        raise ValueError(f"kc must be (B={B}, Nc, Hkv, d={d}), got {kc.shape}")
    checks.heads(Hq, kc.shape[2], "Hq (heads of q)", "Hkv (heads of kc)")
    return q, kc


def group_scores(q, kc, q_pos=None, S=None, window: int = 32, stride: int = 16, scale=None) -> np.ndarray:
    """Per GQA group, the sum over its G query heads of softmax(q·kc / τ) over the visible compressed keys.

    q: (B, T, Hq, d) queries at absolute positions q_pos (default: the last T of S positions);
    kc: (B, Nc, Hkv, d) compressed keys of the same layer; S: sequence length (default: the smallest S whose
    compression has Nc windows). scale = 1/τ defaults to d**-0.5.
    Returns (B, T, Hkv, Nc) float64 on the compressed grid, values in [0, G]; 0 where not visible. Nc = 0 (fewer
    than ``window`` tokens: no compressed key yet) gives an empty (B, T, Hkv, 0) array.
    """
    q, kc = _check_qk(q, kc)
    B, T, Hq, d = q.shape
    Nc, Hkv = kc.shape[1], kc.shape[2]
    window, stride = _check_window(window, stride)
    if S is None:
        S = max(T, (Nc - 1) * stride + window if Nc else 0)
    elif _n_compressed(checks.nonneg_int("S", S), window, stride) != Nc:
        raise ValueError(f"kc must hold the {_n_compressed(S, window, stride)} compressed keys of S={S} tokens "
                         f"(window {window}, stride {stride}), got Nc={Nc}")
    q_pos = checks.query_positions(q_pos, T, S)
    G = Hq // Hkv
    scale = d ** -0.5 if scale is None else checks.positive_number("scale", scale)
    vis = compressed_visible(q_pos, Nc, window, stride)                      # (T, Nc)
    if Nc == 0:                                  # no compressed key: nothing to score (a softmax over none)
        return np.zeros((B, T, Hkv, 0))
    logits = np.einsum("btgjd,bngd->btgjn", q.reshape(B, T, Hkv, G, d).astype(np.float64), kc) * scale
    p = softmax_with_sink(np.where(vis[None, :, None, None, :], logits, -np.inf))   # nothing visible: all 0
    return p.sum(axis=3)                                                      # sum over the G heads of the group


def block_overlap(n_blocks_: int, Nc: int, block_size: int = 64, window: int = 32, stride: int = 16):
    """For each KV block, the contiguous range of compressed positions whose window overlaps it.

    Returns (lo, hi): (n_blocks,) int arrays, block b pools compressed positions lo[b] .. hi[b] (inclusive;
    empty when hi < lo). With (32, 16) and 64-token blocks each block pools 5 positions (4b-1 .. 4b+3).
    """
    window, stride = _check_window(window, stride)
    block_size = checks.pos_int("block_size", block_size)
    Nc = checks.nonneg_int("Nc", Nc)
    n_blocks_ = checks.nonneg_int("n_blocks_", n_blocks_)
    checks.output_size("n_blocks_", (n_blocks_,))
    b = np.arange(n_blocks_, dtype=np.int64)
    lo = np.maximum(0, (b * block_size - window) // stride + 1)              # first j with j·s + l > b·B
    hi = np.minimum(Nc - 1, -(-((b + 1) * block_size) // stride) - 1)        # last j with j·s < (b+1)·B
    return lo, hi


def pool_to_blocks(scores_c, n_blocks_: int, block_size: int = 64, window: int = 32, stride: int = 16):
    """Max-pool compressed-grid scores onto KV blocks.

    scores_c: (..., Nc) on the compressed grid (-inf allowed for masked entries). Returns (..., n_blocks):
    block b gets the max over the compressed positions overlapping it; -inf if none exists.
    """
    scores_c = checks.finite_array("scores_c", scores_c, allow_neginf=True).astype(np.float64)
    if scores_c.ndim < 1:
        raise ValueError(f"scores_c must have a last axis Nc, got shape {scores_c.shape}")
    n_blocks_ = checks.nonneg_int("n_blocks_", n_blocks_)
    checks.output_size("n_blocks_ (the result is (..., n_blocks_))", scores_c.shape[:-1] + (n_blocks_,))
    Nc = scores_c.shape[-1]
    lo, hi = block_overlap(n_blocks_, Nc, block_size, window, stride)
    # n_blocks_ blocks hold S in ((n_blocks_-1)·block_size, n_blocks_·block_size] tokens: Nc must be the grid of one
    S_lo, S_hi = max(0, (n_blocks_ - 1) * block_size + 1), n_blocks_ * block_size
    Nc_lo, Nc_hi = _n_compressed(S_lo, window, stride), _n_compressed(S_hi, window, stride)
    if not Nc_lo <= Nc <= Nc_hi:
        raise ValueError(f"scores_c has Nc={Nc} compressed positions, but {n_blocks_} blocks of {block_size} tokens "
                         f"(window {window}, stride {stride}) give Nc in [{Nc_lo}, {Nc_hi}]")
    width = int(max(1, (hi - lo + 1).max(initial=1)))
    cols = lo[:, None] + np.arange(width)[None, :]                           # (n_blocks, width)
    ok = cols <= hi[:, None]
    padded = np.concatenate([scores_c, np.full(scores_c.shape[:-1] + (1,), -np.inf)], axis=-1)
    gathered = padded[..., np.where(ok, cols, Nc)]                           # (..., n_blocks, width)
    return gathered.max(axis=-1)


def select_blocks(block_scores, q_pos, topk: int, block_size: int = 64, n_init: int = 1, n_local: int = 2):
    """B(i) = B_init ∪ B_local(i) ∪ B_topk(i) for every query.

    block_scores: (B, T, Hkv, Nb) block-level scores (-inf = not selectable); q_pos: (T,) absolute positions.
    Init blocks: 0 .. n_init-1. Local blocks: the block holding q_pos and the n_local-1 before it. Top-k: the
    topk (>= 1) highest-scoring visible blocks outside init ∪ local (ties to the smaller block id).
    Returns (B, T, Hkv, n_init + n_local + topk) int64 block ids, ascending, -1 padded at the end; never a
    block that starts after q_pos. topk larger than the candidate blocks (Nb - n_init - n_local) is an error.
    """
    s = checks.finite_array("block_scores", block_scores, 4, "(B, T, Hkv, Nb)", allow_neginf=True).astype(np.float64)
    Bt, T, H, Nb = s.shape
    block_size = checks.pos_int("block_size", block_size)
    if q_pos is None:
        raise ValueError("q_pos must be given: (T,) absolute positions of the queries")
    q_pos = checks.query_positions(q_pos, T, Nb * block_size)               # the query's block must exist
    topk = checks.pos_int("topk", topk)                                      # a top-0 selection is no selection
    n_init, n_local = checks.nonneg_int("n_init", n_init), checks.nonneg_int("n_local", n_local)
    n_cand = Nb - n_init - n_local
    if topk > max(n_cand, 0):
        raise ValueError(f"topk={topk} is larger than the candidate blocks: Nb={Nb} minus n_init={n_init} "
                         f"and n_local={n_local} leaves {max(n_cand, 0)}")
    b = np.arange(Nb)
    cur = (q_pos // block_size)[:, None]                                     # (T, 1) block holding the query
    visible = b[None, :] <= cur
    init = (b[None, :] < n_init) & visible
    local = (b[None, :] > cur - n_local) & visible & ~init
    fixed = init | local                                                      # (T, Nb)
    cand = visible & ~fixed
    masked = np.where(cand[None, :, None, :], s, -np.inf)
    dyn = topk_indices(masked, topk)
    fixed_ids = np.where(np.broadcast_to(fixed[None, :, None, :], (Bt, T, H, Nb)), b, -1)
    # at most n_init + n_local fixed blocks per row: keep the largest ids (all -1 sort first)
    n_fixed = n_init + n_local
    fixed_ids = np.sort(fixed_ids, axis=-1)[..., Nb - n_fixed:] if n_fixed <= Nb else fixed_ids
    out = np.concatenate([fixed_ids, dyn], axis=-1)
    big = np.iinfo(np.int64).max
    out = np.sort(np.where(out < 0, big, out), axis=-1)
    out = np.where(out == big, -1, out)
    width = n_fixed + topk
    if out.shape[-1] < width:
        out = np.concatenate([out, np.full(out.shape[:-1] + (width - out.shape[-1],), -1, np.int64)], axis=-1)
    return out.astype(np.int64)


def blocks_from_compressed(scores_c, S: int, q_pos, topk: int, block_size: int = 64, window: int = 32,
                           stride: int = 16, n_init: int = 1, n_local: int = 2):
    """Compressed-grid scores (B, T, Hkv, Nc) -> (block_idx, block_scores): max-pool onto blocks, then select.

    Works with summed softmax scores (InfLLM-V2) and with raw logits (SparDA's Forecast: one head, so the
    softmax is monotone and can be skipped; mask invisible positions with -inf, not 0). q_pos: (T,) positions in
    [0, S) (a query sits on one of the S tokens; the blocks alone would also admit positions up to the last block's
    end).
    """
    scores_c = checks.finite_array("scores_c", scores_c, 4, "(B, T, Hkv, Nc)", allow_neginf=True)
    nb = n_blocks(S, block_size)
    if q_pos is not None:
        q_pos = checks.query_positions(q_pos, scores_c.shape[1], S)
    window, stride = _check_window(window, stride)
    if scores_c.shape[-1] != _n_compressed(S, window, stride):
        raise ValueError(f"scores_c must be on the compressed grid of S={S} tokens (window {window}, stride "
                         f"{stride}): Nc = {_n_compressed(S, window, stride)}, got shape {scores_c.shape}")
    bs = pool_to_blocks(scores_c, nb, block_size, window, stride)
    return select_blocks(bs, q_pos, topk, block_size, n_init, n_local), bs


def infllm_v2_select(q, k, topk: int, block_size: int = 64, window: int = 32, stride: int = 16,
                     n_init: int = 1, n_local: int = 2, q_pos=None, scale=None):
    """The original InfLLM-V2 selector of one layer: its own queries score its own compressed keys.

    q: (B, T, Hq, d), k: (B, S, Hkv, d). Returns (block_idx (B, T, Hkv, n_init+n_local+topk), block_scores
    (B, T, Hkv, Nb), scores_c (B, T, Hkv, Nc)).
    """
    q, k, _ = checks.qkv(q, k)                       # q and k agree (B, d, heads) before k is compressed
    S, T = k.shape[1], q.shape[1]
    q_pos = checks.query_positions(q_pos, T, S)
    checks.pos_int("block_size", block_size)         # fail before the scoring work
    kc = compress_keys(k, window, stride)
    sc = group_scores(q, kc, q_pos, S, window, stride, scale)
    vis = compressed_visible(q_pos, kc.shape[1], window, stride)[None, :, None, :]
    sc_masked = np.where(vis, sc, -np.inf)           # a visible zero-probability key still beats an invisible one
    idx, bs = blocks_from_compressed(sc_masked, S, q_pos, topk, block_size, window, stride, n_init, n_local)
    return idx, bs, sc
