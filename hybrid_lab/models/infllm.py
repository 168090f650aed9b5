"""InfLLM-V2 block selection and block-sparse attention (the sparse backbone SparDA builds on).

For query i of layer l the attended KV blocks are (seed 002, Eq. 1)

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

from hybrid_lab.ops.registry import swappable
from hybrid_lab.ops.sparse_attention import topk_indices

__all__ = [
    "compress_keys", "compressed_spans", "compressed_visible", "group_scores", "block_overlap",
    "pool_to_blocks", "select_blocks", "infllm_v2_select", "blocks_from_compressed", "block_sparse_attention",
    "default_q_pos", "n_blocks",
]


def _pos_int(name, value, minimum=1):
    if not (isinstance(value, (int, np.integer)) and value >= minimum):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_window(window, stride):
    window, stride = _pos_int("window", window), _pos_int("stride", stride)
    if window < stride:
        raise ValueError(f"window must be >= stride (overlapping or touching windows cover every token), "
                         f"got window={window} < stride={stride}")
    return window, stride


def n_blocks(S: int, block_size: int = 64) -> int:
    """Number of KV blocks covering S tokens (the last one may be partial)."""
    return -(-int(S) // int(block_size))


def default_q_pos(S: int, T: int) -> np.ndarray:
    """Queries are the last T of S positions: S - T + arange(T)."""
    return np.arange(S - T, S, dtype=np.int64)


def _check_q_pos(q_pos, S, T):
    if q_pos is None:
        if T > S:
            raise ValueError(f"without q_pos the T={T} queries must be the last of S={S} positions (T <= S)")
        return default_q_pos(S, T)
    q_pos = np.asarray(q_pos)
    if q_pos.shape != (T,) or not np.issubdtype(q_pos.dtype, np.integer):
        raise ValueError(f"q_pos must be an integer array of shape (T={T},), got {q_pos.dtype} {q_pos.shape}")
    if T and (q_pos.min() < 0 or q_pos.max() >= S):
        raise ValueError(f"q_pos entries must lie in [0, S={S}), got range [{q_pos.min()}, {q_pos.max()}]")
    return q_pos.astype(np.int64)


def compress_keys(k: np.ndarray, window: int = 32, stride: int = 16) -> np.ndarray:
    """Overlapping mean pooling of keys: kc[:, j] = mean(k[:, j·stride : j·stride + window]).

    k: (B, S, Hkv, d). Returns kc: (B, Nc, Hkv, d) with Nc = (S - window) // stride + 1 full windows (0 if
    S < window). Trailing tokens not covered by a full window have no compressed key yet (they are recent, so
    the local blocks cover them), which is how ragged lengths (S not a multiple of the stride) are handled.
    """
    window, stride = _check_window(window, stride)
    k = np.asarray(k)
    if k.ndim != 4:
        raise ValueError(f"k must be 4-D (B, S, Hkv, d), got shape {k.shape}")
    B, S, H, d = k.shape
    Nc = 0 if S < window else (S - window) // stride + 1
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
    starts = np.arange(Nc, dtype=np.int64) * stride
    return starts, starts + window


def compressed_visible(q_pos, Nc: int, window: int = 32, stride: int = 16) -> np.ndarray:
    """(T, Nc) bool: compressed position j is visible to a query at q_pos[t] iff its window ended by then."""
    _, ends = compressed_spans(Nc, window, stride)
    return (ends[None, :] - 1) <= np.asarray(q_pos)[:, None]


def _check_qk(q, kc):
    q, kc = np.asarray(q), np.asarray(kc)
    if q.ndim != 4 or kc.ndim != 4:
        raise ValueError(f"q must be (B, T, Hq, d) and kc (B, Nc, Hkv, d); got q{q.shape} kc{kc.shape}")
    B, T, Hq, d = q.shape
    if kc.shape[0] != B or kc.shape[3] != d:
        raise ValueError(f"kc must be (B={B}, Nc, Hkv, d={d}), got {kc.shape}")
    Hkv = kc.shape[2]
    if Hkv == 0 or Hq % Hkv:
        raise ValueError(f"GQA groups mismatch: query heads Hq={Hq} must be a multiple of KV heads Hkv={Hkv}")
    return q, kc


def group_scores(q, kc, q_pos=None, S=None, window: int = 32, stride: int = 16, scale=None) -> np.ndarray:
    """Per GQA group, the sum over its G query heads of softmax(q·kc / τ) over the visible compressed keys.

    q: (B, T, Hq, d) queries at absolute positions q_pos (default: the last T of S positions);
    kc: (B, Nc, Hkv, d) compressed keys of the same layer; S: sequence length (default: the smallest S whose
    compression has Nc windows). scale = 1/τ defaults to d**-0.5.
    Returns (B, T, Hkv, Nc) float64 on the compressed grid, values in [0, G]; 0 where not visible.
    """
    q, kc = _check_qk(q, kc)
    B, T, Hq, d = q.shape
    Nc, Hkv = kc.shape[1], kc.shape[2]
    window, stride = _check_window(window, stride)
    if S is None:
        S = max(T, (Nc - 1) * stride + window if Nc else 0)
    q_pos = _check_q_pos(q_pos, S, T)
    G = Hq // Hkv
    scale = d ** -0.5 if scale is None else scale
    vis = compressed_visible(q_pos, Nc, window, stride)                      # (T, Nc)
    logits = np.einsum("btgjd,bngd->btgjn", q.reshape(B, T, Hkv, G, d).astype(np.float64), kc) * scale
    logits = np.where(vis[None, :, None, None, :], logits, -np.inf)
    m = logits.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(logits - m)
    den = p.sum(axis=-1, keepdims=True)
    p = p / np.where(den > 0, den, 1.0)                                      # a query with nothing visible: all 0
    return p.sum(axis=3)                                                      # sum over the G heads of the group


def block_overlap(n_blocks_: int, Nc: int, block_size: int = 64, window: int = 32, stride: int = 16):
    """For each KV block, the contiguous range of compressed positions whose window overlaps it.

    Returns (lo, hi): (n_blocks,) int arrays, block b pools compressed positions lo[b] .. hi[b] (inclusive;
    empty when hi < lo). With (32, 16) and 64-token blocks each block pools 5 positions (4b-1 .. 4b+3).
    """
    window, stride = _check_window(window, stride)
    block_size = _pos_int("block_size", block_size)
    b = np.arange(n_blocks_, dtype=np.int64)
    lo = np.maximum(0, (b * block_size - window) // stride + 1)              # first j with j·s + l > b·B
    hi = np.minimum(Nc - 1, -(-((b + 1) * block_size) // stride) - 1)        # last j with j·s < (b+1)·B
    return lo, hi


def pool_to_blocks(scores_c, n_blocks_: int, block_size: int = 64, window: int = 32, stride: int = 16):
    """Max-pool compressed-grid scores onto KV blocks.

    scores_c: (..., Nc) on the compressed grid (-inf allowed for masked entries). Returns (..., n_blocks):
    block b gets the max over the compressed positions overlapping it; -inf if none exists.
    """
    scores_c = np.asarray(scores_c, dtype=np.float64)
    if scores_c.ndim < 1:
        raise ValueError(f"scores_c must have a last axis Nc, got shape {scores_c.shape}")
    n_blocks_ = _pos_int("n_blocks", n_blocks_, 0)
    Nc = scores_c.shape[-1]
    lo, hi = block_overlap(n_blocks_, Nc, block_size, window, stride)
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
    topk highest-scoring visible blocks outside init ∪ local (ties to the smaller block id).
    Returns (B, T, Hkv, n_init + n_local + topk) int64 block ids, ascending, -1 padded at the end; never a
    block that starts after q_pos. topk larger than the candidate blocks (Nb - n_init - n_local) is an error.
    """
    s = np.asarray(block_scores, dtype=np.float64)
    if s.ndim != 4:
        raise ValueError(f"block_scores must be 4-D (B, T, Hkv, Nb), got shape {s.shape}")
    Bt, T, H, Nb = s.shape
    q_pos = np.asarray(q_pos)
    if q_pos.shape != (T,) or not np.issubdtype(q_pos.dtype, np.integer) or (T and q_pos.min() < 0):
        raise ValueError(f"q_pos must be a non-negative integer array of shape (T={T},), got {q_pos.dtype} {q_pos.shape}")
    if T and q_pos.max() // block_size >= Nb:
        raise ValueError(f"q_pos max {q_pos.max()} lies beyond the Nb={Nb} blocks of {block_size} tokens")
    topk = _pos_int("topk", topk, 0)
    n_init, n_local = _pos_int("n_init", n_init, 0), _pos_int("n_local", n_local, 0)
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
    dyn = topk_indices(masked, topk) if topk else np.zeros((Bt, T, H, 0), np.int64)
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
    softmax is monotone and can be skipped; mask invisible positions with -inf, not 0).
    """
    bs = pool_to_blocks(scores_c, n_blocks(S, block_size), block_size, window, stride)
    return select_blocks(bs, q_pos, topk, block_size, n_init, n_local), bs


def infllm_v2_select(q, k, topk: int, block_size: int = 64, window: int = 32, stride: int = 16,
                     n_init: int = 1, n_local: int = 2, q_pos=None, scale=None):
    """The original InfLLM-V2 selector of one layer: its own queries score its own compressed keys.

    q: (B, T, Hq, d), k: (B, S, Hkv, d). Returns (block_idx (B, T, Hkv, n_init+n_local+topk), block_scores
    (B, T, Hkv, Nb), scores_c (B, T, Hkv, Nc)).
    """
    q, k = np.asarray(q), np.asarray(k)
    if k.ndim != 4 or q.ndim != 4:
        raise ValueError(f"q must be 4-D (B, T, Hq, d) and k (B, S, Hkv, d); got q{q.shape} k{k.shape}")
    S, T = k.shape[1], q.shape[1]
    q_pos = _check_q_pos(q_pos, S, T)
    kc = compress_keys(k, window, stride)
    sc = group_scores(q, kc, q_pos, S, window, stride, scale)
    vis = compressed_visible(q_pos, kc.shape[1], window, stride)[None, :, None, :]
    sc_masked = np.where(vis, sc, -np.inf)           # a visible zero-probability key still beats an invisible one
    idx, bs = blocks_from_compressed(sc_masked, S, q_pos, topk, block_size, window, stride, n_init, n_local)
    return idx, bs, sc


@swappable("block_sparse_attention")
def block_sparse_attention(q, k, v, block_idx, block_size=64, scale=None, q_pos=None):
    """Attention restricted to listed KV blocks: one softmax over the causal tokens of the selected blocks.

    q: (B, T, Hq, d); k: (B, S, Hkv, d); v: (B, S, Hkv, dv); block_idx: (B, T, Hkv, nb) int block ids, -1
    padded, unique per row; the Hq // Hkv heads of a group share the group's blocks. Query t reads token s iff
    s's block is listed and s <= q_pos[t] (default S - T + arange(T)). scale defaults to d**-0.5.
    A query with no readable token outputs 0. Returns o: (B, T, Hq, dv).
    """
    q, k, v, block_idx = np.asarray(q), np.asarray(k), np.asarray(v), np.asarray(block_idx)
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"q, k, v must be 4-D (B, T/S, H, d); got q{q.shape} k{k.shape} v{v.shape}")
    Bt, T, Hq, d = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    if k.shape[0] != Bt or k.shape[3] != d or v.shape[:3] != k.shape[:3]:
        raise ValueError(f"k must be (B={Bt}, S, Hkv, d={d}) and v (B, S, Hkv, dv) matching it; got k{k.shape} v{v.shape}")
    if Hkv == 0 or Hq % Hkv:
        raise ValueError(f"GQA groups mismatch: query heads Hq={Hq} must be a multiple of KV heads Hkv={Hkv}")
    block_size = _pos_int("block_size", block_size)
    Nb = n_blocks(S, block_size)
    if block_idx.ndim != 4 or block_idx.shape[:3] != (Bt, T, Hkv):
        raise ValueError(f"block_idx must have shape (B={Bt}, T={T}, Hkv={Hkv}, nb), got {block_idx.shape}")
    if not np.issubdtype(block_idx.dtype, np.integer):
        raise ValueError(f"block_idx must be an integer array, got dtype {block_idx.dtype}")
    if block_idx.size and ((block_idx < -1).any() or (block_idx >= Nb).any()):
        raise ValueError(f"block_idx entries must lie in [-1, Nb={Nb}), got range [{block_idx.min()}, {block_idx.max()}]")
    srt = np.sort(block_idx, axis=-1)
    if ((srt[..., 1:] == srt[..., :-1]) & (srt[..., 1:] >= 0)).any():
        raise ValueError("block_idx must not repeat a block within one row")
    q_pos = _check_q_pos(q_pos, S, T)
    G, dv = Hq // Hkv, v.shape[3]
    scale = d ** -0.5 if scale is None else scale
    out_dtype = np.result_type(q.dtype, np.float32)
    # block list -> (B, T, Hkv, Nb) membership (column Nb absorbs the -1 padding)
    member = np.zeros((Bt, T, Hkv, Nb + 1), bool)
    np.put_along_axis(member, np.where(block_idx < 0, Nb, block_idx), True, axis=-1)
    member = member[..., :Nb]
    o = np.zeros((Bt, T, Hkv, G, dv), out_dtype)
    qg = q.reshape(Bt, T, Hkv, G, d)
    s_ar = np.arange(S)
    chunk = max(1, int(2 ** 22 // max(1, Bt * Hq * S)))                      # bound the (.., S) logits buffer
    for t0 in range(0, T, chunk):
        t1 = min(T, t0 + chunk)
        tok = np.repeat(member[:, t0:t1], block_size, axis=-1)[..., :S]     # (B, t, Hkv, S)
        tok &= (s_ar[None, :] <= q_pos[t0:t1, None])[None, :, None, :]
        logits = np.einsum("btgjd,bsgd->btgjs", qg[:, t0:t1], k) * scale
        logits = np.where(tok[:, :, :, None, :], logits, -np.inf)
        m = logits.max(axis=-1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0.0)
        p = np.exp(logits - m)
        den = p.sum(axis=-1, keepdims=True)
        p /= np.where(den > 0, den, 1.0)
        o[:, t0:t1] = np.einsum("btgjs,bsgd->btgjd", p, v)
    return o.reshape(Bt, T, Hq, dv)
