"""Plots and the explorer widget of notebook 03 (Marconi). Every plot helper returns a matplotlib Figure; the
widget only wires controls to :func:`policy_hit_rates` + :func:`hit_rate_bars`, which are tested without a browser."""
from __future__ import annotations

import numpy as np

from hybrid_lab.core.checks import finite_array, nonneg_number
from hybrid_lab.core.progress import progress
from hybrid_lab.serving.marconi import simulate
from hybrid_lab.serving.radix_cache import POLICIES, SimResult
from hybrid_lab.widgets.static import with_picture

COLORS = {"vllm+": "#9e9e9e", "sglang+": "#4c78a8", "marconi": "#e45756"}


def _plt():
    import matplotlib.pyplot as plt

    return plt


def _check_policies(policies) -> list:
    policies = list(policies)
    bad = [p for p in policies if p not in POLICIES]
    if bad or not policies:
        raise ValueError(f"policies must be a non-empty list drawn from {POLICIES}, got {policies!r}")
    return policies


def _check_rates(name: str, rates: dict) -> dict:
    """{name: fraction in [0, 1]} (non-empty)."""
    if not isinstance(rates, dict) or not rates:
        raise ValueError(f"{name} must be a non-empty dict {{name: rate in [0, 1]}}, got {rates!r}")
    for k, v in rates.items():
        v = nonneg_number(f"{name}[{k!r}]", v)
        if v > 1:
            raise ValueError(f"{name}[{k!r}] must lie in [0, 1], got {v!r}")
    return rates


def _nonneg_curve(name: str, values) -> np.ndarray:
    """(n,) finite values >= 0 (a curve to draw)."""
    values = finite_array(name, values, ndim=1, shape_doc="(n,)")
    if values.size and values.min() < 0:
        raise ValueError(f"{name} must be >= 0, got min {values.min()}")
    return values


def policy_hit_rates(trace, capacity: float, alpha: float = 0.5, model=None, policies=POLICIES) -> dict:
    """Token hit rate of each policy on ``trace`` at ``capacity`` bytes (Marconi with a fixed α >= 0)."""
    alpha = nonneg_number("alpha", alpha)
    return {p: simulate(trace, p, capacity, model=model, alpha=alpha).token_hit_rate
            for p in _check_policies(policies)}


def hit_rate_bars(rates: dict, title: str = ""):
    """Bar chart: token hit rate per policy. rates: {policy: rate in [0, 1]}."""
    _check_rates("rates", rates)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(4.8, 3.0))
    names = list(rates)
    vals = [rates[n] for n in names]
    bars = ax.bar(names, vals, color=[COLORS.get(n, "#72b7b2") for n in names])
    for b, v in zip(bars, vals):
        ax.text(b.get_x() + b.get_width() / 2, v + 0.01, f"{v:.1%}", ha="center", va="bottom", fontsize=9)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("token hit rate")
    ax.set_title(title or "token hit rate per policy")
    fig.tight_layout()
    return fig


def sweep_capacity(trace, capacities, policies=POLICIES, alpha=0.5, model=None, show_progress=True) -> dict:
    """{policy: array of token hit rates over ``capacities``} (bytes >= 0; Marconi with fixed α, or "auto")."""
    capacities = [nonneg_number(f"capacities[{i}]", c) for i, c in enumerate(capacities)]
    if not capacities:
        raise ValueError("capacities must hold at least one capacity (bytes), got an empty list")
    policies = _check_policies(policies)
    jobs = [(p, j, c) for p in policies for j, c in enumerate(capacities)]
    out = {p: np.zeros(len(capacities)) for p in policies}
    for p, j, c in progress(jobs, desc="capacity sweep") if show_progress else jobs:
        out[p][j] = simulate(trace, p, c, model=model, alpha=alpha, processes=1).token_hit_rate
    return out


def plot_capacity_sweep(capacities, rates: dict, title: str = ""):
    """Token hit rate against cache capacity (GB), one line per policy. capacities: (n,) bytes; rates: {policy:
    (n,) rates}."""
    capacities = _nonneg_curve("capacities", capacities)
    if not isinstance(rates, dict) or not rates:
        raise ValueError(f"rates must be a non-empty dict {{policy: (n,) hit rates}}, got {rates!r}")
    for p, r in rates.items():
        r = _nonneg_curve(f"rates[{p!r}]", r)
        if r.shape != capacities.shape:
            raise ValueError(f"rates[{p!r}] must have shape {capacities.shape} (one rate per capacity), got {r.shape}")
        if (r > 1).any():
            raise ValueError(f"rates[{p!r}] must lie in [0, 1], got max {r.max()}")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    gb = np.asarray(capacities) / 1e9
    for p, r in rates.items():
        ax.plot(gb, r, "o-", label=p, color=COLORS.get(p))
    ax.set_xlabel("cache capacity (GB)")
    ax.set_ylabel("token hit rate")
    ax.set_ylim(0, 1.02)
    ax.set_title(title or "hit rate vs capacity")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_efficiency(lengths, table: dict):
    """kFLOP saved per byte held against prefix length, one line per layout (lecture 10 §4.3, exercise 4's picture).
    lengths: (n,) tokens > 0 (log axis); table: {layout name: (n,) kFLOP per byte}."""
    lengths = finite_array("lengths", lengths, ndim=1, shape_doc="(n,) tokens")
    if (lengths <= 0).any():
        raise ValueError(f"lengths must be > 0 (a log axis), got min {lengths.min()}")
    if not isinstance(table, dict) or not table:
        raise ValueError(f"table must be a non-empty dict {{layout: (n,) kFLOP per byte}}, got {table!r}")
    for name, v in table.items():
        if _nonneg_curve(f"table[{name!r}]", v).shape != lengths.shape:
            raise ValueError(f"table[{name!r}] must have shape {lengths.shape}, got {np.shape(v)}")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for name, v in table.items():
        ax.plot(lengths, v, label=name)
    ax.set_xscale("log")
    ax.set_xlabel("prefix length (tokens)")
    ax.set_ylabel("FLOP efficiency (kFLOP / byte)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_reuse(kv_frac: float, state_frac: float, reported=(0.25, 0.004)):
    """Fraction of KV vs SSM states ever reused: ours (measured) beside Marconi's (reported, Marconi §3: 25.0% of
    the KV blocks vs 0.4% of the states). Fractions in [0, 1]."""
    reported = tuple(reported) if isinstance(reported, (tuple, list, np.ndarray)) else ()
    if len(reported) != 2:
        raise ValueError("reported must be (KV fraction, state fraction)")
    _check_rates("fractions", {"kv_frac": kv_frac, "state_frac": state_frac, "reported[0]": reported[0],
                               "reported[1]": reported[1]})
    plt = _plt()
    fig, ax = plt.subplots(figsize=(4.8, 3.0))
    x = np.arange(2)
    ax.bar(x - 0.2, [kv_frac, state_frac], 0.4, label="measured", color="#4c78a8")
    ax.bar(x + 0.2, list(reported), 0.4, label="reported (Marconi)", color="#bbbbbb")
    ax.set_xticks(x, ["KV blocks", "SSM states"])
    ax.set_ylabel("fraction ever reused")
    ax.legend()
    fig.tight_layout()
    return fig


def plot_breakdown(results: dict, edges=(7000,)):
    """Token hit rate per input-length bucket for each policy's SimResult. results: {name: SimResult}."""
    if not isinstance(results, dict) or not results:
        raise ValueError(f"results must be a non-empty dict {{policy: SimResult}}, got {results!r}")
    for n, r in results.items():
        if not isinstance(r, SimResult):
            raise ValueError(f"results[{n!r}] must be a SimResult, got {type(r).__name__}")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    names = list(results)
    w = 0.8 / max(1, len(names))
    labels = None
    for j, n in enumerate(names):
        b = results[n].breakdown(edges)
        labels = [_bucket_label(lo, hi) for lo, hi, _, _ in b]
        ax.bar(np.arange(len(b)) + j * w, [x[3] for x in b], w, label=n, color=COLORS.get(n))
    ax.set_xticks(np.arange(len(labels)) + w * (len(names) - 1) / 2, labels)
    ax.set_xlabel("input length (tokens)")
    ax.set_ylabel("token hit rate")
    ax.legend()
    fig.tight_layout()
    return fig


def _bucket_label(lo, hi) -> str:
    if np.isinf(hi):
        return "all lengths" if lo == 0 else f">= {int(lo):,}"
    return f"< {int(hi):,}" if lo == 0 else f"{int(lo):,}-{int(hi):,}"


@with_picture
def explorer(traces: dict, capacities_gb=(1, 2, 4, 8, 16), alphas=(0.0, 0.1, 0.5, 1.0, 2.0), model=None):
    """ipywidgets explorer: workload, capacity and α -> hit-rate bars per policy (calls the tested functions)."""
    import ipywidgets as W
    from IPython.display import display

    if not isinstance(traces, dict) or not traces:
        raise ValueError(f"traces must be a non-empty dict {{workload name: trace}}, got {traces!r}")
    plt = _plt()

    def show(workload, capacity_gb, alpha):
        rates = policy_hit_rates(traces[workload], capacity_gb * 1e9, alpha, model=model)
        fig = hit_rate_bars(rates, f"{workload}, {capacity_gb} GB, α = {alpha}")
        display(fig)
        plt.close(fig)
        print("  ".join(f"{p}: {r:.3f}" for p, r in rates.items()))

    return W.interactive(show, workload=W.Dropdown(options=list(traces)),
                         capacity_gb=W.SelectionSlider(options=list(capacities_gb), value=capacities_gb[len(capacities_gb) // 2]),
                         alpha=W.SelectionSlider(options=list(alphas), value=alphas[len(alphas) // 2]))
