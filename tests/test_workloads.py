"""Synthetic traces: determinism, sharing structure, JSONL round trip, validation."""
import numpy as np
import pytest

from hybrid_lab.serving.workloads import (Request, agent_trace, chat_trace, exercise3_trace, load_jsonl, save_jsonl,
                                  shared_prefix_trace, trace_stats, validate_trace)


def _same(a, b):
    return len(a) == len(b) and all(
        x.session == y.session and x.turn == y.turn and np.array_equal(x.input_ids, y.input_ids)
        and np.array_equal(x.output_ids, y.output_ids) for x, y in zip(a, b))


@pytest.mark.parametrize("make", [lambda s: chat_trace(40, "lmsys", seed=s), lambda s: chat_trace(30, "sharegpt", seed=s),
                                  lambda s: agent_trace(200, seed=s), lambda s: shared_prefix_trace(100, seed=s)])
def test_seeded_and_nonempty(make):
    a, b, c = make(0), make(0), make(1)
    assert _same(a, b) and not _same(a, c)
    assert trace_stats(a)["input_tokens"] > 0


def test_multi_turn_inputs_extend_previous_turn():
    tr = chat_trace(50, "lmsys", seed=3)
    last = {}
    for r in tr:
        if r.turn > 0:
            prev = last[r.session]
            n = len(prev)
            assert r.n_input > n and np.array_equal(r.input_ids[:n], prev)
        last[r.session] = np.concatenate([r.input_ids, r.output_ids])
    assert max(r.turn for r in tr) >= 2


def test_agent_lengths_spread_wide():
    s = trace_stats(agent_trace(2000, seed=0))
    assert s["requests"] == 2000
    assert s["input_p95"] > 3 * s["input_p50"] > 3 * s["input_p5"]
    assert s["input_p50"] > 4000


def test_shared_prefixes_repeat():
    tr = shared_prefix_trace(200, seed=0)
    firsts = [tuple(r.input_ids[:32]) for r in tr if r.turn == 0]
    assert len(set(firsts)) < len(firsts) / 3                   # popular prefixes repeat


def test_jsonl_round_trip(tmp_path):
    tr = chat_trace(10, seed=0)
    p = tmp_path / "t.jsonl"
    save_jsonl(tr, p)
    assert _same(load_jsonl(p), tr)
    p.write_text('{"session": 0, "turn": 0}\n')
    with pytest.raises(ValueError, match="not a trace line"):
        load_jsonl(p)


def test_validation_errors():
    one = np.ones(3, np.int32)
    with pytest.raises(ValueError, match="unknown session"):
        validate_trace([Request(7, 1, one, one)])
    with pytest.raises(ValueError, match="empty input"):
        validate_trace([Request(0, 0, np.zeros(0, np.int32), one)])
    with pytest.raises(ValueError, match="expects turn 1"):
        validate_trace([Request(0, 0, one, one), Request(0, 2, one, one)])
    with pytest.raises(ValueError, match=">= 0"):
        validate_trace([Request(0, 0, -one, one)])
    with pytest.raises(ValueError, match="1-D integer"):
        validate_trace([Request(0, 0, one.astype(float), one)])
    with pytest.raises(ValueError, match="kind"):
        chat_trace(3, kind="reddit")
    with pytest.raises(ValueError, match="len_d"):
        exercise3_trace(len_d=0)


def test_exercise3_structure():
    r1, r2, r3, r4 = exercise3_trace(len_s=5, len_d=7, len_q=3, len_a=4, len_f=2)
    assert np.array_equal(r1.input_ids[:12], r2.input_ids[:12]) and r1.input_ids[12] != r2.input_ids[12]
    assert np.array_equal(r4.input_ids[:19], np.concatenate([r1.input_ids, r1.output_ids]))
