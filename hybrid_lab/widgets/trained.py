"""Plots and the explorer of notebook 10 (trained models). Every plot is a pure function of the stored results, of
checkpoint metas, or of a numpy model's own outputs, returning a matplotlib Figure (tests read the drawn artists
back); the explorer is a thin ipywidgets wrapper around them.

- :func:`plot_mqar` accuracy vs number of pairs (results.json's ``mqar`` experiment), mean ± std over seeds.
- :func:`plot_retrieval` needle accuracy per distance bucket and local-copy accuracy, one group of bars per model.
- :func:`plot_curves` learning curves (held-out accuracy vs training step) from checkpoint metas.
- :func:`selection_map` / :func:`plot_selection` which positions a trained HySparse2's sparse layers read, query by
  query, beside the full-attention probabilities they were chosen from.
- :func:`plot_needles` per-needle correctness (probability of the right value) of any model's logits.
- :func:`explore` the explorer: model, seed, number of needles, example.
"""
from __future__ import annotations

import base64
import io
import time
import traceback
from pathlib import Path

import numpy as np

from hybrid_lab.core import checks
from hybrid_lab.models.hysparse2 import HySparse2
from hybrid_lab.trained import families as fam
from hybrid_lab.trained import tasks, train
from hybrid_lab.widgets.static import with_picture

__all__ = ["BUCKET_SETTINGS", "RETRIEVAL_SETTINGS", "swa_reach", "plot_mqar", "plot_retrieval", "plot_curves",
           "selection_map", "plot_selection", "plot_needles", "bucket_accuracy", "png_output", "explorer", "explore"]

BUCKET_SETTINGS = tuple(f"needle d={lo}-{hi}" for lo, hi in train.DIST_BUCKETS)
RETRIEVAL_SETTINGS = BUCKET_SETTINGS + ("local",)
N_EXAMPLES = 16                     # sequences per explorer setting (numpy inference on a CPU: a fraction of a second)


def _plt():
    import matplotlib.pyplot as plt  # the backend is the caller's choice (inline in Jupyter, Agg headless)

    return plt


def _experiment(res, exp: str) -> dict:
    """res[exp] of a results.json dict, checked to hold models with accuracies."""
    if not isinstance(res, dict):
        raise ValueError(f"res must be the dict of results.json (report.load_results()), got {type(res).__name__}")
    e = res.get(exp)
    if not isinstance(e, dict) or not isinstance(e.get("models"), dict) or not e["models"]:
        raise ValueError(f"res has no experiment {exp!r} with trained models (has {sorted(res)})")
    for m, info in e["models"].items():
        if not isinstance(info, dict) or not isinstance(info.get("accuracy"), dict):
            raise ValueError(f"res[{exp!r}]['models'][{m!r}] lacks its 'accuracy' dict")
    return e


def _ordered(exp: str, names) -> list:
    """Model names in the experiment's order (train.EXPERIMENTS), unknown names after, as given."""
    known = train.EXPERIMENTS[exp].models if exp in train.EXPERIMENTS else ()
    names = list(names)
    return [m for m in known if m in names] + [m for m in names if m not in known]


def _mean_std(info: dict, setting: str) -> tuple:
    a = info["accuracy"].get(setting)
    return (np.nan, np.nan) if a is None else (float(a["mean"]), float(a["std"]))


# ------------------------------------------------------------------------------------------------ results plots
def plot_mqar(res: dict, exp: str = "mqar"):
    """Accuracy vs number of key-value pairs, one line per model (mean over seeds, std as error bars).

    res: the results.json dict (``report.load_results()``); its ``exp`` experiment's settings ``"pairs=N"`` give the
    x values (N, log2 axis, sorted) and each model's ``accuracy[setting]["mean"]`` / ``["std"]`` the y values and
    error bars (NaN where a model lacks a setting). Lines in ``train.EXPERIMENTS[exp]`` model order, labelled with
    the results' ``label``. Returns a Figure.
    """
    e = _experiment(res, exp)
    pairs = sorted({int(s.split("=", 1)[1]) for info in e["models"].values() for s in info["accuracy"]
                    if s.startswith("pairs=") and s.split("=", 1)[1].isdigit()})
    if not pairs:
        raise ValueError(f"res[{exp!r}] has no 'pairs=N' settings: is it an MQAR experiment?")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9.5, 4.2))
    for m in _ordered(exp, e["models"]):
        info = e["models"][m]
        ms = np.array([_mean_std(info, f"pairs={p}") for p in pairs])            # (n_pairs, 2)
        ax.errorbar(pairs, ms[:, 0], yerr=ms[:, 1], marker="o", ms=4, capsize=3, elinewidth=0.8, alpha=0.9,
                    label=info.get("label", m))
    ax.set_xscale("log", base=2)
    ax.set_xticks(pairs)
    ax.set_xticklabels([str(p) for p in pairs])
    ax.set_ylim(-0.02, 1.05)
    ax.set_xlabel("key-value pairs to recall (sequence of 128 tokens)")
    ax.set_ylabel("held-out accuracy (mean ± std over seeds)")
    ax.set_title("Multi-query associative recall: what a fixed-size state can hold")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


def swa_reach(model: str = "swa") -> int:
    """How far back a stack of sliding-window layers can carry information: n_swa_layers x (window - 1) positions
    (each layer sees ``window`` positions, itself included). model: a key of ``families.SPECS`` of the stack family."""
    if model not in fam.SPECS or fam.SPECS[model].family != "stack":
        raise ValueError(f"model must be a stack model of families.SPECS, got {model!r}")
    cfg = fam.make_config(fam.SPECS[model], tasks.VOCAB, fam.SPECS[model].d_ff)
    return sum(1 for k in cfg.layers if k == "swa") * (cfg.window - 1)


def plot_retrieval(res: dict, models=None, exp: str = "retrieval"):
    """Grouped bars: per model, needle accuracy in each distance bucket (``BUCKET_SETTINGS``) and local-copy accuracy
    (``"local"``), mean over seeds with std error bars.

    res: the results.json dict; models: names in ``res[exp]["models"]`` (None: all, in ``train.EXPERIMENTS`` order).
    Bars are drawn setting by setting (all models' bars of ``RETRIEVAL_SETTINGS[0]``, then of the next, ...); bar i
    of setting j stands at x = i + offset_j, height = the stored mean (NaN: not drawn, height 0). A note gives the
    SWA-only stack's reach (:func:`swa_reach`). Returns a Figure.
    """
    e = _experiment(res, exp)
    if models is None:
        models = _ordered(exp, e["models"])
    else:
        if isinstance(models, str) or not hasattr(models, "__iter__"):
            raise ValueError(f"models must be a list of model names, got {models!r}")
        models = list(models)
        bad = [m for m in models if m not in e["models"]]
        if not models or bad:
            raise ValueError(f"models must be a non-empty list of models of res[{exp!r}] "
                             f"({', '.join(e['models'])}), got {models!r}")
    plt = _plt()
    n, k = len(models), len(RETRIEVAL_SETTINGS)
    width = 0.8 / k
    fig, ax = plt.subplots(figsize=(max(7.0, 1.0 * n + 3), 4.4))
    colors = ["#c6dbef", "#6baed6", "#08519c", "#74c476"]
    x = np.arange(n)
    for j, s in enumerate(RETRIEVAL_SETTINGS):
        ms = np.array([_mean_std(e["models"][m], s) for m in models])
        ax.bar(x + (j - (k - 1) / 2) * width, np.nan_to_num(ms[:, 0]), width, yerr=np.nan_to_num(ms[:, 1]),
               capsize=2, color=colors[j % len(colors)], label=s.replace("needle d=", "needle, distance "),
               error_kw={"lw": 0.8})
    ax.set_xticks(x)
    ax.set_xticklabels(models, rotation=25, ha="right", fontsize=8)
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("held-out accuracy (mean ± std over seeds)")
    ax.set_title("Needles by distance to their query, and local copies")
    if "swa" in fam.SPECS and fam.SPECS["swa"].family == "stack":
        cfg = fam.make_config(fam.SPECS["swa"], tasks.VOCAB, fam.SPECS["swa"].d_ff)
        n_swa = sum(1 for kind in cfg.layers if kind == "swa")
        fig.text(0.01, 0.01, f"swa (the control): {n_swa} SWA layers x (window {cfg.window} - 1) reach "
                f"{swa_reach('swa')} positions back; a needle farther away is out of its sight",
                fontsize=7, va="bottom")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


def plot_curves(metas, setting: str):
    """Learning curves: held-out accuracy on ``setting`` vs training step, one line per checkpoint meta (a (model,
    seed)); one colour per model, one legend entry per model.

    metas: non-empty list of checkpoint meta dicts (``load_checkpoint(...)[1]`` or the seedK.json files) with
    ``model``, ``seed`` and ``log`` {"eval_step": (n,) steps, "eval": n dicts setting -> accuracy}. Line i is
    (eval_step, [eval[t].get(setting, NaN)]) of metas[i]. Returns a Figure.
    """
    if isinstance(metas, dict) or not isinstance(metas, (list, tuple)) or not metas:
        raise ValueError("metas must be a non-empty list of checkpoint meta dicts")
    for i, m in enumerate(metas):
        log = m.get("log") if isinstance(m, dict) else None
        if not isinstance(log, dict) or "eval_step" not in log or "eval" not in log or "model" not in m:
            raise ValueError(f"metas[{i}] must be a checkpoint meta with 'model' and log.eval_step / log.eval")
        if len(log["eval_step"]) != len(log["eval"]):
            raise ValueError(f"metas[{i}]: log.eval_step and log.eval differ in length")
    if not isinstance(setting, str) or not any(setting in ev for m in metas for ev in m["log"]["eval"]):
        have = sorted({s for m in metas for ev in m["log"]["eval"] for s in ev})
        raise ValueError(f"setting must be one of the evaluated settings {have}, got {setting!r}")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9.5, 4))
    models = list(dict.fromkeys(m["model"] for m in metas))
    cmap = plt.get_cmap("tab10")
    color = {name: cmap(i % 10) for i, name in enumerate(models)}
    seen = set()
    for m in metas:
        log = m["log"]
        y = [float(ev.get(setting, np.nan)) for ev in log["eval"]]
        label = m.get("label", m["model"]) if m["model"] not in seen else None
        seen.add(m["model"])
        ax.plot(log["eval_step"], y, color=color[m["model"]], marker="o", ms=2.5, lw=1.2, alpha=0.85,
                label=label)
    ax.set_ylim(-0.02, 1.05)
    ax.set_xlabel("training step")
    ax.set_ylabel(f"held-out accuracy: {setting}")
    ax.set_title(f"Learning curves ({setting}); one line per training seed")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------------------------ selection
def selection_map(model, tokens, group: int = 0, head: int = 0) -> dict:
    """What a numpy HySparse2's sparse layers read, at every query position of a full prefill.

    model: a ``HySparse2`` (any config); tokens: (T,) ints in [0, vocab). Runs ``prefill(tokens, early_exit=False,
    details=...)`` and returns {"selected": (T, S=T) bool, True where cross group ``group``'s SA layers read key s
    at query t (KV head ``head``: the forced window and the top-k); "scores": (T, T) that group FA's attention
    probability of key s at query t, averaged over the KV head's query heads (what the top-k ranks; rows sum to
    <= 1, the rest goes to the sink); "logits": (T, vocab) the model's output at every position}.
    """
    if not isinstance(model, HySparse2):
        raise ValueError(f"model must be a numpy HySparse2 (the selection exists only there), got "
                         f"{type(model).__name__}")
    cfg = model.cfg
    tokens = checks.tokens("tokens", tokens, cfg.vocab)
    group = checks.int_in("group", group, 0, cfg.n_groups)
    head = checks.int_in("head", head, 0, cfg.n_heads_kv)
    d = {}
    logits, _ = model.prefill(tokens, early_exit=False, details=d)
    T = len(tokens)
    idx = np.asarray(d["idx"][group])[:, head, :]                              # (T, K), -1 padded
    sel = np.zeros((T, T), bool)
    rows = np.broadcast_to(np.arange(T)[:, None], idx.shape)
    ok = idx >= 0
    sel[rows[ok], idx[ok]] = True
    scores = np.asarray(d["scores"][group])[:, head, :] / (cfg.n_heads_q // cfg.n_heads_kv)
    return {"selected": sel, "scores": scores, "logits": logits}


def _batch_row(batch, row) -> int:
    if not isinstance(batch, tasks.Batch):
        raise ValueError(f"batch must be a tasks.Batch, got {type(batch).__name__}")
    return checks.int_in("row", row, 0, len(batch.tokens))


def _answers(batch, row, logits_row):
    """(positions, kind, dist, target, correct) of the answers of one row; logits_row (T, vocab)."""
    pos = np.nonzero(batch.targets[row] >= 0)[0]
    tgt = batch.targets[row, pos]
    return pos, batch.kind[row, pos], batch.dist[row, pos], tgt, logits_row[pos].argmax(-1) == tgt


def plot_selection(model, batch, row: int = 0, title: str = ""):
    """One sequence's selection map (:func:`selection_map`, group 0, KV head 0) and a zoom on its answers.

    Left: image of the (T, T) ``selected`` map (query position down, key position across; selected = dark, the
    image array is ``selected`` as 0/1, half transparent) over the FA probabilities (reds, square-root scale); answer
    rows shaded; each needle answer's evidence (query position - dist: the needle's key) marked with an x.
    Right: only the answer rows, labelled with position, distance and right (✓) / wrong (✗).
    model: a numpy HySparse2; batch: a ``tasks.Batch`` with tokens in the model's vocabulary; row: which sequence.
    Returns a Figure; its suptitle says how many answers the model got right.
    """
    row = _batch_row(batch, row)
    if not isinstance(model, HySparse2):
        raise ValueError(f"model must be a numpy HySparse2, got {type(model).__name__}")
    checks.int_array("batch.tokens", batch.tokens[row], lo=0, hi=model.cfg.vocab)   # named as the caller gave it
    m = selection_map(model, batch.tokens[row])
    sel, sc = m["selected"], m["scores"]
    T = sel.shape[0]
    pos, kind, dist, _, ok = _answers(batch, row, m["logits"])
    plt = _plt()
    from matplotlib.colors import ListedColormap, PowerNorm

    dark = ListedColormap([(0, 0, 0, 0), (0.1, 0.1, 0.3, 0.55)])       # 0 transparent, 1 dark (probability shows)
    norm = PowerNorm(0.5, vmin=0, vmax=max(float(sc.max()), 1e-9))
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 5.6), gridspec_kw={"width_ratios": [1, 1.15]})
    im = a.imshow(sc, cmap="Reds", norm=norm, interpolation="nearest")
    im.set_label("FA probability")
    im = a.imshow(sel.astype(np.int64), cmap=dark, vmin=0, vmax=1, interpolation="nearest")
    im.set_label("selected")
    for p, good in zip(pos, ok):
        a.axhspan(p - 0.5, p + 0.5, color="tab:green" if good else "tab:red", alpha=0.35, lw=0)
    needle = kind == tasks.KIND_NEEDLE
    a.plot(pos[needle] - dist[needle], pos[needle], "x", color="lime", ms=7, mew=1.8, label="needle evidence",
           ls="none")
    a.set_xlim(-0.5, T - 0.5)
    a.set_ylim(T - 0.5, -0.5)
    a.set_xlabel("key position")
    a.set_ylabel("query position")
    a.set_title("selected by the SA layers (dark) over the FA's probabilities (red)", fontsize=9)
    a.legend(fontsize=7, loc="upper right")
    if len(pos):
        im = b.imshow(sc[pos], cmap="Reds", norm=norm, aspect="auto", interpolation="nearest")
        im = b.imshow(sel[pos].astype(np.int64), cmap=dark, vmin=0, vmax=1, aspect="auto", interpolation="nearest")
        r = np.arange(len(pos))
        b.plot((pos - dist)[needle], r[needle], "x", color="lime", ms=9, mew=2, ls="none")
        b.plot(pos, r, ">", color="tab:blue", ms=5, ls="none", label="query position")
        b.set_yticks(r)
        b.set_yticklabels([f"t={p} d={d} {'✓' if g else '✗'}" for p, d, g in zip(pos, dist, ok)], fontsize=7)
        for lab, g in zip(b.get_yticklabels(), ok):
            lab.set_color("tab:green" if g else "tab:red")
        b.set_xlim(-0.5, T - 0.5)
        b.legend(fontsize=7, loc="lower left")
    else:
        b.text(0.5, 0.5, "no answer in this sequence", ha="center", va="center", transform=b.transAxes)
    b.set_xlabel("key position")
    b.set_title("answer rows only (x: where the needle is)", fontsize=9)
    n_ok = int(ok.sum())
    fig.suptitle((title + ": " if title else "") + f"{n_ok}/{len(pos)} answers right (sequence {row}, "
                 f"{int(needle.sum())} needles); window {model.cfg.window} + top-{model.cfg.topk}", fontsize=10)
    fig.tight_layout()
    return fig


def plot_needles(logits, batch, row: int = 0, title: str = ""):
    """Per-needle correctness of one sequence, for a model of any family.

    logits: (B, T, vocab) the model's output on ``batch`` (a ``tasks.Batch``); row: which sequence. One bar per
    needle answer of that row (in position order): height = the model's softmax probability of the right value,
    green when the argmax is right, red when not; tick labels give the distance to the needle. Returns a Figure.
    """
    row = _batch_row(batch, row)
    logits = checks.finite_array("logits", logits, 3, "(B, T, vocab)")
    if logits.shape[:2] != batch.tokens.shape:
        raise ValueError(f"logits must be (B, T, vocab) with (B, T) = {batch.tokens.shape}, got {logits.shape}")
    if logits.shape[2] <= batch.targets.max():
        raise ValueError(f"logits must have a vocab axis above every target (> {int(batch.targets.max())}), got "
                         f"vocab {logits.shape[2]}")
    pos, kind, dist, tgt, ok = _answers(batch, row, logits[row])
    needle = kind == tasks.KIND_NEEDLE
    pos, dist, tgt, ok = pos[needle], dist[needle], tgt[needle], ok[needle]
    lg = logits[row, pos].astype(np.float64)
    p = np.exp(lg - lg.max(-1, keepdims=True))
    p = (p / p.sum(-1, keepdims=True))[np.arange(len(pos)), tgt]
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.bar(np.arange(len(pos)), p, 0.6, color=["tab:green" if g else "tab:red" for g in ok])
    ax.set_xticks(np.arange(len(pos)))
    ax.set_xticklabels([f"needle at t={q - d}\nquery t={q}\ndistance {d}" for q, d in zip(pos, dist)], fontsize=7)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("p(right value)")
    ax.set_title((title + ": " if title else "") + f"{int(ok.sum())}/{len(pos)} needles right (sequence {row}); "
                 "green = argmax right", fontsize=9)
    fig.tight_layout()
    return fig


def bucket_accuracy(logits, batch) -> dict:
    """Needle accuracy of ``logits`` (B, T, vocab) on ``batch``: {"needle": (acc, n), "needle d=lo-hi": (acc, n) per
    ``train.DIST_BUCKETS``} (acc NaN where n = 0). Checked by :func:`tasks.accuracy`: logits finite floats of shape
    (B, T, vocab) with vocab above every target, batch a ``tasks.Batch``."""
    out = {"needle": tasks.accuracy(logits, batch, tasks.KIND_NEEDLE)}
    for (lo, hi), name in zip(train.DIST_BUCKETS, BUCKET_SETTINGS):
        out[name] = tasks.accuracy(logits, batch, tasks.KIND_NEEDLE, (lo, hi))
    return out


# ------------------------------------------------------------------------------------------------ explorer
def png_output(fig) -> dict:
    """A Figure as a Jupyter display_data output (PNG) for an Output widget's ``outputs``."""
    if not callable(getattr(fig, "savefig", None)):
        raise ValueError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight", dpi=80)
    return {"output_type": "display_data", "metadata": {},
            "data": {"image/png": base64.b64encode(buf.getvalue()).decode("ascii"), "text/plain": repr(fig)}}


def explorer(draw, controls: dict):
    """An explorer: ``controls`` (argument name -> ipywidgets control) above one Output widget that shows what
    ``draw(**values)`` returns, ``(text, Figure)``, redrawn when a control moves. The Output's ``outputs`` are
    replaced as a whole (a text, then the PNG); an exception is shown in the widget, never swallowed. Returns a
    VBox whose ``redraw_seconds`` lists each redraw's wall time."""
    import ipywidgets as W

    if not callable(draw) or not isinstance(controls, dict) or not controls:
        raise ValueError(f"draw must be callable and controls a non-empty dict of widgets, got "
                         f"{type(draw).__name__} and {type(controls).__name__}")
    out = W.Output()
    timings: list = []

    def redraw(_change=None):
        plt = _plt()
        t0 = time.perf_counter()
        try:
            text, fig = draw(**{name: c.value for name, c in controls.items()})
            try:
                shown = [{"output_type": "stream", "name": "stdout", "text": text}, png_output(fig)]
            finally:
                plt.close(fig)
        except Exception:  # shown in the widget: a control must not fail silently
            shown = [{"output_type": "stream", "name": "stderr", "text": traceback.format_exc()}]
        out.outputs = tuple(shown)
        timings.append(time.perf_counter() - t0)

    for c in controls.values():
        c.observe(redraw, names="value")
    redraw()
    box = W.VBox([W.VBox(list(controls.values())), out])
    box.redraw_seconds = timings
    return box


@with_picture
def explore(root=None):
    """Explorer of the trained retrieval models: model, seed, number of needles, example.

    root: the checkpoints folder (default ``train.CHECKPOINTS``; must hold ``retrieval/MODEL/seedK.npz``). On a
    change it loads the checkpoint (models cached by (model, seed)), makes ``tasks.needles(16, 128, n,
    seed=tasks.EVAL_SEED + 500 + n)``, computes the numpy logits of the 16 sequences (cached by (model, seed, n)),
    prints the accuracy on them (all needles and per distance bucket) and draws, for HySparse2 models,
    :func:`plot_selection` of the chosen example, for the others :func:`plot_needles`.

    Each redraw replaces the Output widget's ``outputs`` as a whole (one message; no ``with out:`` capture, whose
    placement depends on the browser's capture hooks, see ``widgets/hysparse.py``). Returns a VBox
    ``[VBox(controls), Output]``; ``.redraw_seconds`` (a list) holds each redraw's wall time.
    """
    import ipywidgets as W

    root = Path(train.CHECKPOINTS if root is None else root)
    exp = train.EXPERIMENTS["retrieval"]
    have = [m for m in exp.models if any((root / "retrieval" / m).glob("seed*.npz"))]
    if not have:
        raise ValueError(f"root must hold retrieval checkpoints (retrieval/MODEL/seedK.npz), none under {root}")
    models, results, batches = {}, {}, {}

    def load(name, seed):
        if (name, seed) not in models:
            models[name, seed] = train.load_checkpoint(root / "retrieval" / name / f"seed{seed}")
        return models[name, seed]

    def draw(model, seed, needles, example):
        net, _ = load(model, seed)
        if needles not in batches:
            batches[needles] = tasks.needles(N_EXAMPLES, exp.seq_len, needles, seed=tasks.EVAL_SEED + 500 + needles)
        batch = batches[needles]
        if (model, seed, needles) not in results:
            results[model, seed, needles] = fam.numpy_logits(net, batch.tokens)
        logits = results[model, seed, needles]
        acc = bucket_accuracy(logits, batch)
        text = (f"{model} (seed {seed}), {N_EXAMPLES} held-out sequences with {needles} needle(s): needle accuracy "
                f"{acc['needle'][0]:.2f} ({acc['needle'][1]} answers)\n" +
                "".join(f"  {name}: " + (f"{a:.2f}" if n else " n/a") + f"  ({n} answers)\n"
                        for name, (a, n) in acc.items() if name != "needle"))
        if isinstance(net, HySparse2):
            return text, plot_selection(net, batch, example, title=model)
        return text, plot_needles(logits, batch, example, title=model)

    controls = {
        "model": W.Dropdown(options=have, value="hysparse2" if "hysparse2" in have else have[0], description="model"),
        "seed": W.Dropdown(options=[0, 1, 2], value=0, description="seed"),
        "needles": W.IntSlider(value=2, min=1, max=4, description="needles"),
        "example": W.IntSlider(value=0, min=0, max=N_EXAMPLES - 1, description="example"),
    }
    return explorer(draw, controls)
