"""Train the lab's small models (torch twins) and store what the numpy models load: ``hybrid-lab train EXPERIMENT``.

Two training experiments; the tables of notebook 10 are views of them:

- ``mqar`` (why hybrids, lecture §3): pure Mamba-2, the Mamba-2 hybrid and dense attention at the same parameter
  count, and pure Mamba-2 at state sizes N = 16..128, on multi-query associative recall with 4-64 pairs.
- ``retrieval`` (why HySparse2 and the paper's ablation directions): sliding window only, hybrid SWA, HySparse,
  HySparse2, dense, and four HySparse2 variants (block-level selection, no forced window, gated SWA, no bridging),
  at the same parameter count, on needles + local copies (:func:`hybrid_lab.trained.tasks.mix`).

Every model sees the same data (the same training seeds), steps, batch, optimizer and learning rate; there is no
per-model hyper-parameter search (the same budget, zero, for each). Each (model, seed) is a job; ``--jobs`` runs
several in parallel processes (one GPU holds many of these small models at once).

Outputs under ``--out`` (default: the package's ``checkpoints/``): ``EXPERIMENT/MODEL/seedK.npz`` (fp16 weights)
and ``seedK.json`` (config, seed, command, machine, tokens/s, loss and eval curves, final held-out accuracies);
``results.json`` aggregates mean ± std over seeds per model and setting.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hybrid_lab.trained import families as fam
from hybrid_lab.trained import store, tasks
from hybrid_lab.trained.store import CHECKPOINTS, RESULTS, load_checkpoint, read_checkpoint, save_checkpoint

__all__ = ["Experiment", "EXPERIMENTS", "CHECKPOINTS", "RESULTS", "run_experiment", "evaluate", "eval_sets",
           "save_checkpoint", "read_checkpoint", "load_checkpoint", "list_checkpoints", "aggregate", "main"]

DIST_BUCKETS = ((0, 16), (16, 64), (64, 128))          # in one SWA window / within 4 SWA layers' reach (60) / beyond


@dataclass(frozen=True)
class Experiment:
    """A training experiment: a task, the models, the seeds and the training budget (the same for every model)."""
    name: str
    task: str
    task_kw: dict
    models: tuple
    budget_model: str                   # the parameter budget = this model's count at d_ff = its spec's d_ff
    seq_len: int = 128
    steps: int = 2200
    batch: int = 64
    lr: float = 3e-3
    warmup: int = 100
    weight_decay: float = 0.1
    seeds: tuple = (0, 1, 2)
    eval_every: int = 250
    vocab: int = tasks.VOCAB
    override: dict = field(default_factory=dict)     # config fields forced on every model (quick runs)


MQAR_PAIRS = (2, 4, 8, 16, 32)
EXPERIMENTS = {
    "mqar": Experiment("mqar", "mqar", {"n_pairs": MQAR_PAIRS},
                       ("mamba2", "mamba2_hybrid", "dense", "mamba2_N32", "mamba2_N64"), "dense"),
    "retrieval": Experiment("retrieval", "mix", {"n_local": 4}, ("swa", "hybrid_swa", "hysparse", "hysparse2", "dense",
                                                     "hysparse2_block", "hysparse2_nowindow", "hysparse2_gatedswa",
                                                     "hysparse2_nobridge"), "dense"),
}


def quick(exp: Experiment, models=None) -> Experiment:
    """A reduced config for a CPU in minutes: short sequences, narrow models, few steps, one seed."""
    kw = {"mqar": {"n_pairs": (2, 4, 8)}, "mix": {"n_needles": (1, 2), "n_local": 2}}[exp.task]
    small = dict(d_model=32, d_qk=8, d_v=8)
    return dataclasses.replace(exp, task_kw=kw, models=tuple(models or exp.models), seq_len=64, steps=150, batch=16,
                               warmup=10, seeds=(0,), eval_every=50, override=small)


# ------------------------------------------------------------------------------------------------- evaluation
def eval_sets(exp: Experiment, n: int = 256) -> dict:
    """Held-out sets (seeds >= tasks.EVAL_SEED, never used in training): {setting name: Batch}."""
    T = exp.seq_len
    if exp.task == "mqar":
        pairs = exp.task_kw["n_pairs"]
        return {f"pairs={p}": tasks.mqar(n, T, p, tasks.EVAL_SEED + p) for p in pairs}
    kw = {k: v for k, v in exp.task_kw.items() if k != "n_local"}
    out = {"mix": tasks.mix(n, T, seed=tasks.EVAL_SEED + 1, **exp.task_kw)}
    if T >= 128:
        out["needles=4"] = tasks.needles(n, T, 4, seed=tasks.EVAL_SEED + 4, **{k: v for k, v in kw.items()
                                                                              if k != "n_needles"})
    return out


def settings(name: str, batch: tasks.Batch, logits: np.ndarray) -> dict:
    """Accuracies of one evaluation set: {setting: accuracy} (and the distance buckets of the needle answers)."""
    if name.startswith("pairs="):
        return {name: tasks.accuracy(logits, batch)[0]}
    if name.startswith("needles="):
        return {name: tasks.accuracy(logits, batch, tasks.KIND_NEEDLE)[0]}
    out = {"needle": tasks.accuracy(logits, batch, tasks.KIND_NEEDLE)[0],
           "local": tasks.accuracy(logits, batch, tasks.KIND_LOCAL)[0]}
    for lo, hi in DIST_BUCKETS:
        acc, n = tasks.accuracy(logits, batch, tasks.KIND_NEEDLE, (lo, hi))
        if n:
            out[f"needle d={lo}-{hi}"] = acc
    return out


def evaluate(logits_fn, sets: dict, chunk: int = 64) -> dict:
    """Run ``logits_fn(tokens (b, T)) -> (b, T, vocab)`` over every set; {setting: accuracy}."""
    out = {}
    for name, b in sets.items():
        lg = np.concatenate([logits_fn(b.tokens[i:i + chunk]) for i in range(0, len(b.tokens), chunk)])
        out.update(settings(name, b, lg))
    return out


# ------------------------------------------------------------------------------------------------- checkpoints
def list_checkpoints(root=CHECKPOINTS, experiments=tuple(EXPERIMENTS)) -> list:
    """The stored model checkpoints of the training experiments (``store.list_checkpoints`` for all of them)."""
    return store.list_checkpoints(root, experiments)


# ------------------------------------------------------------------------------------------------- training
def _lr(step, exp):
    if step < exp.warmup:
        return exp.lr * (step + 1) / exp.warmup
    t = (step - exp.warmup) / max(1, exp.steps - exp.warmup)
    return exp.lr * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * t)))


def model_config(exp: Experiment, model: str, seed: int):
    """The config of ``model`` in ``exp`` (d_ff matched to the experiment's parameter budget)."""
    spec = fam.SPECS[model]
    budget = fam.SPECS[exp.budget_model]
    target = fam.n_params(fam.make_config(budget, exp.vocab, budget.d_ff, **exp.override))
    if spec.match:
        d_ff = fam.match_d_ff(spec, exp.vocab, target, **exp.override)
    else:                                       # a sweep: the d_ff of its base model, so only the state grows
        d_ff = fam.match_d_ff(fam.SPECS["mamba2"], exp.vocab, target, **exp.override)
    return fam.make_config(spec, exp.vocab, d_ff, seed=seed, **exp.override)


def train_one(exp: Experiment, model: str, seed: int, out: Path, command: str, device: str = "auto",
              show_progress: bool = False) -> dict:
    """Train one (model, seed) of ``exp``; write its checkpoint; return its meta (with final accuracies)."""
    import torch

    from hybrid_lab.core.progress import progress

    dev = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
    if dev == "cpu":
        torch.set_num_threads(max(1, int(os.environ.get("HYBRID_LAB_TRAIN_THREADS", "1"))))
    torch.manual_seed(seed)
    cfg = model_config(exp, model, seed)
    net = fam.torch_model(cfg).to(dev)
    graphs = dev == "cuda" and os.environ.get("HYBRID_LAB_CUDA_GRAPHS", "1") != "0"
    lr = torch.tensor(exp.lr, device=dev) if graphs else exp.lr
    decay = [p for p in net.parameters() if p.ndim >= 2]
    rest = [p for p in net.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": exp.weight_decay},
                             {"params": rest, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95), capturable=graphs)
    sets = eval_sets(exp, n=64)                                  # a small held-out set for the curves

    def logits_fn(tok):
        net.eval()
        with torch.no_grad():
            lg = net(torch.as_tensor(tok, device=dev)).float().cpu().numpy()
        net.train()
        return lg

    def batch(step):
        b = tasks.make_task(exp.task, exp.batch, exp.seq_len, seed=seed * 100_000 + step, **exp.task_kw)
        return torch.as_tensor(b.tokens, device=dev), torch.as_tensor(b.targets, device=dev)

    def train_step(x, y):
        logits = net(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                                                 ignore_index=-1)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        return loss

    def set_lr(value):
        for g in opt.param_groups:
            if graphs:
                g["lr"].fill_(value)
            else:
                g["lr"] = value

    step_fn, how = None, "eager"
    if graphs:      # tiny models are launch-bound: capture the whole step (forward, backward, AdamW) in a CUDA graph
        try:
            step_fn = _capture(torch, net, opt, train_step, set_lr, *batch(0))
            how = "CUDA graph"
        except Exception as exc:                                # keep training, eagerly, and say so
            how = f"eager (CUDA graph capture failed: {type(exc).__name__}: {str(exc)[:120]})"
            graphs = False
            opt = torch.optim.AdamW([{"params": decay, "weight_decay": exp.weight_decay},
                                     {"params": rest, "weight_decay": 0.0}], lr=exp.lr, betas=(0.9, 0.95))
    log = {"step": [], "loss": [], "eval_step": [], "eval": [], "step_mode": how}
    t_train, tokens_seen = 0.0, 0
    bar = progress(range(exp.steps), desc=f"{model} seed {seed}") if show_progress else range(exp.steps)
    for step in bar:
        t0 = time.perf_counter()                    # the step's time includes making its batch (on the CPU)
        x, y = batch(step)
        set_lr(_lr(step, exp))
        if step_fn is not None:
            loss = step_fn(x, y)
        else:
            opt.zero_grad(set_to_none=True)
            loss = train_step(x, y)
        if step % 10 == 0 and dev == "cuda":        # the GPU runs ahead; a sync now and then keeps the clock honest
            torch.cuda.synchronize()
        t_train += time.perf_counter() - t0
        tokens_seen += x.numel()
        if step % 10 == 0 or step == exp.steps - 1:
            log["step"].append(step)
            log["loss"].append(round(float(loss.detach()), 5))
        if (step + 1) % exp.eval_every == 0 or step == exp.steps - 1:
            log["eval_step"].append(step + 1)
            log["eval"].append({k: round(v, 4) for k, v in evaluate(logits_fn, sets).items()})
    final = evaluate(logits_fn, eval_sets(exp))
    weights = net.numpy_weights()
    meta = {
        "experiment": exp.name, "model": model, "label": fam.SPECS[model].label, "seed": seed,
        "model_config": fam.config_to_json(cfg), "n_params": fam.n_params(cfg),
        "task": exp.task, "task_kw": {k: list(v) if isinstance(v, tuple) else v for k, v in exp.task_kw.items()},
        "train": {"steps": exp.steps, "batch": exp.batch, "seq_len": exp.seq_len, "lr": exp.lr,
                  "warmup": exp.warmup, "weight_decay": exp.weight_decay, "optimizer": "AdamW(0.9, 0.95)",
                  "schedule": "linear warm-up, cosine to 0.1 lr", "grad_clip": 1.0,
                  "data_seeds": f"seed * 100000 + step (step < {exp.steps})",
                  "loss": "cross-entropy on the answer positions only"},
        "command": command, "machine": _machine(dev),
        "tokens_per_s": round(tokens_seen / max(t_train, 1e-9)), "train_seconds": round(t_train, 1),
        "log": log, "final": {k: round(v, 4) for k, v in final.items()},
        "eval_sets": "held-out: tasks seeds >= EVAL_SEED (see train.eval_sets), 256 sequences per set",
    }
    save_checkpoint(out / exp.name / model / f"seed{seed}", weights, meta)
    return meta


def _capture(torch, net, opt, train_step, set_lr, x0, y0):
    """Capture one training step in a CUDA graph; returns step_fn(x, y) -> loss that copies the batch into the
    graph's inputs and replays it. Warm-up steps run at lr 0 (AdamW then leaves the weights unchanged) and the
    optimizer's moments are zeroed after them, so training starts from the same state as the eager path."""
    static_x, static_y = x0.clone(), y0.clone()
    set_lr(0.0)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            train_step(static_x, static_y)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = train_step(static_x, static_y)
    torch.cuda.synchronize()
    for state in opt.state.values():                 # forget the warm-up (weights did not move at lr 0)
        for v in state.values():
            if torch.is_tensor(v):
                v.zero_()

    def step_fn(x, y):
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()
        return static_loss

    return step_fn


def _machine(dev):
    if dev == "cuda":
        import torch
        return f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}"
    return f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def _job(args):
    exp, model, seed, out, command, device, bar = args
    t0 = time.time()
    meta = train_one(exp, model, seed, Path(out), command, device, show_progress=bar)
    return model, seed, meta["final"], meta["tokens_per_s"], time.time() - t0


def run_experiment(exp: Experiment, out: Path = CHECKPOINTS, jobs: int = 1, device: str = "auto",
                   command: str = "", models=None) -> dict:
    """Train every (model, seed) of ``exp`` (``jobs`` processes), then aggregate ``out``/results.json."""
    return run_jobs([(exp, models or exp.models)], out, jobs, device, command)


def run_jobs(plan, out: Path = CHECKPOINTS, jobs: int = 1, device: str = "auto", command: str = "") -> dict:
    """plan: [(Experiment, models)]. Trains every (experiment, model, seed) in one pool of ``jobs`` processes (the
    small models leave most of a GPU idle: several at once fill it), then aggregates ``out``/results.json."""
    out = Path(out)
    bar = jobs <= 1                 # one bar per training; parallel trainings print a line each when done instead
    todo = [(exp, m, s, str(out), command, device, bar) for exp, models in plan for m in models for s in exp.seeds]
    for exp, models in plan:
        print(f"{exp.name}: {len(models)} models x {len(exp.seeds)} seeds, {exp.steps} steps of {exp.batch} x "
              f"{exp.seq_len} tokens", flush=True)
    print(f"{len(todo)} trainings, {jobs} at a time", flush=True)
    t0 = time.time()
    if jobs <= 1:
        results = map(_job, todo)
    else:
        import multiprocessing as mp
        ex = ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn"))
        results = ex.map(_job, todo)
    for m, s, final, tps, dt in results:
        print(f"  {m:22s} seed {s}: {_fmt(final)}  ({tps:,} tok/s, {dt:.0f} s)", flush=True)
    if jobs > 1:
        ex.shutdown()
    print(f"all trainings done in {time.time() - t0:.0f} s", flush=True)
    return aggregate(out)


def _fmt(final):
    return ", ".join(f"{k} {v:.2f}" for k, v in final.items())


def aggregate(root=CHECKPOINTS, out=None) -> dict:
    """results.json from every checkpoint's meta: per experiment and model, mean and std over seeds per setting.
    Written to ``out`` (default ``root``/results.json)."""
    root = Path(root)
    res = {}
    for p in store.list_checkpoints(root):
        meta = json.loads(p.with_suffix(".json").read_text())
        e = res.setdefault(meta["experiment"], {"task": meta["task"], "task_kw": meta["task_kw"],
                                                "train": meta["train"], "command": meta["command"],
                                                "machine": meta["machine"], "models": {}})
        m = e["models"].setdefault(meta["model"], {"label": meta["label"], "n_params": meta["n_params"],
                                                   "seeds": [], "tokens_per_s": [], "per_seed": {}})
        m["seeds"].append(meta["seed"])
        m["tokens_per_s"].append(meta["tokens_per_s"])
        for k, v in meta["final"].items():
            m["per_seed"].setdefault(k, []).append(v)
    for e in res.values():
        for m in e["models"].values():
            m["accuracy"] = {k: {"mean": round(float(np.mean(v)), 4), "std": round(float(np.std(v)), 4)}
                             for k, v in m["per_seed"].items()}
    for p in sorted(root.glob("*/summary.json")):          # experiments without weights (sparda)
        summ = json.loads(p.read_text())
        res[p.parent.name] = {k: summ[k] for k in ("command", "machine", "accuracy", "eval")}
    Path(out or root / "results.json").write_text(json.dumps(res, indent=1, sort_keys=True) + "\n")
    return res


# ------------------------------------------------------------------------------------------------- command line
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="hybrid-lab train", description=__doc__.split("\n\n")[0])
    ap.add_argument("experiment", choices=sorted(EXPERIMENTS) + ["dsa", "sparda", "all"],
                    help="dsa: the lightning indexers on the trained dense model; sparda: InfLLM-V2 block selection "
                         "and decode traces on it (both numpy, CPU; after retrieval)")
    ap.add_argument("--quick", action="store_true", help="a reduced config for a CPU in minutes (one seed)")
    ap.add_argument("--models", nargs="+", help="train only these models of the experiment")
    ap.add_argument("--out", help="where checkpoints go (default: the package's checkpoints/; --quick: ./trained_quick)")
    ap.add_argument("--jobs", type=int, default=1, help="parallel training processes (a GPU holds many)")
    ap.add_argument("--device", default="auto", help="cuda, cpu or auto")
    ap.add_argument("--steps", type=int, help="override the number of steps (a different budget: not the stored one)")
    ap.add_argument("--seeds", type=int, nargs="+", help="override the training seeds (default 0 1 2)")
    a = ap.parse_args(argv)
    names = sorted(EXPERIMENTS) if a.experiment == "all" else [] if a.experiment in ("dsa", "sparda") \
        else [a.experiment]
    for n in names:
        bad = [m for m in (a.models or []) if m not in EXPERIMENTS[n].models]
        if bad and a.experiment != "all":
            raise ValueError(f"--models: {bad[0]!r} is not a model of {n!r} ({', '.join(EXPERIMENTS[n].models)})")
    out = Path(a.out) if a.out else (Path("trained_quick") if a.quick else CHECKPOINTS)
    argv = sys.argv[1:] if argv is None else list(argv)
    shown = [x for i, x in enumerate(argv) if x != "--out" and (i == 0 or argv[i - 1] != "--out")]
    command = "hybrid-lab train " + " ".join(shown)          # where it wrote is not part of what it computed
    plan = []
    for n in names:
        exp = EXPERIMENTS[n]
        models = [m for m in (a.models or exp.models) if m in exp.models]
        if a.quick:
            exp = quick(exp, models)
        if a.steps:
            exp = dataclasses.replace(exp, steps=a.steps)
        if a.seeds:
            exp = dataclasses.replace(exp, seeds=tuple(a.seeds))
        if models:
            plan.append((exp, models))
    if plan:
        run_jobs(plan, out, a.jobs, a.device, command)
    if a.experiment in ("dsa", "all") and not a.models:
        from hybrid_lab.trained import dsa
        dsa.run_experiment(out, seeds=tuple(a.seeds or (0,) if a.quick else a.seeds or (0, 1, 2)), quick=a.quick,
                           command=command)
        aggregate(out)
    if a.experiment in ("sparda", "all") and not a.models:
        from hybrid_lab.trained import sparda
        sparda.run_experiment(out, seeds=tuple(a.seeds or (0,) if a.quick else a.seeds or (0, 1, 2)), quick=a.quick,
                              n_eval=8 if a.quick else 64, command=command)
        aggregate(out)
    print(f"checkpoints and results.json under {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
