"""SparDA's block selection on a trained model's real attention (issue 16, part 2: the InfLLM-V2 selector and real
decode traces through the offload simulator; the Forecast head on real hidden states is not here yet).

The model is the trained dense model of the retrieval experiment (as in :mod:`hybrid_lab.trained.dsa`). Blocks are
8 tokens (a 128-token context has 16; SparDA's are 64 of 128K), compressed keys are means over windows of 8 with
stride 4 (SparDA: 32 / 16). Per query: the init block, the local block (the query's own) and the top-``k`` blocks by

- **InfLLM-V2**: the layer's own queries against its compressed keys (softmax per head, summed over a KV group,
  max-pooled onto blocks; :func:`hybrid_lab.models.infllm.infllm_v2_select`);
- **oracle**: exact attention mass per block (:func:`hybrid_lab.models.forecast.oracle_blocks`);

and the layer reads every visible token of the selected blocks (one softmax, :func:`dsa.sparse_forward`).

A decode trace is the selection of each step's query as the sequence grows, per layer; replayed through the
offload simulator's block cache (:func:`hybrid_lab.serving.offload_sim.replay_trace`) it gives the blocks a step
must copy from host memory, and the churn the simulator otherwise assumes.
"""
from __future__ import annotations

import numpy as np

from hybrid_lab.core import checks
from hybrid_lab.models.forecast import oracle_blocks
from hybrid_lab.models.infllm import infllm_v2_select
from hybrid_lab.serving.offload_sim import replay_trace
from hybrid_lab.trained import dsa, store, tasks

__all__ = ["BLOCK", "WINDOW", "STRIDE", "block_selection", "blocks_to_positions", "block_selector", "block_recall",
           "decode_trace", "replay_layers", "offload_rows", "run_experiment"]

BLOCK, WINDOW, STRIDE = 8, 8, 4


def _model(model):
    from hybrid_lab.models.stack import Stack
    if not isinstance(model, Stack) or any(k != "attn" for k in model.cfg.layers):
        raise ValueError(f"model must be a Stack of full-attention layers only (the trained dense model), got "
                         f"{type(model).__name__}")
    return model


def _kind(kind):
    if kind not in ("infllm", "oracle"):
        raise ValueError(f"kind must be 'infllm' or 'oracle', got {kind!r}")
    return kind


def block_selection(model, i: int, x, kind: str, k: int) -> np.ndarray:
    """Layer i's selected blocks for every query of one sequence: (T, 2 + k) block ids, -1 padded.
    x: (T, d_model) the layer's normalized input; kind "infllm" or "oracle"; k: top-k blocks beyond init + local."""
    kind, k = _kind(kind), checks.pos_int("k", k)
    q, kk, _ = dsa.layer_qkv(_model(model), i, x)
    T = len(q)
    pos = np.arange(T)
    if kind == "infllm":
        idx = infllm_v2_select(q[None], kk[None], k, BLOCK, WINDOW, STRIDE, n_init=1, n_local=1, q_pos=pos,
                               scale=model.cfg.d_qk ** -0.5)[0]
    else:
        idx = oracle_blocks(q[None], kk[None], pos, k, BLOCK, n_init=1, n_local=1)
    return idx[0, :, 0, :]                                                 # batch 0, KV head 0 (MQA)


def blocks_to_positions(block_idx, T: int) -> np.ndarray:
    """(T, nb) block ids (-1 padded) -> (T, 1, nb * BLOCK) token positions <= each query, -1 padded."""
    block_idx = checks.int_array("block_idx", block_idx, 2, "(T, nb)", lo=-1)
    T = checks.pos_int("T", T)
    if len(block_idx) != T:
        raise ValueError(f"block_idx must have one row per query (T={T}), got {len(block_idx)} rows")
    nb = -(-T // BLOCK)
    if block_idx.size and block_idx.max() >= nb:
        raise ValueError(f"block_idx must hold block ids < {nb} (T={T} tokens in blocks of {BLOCK}) or -1, got "
                         f"{int(block_idx.max())}")
    tok = block_idx[:, :, None] * BLOCK + np.arange(BLOCK)[None, None, :]
    tok = np.where((block_idx[:, :, None] >= 0) & (tok <= np.arange(T)[:, None, None]), tok, -1)
    return tok.reshape(T, 1, -1)


def block_selector(model, kind: str, k: int):
    """A selector for :func:`dsa.sparse_forward`: each layer reads the tokens of its init, local and top-k blocks."""
    model, kind, k = _model(model), _kind(kind), checks.pos_int("k", k)
    def select(i, x, probs):
        return blocks_to_positions(block_selection(model, i, x, kind, k), len(x))
    return select


def block_recall(model, tokens, k: int) -> np.ndarray:
    """Per layer: the share of the oracle's top-k blocks that InfLLM-V2 also picks (init and local blocks, picked by
    both, excluded), over the sequences ``tokens`` (N, T), queries that have more than k candidate blocks."""
    model = _model(model)
    toks = checks.int_array("tokens", tokens, 2, "(N, T) token ids", lo=0, hi=model.cfg.vocab)
    k = checks.pos_int("k", k)
    T = toks.shape[1]
    if toks.shape[0] == 0 or T < (k + 3) * BLOCK:
        raise ValueError(f"tokens must hold >= 1 sequence of >= (k + 3) * {BLOCK} = {(k + 3) * BLOCK} tokens (queries "
                         f"with more than k candidate blocks), got shape {toks.shape}")
    rows = np.arange(T) // BLOCK >= k + 1                                  # more candidates than k
    rec = np.zeros((len(toks), model.cfg.n_layers))
    for n, row in enumerate(toks):
        for i, c in enumerate(dsa.layer_attention(model, row)):
            mine, ref = (block_selection(model, i, c["x"], kind, k) for kind in ("infllm", "oracle"))
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


def decode_trace(model, tokens, kind: str, k: int, start: int = 32) -> list:
    """The blocks each decode step selects, per layer: [layer][step] -> 1-D block ids, for the queries at positions
    start .. T-1 of ``tokens`` (T,) (causal: the selection of row t is what decode step t selects)."""
    model, kind, k = _model(model), _kind(kind), checks.pos_int("k", k)
    t = checks.tokens("tokens", tokens, model.cfg.vocab)
    start = checks.int_in("start", start, 0, len(t))
    trace = []
    for i, c in enumerate(dsa.layer_attention(model, t)):
        sel = block_selection(model, i, c["x"], kind, k)
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


def run_experiment(out, seeds=(0, 1, 2), ks=(1, 2, 4), n_eval: int = 64, command: str = "") -> dict:
    """Accuracy under InfLLM-V2 vs oracle block selection per k, block recall per layer, and the decode traces of
    4 held-out sequences (k = 2) with their replay summaries, for each seed of the trained dense model. Writes
    ``out``/sparda/summary.json and returns it."""
    import json
    import time
    from pathlib import Path

    if not isinstance(out, (str, Path)):
        raise ValueError(f"out must be a folder path, got {type(out).__name__}")
    seeds = checks.int_array("seeds", seeds, 1, "(n,) stored seeds", lo=0).tolist()
    ks = checks.int_array("ks", ks, 1, "(n,) block counts", lo=1).tolist()
    if not seeds or not ks:
        raise ValueError(f"seeds and ks must be non-empty, got {seeds} and {ks}")
    n_eval = checks.int_in("n_eval", n_eval, 4, 10 ** 6)
    if not isinstance(command, str):
        raise ValueError(f"command must be a string, got {type(command).__name__}")
    out = Path(out)
    t0 = time.time()
    ev = tasks.mix(n_eval, 128, seed=tasks.EVAL_SEED + 1, n_local=4)
    per_seed = {}
    for seed in seeds:
        model, _ = store.load_checkpoint(store.CHECKPOINTS / "retrieval" / "dense" / f"seed{seed}")
        r = {}
        for k in ks:
            for kind in ("oracle", "infllm"):
                lg = np.stack([dsa.sparse_forward(model, t, block_selector(model, kind, k)) for t in ev.tokens])
                r[f"{kind} k={k} needle"] = tasks.accuracy(lg, ev, tasks.KIND_NEEDLE)[0]
                r[f"{kind} k={k} local"] = tasks.accuracy(lg, ev, tasks.KIND_LOCAL)[0]
            for i, v in enumerate(block_recall(model, ev.tokens[:8], k)):
                r[f"block recall k={k} layer {i}"] = float(v)
        traces = {}
        for kind in ("infllm", "oracle"):
            tr = [decode_trace(model, row, kind, 2) for row in ev.tokens[:4]]
            reps = [replay_layers(t) for t in tr]
            traces[kind] = {"trace": [[[s.tolist() for s in layer] for layer in t] for t in tr],
                            "hit_rate": [x["hit_rate"] for x in reps], "churn": [x["churn"] for x in reps],
                            "copied_per_layer": [x["copied"].sum(1).tolist() for x in reps]}
            r[f"{kind} trace churn"] = float(np.mean(traces[kind]["churn"]))
            r[f"{kind} trace hit rate"] = float(np.mean(traces[kind]["hit_rate"]))
        per_seed[seed] = {"final": {k: round(float(v), 4) for k, v in r.items()}, "traces": traces}
    keys = per_seed[seeds[0]]["final"]
    summary = {"command": command or "hybrid-lab train sparda", "machine": "CPU, numpy",
               "seconds": round(time.time() - t0, 1), "block": BLOCK, "window": WINDOW, "stride": STRIDE,
               "eval": f"tasks.mix({n_eval}, 128, seed=EVAL_SEED + 1, n_local=4); traces: its first 4 sequences, "
                       f"k = 2, decode steps 32..127",
               "accuracy": {k: {"mean": round(float(np.mean([per_seed[s]["final"][k] for s in seeds])), 4),
                                "std": round(float(np.std([per_seed[s]["final"][k] for s in seeds])), 4)}
                            for k in keys},
               "per_seed": {str(s): v for s, v in per_seed.items()}}
    (out / "sparda").mkdir(parents=True, exist_ok=True)
    (out / "sparda" / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    return summary
