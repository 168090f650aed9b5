"""Training DeepSeek-V3.2's lightning indexer (闪电索引器): the KL losses, a trainable indexer, recall.

The op itself, I[t, s] = Σ_j w[t, j] · ReLU(q[t, j] · k[s]) and its top-k, is ``hybrid_lab.ops.lightning_indexer``
(swappable with a Triton kernel); here the indexer's q, w, k come from hidden states through trained projections.

Training (DeepSeek-V3.2 report §2.1):

1. Dense warm-up: main attention stays dense and frozen; the target p[t, :] is the main attention summed over heads
   and L1-normalized; loss Σ_t KL(p[t, :] || softmax(I[t, :])). Its gradient w.r.t. the scores is simply
   softmax(I[t, :]) - p[t, :] (per query).
2. Sparse stage: the same KL, restricted to (and renormalized over) the selected top-k set; the indexer's input is
   detached from the main model's graph (here the hidden states are fixed arrays, so nothing flows back anyway).

Two pitfalls this module lets you run: a large random init makes the initial KL huge and plain gradient descent
diverges (fix: small init, Adam, gradient clipping); without a bias on w, zero-mean hidden states let w flip sign
on unseen queries, which turns the ranking upside down (fix: ``use_bias=True``).
"""
from __future__ import annotations

import numpy as np

from hybrid_lab.core import checks
from hybrid_lab.core.optim import Adam, clip_grad_norm
from hybrid_lab.core.progress import progress
from hybrid_lab.models.attention_stats import attention_probs
from hybrid_lab.ops.contracts import indexer_positions
from hybrid_lab.ops.lightning_indexer import lightning_indexer
from hybrid_lab.ops.sparse_attention import topk_indices


def _mm(a, b):
    """a @ b for 2-D float arrays, summed in a fixed order by numpy's own einsum loop (no BLAS).

    The indexer's training is chaotic after a few hundred Adam steps: a last-bit difference in one step grows until
    the final KL differs in the second digit. BLAS libraries (OpenBLAS with DYNAMIC_ARCH picks a kernel for the CPU
    it runs on) sum the products of ``@`` in an order that depends on that kernel, so the same notebook printed
    other numbers on another machine. ``np.einsum`` without ``optimize`` never calls BLAS: the same numpy gives the
    same bits everywhere, at the cost of a few milliseconds per training step.
    """
    return np.einsum("ik,kj->ij", a, b)


# ---------------------------------------------------------------- losses on the scores (the KL of DeepSeek-V3.2)
def log_softmax(x, axis=-1):
    """Numerically stable log-softmax over ``axis`` (an integer axis of x); -inf entries stay -inf (probability 0).

    A row whose entries are all -inf (nothing visible) stays all -inf: probability 0 everywhere, as
    ``softmax_with_sink`` gives an all-masked row (not NaN). NaN and +inf are refused."""
    x = checks.finite_array("x", x, allow_neginf=True).astype(np.float64)
    if x.ndim < 1:
        raise ValueError(f"x must be an array with at least one axis, got a scalar {x!r}")
    axis = checks.int_in("axis", axis, -x.ndim, x.ndim)
    m = np.max(x, axis=axis, keepdims=True, initial=-np.inf)         # initial: an empty axis is valid too
    m = np.where(np.isfinite(m), m, 0.0)
    total = np.sum(np.exp(x - m), axis=axis, keepdims=True)
    return np.where(total > 0, x - m - np.log(np.where(total > 0, total, 1.0)), -np.inf)


def _check_scores_target(I, p):
    # -inf marks an invisible position; NaN or +inf (a diverging run's overflow) raises, which train_indexer
    # reports as divergence
    I = checks.finite_array("I", I, 2, "(T, S)", allow_neginf=True).astype(np.float64)
    p = checks.finite_array("p", p, 2, "(T, S)").astype(np.float64)
    if p.shape != I.shape:
        raise ValueError(f"scores I and target p must both be (T, S), got I{I.shape} p{p.shape}")
    if (p < 0).any() or not np.allclose(p.sum(axis=-1), 1.0, atol=1e-6):
        raise ValueError("target p must be a probability distribution over each row (>= 0, rows sum to 1)")
    if ((p > 0) & np.isneginf(I)).any():
        raise ValueError("target p puts mass on a position whose score is -inf (not visible)")
    return I, p


def _kl(p, logq):
    """Σ_rows KL(p || q) with 0·log 0 = 0."""
    safe = p > 0
    return float(np.sum(np.where(safe, p * (np.log(np.where(safe, p, 1.0)) - np.where(safe, logq, 0.0)), 0.0)))


def dense_kl_loss(I, p):
    """Dense warm-up loss Σ_t KL(p[t] || softmax(I[t])) and its gradient w.r.t. I.

    I: (T, S) indexer scores (-inf where not visible); p: (T, S) target (rows sum to 1). Returns (loss, dI (T, S)):
    dI[t] = softmax(I[t]) - p[t] (0 at invisible positions). NaN or +inf scores (a diverging run's overflow) raise
    ``ValueError``, which ``train_indexer`` reports as divergence.
    """
    I, p = _check_scores_target(I, p)
    logq = log_softmax(I)
    return _kl(p, logq), np.exp(logq) - p


def sparse_kl_loss(I, p, idx):
    """Sparse-stage loss: KL restricted to each query's selected set, both sides renormalized over it.

    I, p: (T, S) as in :func:`dense_kl_loss`; idx: (T, K) selected positions (-1 padded), no position twice in a
    row (a repeat is refused: the set it stands for would silently hold fewer than K positions). Returns (loss,
    dI (T, S)), dI = softmax_sel(I) - p_sel on the selected set, 0 elsewhere (positions outside the set get no
    signal).
    """
    I, p = _check_scores_target(I, p)
    idx = np.asarray(idx)
    if idx.ndim != 2 or idx.shape[0] != I.shape[0] or not np.issubdtype(idx.dtype, np.integer):
        raise ValueError(f"idx must be an integer (T={I.shape[0]}, K) array, got shape {idx.shape} dtype {idx.dtype}")
    if (idx < -1).any() or (idx >= I.shape[1]).any():
        raise ValueError(f"idx entries must lie in [-1, S={I.shape[1]})")
    checks.no_repeats("idx", idx)
    sel = np.zeros(I.shape, dtype=bool)
    rows = np.broadcast_to(np.arange(I.shape[0])[:, None], idx.shape)
    sel[rows[idx >= 0], idx[idx >= 0]] = True
    sel &= np.isfinite(I)
    I_sel = np.where(sel, I, -np.inf)
    p_sel = np.where(sel, p, 0.0)
    mass = p_sel.sum(axis=-1, keepdims=True)
    p_sel = p_sel / np.where(mass > 0, mass, 1.0)
    logq = log_softmax(I_sel)
    q_sel = np.where(sel, np.exp(logq), 0.0)
    has = mass[:, 0] > 0                                                # a set with no target mass teaches nothing
    loss = _kl(p_sel[has], logq[has])
    dI = np.where(has[:, None], q_sel - p_sel, 0.0)
    return loss, dI


def topk_recall(pred_idx, true_idx) -> float:
    """Mean fraction of the true top-k positions found by the predicted set: |pred ∩ true| / |true|.

    pred_idx: (..., Kp), true_idx: (..., K), both -1 padded, no position twice in a row (a repeat is refused: a
    repeated true position would be counted twice, a repeated prediction would stand for a smaller set); rows whose
    true set is empty are skipped (no valid entry at all is an error).
    """
    pred_idx = checks.int_array("pred_idx", pred_idx, lo=-1)
    true_idx = checks.int_array("true_idx", true_idx, lo=-1)
    if pred_idx.ndim < 1 or true_idx.ndim < 1 or pred_idx.shape[:-1] != true_idx.shape[:-1]:
        raise ValueError(f"pred_idx and true_idx must share leading dims, got {pred_idx.shape} and {true_idx.shape}")
    checks.no_repeats("pred_idx", pred_idx)
    checks.no_repeats("true_idx", true_idx)
    n_rows = int(np.prod(pred_idx.shape[:-1]))                          # explicit: reshape(-1, 0) is ambiguous
    P = pred_idx.reshape(n_rows, pred_idx.shape[-1])
    Tt = true_idx.reshape(n_rows, true_idx.shape[-1])
    hit = (Tt[:, :, None] == P[:, None, :]).any(-1) & (Tt >= 0)       # (N, K)
    n_true = (Tt >= 0).sum(-1)
    ok = n_true > 0
    if not ok.any():
        raise ValueError("true_idx has no valid (>= 0) entry")
    return float(np.mean(hit.sum(-1)[ok] / n_true[ok]))


def score_correlation(I, p) -> np.ndarray:
    """Per query, the Pearson correlation between the indexer scores and the target's log-probabilities.

    I, p: (T, S); only positions where the score is finite and p > 0 count. About +1: same ranking as the main
    attention; negative: the ranking is (mostly) upside down. Returns (T,), NaN for a row with < 2 such positions.
    """
    I = checks.finite_array("I", I, 2, "(T, S)", allow_neginf=True).astype(np.float64)
    p = checks.finite_array("p", p, 2, "(T, S)").astype(np.float64)
    if I.shape != p.shape:
        raise ValueError(f"I and p must both be (T, S), got I{I.shape} p{p.shape}")
    if (p < 0).any():
        raise ValueError(f"p must be >= 0 (probabilities), got min {p.min():.6g}")
    ok = np.isfinite(I) & (p > 0)
    n = ok.sum(axis=1)
    x = np.where(ok, I, 0.0)
    y = np.where(ok, np.log(np.where(ok, p, 1.0)), 0.0)
    nn = np.maximum(n, 1)[:, None]
    xc = np.where(ok, x - x.sum(1, keepdims=True) / nn, 0.0)
    yc = np.where(ok, y - y.sum(1, keepdims=True) / nn, 0.0)
    den = np.sqrt((xc ** 2).sum(1) * (yc ** 2).sum(1))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (xc * yc).sum(1) / den
    return np.where((n >= 2) & (den > 0), r, np.nan)


# ---------------------------------------------------------------- the trainable indexer
class LightningIndexer:
    """A trainable lightning indexer on hidden states of width ``d_model``.

    Parameters (``self.params``, float64): Wq (D, Hi, di), Ww (D, Hi), bw (Hi,) [only if ``use_bias``], Wk (D, di).
    q[t, j] = x_t Wq[:, j]; w[t, j] = x_t Ww[:, j] + bw[j]; k[s] = x_s Wk.
    ``init_scale`` is the std of the Gaussian init of every weight matrix. The bias starts at ``bias_init``
    (default 1.0 > 0): a positive constant head weight, like the constant component of a real residual stream, so
    that every query starts by ranking keys the same way up (w > 0) instead of half of them upside down. Any finite
    value is accepted: 0 or a negative bias is the experiment of starting without (or against) that help.
    ``rope_dims`` > 0 rotates the first ``rope_dims`` channels of q and k by their positions (partial RoPE, as
    DeepSeek-V3.2's indexer does): without it the indexer scores content only and cannot imitate a positional head
    (one that attends to the previous token, say). Queries sit at ``q_pos``, keys at 0 .. S-1.
    """

    def __init__(self, d_model: int, n_heads: int = 4, d_index: int = 16, init_scale: float = 0.02,
                 use_bias: bool = True, bias_init: float = 1.0, seed: int = 0, rope_dims: int = 0,
                 rope_base: float = 10000.0):
        d_model, n_heads, d_index = (checks.pos_int(n, v) for n, v in
                                     (("d_model", d_model), ("n_heads", n_heads), ("d_index", d_index)))
        checks.output_size("d_model, n_heads or d_index (Wq is d_model x n_heads x d_index)",
                           (d_model, n_heads, d_index))
        checks.positive_number("init_scale", init_scale)
        bias_init = checks.finite_number("bias_init", bias_init)
        if not isinstance(use_bias, (bool, np.bool_)):
            raise ValueError(f"use_bias must be True or False, got {use_bias!r}")
        rng = np.random.default_rng(checks.nonneg_int("seed", seed))
        rope_dims = checks.nonneg_int("rope_dims", rope_dims)
        if rope_dims % 2 or rope_dims > d_index:
            raise ValueError(f"rope_dims must be even and <= d_index={d_index}, got {rope_dims}")
        self.rope_dims, self.rope_base = rope_dims, checks.positive_number("rope_base", rope_base)
        self.d_model, self.n_heads, self.d_index, self.use_bias = d_model, n_heads, d_index, use_bias
        self.params = {
            "Wq": rng.normal(0, init_scale, (d_model, n_heads, d_index)),
            "Ww": rng.normal(0, init_scale, (d_model, n_heads)),
            "Wk": rng.normal(0, init_scale, (d_model, d_index)),
        }
        if use_bias:
            self.params["bw"] = np.full(n_heads, bias_init)

    def _check_x(self, x, name):
        x = checks.finite_array(name, x, 2, f"(n, d_model={self.d_model})")
        if x.shape[1] != self.d_model:
            raise ValueError(f"{name} must be (n, d_model={self.d_model}), got shape {x.shape}")
        return x.astype(np.float64)

    def _rotate(self, x, pos, sign=1.0):
        """Partial RoPE (rotate-half) of x (n, ..., di) at positions pos (n,); sign -1 rotates back (the backward)."""
        if not self.rope_dims:
            return x
        half = self.rope_dims // 2
        ang = np.asarray(pos, np.float64)[:, None] * self.rope_base ** (-np.arange(half) / half)     # (n, half)
        shape = (len(pos),) + (1,) * (x.ndim - 2) + (half,)
        cos, sin = np.cos(ang).reshape(shape), sign * np.sin(ang).reshape(shape)
        out = x.copy()
        x1, x2 = x[..., :half], x[..., half:self.rope_dims]
        out[..., :half] = x1 * cos - x2 * sin
        out[..., half:self.rope_dims] = x1 * sin + x2 * cos
        return out

    def project(self, x_queries, x_keys, q_pos=None):
        """x_queries: (T, D), x_keys: (S, D) -> q (T, Hi, di), w (T, Hi), k (S, di). With ``rope_dims`` > 0 q is
        rotated at ``q_pos`` (default: the last T positions of the S keys) and k at 0 .. S-1."""
        xq, xk = self._check_x(x_queries, "x_queries"), self._check_x(x_keys, "x_keys")
        P = self.params
        q = _mm(xq, P["Wq"].reshape(self.d_model, -1)).reshape(-1, self.n_heads, self.d_index)
        w = _mm(xq, P["Ww"]) + (P["bw"] if self.use_bias else 0.0)
        k = _mm(xk, P["Wk"])
        if self.rope_dims:
            q = self._rotate(q, indexer_positions(q_pos, len(xq), len(xk)))
            k = self._rotate(k, np.arange(len(xk)))
        return q, w, k

    def select(self, x_queries, x_keys, topk, q_pos=None):
        """Scores (T, S) and top-k idx (T, topk) through the swappable :func:`lightning_indexer`."""
        q, w, k = self.project(x_queries, x_keys, q_pos)
        scores, idx = lightning_indexer(q[None], w[None], k[None], topk, q_pos)
        return scores[0], idx[0]

    def _check_batch(self, x_queries, x_keys, p, q_pos, stage, topk):
        """The arguments of a training step, checked: (xq (T, D), xk (S, D), p (T, S), q_pos (T,))."""
        if stage not in ("dense", "sparse"):
            raise ValueError(f"stage must be 'dense' or 'sparse', got {stage!r}")
        if stage == "sparse":
            checks.pos_int("topk", topk)                 # the sparse stage's selected set
        xq, xk = self._check_x(x_queries, "x_queries"), self._check_x(x_keys, "x_keys")
        T, S = xq.shape[0], xk.shape[0]
        p = checks.prob_rows("p", p)
        if p.shape != (T, S):
            raise ValueError(f"p must be (T={T}, S={S}), got shape {p.shape}")
        return xq, xk, p, indexer_positions(q_pos, T, S)   # the op's rule: the loss sees what the op scores

    def loss_and_grads(self, x_queries, x_keys, p, q_pos=None, stage="dense", topk=None):
        """KL loss (``stage`` "dense" or "sparse") and hand-written gradients for every parameter.

        p: (T, S) target (main attention summed over heads, L1-normalized). Returns (loss, grads dict).
        Vectorized backward through I = Σ_j w_j ReLU(z_j), z_j = q_j · k:
        dw = Σ_s dI·ReLU(z); dz = dI·w·[z > 0]; dq = dz @ k; dk = Σ_{t,j} dz·q; then the linear maps.
        """
        xq, xk, p, pos = self._check_batch(x_queries, x_keys, p, q_pos, stage, topk)
        T, S = xq.shape[0], xk.shape[0]
        q, w, k = self.project(xq, xk, pos)
        Hi, di = self.n_heads, self.d_index
        qf = q.reshape(T * Hi, di)
        z = _mm(qf, k.T).reshape(T, Hi, S)                               # (T, Hi, S); fixed-order products (_mm)
        a = np.maximum(z, 0.0)
        I = np.einsum("tj,tjs->ts", w, a)                                # Σ_j w[t,j] a[t,j,s]
        I = np.where(np.arange(S)[None, :] <= pos[:, None], I, -np.inf)
        if stage == "dense":
            loss, dI = dense_kl_loss(I, p)
        else:
            loss, dI = sparse_kl_loss(I, p, topk_indices(I, topk))
        dw = np.einsum("tjs,ts->tj", a, dI)                              # (T, Hi)
        dz = (dI[:, None, :] * w[:, :, None] * (z > 0)).reshape(T * Hi, S)
        dq = _mm(dz, k).reshape(T, Hi, di)
        dk = _mm(dz.T, qf)                                               # (S, di)
        if self.rope_dims:                                               # back through the rotations
            dq = self._rotate(dq, pos, -1.0)
            dk = self._rotate(dk, np.arange(S), -1.0)
        grads = {"Wq": _mm(xq.T, dq.reshape(T, Hi * di)).reshape(self.d_model, Hi, di), "Ww": _mm(xq.T, dw),
                 "Wk": _mm(xk.T, dk)}
        if self.use_bias:
            grads["bw"] = dw.sum(axis=0)
        return loss, grads


def optimizer_step(params: dict, grads: dict, lr: float, clip: float | None = None, opt: Adam | None = None) -> None:
    """One update of ``params`` in place, as every step of :func:`train_indexer` makes it.

    params, grads: {name: float array}, same keys and shapes (``LightningIndexer.params`` and the grads of
    ``loss_and_grads``). First the gradients are scaled in place so that their *global* L2 norm (all parameters
    together) is at most ``clip`` (None: not scaled); then ``opt.step(grads)`` when ``opt`` is given (an
    :class:`Adam` over ``params``, with its own lr), else plain gradient descent ``params[name] -= lr * grads[name]``.
    """
    lr = checks.positive_number("lr", lr)
    if clip is not None:
        clip = checks.positive_number("clip", clip)
    if not isinstance(params, dict) or not params or not isinstance(grads, dict) or set(params) != set(grads):
        raise ValueError(f"params and grads must be non-empty dicts with the same keys, got "
                         f"{sorted(params) if isinstance(params, dict) else type(params).__name__} and "
                         f"{sorted(grads) if isinstance(grads, dict) else type(grads).__name__}")
    for name, P in params.items():                 # everything checked before anything is touched
        g = grads[name]
        if not isinstance(P, np.ndarray) or P.dtype.kind != "f" or not np.isfinite(P).all():
            raise ValueError(f"params[{name!r}] must be a finite float numpy array (updated in place)")
        if not isinstance(g, np.ndarray) or g.dtype.kind != "f" or g.shape != P.shape or not np.isfinite(g).all():
            raise ValueError(f"grads[{name!r}] must be a finite float array of shape {P.shape}, got "
                             f"{getattr(g, 'shape', type(g).__name__)} {getattr(g, 'dtype', '')}".rstrip())
    if opt is not None and (not isinstance(opt, Adam) or opt.params is not params):
        raise ValueError("opt must be an Adam over these params (or None for plain gradient descent)")
    if clip is not None:
        clip_grad_norm(grads, clip)
    if opt is not None:
        opt.step(grads)
        return
    for name, g in grads.items():
        params[name] -= lr * g


def train_indexer(indexer: LightningIndexer, x_queries, x_keys, p, steps: int = 300, lr: float = 1e-2,
                  optimizer: str = "adam", clip: float | None = 1.0, stage: str = "dense", topk: int | None = None,
                  q_pos=None, show_progress: bool = True, desc: str = "training indexer") -> dict:
    """Train ``indexer`` in place on one batch of queries (full-batch steps).

    optimizer: "adam" (hybrid_lab.core.optim.Adam) or "sgd" (plain gradient descent); clip: global-norm clipping threshold
    or None. Stops early when the loss or a parameter stops being finite (divergence).
    Returns {"loss": list of per-step losses (mean over queries), "diverged": bool, "steps": steps run}.
    """
    if optimizer not in ("adam", "sgd"):
        raise ValueError(f"optimizer must be 'adam' or 'sgd', got {optimizer!r}")
    steps, lr = checks.pos_int("steps", steps), checks.positive_number("lr", lr)
    if clip is not None:
        checks.positive_number("clip", clip)
    # bad arguments raise here: inside the loop a ValueError means NaN or +inf scores, i.e. a diverged run
    T = indexer._check_batch(x_queries, x_keys, p, q_pos, stage, topk)[0].shape[0]
    opt = Adam(indexer.params, lr=lr) if optimizer == "adam" else None
    history = {"loss": [], "diverged": False, "steps": 0}
    it = progress(range(steps), total=steps, desc=desc) if show_progress else range(steps)
    with np.errstate(over="ignore", invalid="ignore"):
        for _ in it:
            try:
                loss, grads = indexer.loss_and_grads(x_queries, x_keys, p, q_pos, stage, topk)
            except ValueError:                                          # NaN or +inf scores: diverged
                history["diverged"] = True
                break
            history["loss"].append(loss / T)
            history["steps"] += 1
            if not np.isfinite(loss) or not all(np.isfinite(g).all() for g in grads.values()):
                history["diverged"] = True
                break
            optimizer_step(indexer.params, grads, lr, clip=clip, opt=opt)
    if hasattr(it, "close"):
        it.close()
    return history


def attention_target(q, k, scale=1.0, q_pos=None):
    """DSA's dense warm-up target for a single sequence: main attention summed over heads, L1-normalized.

    q: (1, T, H, d), k: (1, S, Hkv, d) -> p: (T, S), rows sum to 1.
    """
    pr = attention_probs(q, k, scale=scale, q_pos=q_pos)[0]            # (T, H, S)
    s = pr.sum(axis=1)
    return s / s.sum(axis=-1, keepdims=True)
