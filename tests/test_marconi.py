"""Marconi's eviction score (Marconi §4.2), α tuning by bootstrap replay, simulate(), and the notebook's plots: each
plot test checks the data drawn."""
import math

import ipywidgets
import matplotlib.pyplot as plt
import numpy as np
import pytest

from hybrid_lab.costs.shape7b import L7B
from hybrid_lab.serving.eviction import eviction_scores, flop_efficiency, node_scores, normalize
from hybrid_lab.serving.marconi import DEFAULT_ALPHAS, run_marconi_auto, simulate, tune_alpha
from hybrid_lab.serving.radix_cache import POLICIES, RadixCache
from hybrid_lab.serving.workloads import chat_trace
from hybrid_lab.widgets.marconi import (explorer, hit_rate_bars, plot_breakdown, plot_capacity_sweep,
                                        plot_efficiency, plot_reuse, policy_hit_rates, sweep_capacity)


# ---------------------------------------------------------------------------------------------------- the score
def test_normalize_and_efficiency():
    assert np.allclose(normalize([2.0, 4.0, 3.0]), [0.0, 1.0, 0.5])
    assert np.allclose(normalize([5.0, 5.0]), [0.0, 0.0])
    assert normalize(np.zeros(0)).shape == (0,)
    assert np.allclose(flop_efficiency([10.0, 6.0, 1.0], [2.0, 3.0, 0.0]), [5.0, 2.0, 0.0])   # 0 bytes: 0


def test_scores_alpha_zero_is_recency():
    """The paper's recency is normalize(1 / (now - t)): the most recent nodes are far apart, old ones crowd at 0; the
    lecture's variant is linear in t."""
    t = np.array([5.0, 1.0, 3.0])
    s = eviction_scores(t, [1e12, 1e15, 1e9], [1e6, 1e6, 1e6], 0.0, now=6.0)
    r = 1 / (6.0 - t)
    assert np.allclose(s, (r - r.min()) / (r.max() - r.min())) and np.allclose(s, [1.0, 0.0, 1 / 6])
    assert np.array_equal(eviction_scores(t, [1, 1, 1], [1, 1, 1], 0.0), s)          # now defaults to max(t) + 1
    lin = eviction_scores(t, [1e12, 1e15, 1e9], [1e6, 1e6, 1e6], 0.0, variant="lecture")
    assert np.allclose(lin, [1.0, 0.0, 0.5])
    with pytest.raises(ValueError, match="now must be"):
        eviction_scores(t, [1, 1, 1], [1, 1, 1], 0.0, now=5.0)
    with pytest.raises(ValueError, match="variant"):
        eviction_scores(t, [1, 1, 1], [1, 1, 1], 0.0, variant="lru")
    assert np.argmin(s) == 1                               # LRU victim


def test_scores_reward_flop_efficiency():
    """Lecture 10 exercise 4: A (500 tokens) and B (8,000 tokens) used at the same time: B saves more FLOPs per byte,
    so any α > 0 evicts A first."""
    L = np.array([500, 8000])
    saved = L7B.prefill_flops(L)
    nbytes = L7B.entry_bytes(L)
    s = eviction_scores([7.0, 7.0], saved, nbytes, 0.5)
    assert s[0] < s[1] and np.allclose(s, [0.0, 0.5])
    s = eviction_scores([1.0, 0.0], saved, nbytes, 0.5)   # recency can outweigh efficiency when α is small
    assert np.argmin(s) == 1


def test_fast_path_scores_equal_checked_scores():
    rng = np.random.default_rng(3)
    t, fl, nb = rng.integers(0, 50, 8).astype(float), rng.uniform(1e12, 1e14, 8), rng.uniform(1e7, 1e9, 8)
    nb[2] = 0.0
    for a in (0.0, 0.5, 2.0):
        assert np.array_equal(node_scores(t, fl, nb, a), eviction_scores(t, fl, nb, a))


# ---------------------------------------------------------------------------------------------------- α by replay
def test_tune_alpha_serial_equals_parallel_and_picks_best():
    tr = chat_trace(120, "sharegpt", seed=2)
    cache = RadixCache(2e9)
    for r in tr[:60]:
        cache.serve(r)
    alphas = [0.0, 0.5, 2.0]
    b1, s1 = tune_alpha(cache, tr[60:], alphas, processes=1)
    b2, s2 = tune_alpha(cache, tr[60:], alphas, processes=2)
    assert s1 == s2 and b1 == b2
    assert s1[b1] == max(s1.values())
    assert cache.stats["requests"] == 60                   # the snapshot itself is untouched by the replays
    ref = cache.clone()                                    # replay = the window served with that α from the snapshot
    ref.alpha = 2.0
    hit = sum(ref.serve(r) for r in tr[60:])
    assert s1[2.0] == pytest.approx(hit / sum(r.n_input for r in tr[60:]))


def test_tune_alpha_official_metric_is_flops_over_the_last_500():
    tr = chat_trace(700, "lmsys", seed=3)
    empty = RadixCache(1e9)
    best, scores = tune_alpha(empty, tr, [0.0, 1.0], processes=1, metric="flops")
    ref = empty.clone()
    ref.alpha = 1.0
    hits = np.array([ref.serve(r) for r in tr])
    assert scores[1.0] == pytest.approx(float(L7B.prefill_flops(hits[-500:]).sum()))
    assert scores[best] == max(scores.values())
    with pytest.raises(ValueError, match="metric"):
        tune_alpha(empty, tr[:3], [0.0], processes=1, metric="tokens")


def test_run_marconi_auto_official_replays_the_start_from_an_empty_tree():
    tr = chat_trace(300, "sharegpt", seed=0)
    res = run_marconi_auto(tr, 2e9, bootstrap=5, alphas=(0.0, 0.5, 1.0), processes=1, tuning="official")
    start, stop = res.stats["bootstrap_window"]
    lecture = run_marconi_auto(tr, 2e9, bootstrap=5, alphas=(0.0, 0.5, 1.0), processes=1)
    n0 = lecture.stats["bootstrap_window"][0]
    assert (start, stop) == (0, min(len(tr), 5 * n0)) and res.stats["tuning"] == "official"
    best, scores = tune_alpha(RadixCache(2e9, policy="marconi"), tr[:stop], (0.0, 0.5, 1.0), processes=1,
                              metric="flops")
    assert res.alpha_scores == scores and res.stats["alpha_tuned"] == best
    assert res.alpha == (best if stop < len(tr) else 0.0)


def test_alpha_reported_is_the_alpha_applied():
    """A window that ends with the trace: the tuned α never serves a request, so the result reports 0."""
    tr = chat_trace(300, "sharegpt", seed=0)
    res = run_marconi_auto(tr, 2e9, bootstrap=1000, alphas=(0.0, 2.0), processes=1, tuning="official")
    assert res.stats["bootstrap_window"][1] == len(tr) and res.stats["alpha_tuned"] is not None
    assert res.alpha == 0.0


def test_run_marconi_auto_tunes_after_first_eviction():
    tr = chat_trace(300, "sharegpt", seed=0)
    res = run_marconi_auto(tr, 2e9, bootstrap=5, alphas=(0.0, 0.5, 1.0), processes=1)
    start, stop = res.stats["bootstrap_window"]
    assert 0 < start < stop <= len(tr)
    assert stop - start == min(len(tr) - start, 5 * start)
    assert set(res.alpha_scores) == {0.0, 0.5, 1.0}
    assert res.alpha == max(sorted(res.alpha_scores), key=lambda a: (round(res.alpha_scores[a], 12), -a))
    assert res.alpha == res.stats["alpha_tuned"] and stop < len(tr)
    assert 0 < res.token_hit_rate < 1
    fixed0 = simulate(tr, "marconi", 2e9, alpha=0.0)       # before tuning Marconi runs with α = 0
    assert np.array_equal(res.hit[:stop], fixed0.hit[:stop])


def test_simulate_dispatches_by_policy_and_alpha():
    tr = chat_trace(60, "lmsys", seed=7)
    auto = simulate(tr, "marconi", 3e8, alphas=(0.0, 1.0), processes=1)
    assert np.array_equal(auto.hit, run_marconi_auto(tr, 3e8, alphas=(0.0, 1.0), processes=1).hit)
    fixed = simulate(tr, "marconi", 3e8, alpha=1.0)
    assert fixed.alpha == 1.0 and fixed.policy == "marconi"
    assert np.array_equal(fixed.hit, RadixCache(3e8, alpha=1.0).serve_trace(tr).hit)
    assert simulate(tr, "sglang+", 3e8, alpha="auto").alpha == 0.0     # "auto" tunes Marconi only


BAD_INPUT = [
    (lambda: eviction_scores([1.0], [1.0], [1.0], -0.5), "alpha"),
    (lambda: eviction_scores([1.0], [1.0], [1.0], math.nan), "alpha"),
    (lambda: eviction_scores([1.0], [1.0], [1.0], "0.5"), "alpha"),
    (lambda: eviction_scores([1.0, 2.0], [1.0], [1.0], 0.5), "same shape"),
    (lambda: eviction_scores([math.nan], [1.0], [1.0], 0.5), "last_access"),
    (lambda: eviction_scores([1.0], [math.inf], [1.0], 0.5), "saved_flops"),
    (lambda: eviction_scores([[1.0]], [[1.0]], [[1.0]], 0.5), "last_access must be 1-D"),
    (lambda: flop_efficiency([1.0], [-1.0]), "nbytes"),
    (lambda: flop_efficiency([-1.0], [1.0]), "saved_flops"),
    (lambda: flop_efficiency([1.0, 2.0], [1.0]), "same shape"),
    (lambda: flop_efficiency(["a"], [1.0]), "saved_flops"),
    (lambda: normalize([1.0, math.nan]), "x must be finite"),
    (lambda: tune_alpha("cache", chat_trace(3)), "snapshot"),
    (lambda: tune_alpha(RadixCache(1e9), chat_trace(3), alphas=[-1.0]), r"alphas\[0\]"),
    (lambda: tune_alpha(RadixCache(1e9), chat_trace(3), alphas=[]), "alphas"),
    (lambda: tune_alpha(RadixCache(1e9), chat_trace(3), alphas=0.5), "alphas"),
    (lambda: tune_alpha(RadixCache(1e9), chat_trace(3), processes=0), "processes"),
    (lambda: tune_alpha(RadixCache(1e9), []), "window"),
    (lambda: tune_alpha(RadixCache(1e9), [1, 2]), r"window\[0\]"),
    (lambda: run_marconi_auto(chat_trace(3), 2e9, bootstrap=0), "bootstrap"),
    (lambda: run_marconi_auto(chat_trace(3), 2e9, bootstrap=math.inf), "bootstrap"),
    (lambda: run_marconi_auto(chat_trace(3), 2e9, alphas=[math.nan]), "alphas"),      # checked before any eviction
    (lambda: run_marconi_auto(chat_trace(3), 2e9, processes=1.5), "processes"),
    (lambda: run_marconi_auto(chat_trace(3), -2e9), "capacity"),
    (lambda: simulate(chat_trace(2), "marconi", 1e9, alpha="best"), "alpha"),
    (lambda: simulate(chat_trace(2), "sglang+", 1e9, alpha="best"), "alpha"),
    (lambda: simulate(chat_trace(2), "lfu", 1e9), "policy"),
    (lambda: simulate(chat_trace(2), "vllm+", math.nan), "capacity"),
    (lambda: simulate(chat_trace(2), "vllm+", 1e9, block=0), "block"),
    (lambda: simulate(chat_trace(2), "marconi", 1e9, block=2.5), "block"),           # checked for every policy
    (lambda: simulate([], "marconi", 1e9), "at least one request"),
    # widgets
    (lambda: policy_hit_rates(chat_trace(3), 1e9, alpha=-1), "alpha"),
    (lambda: policy_hit_rates(chat_trace(3), 1e9, alpha=math.nan), "alpha"),
    (lambda: policy_hit_rates(chat_trace(3), 1e9, policies=["lru"]), "policies"),
    (lambda: hit_rate_bars({}), "rates"),
    (lambda: hit_rate_bars({"marconi": 1.5}), "rates"),
    (lambda: hit_rate_bars({"marconi": math.nan}), "rates"),
    (lambda: sweep_capacity(chat_trace(3), [], show_progress=False), "capacities"),
    (lambda: sweep_capacity(chat_trace(3), [-1.0], show_progress=False), "capacities"),
    (lambda: plot_capacity_sweep([1e9, 2e9], {"marconi": [0.5]}), "one rate per capacity"),
    (lambda: plot_capacity_sweep([1e9, math.inf], {"marconi": [0.5, 0.6]}), "capacities"),
    (lambda: plot_capacity_sweep([-1e9, 2e9], {"marconi": [0.5, 0.6]}), "capacities"),
    (lambda: plot_capacity_sweep([1e9, 2e9], {"marconi": [0.5, math.nan]}), "rates"),
    (lambda: plot_capacity_sweep([1e9, 2e9], {"marconi": [0.5, 1.2]}), "rates"),
    (lambda: plot_efficiency([10, 100], {"a": [1.0, math.inf]}), "table"),
    (lambda: plot_efficiency([10, 100], {"a": [1.0, -2.0]}), "table"),
    (lambda: plot_efficiency([0, 10], {"a": [1.0, 2.0]}), "lengths"),
    (lambda: plot_efficiency([10, 100], {"a": [1.0]}), "table"),
    (lambda: plot_reuse(0.5, 1.2), "state_frac"),
    (lambda: plot_reuse(math.nan, 0.1), "kv_frac"),
    (lambda: plot_reuse(0.5, 0.1, reported=(0.2,)), "reported"),
    (lambda: plot_breakdown({}), "results"),
    (lambda: plot_breakdown({"marconi": 0.5}), "SimResult"),
    (lambda: explorer({}), "traces"),
]


@pytest.mark.parametrize("call, match", BAD_INPUT, ids=[m for _, m in BAD_INPUT])
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()
    plt.close("all")


# ---------------------------------------------------------------------------------------------------- plots
@pytest.fixture(scope="module")
def chat():
    return chat_trace(80, "lmsys", seed=0)


def test_policy_hit_rates_and_bars(chat):
    rates = policy_hit_rates(chat, 1e9, alpha=0.5)
    assert list(rates) == list(POLICIES)
    assert rates["sglang+"] > rates["vllm+"] > 0 and rates["marconi"] > 0
    assert rates["marconi"] == simulate(chat, "marconi", 1e9, alpha=0.5).token_hit_rate
    fig = hit_rate_bars(rates)
    ax = fig.axes[0]
    assert [b.get_height() for b in ax.patches] == list(rates.values())          # bar heights are the rates
    assert [t.get_text() for t in ax.get_xticklabels()] == list(rates)
    assert [t.get_text() for t in ax.texts] == [f"{v:.1%}" for v in rates.values()]
    plt.close(fig)


def test_capacity_sweep_lines_are_the_sweep(chat):
    caps = [0.5e9, 2e9]
    sw = sweep_capacity(chat, caps, show_progress=False)
    assert np.all(np.diff(sw["sglang+"]) >= 0) and sw["sglang+"][-1] > 0
    assert sw["vllm+"][1] == simulate(chat, "vllm+", 2e9).token_hit_rate
    fig = plot_capacity_sweep(caps, sw)
    lines = {ln.get_label(): ln for ln in fig.axes[0].lines}
    assert list(lines) == list(POLICIES)
    for p in POLICIES:
        np.testing.assert_array_equal(lines[p].get_xdata(), [0.5, 2.0])          # GB
        np.testing.assert_array_equal(lines[p].get_ydata(), sw[p])
    plt.close(fig)


def test_plot_efficiency_lines_are_the_table():
    lengths = np.array([10, 100, 1000])
    table = {"a": np.array([1.0, 2.0, 3.0]), "b": np.array([0.5, 0.5, 0.4])}
    fig = plot_efficiency(lengths, table)
    ax = fig.axes[0]
    assert [ln.get_label() for ln in ax.lines] == ["a", "b"] and ax.get_xscale() == "log"
    for ln, v in zip(ax.lines, table.values()):
        np.testing.assert_array_equal(ln.get_xdata(), lengths)
        np.testing.assert_array_equal(ln.get_ydata(), v)
    plt.close(fig)


def test_plot_reuse_bars_are_measured_and_reported():
    fig = plot_reuse(0.5, 0.01, reported=(0.25, 0.004))
    heights = [b.get_height() for b in fig.axes[0].patches]
    assert heights == [0.5, 0.01, 0.25, 0.004]
    plt.close(fig)


def test_plot_breakdown_bars_are_the_buckets(chat):
    results = {p: simulate(chat, p, 1e9, alpha=0.5) for p in ("sglang+", "marconi")}
    fig = plot_breakdown(results, edges=(500,))
    heights = [b.get_height() for b in fig.axes[0].patches]
    expect = [rate for p in results for _, _, _, rate in results[p].breakdown((500,))]
    assert heights == expect and len(expect) == 4
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["< 500", ">= 500"]
    plt.close(fig)
    fig = plot_breakdown(results, edges=())                                      # one bucket: every request
    assert [b.get_height() for b in fig.axes[0].patches] == [r.token_hit_rate for r in results.values()]
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["all lengths"]
    plt.close(fig)


def test_explorer_wires_the_controls(chat):
    w = explorer({"chat": chat, "chat2": chat}, capacities_gb=(1, 2), alphas=(0.0, 0.5))
    assert isinstance(w, ipywidgets.interactive)
    controls = {c.description: c for c in w.children if hasattr(c, "options")}
    assert list(controls["workload"].options) == ["chat", "chat2"]
    assert list(controls["capacity_gb"].options) == [1, 2] and list(controls["alpha"].options) == [0.0, 0.5]
    plt.close("all")


def test_default_alphas_start_at_lru():
    assert DEFAULT_ALPHAS[0] == 0.0 and list(DEFAULT_ALPHAS) == sorted(DEFAULT_ALPHAS)


@pytest.mark.parametrize("bad, match", [
    (dict(t=[0.0, np.nan, 2.0]), "last_access"),
    (dict(t=[0.0, np.inf, 2.0]), "last_access"),
    (dict(fl=[1e12, np.nan, 1e12]), "saved_flops"),
    (dict(fl=[1e12, -1.0, 1e12]), "saved_flops"),
    (dict(nb=[1e6, np.nan, 1e6]), "nbytes"),
    (dict(nb=[1e6, np.inf, 1e6]), "nbytes"),
    (dict(nb=[1e6, -1.0, 1e6]), "nbytes"),
    (dict(nb=np.array(["1", "2", "3"])), "nbytes"),
    (dict(t=[0.0, 1.0]), "same shape"),
    (dict(t=[[0.0, 1.0, 2.0]]), "last_access"),
    (dict(a=np.nan), "alpha"),
    (dict(a=-0.5), "alpha"),
    (dict(a="0.5"), "alpha"),
])
def test_fast_path_scores_refuse_what_would_change_a_score(bad, match):
    """node_scores (the cache's per-eviction path) used to turn NaN times into all-zero recency and negative or NaN
    byte counts into efficiency 0, silently; it now refuses them with checks that cost a min and a max."""
    args = dict(t=[0.0, 1.0, 2.0], fl=[1e12, 2e12, 3e12], nb=[1e6, 2e6, 3e6], a=0.5)
    args.update(bad)
    with pytest.raises(ValueError, match=match):
        node_scores(args["t"], args["fl"], args["nb"], args["a"])
    assert node_scores([], [], [], 0.5).shape == (0,)
