"""Plots and widgets for notebooks 00-02 (three costs, selective SSM, snapshots).

Each widget is a thin ``ipywidgets.interactive`` around a pure function that is unit-tested; each plot function returns
a matplotlib Figure (the notebooks also print a rounded summary, since nbval does not compare images). Every cost
drawn here comes from the ledger, i.e. from the one 7B shape (``costs.shape7b``).
"""
from __future__ import annotations

import numpy as np

from hybrid_lab.core import checks
from hybrid_lab.costs import ledger
from hybrid_lab.costs.shape7b import GQA_7B, HYBRID_7B, TRANSFORMER_7B, check_layout
from hybrid_lab.models.hybrid import chunk_boundary, reusable_prefix
from hybrid_lab.ops.ssm import survival
from hybrid_lab.widgets.static import with_picture


def _plt():
    import matplotlib.pyplot as plt

    return plt


# ------------------------------------------------------------------------------------------------ 00: three costs
DEFAULT_MODELS = (TRANSFORMER_7B, GQA_7B, HYBRID_7B)


def _models(models) -> tuple:
    models = tuple(models)
    if not models:
        raise ValueError("models must hold at least one HybridLayout, got none")
    return tuple(check_layout(f"models[{i}]", m) for i, m in enumerate(models))


def three_costs_rows(L: int, models=DEFAULT_MODELS):
    """One row per model at context L (an integer >= 1): (name, KV+state GB, decode GB read per step, prefill PFLOP),
    rounded to 3 decimals."""
    L = checks.pos_int("L", L)
    rows = []
    for m in _models(models):
        c = ledger.three_costs(m, L)
        rows.append((m.name, round(float(c["kv_memory_bytes"]) / 1e9, 3), round(float(c["decode_read_bytes"]) / 1e9, 3),
                     round(float(c["prefill_flops"]) / 1e15, 3)))
    return rows


def format_rows(header, rows) -> str:
    """A plain-text table: first column left-aligned, the rest right-aligned; floats with 3 decimals.
    header: a tuple of column names; rows: a list of tuples of the same length."""
    def cell(x):
        return f"{x:,.3f}" if isinstance(x, float) else str(x)

    if not isinstance(header, (tuple, list)) or not header:
        raise ValueError(f"header must be a non-empty tuple of column names, got {header!r}")
    if not isinstance(rows, (tuple, list)) or not all(isinstance(r, (tuple, list)) and len(r) == len(header)
                                                      for r in rows):
        raise ValueError(f"rows must be a list of tuples of {len(header)} cells (one per header column), "
                         f"got {rows!r}")
    body = [tuple(cell(x) for x in r) for r in rows]
    cols = list(zip(*([tuple(header)] + body)))
    widths = [max(len(x) for x in col) for col in cols]
    fmt = "  ".join(f"{{:<{w}}}" if i == 0 else f"{{:>{w}}}" for i, w in enumerate(widths))
    return "\n".join(fmt.format(*r) for r in [tuple(header)] + body)


def plot_three_costs(models=DEFAULT_MODELS, L_max: int = 131072):
    """Three panels against context length: memory, bytes read per decode step, prefill FLOPs."""
    models = _models(models)
    plt = _plt()
    L = np.unique(np.geomspace(256, checks.pos_int("L_max", L_max, 256), 64).astype(int))
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for m in models:
        c = ledger.three_costs(m, L)
        axes[0].plot(L, c["kv_memory_bytes"] / 1e9, label=m.name)
        axes[1].plot(L, c["decode_read_bytes"] / 1e9, label=m.name)
        axes[2].plot(L, c["prefill_flops"] / 1e15, label=m.name)
    for ax, t, u in zip(axes, ("memory per sequence", "history read per decode step", "prefill compute"),
                        ("GB", "GB", "PFLOP")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(t)
        ax.set_xlabel("context length L (tokens)")
        ax.set_ylabel(u)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def three_costs_figure(L: int, models=DEFAULT_MODELS):
    """Bar charts of the three costs of each model at context L (what the L slider shows)."""
    plt = _plt()
    rows = three_costs_rows(L, models)
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.2))
    names = [r[0].split(" (")[0].replace("Transformer 7B, ", "") for r in rows]
    for ax, j, title in zip(axes, (1, 2, 3), ("memory per sequence (GB)", "read per decode step (GB)",
                                              "prefill (PFLOP)")):
        ax.bar(names, [r[j] for r in rows], color=["C0", "C1", "C2"][: len(rows)])
        ax.set_title(title, fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
    fig.suptitle(f"context L = {L:,} tokens", fontsize=10)
    fig.tight_layout()
    return fig


@with_picture
def three_costs_explorer(models=DEFAULT_MODELS):
    """An L slider (powers of two): the three costs of each model and the decode batch that fits in 80 GB."""
    import ipywidgets as w

    models = _models(models)

    def show(log2_L):
        L = 2 ** log2_L
        batches = ", ".join(f"{m.name.split(' (')[0]}: {int(ledger.max_batch(m, L))}" for m in models)
        print(f"L = {L:,}; sequences that fit in 80 GB next to 14 GB of weights: {batches}")
        _show(three_costs_figure(L, models))

    return w.interactive(show, log2_L=w.IntSlider(value=15, min=8, max=20, description="log2 L"))


def _show(fig):
    from IPython.display import display

    display(fig)
    _plt().close(fig)


# ------------------------------------------------------------------------------------------------ 01: selective SSM
def _decay_rate(A) -> float:
    A = checks.finite_number("A", A)
    if A >= 0:
        raise ValueError(f"A must be < 0 (a decay rate), got {A!r}")
    return A


def plot_survival(dts=(0.01, 0.1, 1.0), A: float = -1.0, length: int = 64):
    """How much of token 0 survives in the state after t steps, for several Δ >= 0 (constant per step), A < 0."""
    dts = checks.finite_array("dts", dts, 1, "(n,) step sizes Δ")
    if dts.size == 0 or (dts < 0).any():
        raise ValueError(f"dts must hold at least one step size Δ >= 0, got {dts.tolist()}")
    A, length = _decay_rate(A), checks.pos_int("length", length)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for dt in dts:
        ax.plot(survival(dt, A, length), label=f"Δ = {dt:g}")
    ax.set_yscale("log")
    ax.set_ylim(1e-8, 2)
    ax.set_xlabel("steps after token 0")
    ax.set_ylabel("fraction of token 0 left")
    ax.set_title(f"exp(Δ·A·t), A = {A:g}")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def lti_vs_selective(length: int, content, dt: float = 0.5, A: float = -1.0):
    """Selectivity in one comparison: how much of token 0 is left at the last of ``length`` tokens, i.e. after the
    ``length - 1`` decay steps of tokens 1 .. length-1 (token 0's own step writes it).

    LTI: every step uses the same Δ, so every filler token also decays what was stored.
    Selective: Δ depends on the token; content steps (indices in ``content``) use Δ, filler steps Δ = 0 ("skip").
    Returns (lti_fraction, selective_fraction).
    """
    length = checks.pos_int("length", length)
    checks.output_size("length", (length,))
    dt, A = checks.nonneg_number("dt", dt), _decay_rate(A)
    mask = np.zeros(length, dtype=bool)
    mask[checks.int_array("content", list(content), ndim=1, shape_doc="(n,) positions", lo=0, hi=length)] = True
    lti = survival(dt, A, length)[-1]
    sel = survival(np.where(mask, dt, 0.0), A, length)[-1]
    return float(lti), float(sel)


@with_picture
def survival_explorer(length: int = 64):
    """Δ and A sliders: how much of an early token is still in the state after `length` steps."""
    import ipywidgets as w

    def show(log10_dt, A):
        dt = 10.0 ** log10_dt
        s = survival(dt, A, length)
        print(f"Δ = {dt:.3g}, A = {A:.2f}: after {length - 1} steps {s[-1]:.3e} of token 0 is left")
        _show(plot_survival((dt,), A, length))

    return w.interactive(show, log10_dt=w.FloatSlider(value=-1.0, min=-3.0, max=1.0, step=0.25, description="log10 Δ"),
                         A=w.FloatSlider(value=-1.0, min=-8.0, max=-0.125, step=0.125, description="A"))


def plot_state_vs_kv(lengths, kv_bytes, ssm_bytes):
    """Mini hybrid: SSM state bytes stay flat while attention KV grows with the sequence.
    lengths: (n,) token counts > 0 (a log axis); kv_bytes, ssm_bytes: (n,) bytes >= 0 at those lengths."""
    lengths = checks.finite_array("lengths", lengths, 1, "(n,) token counts")
    if lengths.size == 0 or (lengths <= 0).any():
        raise ValueError(f"lengths must hold token counts > 0, got {lengths.tolist()}")
    kv_bytes, ssm_bytes = (checks.finite_array(name, b, 1, f"({lengths.size},) bytes")
                           for name, b in (("kv_bytes", kv_bytes), ("ssm_bytes", ssm_bytes)))
    for name, b in (("kv_bytes", kv_bytes), ("ssm_bytes", ssm_bytes)):
        if b.shape != lengths.shape or (b < 0).any():
            raise ValueError(f"{name} must hold {lengths.size} byte counts >= 0 (one per length), got {b.tolist()}")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.4))
    ax.plot(lengths, np.asarray(kv_bytes) / 1e3, "o-", label="attention KV")
    ax.plot(lengths, np.asarray(ssm_bytes) / 1e3, "s-", label="SSM states")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens processed")
    ax.set_ylabel("KB")
    ax.set_title("mini hybrid: 1 attention + 3 SSM layers, d=32, N=16, fp32")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------------------------ 02: snapshots
def reuse_options(shared: int, old_len: int, chunk_size: int):
    """How many of ``shared`` common tokens each snapshot strategy lets a new request reuse.

    - final state only: the old request saved its state at old_len;
    - chunk boundaries: states at every multiple of chunk_size (free in the chunked scan) plus the final one;
    - two-pass prefill at the branch point: a state saved exactly at ``shared``;
    - pure Transformer: KV alone, any prefix.
    """
    old_len = checks.nonneg_int("old_len", old_len)
    shared = checks.int_in("shared", shared, 0, old_len + 1)
    chunk_size = checks.pos_int("chunk_size", chunk_size)
    # the states at chunk_size, 2·chunk_size, ... <= old_len and at old_len: of those <= shared (<= old_len) the
    # largest multiple is the last chunk boundary at or before shared, so the two positions give the same reuse as
    # the whole list, without listing old_len / chunk_size positions
    chunks = [chunk_boundary(shared, chunk_size), old_len]
    return {
        "final state only": reusable_prefix(shared, [old_len]),
        f"chunk boundaries ({chunk_size})": reusable_prefix(shared, chunks),
        "two-pass at the branch": reusable_prefix(shared, [shared, old_len]),
        "pure Transformer (KV only)": shared,
    }


def reuse_figure(shared: int, chunk_size: int, old_len: int = 60):
    """Bars: tokens of the shared prefix each snapshot strategy can reuse."""
    plt = _plt()
    opts = reuse_options(shared, old_len, chunk_size)
    fig, ax = plt.subplots(figsize=(7, 2.8))
    ax.barh(list(opts)[::-1], list(opts.values())[::-1], color=["C7", "C2", "C1", "C3"])
    ax.axvline(shared, color="k", ls="--", lw=1)
    ax.set_xlim(0, old_len)
    ax.set_xlabel(f"tokens reused (of {shared} shared; old request {old_len} tokens)")
    fig.tight_layout()
    return fig


@with_picture
def reuse_explorer(old_len: int = 60):
    """Shared-prefix and chunk-size sliders: tokens reused under each snapshot strategy."""
    import ipywidgets as w

    def show(shared, chunk_size):
        opts = reuse_options(shared, old_len, chunk_size)
        print("; ".join(f"{k}: {v}" for k, v in opts.items()))
        _show(reuse_figure(shared, chunk_size, old_len))

    return w.interactive(show, shared=w.IntSlider(value=40, min=0, max=old_len, description="shared"),
                         chunk_size=w.IntSlider(value=16, min=1, max=64, description="chunk"))
