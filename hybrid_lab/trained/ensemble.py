"""Many trainings of one model at once: every (seed, learning rate) of an experiment as one vmapped ensemble.

The lab's models are tiny (~120 K parameters): one training leaves a GPU almost idle, and many small processes only
time-slice it. Here K members (each its own initial weights, data stream and learning rate) are stacked along a new
leading axis and trained by ONE process with ``torch.func.vmap``: the same maths as K separate trainings, in big
kernels. Each member keeps its own optimizer state and its own gradient clipping, so no number of one member ever
depends on another.

Reproducible by construction: deterministic algorithms (``torch.use_deterministic_algorithms``, cuBLAS workspace
config, no TF32), a fixed member order and a fixed reduction order. The same command on the same machine, torch and
CUDA versions gives bit-identical weights; :func:`versions` records what a result depends on.

    members = [(seed, lr), ...]              # the data stream is seed's: tasks seed * 100000 + step
    out = train_ensemble(cfgs, members, schedule, make_batch, evals, device)
    out["weights"][k], out["log"][k], out["eval"][k]  # member k: fp16-rounded weights, curves, final accuracies

AdamW (betas 0.9 / 0.95, eps 1e-8, decoupled weight decay on matrices only) and global-norm clipping at 1.0 are
written out below, per member, exactly as ``torch.optim.AdamW`` and ``clip_grad_norm_`` compute them.
"""
from __future__ import annotations

import hashlib
import os
import platform
import time
from pathlib import Path

import numpy as np

from hybrid_lab.trained import families as fam

__all__ = ["train_ensemble", "deterministic", "versions", "code_version", "TRAINING_SOURCES"]

# The files whose code decides a training's numbers (data, models, twins, optimizer, loop). Their hash, with
# docstrings and comments stripped, is stored with every checkpoint; a test fails when the code changed since.
TRAINING_SOURCES = ("trained/ensemble.py", "trained/train.py", "trained/tasks.py", "trained/families.py",
                    "trained/torch_blocks.py", "trained/torch_stack.py", "trained/torch_hysparse.py",
                    "trained/torch_hysparse2.py", "models/stack.py", "models/hysparse.py", "models/hysparse2.py",
                    "core/blocks.py")
# Top-level names left out: the command line, the aggregation, the quick config and the tables of experiments and
# specs (each training hashes its OWN experiment and specs instead, so adding a model retrains nothing else).
NOT_TRAINING = {"trained/ensemble.py": {"_strip", "_canon", "code_version", "versions"},
                "trained/train.py": {"quick", "main", "aggregate", "verify", "run_jobs", "run_experiment", "_job",
                                     "_fmt", "list_checkpoints", "EXPERIMENTS", "MQAR_MODELS", "MQAR_PAIRS"},
                "trained/families.py": {"SPECS"}}


def _strip(tree, drop=()):
    import ast

    tree.body = [n for n in tree.body
                 if not (isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name in drop)
                 and not (isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id in set(drop) | {"__all__"}
                                                            for t in n.targets))]
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    return tree


def _canon(node) -> str:
    """ast.dump without the fields a Python version leaves empty (3.12 added ``type_params``; 3.13 drops empty
    fields from dump): the same text for the same code on Python 3.10-3.13."""
    import ast

    if isinstance(node, ast.AST):
        fields = [f"{f}={_canon(v)}" for f in node._fields
                  if (v := getattr(node, f, None)) is not None and v != []]
        return f"{type(node).__name__}({','.join(fields)})"
    if isinstance(node, list):
        return "[" + ",".join(_canon(x) for x in node) + "]"
    return repr(node)


def code_version(extra: str = "", root=None) -> str:
    """sha256 (16 hex digits) of TRAINING_SOURCES as parsed Python (docstrings, comments and the NOT_TRAINING names
    dropped) and ``extra`` (the experiment and model specs a training used): a comment or docstring edit keeps it,
    any change to code a training runs changes it."""
    import ast

    if not isinstance(extra, str):
        raise ValueError(f"extra must be a str (the experiment and specs, train.training_text), got "
                         f"{type(extra).__name__}")
    if root is not None and not isinstance(root, (str, os.PathLike)):
        raise ValueError(f"root must be None or the package folder (a path), got {type(root).__name__}")
    root = Path(root) if root is not None else Path(__file__).resolve().parents[1]
    missing = [rel for rel in TRAINING_SOURCES if not (root / rel).is_file()]
    if missing:
        raise ValueError(f"root must be the hybrid_lab package folder holding {missing[0]}, got {root}")
    h = hashlib.sha256()
    for rel in TRAINING_SOURCES:
        tree = _strip(ast.parse((root / rel).read_text()), NOT_TRAINING.get(rel, ()))
        h.update(rel.encode() + b"\0" + _canon(tree).encode() + b"\0")
    h.update(extra.encode())
    return h.hexdigest()[:16]


def deterministic(torch) -> None:
    """Deterministic kernels everywhere (raises on an op that has none), no TF32, cuDNN without autotuning."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")     # read by cuBLAS at its first call
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def versions(torch, dev: str, extra: str = "") -> dict:
    """What a trained number depends on: machine, library versions, :func:`code_version` (of ``extra`` too)."""
    out = {"python": platform.python_version(), "numpy": np.__version__, "torch": torch.__version__,
           "code_version": code_version(extra)}
    if dev == "cuda":
        out.update(device=torch.cuda.get_device_name(0), cuda=torch.version.cuda,
                   cudnn=torch.backends.cudnn.version())
    else:
        out.update(device=f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)",
                   threads=torch.get_num_threads())
    return out


def _stacked(torch, cfgs, dev):
    """The twins of cfgs (each initialised from its own seed by its numpy model), their parameters stacked on a new
    axis 0, and one weightless copy to call functionally."""
    from torch.func import stack_module_state

    from hybrid_lab.trained.torch_blocks import param_key

    nets = [fam.torch_model(c) for c in cfgs]
    for net in nets[1:]:
        if net.names != nets[0].names or any(net.w(n).shape != nets[0].w(n).shape for n in net.names):
            raise ValueError("cfgs must all be configs of one architecture (the same weight names and shapes)")
    stacked, _ = stack_module_state(nets)
    keys = {n: "params." + param_key(n) for n in nets[0].names}        # numpy name -> functional_call key
    params = {keys[n]: stacked[keys[n]].detach().to(dev) for n in nets[0].names}
    base = nets[0].to("meta")
    base.check_values = False
    return base, params, keys


def train_ensemble(cfgs, members, schedule, make_batch, evals, device="cpu", eval_every=250, curve_sets=None,
                   weight_decay=0.1, clip=1.0, progress=None, version_of: str = "") -> dict:
    """Train len(members) models of one architecture together.

    cfgs: one model config per member, equal but for ``seed`` (each ``cfg.seed`` sets its initial weights). Only the
    weight names and shapes are checked: the forward of every member is ``cfgs[0]``'s, so configs that differ in
    anything else (a window, a RoPE width) would silently train as ``cfgs[0]`` (``train.train_model`` builds them
    from one spec; a check here is for the next retraining, since it changes the hashed code);
    members: [(seed, lr)] (seed: the member's data stream; lr: its peak learning rate);
    schedule(step) -> the learning-rate factor at ``step`` (the peak lr times it); ``len(schedule)`` steps;
    make_batch(seed, step) -> (tokens (B, T), targets (B, T)) int64 numpy arrays, targets -1 where not scored;
    evals(logits_fn) -> [per member {setting: accuracy}] for ``logits_fn(tokens (b, T)) -> (K, b, T, V)`` (every
    member's logits on the same tokens; called for the final weights, rounded to fp16 as they are stored);
    curve_sets: the same for the learning curves (every ``eval_every`` steps), default ``evals``.
    Returns {"weights": [per member {numpy name: float32 array}], "log": [per member {"step", "loss", "eval_step",
    "eval"}], "final": [per member {setting: accuracy}], "seconds": wall time of the training loop,
    "versions": :func:`versions` (``version_of``: the text of the experiment and specs, hashed with the code)}.
    """
    import torch
    from torch.func import functional_call, grad_and_value, vmap

    dev = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
    deterministic(torch)
    K = len(members)
    if K == 0 or len(cfgs) != K:
        raise ValueError(f"members must be a non-empty list with one config per member, got {K} members and "
                         f"{len(cfgs)} configs")
    base, params, keys = _stacked(torch, cfgs, dev)
    names = list(params)
    decay = {n for n in names if params[n].ndim >= 3}              # matrices (ndim >= 2 per member) decay
    m1 = {n: torch.zeros_like(p) for n, p in params.items()}
    m2 = {n: torch.zeros_like(p) for n, p in params.items()}
    peak = torch.tensor([lr for _, lr in members], dtype=torch.float32, device=dev)
    seeds = [s for s, _ in members]
    distinct = sorted(set(seeds))
    where = torch.tensor([distinct.index(s) for s in seeds], device=dev)
    b1, b2, eps = 0.9, 0.95, 1e-8

    def loss_fn(p, x, y):
        logits = functional_call(base, p, (x,))
        logp = torch.log_softmax(logits, dim=-1)
        ok = y >= 0
        pick = torch.gather(logp, -1, torch.where(ok, y, 0)[..., None])[..., 0]
        return -(pick * ok).sum() / ok.sum()

    step_grad = vmap(grad_and_value(loss_fn))

    def all_logits(p):
        """logits of every member on the same tokens: (K, b, T, V) numpy (one vmapped forward)."""
        fwd = vmap(lambda pk, tok: functional_call(base, pk, (tok,)), in_dims=(0, None))

        def fn(tok):
            with torch.no_grad():
                return fwd(p, torch.as_tensor(tok, device=dev)).float().cpu().numpy()
        return fn

    lr_now = torch.zeros(K, device=dev)                            # peak lr x schedule, per member
    bc1 = torch.ones((), device=dev)                                # AdamW's bias corrections at this step
    bc2s = torch.ones((), device=dev)

    def update(x, y):
        """One step of every member: gradients (vmapped), per-member clipping, AdamW in place. Returns the losses."""
        grads, loss = step_grad(params, x, y)
        sq = sum((grads[n].reshape(K, -1).double() ** 2).sum(1) for n in names)   # (K,) fixed order, float64
        scale = torch.clamp(clip / (sq.sqrt() + 1e-6), max=1.0).float()          # clip_grad_norm_ per member
        for n in names:
            shape = (K,) + (1,) * (params[n].ndim - 1)
            g = grads[n] * scale.view(shape)
            m1[n].mul_(b1).add_(g, alpha=1 - b1)
            m2[n].mul_(b2).addcmul_(g, g, value=1 - b2)
            lrk = lr_now.view(shape)
            if n in decay:
                params[n].mul_(1 - lrk * weight_decay)
            params[n].sub_(lrk / bc1 * m1[n] / (m2[n].sqrt() / bc2s + eps))   # AdamW's step, per member
        return loss

    x0, y0 = (torch.as_tensor(np.stack(a), device=dev)[where] for a in zip(*(make_batch(s, 0) for s in distinct)))
    static_x, static_y, step_fn, mode = x0.clone(), y0.clone(), update, "eager"
    if dev == "cuda" and os.environ.get("HYBRID_LAB_CUDA_GRAPHS", "1") != "0":
        # tiny models are launch-bound: capture the whole step once, replay it. Warm-up runs only the gradients
        # (nothing is updated), capture records without running, so replay 1 is step 0.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                step_grad(params, static_x, static_y)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_loss = update(static_x, static_y)
        torch.cuda.synchronize()

        def step_fn(x, y):
            static_x.copy_(x)
            static_y.copy_(y)
            graph.replay()
            return static_loss
        mode = "CUDA graph"

    log = [{"step": [], "loss": [], "eval_step": [], "eval": []} for _ in range(K)]
    steps = len(schedule)
    t0 = time.perf_counter()
    for step in range(steps):
        xs, ys = zip(*(make_batch(s, step) for s in distinct))
        x = torch.as_tensor(np.stack(xs), device=dev)[where]      # (K, B, T): each member its seed's batch
        y = torch.as_tensor(np.stack(ys), device=dev)[where]
        t = step + 1
        lr_now.copy_(peak * float(schedule(step)))
        bc1.fill_(1 - b1 ** t)
        bc2s.fill_((1 - b2 ** t) ** 0.5)
        loss = step_fn(x, y)
        if step % 10 == 0 or step == steps - 1:
            lv = loss.detach().cpu().numpy()
            for k in range(K):
                log[k]["step"].append(step)
                log[k]["loss"].append(round(float(lv[k]), 5))
        if (step + 1) % eval_every == 0 or step == steps - 1:
            for k, acc in enumerate((curve_sets or evals)(all_logits(params))):
                log[k]["eval_step"].append(step + 1)
                log[k]["eval"].append({s: round(v, 4) for s, v in acc.items()})
        if progress is not None:
            progress(step)
    if dev == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    p16 = {n: v.half().float() for n, v in params.items()}          # what is stored is what is scored
    final = evals(all_logits(p16))
    weights = [{name: p16[key][k].cpu().numpy().copy() for name, key in keys.items()} for k in range(K)]
    return {"weights": weights, "log": log, "final": final, "seconds": seconds, "step_mode": mode,
            "versions": versions(torch, dev, version_of)}

