"""Exercises of notebook 04 (sparse attention, DeepSeek DSA): the lightning indexer's causal scores, one training step
of the indexer by hand (KL loss, backward pass through the ReLU and the projections, clipping, gradient descent;
dense warm-up and sparse stage), and the prefill speedup of DSA in closed form (lecture 10 §5; DeepSeek-V3.2 §2).

Shapes are for one sequence (no batch axis), as the notebook states them."""
from __future__ import annotations

import math

import numpy as np

from hybrid_lab.costs import dsa_cost
from hybrid_lab.exercises.framework import Case, Exercise, compare_values, register
from hybrid_lab.models.lightning_indexer import LightningIndexer, optimizer_step
from hybrid_lab.ops.lightning_indexer import lightning_indexer

INDEXER = ("hybrid_lab.ops.lightning_indexer:lightning_indexer",
           "hybrid_lab.models.lightning_indexer:LightningIndexer.select")
TRAINING = INDEXER + ("hybrid_lab.models.lightning_indexer:LightningIndexer.loss_and_grads",
                      "hybrid_lab.models.lightning_indexer:train_indexer",
                      "hybrid_lab.models.lightning_indexer:optimizer_step",
                      "hybrid_lab.models.lightning_indexer:dense_kl_loss",
                      "hybrid_lab.models.lightning_indexer:sparse_kl_loss",
                      "hybrid_lab.core.optim:clip_grad_norm")


# ------------------------------------------------------------------------------------------ 04.1 the indexer score
def index_scores_reference(q, w, k, q_pos):
    """q: (T, Hi, di), w: (T, Hi), k: (S, di), q_pos: (T,) ints -> I: (T, S),
    I[t, s] = Σ_j w[t, j] · ReLU(q[t, j] · k[s]) if s <= q_pos[t], else -inf. The numpy op whatever the backend
    (float64, like the student's code)."""
    scores, _ = lightning_indexer.numpy_impl(q[None], w[None], k[None], 1, q_pos)
    return scores[0]


def _positions(rng, T, S, past=2):
    """(T,) query positions in [0, S - 1 + past]: ragged, some past the last key (they see every key)."""
    return np.sort(rng.integers(0, S + past, T))


def score_case(rng, name, T=None, S=None, Hi=None, di=None, q_pos=None, w_sign=0, integer=False):
    """A 04.1 Case (q (T, Hi, di), w (T, Hi), k (S, di), q_pos (T,) int); q_pos(T, S) -> positions if given."""
    T = int(rng.integers(1, 7)) if T is None else T
    S = int(rng.integers(2, 12)) if S is None else S
    Hi = int(rng.integers(1, 5)) if Hi is None else Hi
    di = int(rng.integers(1, 6)) if di is None else di
    if integer:                          # small integers: many dot products are exactly 0
        q = rng.integers(-1, 2, (T, Hi, di)).astype(float)
        k = rng.integers(-1, 2, (S, di)).astype(float)
        w = rng.integers(-2, 3, (T, Hi)).astype(float)
    else:
        q, k, w = rng.normal(size=(T, Hi, di)), rng.normal(size=(S, di)), rng.normal(size=(T, Hi))
    if w_sign:
        w = w_sign * (np.abs(w) + 0.1)
    pos = _positions(rng, T, S) if q_pos is None else np.asarray(q_pos(T, S), dtype=np.int64)
    return Case(name, (q, w, k, pos), note=f"T={T}, S={S}, Hi={Hi}, di={di}, q_pos={pos.tolist()}")


def _score_cases(rng):
    return ([score_case(rng, "random") for _ in range(3)]
            + [score_case(rng, "one key (S = 1)", S=1, q_pos=lambda T, S: np.zeros(T)),
               score_case(rng, "negative head weights (w < 0)", w_sign=-1),
               score_case(rng, "q · k = 0 exactly (integer inputs)", T=4, S=8, integer=True),
               score_case(rng, "first query sees only key 0", q_pos=lambda T, S: np.r_[0, rng.integers(0, S, T - 1)],
                          T=int(rng.integers(2, 6))),
               score_case(rng, "queries past the cache (q_pos >= S - 1)",
                          q_pos=lambda T, S: S - 1 + rng.integers(0, 4, T))])


def _compare_scores(got, want, case):
    """The -inf mask first (the default tolerance, rtol · |inf|, would take any number for -inf), then the values."""
    try:
        g = np.asarray(got, dtype=np.float64)
    except (TypeError, ValueError):
        return f"the result is {type(got).__name__}, expected a (T, S) array"
    if g.shape == want.shape:
        bad = np.isneginf(g) != np.isneginf(want)
        if bad.any():
            t, s = (int(i) for i in np.argwhere(bad)[0])
            pos = int(case.args[3][t])
            why = f"not visible (s > q_pos[t] = {pos})" if s > pos else f"visible (s <= q_pos[t] = {pos})"
            return (f"the result wrong at t={t}, s={s} ({int(bad.sum())} of {bad.size} entries): got {g[t, s]:.6g}, "
                    f"expected {want[t, s]:.6g}: key {s} is {why}")
        g, want = np.where(np.isneginf(g), 0.0, g), np.where(np.isneginf(want), 0.0, want)
    return compare_values(g, want, "the result", ("t", "s"))


register(Exercise("04.1", "index_scores", index_scores_reference, _score_cases, compare=_compare_scores,
                  forbidden=INDEXER))


# ------------------------------------------------------------------------------------------ 04.2 one training step
def indexer_step_reference(params, x_queries, x_keys, p, q_pos, lr, clip=None, stage="dense", topk=None):
    """params: {"Wq": (D, Hi, di), "Ww": (D, Hi), "Wk": (D, di)} (+ "bw": (Hi,) with a bias on w); x_queries: (T, D);
    x_keys: (S, D); p: (T, S); q_pos: (T,). Returns (loss, grads before clipping, parameters after one step), through
    ``LightningIndexer.loss_and_grads`` and ``optimizer_step`` (plain gradient descent); ``params`` unchanged."""
    D, Hi, di = params["Wq"].shape
    ix = LightningIndexer(D, Hi, di, use_bias="bw" in params)
    ix.params = {n: np.array(a, dtype=np.float64) for n, a in params.items()}
    loss, grads = ix.loss_and_grads(x_queries, x_keys, p, q_pos, stage, topk)
    raw = {n: g.copy() for n, g in grads.items()}
    optimizer_step(ix.params, grads, lr, clip=clip)
    return loss, raw, ix.params


PARAM_AXES = {"Wq": ("d", "head", "i"), "Ww": ("d", "head"), "bw": ("head",), "Wk": ("d", "i")}


def _compare_step(got, want, case):
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        return "indexer_step must return a tuple (loss, grads, new_params)"
    probs, right = [], []
    p = compare_values(got[0], want[0], "loss")
    (probs if p else right).append(p or "loss")
    for part, g, w in (("grads", got[1], want[1]), ("new_params", got[2], want[2])):
        if not isinstance(g, dict) or set(g) != set(w):
            keys = sorted(g) if isinstance(g, dict) else type(g).__name__
            probs.append(f"{part} has keys {keys}, expected {sorted(w)}")
            continue
        bad = [compare_values(g[n], w[n], f"{part}['{n}']", PARAM_AXES[n]) for n in sorted(w)]
        bad = [b for b in bad if b]
        (probs if bad else right).append("; ".join(bad) if bad else part)
    if not probs:
        return None
    return "; ".join(probs) + (f"; {', '.join(right)} right" if right else "")


def target(rng, T, S, pos, zeros=False):
    """pos: (T,) int -> (T, S) target rows summing to 1 over the visible keys s <= pos[t]; zeros: about a third of
    them exactly 0."""
    vis = np.arange(S)[None, :] <= pos[:, None]
    p = rng.uniform(0.05, 1.0, (T, S)) ** 3 * vis
    if zeros:
        drop = (rng.random((T, S)) < 0.35) & vis
        drop[np.arange(T), np.minimum(pos, S - 1)] = False               # every row keeps one key with mass
        p = np.where(drop, 0.0, p)
    return p / p.sum(axis=1, keepdims=True)


def _params(rng, D, Hi, di, bias=True, integer=False):
    if integer:
        P = {"Wq": rng.integers(-1, 2, (D, Hi, di)), "Ww": rng.integers(-1, 2, (D, Hi)),
             "Wk": rng.integers(-1, 2, (D, di))}
        if bias:
            P["bw"] = rng.integers(-1, 3, Hi)
        return {n: a.astype(np.float64) for n, a in P.items()}
    P = {"Wq": rng.normal(0, 0.5, (D, Hi, di)), "Ww": rng.normal(0, 0.5, (D, Hi)), "Wk": rng.normal(0, 0.5, (D, di))}
    if bias:
        P["bw"] = rng.normal(0.3, 1.0, Hi)                                  # some head weights negative
    return P


def _relu_zero_matters(P, xq, xk, pos):
    """Some visible (t, j, s) with q·k exactly 0, w != 0, k[s] != 0 and x_t != 0 (so ReLU'(0) changes dWq)."""
    q = np.einsum("td,dje->tje", xq, P["Wq"])
    w = xq @ P["Ww"] + P.get("bw", 0.0)
    k = xk @ P["Wk"]
    z = np.einsum("tje,se->tjs", q, k)
    vis = np.arange(len(xk))[None, None, :] <= pos[:, None, None]
    hit = (z == 0) & vis & (w != 0)[:, :, None] & (np.abs(k).sum(1) > 0)[None, None, :] \
        & (np.abs(xq).sum(1) > 0)[:, None, None]
    return int(hit.sum())


def step_case(rng, name, T=None, S=None, D=None, Hi=None, di=None, bias=True, pos=None, zeros=False, lr=None,
              clip=None, stage="dense", topk=None, integer=False, same_keys=False):
    """A 04.2 Case (params {Wq (D, Hi, di), Ww (D, Hi), Wk (D, di), bw (Hi,)}, x_queries (T, D), x_keys (S, D),
    p (T, S), q_pos (T,), lr, clip, stage, topk); pos(T, S), clip(norm), topk(q_pos): callables if given."""
    T = int(rng.integers(2, 7)) if T is None else T
    S = int(rng.integers(3, 12)) if S is None else S
    D = int(rng.integers(2, 6)) if D is None else D
    Hi = int(rng.integers(1, 4)) if Hi is None else Hi
    di = int(rng.integers(1, 5)) if di is None else di
    for _ in range(200):
        P = _params(rng, D, Hi, di, bias, integer)
        if integer:
            xq = rng.integers(-1, 2, (T, D)).astype(np.float64)
            xk = rng.integers(-1, 2, (S, D)).astype(np.float64)
        else:
            xq, xk = rng.normal(size=(T, D)), rng.normal(size=(S, D))
        if same_keys:
            xk = np.repeat(xk[:1], S, axis=0)
        ps = _positions(rng, T, S) if pos is None else np.asarray(pos(T, S), dtype=np.int64)
        p = target(rng, T, S, ps, zeros)
        k = topk(ps) if callable(topk) else topk
        _, g, _ = indexer_step_reference(P, xq, xk, p, ps, 0.1, None, stage, k)
        norm = float(np.sqrt(math.fsum(float(np.sum(a * a)) for a in g.values())))
        if norm > 1e-3 and (not integer or same_keys or _relu_zero_matters(P, xq, xk, ps) >= 2):
            break                                                    # not every ReLU dead: a gradient to check
    lr = float(rng.uniform(0.05, 0.5)) if lr is None else lr
    clip = clip(norm) if callable(clip) else clip
    topk = k
    args = (P, xq, xk, p, ps, lr, clip, stage, topk)
    return Case(name, args, note=f"T={T}, S={S}, D={D}, Hi={Hi}, di={di}, bias={bias}, q_pos={ps.tolist()}, "
                                 f"lr={lr:.3g}, clip={clip if clip is None else round(clip, 4)}, stage={stage!r}"
                                 + (f", topk={topk}" if stage == "sparse" else ""))


def _no_mass_case(rng):
    """Sparse stage: the first query's top-k set holds no target mass (its row teaches nothing)."""
    T, S, D, Hi, di = 3, 10, 4, 2, 3
    for _ in range(200):                                                 # some ReLU alive on query 0's set
        P = _params(rng, D, Hi, di)
        xq, xk = rng.normal(size=(T, D)), rng.normal(size=(S, D))
        pos = np.array([S - 1, int(rng.integers(2, S)), S - 1])
        ix = LightningIndexer(D, Hi, di)
        ix.params = {n: a.copy() for n, a in P.items()}
        q, w, k = ix.project(xq, xk)
        _, idx = lightning_indexer.numpy_impl(q[None], w[None], k[None], 4, pos)   # idx: (1, T, 4)
        if (q[0] @ k[idx[0, 0]].T > 0).any():
            break
    p = target(rng, T, S, pos)
    p[0, idx[0, 0]] = 0.0                                                # row 0's mass off its own top-4
    p[0] /= p[0].sum()
    return Case("sparse: a set with no target mass", (P, xq, xk, p, pos, 0.2, None, "sparse", 4),
                note=f"T={T}, S={S}, q_pos={pos.tolist()}, topk=4, p[0] = 0 on the top-4 of query 0")


def _step_cases(rng):
    def big(norm):                                                      # a clip that has no effect
        return 10.0 * norm
    return ([step_case(rng, "random", clip=(None if i == 0 else big)) for i in range(3)]
            + [step_case(rng, "no bias on w", bias=False),
               step_case(rng, "a query that sees only key 0", pos=lambda T, S: np.r_[0, rng.integers(1, S, T - 1)]),
               step_case(rng, "queries past the cache (see every key)", pos=lambda T, S: S + rng.integers(0, 3, T)),
               step_case(rng, "ReLU at exactly 0 (integer inputs)", T=4, S=6, D=4, Hi=2, di=3, integer=True),
               step_case(rng, "target with zeros (0 · log 0 = 0)", zeros=True),
               step_case(rng, "clipping on (global norm > clip)", clip=lambda n: float(rng.uniform(0.2, 0.6)) * n),
               step_case(rng, "sparse stage", S=int(rng.integers(8, 14)), stage="sparse",
                         topk=int(rng.integers(2, 5))),
               step_case(rng, "sparse stage, clipping on", S=int(rng.integers(8, 14)), stage="sparse", topk=3,
                         clip=lambda n: 0.5 * n),
               step_case(rng, "sparse: topk >= visible keys (= dense)", stage="sparse",
                         topk=lambda ps: int(min(ps.max() + 1, 12)) + int(rng.integers(0, 3))),
               step_case(rng, "sparse: tied scores at the top-k boundary (equal keys)", S=8, stage="sparse",
                         topk=3, integer=True, same_keys=True, pos=lambda T, S: np.full(T, S - 1)),
               _no_mass_case(rng)])


register(Exercise("04.2", "indexer_step", indexer_step_reference, _step_cases, outputs=("loss", "grads", "new_params"),
                  compare=_compare_step, forbidden=TRAINING,
                  preamble="import numpy as np\nfrom hybrid_lab.ops.sparse_attention import topk_indices"))


# ------------------------------------------------------------------------------------------ 04.3 prefill speedup
def prefill_speedup_reference(L, cfg):
    """L: (n,) int context lengths; cfg: a DSAConfig -> (n,) speedups dense / (main + indexer / fp8_speedup)."""
    return dsa_cost.prefill_flops(L, cfg)["speedup"]


def dsa_cfg(rng, topk=None, fp8=None):
    """A random ``dsa_cost.DSAConfig`` for 04.3 (topk, fp8_speedup: drawn unless given)."""
    topk = int(rng.integers(4, 5000)) if topk is None else topk
    return dsa_cost.DSAConfig(n_layers=int(rng.integers(1, 80)), topk=topk,
                              mla_heads=int(rng.integers(1, 129)), qk_dim=int(rng.integers(16, 257)),
                              v_dim=int(rng.integers(16, 257)), index_heads=int(rng.integers(1, 65)),
                              index_dim=int(rng.integers(16, 129)),
                              fp8_speedup=float(rng.uniform(1.0, 4.0)) if fp8 is None else fp8)


def speedup_case(rng, name, L, cfg):
    """A 04.3 Case (L (n,) int64, cfg); L: lengths, or a callable topk -> lengths."""
    L = np.asarray(L(cfg.topk) if callable(L) else L, dtype=np.int64)
    return Case(name, (L, cfg), note=f"L={L.tolist()}, topk={cfg.topk}, MLA {cfg.mla_flops_per_pair:,} and indexer "
                                     f"{cfg.index_flops_per_pair:,} FLOPs per pair, fp8_speedup={cfg.fp8_speedup:.3g}")


def _speedup_cases(rng):
    return ([speedup_case(rng, "random", lambda k: rng.integers(1, 10 ** 6, 5), dsa_cfg(rng)) for _ in range(3)]
            + [speedup_case(rng, "L <= k (every key is selected)", lambda k: rng.integers(1, k + 1, 4), dsa_cfg(rng)),
               speedup_case(rng, "L = k - 1, k, k + 1 (the kink)", lambda k: [k - 1, k, k + 1], dsa_cfg(rng)),
               speedup_case(rng, "L = 1", [1], dsa_cfg(rng)),
               speedup_case(rng, "k = 1", lambda k: [1, 2, int(rng.integers(3, 1000))], dsa_cfg(rng, topk=1)),
               speedup_case(rng, "long contexts (L up to 2^33: int64 products overflow)",
                            lambda k: [2 ** 20, 2 ** 31 + int(rng.integers(0, 100)), 2 ** 33], dsa_cfg(rng)),
               speedup_case(rng, "no FP8 gain (fp8_speedup = 1)", lambda k: rng.integers(k, 100 * k, 3),
                            dsa_cfg(rng, fp8=1.0)),
               speedup_case(rng, "DeepSeek-V3.2 at 64K and 128K", [65536, 131072], dsa_cost.DEEPSEEK_V32)])


register(Exercise("04.3", "prefill_speedup", prefill_speedup_reference, _speedup_cases, axes={"result": ("i",)},
                  forbidden=("hybrid_lab.costs.dsa_cost:prefill_flops",)))
