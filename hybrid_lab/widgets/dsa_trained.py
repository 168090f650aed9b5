"""Plots and the explorer of notebook 11 (DeepSeek's lightning indexer on a trained model's real attention).

Every plot is a pure function of the stored results (``results.json``'s ``dsa`` experiment, model ``indexer``) or of
a numpy model's own outputs, returning a matplotlib Figure (tests read the drawn artists back); the explorer is a
thin ipywidgets wrapper around them.

- :func:`plot_accuracy_vs_k` needle (or local-copy) accuracy when every layer reads only k keys, per selector.
- :func:`block_table` the printed table of SparDA's block selection: per k chosen, the blocks a query reads (the init
  and own blocks besides the k) and each selector's accuracy.
- :func:`plot_recall` how much of the oracle top-k each indexer finds, layer by layer.
- :func:`random_model_entropy` / :func:`plot_entropy` how concentrated the trained model's attention is, beside
  notebook 04's random TinyLLM (nearly uniform) and the uniform maximum ln(#visible keys).
- :func:`plot_selection_layers` one query of one sequence: each layer's attention over the keys, the oracle top-k
  and the indexer's top-k.
- :func:`explore` the explorer: selector, k, seed, example (both indexer stages come from the checkpoint:
  ``dsa.load_indexers(path, stage=1 | 2)``).
"""
from __future__ import annotations

import numbers
import re
from pathlib import Path

import numpy as np

from hybrid_lab.core import checks
from hybrid_lab.models.lightning_indexer import LightningIndexer
from hybrid_lab.models.stack import Stack
from hybrid_lab.trained import dsa, store, tasks
from hybrid_lab.widgets.static import with_picture
from hybrid_lab.widgets.trained import explorer

__all__ = ["SELECTOR_COLORS", "BLOCK_SELECTORS", "plot_accuracy_vs_k", "plot_block_accuracy", "block_table",
           "plot_recall", "random_model_entropy", "plot_entropy", "plot_selection_layers", "explore"]

EXP, MODEL = "dsa", "indexer"                  # where results.json keeps the experiment
SELECTOR_COLORS = {"oracle": "black", "indexer stage 1": "tab:cyan", "indexer stage 2": "tab:blue",
                   "untrained indexer": "tab:orange", "random": "tab:red", "dense": "tab:green"}
BLOCK_SELECTORS = {"oracle": "black", "infllm": "tab:orange", "forecast fine": "tab:blue",    # SparDA's selectors
                   "forecast coarse": "tab:cyan"}
RECALL_NAMES = {"stage 1": "indexer stage 1", "stage 2": "indexer stage 2", "untrained": "untrained indexer"}
MIN_VISIBLE = 16                               # entropy over queries that see at least this many keys (as dsa does)
EXPLORE_N, EXPLORE_T = 8, 128                  # the explorer's held-out sequences


def _plt():
    import matplotlib.pyplot as plt  # the backend is the caller's choice (inline in Jupyter, Agg headless)

    return plt


# ------------------------------------------------------------------------------------------------ stored results
def _indexer_info(res) -> dict:
    """res["dsa"]["models"]["indexer"] of a results.json dict, checked to hold its 'accuracy' dict."""
    if not isinstance(res, dict):
        raise ValueError(f"res must be the dict of results.json (report.load_results()), got {type(res).__name__}")
    e = res.get(EXP)
    models = e.get("models") if isinstance(e, dict) else None
    info = models.get(MODEL) if isinstance(models, dict) else None
    if not isinstance(info, dict) or not isinstance(info.get("accuracy"), dict):
        raise ValueError(f"res must hold res[{EXP!r}]['models'][{MODEL!r}]['accuracy'] (run hybrid-lab train dsa), "
                         f"got experiments {sorted(map(str, res))}")
    return info


def _is_real(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_))


def _stat(info: dict, setting: str, hi: float | None = 1.0) -> tuple:
    """(mean, std) of a stored setting; (NaN, NaN) when absent or not measured. Refuses a malformed entry: mean a
    real number in [0, hi] (or NaN), std a real >= 0."""
    a = info["accuracy"].get(setting)
    if a is None:
        return np.nan, np.nan
    if not isinstance(a, dict) or not _is_real(a.get("mean")) or not _is_real(a.get("std")):
        raise ValueError(f"res[{EXP!r}]['models'][{MODEL!r}]['accuracy'][{setting!r}] must be "
                         f"{{'mean': number, 'std': number}}, got {a!r}")
    mean, std = float(a["mean"]), float(a["std"])
    if np.isnan(mean):
        return np.nan, np.nan
    if not np.isfinite(mean) or mean < 0 or (hi is not None and mean > hi) or not np.isfinite(std) or std < 0:
        rng = f"[0, {hi}]" if hi is not None else ">= 0"
        raise ValueError(f"res[{EXP!r}]['models'][{MODEL!r}]['accuracy'][{setting!r}]: mean must be finite in {rng} "
                         f"and std finite >= 0, got mean {mean}, std {std}")
    return mean, std


def _n_seeds(info) -> str:
    seeds = info.get("seeds")
    return f"{len(seeds)} seeds" if isinstance(seeds, (list, tuple)) else "seeds"


def plot_accuracy_vs_k(res: dict, kind: str = "needle"):
    """Accuracy vs k (keys each attention layer reads per query), one line per selector of ``dsa.SELECTORS``.

    res: the results.json dict (``report.load_results()``); its ``dsa`` experiment's ``indexer`` model holds the
    settings ``"<selector> k=<k> <kind>"`` (x: the k present, sorted, log2 axis; y: ``["mean"]``, error bars
    ``["std"]`` over seeds; NaN where a selector lacks a k) and ``"dense <kind>"`` (a horizontal line: every key
    read). kind: "needle" (retrieval from far back) or "local" (copy a recent token). Returns a Figure.
    """
    info = _indexer_info(res)
    if kind not in ("needle", "local"):
        raise ValueError(f"kind must be 'needle' or 'local', got {kind!r}")
    pat = re.compile(rf"^(.+) k=(\d+) {kind}$")
    ks = sorted({int(m[2]) for s in info["accuracy"] for m in [pat.match(s)] if m and m[1] in dsa.SELECTORS})
    if not ks:
        raise ValueError(f"res[{EXP!r}]['models'][{MODEL!r}] has no '<selector> k=K {kind}' settings")
    return _accuracy_figure(info, {n: SELECTOR_COLORS[n] for n in dsa.SELECTORS}, ks, kind, "key",
                            "k: keys each attention layer reads per query (of up to 128)",
                            f"mean ± std over {_n_seeds(info)}", "top-k sparse attention", "the k keys")


def _accuracy_figure(info, colors: dict, ks, kind, unit, xlabel, spread, how, what):
    """Accuracy vs k, one errorbar line per selector of ``colors`` ({name: color}), the dense model as a dashed
    line; shared by :func:`plot_accuracy_vs_k` (keys) and :func:`plot_block_accuracy` (blocks)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9.5, 4.2))
    for name, color in colors.items():
        ms = np.array([_stat(info, f"{name} k={k} {kind}") for k in ks])              # (n_k, 2)
        ax.errorbar(ks, ms[:, 0], yerr=ms[:, 1], marker="o", ms=4, capsize=3, elinewidth=0.8, alpha=0.9,
                    color=color, label=name)
    dense, dense_std = _stat(info, f"dense {kind}")
    if not np.isnan(dense):
        ax.axhline(dense, color=SELECTOR_COLORS["dense"], ls="--", lw=1.2,
                   label=f"dense: every {unit} read ({dense:.2f} ± {dense_std:.2f})")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks)
    ax.set_xticklabels([str(k) for k in ks])
    ax.set_ylim(-0.02, 1.05)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"held-out {kind} accuracy\n({spread})")
    ax.set_title(f"{'Needle retrieval' if kind == 'needle' else 'Local copy'} with {how} in every layer, by who picks "
                 f"{what}", fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


def _sparda_accuracy(res, kind: str) -> dict:
    """res["sparda"]["accuracy"], checked, for a kind "needle" or "local"."""
    if kind not in ("needle", "local"):
        raise ValueError(f"kind must be 'needle' or 'local', got {kind!r}")
    acc = res.get("sparda", {}).get("accuracy") if isinstance(res, dict) else None
    if not isinstance(acc, dict):
        raise ValueError("res must be the results.json dict with a 'sparda' experiment holding 'accuracy' "
                         "(report.load_results(); hybrid-lab train sparda)")
    return acc


def plot_block_accuracy(res: dict, kind: str = "needle"):
    """SparDA's block selection on the trained model: accuracy vs k (top blocks beyond init + local, of 16 blocks of 8
    tokens), one line per selector of ``BLOCK_SELECTORS`` (oracle blocks, InfLLM-V2, the Forecast head trained with
    the fine and the coarse teacher), error bars = std over seeds, and the dense model as a dashed line.

    res: the results.json dict; its ``sparda`` experiment's ``accuracy`` holds ``"<selector> k=<k> <kind>"`` and
    ``"dense <kind>"`` ({"mean", "std"} each). kind: "needle" or "local". Returns a Figure.
    """
    acc = _sparda_accuracy(res, kind)
    info = {"accuracy": acc}
    pat = re.compile(rf"^(.+) k=(\d+) {kind}$")
    ks = sorted({int(m[2]) for s in acc for m in [pat.match(s)] if m and m[1] in BLOCK_SELECTORS})
    if not ks:
        raise ValueError(f"res['sparda']['accuracy'] has no '<selector> k=K {kind}' settings")
    return _accuracy_figure(info, BLOCK_SELECTORS, ks, kind, "block",
                            "k: top blocks each layer reads per query, beyond the init and local blocks (of 16 blocks)",
                            "mean ± std over seeds", "block-sparse attention", "the blocks")


def _count_span(counts) -> str:
    """'6' when every count is 6, '3-6' when they range; counts a non-empty array of ints >= 0."""
    c = checks.int_array("reads[k]", counts, None, "block counts", lo=0).ravel()
    if c.size == 0:
        raise ValueError("reads[k] must hold at least one count (queries of the kind measured)")
    return str(c.min()) if c.min() == c.max() else f"{c.min()}-{c.max()}"


def block_table(res: dict, reads: dict, kind: str = "needle", n_blocks: int = 16) -> str:
    """The printed table of SparDA's block selection on the trained model, one row per k chosen (the k of ``reads``,
    sorted): k, the distinct blocks a query reads (``reads[k]``: counts, e.g. ``sparda.answer_reads``; one number when
    they agree, else their range) of ``n_blocks``, and each selector of ``BLOCK_SELECTORS``'s stored
    ``"<selector> k=<k> <kind>"`` accuracy as mean ± std (``res["sparda"]["accuracy"]``; n/a where absent).
    Returns the lines joined by newlines."""
    acc = _sparda_accuracy(res, kind)
    if not isinstance(reads, dict) or not reads or any(not isinstance(k, numbers.Integral) or isinstance(k, bool)
                                                       or k < 1 for k in reads):
        raise ValueError(f"reads must be a non-empty dict {{k >= 1: block counts}}, got "
                         f"{sorted(map(str, reads)) if isinstance(reads, dict) else type(reads).__name__}")
    n_blocks = checks.pos_int("n_blocks", n_blocks)
    info = {"accuracy": acc}
    head = f"{'k chosen':>8s} {'blocks read':>13s} " + " ".join(f"{s:>15s}" for s in BLOCK_SELECTORS)
    lines = [head + f"   ({kind} accuracy, measured)"]
    for k in sorted(reads):
        span = _count_span(reads[k])
        cells = []
        for name in BLOCK_SELECTORS:
            m, sd = _stat(info, f"{name} k={k} {kind}")
            cells.append(f"{'n/a' if np.isnan(m) else f'{m:.2f} ± {sd:.2f}':>15s}")
        lines.append(f"{k:>8d} {span + f' of {n_blocks}':>13s} " + " ".join(cells))
    return "\n".join(lines)


def plot_recall(res: dict, k: int = 8, seq_len: int = 128):
    """Grouped bars, one group per layer: recall@k (the fraction of the layer's oracle top-k, by attention mass, that
    the indexer's top-k finds) of the indexer after stage 1, after stage 2 and untrained, mean over seeds with std
    error bars.

    res: the results.json dict; settings ``"recall@<k> <stage 1|stage 2|untrained> layer <i>"``. Bars are drawn
    indexer by indexer (all layers of stage 1, then stage 2, then untrained); bar j of indexer n stands at
    x = j + offset_n, height = the stored mean. A dotted line marks what k random visible positions would find on
    average, mean over queries t >= k - 1 of k / (t + 1) for sequences of ``seq_len`` tokens. Returns a Figure.
    """
    info = _indexer_info(res)
    k = checks.pos_int("k", k)
    seq_len = checks.pos_int("seq_len", seq_len)
    if seq_len < k:
        raise ValueError(f"seq_len must be >= k={k}, got {seq_len}")
    checks.output_size("seq_len (the chance line averages over its seq_len - k + 1 queries)", (seq_len - k + 1,))
    pat = re.compile(rf"^recall@{k} (stage 1|stage 2|untrained) layer (\d+)$")
    layers = sorted({int(m[2]) for s in info["accuracy"] for m in [pat.match(s)] if m})
    if not layers:
        have = sorted({s.split()[0] for s in info["accuracy"] if s.startswith("recall@")})
        raise ValueError(f"k: res holds no recall@{k} settings (stored: {', '.join(have) or 'none'})")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.5, 4.0))
    x = np.arange(len(layers))
    width = 0.8 / len(RECALL_NAMES)
    for n, (short, name) in enumerate(RECALL_NAMES.items()):
        ms = np.array([_stat(info, f"recall@{k} {short} layer {i}") for i in layers])
        ax.bar(x + (n - (len(RECALL_NAMES) - 1) / 2) * width, np.nan_to_num(ms[:, 0]), width,
               yerr=np.nan_to_num(ms[:, 1]), capsize=2, color=SELECTOR_COLORS[name], label=name,
               error_kw={"lw": 0.8})
    t = np.arange(k - 1, seq_len)
    chance = float(np.mean(k / (t + 1)))
    ax.axhline(chance, color=SELECTOR_COLORS["random"], ls=":", lw=1.2,
               label=f"k random visible keys (expected {chance:.2f})")
    ax.set_xticks(x)
    ax.set_xticklabels([f"layer {i}" for i in layers])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel(f"recall@{k} of the oracle top-{k}\n(mean ± std over {_n_seeds(info)})")
    ax.set_title(f"How much of each layer's own top-{k} (by attention mass) the indexer's top-{k} finds", fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------------------------ entropy
def random_model_entropy(T: int = 128, seed: int = 0) -> np.ndarray:
    """Per-layer mean attention entropy (nats) of notebook 04's random TinyLLM on T random tokens, then ln(#visible).

    The model is ``TinyLLM(TinyLLMConfig(vocab=256, d_model=64, n_heads=4, n_layers=2, max_len=max(1024, T),
    seed=seed))`` (notebook 04's, same weights for T <= 1024: max_len sets how many position embeddings are drawn
    first); tokens ``default_rng(seed).integers(0, 256, T)``. As ``dsa.attention_entropy_rows``: the mean over heads
    and queries that see at least 16 keys (t >= 15), next to the mean of ln(t + 1) over the same queries (uniform
    attention). T in [16, 2048]. Returns (n_layers + 1,) = (3,).
    """
    from hybrid_lab.models.attention_stats import attention_entropy, attention_probs
    from hybrid_lab.models.tiny_llm import TinyLLM, TinyLLMConfig

    T = checks.pos_int("T", T)
    if not MIN_VISIBLE <= T <= 2048:
        raise ValueError(f"T must be in [{MIN_VISIBLE}, 2048] (queries with >= {MIN_VISIBLE} visible keys), got {T}")
    seed = checks.nonneg_int("seed", seed)
    tiny = TinyLLM(TinyLLMConfig(vocab=256, d_model=64, n_heads=4, n_layers=2, max_len=max(1024, T), seed=seed))
    _, attn = tiny.forward(np.random.default_rng(seed).integers(0, 256, T))
    rows = np.arange(MIN_VISIBLE - 1, T)
    ent = [attention_entropy(attention_probs(q, k)[0, rows]).mean() for q, k, _ in attn]   # (T', H) -> mean
    return np.array(ent + [np.log(rows + 1).mean()])


def plot_entropy(res: dict, random_entropy):
    """Bars: the trained dense model's mean attention entropy per layer (mean ± std over seeds), then the random
    TinyLLM's per layer (:func:`random_model_entropy`); a dashed line at the uniform maximum ln(#visible keys).

    res: the results.json dict; settings ``"entropy layer <i>"`` and ``"entropy uniform"`` (nats). random_entropy:
    (n_layers + 1,) finite, >= 0, its layers at most its last entry (the uniform maximum). Bars in order: trained
    layers 0.., then random layers 0..; heights = the stored means, then random_entropy[:-1]. A second (dotted)
    uniform line is drawn when the random model's maximum differs by more than 1e-3 (another T). Returns a Figure.
    """
    info = _indexer_info(res)
    r = checks.finite_array("random_entropy", random_entropy, 1, "(n_layers + 1,)").astype(np.float64)
    if r.size < 2 or (r < 0).any() or (r[:-1] > r[-1] + 1e-9).any():
        raise ValueError(f"random_entropy must be (n_layers + 1,) entropies >= 0 whose last entry, ln(#visible), is "
                         f"the largest (random_model_entropy()), got {np.round(r, 4)}")
    layers = sorted({int(s.rsplit(" ", 1)[1]) for s in info["accuracy"]
                     if re.fullmatch(r"entropy layer \d+", s)})
    if not layers:
        raise ValueError(f"res[{EXP!r}]['models'][{MODEL!r}] has no 'entropy layer i' settings")
    ms = np.array([_stat(info, f"entropy layer {i}", hi=None) for i in layers])
    uni, _ = _stat(info, "entropy uniform", hi=None)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.5, 4.0))
    x_tr = np.arange(len(layers))
    x_rd = len(layers) + 0.6 + np.arange(r.size - 1)
    ax.bar(x_tr, np.nan_to_num(ms[:, 0]), 0.7, yerr=np.nan_to_num(ms[:, 1]), capsize=3,
           color=SELECTOR_COLORS["indexer stage 2"], label=f"trained dense model (mean ± std over {_n_seeds(info)})",
           error_kw={"lw": 0.8})
    ax.bar(x_rd, r[:-1], 0.7, color="0.65", hatch="//", label="notebook 04's random TinyLLM")
    if not np.isnan(uni):
        ax.axhline(uni, color="k", ls="--", lw=1.1, label=f"uniform over the visible keys: mean ln(#visible) = "
                   f"{uni:.2f}")
    if np.isnan(uni) or abs(uni - r[-1]) > 1e-3:                   # results.json rounds to 4 decimals
        ax.axhline(r[-1], color="0.3", ls=":", lw=1.1, label=f"uniform (random model's T): {r[-1]:.2f}")
    ax.set_xticks(np.concatenate([x_tr, x_rd]))
    ax.set_xticklabels([f"trained\nlayer {i}" for i in layers] + [f"random\nlayer {i}" for i in range(r.size - 1)],
                       fontsize=8)
    ax.set_ylabel("mean attention entropy (nats)\nqueries with >= 16 visible keys")
    ax.set_title("Is the attention concentrated enough for top-k? Trained vs random weights", fontsize=10)
    ax.set_ylim(0, max(np.nanmax(np.concatenate([ms[:, 0] + np.nan_to_num(ms[:, 1]), r])), 1e-9) * 1.25)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------------------------ one query
def _dense_model(model) -> Stack:
    if not isinstance(model, Stack) or any(kind != "attn" for kind in model.cfg.layers):
        raise ValueError(f"model must be a Stack of full-attention layers only (the trained dense model), got "
                         f"{type(model).__name__}")
    return model


def _indexer_list(indexers, model, name: str = "indexers") -> list | None:
    if indexers is None:
        return None
    L, D = model.cfg.n_layers, model.cfg.d_model
    if not isinstance(indexers, (list, tuple)) or len(indexers) != L \
            or not all(isinstance(ix, LightningIndexer) and ix.d_model == D for ix in indexers):
        raise ValueError(f"{name} must be None or a list of {L} LightningIndexers of d_model {D} (one per layer), "
                         f"got {type(indexers).__name__}")
    return list(indexers)


def plot_selection_layers(model, indexers, tokens, k: int, row_query: int, evidence=None, title: str = ""):
    """One query of one sequence, one panel per attention layer: what the layer attends to and who picks what.

    model: the trained dense :class:`Stack` (full-attention layers only); indexers: a list of one
    ``LightningIndexer`` per layer, or None (then only the oracle is marked); tokens: (T,) ids in [0, vocab);
    k >= 1; row_query: the query position in [0, T). Panel i: bars (one filled ``stairs`` artist, a step of width 1
    centred on each key 0..row_query), height = the layer's attention probability of each key, summed over heads and
    L1-normalized (``dsa.layer_attention``'s target row);
    the oracle top-k (``dsa.oracle_selector``) marked with circles ("oracle top-k") and the indexer's top-k
    (``dsa.indexer_selector``) with crosses ("indexer top-k"), both at the keys' probabilities, x = positions in
    selection order; the panel title gives how many of the oracle's k the indexer found and the row's entropy.
    evidence: key positions to shade (e.g. a needle's key and value), ints in [0, T). Returns a Figure.
    """
    model = _dense_model(model)
    tokens = checks.tokens("tokens", tokens, model.cfg.vocab)
    T = len(tokens)
    k = checks.pos_int("k", k)
    row_query = checks.int_in("row_query", row_query, 0, T)
    indexers = _indexer_list(indexers, model)
    ev = None if evidence is None else checks.int_array("evidence", evidence, 1, "(n,) key positions", lo=0, hi=T)
    caps = dsa.layer_attention(model, tokens)
    oracle = dsa.oracle_selector(k)
    mine = dsa.indexer_selector(indexers, k) if indexers is not None else None
    plt = _plt()
    L = len(caps)
    fig, axes = plt.subplots(L, 1, figsize=(11, 1.9 * L + 0.9), sharex=True, squeeze=False)
    for i, (ax, c) in enumerate(zip(axes[:, 0], caps)):
        p = c["target"][row_query, :row_query + 1]
        o_idx = oracle(i, c["x"], c["probs"])[row_query, 0]
        o_idx = o_idx[o_idx >= 0]
        # one filled step artist per panel (bars of width 1 centred on the keys; 100+ Rectangles draw 5x slower)
        ax.stairs(p, np.arange(row_query + 2) - 0.5, fill=True, color="0.6",
                  label="attention probability (heads summed)")
        if ev is not None:
            for j, e in enumerate(ev[ev <= row_query]):
                ax.axvspan(e - 0.5, e + 0.5, color="gold", alpha=0.45, lw=0, label="evidence" if j == 0 else None)
        ax.plot(o_idx, p[o_idx], "o", mfc="none", mec=SELECTOR_COLORS["oracle"], ms=7, ls="none",
                label=f"oracle top-{k}")
        head = f"layer {i}"
        if mine is not None:
            m_idx = mine(i, c["x"], c["probs"])[row_query, 0]
            m_idx = m_idx[m_idx >= 0]
            ax.plot(m_idx, p[m_idx], "x", color=SELECTOR_COLORS["indexer stage 2"], ms=7, mew=1.8, ls="none",
                    label=f"indexer top-{k}")
            head += f": the indexer finds {len(np.intersect1d(m_idx, o_idx))}/{len(o_idx)} of the oracle's keys"
        q = p[p > 0]
        head += f"; entropy {-(q * np.log(q)).sum():.2f} nats (uniform {np.log(row_query + 1):.2f})"
        ax.set_title(head, fontsize=8, loc="left")
        ax.set_ylabel("p", fontsize=8)
        ax.set_ylim(0, max(float(p.max()), 1e-9) * 1.15)
    axes[0, 0].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax = axes[-1, 0]
    ax.set_xlim(-0.5, row_query + 0.5)
    ax.set_xlabel(f"key position (query at t = {row_query})" + ("; shaded: the evidence" if ev is not None else ""))
    fig.suptitle((title + ": " if title else "") + f"what each layer attends to at query t = {row_query}, and the "
                 f"top-{k} picks", fontsize=10)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------------------------ explorer
def _untrained(model, seed: int) -> list:
    """The untrained indexers of dsa.run_experiment (also stage 1's initialization): 4 heads, d 16, RoPE 8."""
    return [LightningIndexer(model.cfg.d_model, 4, 16, seed=seed * 100 + i, rope_dims=8)
            for i in range(model.cfg.n_layers)]


def _selector(name: str, k: int, seed: int, indexers: list):
    if name == "dense":
        return None
    if name == "oracle":
        return dsa.oracle_selector(k)
    if name == "random":
        return dsa.random_selector(k, seed)
    return dsa.indexer_selector(indexers, k)


@with_picture
def explore(root=None):
    """Explorer of the lightning indexers on the trained dense model: selector, k, seed, example.

    root: the checkpoints folder (default ``store.CHECKPOINTS``; must hold ``dsa/indexer/seedK.npz``; the dense
    model comes from the checkpoint its meta names). Selector: ``dsa.SELECTORS`` or "dense"; k in ``dsa.KS``; seed;
    example 0-7 of ``tasks.mix(8, 128, seed=tasks.EVAL_SEED + 900, n_local=4)`` (held out). On a change it prints the
    needle and local accuracy of the 8 sequences when every layer reads only the selector's k keys (logits cached
    by (selector, k, seed)) next to the stored accuracy of that seed (64 other held-out sequences), and draws
    :func:`plot_selection_layers` for the example's first needle query (the needle's key and value shaded; the
    crosses are the chosen indexer's picks, none for dense, oracle and random). The model and its indexers are loaded
    once per seed: both stages are stored in the checkpoint (``dsa.load_indexers(path, stage=1)`` and ``stage=2``),
    and the report's sparse stage, the model fine-tuned with its indexers (``finetuned=True``, selector ``dsa.FT``:
    that selector runs on the fine-tuned model).

    Each redraw replaces the Output widget's ``outputs`` as a whole (see ``widgets/trained.py``). Returns a VBox
    ``[VBox(controls), Output]``; ``.redraw_seconds`` (a list) holds each redraw's wall time.
    """
    import ipywidgets as W

    root = Path(store.CHECKPOINTS if root is None else root)
    seeds = [s for s in (0, 1, 2) if (root / "dsa" / "indexer" / f"seed{s}.npz").exists()]
    if not seeds:
        raise ValueError(f"root must hold the DSA indexers (dsa/indexer/seedK.npz; hybrid-lab train dsa), none under "
                         f"{root}")
    batch = tasks.mix(EXPLORE_N, EXPLORE_T, seed=tasks.EVAL_SEED + 900, n_local=4)
    runs, logits = {}, {}

    def load(seed):
        if seed not in runs:
            path = root / "dsa" / "indexer" / f"seed{seed}"
            model, stage2, meta = dsa.load_indexers(path, stage=2)
            _, stage1, _ = dsa.load_indexers(path, stage=1)
            ft_model, ft, _ = dsa.load_indexers(path, stage=2, finetuned=True)
            runs[seed] = {"model": model, "meta": meta, "indexer stage 1": stage1, "indexer stage 2": stage2,
                          "untrained indexer": _untrained(model, seed), dsa.FT: ft, "finetuned model": ft_model}
        return runs[seed]

    def draw(selector, k, seed, example):
        run = load(seed)
        model = run["finetuned model"] if selector == dsa.FT else run["model"]     # the sparse stage's own model
        key = (selector, None if selector == "dense" else k, seed)
        if key not in logits:
            sel = _selector(selector, k, seed, run.get(selector))
            logits[key] = np.stack([dsa.sparse_forward(model, t, sel) for t in batch.tokens])
        lg = logits[key]
        (na, nn), (la, ln) = (tasks.accuracy(lg, batch, kind) for kind in (tasks.KIND_NEEDLE, tasks.KIND_LOCAL))
        what = "dense (every key)" if selector == "dense" else f"{selector}, k={k}"
        final = run["meta"].get("final", {})
        stored = "dense" if selector == "dense" else f"{selector} k={k}"
        text = (f"{what} (seed {seed}), {EXPLORE_N} held-out sequences: needle accuracy {na:.2f} ({nn} answers), "
                f"local {la:.2f} ({ln} answers)\n  stored for this seed ({run['meta'].get('eval_sets', 'held-out')}):"
                f" needle {final.get(stored + ' needle', np.nan):.2f}, local {final.get(stored + ' local', np.nan):.2f}"
                "\n")
        needles = np.nonzero(batch.kind[example] == tasks.KIND_NEEDLE)[0]
        if len(needles) == 0:                                  # mix always places a needle; kept for safety
            q, ev = EXPLORE_T - 1, None
        else:
            q = int(needles[0])
            d = int(batch.dist[example, q])
            ev = [q - d, q - d + 1]                            # the needle's key and value
        shown = run.get(selector) if selector in (*RECALL_NAMES.values(), dsa.FT) else None
        fig = plot_selection_layers(model, shown, batch.tokens[example], k, q, evidence=ev,
                                    title=f"example {example}, {what}")
        return text, fig

    controls = {
        "selector": W.Dropdown(options=list(dsa.SELECTORS) + [dsa.FT, "dense"], value="indexer stage 2",
                               description="selector"),
        "k": W.SelectionSlider(options=list(dsa.KS), value=8, description="k"),
        "seed": W.Dropdown(options=seeds, value=seeds[0], description="seed"),
        "example": W.IntSlider(value=0, min=0, max=EXPLORE_N - 1, description="example"),
    }
    return explorer(draw, controls)
