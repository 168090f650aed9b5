"""The one 7B shape: its formulas (lecture 10 exercises 1 and 4), the presets, ``with_``, and bad input."""
import math

import numpy as np
import pytest

from hybrid_lab.costs import ledger
from hybrid_lab.costs.shape7b import (EXERCISE4_REPORTED, GQA_7B, HYBRID_7B, L7B, TRANSFORMER_7B, HybridLayout,
                                      efficiency_table, exercise4)


def test_hybrid_7b_constants():
    assert L7B is HYBRID_7B
    assert L7B.kv_bytes_per_token == 4 * 2 * 32 * 128 * 2 == 65_536
    assert L7B.state_bytes == 24 * 4096 * 128 * 2 == 25_165_824     # d_model × d_state per SSM layer (the decision)
    assert L7B.state_in_tokens == 384                                 # exercise 1
    assert L7B.bytes_per_elem == L7B.dtype_bytes == 2 and L7B.d_head == 128 and L7B.n_kv_heads == 32


def test_presets_are_the_one_shape_with_gqa_in_params_and_kv():
    assert all(isinstance(m, HybridLayout) for m in (TRANSFORMER_7B, GQA_7B, HYBRID_7B))
    assert (ledger.TRANSFORMER_7B, ledger.GQA_7B, ledger.HYBRID_7B) == (TRANSFORMER_7B, GQA_7B, HYBRID_7B)
    assert TRANSFORMER_7B.kv_bytes_per_token == 4 * GQA_7B.kv_bytes_per_token == 524_288
    assert TRANSFORMER_7B.state_bytes == 0 and TRANSFORMER_7B.state_in_tokens == 0
    # GQA shrinks W_k and W_v from d×d to d×(8·128) in each of the 32 layers
    assert TRANSFORMER_7B.params - GQA_7B.params == 32 * 2 * 4096 * (4096 - 8 * 128)
    assert TRANSFORMER_7B.attn_params == 4 * 4096 * 4096


def test_parameter_count_is_about_7b():
    assert 7.5e9 < L7B.params < 7.8e9
    assert L7B.mlp_params == 3 * 4096 * 14336
    assert L7B.params == (4 * L7B.attn_params + 24 * L7B.ssm_params + 28 * L7B.mlp_params + (4 + 24 + 28 + 1) * 4096)


def test_prefill_flops_formula():
    L = np.array([0, 1, 500, 8000])
    np.testing.assert_array_equal(L7B.prefill_flops(L), 2.0 * L7B.params * L + 2.0 * 4 * 4096 * L * L)
    assert L7B.prefill_flops(59_393.5) > L7B.prefill_flops(59_393)          # real-valued lengths are allowed
    assert L7B.saved_flops(8000, 500) == pytest.approx(L7B.prefill_flops(8000) - L7B.prefill_flops(500))
    assert L7B.entry_bytes(10, n_states=2) == 10 * 65_536 + 2 * 25_165_824


@pytest.mark.parametrize("key", ["tflop", "mb", "kflop_per_byte"])
def test_exercise4_within_one_percent(key):
    got = exercise4()
    for name, rep in EXERCISE4_REPORTED.items():
        assert got[name][key] == pytest.approx(rep[key], rel=0.01)


def test_efficiency_trends():
    L = np.array([100, 1000, 10000])
    t = efficiency_table(L, {"hybrid": L7B, "transformer": L7B.with_(n_attn=32, n_ssm=0),
                             "more ssm": L7B.with_(n_attn=2, n_ssm=26)})
    assert np.all(np.diff(t["hybrid"]) > 0)                            # longer prefixes are worth more per byte
    assert t["transformer"][-1] / t["transformer"][0] < 1.5            # ~constant for a Transformer
    assert t["more ssm"][-1] / t["more ssm"][0] > t["hybrid"][-1] / t["hybrid"][0]
    np.testing.assert_allclose(t["hybrid"], L7B.prefill_flops(L) / L7B.entry_bytes(L) / 1e3)


def test_with_renames_and_keeps_mha():
    m = L7B.with_(n_attn=9, n_ssm=19)
    assert (m.n_attn, m.n_ssm, m.n_mlp) == (9, 19, 28)
    assert m.name == "9 attention + 19 SSM + 28 MLP layers"           # the 7B's label would be wrong
    assert L7B.with_(d_state=128) == L7B                               # equality ignores the display label
    assert L7B.with_(n_heads=16).n_kv_heads == 16                      # MHA stays MHA
    assert GQA_7B.with_(n_heads=16).n_kv_heads == 8                    # GQA keeps its KV heads
    assert L7B.with_(name="mine").name == "mine"
    assert "8 KV heads" in HybridLayout(n_attn=32, n_ssm=0, n_kv_heads=8).name


def test_state_in_tokens_without_attention_is_inf():
    pure_ssm = L7B.with_(n_attn=0)
    assert pure_ssm.kv_bytes_per_token == 0 and pure_ssm.state_in_tokens == math.inf


@pytest.mark.parametrize("kwargs, msg", [
    ({"n_ssm": -1}, "n_ssm"),
    ({"n_attn": 2.0}, "n_attn"),
    ({"n_attn": True}, "n_attn"),
    ({"d_state": 0}, "d_state"),
    ({"dtype_bytes": float("nan")}, "dtype_bytes"),
    ({"n_heads": 7}, "divisible"),
    ({"n_kv_heads": 5}, "n_kv_heads"),
    ({"n_kv_heads": 0}, "n_kv_heads"),
    ({"ssm_head_dim": 3000}, "ssm_head_dim"),
    ({"n_attn": 0, "n_ssm": 0}, "at least one"),
    ({"name": 7}, "name"),
])
def test_bad_layouts(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        HybridLayout(**kwargs)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -3, "100", True, [1, float("nan")], None, 1 + 2j])
def test_bad_lengths(bad):
    with pytest.raises(ValueError, match="L must"):
        L7B.prefill_flops(bad)
    with pytest.raises(ValueError, match="n_tokens must"):
        L7B.entry_bytes(bad)
    with pytest.raises(ValueError, match="end must"):
        L7B.saved_flops(bad)


def test_bad_counts_and_layouts():
    with pytest.raises(ValueError, match="n_states"):
        L7B.entry_bytes(10, n_states=-1)
    with pytest.raises(ValueError, match="start must be <= end"):
        L7B.saved_flops(10, 20)
    with pytest.raises(ValueError, match="0 bytes"):
        TRANSFORMER_7B.flop_efficiency(0)
    with pytest.raises(ValueError, match="layouts\\['x'\\]"):
        efficiency_table([100], {"x": "not a layout"})
    with pytest.raises(ValueError, match="layouts"):
        efficiency_table([100], {})
    with pytest.raises(ValueError, match="lengths"):
        efficiency_table([], {"7B": L7B})
    with pytest.raises(ValueError, match="lengths"):
        efficiency_table([100, float("nan")], {"7B": L7B})
    with pytest.raises(ValueError, match="layout"):
        exercise4(ledger)
