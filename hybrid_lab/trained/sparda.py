"""SparDA's block selection on a trained model's real attention: the InfLLM-V2 selector, the
Forecast head trained on the model's real hidden states, and real decode traces through the offload simulator.

The model is the trained dense model of the retrieval experiment (as in :mod:`hybrid_lab.trained.dsa`). Blocks are
8 tokens (a 128-token context has 16; SparDA's are 64 of 128K), compressed keys are means over windows of 8 with
stride 4 (SparDA: 32 / 16). Per query: the init block, the local block (the query's own) and the top-``k`` blocks by

- **InfLLM-V2**: the layer's own queries against its compressed keys (softmax per head, summed over a KV group,
  max-pooled onto blocks; :func:`hybrid_lab.models.infllm.infllm_v2_select`);
- **oracle**: exact attention mass per block (:func:`hybrid_lab.models.forecast.oracle_blocks`);
- **fine teacher** / **coarse teacher**: the Forecast head's training target used directly as the selector (the
  layer's own queries, as InfLLM-V2, on (2, 1) keys max-pooled onto the (8, 4) grid, or on the (8, 4) keys: the
  coarse teacher's selection IS InfLLM-V2's), the ceiling a perfectly trained Forecast head could reach;
- **forecast**: SparDA's Forecast head (one head, the model's KV group): layer l's blocks ranked by
  ``F_l(x_{l-1}) · K̃_lᵀ``, the PREVIOUS layer's normalized input against layer l's compressed keys (layer 0 uses its
  own input, F_0^cur), so layer l's blocks are known while layer l-1 computes. Trained on the model's real hidden
  states (model frozen) by the rest-bucket KL to a teacher: the layer's own InfLLM-V2 score on the (8, 4) grid
  ("coarse") or on a (2, 1) grid max-pooled onto it ("fine"), SparDA §2.4-2.5
  (:func:`hybrid_lab.models.forecast.rest_bucket_kl`);

and the layer reads every visible token of the selected blocks (one softmax, :func:`dsa.sparse_forward`). A query
therefore reads up to k + 2 distinct blocks (``N_INIT`` + ``N_LOCAL`` always, besides the k chosen; fewer while the
init block is its own block or it has fewer than k candidates): :func:`blocks_read` counts them from a selection.

A decode trace is the selection of each step's query as the sequence grows, per layer; replayed through the
offload simulator's block cache (:func:`hybrid_lab.serving.offload_sim.replay_trace`) it gives the blocks a step
must copy from host memory, and the churn the simulator otherwise assumes.
"""
from __future__ import annotations

import numpy as np

from hybrid_lab.core import checks
from hybrid_lab.core.optim import Adam
from hybrid_lab.models import forecast as fc
from hybrid_lab.models.forecast import oracle_blocks
from hybrid_lab.models.infllm import (blocks_from_compressed, compress_keys, compressed_visible, group_scores,
                                      infllm_v2_select, select_blocks)
from hybrid_lab.serving.offload_sim import replay_trace
from hybrid_lab.trained import dsa, store, tasks

__all__ = ["BLOCK", "WINDOW", "STRIDE", "FINE", "N_INIT", "N_LOCAL", "TEACHERS", "KINDS", "block_selection",
           "teacher_selection", "blocks_to_positions", "blocks_read", "position_reads", "query_reads",
           "block_selector", "block_accuracy", "block_recall", "run_args", "read_summary", "hidden_states",
           "load_summary", "forecast_setup", "train_forecast_head", "forecast_selection", "decode_trace",
           "replay_layers", "offload_rows", "load_forecast_heads", "REPORTED_TEACHER_ABLATION",
           "reported_teacher_ablation", "run_experiment", "HEAD_SOURCES", "HEAD_KEYS", "BOUND_VARIANTS",
           "run_bound_experiment", "load_bound_summary", "mean_std_cells", "bound_rows",
           "bound_table"]

BLOCK, WINDOW, STRIDE = 8, 8, 4
FINE = (2, 1)                                       # the fine teacher's (window, stride), as SparDA's
N_INIT, N_LOCAL = 1, 1                              # always read: the init block and the query's own block
TEACHERS = ("fine", "coarse")
KINDS = ("infllm", "oracle", "forecast", "fine teacher", "coarse teacher")
HEAD_SOURCES = ("previous", "same")                 # layer l-1's input (SparDA: one layer ahead) or layer l's own
HEAD_KEYS = ("coarse", "fine")                      # the (8, 4) keys (SparDA) or (2, 1) keys max-pooled onto them


def _model(model):
    from hybrid_lab.models.stack import Stack
    if not isinstance(model, Stack) or any(k != "attn" for k in model.cfg.layers):
        raise ValueError(f"model must be a Stack of full-attention layers only (the trained dense model), got "
                         f"{type(model).__name__}")
    return model


def _kind(kind):
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    return kind


def _keys(keys):
    if keys not in HEAD_KEYS:
        raise ValueError(f"keys must be one of {HEAD_KEYS} (the keys a Forecast head scores), got {keys!r}")
    return keys


def _source(source):
    if source not in HEAD_SOURCES:
        raise ValueError(f"source must be one of {HEAD_SOURCES} (the input a Forecast head reads), got {source!r}")
    return source


def _heads(params, model, kind):
    """Forecast heads {"W0": (D, Hkv, d), ...}, one per layer of ``model``; required for kind "forecast" only."""
    if kind != "forecast":
        return None
    cfg = model.cfg
    shape = (cfg.d_model, cfg.n_heads_kv, cfg.d_qk)
    if not isinstance(params, dict) or any(f"W{i}" not in params for i in range(cfg.n_layers)):
        raise ValueError(f"params must be the Forecast heads {{'W0': {shape}, ..., 'W{cfg.n_layers - 1}'}} for kind "
                         f"'forecast' (train_forecast_head or load_forecast_heads), got "
                         f"{sorted(params) if isinstance(params, dict) else type(params).__name__}")
    return {f"W{i}": checks.finite_array(f"params['W{i}']", params[f"W{i}"], 3, "(D, Hkv, d)") for i in
            range(cfg.n_layers)}


def _k_fits(k: int, T: int) -> int:
    """k checked against the candidate blocks of T tokens: every selector here ends in ``infllm.select_blocks``, which
    refuses a top-k larger than its candidates naming its own ``topk``; refused here naming ``k``, before selecting."""
    nb = -(-T // BLOCK)
    n_cand = max(nb - N_INIT - N_LOCAL, 0)
    if k > n_cand:
        raise ValueError(f"k must be <= the {n_cand} candidate blocks of T={T} tokens ({nb} blocks of {BLOCK} minus "
                         f"{N_INIT} init and {N_LOCAL} local), got {k}")
    return k


def forecast_selection(model, i: int, x_src, x, params: dict, k: int, keys: str = "coarse") -> np.ndarray:
    """Layer i's blocks as the Forecast head picks them: (T, 2 + k) block ids, -1 padded.
    x_src: (T, D) the previous layer's normalized input (layer 0: its own), x: (T, D) layer i's (for its compressed
    keys, which in decode are already cached); params: the heads {"W{i}": (D, Hkv, d)}; keys: "coarse" (SparDA: the
    (8, 4) keys) or "fine" (the head scores (2, 1) keys, max-pooled onto the (8, 4) grid as its fine teacher)."""
    model = _model(model)
    params, k, keys = _heads(params, model, "forecast"), checks.pos_int("k", k), _keys(keys)
    x_src = checks.finite_array("x_src", x_src, 2, "(T, D)")
    x = checks.finite_array("x", x, 2, f"(T, d_model={model.cfg.d_model})")     # an array (x.shape below)
    _, kk, _ = dsa.layer_qkv(model, i, x)
    T = len(kk)
    _k_fits(k, T)
    if x_src.shape != x.shape:
        raise ValueError(f"x_src must have the shape of x {x.shape} (T, D), got {x_src.shape}")
    pos = np.arange(T)
    kc = compress_keys(kk[None], WINDOW, STRIDE)
    if keys == "coarse":
        z = fc.forecast_logits(x_src[None], params[f"W{i}"], kc)             # (1, T, Hkv, Nc)
    else:
        z = fc.pooled_forecast_logits(x_src[None], params[f"W{i}"], compress_keys(kk[None], *FINE), kc.shape[1],
                                      FINE, (WINDOW, STRIDE))[0]
    vis = compressed_visible(pos, kc.shape[1], WINDOW, STRIDE)[None, :, None, :]
    idx, _ = blocks_from_compressed(np.where(vis, z, -np.inf), T, pos, k, BLOCK, WINDOW, STRIDE, N_INIT, N_LOCAL)
    return idx[0, :, 0, :]


def _teacher_scores(model, i: int, x, teacher: str) -> np.ndarray:
    """Layer i's teacher score on the (8, 4) grid, (1, T, Hkv, Nc): Σ_h softmax(Q_h K̃ᵀ/√d) of its own queries on the
    (8, 4) compressed keys ("coarse") or on (2, 1) keys max-pooled onto the (8, 4) grid ("fine"); 0 where a window is
    not visible yet (as :func:`forecast_setup` computes it)."""
    if teacher not in TEACHERS:
        raise ValueError(f"teacher must be one of {TEACHERS}, got {teacher!r}")
    q, kk, _ = dsa.layer_qkv(_model(model), i, x)
    T, scale = len(q), model.cfg.d_qk ** -0.5
    pos = np.arange(T)
    kc = compress_keys(kk[None], WINDOW, STRIDE)
    if teacher == "coarse":
        return group_scores(q[None], kc, pos, T, WINDOW, STRIDE, scale=scale)
    sf = group_scores(q[None], compress_keys(kk[None], *FINE), pos, T, *FINE, scale=scale)
    return fc.pool_fine_to_coarse(sf, kc.shape[1], FINE, (WINDOW, STRIDE))


def teacher_selection(model, i: int, x, k: int, teacher: str = "fine") -> np.ndarray:
    """Layer i's blocks picked by the Forecast head's teacher itself: (T, 2 + k) block ids, -1 padded.
    x: (T, D) the layer's normalized input; teacher "fine" ((2, 1) keys max-pooled onto the (8, 4) grid) or "coarse"
    (the (8, 4) keys: the same score and selection as InfLLM-V2). The init and the query's own block as for every
    selector; the top-k by the teacher's score among the visible windows, max-pooled onto blocks."""
    k = checks.pos_int("k", k)
    sc = _teacher_scores(model, i, x, teacher)
    T = sc.shape[1]
    _k_fits(k, T)
    pos = np.arange(T)
    vis = compressed_visible(pos, sc.shape[-1], WINDOW, STRIDE)[None, :, None, :]
    idx, _ = blocks_from_compressed(np.where(vis, sc, -np.inf), T, pos, k, BLOCK, WINDOW, STRIDE, N_INIT, N_LOCAL)
    return idx[0, :, 0, :]


def block_selection(model, i: int, x, kind: str, k: int, x_src=None, params=None, keys: str = "coarse") -> np.ndarray:
    """Layer i's selected blocks for every query of one sequence: (T, 2 + k) block ids, -1 padded.
    x: (T, d_model) the layer's normalized input; kind "infllm", "oracle" or "forecast" (then ``x_src``, the input
    the head reads, and the heads ``params``, scoring ``keys``), "fine teacher" or "coarse teacher"
    (:func:`teacher_selection`); k: top-k blocks beyond init + local."""
    kind, k, keys = _kind(kind), checks.pos_int("k", k), _keys(keys)
    if kind == "forecast":
        return forecast_selection(model, i, x if x_src is None else x_src, x, params, k, keys)
    if kind.endswith(" teacher"):
        return teacher_selection(model, i, x, k, kind.split(" ")[0])
    q, kk, _ = dsa.layer_qkv(_model(model), i, x)
    T = len(q)
    _k_fits(k, T)
    pos = np.arange(T)
    if kind == "infllm":
        idx = infllm_v2_select(q[None], kk[None], k, BLOCK, WINDOW, STRIDE, n_init=N_INIT, n_local=N_LOCAL,
                               q_pos=pos, scale=model.cfg.d_qk ** -0.5)[0]
    else:
        idx = oracle_blocks(q[None], kk[None], pos, k, BLOCK, n_init=N_INIT, n_local=N_LOCAL)
    return idx[0, :, 0, :]                                                 # batch 0, KV head 0 (MQA)


def blocks_to_positions(block_idx, T: int) -> np.ndarray:
    """(T, nb) block ids (-1 padded) -> (T, 1, nb * BLOCK) token positions <= each query, -1 padded.
    A block listed twice in a row (the init block that is also the query's own) is read once: the repeat's slots are
    -1, so no position appears twice (as :func:`blocks_read` counts it; sparse attention refuses a repeated
    position)."""
    block_idx = checks.int_array("block_idx", block_idx, 2, "(T, nb)", lo=-1)
    T = checks.pos_int("T", T)
    if len(block_idx) != T:
        raise ValueError(f"block_idx must have one row per query (T={T}), got {len(block_idx)} rows")
    nb = -(-T // BLOCK)
    if block_idx.size and block_idx.max() >= nb:
        raise ValueError(f"block_idx must hold block ids < {nb} (T={T} tokens in blocks of {BLOCK}) or -1, got "
                         f"{int(block_idx.max())}")
    n = block_idx.shape[1]
    repeat = ((block_idx[:, :, None] == block_idx[:, None, :]) & np.tri(n, n, -1, bool)[None]).any(-1)   # seen before
    tok = block_idx[:, :, None] * BLOCK + np.arange(BLOCK)[None, None, :]
    keep = (block_idx >= 0) & ~repeat
    tok = np.where(keep[:, :, None] & (tok <= np.arange(T)[:, None, None]), tok, -1)
    return tok.reshape(T, 1, -1)


def blocks_read(block_idx) -> np.ndarray:
    """The number of distinct blocks each query reads: block_idx (..., nb) block ids, -1 padded (a selection of
    :func:`block_selection`: the always-read init and own blocks and the k chosen) -> (...) int64 counts."""
    b = checks.int_array("block_idx", block_idx, None, "(..., nb) block ids", lo=-1)
    if b.ndim < 1:
        raise ValueError(f"block_idx must have a last axis of block ids, got shape {b.shape}")
    s = np.sort(b, axis=-1)
    new = (s >= 0) & np.concatenate([np.ones(s.shape[:-1] + (1,), bool), s[..., 1:] != s[..., :-1]], axis=-1)
    return new.sum(axis=-1).astype(np.int64)


def position_reads(T: int, k: int) -> np.ndarray:
    """(T,) int64: the distinct blocks a query at position t of a T-token sequence reads when k blocks are chosen, by
    the selection rule every selector here ends in (``infllm.select_blocks`` with ``N_INIT`` and ``N_LOCAL``: the
    init block, the query's own block and the top-k of the visible candidates; all candidates selectable). A query
    past the first k + 1 blocks reads k + 2; earlier ones fewer. :func:`query_reads` counts a real selection."""
    T, k = checks.pos_int("T", T), checks.pos_int("k", k)
    nb = -(-T // BLOCK)
    checks.output_size(f"T (the selection scores T queries x T/{BLOCK} blocks)", (T, nb))
    _k_fits(k, T)
    sel = select_blocks(np.zeros((1, T, 1, nb)), np.arange(T), k, BLOCK, N_INIT, N_LOCAL)
    return blocks_read(sel[0, :, 0, :])


def query_reads(model, tokens, k: int, kind: str = "infllm", params=None) -> np.ndarray:
    """The distinct blocks (:func:`blocks_read`) each query reads in each layer when ``kind`` picks k blocks, for the
    sequences ``tokens`` (N, T) (the dense forward's inputs, as :func:`block_recall`): (N, T, n_layers) int64."""
    model, kind, k = _model(model), _kind(kind), checks.pos_int("k", k)
    params = _heads(params, model, kind)
    toks = checks.int_array("tokens", tokens, 2, "(N, T) token ids", lo=0, hi=model.cfg.vocab)
    if 0 in toks.shape:
        raise ValueError(f"tokens must be a non-empty (N, T) array, got shape {toks.shape}")
    out = np.zeros(toks.shape + (model.cfg.n_layers,), np.int64)
    for n, row in enumerate(toks):
        caps = dsa.layer_attention(model, row)
        for i, c in enumerate(caps):
            out[n, :, i] = blocks_read(block_selection(model, i, c["x"], kind, k, caps[max(i - 1, 0)]["x"], params))
    return out


def block_accuracy(model, data, kind: str, k: int, params=None, source: str = "previous",
                   keys: str = "coarse") -> dict:
    """Needle and local-copy accuracy of ``data`` (a ``tasks.Batch``) when every layer reads only the blocks ``kind``
    picks (k beyond init + local; "forecast" needs the heads ``params``, reading ``source`` and scoring ``keys`` as
    in :func:`block_selector`): {"needle": float, "local": float}."""
    if not isinstance(data, tasks.Batch):
        raise ValueError(f"data must be a tasks.Batch, got {type(data).__name__}")
    lg = np.stack([dsa.sparse_forward(model, t, block_selector(model, kind, k, params, source, keys))
                   for t in data.tokens])
    return {name: tasks.accuracy(lg, data, kind_id)[0] for name, kind_id in (("needle", tasks.KIND_NEEDLE),
                                                                             ("local", tasks.KIND_LOCAL))}


def block_selector(model, kind: str, k: int, params=None, source: str = "previous", keys: str = "coarse"):
    """A selector for :func:`dsa.sparse_forward`: each layer reads the tokens of its init, local and top-k blocks.
    kind "forecast" needs the heads ``params``; source "previous" forecasts layer i from layer i-1's input of the
    same forward (the layers are called in order; layer 0 from its own), "same" from layer i's own input; keys: what
    the head scores (:func:`forecast_selection`)."""
    model, kind, k = _model(model), _kind(kind), checks.pos_int("k", k)
    params, source, keys = _heads(params, model, kind), _source(source), _keys(keys)
    prev = {}

    def select(i, x, probs):
        src = x if i == 0 or source == "same" else prev.get(i - 1, x)
        prev[i] = x
        return blocks_to_positions(block_selection(model, i, x, kind, k, src, params, keys), len(x))
    return select


def block_recall(model, tokens, k: int, kind: str = "infllm", params=None) -> np.ndarray:
    """Per layer: the share of the oracle's top-k blocks that ``kind`` ("infllm", or "forecast" with the heads
    ``params``) also picks (init and local blocks, picked by both, excluded), over the sequences ``tokens`` (N, T),
    queries that have more than k candidate blocks (the dense forward's hidden states)."""
    model, kind = _model(model), _kind(kind)
    params = _heads(params, model, kind)
    toks = checks.int_array("tokens", tokens, 2, "(N, T) token ids", lo=0, hi=model.cfg.vocab)
    k = checks.pos_int("k", k)
    T = toks.shape[1]
    if toks.shape[0] == 0 or T < (k + 3) * BLOCK:
        raise ValueError(f"tokens must hold >= 1 sequence of >= (k + 3) * {BLOCK} = {(k + 3) * BLOCK} tokens (queries "
                         f"with more than k candidate blocks), got shape {toks.shape}")
    rows = np.arange(T) // BLOCK >= k + 1                                  # more candidates than k
    rec = np.zeros((len(toks), model.cfg.n_layers))
    for n, row in enumerate(toks):
        caps = dsa.layer_attention(model, row)
        for i, c in enumerate(caps):
            mine = block_selection(model, i, c["x"], kind, k, caps[max(i - 1, 0)]["x"], params)
            ref = block_selection(model, i, c["x"], "oracle", k)
            fixed = np.stack([np.zeros(T, np.int64), np.arange(T) // BLOCK], 1)[rows]   # init, local per row
            m, r = mine[rows].copy(), ref[rows].copy()
            for j in range(len(m)):                     # keep the top-k part: drop init and the query's own block
                m[j] = np.where(np.isin(m[j], fixed[j]), -1, m[j])
                r[j] = np.where(np.isin(r[j], fixed[j]), -1, r[j])
            hit = (r[:, :, None] == m[:, None, :]) & (r[:, :, None] >= 0)
            n_ref = (r >= 0).sum(1)
            ok = n_ref > 0
            rec[n, i] = float((hit.any(2).sum(1)[ok] / n_ref[ok]).mean()) if ok.any() else np.nan
    return np.nanmean(rec, axis=0)


# ------------------------------------------------------------------------------ the Forecast head on real states
def hidden_states(model, tokens) -> dict:
    """The dense forward's per-layer tensors of ``tokens`` (N, T): {"X": [(N, T, D)] normalized layer inputs,
    "Q": [(N, T, Hq, d)], "K": [(N, T, Hkv, d)]}, one entry per layer (what the Forecast head and its teachers read)."""
    model = _model(model)
    toks = checks.int_array("tokens", tokens, 2, "(N, T) token ids", lo=0, hi=model.cfg.vocab)
    if 0 in toks.shape:
        raise ValueError(f"tokens must be a non-empty (N, T) array, got shape {toks.shape}")
    L = model.cfg.n_layers
    out = {"X": [[] for _ in range(L)], "Q": [[] for _ in range(L)], "K": [[] for _ in range(L)]}
    for row in toks:
        for i, c in enumerate(dsa.layer_attention(model, row)):
            q, k, _ = dsa.layer_qkv(model, i, c["x"])
            for name, a in (("X", c["x"]), ("Q", q), ("K", k)):
                out[name][i].append(a)
    return {name: [np.stack(a) for a in v] for name, v in out.items()}


def forecast_setup(model, tokens, teacher: str = "fine", k: int = 4, source: str = "previous",
                   keys: str = "coarse") -> fc.TrainSetup:
    """Frozen training targets on the model's real hidden states (SparDA Eqs. 5-7 on our (8, 4) grid).

    tokens: (N, T) training sequences, T >= 4 blocks. Per target layer l: the source X_{l-1} (X_0 for l = 0; source
    "same": X_l, the same-layer head F_l^cur at every layer) at every query that has candidates, the keys the head
    scores (the layer's (8, 4) compressed keys; keys "fine": its (2, 1) keys, the logits max-pooled onto the (8, 4)
    grid), and the teacher: the layer's own selector score Σ_h softmax(Q_h K̃ᵀ/√d) on the (8, 4) keys ("coarse"), or
    on (2, 1) keys max-pooled onto the (8, 4) grid ("fine"); candidates are visible windows outside the init block and
    the query's own block; the teacher's top-``k`` windows stay separate in the KL, the rest is one bucket. Returns a
    :class:`hybrid_lab.models.forecast.TrainSetup`.
    """
    model = _model(model)
    if teacher not in TEACHERS:
        raise ValueError(f"teacher must be one of {TEACHERS}, got {teacher!r}")
    k, source, keys = checks.pos_int("k", k), _source(source), _keys(keys)
    toks = checks.int_array("tokens", tokens, 2, "(N, T) token ids", lo=0, hi=model.cfg.vocab)
    T = toks.shape[1]
    if T < 4 * BLOCK:
        raise ValueError(f"tokens must hold sequences of >= {4 * BLOCK} tokens (4 blocks: candidates beyond the init "
                         f"and local blocks), got shape {toks.shape}")
    hs = hidden_states(model, toks)
    q_pos = np.arange(2 * BLOCK, T)                     # earlier queries have no candidate window
    scale = model.cfg.d_qk ** -0.5
    x_src, kcs, teach = [], [], []
    for i in range(model.cfg.n_layers):
        x_src.append(hs["X"][i if source == "same" else max(i - 1, 0)][:, q_pos])
        kc = compress_keys(hs["K"][i], WINDOW, STRIDE)
        kf = compress_keys(hs["K"][i], *FINE) if "fine" in (teacher, keys) else None   # only what is read
        kcs.append(kc if keys == "coarse" else kf)
        q = hs["Q"][i][:, q_pos]
        if teacher == "coarse":
            teach.append(group_scores(q, kc, q_pos, T, WINDOW, STRIDE, scale=scale))
        else:
            sf = group_scores(q, kf, q_pos, T, *FINE, scale=scale)
            teach.append(fc.pool_fine_to_coarse(sf, kc.shape[1], FINE, (WINDOW, STRIDE)))
    mask = fc.candidate_mask(q_pos, teach[0].shape[-1], BLOCK, 1, 1, WINDOW, STRIDE)
    sel = [fc.teacher_topk(t, k, mask[None, :, None, :]) for t in teach]
    extra = {"kind": teacher} if keys == "coarse" else {"kind": teacher, "pool": (FINE, (WINDOW, STRIDE))}
    return fc.TrainSetup(x_src, kcs, teach, mask, sel, q_pos, k, extra)


def _rows(setup: fc.TrainSetup, idx) -> fc.TrainSetup:
    """The sequences ``idx`` of a setup (a mini-batch)."""
    return fc.TrainSetup([x[idx] for x in setup.x_src], [kc[idx] for kc in setup.kc], [t[idx] for t in setup.teacher],
                         setup.mask, [s_[idx] for s_ in setup.sel], setup.q_pos, setup.k, setup.extra)


def train_forecast_head(model, tokens, teacher: str = "fine", steps: int = 300, lr: float = 1e-2, k: int = 4,
                        seed: int = 0, setup: fc.TrainSetup | None = None, batch: int | None = None,
                        held_out: fc.TrainSetup | None = None, every: int = 0) -> tuple:
    """Train one Forecast head per layer on the model's real hidden states (model frozen): Adam (β = (0.9, 0.95),
    ε = 1e-6 as the paper, a larger lr for a toy), global-norm clip 0.5, on ``tokens`` (N, T): the full batch, or
    with ``batch`` a fresh draw of that many sequences per step (without replacement, seeded by ``seed``).
    setup: a precomputed :func:`forecast_setup` of the same tokens and teacher (else built here, with the head's
    default source and keys). held_out: a setup of other sequences, scored every ``every`` steps (and after the last).
    Returns (params {"W{l}": (D, Hkv, d)}, {"loss": (steps,) Σ over layers of the rest-bucket KL, and with held_out
    "held_step": the steps scored, "held_loss": the held-out loss after each}).
    """
    model = _model(model)
    steps, lr, seed = checks.pos_int("steps", steps), checks.positive_number("lr", lr), checks.nonneg_int("seed", seed)
    checks.output_size("steps (one loss per step in the history)", (steps,))
    if setup is None:
        setup = forecast_setup(model, tokens, teacher, k)
    elif not isinstance(setup, fc.TrainSetup):
        raise ValueError(f"setup must be None or a forecast_setup(...) TrainSetup, got {type(setup).__name__}")
    if held_out is not None and not isinstance(held_out, fc.TrainSetup):
        raise ValueError(f"held_out must be None or a forecast_setup(...) TrainSetup, got {type(held_out).__name__}")
    every = checks.nonneg_int("every", every)
    n = len(setup.x_src[0])
    if batch is not None:
        batch = checks.int_in("batch", batch, 1, n + 1)
    cfg = model.cfg
    rng = np.random.default_rng(seed)
    params = {f"W{i}": 0.02 * rng.normal(size=(cfg.d_model, cfg.n_heads_kv, cfg.d_qk)) for i in range(cfg.n_layers)}
    opt = Adam(params, lr=lr, betas=(0.9, 0.95), eps=1e-6)
    draw = np.random.default_rng([seed, 1])                 # mini-batches: a stream apart from the initialization
    log = {"loss": np.zeros(steps)}
    if held_out is not None:
        log["held_step"], log["held_loss"] = [], []
    for s in range(steps):
        part = setup if batch is None else _rows(setup, np.sort(draw.choice(n, batch, replace=False)))
        log["loss"][s] = fc.train_step(params, part, opt, 0.5)[0]
        if held_out is not None and ((every and (s + 1) % every == 0) or s + 1 == steps):
            log["held_step"].append(s + 1)
            log["held_loss"].append(float(fc.forecast_loss_and_grad(params, held_out)[0]))
    return params, log


def read_summary(path, exp: str, field: str) -> dict:
    """The summary.json of the experiment ``exp`` (a dict holding ``field``), at ``path`` or, for None, the
    package's ``exp``/summary.json; a ValueError naming the path when it is missing or not that summary."""
    import json
    from pathlib import Path

    for name, v in (("exp", exp), ("field", field)):
        if not isinstance(v, str) or not v:
            raise ValueError(f"{name} must be a non-empty string, got {v!r}")

    if path is not None and not isinstance(path, (str, Path)):
        raise ValueError(f"path must be None or a file path, got {type(path).__name__}")
    path = Path(path) if path is not None else store.CHECKPOINTS / exp / "summary.json"
    try:
        out = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"path: no readable {exp} summary at {path} ({e}); run hybrid-lab train {exp}") from None
    if not isinstance(out, dict) or field not in out:
        raise ValueError(f"path: {path} is not a {exp} summary (no {field})")
    return out


def load_summary(path=None) -> dict:
    """The stored summary of ``hybrid-lab train sparda`` (accuracies, per-seed Forecast training logs, decode traces);
    path: default the package's sparda/summary.json."""
    return read_summary(path, "sparda", "per_seed")


def load_forecast_heads(seed: int = 0, teacher: str = "fine", path=None) -> dict:
    """The stored Forecast heads {"W{l}": (D, Hkv, d) float64} of ``hybrid-lab train sparda`` for the dense model of
    ``seed``, trained with the ``teacher`` ("fine" or "coarse"). path: default the package's sparda/forecast_heads.npz."""
    from pathlib import Path

    seed = checks.nonneg_int("seed", seed)
    if teacher not in TEACHERS:
        raise ValueError(f"teacher must be one of {TEACHERS}, got {teacher!r}")
    if path is not None and not isinstance(path, (str, Path)):
        raise ValueError(f"path must be None or a file path, got {type(path).__name__}")
    path = Path(path) if path is not None else store.CHECKPOINTS / "sparda" / "forecast_heads.npz"
    if not path.exists():
        raise ValueError(f"path: no Forecast heads at {path}: run hybrid-lab train sparda")
    with np.load(path) as z:
        keys = sorted(n for n in z.files if n.startswith(f"seed{seed}.{teacher}."))
        if not keys:
            raise ValueError(f"seed: {path} holds no heads for seed {seed}, teacher {teacher!r} (it has "
                             f"{sorted({n.split('.')[0] for n in z.files})})")
        return {n.rsplit(".", 1)[1]: z[n].astype(np.float64) for n in keys}


def decode_trace(model, tokens, kind: str, k: int, start: int = 32, params=None) -> list:
    """The blocks each decode step selects, per layer: [layer][step] -> 1-D block ids, for the queries at positions
    start .. T-1 of ``tokens`` (T,) (causal: the selection of row t is what decode step t selects). kind "forecast"
    needs the heads ``params``."""
    model, kind, k = _model(model), _kind(kind), checks.pos_int("k", k)
    params = _heads(params, model, kind)
    t = checks.tokens("tokens", tokens, model.cfg.vocab)
    start = checks.int_in("start", start, 0, len(t))
    trace = []
    caps = dsa.layer_attention(model, t)
    for i, c in enumerate(caps):
        sel = block_selection(model, i, c["x"], kind, k, caps[max(i - 1, 0)]["x"], params)
        trace.append([sel[s][sel[s] >= 0] for s in range(start, len(t))])
    return trace


def replay_layers(trace) -> dict:
    """Replay every layer's trace through the offload simulator's block cache (the previous step's blocks stay
    resident). Returns {"copied": (n_layers, steps) blocks copied per step, "selected": same shape, blocks selected,
    "hit_rate": blocks found resident / blocks selected over all steps after the first, "churn": mean share of a
    step's selection that is new (after the first step)}."""
    if not isinstance(trace, (list, tuple)) or not trace or any(not isinstance(x, (list, tuple)) or not x
                                                                for x in trace) or len({len(x) for x in trace}) != 1:
        raise ValueError(f"trace must be a non-empty list with one non-empty list of steps per layer, all layers the "
                         f"same number of steps, got {type(trace).__name__}")
    copied = np.array([replay_trace(list(layer)) for layer in trace])
    selected = np.array([[len(s) for s in layer] for layer in trace])
    after = slice(1, None)
    hit = 1.0 - copied[:, after].sum() / max(selected[:, after].sum(), 1)
    churn = float(np.mean(copied[:, after] / np.maximum(selected[:, after], 1)))
    return {"copied": copied, "selected": selected, "hit_rate": float(hit), "churn": churn}


def offload_rows(churn: float, batch: int = 16, context: int = 131072) -> list:
    """Decode step times of SparDA's model (``offload_sim.MINICPM_8B``) on the H100 and A100 presets with the churn
    the simulator assumes and with ``churn`` (measured on a trace): rows [hardware, churn label, churn, serial
    ("Sparse": select, copy, compute in turn) ms, overlapped ("SparDA") ms]."""
    from hybrid_lab.serving import offload_sim as osim

    churn = checks.number_in("churn", churn, 0.0, 1.0)
    rows = []
    for hw in (osim.H100, osim.A100):
        for label, c in (("assumed", osim.MINICPM_8B.churn), ("measured", churn)):
            rows.append([hw.name.split(" ")[0], label, float(c),
                         1e3 * osim.step_time(hw, osim.MINICPM_8B, batch, context, "Sparse", churn=c),
                         1e3 * osim.step_time(hw, osim.MINICPM_8B, batch, context, "SparDA", churn=c)])
    return rows


# SparDA Table 6 (p. 15; SparDA notes §4.6), reported: the student / inference window fixed at (32, 16), only the
# teacher's compression window changed; RULER, reasoning and the four-family average, in points.
REPORTED_TEACHER_ABLATION = {"columns": ("RULER", "reasoning", "four-family average"),
                             "MiniCPM": {"(32, 16)": (75.7, 82.5, 60.4), "(2, 1)": (78.7, 84.7, 61.7)},
                             "NOSA": {"(32, 16)": (71.4, 55.4, 50.1), "(2, 1)": (73.9, 57.2, 51.7)}}


def reported_teacher_ablation() -> str:
    """SparDA's teacher ablation (Table 6) as printed lines: per model, each column's (32, 16) -> (2, 1) teacher
    score and the gain in points (computed from the reported scores)."""
    t = REPORTED_TEACHER_ABLATION
    lines = ["reported (SparDA Table 6, SparDA notes §4.6): inference window (32, 16), teacher (32, 16) -> (2, 1)"]
    for model in ("MiniCPM", "NOSA"):
        cells = [f"{c} {a:.1f} -> {b:.1f} ({b - a:+.1f})"
                 for c, a, b in zip(t["columns"], t[model]["(32, 16)"], t[model]["(2, 1)"])]
        lines.append(f"  {model}: " + ", ".join(cells))
    return "\n".join(lines)


def run_args(out, seeds, ks, n_eval, min_eval: int, command, quick) -> tuple:
    """The checks an experiment's arguments share: returns (seeds, ks) as lists and n_eval (>= ``min_eval``) as an
    int."""
    from pathlib import Path

    min_eval = checks.pos_int("min_eval", min_eval)

    if not isinstance(out, (str, Path)):
        raise ValueError(f"out must be a folder path, got {type(out).__name__}")
    seeds = checks.int_array("seeds", seeds, 1, "(n,) stored seeds", lo=0).tolist()
    ks = checks.int_array("ks", ks, 1, "(n,) block counts", lo=1).tolist()
    if not seeds or not ks:
        raise ValueError(f"seeds and ks must be non-empty, got {seeds} and {ks}")
    n_eval = checks.int_in("n_eval", n_eval, min_eval, 10 ** 6)
    if not isinstance(command, str):
        raise ValueError(f"command must be a string, got {type(command).__name__}")
    if not isinstance(quick, (bool, np.bool_)):
        raise ValueError(f"quick must be True or False, got {quick!r}")
    return seeds, ks, n_eval


def run_experiment(out, seeds=(0, 1, 2), ks=(1, 2, 4), n_eval: int = 64, command: str = "", quick: bool = False) -> dict:
    """For each seed of the trained dense model: train the Forecast heads on its real hidden states (fine and coarse
    teacher), then accuracy under oracle / InfLLM-V2 / forecast block selection per k, block recall per layer, and the
    decode traces of 4 held-out sequences (k = 2) with their replay summaries. Writes ``out``/sparda/summary.json and
    ``out``/sparda/forecast_heads.npz; returns the summary. quick: fewer training sequences and steps (CPU smoke)."""
    import json
    import time
    from pathlib import Path

    seeds, ks, n_eval = run_args(out, seeds, ks, n_eval, 4, command, quick)
    n_train, steps, kf = (4, 10, 4) if quick else (32, 300, 4)
    out = Path(out)
    t0 = time.time()
    ev = tasks.mix(n_eval, 128, seed=tasks.EVAL_SEED + 1, n_local=4)
    per_seed, heads = {}, {}
    for seed in seeds:
        model, _ = store.load_checkpoint(store.CHECKPOINTS / "retrieval" / "dense" / f"seed{seed}")
        tr = tasks.mix(n_train, 128, seed=60_000 + seed, n_local=4).tokens          # training seeds (< EVAL_SEED)
        r, logs, params = {}, {}, {}
        for teacher in TEACHERS:
            params[teacher], log = train_forecast_head(model, tr, teacher, steps=steps, k=kf, seed=seed)
            held = fc.forecast_loss_and_grad(params[teacher], forecast_setup(model, ev.tokens[:16], teacher, kf))[0]
            logs[teacher] = {"loss": [round(float(v), 5) for v in log["loss"][::10]],
                             "final loss": round(float(log["loss"][-1]), 5), "held-out loss": round(float(held), 5)}
            for name, a in params[teacher].items():
                heads[f"seed{seed}.{teacher}.{name}"] = a.astype(np.float32)
        lg = np.stack([dsa.sparse_forward(model, t) for t in ev.tokens])
        r["dense needle"] = tasks.accuracy(lg, ev, tasks.KIND_NEEDLE)[0]
        r["dense local"] = tasks.accuracy(lg, ev, tasks.KIND_LOCAL)[0]
        sels = [("oracle", "oracle", None), ("infllm", "infllm", None)] + \
            [(f"forecast {t}", "forecast", params[t]) for t in TEACHERS]
        for k in ks:
            for label, kind, p in sels:
                lg = np.stack([dsa.sparse_forward(model, t, block_selector(model, kind, k, p)) for t in ev.tokens])
                r[f"{label} k={k} needle"] = tasks.accuracy(lg, ev, tasks.KIND_NEEDLE)[0]
                r[f"{label} k={k} local"] = tasks.accuracy(lg, ev, tasks.KIND_LOCAL)[0]
            for label, kind, p in sels[1:]:
                pre = "block recall" if kind == "infllm" else f"block recall {label}"
                for i, v in enumerate(block_recall(model, ev.tokens[:8], k, kind, p)):
                    r[f"{pre} k={k} layer {i}"] = float(v)
        traces = {}
        for label, kind, p in sels[:3]:
            tr_ = [decode_trace(model, row, kind, 2, params=p) for row in ev.tokens[:4]]
            reps = [replay_layers(t) for t in tr_]
            traces[label] = {"trace": [[[s.tolist() for s in layer] for layer in t] for t in tr_],
                             "hit_rate": [x["hit_rate"] for x in reps], "churn": [x["churn"] for x in reps],
                             "copied_per_layer": [x["copied"].sum(1).tolist() for x in reps]}
            r[f"{label} trace churn"] = float(np.mean(traces[label]["churn"]))
            r[f"{label} trace hit rate"] = float(np.mean(traces[label]["hit_rate"]))
        per_seed[seed] = {"final": {k: round(float(v), 4) for k, v in r.items()}, "traces": traces,
                          "forecast_train": logs}
        kp = ks[-1]
        print(f"  sparda seed {seed}: needle at k={kp}: oracle {r[f'oracle k={kp} needle']:.2f}, infllm "
              f"{r[f'infllm k={kp} needle']:.2f}, forecast fine {r[f'forecast fine k={kp} needle']:.2f} "
              f"({time.time() - t0:.0f} s)", flush=True)
    keys = per_seed[seeds[0]]["final"]
    summary = {"command": command or "hybrid-lab train sparda", "machine": "CPU, numpy",
               "seconds": round(time.time() - t0, 1), "block": BLOCK, "window": WINDOW, "stride": STRIDE,
               "eval": f"tasks.mix({n_eval}, 128, seed=EVAL_SEED + 1, n_local=4); traces: its first 4 sequences, "
                       f"k = 2, decode steps 32..127; block recall: its first 8",
               "forecast": {"train": f"{n_train} sequences of tasks.mix(seed 60000 + seed), full batch, {steps} Adam "
                                     f"steps, lr 1e-2, betas (0.9, 0.95), clip 0.5, rest-bucket KL on the teacher's "
                                     f"top-{kf} windows; model frozen",
                            "teachers": {"coarse": f"InfLLM-V2 score on ({WINDOW}, {STRIDE}) keys",
                                         "fine": f"score on {FINE} keys max-pooled onto ({WINDOW}, {STRIDE})"},
                            "source": "layer l-1's normalized input (layer 0: its own)",
                            "held-out": "the rest-bucket KL on the first 16 evaluation sequences"},
               "accuracy": {k: {"mean": round(float(np.mean([per_seed[s]["final"][k] for s in seeds])), 4),
                                "std": round(float(np.std([per_seed[s]["final"][k] for s in seeds])), 4)}
                            for k in keys},
               "per_seed": {str(s): v for s, v in per_seed.items()}}
    (out / "sparda").mkdir(parents=True, exist_ok=True)
    (out / "sparda" / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    np.savez(out / "sparda" / "forecast_heads.npz", **heads)
    return summary


# ------------------------------------------------------------------------------ the Forecast head against its bound
# Why does the head trained with the fine teacher miss needles its teacher, used as the selector, keeps? Each variant
# changes one thing against SparDA's recipe; all but the recipe get the same budget (sequences, steps, batch, lr).
BOUND_VARIANTS = {                          # label: (source, keys, budget)
    "SparDA recipe": ("previous", "coarse", "recipe"),      # as hybrid-lab train sparda: 32 sequences, full batch
    "converged": ("previous", "coarse", "long"),            # 8x the sequences, mini-batches, past its plateau
    "same layer": ("same", "coarse", "long"),               # F_l^cur at every layer: not one layer ahead
    "fine keys": ("previous", "fine", "long"),              # scores (2, 1) keys max-pooled, as its teacher does
}
BOUND_BUDGETS = {"recipe": dict(n_train=32, steps=300, batch=None), "long": dict(n_train=256, steps=1000, batch=32),
                 "quick": dict(n_train=16, steps=20, batch=8)}


def run_bound_experiment(out, seeds=(0, 1, 2), ks=(2, 4), n_eval: int = 64, command: str = "",
                         quick: bool = False) -> dict:
    """The fine-teacher Forecast head against its bound, on each seed's trained dense model: the head trained by
    SparDA's recipe as :func:`run_experiment` does, then trained to convergence, from the same layer's input, and
    scoring fine keys (``BOUND_VARIANTS``), beside its fine teacher used as the selector, InfLLM-V2 and the oracle.
    Needle and local accuracy per k on ``tasks.mix(n_eval, 128, EVAL_SEED + 1)`` (the sparda evaluation set), the
    held-out rest-bucket KL (its first 16 sequences) after every tenth of the steps. Writes ``out``/sparda_bound/summary.json;
    returns it. quick: one budget of 16 sequences, 20 steps (a smoke run: nothing converges)."""
    import json
    import time
    from pathlib import Path

    seeds, ks, n_eval = run_args(out, seeds, ks, n_eval, 16, command, quick)
    t0 = time.time()
    ev = tasks.mix(n_eval, 128, seed=tasks.EVAL_SEED + 1, n_local=4)
    per_seed = {}
    for seed in seeds:
        model, _ = store.load_checkpoint(store.CHECKPOINTS / "retrieval" / "dense" / f"seed{seed}")
        r, curves = {}, {}
        for label, (source, keys, budget) in BOUND_VARIANTS.items():
            b = BOUND_BUDGETS["quick" if quick else budget]
            tr = tasks.mix(b["n_train"], 128, seed=60_000 + seed, n_local=4).tokens     # training seeds (< EVAL_SEED)
            setup = forecast_setup(model, tr, "fine", 4, source, keys)
            held = forecast_setup(model, ev.tokens[:16], "fine", 4, source, keys)
            params, log = train_forecast_head(model, tr, "fine", steps=b["steps"], seed=seed, setup=setup,
                                              batch=b["batch"], held_out=held, every=max(b["steps"] // 10, 1))
            curves[label] = {"step": log["held_step"], "held-out loss": [round(v, 5) for v in log["held_loss"]]}
            for k in ks:
                acc = block_accuracy(model, ev, "forecast", k, params, source, keys)
                r[f"{label} k={k} needle"], r[f"{label} k={k} local"] = acc["needle"], acc["local"]
        for label, kind in (("fine teacher", "fine teacher"), ("infllm", "infllm"), ("oracle", "oracle")):
            for k in ks:
                acc = block_accuracy(model, ev, kind, k)
                r[f"{label} k={k} needle"], r[f"{label} k={k} local"] = acc["needle"], acc["local"]
        per_seed[seed] = {"final": {k: round(float(v), 4) for k, v in r.items()}, "curves": curves}
        kp = ks[-1]
        print(f"  sparda_bound seed {seed}: needle at k={kp}: " + ", ".join(
            f"{lab} {r[f'{lab} k={kp} needle']:.2f}" for lab in list(BOUND_VARIANTS) + ["fine teacher"])
              + f" ({time.time() - t0:.0f} s)", flush=True)
    keys_ = per_seed[seeds[0]]["final"]
    budgets = {lab: BOUND_BUDGETS["quick" if quick else b] for lab, (_, _, b) in BOUND_VARIANTS.items()}
    summary = {"command": command or "hybrid-lab train sparda_bound", "machine": "CPU, numpy",
               "seconds": round(time.time() - t0, 1), "ks": ks, "seeds": seeds,
               "eval": f"tasks.mix({n_eval}, 128, seed=EVAL_SEED + 1, n_local=4) (the sparda evaluation set); held-out "
                       f"loss: its first 16 sequences",
               "variants": {lab: {"source": src, "keys": kk, **budgets[lab]}
                            for lab, (src, kk, _) in BOUND_VARIANTS.items()},
               "train": "fine teacher, rest-bucket KL on its top-4 windows, Adam lr 1e-2, betas (0.9, 0.95), clip 0.5, "
                        "tasks.mix(n_train, 128, seed 60000 + seed); batch None: the full batch every step",
               "accuracy": {k: {"mean": round(float(np.mean([per_seed[s]["final"][k] for s in seeds])), 4),
                                "std": round(float(np.std([per_seed[s]["final"][k] for s in seeds])), 4)}
                            for k in keys_},
               "per_seed": {str(s): v for s, v in per_seed.items()}}
    (Path(out) / "sparda_bound").mkdir(parents=True, exist_ok=True)
    (Path(out) / "sparda_bound" / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    return summary


def load_bound_summary(path=None) -> dict:
    """The stored summary of ``hybrid-lab train sparda_bound``; path: default the package's sparda_bound/summary.json."""
    return read_summary(path, "sparda_bound", "variants")


def _bound(summary):
    if not isinstance(summary, dict) or any(f not in summary for f in ("variants", "accuracy", "ks", "seeds",
                                                                       "per_seed")):
        got = sorted(summary) if isinstance(summary, dict) else type(summary).__name__
        raise ValueError(f"summary must be a sparda_bound summary (load_bound_summary), got {got}")
    return summary


def mean_std_cells(summary: dict, k: int):
    """For a stored experiment summary (``ks`` and ``accuracy`` {key: {"mean", "std"}}), once ``k`` is checked to
    be one of its ks: the function key -> "mean ± std" (2 decimals) a table prints."""
    if not isinstance(summary, dict) or not {"ks", "accuracy"} <= set(summary):
        raise ValueError(f"summary must be a stored experiment summary with ks and accuracy, got "
                         f"{sorted(summary) if isinstance(summary, dict) else type(summary).__name__}")
    k = checks.pos_int("k", k)
    if k not in summary["ks"]:
        raise ValueError(f"k must be one of the stored {summary['ks']}, got {k}")
    acc = summary["accuracy"]
    return lambda key: f"{acc[key]['mean']:.2f} ± {acc[key]['std']:.2f}"


def bound_rows(summary: dict, k: int) -> list:
    """[selector, what it changes, needle "mean ± std", local "mean ± std", held-out KL at the end (or "")] at ``k``
    chosen blocks, from a :func:`load_bound_summary`: the four head variants, then the references."""
    ms = mean_std_cells(_bound(summary), k)

    def held(label):
        v = [c["curves"][label]["held-out loss"][-1] for c in summary["per_seed"].values()]
        return f"{np.mean(v):.3f}"

    what = {"SparDA recipe": "as hybrid-lab train sparda", "converged": "8x sequences, 1,000 steps",
            "same layer": "reads layer l, not l-1", "fine keys": "scores (2, 1) keys, pooled",
            "fine teacher": "the target, used directly", "infllm": "own queries, (8, 4) keys",
            "oracle": "exact attention mass"}
    rows = [[f"head: {lab}", what[lab], ms(f"{lab} k={k} needle"), ms(f"{lab} k={k} local"), held(lab)]
            for lab in BOUND_VARIANTS]
    rows += [[lab, what[lab], ms(f"{lab} k={k} needle"), ms(f"{lab} k={k} local"), ""]
             for lab in ("fine teacher", "infllm", "oracle")]
    return rows


def bound_table(summary: dict) -> str:
    """The stored bound experiment as text: per k, :func:`bound_rows` (mean ± std over the seeds), then each head
    variant's held-out KL after its first tenth of the steps and at the end (flat: trained past its plateau)."""
    summary = _bound(summary)
    rows_k = {k: bound_rows(summary, k) for k in summary["ks"]}
    n = len(summary["seeds"])
    out = []
    for k, rows in rows_k.items():
        out.append(f"k={k} chosen ({k + 2} blocks read)     {'needle':>11s} {'local':>11s}  held-out KL   "
                   f"(fine teacher; mean ± std of {n} seeds, measured)")
        out += [f"  {r[0]:22s} {r[1]:28s} {r[2]:>11s} {r[3]:>11s}  {r[4]:>11s}".rstrip() for r in rows]
    out.append("held-out KL (summed over the 4 layers) after the first tenth of the steps -> at the end:")
    for lab, v in summary["variants"].items():
        curves = [r["curves"][lab] for r in summary["per_seed"].values()]
        first = np.mean([c["held-out loss"][0] for c in curves])
        last = np.mean([c["held-out loss"][-1] for c in curves])
        out.append(f"  {lab:14s} step {curves[0]['step'][0]:>4d}: {first:.3f} -> step {curves[0]['step'][-1]:>4d}: "
                   f"{last:.3f}   ({v['n_train']} sequences, batch {v['batch'] or 'all'}, source {v['source']}, "
                   f"keys {v['keys']})")
    n_keys = {name: compress_keys(np.zeros((1, 128, 1, 1)), *w).shape[1]
              for name, w in (("coarse", (WINDOW, STRIDE)), ("fine", FINE))}
    out.append(f"keys a head scores in a 128-token sequence: coarse {n_keys['coarse']} ({WINDOW}, {STRIDE}) windows, "
               f"fine {n_keys['fine']} {FINE} windows (computed)")
    return "\n".join(out)
