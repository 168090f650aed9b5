"""The three-costs ledger: lecture 10's numbers (exercises 1 and 5, §3's batch), one formula (the shape's), the
deprecated ``ModelShape`` alias, and bad input."""
import math

import numpy as np
import pytest

from hybrid_lab.costs import ledger as lg
from hybrid_lab.costs.shape7b import HybridLayout

M = lg.HYBRID_7B
MODELS = (lg.TRANSFORMER_7B, lg.GQA_7B, lg.HYBRID_7B)


def test_lecture_numbers():
    assert lg.kv_bytes_per_token(M) == 65_536
    assert lg.ssm_state_bytes(M) == 25_165_824
    assert lg.state_in_tokens(M) == 384
    assert round(float(lg.snapshot_bytes(M, 10_000, 16)) / lg.GB, 1) == 16.4
    assert round((10_000 // 32) * lg.ssm_state_bytes(M) / lg.GB, 2) == 7.85
    assert round(10_000 * lg.kv_bytes_per_token(M) / lg.GB, 2) == 0.66
    assert round(float(lg.bounded_snapshot_bytes(M, 10_000)) / lg.GB, 2) == 0.71


def test_batch_and_costs():
    assert int(lg.max_batch(lg.TRANSFORMER_7B, 32768)) == 3
    assert int(lg.max_batch(M, 32768)) == 29              # weights: the model's own P in FP16, 15.31 GB
    np.testing.assert_array_equal(lg.max_batch(M, np.array([4096, 131072])), [220, 7])
    assert int(lg.max_batch(M, 32768, weight_bytes=14e9)) == 30       # the old flat 14 GB
    assert lg.kv_bytes_per_token(lg.GQA_7B) * 4 == lg.kv_bytes_per_token(lg.TRANSFORMER_7B)
    f = lg.prefill_flops(lg.TRANSFORMER_7B, np.array([1000, 2000]))
    assert f[1] > 2 * f[0]                                     # the quadratic term
    c = lg.three_costs(M, 1024)
    assert c["kv_memory_bytes"] == c["decode_read_bytes"] == 1024 * 65_536 + 25_165_824


def test_weights_are_the_models_own_and_read_every_step():
    assert lg.weight_bytes(lg.TRANSFORMER_7B) == lg.TRANSFORMER_7B.params * 2
    assert round(lg.weight_bytes(lg.TRANSFORMER_7B) / lg.GB, 2) == 15.57           # P = 7.78B, FP16
    assert lg.weight_bytes(lg.GQA_7B) < lg.weight_bytes(lg.TRANSFORMER_7B)         # smaller K/V projections
    one = lg.decode_step_bytes(M, 4096)
    assert one == lg.weight_bytes(M) + lg.decode_bytes_read(M, 4096)
    eight = lg.decode_step_bytes(M, 4096, batch=8)
    assert eight - one == 7 * lg.decode_bytes_read(M, 4096)                        # weights read once per step
    with pytest.raises(ValueError, match="batch"):
        lg.decode_step_bytes(M, 4096, batch=0)


@pytest.mark.parametrize("m", MODELS, ids=lambda m: m.name)
def test_ledger_uses_the_shapes_formulas(m):
    L = np.array([0, 1, 4096, 131072])
    assert lg.kv_bytes_per_token(m) == m.kv_bytes_per_token and lg.ssm_state_bytes(m) == m.state_bytes
    np.testing.assert_array_equal(lg.prefill_flops(m, L), m.prefill_flops(L))
    np.testing.assert_array_equal(lg.sequence_bytes(m, L), m.entry_bytes(L, 1))
    np.testing.assert_array_equal(lg.three_costs(m, L)["prefill_flops"], m.prefill_flops(L))
    assert lg.snapshot_bytes(m, 100, 16) == m.entry_bytes(100, 6)
    assert lg.bounded_snapshot_bytes(m, 100, 3) == m.entry_bytes(100, 3)


def test_state_in_tokens_without_attention_layers_is_inf():
    assert lg.state_in_tokens(M.with_(n_attn=0)) == math.inf            # was ZeroDivisionError
    assert lg.state_in_tokens(lg.TRANSFORMER_7B) == 0


def test_model_shape_is_a_deprecated_alias_of_the_one_shape():
    with pytest.deprecated_call():
        m = lg.ModelShape("Hybrid 7B", n_attn=4, n_ssm=24)
    assert isinstance(m, HybridLayout) and m == lg.HYBRID_7B and m.name == "Hybrid 7B"
    with pytest.deprecated_call():
        g = lg.ModelShape("GQA", n_attn=32, n_kv_heads=8, d_head=128, ssm_d_inner=4096, bytes_per_elem=2,
                          params=lg.GQA_7B.params)
    assert g == lg.GQA_7B and lg.kv_bytes_per_token(g) == 131_072


@pytest.mark.parametrize("kwargs, msg", [({"d_head": 64}, "d_head"), ({"ssm_d_inner": 8192}, "ssm_d_inner"),
                                         ({"params": 7e9}, "params"), ({"n_kv_heads": 5}, "n_kv_heads"),
                                         ({"n_attn": -1}, "n_attn"), ({"n_ssm": 1.5}, "n_ssm"),
                                         ({"ssm_d_state": 0}, "ssm_d_state"), ({"bytes_per_elem": 2.0}, "bytes_per_elem")])
def test_model_shape_refuses_what_the_one_shape_derives(kwargs, msg):
    args = {"name": "x", "n_attn": 1, **kwargs}
    with pytest.deprecated_call(), pytest.raises(ValueError, match=msg):
        lg.ModelShape(**args)


BAD_L = [float("nan"), float("inf"), -float("inf"), -1, "4096", True, np.array([10.0, np.nan])]


@pytest.mark.parametrize("fn", [lg.three_costs, lg.sequence_bytes, lg.decode_bytes_read, lg.prefill_flops,
                                lg.max_batch, lg.bounded_snapshot_bytes, lambda m, L: lg.snapshot_bytes(m, L, 16)])
@pytest.mark.parametrize("L", BAD_L, ids=repr)
def test_bad_lengths_raise(fn, L):
    with pytest.raises(ValueError, match=r"\bL\b"):
        fn(M, L)


@pytest.mark.parametrize("call, msg", [
    (lambda: lg.snapshot_bytes(M, 100, 0), "every"),
    (lambda: lg.snapshot_bytes(M, 100, 2.5), "every"),
    (lambda: lg.bounded_snapshot_bytes(M, 100, -1), "n_states"),
    (lambda: lg.max_batch(M, 10, hbm_bytes=1e9, weight_bytes=2e9), "hbm_bytes"),
    (lambda: lg.max_batch(M, 10, hbm_bytes=float("nan")), "hbm_bytes"),
    (lambda: lg.max_batch(M, 10, weight_bytes=-1.0), "weight_bytes"),
    (lambda: lg.max_batch(lg.TRANSFORMER_7B, 0), "L must be > 0"),       # an empty sequence: any batch fits
    (lambda: lg.kv_bytes_per_token("HYBRID_7B"), "m must be a HybridLayout"),
    (lambda: lg.three_costs(None, 10), "m must be a HybridLayout"),
])
def test_bad_inputs(call, msg):
    with pytest.raises(ValueError, match=msg):
        call()
