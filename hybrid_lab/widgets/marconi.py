"""Plots and the explorer widget of notebook 03 (Marconi). Every plot helper returns a matplotlib Figure; the
widget only wires controls to :func:`policy_hit_rates` + :func:`hit_rate_bars`, which are tested without a browser."""
from __future__ import annotations

import numpy as np

from hybrid_lab.serving.radix_cache import POLICIES, simulate

COLORS = {"vllm+": "#9e9e9e", "sglang+": "#4c78a8", "marconi": "#e45756"}


def _plt():
    import matplotlib.pyplot as plt

    return plt


def policy_hit_rates(trace, capacity: float, alpha: float = 0.5, model=None, policies=POLICIES) -> dict:
    """Token hit rate of each policy on ``trace`` at ``capacity`` bytes (Marconi with a fixed α)."""
    if not (np.isscalar(alpha) and alpha >= 0):
        raise ValueError(f"alpha must be >= 0, got {alpha!r}")
    return {p: simulate(trace, p, capacity, model=model, alpha=float(alpha)).token_hit_rate for p in policies}


def hit_rate_bars(rates: dict, title: str = ""):
    """Bar chart: token hit rate per policy. rates: {policy: rate in [0, 1]}."""
    if not rates:
        raise ValueError("rates is empty")
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
    """{policy: array of token hit rates over ``capacities``} (Marconi with fixed α, or "auto")."""
    capacities = list(capacities)
    jobs = [(p, c) for p in policies for c in capacities]
    it = jobs
    if show_progress:
        from hybrid_lab.core.progress import progress

        it = progress(jobs, desc="capacity sweep")
    out = {p: np.zeros(len(capacities)) for p in policies}
    for p, c in it:
        out[p][capacities.index(c)] = simulate(trace, p, c, model=model, alpha=alpha, processes=1).token_hit_rate
    return out


def plot_capacity_sweep(capacities, rates: dict, title: str = ""):
    """Token hit rate against cache capacity (GB), one line per policy."""
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
    """kFLOP saved per byte held against prefix length, one line per layout (exercise 4's picture)."""
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
    """Fraction of KV vs SSM states ever reused: ours (measured) beside Marconi's (reported)."""
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
    """Token hit rate per input-length bucket for each policy's SimResult."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    names = list(results)
    w = 0.8 / max(1, len(names))
    labels = None
    for j, n in enumerate(names):
        b = results[n].breakdown(edges)
        labels = [f"< {int(hi):,}" if lo == 0 else (f">= {int(lo):,}" if np.isinf(hi) else f"{int(lo):,}-{int(hi):,}")
                  for lo, hi, _, _ in b]
        ax.bar(np.arange(len(b)) + j * w, [x[3] for x in b], w, label=n, color=COLORS.get(n))
    ax.set_xticks(np.arange(len(labels)) + w * (len(names) - 1) / 2, labels)
    ax.set_xlabel("input length (tokens)")
    ax.set_ylabel("token hit rate")
    ax.legend()
    fig.tight_layout()
    return fig


def explorer(traces: dict, capacities_gb=(1, 2, 4, 8, 16), alphas=(0.0, 0.1, 0.5, 1.0, 2.0), model=None):
    """ipywidgets explorer: workload, capacity and α -> hit-rate bars per policy (calls the tested functions)."""
    import ipywidgets as W
    from IPython.display import display

    if not traces:
        raise ValueError("traces is empty")
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
