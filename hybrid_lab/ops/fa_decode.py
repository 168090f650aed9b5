"""HySparse2's cross FA at decode (the swappable op ``fa_decode_topk``) and the SA layers' forced-window selection.

HySparse2 §3.3 (KV reuse): the SA layers of a cross group read the group's KV at the group FA's selection,

    idx(t) = forced window {q_pos - window + 1, ..., q_pos}  ∪  top-k of {s <= q_pos - window} by the FA's score,

the score being the FA's attention probability summed over the query heads of a KV group. This module holds the one
implementation of that rule, used by the op (numpy twin of ``gpu_track.fa_decode_topk``), by the model
(``hybrid_lab.models.hysparse2``) and by notebook 06. The op's arguments are checked once by
``contracts.check_fa_decode_topk``; the other public functions check their own arguments, then share the private
helpers below with the op.
"""
from __future__ import annotations

import numpy as np

from hybrid_lab.core import checks
from hybrid_lab.core.blocks import masked_attention
from hybrid_lab.ops.contracts import check_fa_attention, check_scores, float_dtype
from hybrid_lab.ops.registry import swappable
from hybrid_lab.ops.sparse_attention import topk_indices


# ------------------------------------------------------------- the rule, on arrays already checked
def _attend(q, k, v, q_pos, scale, sink):
    """(o (T, Hq, dv), score (T, Hkv, S)): causal attention of T rows and its probability summed per KV group."""
    S, Hkv = k.shape[:2]
    o, p = masked_attention(q, k, v, np.arange(S)[None, :] <= q_pos[:, None], scale, sink)
    T, Hq, _ = p.shape
    return o, p.reshape(T, Hkv, Hq // Hkv, S).sum(2)


def _outside_window(scores, q_pos, window, topk):
    """(T, Hkv, topk): top-``topk`` positions s <= q_pos - window by score (ties to the smaller s, -1 padded)."""
    outside = np.arange(scores.shape[-1])[None, :] <= (q_pos[:, None] - window)          # (T, S)
    return topk_indices(np.where(outside[:, None, :], scores, -np.inf), topk)


def _join_window(top, q_pos, window):
    """(T, Hkv, window + k) int64: the forced window q_pos - window + 1 .. q_pos (-1 where < 0), then ``top``."""
    T, Hkv = top.shape[:2]
    win = q_pos[:, None] - window + 1 + np.arange(window)[None, :]                       # (T, window)
    win = np.where(win >= 0, win, -1)
    return np.concatenate([np.broadcast_to(win[:, None, :], (T, Hkv, window)), top], axis=-1).astype(np.int64)


# ------------------------------------------------------------- public entry points (each checks its arguments)
def fa_attention(q, k, v, q_pos, scale=None, sink=None):
    """Exact causal attention of T query rows over one KV, and the FA's selection score.

    q: (T, Hq, d); k: (S, Hkv, d); v: (S, Hkv, dv); q_pos: (T,) absolute positions in [0, S) (key s visible iff
    s <= q_pos); scale defaults to d**-0.5. Returns (o: (T, Hq, dv), score: (T, Hkv, S) attention probability
    summed over each KV group's query heads).
    """
    q, k, v, q_pos, scale, sink = check_fa_attention(q, k, v, q_pos, scale, sink)
    return _attend(q, k, v, q_pos, q.shape[-1] ** -0.5 if scale is None else scale, sink)


def forced_window_select(scores, q_pos, window: int, topk: int) -> np.ndarray:
    """HySparse2's selection: the last ``window`` positions (forced) ∪ the top-``topk`` positions outside them.

    scores: (T, Hkv, S) the FA's scores, finite or -inf (never selected); values at s > q_pos - window are ignored;
    q_pos: (T,) integer absolute positions in [0, S) (None: the last T positions).
    Returns idx: (T, Hkv, window + topk) int64: slots [0, window) = q_pos - window + 1 .. q_pos (-1 where < 0),
    slots [window, window + topk) = top-k of s <= q_pos - window by score (ties -> smaller s, -1 padded).
    ``window = 0``: no forced window, the top-k of every visible position (the paper's "no SWA" ablation).
    """
    window, topk = checks.nonneg_int("window", window), checks.pos_int("topk", topk)
    scores = checks.finite_array("scores", scores, 3, "(T, Hkv, S)", allow_neginf=True)
    T, Hkv, S = scores.shape
    q_pos = checks.query_positions(q_pos, T, S)
    checks.output_size("window + topk", (T, Hkv, window + topk))
    return _join_window(_outside_window(scores, q_pos, window, topk), q_pos, window)


def with_forced_window(top, q_pos, window: int) -> np.ndarray:
    """The SA index set from a top-k already ranked (``fa_decode_topk``'s idx at decode): the forced window
    q_pos - window + 1 .. q_pos (-1 where < 0), then ``top``.

    top: (T, Hkv, k) positions <= q_pos - window or -1, no position twice in a row (refused: the SA layer would
    read it twice); q_pos: (T,) integers >= 0. Returns (T, Hkv, window + k) int64, the same set
    ``forced_window_select`` builds from the scores. ``window = 0``: ``top`` itself.
    """
    window = checks.nonneg_int("window", window)
    top = checks.no_repeats("top", checks.int_array("top", top, 3, "(T, Hkv, k)", lo=-1))
    q_pos = checks.int_array("q_pos", q_pos, 1, f"(T={top.shape[0]},)", lo=0)
    if q_pos.shape != top.shape[:1]:
        raise ValueError(f"q_pos must have shape (T={top.shape[0]},), got {q_pos.shape}")
    checks.output_size("window", (*top.shape[:2], window + top.shape[2]))
    inside = (top > (q_pos - window)[:, None, None]) & (top >= 0)
    if inside.any():
        t = int(np.argwhere(inside)[0][0])
        raise ValueError(f"top must lie before the forced window (<= q_pos - window = {q_pos[t] - window} for row "
                         f"{t}), got {top[t].max()}")
    return _join_window(top, q_pos, window)


@swappable("fa_decode_topk")
def fa_decode_topk(q, k, v, topk, window, scale=None, sink=None):
    """HySparse2's cross FA at decode: exact attention of the query at position S-1 + its top-k outside the window.

    q: (B, Hq, d); k: (B, S, Hkv, d); v: (B, S, Hkv, dv). Returns o: (B, Hq, dv) (exact attention over all S
    positions) and idx: (B, Hkv, topk) = the top-k positions in [0, S - window) ranked by the attention probability
    summed over the group's Hq/Hkv heads (ties -> smaller position, -1 padded), the global part of
    ``forced_window_select``. window >= 1 (the contract, as the GPU kernel's): a caller without a forced window
    (``window = 0``) uses ``fa_attention`` + ``forced_window_select``.
    """
    (B, Hq, d), (S, Hkv), dv = q.shape, k.shape[1:3], v.shape[3]
    scale = d ** -0.5 if scale is None else scale
    q_pos = np.array([S - 1])
    o, idx = np.zeros((B, Hq, dv), float_dtype(q)), np.full((B, Hkv, topk), -1, np.int64)   # B = 0: empty
    for b in range(B):
        ob, score = _attend(q[b][None], k[b], v[b], q_pos, scale, sink)
        check_scores(np.where(np.arange(S) <= S - 1 - window, score, -np.inf), "q and k")   # what is ranked
        o[b], idx[b] = ob[0], _outside_window(score, q_pos, window, topk)[0]
    return o, idx
