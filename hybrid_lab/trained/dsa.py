"""DeepSeek's lightning indexer on a trained model's real attention (notebook 11).

The model is the trained dense-attention model of the retrieval experiment (``retrieval/dense``: 4 full-attention
layers, partial RoPE, MQA; it answers every needle). For each layer, DSA's recipe (DeepSeek-V3.2 report §2.1):

1. **Dense warm-up.** The model stays dense and frozen. The indexer reads the layer's input hidden state (after its
   RMSNorm) and is trained by KL to the layer's attention, summed over heads and L1-normalized:
   ``Σ_t KL(p[t, :] || softmax(I[t, :]))`` (:mod:`hybrid_lab.models.lightning_indexer`).
2. **Sparse stage.** The KL restricted to the indexer's own top-k set (``stage="sparse"``), two ways:
   the model frozen (:func:`train_layer_indexers`), and as the report does it (:func:`finetune_sparse`): every
   attention layer reads only the indexer's top-k, the main model is fine-tuned briefly on the task loss (torch twin,
   the selection recomputed from the current weights every step), and the indexer, whose input is detached, keeps
   learning the KL to the fine-tuned model's attention.

Then every attention layer reads only k positions per query, chosen by a *selector*: the oracle (the layer's own
top-k attention mass, what the indexer imitates), the trained indexer (after stage 1, after stage 2), an untrained
indexer, or random visible positions. :func:`sparse_forward` is the model's forward with that selection; with no
selector it is exactly the dense forward (a test checks it against ``Stack.forward``).
"""
from __future__ import annotations

import copy
import dataclasses
import os
import platform
import time
from pathlib import Path

import numpy as np

from hybrid_lab.core import checks
from hybrid_lab.core.blocks import apply_rope, masked_attention, rms_norm, silu
from hybrid_lab.core.optim import Adam, clip_grad_norm
from hybrid_lab.models.lightning_indexer import LightningIndexer, topk_recall
from hybrid_lab.models.stack import Stack
from hybrid_lab.ops.sparse_attention import sparse_attention, topk_indices
from hybrid_lab.trained import store, tasks

__all__ = ["dense_model", "layer_qkv", "layer_attention", "sparse_forward", "oracle_selector", "indexer_selector",
           "random_selector", "train_layer_indexers", "selection_masks", "read_masks", "finetune_sparse",
           "twin_trainer", "task_step", "indexer_recall", "previous_token_share", "attention_targets",
           "rope_ablation", "attention_entropy_rows", "evaluate_selectors", "run_experiment", "load_indexers", "KS",
           "SELECTORS", "FT"]


def dense_model(model):
    """``model`` if it is a :class:`Stack` of full-attention layers only (the trained dense model); else a
    ValueError."""
    if not isinstance(model, Stack) or any(k != "attn" for k in model.cfg.layers):
        raise ValueError(f"model must be a Stack of full-attention layers only (the trained dense model), got "
                         f"{type(model).__name__} {getattr(getattr(model, 'cfg', None), 'layers', '')}")
    return model


def _indexer_list(indexers, model=None, name: str = "indexers") -> list:
    """A non-empty list of LightningIndexers; with ``model``: one per layer, each of the model's width."""
    ok = isinstance(indexers, (list, tuple)) and len(indexers) > 0 \
        and all(isinstance(ix, LightningIndexer) for ix in indexers)
    if ok and model is not None:
        L, D = model.cfg.n_layers, model.cfg.d_model
        ok = len(indexers) == L and all(ix.d_model == D for ix in indexers)
        want = f"a list of {L} LightningIndexers of d_model {D} (one per layer)"
    else:
        want = "a non-empty list of LightningIndexers (one per layer)"
    if not ok:
        got = (f"{len(indexers)} items of {sorted({type(ix).__name__ for ix in indexers})}, d_model "
               f"{[getattr(ix, 'd_model', None) for ix in indexers]}" if isinstance(indexers, (list, tuple))
               else type(indexers).__name__)
        raise ValueError(f"{name} must be {want}, got {got}")
    return list(indexers)


def _selection(idx, i: int, T: int, n_kv: int) -> np.ndarray:
    """A selector's answer for layer i, checked: (T, n_kv, K) ints, -1 or a visible position (<= its query)."""
    idx = np.asarray(idx)
    if idx.ndim != 3 or idx.shape[:2] != (T, n_kv) or idx.dtype.kind not in "iu":
        raise ValueError(f"selector must return None or (T={T}, Hkv={n_kv}, K) integer positions for layer {i}, got "
                         f"shape {idx.shape} dtype {idx.dtype}")
    bad = (idx < -1) | (idx > np.arange(T)[:, None, None])
    if bad.any():
        t = int(np.argwhere(bad)[0][0])
        raise ValueError(f"selector must return -1 or positions <= the query's for layer {i}, got "
                         f"{idx[t].ravel().tolist()} for query {t}")
    return idx


def layer_qkv(model, i: int, x):
    """Layer i's q (T, Hq, d), k (T, Hkv, d) (RoPE at positions 0..T-1) and v (T, Hkv, dv) from its normalized
    input x (T, d_model)."""
    model = dense_model(model)
    i = checks.int_in("i", i, 0, model.cfg.n_layers)
    x = checks.finite_array("x", x, 2, f"(T, d_model={model.cfg.d_model})")
    if x.shape[1] != model.cfg.d_model:
        raise ValueError(f"x must be (T, d_model={model.cfg.d_model}), got shape {x.shape}")
    return _qkv(model, i, x, np.arange(len(x)))


def _mm(a, b, fixed_order: bool = False):
    """a @ b for 2-D arrays; with ``fixed_order`` summed by numpy's own einsum loop (no BLAS). BLAS libraries sum
    the products in an order that depends on the CPU's kernel and on the thread count, so the last bits of ``@``
    differ between machines; a short indexer training amplifies them into the second printed digit. Without BLAS
    the same numpy gives the same bits on every machine (the indexer's own training does the same:
    hybrid_lab.models.lightning_indexer)."""
    return np.einsum("ik,kj->ij", a, b) if fixed_order else a @ b


def _qkv(model, i, x, pos, fixed_order: bool = False):
    cfg, w, p = model.cfg, model.weights, f"layer.{i}.attn."
    T = len(x)
    q = _mm(x, w[p + "wq"], fixed_order).reshape(T, cfg.n_heads_q, cfg.d_qk)
    k = _mm(x, w[p + "wk"], fixed_order).reshape(T, cfg.n_heads_kv, cfg.d_qk)
    v = _mm(x, w[p + "wv"], fixed_order).reshape(T, cfg.n_heads_kv, cfg.d_v)
    rot = cfg.rope_dims_attn
    return apply_rope(q, pos, rot, cfg.rope_base), apply_rope(k, pos, rot, cfg.rope_base), v


def sparse_forward(model, tokens, selector=None, capture: list | None = None,
                   fixed_order: bool = False) -> np.ndarray:
    """The dense model's forward where each attention layer reads only what ``selector`` picks.

    model: a trained dense :class:`Stack`; tokens: (T,) ints. selector(i, x, probs) -> idx (T, Hkv, K) positions
    (-1 padded, each <= its query) or None (dense), with x (T, D) the layer's normalized input and probs (T, Hq, T)
    its dense attention probabilities. capture: a list that receives one dict per layer {"x", "probs"}.
    fixed_order: every product without BLAS (:func:`_mm`): the same bits on every machine, slower.
    Returns logits (T, vocab).
    """
    model = dense_model(model)
    cfg, w = model.cfg, model.weights
    tokens = checks.tokens("tokens", tokens, cfg.vocab)
    if selector is not None and not callable(selector):
        raise ValueError(f"selector must be None or a function (i, x, probs) -> idx, got {type(selector).__name__}")
    if capture is not None and not isinstance(capture, list):
        raise ValueError(f"capture must be None or a list, got {type(capture).__name__}")
    fixed_order = checks.flag("fixed_order", fixed_order)
    T = len(tokens)
    pos = np.arange(T)
    causal = pos[None, :] <= pos[:, None]
    scale = cfg.d_qk ** -0.5
    h = w["embed"][tokens]
    for i in range(cfg.n_layers):
        x = rms_norm(h)
        q, k, v = _qkv(model, i, x, pos, fixed_order)
        o, probs = masked_attention(q, k, v, causal, scale)
        if capture is not None:
            capture.append({"x": x, "probs": probs})
        idx = selector(i, x, probs) if selector is not None else None
        if idx is not None:
            idx = _selection(idx, i, T, cfg.n_heads_kv)
            o = sparse_attention(q[None], k[None], v[None], idx[None], scale=scale)[0]
        h = h + _mm(o.reshape(T, -1), w[f"layer.{i}.attn.wo"], fixed_order)
        u = silu(_mm(rms_norm(h), w[f"layer.{i}.mlp.w1"], fixed_order))
        h = h + _mm(u, w[f"layer.{i}.mlp.w2"], fixed_order)
    return _mm(rms_norm(h), w["lm_head"], fixed_order)


def layer_attention(model, tokens, fixed_order: bool = False) -> list:
    """Per layer {"x": (T, D) normalized input, "probs": (T, Hq, T), "target": (T, T) heads summed and
    L1-normalized (DSA's warm-up target)} of one dense forward (``fixed_order``: as :func:`sparse_forward`)."""
    cap: list = []
    sparse_forward(model, tokens, capture=cap, fixed_order=fixed_order)
    for c in cap:
        s = c["probs"].sum(axis=1)
        c["target"] = s / s.sum(axis=-1, keepdims=True)
    return cap


def oracle_selector(k: int):
    """The layer's own top-k positions by attention mass summed over heads (what the indexer is taught)."""
    k = checks.pos_int("k", k)

    def select(i, x, probs):
        T = probs.shape[0]
        mass = np.where(np.tri(T, dtype=bool), probs.sum(axis=1), -np.inf)
        return topk_indices(mass, k)[:, None, :]
    return select


def indexer_selector(indexers: list, k: int):
    """Top-k by each layer's lightning indexer (``indexers[i]`` scores layer i from its normalized input)."""
    indexers = _indexer_list(indexers)
    k = checks.pos_int("k", k)

    def select(i, x, probs):
        if not 0 <= i < len(indexers):
            raise ValueError(f"indexers must hold one indexer per layer, got {len(indexers)}: none for layer {i}")
        T = x.shape[0]
        return indexers[i].select(x, x, k, np.arange(T))[1][:, None, :]
    return select


def random_selector(k: int, seed: int = 0):
    """k positions drawn uniformly among the visible ones (a fresh draw per call)."""
    k = checks.pos_int("k", k)
    rng = np.random.default_rng(checks.nonneg_int("seed", seed))

    def select(i, x, probs):
        T = probs.shape[0]
        return topk_indices(np.where(np.tri(T, dtype=bool), rng.random((T, T)), -np.inf), k)[:, None, :]
    return select


def train_layer_indexers(model, train_tokens, steps: int = 300, lr: float = 3e-3, stage: str = "dense",
                         topk: int | None = None, indexers: list | None = None, n_heads: int = 4, d_index: int = 16,
                         rope_dims: int = 8, seed: int = 0, show_progress: bool = False,
                         fixed_order: bool = False) -> tuple:
    """Train one lightning indexer per attention layer by KL to that layer's attention (the model frozen).

    train_tokens: (N, T) training sequences; each step takes the next sequence (cycling) and updates every layer's
    indexer with Adam (global-norm clip 1.0). stage "dense" (warm-up) or "sparse" (KL on the indexer's own top-k:
    pass ``topk``; continue from ``indexers``). fixed_order: the model's forward without BLAS (the same targets,
    so the same indexers, on every machine; :func:`sparse_forward`). Returns (indexers, {"loss": (steps, n_layers)
    per-query KL}).
    """
    from hybrid_lab.core.progress import progress

    model = dense_model(model)
    toks = checks.int_array("train_tokens", train_tokens, 2, "(N, T) token ids", lo=0, hi=model.cfg.vocab)
    if 0 in toks.shape:
        raise ValueError(f"train_tokens must be a non-empty (N, T) array, got shape {toks.shape}")
    steps = checks.pos_int("steps", steps)
    checks.positive_number("lr", lr)
    if stage not in ("dense", "sparse"):
        raise ValueError(f"stage must be 'dense' or 'sparse', got {stage!r}")
    if topk is not None or stage == "sparse":
        topk = checks.pos_int("topk", topk)
        checks.output_size("topk (each query's top-k: T x topk per layer)", (toks.shape[1], topk))
    seed = checks.nonneg_int("seed", seed)
    L, D = model.cfg.n_layers, model.cfg.d_model
    checks.output_size("steps (the loss history is steps x n_layers)", (steps, L))
    if indexers is None:
        indexers = [LightningIndexer(D, n_heads, d_index, seed=seed * 100 + i, rope_dims=rope_dims)
                    for i in range(L)]
    indexers = _indexer_list(indexers, model)
    opts = [Adam(ix.params, lr=lr) for ix in indexers]
    cache = {}
    losses = np.zeros((steps, L))
    it = progress(range(steps), desc=f"indexers ({stage})") if show_progress else range(steps)
    for step in it:
        n = step % len(toks)
        if n not in cache:
            cache[n] = layer_attention(model, toks[n], fixed_order)
        T = toks.shape[1]
        for i, (ix, opt) in enumerate(zip(indexers, opts)):
            c = cache[n][i]
            loss, grads = ix.loss_and_grads(c["x"], c["x"], c["target"], np.arange(T), stage, topk)
            clip_grad_norm(grads, 1.0)
            opt.step(grads)
            losses[step, i] = loss / T
    return indexers, {"loss": losses}


def selection_masks(model, tokens, indexers: list, k: int) -> tuple:
    """The indexer top-k selection of each layer in the sparse forward of ``tokens`` (N, T): returns (masks
    (N, n_layers, T, T) bool, True = read, always within the causal mask; captures [per sequence: the per-layer
    {"x", "probs"} of :func:`sparse_forward`]). Layer i's selection is computed from its input in the SPARSE forward
    (the layers below already read sparsely), as DSA runs it."""
    model = dense_model(model)
    indexers = _indexer_list(indexers, model)
    toks = checks.int_array("tokens", tokens, 2, "(N, T) token ids", lo=0, hi=model.cfg.vocab)
    k = checks.pos_int("k", k)
    N, T = toks.shape
    checks.output_size("k (each layer's selection is T x k)", (T, k))
    pick = indexer_selector(indexers, k)
    return read_masks(model, toks, lambda n: pick)


def read_masks(model, tokens, selector_for) -> tuple:
    """The sparse forward of each sequence n of ``tokens`` (N, T) with the selector ``selector_for(n)`` (as
    :func:`sparse_forward` takes it; MQA: KV head 0), recording what each query reads. Returns (masks
    (N, n_layers, T, T) bool, True = read; captures [per sequence: the per-layer {"x", "probs"}])."""
    model = dense_model(model)
    toks = checks.int_array("tokens", tokens, 2, "(N, T) token ids", lo=0, hi=model.cfg.vocab)
    if not callable(selector_for):
        raise ValueError(f"selector_for must be a function n -> selector, got {type(selector_for).__name__}")
    N, T = toks.shape
    checks.output_size("tokens (masks of N x n_layers x T x T)", (N, model.cfg.n_layers, T, T))
    masks = np.zeros((N, model.cfg.n_layers, T, T), bool)
    caps = []
    rows = np.arange(T)[:, None]
    for n, row in enumerate(toks):
        pick = selector_for(n)

        def select(i, x, probs, n=n, pick=pick):
            idx = pick(i, x, probs)
            at = idx[:, 0]                                                  # (T, K) positions, -1 padded
            masks[n, i][np.broadcast_to(rows, at.shape)[at >= 0], at[at >= 0]] = True
            return idx
        cap: list = []
        sparse_forward(model, row, select, capture=cap)
        caps.append(cap)
    return masks, caps


def finetune_sparse(model, indexers: list, steps: int = 100, k: int = 8, batch: int = 8, lr: float = 3e-4,
                    lr_indexer: float = 3e-3, seed: int = 0, show_progress: bool = False) -> tuple:
    """DSA's sparse stage with the main model fine-tuned (DeepSeek-V3.2 report §2.1): each step, on ``batch`` fresh
    training sequences (tasks.mix, seeds 70000 + ...), every attention layer reads only the top-``k`` positions of its
    indexer (computed from the current weights), the model takes one AdamW step on the task loss (cross-entropy on
    the answer positions, as in training; torch twin, clip 1.0) and each indexer one Adam step on the sparse KL to the
    model's attention at its (detached) input. The model and ``indexers`` are copied, not changed.
    Returns (fine-tuned numpy Stack (float32), indexers, {"loss": (steps,) task loss, "kl": (steps, n_layers)}).
    """
    import torch

    from hybrid_lab.core.progress import progress

    model = dense_model(model)
    indexers = copy.deepcopy(_indexer_list(indexers, model))
    steps, k, batch = checks.pos_int("steps", steps), checks.pos_int("k", k), checks.pos_int("batch", batch)
    checks.output_size("steps (the loss history is steps x n_layers)", (steps, model.cfg.n_layers))
    checks.output_size("batch (each step draws batch x 128 tokens)", (batch, 128))
    checks.output_size("k (each layer's selection is 128 x k per sequence)", (128, k))
    lr, lr_indexer = checks.positive_number("lr", lr), checks.positive_number("lr_indexer", lr_indexer)
    seed = checks.nonneg_int("seed", seed)
    torch.manual_seed(seed)
    cfg, net, opt = twin_trainer(model, lr)
    opts = [Adam(ix.params, lr=lr_indexer) for ix in indexers]
    L = cfg.n_layers
    losses, kls = np.zeros(steps), np.zeros((steps, L))
    it = progress(range(steps), desc="sparse stage (model + indexers)") if show_progress else range(steps)
    for step in it:
        b = tasks.mix(batch, 128, seed=70_000 + seed * 10_000 + step, n_local=4)
        cur = Stack(cfg, net.numpy_weights())
        masks, caps = selection_masks(cur, b.tokens, indexers, k)
        T = b.tokens.shape[1]
        for i, (ix, o) in enumerate(zip(indexers, opts)):            # the indexers: KL on their own top-k
            total = None
            for cap in caps:
                s = cap[i]["probs"].sum(axis=1)
                loss, g = ix.loss_and_grads(cap[i]["x"], cap[i]["x"], s / s.sum(axis=-1, keepdims=True),
                                            np.arange(T), "sparse", k)
                kls[step, i] += loss / T / len(caps)
                total = g if total is None else {n: total[n] + g[n] for n in g}
            total = {n: v / len(caps) for n, v in total.items()}
            clip_grad_norm(total, 1.0)
            o.step(total)
        losses[step] = task_step(net, opt, b, masks)
    return Stack(cfg, net.numpy_weights()), indexers, {"loss": losses, "kl": kls}


def twin_trainer(model, lr: float) -> tuple:
    """The torch twin of a dense :class:`Stack` (float32, its weights copied) and its optimizer as training had
    it: AdamW (0.9, 0.95), weight decay 0.1 on matrices only. Returns (cfg, net, opt)."""
    import torch

    from hybrid_lab.trained.torch_stack import TorchStack

    model, lr = dense_model(model), checks.positive_number("lr", lr)
    cfg = dataclasses.replace(model.cfg, dtype="float32")
    net = TorchStack(cfg, {n: np.asarray(a, np.float32) for n, a in model.weights.items()})
    decay = [p for p in net.parameters() if p.ndim >= 2]
    rest = [p for p in net.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}], lr=lr,
                            betas=(0.9, 0.95))
    return cfg, net, opt


def task_step(net, opt, batch, masks=None) -> float:
    """One step of the twin ``net`` on ``batch`` (a tasks.Batch): cross-entropy on the answer positions (as in
    training), clip 1.0, ``opt`` steps. masks: None (dense) or (B, n_layers, T, T) bool, what each query reads.
    Returns the loss."""
    import torch

    if not isinstance(batch, tasks.Batch):
        raise ValueError(f"batch must be a tasks.Batch, got {type(batch).__name__}")
    L = net.cfg.n_layers
    if masks is not None and (not isinstance(masks, np.ndarray) or masks.dtype != bool
                              or masks.shape != batch.tokens.shape[:1] + (L,) + batch.tokens.shape[1:] * 2):
        raise ValueError(f"masks must be None or a (B, {L}, T, T) bool array for tokens {batch.tokens.shape}, got "
                         f"{getattr(masks, 'shape', type(masks).__name__)}")
    select = None if masks is None else [torch.as_tensor(masks[:, i]) for i in range(L)]
    logits = net(torch.as_tensor(batch.tokens), select)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             torch.as_tensor(batch.targets).reshape(-1), ignore_index=-1)
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
    opt.step()
    return float(loss.detach())


def indexer_recall(model, indexers, tokens, k: int, fixed_order: bool = False) -> np.ndarray:
    """Per layer: mean fraction of the oracle top-k (attention mass) the indexer's top-k finds, over the
    sequences ``tokens`` (N, T), queries with at least k visible positions only (``fixed_order``: the model's
    forward without BLAS, :func:`sparse_forward`). Returns (n_layers,)."""
    model = dense_model(model)
    indexers = _indexer_list(indexers, model)
    k = checks.pos_int("k", k)
    toks = checks.int_array("tokens", tokens, 2, "(N, T) token ids", lo=0, hi=model.cfg.vocab)
    if 0 in toks.shape or k > toks.shape[1]:
        raise ValueError(f"tokens must be a non-empty (N, T) array with T >= k={k} (queries that see k positions), "
                         f"got shape {toks.shape}")
    rec = np.zeros((len(toks), model.cfg.n_layers))
    oracle, mine = oracle_selector(k), indexer_selector(indexers, k)
    for n, row in enumerate(toks):
        for i, c in enumerate(layer_attention(model, row, fixed_order)):
            t0 = k - 1                                          # queries that see at least k positions
            rec[n, i] = topk_recall(mine(i, c["x"], c["probs"])[t0:, 0], oracle(i, c["x"], c["probs"])[t0:, 0])
    return rec.mean(axis=0)


def previous_token_share(model, tokens) -> np.ndarray:
    """Per layer: the share of queries t >= 1 whose most-attended key (attention summed over heads) is t - 1, the
    token just before, over the sequences ``tokens`` (N, T). Returns (n_layers,): near 1 for a positional layer."""
    model = dense_model(model)
    toks = checks.int_array("tokens", tokens, 2, "(N, T) token ids", lo=0, hi=model.cfg.vocab)
    if toks.shape[0] == 0 or toks.shape[1] < 2:
        raise ValueError(f"tokens must be a non-empty (N, T) array with T >= 2 (a query with a token before it), got "
                         f"shape {toks.shape}")
    T = toks.shape[1]
    hit = np.zeros((len(toks), model.cfg.n_layers))
    for n, row in enumerate(toks):
        for i, c in enumerate(layer_attention(model, row)):
            top = c["probs"].sum(axis=1)[1:].argmax(axis=-1)                 # (T - 1,) queries 1 .. T-1
            hit[n, i] = float(np.mean(top == np.arange(T - 1)))
    return hit.mean(axis=0)


def attention_targets(model, tokens, recent: int = 4, top: int = 8, min_t: int = 16) -> dict:
    """Where a trained model's attention goes (Lecture 10 §5.4: "the start's sink, the recent tokens, a few
    semantically related places"). Per layer and head, the mean attention mass of queries t >= ``min_t`` on

    - ``sink``: key 0, the sequence's first token;
    - ``recent``: keys t - recent + 1 .. t (the query itself and the ones just before it), key 0 left out;
    - ``match``: the other keys that hold the query's token, or follow one (where an induction head reads);
    - ``top``: the ``top`` most-attended keys, whichever they are (how concentrated the row is);

    with ``uniform_*``: what uniform attention over the t + 1 visible keys gives on the same sets (the baseline).
    tokens: (N, T) token ids. Returns {name: (n_layers, Hq) for the masses, (n_layers,) for the uniform ones}."""
    model = dense_model(model)
    toks = checks.int_array("tokens", tokens, 2, "(N, T) token ids", lo=0, hi=model.cfg.vocab)
    recent, top, min_t = checks.pos_int("recent", recent), checks.pos_int("top", top), checks.pos_int("min_t", min_t)
    T = toks.shape[1]
    if toks.shape[0] == 0 or T <= min_t:
        raise ValueError(f"tokens must be a non-empty (N, T) array with T > min_t = {min_t} (queries to average), "
                         f"got shape {toks.shape}")
    L, H = model.cfg.n_layers, model.cfg.n_heads_q
    names = ("sink", "recent", "match", "top")
    acc = {n: np.zeros((L, H)) for n in names} | {f"uniform_{n}": np.zeros(L) for n in names}
    count = 0
    for row in toks:
        sets = []                                   # per query: (sink, recent, match) masks over keys 0..T-1
        for t in range(min_t, T):
            sink = np.zeros(T, bool)
            sink[0] = True
            rec = np.zeros(T, bool)
            rec[max(1, t - recent + 1):t + 1] = True
            same = np.zeros(T, bool)
            same[:t + 1] = row[:t + 1] == row[t]
            after = np.zeros(T, bool)
            after[1:t + 1] = same[:t]
            sets.append((sink, rec, (same | after) & ~rec & ~sink))
        for i, c in enumerate(layer_attention(model, row)):
            p = c["probs"]                          # (T, Hq, T): query, head, key
            for t, (sink, rec, match) in zip(range(min_t, T), sets):
                for name, m in zip(names[:3], (sink, rec, match)):
                    acc[name][i] += p[t][:, m].sum(axis=-1)
                    acc[f"uniform_{name}"][i] += m.sum() / (t + 1)
                acc["top"][i] += np.sort(p[t], axis=-1)[:, -top:].sum(axis=-1)
                acc["uniform_top"][i] += min(top, t + 1) / (t + 1)
        count += T - min_t
    return {n: v / count for n, v in acc.items()}


def rope_ablation(model, train_tokens, eval_tokens, steps: int = 120, lr: float = 1e-2, k: int = 8,
                  rope_dims: int = 8) -> dict:
    """The same dense warm-up twice from the same seed, with partial RoPE on ``rope_dims`` of the indexer's dims and
    with none (content only, ``ReLU(q · k)``): {"kl rope", "kl no rope": (n_layers,) the per-query training KL, mean
    of the last 10 steps; "recall rope", "recall no rope": (n_layers,) recall@k on ``eval_tokens``
    (:func:`indexer_recall`)}. The model's forward runs without BLAS (``fixed_order``): the content-only training is
    chaotic enough that BLAS's last bits, which differ with the CPU and the thread count, changed its printed KL
    and recall in the second digit."""
    steps = checks.pos_int("steps", steps)
    out = {}
    for name, rd in (("rope", checks.pos_int("rope_dims", rope_dims)), ("no rope", 0)):
        ixs, log = train_layer_indexers(model, train_tokens, steps=steps, lr=lr, rope_dims=rd, fixed_order=True)
        out[f"kl {name}"] = log["loss"][-10:].mean(axis=0)
        out[f"recall {name}"] = indexer_recall(model, ixs, eval_tokens, k, fixed_order=True)
    return out


# ------------------------------------------------------------------------------------------------- the experiment
KS = (2, 4, 8, 16)
FT = "indexer stage 2, model fine-tuned"           # the report's sparse stage (finetune_sparse), in results
SELECTORS = ("oracle", "indexer stage 1", "indexer stage 2", "untrained indexer", "random")


def attention_entropy_rows(model, tokens, min_visible: int = 16) -> np.ndarray:
    """Mean attention entropy (nats, heads and queries with >= ``min_visible`` keys) per layer, over ``tokens``
    (N, T), next to ln(#visible) of uniform attention. Returns (n_layers + 1,): the layers, then the uniform one."""
    from hybrid_lab.models.attention_stats import attention_entropy

    toks = checks.int_array("tokens", tokens, 2, "(N, T) token ids", lo=0, hi=dense_model(model).cfg.vocab)
    min_visible = checks.pos_int("min_visible", min_visible)
    if 0 in toks.shape or toks.shape[1] < min_visible:
        raise ValueError(f"tokens must be a non-empty (N, T) array with T >= min_visible={min_visible}, got shape "
                         f"{toks.shape}")
    T = toks.shape[1]
    rows = np.arange(min_visible - 1, T)
    ent = np.zeros(model.cfg.n_layers)
    for row in toks:
        for i, c in enumerate(layer_attention(model, row)):
            ent[i] += attention_entropy(c["probs"][rows]).mean() / len(toks)
    return np.concatenate([ent, [np.log(rows + 1).mean()]])


def evaluate_selectors(model, batch, indexers: dict, ks=KS, seed: int = 0) -> dict:
    """Needle and local accuracy of ``batch`` (a tasks.Batch) under dense attention and every selector at every k.
    indexers: {"indexer stage 1": [...], "indexer stage 2": [...], "untrained indexer": [...]}.
    Returns {"dense needle": acc, "dense local": acc, "<selector> k=<k> needle": acc, ...}."""
    model = dense_model(model)
    if not isinstance(batch, tasks.Batch):
        raise ValueError(f"batch must be a tasks.Batch, got {type(batch).__name__}")
    checks.int_array("batch.tokens", batch.tokens, 2, "(B, T) token ids", lo=0, hi=model.cfg.vocab)
    names = [n for n in SELECTORS if n not in ("oracle", "random")]
    if not isinstance(indexers, dict) or any(n not in indexers for n in names):
        raise ValueError(f"indexers must be a dict with the keys {names}, got "
                         f"{sorted(indexers) if isinstance(indexers, dict) else type(indexers).__name__}")
    indexers = {n: _indexer_list(indexers[n], model, f"indexers[{n!r}]") for n in names}
    if not isinstance(ks, (list, tuple)) or not ks:
        raise ValueError(f"ks must be a non-empty list of ints >= 1, got {ks!r}")
    ks = [checks.pos_int(f"ks[{j}]", k) for j, k in enumerate(ks)]
    seed = checks.nonneg_int("seed", seed)

    def acc(sel):
        lg = np.stack([sparse_forward(model, t, sel) for t in batch.tokens])
        return (tasks.accuracy(lg, batch, tasks.KIND_NEEDLE)[0], tasks.accuracy(lg, batch, tasks.KIND_LOCAL)[0])

    out = {}
    out["dense needle"], out["dense local"] = acc(None)
    for k in ks:
        for name in SELECTORS:
            sel = {"oracle": lambda: oracle_selector(k), "random": lambda: random_selector(k, seed)}.get(
                name, lambda: indexer_selector(indexers[name], k))()
            out[f"{name} k={k} needle"], out[f"{name} k={k} local"] = acc(sel)
    return out


def run_experiment(out, seeds=(0, 1, 2), quick: bool = False, command: str = "") -> list:
    """For each seed of the trained dense model: train the indexers (dense warm-up, then the sparse stage), store
    them as a checkpoint ``out``/dsa/indexer/seedK (with its meta: the accuracies of every selector at every k,
    the recall of the oracle top-8 per layer, the attention entropies) and return the metas.
    seeds: a non-empty list of the seeds of the stored dense model (``retrieval/dense/seedK``)."""
    if not isinstance(out, (str, os.PathLike)):
        raise ValueError(f"out must be a folder path (str or Path), got {type(out).__name__}")
    out = Path(out)
    if not isinstance(seeds, (list, tuple)) or not seeds:
        raise ValueError(f"seeds must be a non-empty list of seeds of the stored dense model, got {seeds!r}")
    seeds = [checks.nonneg_int(f"seeds[{j}]", s) for j, s in enumerate(seeds)]
    missing = [s for s in seeds if not (store.CHECKPOINTS / "retrieval" / "dense" / f"seed{s}.npz").exists()]
    if missing:
        raise ValueError(f"seeds must name stored dense models (retrieval/dense/seedK; hybrid-lab train retrieval), "
                         f"none for {missing}")
    if not isinstance(quick, (bool, np.bool_)):
        raise ValueError(f"quick must be True or False, got {quick!r}")
    if not isinstance(command, str):
        raise ValueError(f"command must be a str (recorded in the meta), got {type(command).__name__}")
    steps1, steps2, steps3, n_train, n_eval = (40, 20, 2, 8, 8) if quick else (800, 300, 100, 64, 64)
    metas = []
    for seed in seeds:
        t0 = time.time()
        model, mmeta = store.load_checkpoint(store.CHECKPOINTS / "retrieval" / "dense" / f"seed{seed}")
        tr = tasks.mix(n_train, 128, seed=50_000 + seed, n_local=4).tokens          # training seeds (< EVAL_SEED)
        ev = tasks.mix(n_eval, 128, seed=tasks.EVAL_SEED + 1, n_local=4)
        untrained = [LightningIndexer(model.cfg.d_model, 4, 16, seed=seed * 100 + i, rope_dims=8)
                     for i in range(model.cfg.n_layers)]
        st1, log1 = train_layer_indexers(model, tr, steps=steps1, lr=1e-2, seed=seed)
        st2, log2 = train_layer_indexers(model, tr, steps=steps2, lr=3e-3, stage="sparse", topk=8,
                                         indexers=copy.deepcopy(st1))
        ft, st2ft, log3 = finetune_sparse(model, st1, steps=steps3, k=8, batch=2 if quick else 8, seed=seed)
        final = evaluate_selectors(model, ev, {"indexer stage 1": st1, "indexer stage 2": st2,
                                               "untrained indexer": untrained}, seed=seed)
        fin_ft = evaluate_selectors(ft, ev, {"indexer stage 1": st2ft, "indexer stage 2": st2ft,
                                             "untrained indexer": untrained}, seed=seed)
        final["fine-tuned dense needle"], final["fine-tuned dense local"] = fin_ft["dense needle"], fin_ft["dense local"]
        for k in KS:
            for what in ("needle", "local"):
                final[f"{FT} k={k} {what}"] = fin_ft[f"indexer stage 2 k={k} {what}"]
        for name, m, ixs in (("stage 1", model, st1), ("stage 2", model, st2), ("untrained", model, untrained),
                             ("stage 2 fine-tuned", ft, st2ft)):
            for i, r in enumerate(indexer_recall(m, ixs, ev.tokens[:16], 8)):
                final[f"recall@8 {name} layer {i}"] = float(r)
        ent = attention_entropy_rows(model, ev.tokens[:16])
        for i, e in enumerate(ent[:-1]):
            final[f"entropy layer {i}"] = float(e)
        final["entropy uniform"] = float(ent[-1])
        weights = {f"stage{st}.layer.{i}.{n}": a for st, ixs in ((1, st1), (2, st2), ("2ft", st2ft))
                   for i, ix in enumerate(ixs) for n, a in ix.params.items()}
        n_params = int(sum(a.size for n, a in weights.items() if n.startswith("stage1.")))
        weights.update({f"finetuned.{n}": a for n, a in ft.weights.items()})
        meta = {"experiment": "dsa", "model": "indexer", "label": "lightning indexers (4 heads, d 16, partial RoPE 8) "
                "on the trained dense model, one per layer", "seed": seed, "n_params": n_params,
                "model_config": mmeta["model_config"], "base_checkpoint": f"retrieval/dense/seed{seed}",
                "task": "mix", "task_kw": {"n_local": 4},
                "train": {"stage 1": f"dense warm-up, KL to the layer's attention, {steps1} steps, Adam lr 1e-2",
                          "stage 2": f"sparse KL on the indexer's own top-8, {steps2} steps, Adam lr 3e-3",
                          "model": "frozen in stages 1 and 2",
                          "stage 2ft": f"the report's sparse stage, from stage 1: the model fine-tuned under the "
                                       f"indexer's top-8 ({steps3} steps of 8 sequences, AdamW lr 3e-4, weight decay "
                                       f"0.1, clip 1.0, task loss) while the indexer learns the sparse KL (Adam lr "
                                       f"3e-3); stored as stage2ft.* and finetuned.* (the model)",
                          "sequences": f"{n_train} training sequences (seeds 50000 + seed), one per step, cycling"},
                "command": command or "hybrid-lab train dsa", "machine": f"CPU ({platform.machine()}), numpy",
                "tokens_per_s": round((steps1 + steps2) * 128 / max(time.time() - t0, 1e-9)),
                "train_seconds": round(time.time() - t0, 1),
                "log": {"step": list(range(0, steps1 + steps2, 10)),
                        "loss": [round(float(v), 5) for v in np.concatenate([log1["loss"], log2["loss"]]).mean(1)[::10]],
                        "stage 2ft task loss": [round(float(v), 5) for v in log3["loss"][::5]],
                        "stage 2ft kl": [round(float(v), 5) for v in log3["kl"].mean(1)[::5]],
                        "loss_per_layer_stage1_last": [round(float(v), 4) for v in log1["loss"][-1]],
                        "eval_step": [], "eval": []},
                "final": {k: round(float(v), 4) for k, v in final.items()},
                "eval_sets": f"held-out: tasks.mix seed EVAL_SEED + 1, {n_eval} sequences"}
        store.save_checkpoint(out / "dsa" / "indexer" / f"seed{seed}", weights, meta)
        print(f"  dsa seed {seed}: indexer k=4 needle {final['indexer stage 1 k=4 needle']:.2f}, oracle k=2 needle "
              f"{final['oracle k=2 needle']:.2f}, random k=16 needle {final['random k=16 needle']:.2f} "
              f"({time.time() - t0:.0f} s)", flush=True)
        metas.append(meta)
    return metas


def load_indexers(path, stage: int = 2, dtype: str = "float64", finetuned: bool = False) -> tuple:
    """(the trained dense model, [one LightningIndexer per layer], meta) of a stored ``dsa/indexer/seedK``;
    ``stage`` 1 (after the dense warm-up) or 2 (after the sparse stage). finetuned=True (stage 2 only): the report's
    sparse stage, the model fine-tuned under top-k attention and the indexers trained with it (:func:`finetune_sparse`):
    returns that model and those indexers."""
    if isinstance(stage, (bool, np.bool_)) or not isinstance(stage, (int, np.integer)) or stage not in (1, 2):
        raise ValueError(f"stage must be 1 or 2, got {stage!r}")
    if not isinstance(finetuned, (bool, np.bool_)) or (finetuned and stage != 2):
        raise ValueError(f"finetuned must be True (with stage 2) or False, got {finetuned!r} with stage {stage}")
    w, meta = store.read_checkpoint(path, dtype)
    base = meta.get("base_checkpoint") if meta.get("experiment") == "dsa" else None
    if not isinstance(base, str):
        raise ValueError(f"path must be a dsa/indexer checkpoint (its meta names the base_checkpoint), got "
                         f"{path} (experiment {meta.get('experiment')!r})")
    model, _ = store.load_checkpoint(store.CHECKPOINTS / base)
    tag = "2ft" if finetuned else stage
    if finetuned:
        fw = {n: w.get(f"finetuned.{n}") for n in model.weights}
        fw = {n: None if a is None else a.astype(model.weights[n].dtype) for n, a in fw.items()}
        if any(a is None for a in fw.values()):
            raise ValueError(f"path: {path} holds no fine-tuned model (finetuned.*): re-run hybrid-lab train dsa")
        model = Stack(model.cfg, fw)
    ixs = []
    for i in range(model.cfg.n_layers):
        ix = LightningIndexer(model.cfg.d_model, 4, 16, rope_dims=8)
        for name, a in ix.params.items():
            key = f"stage{tag}.layer.{i}.{name}"
            if key not in w or w[key].shape != a.shape:
                raise ValueError(f"path: {path} holds no {key} of shape {a.shape} (got "
                                 f"{getattr(w.get(key), 'shape', 'none')}); stage {stage} of this checkpoint is "
                                 f"missing: re-run hybrid-lab train dsa")
            ix.params[name] = w[key]
        ixs.append(ix)
    return model, ixs, meta
