"""SparDA's Forecast head and its training with a rest-bucket KL (SparDA §4.1-4.2, Eqs. 3-7).

The Forecast head F_l is one extra projection of layer l's input X_l: one head per GQA group (Hkv heads of
width d, not Hkv·G query heads). It scores the NEXT layer's compressed keys,

    B_{l+1} = B_init ∪ B_local ∪ f_top(F_l · K̃_{l+1}ᵀ, k),

so layer l+1's blocks are known while layer l still computes, and their transfer can be prefetched. With a
single head the softmax is monotone, so selection ranks raw logits. The first layer has no previous layer: it
uses its own same-layer forecast F_0^cur. Attention itself still uses layer l+1's real queries.

Training (backbone frozen, only the Forecast projections learn): the teacher is the target layer's own
selector score, the sum over the G query heads of softmax(Q·K̃ᵀ/τ); the student is softmax(F·K̃ᵀ/τ) over the
same candidate compressed positions. Both are compared on a (k+1)-way partition: the teacher's top-k
positions one by one and everything else merged into one rest bucket, both sides renormalized. A coarse
teacher uses (32, 16) compressed keys; a fine teacher uses (2, 1) keys and max-pools its scores onto the
(32, 16) grid, which keeps sharp local peaks that a 32-token mean dilutes.

Everything lives on the compressed grid here; blocks only appear when the trained head is used to select
(``hybrid_lab.models.infllm.blocks_from_compressed``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hybrid_lab.core import checks
from hybrid_lab.core.optim import Adam, clip_grad_norm
from hybrid_lab.core.progress import progress
from hybrid_lab.models.attention_stats import attention_probs
from hybrid_lab.models.infllm import (blocks_from_compressed, compress_keys, compressed_spans, compressed_visible,
                                      group_scores, infllm_v2_select, select_blocks)
from hybrid_lab.ops.block_sparse import block_sparse_attention
from hybrid_lab.ops.contracts import n_blocks
from hybrid_lab.ops.sparse_attention import topk_indices

__all__ = [
    "rest_bucket_partition", "rest_bucket_kl", "teacher_topk", "candidate_mask", "pool_columns", "pool_fine_to_coarse",
    "teacher_scores", "forecast_logits", "pooled_forecast_logits", "init_params", "SyntheticModel", "SyntheticData", "TrainSetup", "make_setup", "forecast_loss_and_grad",
    "train_step", "train_forecast", "oracle_blocks", "evaluate_selectors", "teacher_needle_hits", "PAPER_TEACHER_ABLATION",
    "COARSE", "FINE",
]

COARSE = (32, 16)   # (window, stride) of the student's compressed keys, and of the coarse teacher
FINE = (2, 1)       # the fine teacher's (window, stride)


# ---------------------------------------------------------------------------------------------------------
# argument checks shared by the functions below (the rules themselves live in hybrid_lab.core.checks)
# ---------------------------------------------------------------------------------------------------------
def _scores(name, a):
    """Non-negative finite scores (..., N) with at least one axis."""
    a = checks.finite_array(name, a).astype(np.float64)
    if a.ndim < 1:
        raise ValueError(f"{name} must be an array (..., N), got a scalar")
    if (a < 0).any():
        raise ValueError(f"{name} must be >= 0, got min {a.min():.6g}")
    return a


def _mask(mask, shape):
    """An optional bool candidate mask broadcast to ``shape`` (None = every position is a candidate)."""
    if mask is None:
        return np.ones(shape, bool)
    mask = checks.array("mask", mask, kinds="b")
    try:
        return np.broadcast_to(mask, shape)
    except ValueError:
        raise ValueError(f"mask must broadcast to {shape}, got shape {mask.shape}") from None


def _sel(sel, shape, k=None):
    """Index sets (..., k) into the last axis of ``shape``: -1 padded, unique, one row per row of ``shape``."""
    sel = checks.index_sets("sel", sel, shape[-1])
    if sel.shape[:-1] != tuple(shape[:-1]) or (k is not None and sel.shape[-1] != k):
        want = f"{tuple(shape[:-1]) + (k if k is not None else 'k',)}"
        raise ValueError(f"sel must have shape {want} (one index set per row of the scores), got {sel.shape}")
    return sel


def _window(name, wd):
    """A (window, stride) pair of positive integers with stride <= window (the windows cover every token)."""
    if not isinstance(wd, (tuple, list)) or len(wd) != 2:
        raise ValueError(f"{name} must be a (window, stride) pair, got {wd!r}")
    w, s = checks.pos_int(f"{name}[0] (window)", wd[0]), checks.pos_int(f"{name}[1] (stride)", wd[1])
    if s > w:
        raise ValueError(f"{name}: stride {s} must be <= window {w} (windows must cover every token)")
    return w, s


def _scale(scale, d, name="the head width d"):
    d = checks.pos_int(name, d)
    return d ** -0.5 if scale is None else checks.positive_number("scale", scale)


# ---------------------------------------------------------------------------------------------------------
# the rest-bucket KL
# ---------------------------------------------------------------------------------------------------------
def _partition(p, sel):
    # the unchecked core of rest_bucket_partition (callers validate)
    tot = p.sum(axis=-1, keepdims=True)
    pn = p / np.where(tot > 0, tot, 1.0)
    picked = np.where(sel >= 0, np.take_along_axis(pn, np.where(sel >= 0, sel, 0), axis=-1), 0.0)
    rest = np.clip(1.0 - picked.sum(axis=-1, keepdims=True), 0.0, 1.0)
    return np.concatenate([picked, rest], axis=-1)


def rest_bucket_partition(p, sel):
    """Collapse a distribution onto a (k+1)-way partition: the k listed positions, then one rest bucket.

    p: (..., N) finite scores >= 0 (need not sum to 1: they are renormalized over the N positions);
    sel: (..., k) int positions in [-1, N), -1 = empty slot (probability 0), no position twice in a row.
    Returns (..., k+1): p[sel] / Σp, then the rest. A row of all zeros has nothing to split: all of it is "rest"
    ([0, ..., 0, 1]), which is how a row without candidates looks on both sides of :func:`rest_bucket_kl`.
    """
    p = _scores("p", p)
    return _partition(p, _sel(sel, p.shape))


def _xlogy_ratio(p, q):
    # p·log(p/q) with 0·log 0 = 0 (the rest bucket of a teacher can be empty)
    return np.where(p > 0, p * (np.log(np.where(p > 0, p, 1.0)) - np.log(np.where(q > 0, q, 1e-300))), 0.0)


def rest_bucket_kl(teacher, student_logits, k: int, mask=None, sel=None):
    """Mean over rows of KL(teacher partition || student partition) on the teacher's top-k + rest bucket.

    teacher: (..., N) finite teacher scores >= 0 (e.g. a sum of G softmaxes); student_logits: (..., N) finite;
    mask: optional bool (..., N) (broadcastable) of candidate positions, others are ignored on both sides.
    The teacher's top-k candidates (ties to the smaller position) stay separate; all other candidates form the
    rest bucket; both sides are renormalized over the candidates (the student by a softmax).
    sel: optional precomputed teacher top-k (..., k) (the teacher is frozen during training), checked like
    :func:`rest_bucket_partition`'s.
    Returns (loss, dlogits): the mean KL over rows that have candidates, and its gradient (..., N)
    dKL/dz_c = q_c · (1 - p_b / q_b) where b is c's bucket (q_c - p_c for a top-k position).
    """
    t = _scores("teacher", teacher)
    z = checks.finite_array("student_logits", student_logits).astype(np.float64)
    if t.shape != z.shape:
        raise ValueError(f"teacher and student_logits must have the same shape (..., N), got {t.shape} and {z.shape}")
    k = checks.pos_int("k", k)
    if k > t.shape[-1]:
        raise ValueError(f"k={k} is larger than the N={t.shape[-1]} candidate positions")
    mask = _mask(mask, t.shape)
    n_cand = mask.sum(axis=-1)
    sel = teacher_topk(t, k, mask) if sel is None else _sel(sel, t.shape, k)
    p = _partition(np.where(mask, t, 0.0), sel)                              # (..., k+1)
    zm = np.where(mask, z, -np.inf)
    m = zm.max(axis=-1, keepdims=True)
    e = np.exp(zm - np.where(np.isfinite(m), m, 0.0))
    den = e.sum(axis=-1, keepdims=True)
    qd = e / np.where(den > 0, den, 1.0)                                      # student softmax over candidates
    qp = _partition(qd, sel)
    rows = n_cand > 0
    n_rows = max(1, int(rows.sum()))
    kl = _xlogy_ratio(p, qp).sum(axis=-1)
    loss = float(np.where(rows, kl, 0.0).sum() / n_rows)
    # bucket of every position: its slot in sel, else the rest bucket (index k); k is small, loop over slots
    bucket = np.full(t.shape, k, dtype=np.int64)
    pos = np.arange(t.shape[-1])
    for i in range(k):
        bucket = np.where((pos == sel[..., i:i + 1]) & (sel[..., i:i + 1] >= 0), i, bucket)
    pb = np.take_along_axis(p, bucket, axis=-1)
    qb = np.take_along_axis(qp, bucket, axis=-1)
    grad = np.where(mask & (qb > 0), qd * (1.0 - pb / np.where(qb > 0, qb, 1.0)), 0.0)
    grad = np.where(rows[..., None], grad, 0.0) / n_rows
    return loss, grad


def teacher_topk(teacher, k: int, mask=None):
    """The teacher's top-k candidate positions (..., k), ties to the smaller position, -1 padded.

    teacher: (..., N) finite scores; mask: optional bool (..., N) (broadcastable) of candidate positions.
    """
    t = checks.finite_array("teacher", teacher).astype(np.float64)
    if t.ndim < 1:
        raise ValueError("teacher must be an array (..., N), got a scalar")
    k = checks.pos_int("k", k)
    return topk_indices(np.where(_mask(mask, t.shape), t, -np.inf), k)


# ---------------------------------------------------------------------------------------------------------
# teachers and the student on the compressed grid
# ---------------------------------------------------------------------------------------------------------
def candidate_mask(q_pos, Nc: int, block_size: int = 64, n_init: int = 1, n_local: int = 2,
                   window: int = COARSE[0], stride: int = COARSE[1]):
    """(T, Nc) bool: compressed positions that may be supervised / selected for each query.

    q_pos: (T,) int positions >= 0. Causal (the window ended by q_pos), and entirely outside the init blocks and
    the local blocks, which are always attended and therefore never compete for the top-k.
    """
    q_pos = checks.int_array("q_pos", q_pos, 1, "(T,)", lo=0)
    Nc = checks.nonneg_int("Nc", Nc)
    block_size = checks.pos_int("block_size", block_size)
    n_init, n_local = checks.nonneg_int("n_init", n_init), checks.nonneg_int("n_local", n_local)
    window, stride = _window("(window, stride)", (window, stride))
    starts, ends = compressed_spans(Nc, window, stride)
    local_start = (q_pos // block_size - n_local + 1) * block_size
    vis = compressed_visible(q_pos, Nc, window, stride)
    return vis & (starts[None, :] >= n_init * block_size) & (ends[None, :] <= local_start[:, None])


def pool_columns(Nf: int, Nc: int, fine=FINE, coarse=COARSE) -> np.ndarray:
    """(Nc, w) int: the fine positions inside each coarse window's token span [j·s_c, j·s_c + l_c), padded with
    ``Nf`` (a column past the fine grid) where a coarse window holds fewer than w of them. Refuses a fine grid of
    ``Nf`` positions too short for ``Nc`` coarse windows, and a ``fine`` window that does not fit in ``coarse``."""
    (lf, sf), (lc, sc) = _window("fine", fine), _window("coarse", coarse)
    if lf > lc:
        raise ValueError(f"the fine window {lf} must fit in the coarse window {lc}")
    Nf, Nc = checks.nonneg_int("Nf", Nf), checks.nonneg_int("Nc", Nc)
    checks.output_size("Nc (one row of fine positions per coarse window)", (Nc,))
    j = np.arange(Nc)
    lo = -(-(j * sc) // sf)
    hi = (j * sc + lc - lf) // sf                                    # the last fine window inside coarse window j
    if Nc and hi[-1] > Nf - 1:
        raise ValueError(f"scores_f has Nf={Nf} fine positions: too few for Nc={Nc} coarse windows "
                         f"(coarse window {Nc - 1} needs fine positions {lo[-1]} .. {hi[-1]})")
    if (hi < lo).any():
        bad = int(np.argmax(hi < lo))
        raise ValueError(f"fine={fine} leaves coarse window {bad} of coarse={coarse} without a fine window inside it")
    width = int(max(1, (hi - lo + 1).max(initial=1)))
    cols = lo[:, None] + np.arange(width)[None, :]
    return np.where(cols <= hi[:, None], cols, Nf)


def pool_fine_to_coarse(scores_f, Nc: int, fine=FINE, coarse=COARSE):
    """Max-pool fine-grid scores (..., Nf) onto the coarse grid (..., Nc).

    Coarse position j takes the max over the fine windows contained in its token span
    [j·s_c, j·s_c + l_c); with (2, 1) -> (32, 16) that is fine positions 16j .. 16j + 30. The fine grid must
    reach the end of the last coarse window (a grid too short for ``Nc`` is refused, not pooled over fewer fine
    windows); a longer one is fine (positions past the last coarse window are not read).
    """
    _window("fine", fine), _window("coarse", coarse)
    scores_f = checks.finite_array("scores_f", scores_f).astype(np.float64)
    if scores_f.ndim < 1:
        raise ValueError("scores_f must be an array (..., Nf), got a scalar")
    Nc = checks.nonneg_int("Nc", Nc)
    checks.output_size("Nc (the result is (..., Nc))", scores_f.shape[:-1] + (Nc,))
    Nf = scores_f.shape[-1]
    cols = pool_columns(Nf, Nc, fine, coarse)
    padded = np.concatenate([scores_f, np.full(scores_f.shape[:-1] + (1,), -np.inf)], axis=-1)
    return padded[..., cols].max(axis=-1)


def teacher_scores(q, k, q_pos, kind: str = "fine", scale=None):
    """The target layer's selector score on the (32, 16) grid: Σ_h softmax(Q_h K̃ᵀ/τ) (SparDA Eq. 6).

    q: (B, T, Hq, d) the target layer's queries at q_pos; k: (B, S, Hkv, d) its keys; q_pos: (T,) int positions
    in [0, S) (None: the last T). kind="coarse": computed on (32, 16) compressed keys. kind="fine": computed on
    (2, 1) compressed keys and max-pooled onto the (32, 16) grid. Returns (B, T, Hkv, Nc) with Nc the (32, 16)
    grid size.
    """
    if kind not in ("fine", "coarse"):
        raise ValueError(f"kind must be 'fine' or 'coarse', got {kind!r}")
    q, k, _ = checks.qkv(q, k)
    S = k.shape[1]
    q_pos = checks.query_positions(q_pos, q.shape[1], S)
    scale = None if scale is None else checks.positive_number("scale", scale)
    Nc = 0 if S < COARSE[0] else (S - COARSE[0]) // COARSE[1] + 1
    if kind == "coarse":
        return group_scores(q, compress_keys(k, *COARSE), q_pos, S, *COARSE, scale=scale)
    sf = group_scores(q, compress_keys(k, *FINE), q_pos, S, *FINE, scale=scale)
    return pool_fine_to_coarse(sf, Nc, FINE, COARSE)


def forecast_logits(x_src, W, kc, scale=None):
    """Forecast logits on the compressed grid: z[b,t,g,j] = (x_src[b,t] @ W[:, g]) · kc[b,j,g] · scale.

    x_src: (B, T, D) the source layer's input (layer l-1 for target l; layer 0 itself for target 0);
    W: (D, Hkv, d) the Forecast projection (one head per GQA group); kc: (B, Nc, Hkv, d) the target layer's
    (32, 16) compressed keys; all finite. scale > 0 defaults to d**-0.5. Returns (B, T, Hkv, Nc) logits (no
    softmax: one head ranks by logits).
    """
    x_src = checks.finite_array("x_src", x_src, 3, "(B, T, D)")
    W = checks.finite_array("W", W, 3, "(D, Hkv, d)")
    kc = checks.finite_array("kc", kc, 4, "(B, Nc, Hkv, d)")
    if W.shape[0] != x_src.shape[2] or W.shape[1:] != kc.shape[2:] or kc.shape[0] != x_src.shape[0]:
        raise ValueError(f"shapes disagree: x_src {x_src.shape}, W {W.shape} (D, Hkv, d), kc {kc.shape} (B, Nc, Hkv, d)")
    scale = _scale(scale, W.shape[2], "W's head width d (axis 2 of W (D, Hkv, d))")
    # plain einsum (no BLAS): these matrices are tiny and threaded BLAS thrashes on a busy 2-core machine
    f = np.einsum("btD,Dgd->btgd", x_src, W)
    return np.einsum("btgd,bngd->btgn", f, kc) * scale


def pooled_forecast_logits(x_src, W, kf, Nc: int, fine=FINE, coarse=COARSE, scale=None):
    """A Forecast head that scores FINE keys and max-pools its logits onto the coarse grid, as the fine teacher
    pools its scores: z[b,t,g,j] = max over the fine windows i inside coarse window j of (x_src[b,t] @ W[:, g]) ·
    kf[b,i,g] · scale. It reads Nf ≈ Nc·s_c/s_f keys per query instead of Nc (an index ~s_c/s_f times larger at
    inference): the experiment that tells whether a head's shortfall is the coarse keys it scores.

    x_src: (B, T, D); W: (D, Hkv, d); kf: (B, Nf, Hkv, d) keys compressed with ``fine``; Nc: the coarse grid's
    length. Returns (z (B, T, Hkv, Nc), arg (B, T, Hkv, Nc) int: the fine position each max came from, first on ties),
    arg routes the gradient of a max to the position that won.
    """
    kf = checks.finite_array("kf", kf, 4, "(B, Nf, Hkv, d)")
    zf = forecast_logits(x_src, W, kf, scale)
    cols = pool_columns(kf.shape[1], Nc, fine, coarse)                     # (Nc, w), padded with Nf
    padded = np.concatenate([zf, np.full(zf.shape[:-1] + (1,), -np.inf)], axis=-1)[..., cols]   # (B, T, Hkv, Nc, w)
    a = padded.argmax(axis=-1)
    return np.take_along_axis(padded, a[..., None], -1)[..., 0], cols[np.arange(cols.shape[0]), a]


# ---------------------------------------------------------------------------------------------------------
# synthetic multi-layer data
# ---------------------------------------------------------------------------------------------------------
@dataclass
class SyntheticData:
    """Hidden states, queries, keys and values of a frozen toy backbone.

    X[l]: (B, T, D) input of layer l; Q[l]: (B, T, Hq, d); K[l], V[l]: (B, T, Hkv, d). needles[l]: (B, Hkv,
    n_topics, n_needles) token positions of the sharp single-token matches of layer l; spans[l]: (B, Hkv,
    n_topics) first token of each topic's diffuse span (``SyntheticModel.sample``'s ``span`` tokens long).
    """
    X: list
    Q: list
    K: list
    V: list
    needles: list
    topics: np.ndarray
    spans: list = field(default_factory=list)   # spans[l]: (B, Hkv, n_topics) start of each diffuse span


class SyntheticModel:
    """A frozen toy backbone whose next-layer queries are a (noisy) linear function of this layer's input.

    Each token has a topic z_t; X_0 = E[z] + noise and X_{l+1} = X_l R_l + noise (R_l orthogonal), so layer
    l+1's queries, built to read X_{l+1}, can be forecast from X_l. A query of topic m in layer l, group g looks
    for topic π_{l,g}(m) along two key directions: u (sharp: a few single "needle" tokens with a strong match)
    and w (diffuse: a span of ~40 tokens with a moderate match). Exact attention puts most mass on the needles;
    a 32-token mean dilutes a needle 32× and favours the diffuse span: the gap a fine teacher closes.
    """

    def __init__(self, n_layers=3, D=32, Hkv=2, G=2, d=32, n_topics=8, seed=0, needle_logit=10.0,
                 diffuse_logit=3.0, noise=0.05, key_noise=0.3):
        for name, val in (("n_layers", n_layers), ("D", D), ("Hkv", Hkv), ("G", G), ("d", d), ("n_topics", n_topics)):
            checks.pos_int(name, val)
        checks.nonneg_int("seed", seed)
        checks.finite_number("needle_logit", needle_logit)
        checks.finite_number("diffuse_logit", diffuse_logit)
        checks.nonneg_number("noise", noise)
        checks.nonneg_number("key_noise", key_noise)
        checks.output_size("n_layers, D, Hkv, G or d (the query maps are n_layers x D x Hkv·G x d)",
                           (n_layers, D, Hkv, G, d))
        checks.output_size("n_layers or D (the rotations R are n_layers x D x D)", (n_layers, D, D))
        checks.output_size("Hkv or d (the key bases are Hkv x d x d)", (Hkv, d, d))
        if d < 2 * n_topics:
            raise ValueError(f"d={d} must be >= 2·n_topics={2 * n_topics} (one sharp and one diffuse direction per topic)")
        if D < n_topics:
            raise ValueError(f"D={D} must be >= n_topics={n_topics} so topics are linearly decodable")
        rng = np.random.default_rng(seed)
        self.n_layers, self.D, self.Hkv, self.G, self.d, self.n_topics = n_layers, D, Hkv, G, d, n_topics
        self.noise, self.key_noise = noise, key_noise
        self.needle_logit, self.diffuse_logit = needle_logit, diffuse_logit
        basis = np.stack([np.linalg.qr(rng.normal(size=(d, d)))[0] for _ in range(Hkv)])   # (Hkv, d, d)
        self.U = basis[:, :, :n_topics]                  # sharp directions per group: (Hkv, d, M)
        self.W = basis[:, :, n_topics:2 * n_topics]      # diffuse directions
        self.E = rng.normal(size=(n_topics, D))
        self.R = [np.linalg.qr(rng.normal(size=(D, D)))[0] for _ in range(n_layers)]
        self.Wq, self.perm = [], np.zeros((n_layers, Hkv, n_topics), np.int64)
        M = self.E.copy()
        for l in range(n_layers):
            if l:
                M = M @ self.R[l - 1]
            pinv = np.linalg.pinv(M)                     # (D, M): maps a topic's mean embedding to its one-hot
            Wl = np.zeros((D, Hkv, G, d))
            for g in range(Hkv):
                perm = rng.permutation(n_topics)
                self.perm[l, g] = perm           # a topic-m query of layer l, group g looks for topic perm[m]
                for h in range(G):
                    a, b = 1.0 + 0.1 * rng.normal(), 1.0 + 0.1 * rng.normal()
                    tgt = (a * self.U[g][:, perm] + b * self.W[g][:, perm]).T * np.sqrt(d)   # (M, d)
                    tgt = tgt + 0.1 * rng.normal(size=tgt.shape)
                    Wl[:, g, h] = pinv @ tgt
            self.Wq.append(Wl.reshape(D, Hkv * G, d))

    def sample(self, n_seq=4, T=1024, seed=1, n_needles=2, span=40, first=64):
        """n_seq sequences of T tokens; needles and spans are placed after the first `first` tokens.

        Per sequence and group, n_topics·n_needles distinct needle tokens and n_topics spans of ``span`` tokens
        are drawn from [first, T): T must leave room for them.
        """
        n_seq, T = checks.pos_int("n_seq", n_seq), checks.pos_int("T", T)
        n_needles = checks.pos_int("n_needles", n_needles)
        span, first = checks.pos_int("span", span), checks.nonneg_int("first", first)
        checks.nonneg_int("seed", seed)
        checks.output_size("n_seq or T (the queries of all layers are n_layers x n_seq x T x Hkv·G x d)",
                           (self.n_layers, n_seq, T, self.Hkv * self.G, self.d))
        checks.output_size("n_seq or T (the inputs of all layers are n_layers x n_seq x T x D)",
                           (self.n_layers, n_seq, T, self.D))
        if T - first < self.n_topics * n_needles:
            raise ValueError(f"T={T} leaves {T - first} tokens after first={first}, fewer than the "
                             f"n_topics·n_needles={self.n_topics * n_needles} distinct needles to place")
        if T - span <= first:
            raise ValueError(f"a span of {span} tokens must start at or after first={first} and end by T={T}")
        rng = np.random.default_rng(seed)
        M, D, Hkv, d = self.n_topics, self.D, self.Hkv, self.d
        topics = rng.integers(0, M, size=(n_seq, T))
        X = [self.E[topics] + self.noise * rng.normal(size=(n_seq, T, D))]
        for l in range(1, self.n_layers):
            X.append(X[-1] @ self.R[l - 1] + self.noise * rng.normal(size=(n_seq, T, D)))
        Q, K, V, needles, spans = [], [], [], [], []
        c_n = self.needle_logit          # q has norm ≈ √d·|a u + b w| so q·k/√d ≈ c for a key c·u
        c_d = self.diffuse_logit
        for l in range(self.n_layers):
            Q.append(np.einsum("btD,DHd->btHd", X[l], self.Wq[l]))
            k = self.key_noise * rng.normal(size=(n_seq, T, Hkv, d))
            nd = np.zeros((n_seq, Hkv, M, n_needles), np.int64)
            sp = np.zeros((n_seq, Hkv, M), np.int64)
            for b in range(n_seq):
                for g in range(Hkv):
                    pos = rng.choice(np.arange(first, T), size=M * n_needles, replace=False).reshape(M, n_needles)
                    nd[b, g] = pos
                    for m in range(M):
                        k[b, pos[m], g] += c_n * self.U[g][:, m]
                        s0 = rng.integers(first, T - span)
                        sp[b, g, m] = s0
                        k[b, s0:s0 + span, g] += c_d * self.W[g][:, m]
            K.append(k)
            V.append(rng.normal(size=(n_seq, T, Hkv, d)))
            needles.append(nd)
            spans.append(sp)
        return SyntheticData(X, Q, K, V, needles, topics, spans)


# ---------------------------------------------------------------------------------------------------------
# training
# ---------------------------------------------------------------------------------------------------------
@dataclass
class TrainSetup:
    """Precomputed, frozen training targets: per target layer l, its source input, compressed keys, teacher."""
    x_src: list          # (B, T, D) per target layer, at the query positions
    kc: list             # (B, Nc, Hkv, d) per target layer, (32, 16) compressed keys
    teacher: list        # (B, T, Hkv, Nc) per target layer
    mask: np.ndarray     # (T, Nc) candidate compressed positions
    sel: list            # (B, T, Hkv, k) per target layer: the teacher's top-k (frozen)
    q_pos: np.ndarray
    k: int
    extra: dict = field(default_factory=dict)    # "kind": the teacher; "pool": (fine, coarse) for a fine-key student


def make_setup(data: SyntheticData, kind: str = "fine", q_pos=None, k: int = 8, block_size=64, n_init=1,
               n_local=2):
    """Frozen targets for training: the source of target layer l is X_{l-1} (X_0 for l = 0, the same-layer
    forecast F_0^cur); the teacher is the target layer's own selector score (coarse or fine)."""
    if not isinstance(data, SyntheticData):
        raise ValueError(f"data must be a SyntheticData (SyntheticModel.sample), got {type(data).__name__}")
    S = data.K[0].shape[1]
    q_pos = np.arange(S // 2, S, 2) if q_pos is None else checks.int_array("q_pos", q_pos, 1, "(T,)", lo=0, hi=S)
    k = checks.pos_int("k", k)
    x_src, kcs, teach = [], [], []
    for l in range(len(data.K)):
        x_src.append(data.X[max(l - 1, 0)][:, q_pos])
        kc = compress_keys(data.K[l], *COARSE)
        kcs.append(kc)
        teach.append(teacher_scores(data.Q[l][:, q_pos], data.K[l], q_pos, kind))
    mask = candidate_mask(q_pos, kcs[0].shape[1], block_size, n_init, n_local)
    sel = [teacher_topk(t, k, mask[None, :, None, :]) for t in teach]
    return TrainSetup(x_src, kcs, teach, mask, sel, q_pos, k, {"kind": kind})


def forecast_loss_and_grad(params: dict, setup: TrainSetup):
    """Σ over target layers of the mean rest-bucket KL, and its gradient for every W_l (hand-written).

    params: {"W0": (D, Hkv, d), "W1": ...}, one Forecast projection per target layer of ``setup``.
    A setup whose ``extra["pool"]`` is (fine, coarse) holds fine keys in ``kc``: the student is
    :func:`pooled_forecast_logits` on them, and the gradient of each max goes to the fine position that won.
    """
    if not isinstance(params, dict):
        raise ValueError(f"params must be a dict {{'W0': (D, Hkv, d), ...}}, got {type(params).__name__}")
    for l, (x, kc) in enumerate(zip(setup.x_src, setup.kc)):
        if f"W{l}" not in params:
            raise ValueError(f"params must hold one projection per target layer, 'W{l}' is missing")
        W = checks.finite_array(f"params['W{l}']", params[f"W{l}"], 3, "(D, Hkv, d)")
        if W.shape != (x.shape[2],) + kc.shape[2:]:
            raise ValueError(f"params['W{l}'] must have shape (D, Hkv, d) = {(x.shape[2],) + kc.shape[2:]}, "
                             f"got {W.shape}")
    pool = setup.extra.get("pool")              # (fine, coarse): kc holds fine keys, the logits are max-pooled
    loss, grads = 0.0, {}
    for l, (x, kc, t) in enumerate(zip(setup.x_src, setup.kc, setup.teacher)):
        W = params[f"W{l}"]
        if pool is None:
            z = forecast_logits(x, W, kc)
        else:
            z, arg = pooled_forecast_logits(x, W, kc, setup.mask.shape[1], *pool)
        scale = W.shape[2] ** -0.5
        li, dz = rest_bucket_kl(t, z, setup.k, setup.mask[None, :, None, :], setup.sel[l])
        loss += li
        if pool is not None:                    # a max passes its gradient to the fine position that won
            dzf = np.zeros(z.shape[:-1] + (kc.shape[1],))
            b, tt, g, _ = np.indices(z.shape, sparse=True)
            np.add.at(dzf, (b, tt, g, arg), dz)
            dz = dzf
        # z = (x W)·kc·scale  =>  dW[D, g, d] = Σ_{b,t} x[b,t,D] Σ_j dz[b,t,g,j] kc[b,j,g,d] · scale
        dF = np.einsum("btgn,bngd->btgd", dz, kc) * scale
        grads[f"W{l}"] = np.einsum("btD,btgd->Dgd", x, dF)
    return loss, grads


def init_params(model: SyntheticModel, seed: int = 0, std: float = 0.02):
    """Random Forecast projections {"W{l}": (D, Hkv, d)} with entries N(0, std²), one per layer of ``model``."""
    checks.nonneg_int("seed", seed)
    checks.positive_number("std", std)
    rng = np.random.default_rng(seed)
    return {f"W{l}": std * rng.normal(size=(model.D, model.Hkv, model.d)) for l in range(model.n_layers)}


def train_forecast(model: SyntheticModel, setup: TrainSetup, steps: int = 150, lr: float = 0.02, seed: int = 0,
                   max_norm: float = 0.5, weight_decay: float = 0.0, show_progress: bool = True):
    """Adam (β = (0.9, 0.95), ε = 1e-6, weight decay 0.01, as the paper; a larger lr for a toy) + clipping 0.5.

    Returns (params, history) with history["loss"] per step.
    """
    steps = checks.pos_int("steps", steps)
    checks.output_size("steps (one loss per step in the history)", (steps,))
    lr, max_norm = checks.positive_number("lr", lr), checks.positive_number("max_norm", max_norm)
    weight_decay = checks.nonneg_number("weight_decay", weight_decay)
    params = init_params(model, seed)
    opt = Adam(params, lr=lr, betas=(0.9, 0.95), eps=1e-6, weight_decay=weight_decay)
    hist = []
    it = range(steps)
    if show_progress:
        it = progress(it, total=steps, desc=f"train ({setup.extra.get('kind', '')} teacher)")
    for _ in it:
        loss, _ = train_step(params, setup, opt, max_norm)
        hist.append(loss)
    return params, {"loss": np.array(hist)}


def train_step(params: dict, setup: TrainSetup, opt: Adam, max_norm: float = 0.5):
    """One step of :func:`train_forecast`: the loss and its gradient (:func:`forecast_loss_and_grad`), the
    gradients clipped to a global L2 norm of at most ``max_norm`` (over all projections together), then one step
    of ``opt`` (an :class:`~hybrid_lab.core.optim.Adam` over ``params``, which it updates in place).

    Returns (loss, grads): the loss before the step and the gradients as computed, before clipping.
    """
    if not isinstance(opt, Adam) or opt.params is not params:
        raise ValueError("opt must be the Adam optimizer of params (Adam(params, ...))")
    max_norm = checks.positive_number("max_norm", max_norm)
    loss, grads = forecast_loss_and_grad(params, setup)
    clipped = {name: g.copy() for name, g in grads.items()}
    clip_grad_norm(clipped, max_norm)
    opt.step(clipped)
    return loss, grads


# ---------------------------------------------------------------------------------------------------------
# evaluation: which blocks should have been read, and what we lose by reading others
# ---------------------------------------------------------------------------------------------------------
def oracle_blocks(q, k, q_pos, topk: int, block_size=64, n_init=1, n_local=2):
    """The blocks exact attention needs most: per group, attention mass summed over its G heads and over each
    block's tokens, top-k among the dynamic candidates. Returns block_idx like ``select_blocks``.

    q: (B, T, Hq, d) queries at q_pos; k: (B, S, Hkv, d); q_pos: (T,) int positions in [0, S)."""
    q, k, _ = checks.qkv(q, k)
    q, k = q.astype(np.float64), k.astype(np.float64)
    B, T, Hq, d = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    q_pos = checks.query_positions(q_pos, T, S)
    block_size = checks.pos_int("block_size", block_size)
    checks.output_size("block_size (the mass is padded to whole blocks: B x T x Hkv x n_blocks·block_size)",
                       (B, T, Hkv, n_blocks(S, block_size) * block_size))
    p = attention_probs(q, k, q_pos=q_pos).reshape(B, T, Hkv, Hq // Hkv, S).sum(axis=3)   # (B, T, Hkv, S)
    Nb = n_blocks(S, block_size)
    pad = Nb * block_size - S
    mass = np.concatenate([p, np.zeros(p.shape[:-1] + (pad,))], axis=-1).reshape(B, T, Hkv, Nb, block_size).sum(-1)
    return select_blocks(mass, q_pos, topk, block_size, n_init, n_local)


def _recall(sel, ref):
    """Mean over rows of |sel ∩ ref| / |ref| (valid entries only)."""
    hit = (sel[..., :, None] == ref[..., None, :]) & (ref[..., None, :] >= 0)
    n_ref = (ref >= 0).sum(-1)
    r = hit.any(axis=-2).sum(-1) / np.maximum(n_ref, 1)
    return float(r[n_ref > 0].mean())


def evaluate_selectors(data: SyntheticData, heads: dict, q_pos, topk: int = 2, block_size=64, n_init=1,
                       n_local=2):
    """Recall of the oracle's dynamic blocks and relative attention-output error, per selector and layer.

    heads: {name: params} of trained Forecast heads. Also evaluates "InfLLM-V2" (each layer's own queries
    on its own (32, 16) compressed keys: the original same-layer selector). Returns {name: {"recall": [..],
    "error": [..]}} with one entry per layer. q_pos: (T,) int positions in [0, S).
    """
    if not isinstance(data, SyntheticData):
        raise ValueError(f"data must be a SyntheticData (SyntheticModel.sample), got {type(data).__name__}")
    S = data.K[0].shape[1]
    q_pos = checks.int_array("q_pos", q_pos, 1, "(T,)", lo=0, hi=S)
    if q_pos.size == 0:
        raise ValueError("q_pos must hold at least one query position (the recall of no query is 0/0), got an "
                         "empty array")
    block_size = checks.pos_int("block_size", block_size)
    checks.output_size("block_size (the oracle pads each sequence to whole blocks)",
                       (n_blocks(S, block_size) * block_size,))
    topk = checks.pos_int("topk", topk)                   # recall of zero dynamic blocks would be 0/0
    if not isinstance(heads, dict):
        raise ValueError(f"heads must be a dict {{name: params}}, got {type(heads).__name__}")
    for name, params in heads.items():
        for l in range(len(data.K)):
            if not isinstance(params, dict) or f"W{l}" not in params:
                raise ValueError(f"heads[{name!r}] must hold one projection per layer, 'W{l}' is missing")
            checks.finite_array(f"heads[{name!r}]['W{l}']", params[f"W{l}"], 3, "(D, Hkv, d)")
    Nb = n_blocks(S, block_size)
    res = {name: {"recall": [], "error": []} for name in ["InfLLM-V2", *heads]}
    for l in range(len(data.K)):
        q, k, v = data.Q[l][:, q_pos], data.K[l], data.V[l]
        ref = oracle_blocks(q, k, q_pos, topk, block_size, n_init, n_local)
        dyn_ref = _dynamic(ref, q_pos, block_size, n_init, n_local)
        all_b = np.broadcast_to(np.arange(Nb), ref.shape[:3] + (Nb,)).copy()
        o_dense = block_sparse_attention.numpy_impl(q, k, v, all_b, block_size, q_pos=q_pos)
        sels = {"InfLLM-V2": infllm_v2_select(q, k, topk, block_size, *COARSE, n_init, n_local, q_pos)[0]}
        kc = compress_keys(k, *COARSE)
        vis = compressed_visible(q_pos, kc.shape[1], *COARSE)[None, :, None, :]
        for name, params in heads.items():
            z = forecast_logits(data.X[max(l - 1, 0)][:, q_pos], params[f"W{l}"], kc)
            sels[name] = blocks_from_compressed(np.where(vis, z, -np.inf), S, q_pos, topk, block_size, *COARSE,
                                                n_init, n_local)[0]
        for name, idx in sels.items():
            res[name]["recall"].append(_recall(_dynamic(idx, q_pos, block_size, n_init, n_local), dyn_ref))
            o = block_sparse_attention.numpy_impl(q, k, v, idx, block_size, q_pos=q_pos)
            res[name]["error"].append(float(np.linalg.norm(o - o_dense) / np.linalg.norm(o_dense)))
    return res


def _dynamic(idx, q_pos, block_size, n_init, n_local):
    """Drop init and local blocks from a selection, keeping only the dynamic (top-k) part (-1 elsewhere)."""
    cur = (np.asarray(q_pos) // block_size)[None, :, None, None]
    fixed = (idx < n_init) | (idx > cur - n_local)
    return np.where(fixed | (idx < 0), -1, idx)


# reported (SparDA Table 6, p. 15): student/inference window fixed at (32, 16), teacher window varied;
# RULER, Reasoning and the four-family average; and the same-model "Sparse" baseline average (Table 1)
PAPER_TEACHER_ABLATION = {
    "MiniCPM": {"(32,16)": (75.7, 82.5, 60.4), "(2,1)": (78.7, 84.7, 61.7), "Sparse avg": 61.4},
    "NOSA": {"(32,16)": (71.4, 55.4, 50.1), "(2,1)": (73.9, 57.2, 51.7), "Sparse avg": 49.4},
}


def teacher_needle_hits(model: SyntheticModel, data: SyntheticData, layer: int, group: int, q_pos, kind: str,
                        seq: int = 0):
    """Fraction of queries whose teacher top-1 compressed window holds one of the query's target needles.

    Only queries with at least one target needle among their candidate positions count; q_pos: (T,) int
    positions in [0, S). Raises ValueError when no query has one (the fraction would be 0/0).
    """
    layer = checks.int_in("layer", layer, 0, len(data.K))
    group = checks.int_in("group", group, 0, model.Hkv)
    seq = checks.int_in("seq", seq, 0, data.K[layer].shape[0])
    S = data.K[layer].shape[1]
    q_pos = checks.int_array("q_pos", q_pos, 1, "(T,)", lo=0, hi=S)
    if q_pos.size == 0:
        raise ValueError("q_pos must hold at least one query position (the fraction of no query is 0/0), got an "
                         "empty array")
    q = data.Q[layer][seq:seq + 1, q_pos]
    Nc = (S - COARSE[0]) // COARSE[1] + 1
    mask = candidate_mask(q_pos, Nc)
    sc = np.where(mask, teacher_scores(q, data.K[layer][seq:seq + 1], q_pos, kind)[0, :, group], -np.inf)
    best = np.argmax(sc, axis=-1) * COARSE[1]
    target = model.perm[layer, group][data.topics[seq, q_pos]]
    needles = data.needles[layer][seq, group][target]                        # (T, n_needles)
    local_start = (q_pos // 64 - 2 + 1) * 64
    reachable = (needles >= 64) & (needles + 1 < local_start[:, None])
    inside = (needles >= best[:, None]) & (needles < best[:, None] + COARSE[0]) & reachable
    ok = reachable.any(-1)
    if not ok.any():
        raise ValueError("no query in q_pos has a target needle among its candidate positions (0 of 0)")
    return float(inside.any(-1)[ok].mean())
