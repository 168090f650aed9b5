"""Marconi's eviction score and α tuning by bootstrap replay."""
import numpy as np
import pytest

from hybrid_lab.costs.shape7b import L7B
from hybrid_lab.serving.marconi import eviction_scores, flop_efficiency, normalize, run_marconi_auto, tune_alpha
from hybrid_lab.serving.radix_cache import RadixCache, simulate
from hybrid_lab.serving.workloads import chat_trace


def test_normalize_and_efficiency():
    assert np.allclose(normalize([2.0, 4.0, 3.0]), [0.0, 1.0, 0.5])
    assert np.allclose(normalize([5.0, 5.0]), [0.0, 0.0])
    assert np.allclose(flop_efficiency([10.0, 6.0, 1.0], [2.0, 3.0, 0.0]), [5.0, 2.0, 0.0])


def test_scores_alpha_zero_is_recency():
    t = np.array([5.0, 1.0, 3.0])
    s = eviction_scores(t, [1e12, 1e15, 1e9], [1e6, 1e6, 1e6], 0.0)
    assert np.allclose(s, [1.0, 0.0, 0.5])
    assert np.argmin(s) == 1                               # LRU victim


def test_scores_reward_flop_efficiency():
    """Exercise 4: A (500 tokens) and B (8,000 tokens) used at the same time: B saves more FLOPs per byte, so
    any α > 0 evicts A first."""
    L = np.array([500, 8000])
    saved = L7B.prefill_flops(L)
    nbytes = L7B.entry_bytes(L)
    s = eviction_scores([7.0, 7.0], saved, nbytes, 0.5)
    assert s[0] < s[1] and np.allclose(s, [0.0, 0.5])
    # recency can outweigh efficiency when α is small
    s = eviction_scores([1.0, 0.0], saved, nbytes, 0.5)
    assert np.argmin(s) == 1


def test_score_errors():
    with pytest.raises(ValueError, match="alpha"):
        eviction_scores([1.0], [1.0], [1.0], -0.5)
    with pytest.raises(ValueError, match="same shape"):
        eviction_scores([1.0, 2.0], [1.0], [1.0], 0.5)
    with pytest.raises(ValueError, match="nbytes"):
        flop_efficiency([1.0], [-1.0])


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
    # the snapshot itself is untouched by the replays
    assert cache.stats["requests"] == 60
    # replay = running the window with that α from the snapshot
    ref = cache.clone()
    ref.alpha = 2.0
    hit = sum(ref.serve(r) for r in tr[60:])
    assert s1[2.0] == pytest.approx(hit / sum(r.n_input for r in tr[60:]))


def test_run_marconi_auto_tunes_after_first_eviction():
    tr = chat_trace(300, "sharegpt", seed=0)
    res = run_marconi_auto(tr, 2e9, bootstrap=5, alphas=(0.0, 0.5, 1.0), processes=1)
    start, stop = res.stats["bootstrap_window"]
    assert 0 < start < stop <= len(tr)
    assert stop - start == min(len(tr) - start, 5 * start)
    assert set(res.alpha_scores) == {0.0, 0.5, 1.0}
    assert res.alpha == max(sorted(res.alpha_scores), key=lambda a: (round(res.alpha_scores[a], 12), -a))
    assert 0 < res.token_hit_rate < 1
    # before tuning Marconi is LRU: the first `stop` requests hit exactly like SGLang+
    lru = simulate(tr, "sglang+", 2e9)
    assert np.array_equal(res.hit[:stop], lru.hit[:stop])
    with pytest.raises(ValueError, match="bootstrap"):
        run_marconi_auto(tr, 2e9, bootstrap=0)
    with pytest.raises(ValueError, match="alphas"):
        tune_alpha(RadixCache(1e9), tr[:3], alphas=[-1.0])


def test_widget_helpers():
    import matplotlib.figure

    from hybrid_lab.widgets.marconi import (explorer, hit_rate_bars, plot_breakdown, plot_capacity_sweep,
                                            plot_efficiency, plot_reuse, policy_hit_rates, sweep_capacity)

    tr = chat_trace(80, "lmsys", seed=0)
    rates = policy_hit_rates(tr, 1e9, alpha=0.5)
    assert set(rates) == {"vllm+", "sglang+", "marconi"}
    assert rates["sglang+"] > rates["vllm+"] > 0 and rates["marconi"] > 0
    assert isinstance(hit_rate_bars(rates), matplotlib.figure.Figure)
    sw = sweep_capacity(tr, [0.5e9, 2e9], show_progress=False)
    assert np.all(np.diff(sw["sglang+"]) >= 0) and sw["sglang+"][-1] > 0
    assert isinstance(plot_capacity_sweep([0.5e9, 2e9], sw), matplotlib.figure.Figure)
    assert isinstance(plot_efficiency([10, 100], {"a": np.array([1.0, 2.0])}), matplotlib.figure.Figure)
    assert isinstance(plot_reuse(0.5, 0.01), matplotlib.figure.Figure)
    assert isinstance(plot_breakdown({"sglang+": simulate(tr, "sglang+", 1e9)}, edges=(500,)), matplotlib.figure.Figure)
    w = explorer({"chat": tr}, capacities_gb=(1, 2), alphas=(0.0, 0.5))
    import ipywidgets

    assert isinstance(w, ipywidgets.Widget)
    with pytest.raises(ValueError, match="alpha"):
        policy_hit_rates(tr, 1e9, alpha=-1)
    with pytest.raises(ValueError, match="empty"):
        hit_rate_bars({})
