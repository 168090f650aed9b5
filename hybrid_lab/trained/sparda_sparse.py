"""SparDA on a backbone trained with block-sparse attention, beside the dense-trained one.

SparDA's two 8B backbones had been trained sparse before the paper's experiments (SparDA notes, overview; §3.1:
MiniCPM4.1-8B's backbone is InfLLM-V2; §4.1: its sparse pretraining ran at 32K). Our 4-layer dense model
(``retrieval/dense``) was trained dense only. Here each of its seeds is trained on twice, from its stored weights,
with one difference:

- ``"infllm"``: every attention layer reads only the blocks InfLLM-V2 picks from the current weights (the init block,
  the query's own block and the top-k others by the (8, 4) compressed-key score; the choice is not differentiated,
  the attention over the chosen tokens is), as a sparse training stage runs it;
- ``"dense"``: the same steps, data and optimizer with dense attention: the control, so that more training alone is
  not read as the effect of training sparse.

Each one's learning rate is chosen from :data:`LRS` on a validation split, as the protocol of notebook 10 does.

Then each backbone is scored as :mod:`hybrid_lab.trained.sparda` scores the dense one: dense attention, InfLLM-V2 and
the Forecast head (trained on that backbone by SparDA's recipe, fine teacher) at k chosen blocks, on the sparda
evaluation set. ``hybrid-lab train sparda_sparse`` runs it (numpy + torch, CPU).
"""
from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np

from hybrid_lab.core import checks
from hybrid_lab.models.stack import Stack
from hybrid_lab.trained import dsa, sparda, store, tasks

__all__ = ["ATTENTIONS", "BACKBONES", "RECIPE", "LRS", "block_masks", "continue_training", "run_experiment",
           "load_summary", "summary_rows", "summary_table"]

ATTENTIONS = ("dense", "infllm")
BACKBONES = ("stored", "trained on dense", "trained on sparse")
# The continued training both backbones get (equal in everything but the attention); the learning rate of each is
# chosen from LRS on a validation split (its task loss under its own attention, mean over the seeds).
RECIPE = dict(steps=800, batch=16, k=4)
LRS = (3e-4, 1e-3, 3e-3)


def _attention(attention):
    if attention not in ATTENTIONS:
        raise ValueError(f"attention must be one of {ATTENTIONS}, got {attention!r}")
    return attention


def block_masks(model, tokens, k: int) -> np.ndarray:
    """The positions each query reads when every layer reads the blocks InfLLM-V2 picks with k chosen (init, own
    and top-k), computed in the sparse forward of each sequence of ``tokens`` (N, T) (the layers below already read
    sparsely, as at inference). Returns (N, n_layers, T, T) bool, True = read (always within the causal mask)."""
    model, k = dsa.dense_model(model), checks.pos_int("k", k)
    toks = checks.int_array("tokens", tokens, 2, "(N, T) token ids", lo=0, hi=model.cfg.vocab)
    if 0 in toks.shape:
        raise ValueError(f"tokens must be a non-empty (N, T) array, got shape {toks.shape}")
    return dsa.read_masks(model, toks, lambda n: sparda.block_selector(model, "infllm", k))[0]


def continue_training(model, attention: str = "infllm", k: int = 4, steps: int = 800, batch: int = 16,
                      lr: float = 1e-3, seed: int = 0) -> tuple:
    """Train a dense :class:`Stack` on: each step ``batch`` fresh ``tasks.mix`` sequences (seeds 80000 + 10000 seed
    + step, below the evaluation seeds), cross-entropy on the answer positions (as in training), AdamW (0.9, 0.95),
    weight decay 0.1 on matrices, clip 1.0, ``lr`` after a linear warm-up over the first tenth of the steps; torch
    twin. attention "infllm": each layer reads only
    :func:`block_masks` of the current weights (k chosen blocks); "dense": full causal attention.
    The model is copied, not changed. Returns (numpy Stack (float32), {"loss": (steps,) task loss})."""
    import torch

    model = dsa.dense_model(model)
    attention = _attention(attention)
    k, steps, batch = checks.pos_int("k", k), checks.pos_int("steps", steps), checks.pos_int("batch", batch)
    checks.output_size("batch (each step draws batch x 128 tokens)", (batch, 128))
    checks.output_size("steps (the loss history)", (steps,))
    sparda.position_reads(128, k)                                      # k must leave candidates: named there
    lr, seed = checks.positive_number("lr", lr), checks.nonneg_int("seed", seed)
    torch.manual_seed(seed)
    cfg, net, opt = dsa.twin_trainer(model, lr)
    losses = np.zeros(steps)
    warm = max(steps // 10, 1)
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr * min(1.0, (step + 1) / warm)
        b = tasks.mix(batch, 128, seed=80_000 + seed * 10_000 + step, n_local=4)
        masks = block_masks(Stack(cfg, net.numpy_weights()), b.tokens, k) if attention == "infllm" else None
        losses[step] = dsa.task_step(net, opt, b, masks)
    return Stack(cfg, net.numpy_weights()), {"loss": losses}


def _own_loss(model, data, attention: str, k: int) -> float:
    """Mean cross-entropy on the answer positions of ``data`` under the model's own attention (the validation
    score of its continued training)."""
    sel = sparda.block_selector(model, "infllm", k) if attention == "infllm" else None     # stateless for infllm
    lg = np.stack([dsa.sparse_forward(model, t, sel) for t in data.tokens])
    lg = lg - lg.max(-1, keepdims=True)                  # in the logits' float32, as the stored losses were computed
    logp = lg - np.log(np.exp(lg).sum(-1, keepdims=True))
    ok = data.targets >= 0
    return float(-np.take_along_axis(logp, np.where(ok, data.targets, 0)[..., None], -1)[..., 0][ok].mean())


def _scores(model, ev, tr, ks, seed, head_steps) -> dict:
    """Needle / local accuracy of one backbone: dense attention, then per k InfLLM-V2, the fine-teacher Forecast
    head trained on this backbone (SparDA's recipe, as hybrid-lab train sparda) and that fine teacher itself."""
    lg = np.stack([dsa.sparse_forward(model, t) for t in ev.tokens])
    r = {"dense needle": tasks.accuracy(lg, ev, tasks.KIND_NEEDLE)[0],
         "dense local": tasks.accuracy(lg, ev, tasks.KIND_LOCAL)[0]}
    params, _ = sparda.train_forecast_head(model, tr, "fine", steps=head_steps, k=4, seed=seed)
    for k in ks:
        for label, kind, p in (("infllm", "infllm", None), ("forecast", "forecast", params),
                               ("fine teacher", "fine teacher", None)):
            acc = sparda.block_accuracy(model, ev, kind, k, p)
            r[f"{label} k={k} needle"], r[f"{label} k={k} local"] = acc["needle"], acc["local"]
    return r


def _one_thread():
    import torch
    torch.set_num_threads(1)


def _train_job(args):
    """One continued training and its validation loss (in a worker: one thread, so the numbers do not depend on
    the machine's cores)."""
    seed, attention, lr, recipe, n_val = args
    _one_thread()
    dense, _ = store.load_checkpoint(store.CHECKPOINTS / "retrieval" / "dense" / f"seed{seed}")
    model, log = continue_training(dense, attention, recipe["k"], recipe["steps"], recipe["batch"], lr, seed)
    val = tasks.mix(n_val, 128, seed=tasks.VAL_SEED + 1, n_local=4)
    return model.weights, [round(float(v), 5) for v in log["loss"][::10]], _own_loss(model, val, attention,
                                                                                      recipe["k"])


def _score_job(args):
    weights, seed, ks, n_eval, n_train, head_steps = args
    _one_thread()
    dense, _ = store.load_checkpoint(store.CHECKPOINTS / "retrieval" / "dense" / f"seed{seed}")
    model = dense if weights is None else Stack(dataclasses.replace(dense.cfg, dtype="float32"), weights)
    ev = tasks.mix(n_eval, 128, seed=tasks.EVAL_SEED + 1, n_local=4)
    tr = tasks.mix(n_train, 128, seed=60_000 + seed, n_local=4).tokens           # the head's data (sparda's)
    return _scores(model, ev, tr, ks, seed, head_steps)


def _pool_map(fn, jobs, workers):
    """fn over jobs in ``workers`` spawned processes, BLAS and torch at one thread each."""
    import multiprocessing as mp
    import os
    from concurrent.futures import ProcessPoolExecutor

    keep = {v: os.environ.get(v) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    os.environ.update({v: "1" for v in keep})                       # inherited by the spawned workers
    try:
        with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as ex:
            return list(ex.map(fn, jobs))
    finally:
        for v, old in keep.items():
            if old is None:
                os.environ.pop(v, None)
            else:
                os.environ[v] = old


def run_experiment(out, seeds=(0, 1, 2), ks=(2, 4), n_eval: int = 64, command: str = "",
                   quick: bool = False, workers: int | None = None) -> dict:
    """For each seed of the stored dense model: the stored backbone, and it trained on (:data:`RECIPE`) with dense
    and with InfLLM-V2 attention at every rate of :data:`LRS`; per attention the rate with the lowest mean
    validation loss (``tasks.mix(32, 128, VAL_SEED + 1)``, under its own attention; ties: the smaller rate) is kept.
    Each kept backbone is scored by :func:`_scores` on ``tasks.mix(n_eval, 128, EVAL_SEED + 1)`` (the sparda
    evaluation set). Trainings and scorings run in ``workers`` processes (default: the CPU count) at one thread
    each: the numbers do not depend on it. Writes ``out``/sparda_sparse/summary.json; returns it. quick: one rate,
    3 steps of batch 2, a 10-step head (a smoke run)."""
    import os

    seeds, ks, n_eval = sparda.run_args(out, seeds, ks, n_eval, 4, command, quick)
    workers = checks.pos_int("workers", workers if workers is not None else os.cpu_count() or 1)
    recipe, lrs = (dict(RECIPE, steps=3, batch=2), LRS[1:2]) if quick else (dict(RECIPE), LRS)
    head_steps, n_train, n_val = (10, 4, 4) if quick else (300, 32, 32)
    t0 = time.time()
    grid = [(seed, att, lr) for att in ATTENTIONS for lr in lrs for seed in seeds]
    trained = dict(zip(grid, _pool_map(_train_job, [(s, a, lr, recipe, n_val) for s, a, lr in grid], workers)))
    chosen, val = {}, {}
    for att in ATTENTIONS:
        val[att] = {str(lr): round(float(np.mean([trained[(s, att, lr)][2] for s in seeds])), 5) for lr in lrs}
        chosen[att] = min(lrs, key=lambda lr: (val[att][str(lr)], lr))
    print(f"  sparda_sparse: {len(grid)} trainings ({time.time() - t0:.0f} s); validation loss by rate: {val}",
          flush=True)
    label = {"dense": "trained on dense", "infllm": "trained on sparse"}
    jobs = [(None, s) for s in seeds] + [(trained[(s, a, chosen[a])][0], s) for a in ATTENTIONS for s in seeds]
    names = [("stored", s) for s in seeds] + [(label[a], s) for a in ATTENTIONS for s in seeds]
    scores = _pool_map(_score_job, [(w, s, ks, n_eval, n_train, head_steps) for w, s in jobs], workers)
    per_seed = {str(s): {"final": {}, "loss": {}, "val_loss": {}} for s in seeds}
    for (lab, s), r in zip(names, scores):
        per_seed[str(s)]["final"].update({f"{lab}: {key}": round(float(v), 4) for key, v in r.items()})
    for a in ATTENTIONS:
        for s in seeds:
            per_seed[str(s)]["loss"][label[a]] = trained[(s, a, chosen[a])][1]
            per_seed[str(s)]["val_loss"][label[a]] = {str(lr): round(trained[(s, a, lr)][2], 5) for lr in lrs}
    kp = ks[-1]
    for s in seeds:
        r = per_seed[str(s)]["final"]
        print(f"  seed {s}: at k={kp}, InfLLM-V2 / Forecast needle: " + ", ".join(
            f"{lab} {r[f'{lab}: infllm k={kp} needle']:.2f} / {r[f'{lab}: forecast k={kp} needle']:.2f}"
            for lab in BACKBONES), flush=True)
    keys = per_seed[str(seeds[0])]["final"]
    summary = {"command": command or "hybrid-lab train sparda_sparse", "machine": "CPU, numpy + torch (1 thread each)",
               "seconds": round(time.time() - t0, 1), "ks": ks, "seeds": seeds,
               "eval": f"tasks.mix({n_eval}, 128, seed=EVAL_SEED + 1, n_local=4) (the sparda evaluation set)",
               "recipe": {**recipe, "lrs": list(lrs), "chosen_lr": {label[a]: chosen[a] for a in ATTENTIONS},
                          "val_loss_by_lr": {label[a]: val[a] for a in ATTENTIONS},
                          "validation": f"tasks.mix({n_val}, 128, seed=VAL_SEED + 1, n_local=4): task loss under the "
                                        f"model's own attention, mean over the seeds; the lowest wins",
                          "data": "tasks.mix(batch, 128, seed 80000 + 10000 seed + step, n_local=4)",
                          "optimizer": "AdamW(0.9, 0.95), weight decay 0.1 on matrices, clip 1.0, linear warm-up "
                                       "over the first tenth of the steps, then constant",
                          "from": "retrieval/dense/seedK (the stored dense-trained model)",
                          "infllm": f"InfLLM-V2 blocks of {sparda.BLOCK}, ({sparda.WINDOW}, {sparda.STRIDE}) keys, "
                                    f"init + own + top-k, chosen from the current weights each step"},
               "forecast": f"fine teacher, {n_train} sequences of tasks.mix(seed 60000 + seed), {head_steps} steps "
                           f"(SparDA's recipe, as hybrid-lab train sparda)",
               "accuracy": {key: {"mean": round(float(np.mean([per_seed[str(s)]["final"][key] for s in seeds])), 4),
                                  "std": round(float(np.std([per_seed[str(s)]["final"][key] for s in seeds])), 4)}
                            for key in keys},
               "per_seed": per_seed}
    (Path(out) / "sparda_sparse").mkdir(parents=True, exist_ok=True)
    (Path(out) / "sparda_sparse" / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    return summary


def load_summary(path=None) -> dict:
    """The stored summary of ``hybrid-lab train sparda_sparse``; path: default the package's
    sparda_sparse/summary.json."""
    return sparda.read_summary(path, "sparda_sparse", "recipe")


def _checked(summary):
    if not isinstance(summary, dict) or any(f not in summary for f in ("recipe", "accuracy", "ks", "seeds")):
        got = sorted(summary) if isinstance(summary, dict) else type(summary).__name__
        raise ValueError(f"summary must be a sparda_sparse summary (load_summary), got {got}")
    return summary


def summary_rows(summary: dict, k: int) -> list:
    """[backbone, dense needle, InfLLM-V2 needle, Forecast needle, fine teacher needle, InfLLM-V2 local] as
    "mean ± std" over the seeds, at ``k`` chosen blocks, one row per backbone (stored, trained on dense, trained on
    sparse)."""
    ms = sparda.mean_std_cells(_checked(summary), k)
    return [[b, ms(f"{b}: dense needle"), ms(f"{b}: infllm k={k} needle"), ms(f"{b}: forecast k={k} needle"),
             ms(f"{b}: fine teacher k={k} needle"), ms(f"{b}: infllm k={k} local")] for b in BACKBONES]


def summary_table(summary: dict) -> str:
    """The stored experiment as text: per k, :func:`summary_rows`; then, per continued training, its task loss
    (first and last fifth of the logged steps, mean over the seeds) and its validation loss at each rate."""
    summary = _checked(summary)
    n, rec = len(summary["seeds"]), summary["recipe"]
    lr = ", ".join(f"{b} {v:g}" for b, v in rec["chosen_lr"].items())
    out = [f"continued training: {rec['steps']} steps of {rec['batch']} x 128 tokens, the sparse one at k={rec['k']} "
           f"chosen ({rec['k'] + 2} blocks read)", f"lr chosen on validation from {rec['lrs']}: {lr}",
           f"needle accuracy, mean ± std of {n} seed{'s' if n != 1 else ''} (measured)"]
    for k in summary["ks"]:
        out.append(f"k={k} chosen ({k + 2} of 16 blocks read)   {'dense attn':>11s} {'InfLLM-V2':>11s} "
                   f"{'Forecast':>11s} {'fine teacher':>12s}   {'local (InfLLM-V2)':>17s}")
        out += [f"  {r[0]:26s} {r[1]:>11s} {r[2]:>11s} {r[3]:>11s} {r[4]:>12s}   {r[5]:>17s}"
                for r in summary_rows(summary, k)]
    for lab in BACKBONES[1:]:
        logs = np.array([r["loss"][lab] for r in summary["per_seed"].values()])      # (seeds, every 10th step)
        m = max(logs.shape[1] // 5, 1)
        val = ", ".join(f"{float(v):g}: {loss:.3f}" for v, loss in rec["val_loss_by_lr"][lab].items())
        out.append(f"{lab}: task loss {logs[:, :m].mean():.3f} (first fifth of the steps) -> "
                   f"{logs[:, -m:].mean():.3f} (last fifth)")
        out.append(f"  validation loss by lr: {val}")
    return "\n".join(out)
