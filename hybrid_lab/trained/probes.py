"""Mechanistic probes of the trained small models: where each attention head looks, and what a wrong answer picks.

numpy only (the notebooks run without torch); every model of ``families`` (Stack, HySparse, HySparse2)::

    names = layer_names(model)                       # one name per layer: "0:attn", "self.1", "cross.0.fa", ...
    probs = attention_probs(model, tokens)           # per layer (Hq, T, T) or None (a layer without attention)
    prev = previous_token_scores(model, tokens)      # (n_layers, Hq): mean probability on t - 1
    nm = needle_mass(model, batch)                   # the cross FA's mass on the asked needle vs the other needles
    ab = answer_breakdown(logits, batch, kind)       # correct / another candidate's value / anything else

- A *previous-token head* (score near 1) copies the token before each position into the residual stream: the first
  half of an induction circuit, which associative recall needs ("the value follows its key").
- ``needle_mass`` asks whether the global layer FINDS the asked needle: high mass on the asked triple and low on the
  other needles' triples means the lookup works; equal masses mean the layer sees "a needle", not "this needle".
- ``answer_breakdown`` tells the two plateaus apart: wrong answers that are another needle's value ("pick any
  needle", accuracy near ``chance_pick_any``) versus answers that are not in the context at all.

Which layers are "the cross FA" (``needle_mass``'s default layers, :func:`cross_fa_layers`): HySparse2: the FA of
every cross group (``cross.{g}.fa``, queries from the Cross-decoder over the bridged KV); HySparse: its FA layers
(the first layer of every group); Stack: every ``attn`` layer (the ``swa`` layers see only their window).

Probabilities are recomputed for one sequence at a time: Stack through its ``details`` hook (``Stack.forward``);
HySparse and HySparse2 by replaying the model's own layer functions (``layer_input``, ``select``, ``bridge_kv``, ...
and v1's block selection) with each attention output computed FROM the returned probabilities, so the replay's
logits equal the model's (tests/test_trained_probes.py checks it) and the probabilities are the ones it used.
"""
from __future__ import annotations

import numbers

import numpy as np

from hybrid_lab.core import checks
from hybrid_lab.core.blocks import apply_rope, masked_attention, rms_norm, sigmoid, silu, softmax_with_sink
from hybrid_lab.models import hysparse as hs1
from hybrid_lab.models.hysparse import HySparse
from hybrid_lab.models.hysparse2 import HySparse2
from hybrid_lab.models.stack import Stack
from hybrid_lab.trained import families, tasks

__all__ = ["BRANCHES", "layer_names", "cross_fa_layers", "attention_probs", "previous_token_scores",
           "mqar_value_positions", "needle_mass", "answer_breakdown", "retrieval_summary", "SUMMARY_KEYS"]

BRANCHES = ("main", "local")
MODELS = (Stack, HySparse, HySparse2)


# ------------------------------------------------------------------------------------------------------ checks
def _model(model):
    if not isinstance(model, MODELS):
        raise ValueError(f"model must be a numpy model (Stack, HySparse or HySparse2; store.load_checkpoint), got "
                         f"{type(model).__name__}")
    return model


def _branch(branch) -> str:
    if not isinstance(branch, str) or branch not in BRANCHES:
        raise ValueError(f"branch must be one of {BRANCHES}, got {branch!r}")
    return branch


def _batch(batch):
    if not isinstance(batch, tasks.Batch):
        raise ValueError(f"batch must be a tasks.Batch, got {type(batch).__name__}")
    return batch


def _kinds(model) -> list:
    """Per layer: 'attn' / 'swa' / 'mamba2' (Stack), 'fa' / 'sa' (HySparse, HySparse2 cross), 'swa' (HySparse2 self)."""
    cfg = model.cfg
    if isinstance(model, HySparse2):
        return [k for _, k in cfg.layers]
    return list(cfg.layers)


# ------------------------------------------------------------------------------------------------ layer names
def layer_names(model) -> list:
    """One readable name per layer, in the order of :func:`attention_probs`' list: Stack ``"{i}:{kind}"``,
    HySparse ``"{i}:fa"`` / ``"{i}:sa"``, HySparse2 its ``cfg.layers`` names (``"self.0"``, ``"cross.0.fa"``, ...)."""
    model = _model(model)
    if isinstance(model, HySparse2):
        return [n for n, _ in model.cfg.layers]
    return [f"{i}:{k}" for i, k in enumerate(_kinds(model))]


def cross_fa_layers(model) -> list:
    """Indices of the layers :func:`needle_mass` reads by default: HySparse2 the cross groups' FA layers, HySparse its
    FA layers, Stack its attn layers (see the module docstring)."""
    model = _model(model)
    names, kinds = layer_names(model), _kinds(model)
    if isinstance(model, HySparse2):
        return [i for i, n in enumerate(names) if n.startswith("cross.") and n.endswith(".fa")]
    return [i for i, k in enumerate(kinds) if k == ("attn" if isinstance(model, Stack) else "fa")]


# ---------------------------------------------------------------------------------------- attention helpers
def _index_mask(idx, S: int) -> np.ndarray:
    """(T, Hkv, K) index sets, -1 padded -> (T, Hkv, S) bool: the positions each query reads."""
    m = np.zeros(idx.shape[:2] + (S + 1,), bool)                 # column S collects the -1 padding
    np.put_along_axis(m, np.where(idx >= 0, idx, S), True, axis=-1)
    return m[..., :S]


def _attend(q, k, v, mask, scale, sink=None):
    """Attention with one visibility mask per KV group (T, Hkv, S), as ``sparse_attention`` over an index set (one
    softmax over the listed positions, the sink in the denominator). Returns (o (T, Hq, dv), p (T, Hq, S))."""
    T, Hq, d = q.shape
    S, Hkv = k.shape[:2]
    G = Hq // Hkv
    logits = np.einsum("tgjd,sgd->tgjs", q.reshape(T, Hkv, G, d), k) * scale
    logits = np.where(mask[:, :, None, :], logits, -np.inf)
    s = None if sink is None else np.asarray(sink, logits.dtype).reshape(1, Hkv, G, 1)
    p = softmax_with_sink(logits, s)
    o = np.einsum("tgjs,sgd->tgjd", p, v).reshape(T, Hq, v.shape[-1])
    return o, p.reshape(T, Hq, S)


def _mlp(w, p, h):
    return h + silu(rms_norm(h) @ w[p + "mlp.w1"]) @ w[p + "mlp.w2"]


# -------------------------------------------------------------------------------------------- the replays
def _stack_probs(model: Stack, tokens):
    d = {}
    logits = model.forward(tokens, details=d)
    return d["attn_probs"], [None] * len(d["attn_probs"]), logits


def _hysparse_probs(model: HySparse, tokens):
    """HySparse.forward, layer by layer, keeping every softmax: FA (full causal), SA sparse branch (the group FA's KV
    at its selected blocks) and SA local branch (own KV, window, RoPE, sink)."""
    cfg, w = model.cfg, model.weights
    L = len(tokens)
    pos = np.arange(L)
    Hq, Hkv, dk, dv = cfg.n_heads_q, cfg.n_heads_kv, cfg.d_qk, cfg.d_v
    scale = dk ** -0.5
    causal = pos[None, :] <= pos[:, None]
    local = causal & (pos[None, :] > pos[:, None] - cfg.window)
    h = w["embed"][tokens]
    main, loc = [], []
    for i, kind in enumerate(cfg.layers):
        p = f"layer.{i}."
        x = rms_norm(h)
        q = (x @ w[p + "attn.wq"]).reshape(L, Hq, dk)
        if kind == "fa":
            K = (x @ w[p + "attn.wk"]).reshape(L, Hkv, dk)
            V = (x @ w[p + "attn.wv"]).reshape(L, Hkv, dv)
            o, pr = masked_attention(q, K, V, causal, scale)
            bidx = hs1.select_blocks(hs1.block_scores(pr, cfg.block_size, Hkv), pos, cfg.block_size, cfg.n_blocks)
            read = _index_mask(hs1.blocks_to_tokens(bidx, cfg.block_size, pos), L)    # what the group's SA read
            main.append(pr)
            loc.append(None)
        else:
            o_sa, pr = _attend(q, K, V, read, scale)
            ql = apply_rope((x @ w[p + "swa.wq"]).reshape(L, Hq, dk), pos, cfg.rope_dims, cfg.rope_base)
            kl = apply_rope((x @ w[p + "swa.wk"]).reshape(L, Hkv, dk), pos, cfg.rope_dims, cfg.rope_base)
            vl = (x @ w[p + "swa.wv"]).reshape(L, Hkv, dv)
            o_loc, pl = masked_attention(ql, kl, vl, local, scale, sink=w.get(p + "swa.sink"))
            o = hs1.gated_fusion(o_sa, o_loc, (x @ w[p + "attn.wg"]).reshape(L, Hq, dv),
                                 (x @ w[p + "swa.wg"]).reshape(L, Hq, dv))
            main.append(pr)
            loc.append(pl)
        h = h + o.reshape(L, Hq * dv) @ w[p + "attn.wo"]
        h = _mlp(w, p, h)
    return main, loc, rms_norm(h) @ w["lm_head"]


def _hysparse2_probs(model: HySparse2, tokens):
    """HySparse2.prefill(early_exit=False) from an empty cache, layer by layer, keeping every softmax."""
    cfg, w = model.cfg, model.weights
    T = len(tokens)
    pos = np.arange(T)
    Hq, Hkv, dk, dv = cfg.n_heads_q, cfg.n_heads_kv, cfg.d_qk, cfg.d_v
    scale = dk ** -0.5
    causal = pos[None, :] <= pos[:, None]
    band = causal & (pos[None, :] > pos[:, None] - cfg.swa_window)
    h = w["embed"][tokens]
    main, loc = [], []
    fa_input = None
    for i in range(cfg.n_self):                                     # Self-decoder: SWA ... FA ... SWA
        name = f"self.{i}"
        x, q, k, v = model.layer_input(name, h, pos)
        if i == cfg.self_swa_before:
            fa_input = h                                            # the bridge source
            o, pr = masked_attention(q, k, v, causal, scale)
        else:
            o, pr = masked_attention(q, k, v, band, scale, sink=model.sink(name))
        main.append(pr)
        loc.append(None)
        h = model.layer_output(name, h, x, o)
    bridged = [model.bridge_kv(g, fa_input if src == "self_fa_input" else h)
               for g, src in enumerate(cfg.sources if cfg.bridging else ())]
    for g in range(cfg.n_groups):                                   # Cross-decoder: FA_g, then its SA layers
        name = f"cross.{g}.fa"
        x, q, k, v = model.layer_input(name, h)
        K, V = bridged[g] if cfg.bridging else (k, v)
        o, pr = masked_attention(q, K, V, causal, scale)
        idx = model.select(pr.reshape(T, Hkv, Hq // Hkv, T).sum(2), pos)   # the FA's score, as fa_attention's
        read = _index_mask(idx, T)
        main.append(pr)
        loc.append(None)
        h = model.layer_output(name, h, x, o)
        for j in range(cfg.group_size - 1):
            name = f"cross.{g}.sa.{j}"
            p = name + "."
            x, q, _, _ = model.layer_input(name, h)
            o, pr = _attend(q, K, V, read, scale, model.sink(name))
            main.append(pr)
            if not cfg.cross_swa_window:
                loc.append(None)
                h = model.layer_output(name, h, x, o)
                continue
            # the v1-style counterexample: a gated window branch over this layer's OWN KV (NoPE, no sink)
            if cfg.gates and p + "attn.wg" in w:
                o = o * sigmoid(x @ w[p + "attn.wg"]).reshape(o.shape)
            kl = (x @ w[p + "swa.wk"]).reshape(T, Hkv, dk)
            vl = (x @ w[p + "swa.wv"]).reshape(T, Hkv, dv)
            ql = (x @ w[p + "swa.wq"]).reshape(T, Hq, dk)
            win = causal & (pos[None, :] > pos[:, None] - cfg.cross_swa_window)
            ol, pl = masked_attention(ql, kl, vl, win, scale)
            loc.append(pl)
            o = o + ol * sigmoid(x @ w[p + "swa.wg"]).reshape(ol.shape)
            h = _mlp(w, p, h + o.reshape(T, Hq * dv) @ w[p + "attn.wo"])
    return main, loc, model.logits(h)


def _replay(model, tokens):
    """(main probs, local probs, logits) of one sequence: per layer (T, Hq, T) or None; logits (T, vocab)."""
    if isinstance(model, Stack):
        return _stack_probs(model, tokens)
    if isinstance(model, HySparse):
        return _hysparse_probs(model, tokens)
    return _hysparse2_probs(model, tokens)


# --------------------------------------------------------------------------------------------- the probes
def attention_probs(model, tokens, branch: str = "main") -> list:
    """The attention probabilities of every layer of ``model`` on one sequence.

    model: a numpy Stack, HySparse or HySparse2; tokens: (T,) ints in [0, vocab); branch: ``"main"`` or ``"local"``.
    Returns a list, one entry per layer (:func:`layer_names`): an array (Hq, T, T) (rows = queries, columns = keys,
    0 where a key is not read) or None for a layer without that softmax.

    ``"main"``: Stack attn (full causal) and swa layers (the window; the probabilities as the model uses them, so a
    row sums to 1 minus the sink's mass), None for mamba2; HySparse FA layers (full causal) and the SA layers' sparse
    branch (over the group FA's KV at the selected blocks); HySparse2 self SWA (window, sink), self FA and cross FA
    (full causal), cross SA (the group FA's selection: forced window + top-k, sink). ``"local"``: the own-KV sliding
    window branch of the HySparse SA layers (and of HySparse2's SA layers when ``cross_swa_window > 0``), None for
    every other layer. Each row sums to 1, or to less where a sink absorbs mass.
    """
    model, branch = _model(model), _branch(branch)
    tokens = checks.tokens("tokens", tokens, model.cfg.vocab)
    main, loc, _ = _replay(model, tokens)
    return [None if p is None else p.transpose(1, 0, 2) for p in (main if branch == "main" else loc)]


def _token_rows(name: str, tokens, vocab: int, min_len: int = 1) -> np.ndarray:
    """tokens (B, T) or (T,) -> (B, T) int64 in [0, vocab), no empty axis, T >= min_len."""
    t = np.asarray(tokens)
    if t.ndim == 1:
        t = t[None]
    t = checks.int_array(name, t, 2, "(B, T) or (T,) token ids", lo=0, hi=vocab)
    if 0 in t.shape or t.shape[1] < min_len:
        raise ValueError(f"{name} must have no empty axis and T >= {min_len} positions, got shape "
                         f"{np.shape(tokens)}")
    return t


def previous_token_scores(model, tokens, branch: str = "main", positions=None) -> np.ndarray:
    """The previous-token probe: per layer and query head, the mean attention probability on position t - 1.

    model: a numpy model; tokens: (B, T) or (T,) ints in [0, vocab), T >= 2; branch: as in :func:`attention_probs`;
    positions: None (every t >= 1) or a bool array of the tokens' shape, True at the query positions to average over
    (position 0 is never counted: it has no previous token), e.g. :func:`mqar_value_positions`.
    Returns (n_layers, Hq) float64: the mean over the selected (sequence, t) of probs[h, t, t - 1]; NaN rows for
    the layers without that softmax (mamba2; every non-SA layer for ``branch="local"``). Near 1: the head copies the
    previous token (induction and associative recall need one); 1 / (t + 1) on average: it attends uniformly.
    """
    model, branch = _model(model), _branch(branch)
    rows = _token_rows("tokens", tokens, model.cfg.vocab, min_len=2)
    if positions is None:
        mask = np.ones(rows.shape, bool)
    else:
        mask = np.asarray(positions)
        if mask.dtype != bool or mask.shape != np.shape(np.atleast_2d(tokens)):
            raise ValueError(f"positions must be None or a bool array of the tokens' shape {rows.shape}, got "
                             f"{mask.dtype} {mask.shape}")
        mask = np.atleast_2d(mask)
    mask = mask.copy()
    mask[:, 0] = False
    if not mask.any():
        raise ValueError("positions must select at least one position t >= 1")
    total = np.zeros((len(layer_names(model)), model.cfg.n_heads_q))
    for row, sel in zip(rows, mask):
        t = np.flatnonzero(sel)
        if not len(t):
            continue
        for i, p in enumerate(attention_probs(model, row, branch)):
            total[i] += np.nan if p is None else p[:, t, t - 1].sum(-1)
    return total / mask.sum()


def mqar_value_positions(batch) -> np.ndarray:
    """(B, T) bool: the value positions of an MQAR batch's pairs (1, 3, ..., 2n - 1), where the previous token is the
    key the value belongs to: the positions a previous-token head must serve for associative recall."""
    if not isinstance(batch, tasks.Batch):
        raise ValueError(f"batch must be a tasks.Batch, got {type(batch).__name__}")
    n = (batch.kind == tasks.KIND_MQAR).sum(1)                  # pairs per row (each key is asked once)
    if not n.any():
        raise ValueError("batch must be an MQAR batch (tasks.mqar), got one without MQAR answers")
    t = np.arange(batch.tokens.shape[1])
    return (t[None, :] % 2 == 1) & (t[None, :] < 2 * n[:, None])


def _needles_of(tokens, b: int, a: int):
    """Start positions of the NEEDLE k v triples before answer position a of row b, and the asked one's index."""
    row = tokens[b]
    starts = list(np.flatnonzero(row[:max(a - 2, 0)] == tasks.NEEDLE))       # whole triples before a only
    asked = [j for j, s in enumerate(starts) if row[s + 1] == row[a]]
    if len(asked) != 1:
        raise ValueError(f"batch: the needle answer at (row {b}, position {a}) asks key {int(row[a])}, which "
                         f"{'no' if not asked else 'more than one'} NEEDLE k v triple before it holds (expected "
                         f"exactly one: a tasks.needles / tasks.mix batch)")
    return starts, asked[0]


def _mass_stats(masses) -> dict:
    """masses: per answer (n_needles,) masses with the asked needle first -> asked / other / top1_asked."""
    multi = [m for m in masses if len(m) > 1]
    nan = float("nan")
    return {"asked": float(np.mean([m[0] for m in masses])) if masses else nan,
            "other": float(np.mean([m[1:].mean() for m in multi])) if multi else nan,
            "top1_asked": float(np.mean([m[0] > m[1:].max() for m in multi])) if multi else nan}   # ties: not top


def needle_mass(model, batch, layer=None) -> dict:
    """How much the global attention looks at the ASKED needle, against the other needles of the same sequence.

    model: a numpy model; batch: a needles / mix :class:`tasks.Batch` (tokens within the model's vocab); layer: None
    (the :func:`cross_fa_layers`) or the index of one layer with attention. At each needle answer (targets >= 0 and
    kind == KIND_NEEDLE: the query's key position a, which reads key k and must output its value) the layer's
    probabilities of row a, mean over the query heads, summed over each ``NEEDLE k' v'`` triple (its 3 positions)
    before a; the asked needle is the one whose key is k.

    Returns {"asked": mean mass on the asked triple, "other": mean mass per other triple (answers with >= 2 needles;
    NaN if none), "top1_asked": share of those answers whose asked triple has strictly the highest mass (a
    one-needle answer would be trivially right, so it is left out; NaN if none), "n": needle answers, "n_multi":
    those with >= 2 needles, "layers": the layer indices read, "per_layer": {index: {"asked", "other",
    "top1_asked"}}}. With several layers the top-level numbers use the mass averaged over them. No needle answer:
    NaNs and n = 0.
    """
    model, batch = _model(model), _batch(batch)
    checks.int_array("batch.tokens", batch.tokens, lo=0, hi=model.cfg.vocab)
    kinds = _kinds(model)
    if layer is None:
        layers = cross_fa_layers(model)
        if not layers:
            raise ValueError(f"layer: model has no cross FA / attn layer to read by default (layers {kinds}); pass "
                             f"the index of a layer with attention")
    else:
        i = checks.int_in("layer", layer, 0, len(kinds))
        if kinds[i] == "mamba2":
            raise ValueError(f"layer must index a layer with attention, got {i} (a mamba2 layer)")
        layers = [i]
    sel = (batch.targets >= 0) & (batch.kind == tasks.KIND_NEEDLE)
    per = {i: [] for i in layers}
    avg = []
    for b in np.flatnonzero(sel.any(1)):
        answers = np.flatnonzero(sel[b])
        found = [_needles_of(batch.tokens, b, a) for a in answers]        # checked before the forward
        probs = attention_probs(model, batch.tokens[b])
        for a, (starts, j) in zip(answers, found):
            order = [j] + [n for n in range(len(starts)) if n != j]       # the asked triple first
            ms = []
            for i in layers:
                row = probs[i][:, a, :].mean(0)                           # (T,) mean over the query heads
                m = np.array([row[starts[n]:starts[n] + 3].sum() for n in order], np.float64)
                per[i].append(m)
                ms.append(m)
            avg.append(np.mean(ms, axis=0))
    out = _mass_stats(avg)
    out.update(n=len(avg), n_multi=sum(len(m) > 1 for m in avg), layers=layers,
               per_layer={i: _mass_stats(per[i]) for i in layers})
    return out


def _kind(kind) -> int:
    ok = (tasks.KIND_NEEDLE, tasks.KIND_MQAR)
    if not isinstance(kind, (numbers.Integral, np.integer)) or isinstance(kind, (bool, np.bool_)) or kind not in ok:
        raise ValueError(f"kind must be tasks.KIND_NEEDLE ({tasks.KIND_NEEDLE}) or tasks.KIND_MQAR "
                         f"({tasks.KIND_MQAR}) (answers with in-context candidates), got {kind!r}")
    return int(kind)


def answer_breakdown(logits, batch, kind) -> dict:
    """What the answers of one kind are: correct, another in-context candidate's value, or something else.

    logits: (B, T, vocab) finite floats, vocab above every target; batch: the :class:`tasks.Batch` they score;
    kind: ``tasks.KIND_NEEDLE`` or ``tasks.KIND_MQAR``. A sequence's candidates are the targets of its answers of
    that kind: every needle's value (tasks.needles asks each needle once) or every pair's value (tasks.mqar asks each
    key once). Predictions are the argmax.

    Returns {"n": answers, "correct": share right, "other_candidate": share wrong but equal to another candidate's
    value, "other": share wrong and no candidate, "wrong_other_candidate": other_candidate / (1 - correct), the
    share of the WRONG answers that pick another candidate (NaN if none is wrong), "chance_pick_any": the expected
    accuracy of picking uniformly among the sequence's candidates (mean over answers of the share of candidates
    equal to the target: 1 / n_candidates when the values differ), "mean_candidates": candidates per answer}.
    No answer of that kind: NaNs and n = 0. "Pick any needle" shows as correct near chance_pick_any with
    wrong_other_candidate near 1.
    """
    batch, kind = _batch(batch), _kind(kind)
    tasks.accuracy(logits, batch, kind)                 # the logits' checks (shape, vocab, finite), said there
    sel = (batch.targets >= 0) & (batch.kind == kind)
    pred = np.asarray(logits).argmax(-1)
    right = cand = 0
    chance, n_cand = [], []
    for b in np.flatnonzero(sel.any(1)):
        cands = batch.targets[b, sel[b]]
        for t in np.flatnonzero(sel[b]):
            target, p = batch.targets[b, t], pred[b, t]
            right += int(p == target)
            cand += int(p != target and p in cands)
            chance.append(float(np.mean(cands == target)))
            n_cand.append(len(cands))
    n = len(chance)
    if n == 0:
        nan = float("nan")
        return {"n": 0, "correct": nan, "other_candidate": nan, "other": nan, "wrong_other_candidate": nan,
                "chance_pick_any": nan, "mean_candidates": nan}
    wrong = n - right
    return {"n": n, "correct": right / n, "other_candidate": cand / n, "other": (wrong - cand) / n,
            "wrong_other_candidate": cand / wrong if wrong else float("nan"),
            "chance_pick_any": float(np.mean(chance)), "mean_candidates": float(np.mean(n_cand))}


SUMMARY_KEYS = ("correct", "wrong_other", "chance", "asked", "other", "top1_asked", "prev", "where")


def retrieval_summary(model, n: int = 32) -> dict:
    """What the probes measure on one trained retrieval model (numpy, any family), on ``n`` held-out needle
    sequences of 128 tokens (1-4 needles): {"correct": needle accuracy, "wrong_other": share of the wrong answers
    that are another needle's value, "chance": the pick-any line, "asked": the global layer's attention mass on the
    asked needle, "other": mean mass on each other needle, "top1_asked": share of answers whose most-attended needle
    is the asked one, "prev": the best previous-token score over layers and heads, "where": "attn" (a stack's
    attention layers) or "cross FA", "n": n}. Stored in the meta of a seed whose weights are not kept
    (store.prune_weights)."""
    if not isinstance(model, (Stack, HySparse, HySparse2)):
        raise ValueError(f"model must be a numpy model (Stack, HySparse or HySparse2), got {type(model).__name__}")
    if model.cfg.vocab < tasks.VOCAB:
        raise ValueError(f"model must read the tasks' vocabulary of {tasks.VOCAB} tokens (a trained model), got "
                         f"vocab {model.cfg.vocab}")
    n = checks.pos_int("n", n)
    checks.output_size("n (n held-out sequences of 128 tokens)", (n, 128))
    b = tasks.needles(n, 128, (1, 2, 3, 4), seed=tasks.EVAL_SEED + 801)
    lg = families.numpy_logits(model, b.tokens)
    br = answer_breakdown(lg, b, tasks.KIND_NEEDLE)
    mass = needle_mass(model, b)
    prev = previous_token_scores(model, b.tokens)
    return {"correct": float(br["correct"]), "wrong_other": float(br["wrong_other_candidate"]),
            "chance": float(br["chance_pick_any"]), "asked": float(mass["asked"]), "other": float(mass["other"]),
            "top1_asked": float(mass["top1_asked"]), "prev": float(np.nanmax(prev)),
            "where": "attn" if isinstance(model, Stack) else "cross FA", "n": n}
