"""FLOP/byte model of the 7B hybrid: exercise 4 within 1 %, the ledger's constants, efficiency trends."""
import numpy as np
import pytest

from hybrid_lab.costs.shape7b import EXERCISE4_REPORTED, L7B, HybridLayout, efficiency_table, exercise4


def test_ledger_constants():
    assert L7B.kv_bytes_per_token == 65_536
    assert L7B.state_bytes == 25_165_824
    assert L7B.state_bytes / L7B.kv_bytes_per_token == 384          # exercise 1


def test_agrees_with_lead_ledger():
    ledger = pytest.importorskip("hybrid_lab.costs.ledger")
    assert ledger.kv_bytes_per_token(ledger.HYBRID_7B) == L7B.kv_bytes_per_token
    assert ledger.ssm_state_bytes(ledger.HYBRID_7B) == L7B.state_bytes


def test_parameter_count_is_about_7b():
    assert 7.5e9 < L7B.params < 7.8e9
    assert L7B.mlp_params == 3 * 4096 * 14336


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
    assert L7B.saved_flops(8000, 500) == pytest.approx(L7B.prefill_flops(8000) - L7B.prefill_flops(500))


def test_bad_layouts():
    with pytest.raises(ValueError, match="n_ssm"):
        HybridLayout(n_ssm=-1)
    with pytest.raises(ValueError, match="divisible"):
        HybridLayout(n_heads=7)
    with pytest.raises(ValueError, match="at least one"):
        HybridLayout(n_attn=0, n_ssm=0)
    with pytest.raises(ValueError, match="L must be"):
        L7B.prefill_flops(-3)
