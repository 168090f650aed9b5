"""DSA roofline: every number of SYLLABUS §04 / seed 003 §5.3, exercises 6 and 7, to the stated digits."""
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


def test_bad_input():
    with pytest.raises(ValueError, match="L"):
        decode_bytes(0)
    with pytest.raises(ValueError, match="L"):
        prefill_flops(1.5)
    with pytest.raises(ValueError, match="topk"):
        DSAConfig(topk=0)


def test_roofline_widget_helpers():
    s = roofline_summary(4096)
    assert s["decode_speedup"] == pytest.approx(1.6364, abs=1e-4)
    fig = plot_roofline(65536)
    assert len(fig.axes) == 2 and len(fig.axes[0].lines) >= 3
