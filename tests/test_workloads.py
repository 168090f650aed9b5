"""Synthetic traces: determinism, sharing structure, Request, JSONL round trip, and bad input."""
import math

import numpy as np
import pytest

from hybrid_lab.serving.workloads import (Request, agent_trace, chat_trace, exercise3_trace, load_jsonl,
                                          regeneration_trace, save_jsonl, shared_prefix_trace, token_ids, trace_stats,
                                          validate_trace)

GENERATORS = {
    "chat lmsys": lambda seed: chat_trace(40, "lmsys", seed=seed),
    "chat sharegpt": lambda seed: chat_trace(30, "sharegpt", seed=seed),
    "agent": lambda seed: agent_trace(200, seed=seed),
    "shared prefix": lambda seed: shared_prefix_trace(100, seed=seed),
    "regeneration": lambda seed: regeneration_trace(10, 3, seed=seed),
}


def test_regeneration_samples_share_the_whole_input_not_the_output():
    tr = regeneration_trace(5, samples=4, seed=2, system_prompt_len=30)
    assert len(tr) == 20 and len({r.session for r in tr}) == 20
    for p in range(5):
        group = tr[4 * p: 4 * p + 4]
        assert all(np.array_equal(r.input_ids, group[0].input_ids) for r in group)
        assert len({r.output_ids[:1].tobytes() for r in group}) > 1          # the outputs differ
    assert all(np.array_equal(r.input_ids[:30], tr[0].input_ids[:30]) for r in tr)    # the shared system prompt


def _same(a, b):
    return len(a) == len(b) and all(
        x.session == y.session and x.turn == y.turn and x.n_input == y.n_input and np.array_equal(x.tokens, y.tokens)
        for x, y in zip(a, b))


@pytest.mark.parametrize("name", GENERATORS)
def test_seeded_and_nonempty(name):
    make = GENERATORS[name]
    a, b, c = make(0), make(0), make(1)
    assert _same(a, b) and not _same(a, c)
    assert trace_stats(a)["input_tokens"] > 0
    assert validate_trace(a) == a


def test_multi_turn_inputs_extend_previous_turn():
    tr = chat_trace(50, "lmsys", seed=3)
    last = {}
    for r in tr:
        if r.turn > 0:
            prev = last[r.session]
            assert r.n_input > len(prev) and np.array_equal(r.input_ids[: len(prev)], prev)
        last[r.session] = r.tokens
    assert max(r.turn for r in tr) >= 2


def test_a_sessions_turns_share_one_buffer():
    """The generators build a session once: every turn's tokens are a view of it (a trace costs no copies)."""
    tr = chat_trace(20, "sharegpt", seed=5)
    first = {}
    for r in tr:
        first.setdefault(r.session, r)
        assert np.shares_memory(r.tokens, first[r.session].tokens)
    assert any(r.turn > 0 for r in tr)


def test_agent_lengths_spread_wide():
    s = trace_stats(agent_trace(2000, seed=0))
    assert s["requests"] == 2000
    assert s["input_p95"] > 3 * s["input_p50"] > 3 * s["input_p5"]
    assert s["input_p50"] > 4000


def test_shared_prefixes_repeat():
    tr = shared_prefix_trace(200, seed=0)
    firsts = [tuple(r.input_ids[:32]) for r in tr if r.turn == 0]
    assert len(set(firsts)) < len(firsts) / 3                   # popular prefixes repeat


def test_exercise3_structure():
    r1, r2, r3, r4 = exercise3_trace(len_s=5, len_d=7, len_q=3, len_a=4, len_f=2)
    assert np.array_equal(r1.input_ids[:12], r2.input_ids[:12]) and r1.input_ids[12] != r2.input_ids[12]
    assert r3.input_ids[12] not in (r1.input_ids[12], r2.input_ids[12])
    assert np.array_equal(r4.input_ids[:19], r1.tokens) and r4.n_input == 21


def test_request_is_input_then_output():
    r = Request(3, 0, [5, 6, 7], np.array([8], np.int64))
    assert r.tokens.tolist() == [5, 6, 7, 8] and r.n_input == 3 and r.n_output == 1
    assert r.input_ids.tolist() == [5, 6, 7] and r.output_ids.tolist() == [8]
    assert Request(0, 0, [1]).n_output == 0                          # no output yet
    buf = np.arange(10, dtype=np.int32)
    v = Request.from_tokens(1, 0, buf[:6], 4)
    assert np.shares_memory(v.tokens, buf) and v.output_ids.tolist() == [4, 5]
    assert repr(v) == "Request(session=1, turn=0, n_input=4, n_output=2)"


def test_jsonl_round_trip(tmp_path):
    tr = chat_trace(10, seed=0)
    p = tmp_path / "t.jsonl"
    save_jsonl(tr, p)
    assert _same(load_jsonl(p), tr)
    assert _same(load_jsonl(str(p)), tr)


@pytest.mark.parametrize("line, what", [('{"session": 0, "turn": 0}', "missing keys"),
                                        ('{"session": 0, "turn": 0, "input": [-1], "output": []}', "negative id"),
                                        ('{"session": 0, "turn": 0, "input": [], "output": [1]}', "empty input"),
                                        ('{"session": -2, "turn": 0, "input": [1], "output": []}', "bad session"),
                                        ("not json", "not JSON")])
def test_load_jsonl_names_the_bad_line(tmp_path, line, what):
    p = tmp_path / "t.jsonl"
    p.write_text('{"session": 0, "turn": 0, "input": [1, 2], "output": [3]}\n' + line + "\n")
    with pytest.raises(ValueError, match=r"t.jsonl:2: not a trace line"):
        load_jsonl(p)


ONE = np.ones(3, np.int32)
BAD_INPUT = [
    # Request and token ids
    (lambda: Request(-1, 0, ONE), "session"),
    (lambda: Request(1.5, 0, ONE), "session"),
    (lambda: Request("a", 0, ONE), "session"),
    (lambda: Request(0, -1, ONE), "turn"),
    (lambda: Request(0, True, ONE), "turn"),
    (lambda: Request(0, 0, np.zeros(0, np.int32)), "input_ids must hold at least one token"),
    (lambda: Request(0, 0, ONE.astype(float)), "input_ids must be an integer array"),
    (lambda: Request(0, 0, np.ones((2, 2), np.int32)), "input_ids must be 1-D"),
    (lambda: Request(0, 0, -ONE), "input_ids must hold token ids >= 0"),
    (lambda: Request(0, 0, ONE, [0.5]), "output_ids"),
    (lambda: Request(0, 0, ONE, [-3]), "output_ids"),
    (lambda: Request.from_tokens(0, 0, ONE, 0), "n_input"),
    (lambda: Request.from_tokens(0, 0, ONE, 4), "n_input"),
    (lambda: Request.from_tokens(0, 0, ONE, 1.0), "n_input"),
    (lambda: Request.from_tokens(0, 0, [np.nan], 1), "tokens"),
    (lambda: token_ids("ids", [[1]]), "ids must be 1-D"),
    # traces
    (lambda: validate_trace(5), "trace must be a list"),
    (lambda: validate_trace("abc"), "trace must be a list"),
    (lambda: validate_trace([]), "at least one request"),
    (lambda: validate_trace([Request(0, 0, ONE), "x"]), r"trace\[1\] must be a Request"),
    (lambda: validate_trace([Request(7, 1, ONE, ONE)]), "unknown session"),
    (lambda: validate_trace([Request(0, 0, ONE, ONE), Request(0, 2, ONE, ONE)]), "expects turn 1"),
    (lambda: trace_stats([]), "at least one request"),
    (lambda: save_jsonl(chat_trace(2), 123), "path"),
    (lambda: load_jsonl(None), "path"),
    # generators
    (lambda: chat_trace(0), "n_sessions"),
    (lambda: chat_trace(2.5), "n_sessions"),
    (lambda: chat_trace(3, kind="reddit"), "kind"),
    (lambda: chat_trace(3, seed=-1), "seed"),
    (lambda: chat_trace(3, vocab=0), "vocab"),
    (lambda: chat_trace(3, vocab=2 ** 31), "vocab"),
    (lambda: chat_trace(3, system_prompt_len=-1), "system_prompt_len"),
    (lambda: chat_trace(3, concurrency=0), "concurrency"),
    (lambda: chat_trace(3, scale=0.0), "scale"),
    (lambda: chat_trace(3, scale=math.nan), "scale"),
    (lambda: chat_trace(3, scale=math.inf), "scale"),
    (lambda: chat_trace(3, scale=1e-5), "scale must be >= "),
    (lambda: agent_trace(0), "n_requests"),
    (lambda: agent_trace(5, mean_steps=0.5), "mean_steps"),
    (lambda: agent_trace(5, mean_steps=math.nan), "mean_steps"),
    (lambda: agent_trace(5, max_steps=0), "max_steps"),
    (lambda: agent_trace(5, scale=-1.0), "scale"),
    (lambda: shared_prefix_trace(0), "n_requests"),
    (lambda: shared_prefix_trace(5, n_system=0, n_fewshot=0, n_docs=0), "n_system"),
    (lambda: shared_prefix_trace(5, n_docs=-1), "n_docs"),
    (lambda: shared_prefix_trace(5, followup_prob=1.0), "followup_prob"),
    (lambda: shared_prefix_trace(5, followup_prob=math.nan), "followup_prob"),
    (lambda: shared_prefix_trace(5, zipf_a=math.inf), "zipf_a"),
    (lambda: shared_prefix_trace(5, zipf_a=-1.2), "zipf_a"),
    (lambda: regeneration_trace(0), "n_prompts"),
    (lambda: regeneration_trace(3, samples=0), "samples"),
    (lambda: regeneration_trace(3, prompt_median=0), "prompt_median"),
    (lambda: regeneration_trace(3, output_median=2.5), "output_median"),
    (lambda: regeneration_trace(3, system_prompt_len=-1), "system_prompt_len"),
    (lambda: exercise3_trace(len_d=0), "len_d"),
    (lambda: exercise3_trace(len_q=2.0), "len_q"),
    (lambda: exercise3_trace(vocab=2), "vocab"),
    (lambda: exercise3_trace(seed=-3), "seed"),
]


@pytest.mark.parametrize("call, match", BAD_INPUT, ids=[m for _, m in BAD_INPUT])
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("fn, kw, name", [
    (chat_trace, dict(n_sessions=2 ** 62), "n_sessions"),
    (chat_trace, dict(system_prompt_len=2 ** 62), "system_prompt_len"),
    (agent_trace, dict(n_requests=2 ** 62), "n_requests"),
    (agent_trace, dict(system_prompt_len=2 ** 62), "system_prompt_len"),
    (shared_prefix_trace, dict(n_requests=2 ** 62), "n_requests"),
    (shared_prefix_trace, dict(n_docs=2 ** 62), "n_docs"),
    (regeneration_trace, dict(samples=2 ** 62), "n_prompts or samples"),
    (regeneration_trace, dict(prompt_median=2 ** 62), "prompt_median"),
    (exercise3_trace, dict(len_d=2 ** 62), "len_d"),
])
def test_huge_counts_are_refused_by_name_not_looped(fn, kw, name):
    with pytest.raises(ValueError, match=rf"^{name} .*more than {2 ** 40} \(2\*\*40\)"):
        fn(**kw)
