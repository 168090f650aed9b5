"""DSA roofline: every number of lecture 10 §5.3 and exercises 6 and 7 (DeepSeek-V3.2 report §2), to the stated
digits; bad input; the roofline plot drawn from it (asserted on its data)."""
import numpy as np
import pytest

from hybrid_lab.costs.dsa_cost import (DEEPSEEK_V32, DSAConfig, decode_bytes, decode_crossover, kv_overhead,
                                 prefill_flops, prefill_speedup_limit)
from hybrid_lab.widgets.dsa import plot_roofline, roofline_summary


def test_per_pair_costs():
    assert DEEPSEEK_V32.mla_flops_per_pair == 81_920
    assert DEEPSEEK_V32.index_flops_per_pair == 16_384


def test_decode_numbers():
    assert decode_crossover() == pytest.approx(2304)
    assert round(float(decode_bytes(2048)["speedup"]), 2) == 0.90           # DSA 10% slower
    assert round(float(decode_bytes(4096)["speedup"]), 2) == 1.64
    d = decode_bytes(np.array([1000, 2304, 3000]))
    assert d["speedup"][0] < 1 and d["speedup"][1] == pytest.approx(1.0) and d["speedup"][2] > 1
    assert decode_bytes(100)["dsa"] == 100 * (128 + 1152)                    # L < k: every latent is read anyway


def test_prefill_numbers():
    f = prefill_flops(65536)
    assert round(float(f["dense"]) / 1e15, 1) == 10.7
    assert round(float(f["dsa_main"]) / 1e15, 2) == 0.66
    assert round(float(f["indexer"]) / 1e15, 2) == 2.15
    assert round(float(f["indexer_fp8"]) / 1e15, 2) == 1.07
    assert round(float(f["speedup"]), 1) == 6.2
    assert round(float(prefill_flops(131072)["speedup"]), 1) == 7.6
    assert prefill_speedup_limit() == pytest.approx(10.0)
    assert float(prefill_flops(2 ** 24)["speedup"]) < 10.0


def test_prefill_short_prompt_is_all_pairs():
    f = prefill_flops(1000)
    assert f["dsa_main"] == f["dense"] and f["speedup"] < 1


def test_kv_overhead():
    assert round(kv_overhead(), 2) == 0.11


BAD_L = [0, -1, 1.5, 2048.0, float("nan"), float("inf"), "2048", True, None, [4096, 0], np.array([4096.0, np.nan])]


@pytest.mark.parametrize("fn", [decode_bytes, prefill_flops])
@pytest.mark.parametrize("L", BAD_L, ids=repr)
def test_bad_lengths_raise(fn, L):
    with pytest.raises(ValueError, match=r"^L "):
        fn(L)


@pytest.mark.parametrize("kwargs, msg", [({"topk": 0}, "topk"), ({"n_layers": 2.0}, "n_layers"),
                                         ({"latent_bytes": -1}, "latent_bytes"), ({"qk_dim": True}, "qk_dim"),
                                         ({"fp8_speedup": 0.0}, "fp8_speedup"),
                                         ({"fp8_speedup": float("inf")}, "fp8_speedup"),
                                         ({"fp8_speedup": float("nan")}, "fp8_speedup")])
def test_bad_configs(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        DSAConfig(**kwargs)


@pytest.mark.parametrize("fn", [lambda c: decode_bytes(4096, c), lambda c: prefill_flops(4096, c), decode_crossover,
                                prefill_speedup_limit, kv_overhead])
def test_cfg_must_be_a_config(fn):
    with pytest.raises(ValueError, match="cfg must be a DSAConfig"):
        fn({"topk": 2048})


def test_crossover_needs_index_keys_smaller_than_latents():
    with pytest.raises(ValueError, match="index_key_bytes"):
        decode_crossover(DSAConfig(index_key_bytes=1152))


def test_roofline_plot_draws_the_model():
    s = roofline_summary(4096)
    assert s["decode_speedup"] == pytest.approx(1.6364, abs=1e-4)
    fig = plot_roofline(65536)
    dec_ax, speed_ax = fig.axes
    Ls = dec_ax.lines[0].get_xdata()
    dec, pre = decode_bytes(Ls), prefill_flops(Ls)
    np.testing.assert_allclose(dec_ax.lines[0].get_ydata(), dec["dense"] / 1e6, rtol=0)
    np.testing.assert_allclose(dec_ax.lines[1].get_ydata(), dec["dsa"] / 1e6, rtol=0)
    assert dec_ax.lines[2].get_xdata()[0] == pytest.approx(decode_crossover())
    np.testing.assert_allclose(speed_ax.lines[0].get_ydata(), pre["speedup"], rtol=0)
    np.testing.assert_allclose(speed_ax.lines[1].get_ydata(), dec["speedup"], rtol=0)
    marked = speed_ax.lines[-1]                                 # the L = 65,536 markers
    s64 = roofline_summary(65536)
    np.testing.assert_allclose(marked.get_ydata(), [s64["prefill_speedup"], s64["decode_speedup"]])


def test_cost_per_million_follows_the_roofline():
    from hybrid_lab.costs import dsa_cost as dc
    c = dc.cost_per_million(np.array([1024, 2304, 131072]))
    np.testing.assert_allclose(c["decode_dense"] / c["decode_dsa"], dc.decode_bytes(np.array([1024, 2304, 131072]))["speedup"])
    assert c["decode_dsa"][0] > c["decode_dense"][0] and c["decode_dsa"][2] < c["decode_dense"][2] / 7
    # one token at 128K reads 61 x 1,152 x 131,072 B: at 3.35 TB/s and $2 per hour
    assert c["decode_dense"][2] == pytest.approx(2 / 3600 * 1e6 * 61 * 1152 * 131072 / 3.35e12)
    assert c["prefill_dense"][2] / 10 < c["prefill_dsa"][2] < c["prefill_dense"][2] / 8   # marginal: toward 10x
    assert dc.cost_per_million(4096, usd_per_gpu_hour=4.0)["decode_dsa"] == pytest.approx(
        2 * dc.cost_per_million(4096)["decode_dsa"])
    with pytest.raises(ValueError, match="usd_per_gpu_hour"):
        dc.cost_per_million(4096, usd_per_gpu_hour=0)
