import numpy as np
import pytest

from hybrid_lab.costs import ledger as lg

M = lg.HYBRID_7B


def test_seed_numbers():
    assert lg.kv_bytes_per_token(M) == 65_536
    assert lg.ssm_state_bytes(M) == 25_165_824
    assert lg.state_in_tokens(M) == 384
    assert round(lg.snapshot_bytes(M, 10_000, 16) / lg.GB, 1) == 16.4
    assert round((10_000 // 32) * lg.ssm_state_bytes(M) / lg.GB, 2) == 7.85
    assert round(10_000 * lg.kv_bytes_per_token(M) / lg.GB, 2) == 0.66
    assert round(lg.bounded_snapshot_bytes(M, 10_000) / lg.GB, 2) == 0.71


def test_batch_and_costs():
    assert int(lg.max_batch(lg.TRANSFORMER_7B, 32768)) == 3
    assert int(lg.max_batch(M, 32768)) == 30
    assert lg.kv_bytes_per_token(lg.GQA_7B) * 4 == lg.kv_bytes_per_token(lg.TRANSFORMER_7B)
    L = np.array([1000, 2000])
    f = lg.prefill_flops(lg.TRANSFORMER_7B, L)
    assert f[1] > 2 * f[0]  # the quadratic term
    c = lg.three_costs(M, 1024)
    assert c["kv_memory_bytes"] == 1024 * 65_536 + 25_165_824


def test_bad_inputs():
    with pytest.raises(ValueError, match="every"):
        lg.snapshot_bytes(M, 100, 0)
    with pytest.raises(ValueError, match="L"):
        lg.sequence_bytes(M, -1)
    with pytest.raises(ValueError, match="n_kv_heads"):
        lg.ModelShape("x", n_attn=1, n_heads=32, n_kv_heads=5)
    with pytest.raises(ValueError, match="n_attn"):
        lg.ModelShape("x", n_attn=-1)
    with pytest.raises(ValueError, match="hbm_bytes"):
        lg.max_batch(M, 10, hbm_bytes=1e9, weight_bytes=2e9)


def test_prefill_matches_flops7b_exercise4():
    from hybrid_lab.costs.shape7b import L7B
    assert lg.HYBRID_7B.params == L7B.params
    assert float(lg.prefill_flops(lg.HYBRID_7B, 500)) == float(L7B.prefill_flops(500))
    assert round(float(lg.prefill_flops(lg.HYBRID_7B, 500)) / 1e12, 1) == 7.7
