"""Seeded synthetic request traces for prefix-caching experiments (seed 003 §4.2, §4.4).

Marconi sorts prefix reuse into two kinds, and the generators produce both:

- input + output sharing: multi-turn chat (LMSys / ShareGPT-like lengths) and agent trajectories (SWE-bench-like,
  a wide spread of lengths): turn k's input is turn k-1's input + output + a new user message / tool result;
- pure-input sharing: many requests start with the same system prompt, few-shot block or long document.

A trace is plain data: a list of :class:`Request` (session, turn, input token ids, output token ids), saved and
loaded as JSONL so a trace can be replayed exactly. Only the lengths resemble the real datasets; the token ids are
random draws (distinct segments never share a prefix by accident unless ``vocab`` is tiny).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np


@dataclass
class Request:
    """One request: ``input_ids`` (the prompt, L_in >= 1) and ``output_ids`` (what the model decodes)."""

    session: int
    turn: int
    input_ids: np.ndarray
    output_ids: np.ndarray

    @property
    def n_input(self) -> int:
        return int(len(self.input_ids))

    @property
    def n_output(self) -> int:
        return int(len(self.output_ids))


def validate_trace(trace) -> list:
    """Check a trace and return it as a list; raise ``ValueError`` on the first bad request.

    Rules: every request is a :class:`Request` with a non-empty 1-D integer input of ids >= 0; a session's turns
    appear in order 0, 1, 2, ...; a turn > 0 must belong to a session already seen (else "unknown session").
    """
    trace = list(trace)
    next_turn = {}
    for i, r in enumerate(trace):
        if not isinstance(r, Request):
            raise ValueError(f"trace[{i}] must be a Request, got {type(r).__name__}")
        for name in ("input_ids", "output_ids"):
            a = getattr(r, name)
            if not isinstance(a, np.ndarray) or a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
                raise ValueError(f"trace[{i}].{name} must be a 1-D integer numpy array, got "
                                 f"{type(a).__name__} {getattr(a, 'shape', '')} {getattr(a, 'dtype', '')}")
            if a.size and a.min() < 0:
                raise ValueError(f"trace[{i}].{name} must hold token ids >= 0, got min {a.min()}")
        if r.input_ids.size == 0:
            raise ValueError(f"trace[{i}] (session {r.session}, turn {r.turn}) has an empty input: a request needs "
                             "at least one input token")
        expected = next_turn.get(r.session)
        if expected is None and r.turn != 0:
            raise ValueError(f"trace[{i}] refers to unknown session {r.session} (turn {r.turn}): a session must "
                             "start with turn 0")
        if expected is not None and r.turn != expected:
            raise ValueError(f"trace[{i}]: session {r.session} expects turn {expected} next, got turn {r.turn}")
        next_turn[r.session] = r.turn + 1
    return trace


# ---- JSONL -----------------------------------------------------------------------------------------------------

def save_jsonl(trace, path) -> None:
    """One JSON object per line: {"session", "turn", "input", "output"} (token ids as lists)."""
    trace = validate_trace(trace)
    with open(path, "w", encoding="utf-8") as f:
        for r in trace:
            f.write(json.dumps({"session": int(r.session), "turn": int(r.turn),
                                "input": r.input_ids.tolist(), "output": r.output_ids.tolist()}) + "\n")


def load_jsonl(path) -> list:
    """Inverse of :func:`save_jsonl`; the loaded trace is validated."""
    trace = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                trace.append(Request(int(d["session"]), int(d["turn"]),
                                     np.asarray(d["input"], dtype=np.int32).reshape(-1),
                                     np.asarray(d["output"], dtype=np.int32).reshape(-1)))
            except (KeyError, TypeError, json.JSONDecodeError) as e:
                raise ValueError(f"{path}:{lineno}: not a trace line with session, turn, input, output ({e})") from e
    return validate_trace(trace)


# ---- generators ---------------------------------------------------------------------------------------------------

def _lognormal_len(rng, median, sigma, lo, hi, size=None):
    """Integer lengths from a lognormal (median, sigma), clipped to [lo, hi]."""
    x = rng.lognormal(np.log(median), sigma, size=size)
    return np.clip(np.rint(x), lo, hi).astype(np.int64)


def _tokens(rng, n, vocab):
    return rng.integers(0, vocab, size=int(n), dtype=np.int32)


def _interleave(rng, sessions, concurrency, n_requests=None):
    """Round-robin-ish interleaving: keep ``concurrency`` sessions open, emit the next turn of a random open one.

    sessions: list of lists of Requests (one list per session, in turn order). Stops after ``n_requests``.
    """
    pending = list(range(len(sessions)))[::-1]     # stack of sessions not yet started
    open_, pos, out = [], {}, []
    limit = n_requests if n_requests is not None else sum(len(s) for s in sessions)
    while len(out) < limit and (open_ or pending):
        while len(open_) < concurrency and pending:
            s = pending.pop()
            open_.append(s)
            pos[s] = 0
        j = int(rng.integers(len(open_)))
        s = open_[j]
        out.append(sessions[s][pos[s]])
        pos[s] += 1
        if pos[s] == len(sessions[s]):
            open_.pop(j)
    return out


def _session(rng, sid, prefix, first_len, steps, step_in, step_out, vocab):
    """A multi-turn session: input_k = prefix + first + Σ_{j<k}(out_j + in_j) + ..., built in one buffer (views)."""
    parts = [prefix, _tokens(rng, first_len, vocab)]
    bounds = []                                     # (input_end, output_end) per turn
    n = len(prefix) + first_len
    for k in range(steps):
        if k > 0:
            parts.append(_tokens(rng, step_in[k], vocab))
            n += step_in[k]
        parts.append(_tokens(rng, step_out[k], vocab))
        bounds.append((n, n + step_out[k]))
        n += step_out[k]
    buf = np.concatenate(parts).astype(np.int32)
    return [Request(sid, k, buf[:a], buf[a:b]) for k, (a, b) in enumerate(bounds)]


CHAT_PRESETS = {
    # median / sigma of the lognormal per-turn lengths; turns ~ 1 + geometric(mean_turns - 1)
    "lmsys": dict(user_median=60, user_sigma=1.0, out_median=180, out_sigma=0.8, mean_turns=3.0, max_len=4000),
    "sharegpt": dict(user_median=90, user_sigma=1.1, out_median=300, out_sigma=0.7, mean_turns=5.0, max_len=6000),
}


def chat_trace(n_sessions: int = 200, kind: str = "lmsys", seed: int = 0, vocab: int = 32000,
               system_prompt_len: int = 0, concurrency: int = 32, scale: float = 1.0) -> list:
    """Multi-turn chat sessions with LMSys- or ShareGPT-like lengths (input + output sharing).

    Every turn's input extends the previous turn's input + output by a new user message. ``system_prompt_len`` > 0
    puts one shared system prompt in front of every session (pure-input sharing). ``scale`` multiplies all lengths
    (use it to shrink traces for the real mini model).
    """
    if kind not in CHAT_PRESETS:
        raise ValueError(f"kind must be one of {sorted(CHAT_PRESETS)}, got {kind!r}")
    if n_sessions < 1 or concurrency < 1:
        raise ValueError(f"n_sessions and concurrency must be >= 1, got {n_sessions}, {concurrency}")
    if not scale > 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    p = CHAT_PRESETS[kind]
    rng = np.random.default_rng(seed)
    system = _tokens(rng, round(system_prompt_len * scale), vocab)
    lo = 1
    sessions = []
    for sid in range(n_sessions):
        turns = int(rng.geometric(1.0 / p["mean_turns"]))     # >= 1, mean mean_turns
        user = _lognormal_len(rng, p["user_median"] * scale, p["user_sigma"], lo, p["max_len"] * scale, turns)
        out = _lognormal_len(rng, p["out_median"] * scale, p["out_sigma"], lo, p["max_len"] * scale, turns)
        sessions.append(_session(rng, sid, system, int(user[0]), turns, user, out, vocab))
    return validate_trace(_interleave(rng, sessions, concurrency))


def agent_trace(n_requests: int = 2000, seed: int = 0, vocab: int = 32000, system_prompt_len: int = 1500,
                concurrency: int = 16, mean_steps: float = 15.0, max_steps: int = 60, scale: float = 1.0) -> list:
    """SWE-agent-like trajectories: a shared system prompt, a task (issue + repo context), then steps of model
    action (thought + command) and tool observation; observations have a very wide length spread, so contexts
    range from ~2K to tens of thousands of tokens (the workload where FLOP-aware eviction matters most).
    """
    if n_requests < 1 or concurrency < 1:
        raise ValueError(f"n_requests and concurrency must be >= 1, got {n_requests}, {concurrency}")
    if not scale > 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    rng = np.random.default_rng(seed)
    system = _tokens(rng, round(system_prompt_len * scale), vocab)
    sessions, total, sid = [], 0, 0
    while total < n_requests:
        steps = int(min(max_steps, 2 + rng.geometric(1.0 / mean_steps)))
        task = int(_lognormal_len(rng, 800 * scale, 0.6, 1, 6000 * scale))
        obs = _lognormal_len(rng, 250 * scale, 1.2, 1, 12000 * scale, steps)     # tool output: wide spread
        act = _lognormal_len(rng, 150 * scale, 0.6, 1, 1500 * scale, steps)      # thought + command
        sessions.append(_session(rng, sid, system, task, steps, obs, act, vocab))
        total += steps
        sid += 1
    return validate_trace(_interleave(rng, sessions, concurrency, n_requests))


def shared_prefix_trace(n_requests: int = 1000, seed: int = 0, vocab: int = 32000, n_system: int = 4,
                        n_fewshot: int = 8, n_docs: int = 16, zipf_a: float = 1.2, followup_prob: float = 0.2,
                        scale: float = 1.0) -> list:
    """Pure-input sharing: each request = (system prompt | few-shot block | long document) + a question, with
    Zipf-popular prefixes; with probability ``followup_prob`` the next request of the pool is a follow-up turn
    of an earlier request (input + output sharing).

    Prefix lengths: system prompts ~400, few-shot blocks ~2,000, documents ~6,000 tokens (times ``scale``).
    """
    if n_requests < 1:
        raise ValueError(f"n_requests must be >= 1, got {n_requests}")
    if not 0 <= followup_prob < 1:
        raise ValueError(f"followup_prob must lie in [0, 1), got {followup_prob}")
    if not scale > 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    rng = np.random.default_rng(seed)
    prefixes = ([_tokens(rng, _lognormal_len(rng, 400 * scale, 0.4, 1, 2000 * scale), vocab) for _ in range(n_system)]
                + [_tokens(rng, _lognormal_len(rng, 2000 * scale, 0.3, 1, 6000 * scale), vocab) for _ in range(n_fewshot)]
                + [_tokens(rng, _lognormal_len(rng, 6000 * scale, 0.5, 1, 30000 * scale), vocab) for _ in range(n_docs)])
    weights = 1.0 / np.arange(1, len(prefixes) + 1) ** zipf_a
    order = rng.permutation(len(prefixes))          # popularity independent of the prefix kind
    weights = weights[np.argsort(order)]
    weights /= weights.sum()
    trace, last = [], {}                            # last[session] = (sequence so far, next turn)
    sid = 0
    for _ in range(n_requests):
        if last and rng.random() < followup_prob:
            s = int(rng.choice(sorted(last)))
            seq, turn = last[s]
            inp = np.concatenate([seq, _tokens(rng, _lognormal_len(rng, 50 * scale, 0.8, 1, 2000 * scale), vocab)])
        else:
            s, turn = sid, 0
            sid += 1
            k = int(rng.choice(len(prefixes), p=weights))
            q = _tokens(rng, _lognormal_len(rng, 60 * scale, 0.8, 1, 2000 * scale), vocab)
            inp = np.concatenate([prefixes[k], q])
        out = _tokens(rng, _lognormal_len(rng, 150 * scale, 0.8, 1, 2000 * scale), vocab)
        trace.append(Request(s, turn, inp.astype(np.int32), out))
        last[s] = (np.concatenate([inp, out]).astype(np.int32), turn + 1)
    return validate_trace(trace)


def trace_stats(trace) -> dict:
    """Request / session counts and input-length percentiles (rounded ints)."""
    trace = list(trace)
    if not trace:
        raise ValueError("trace is empty")
    lin = np.array([r.n_input for r in trace])
    lout = np.array([r.n_output for r in trace])
    return {"requests": len(trace), "sessions": len({r.session for r in trace}),
            "input_tokens": int(lin.sum()), "output_tokens": int(lout.sum()),
            "input_p5": int(np.percentile(lin, 5)), "input_p50": int(np.percentile(lin, 50)),
            "input_p95": int(np.percentile(lin, 95)), "input_max": int(lin.max())}


def exercise3_trace(len_s: int = 40, len_d: int = 200, len_q: int = 20, len_a: int = 30, len_f: int = 15,
                    seed: int = 3, vocab: int = 64) -> list:
    """Exercise 3 of the lecture: a shared system prompt S and document D, then
    r1 = S+D+q1 (answer a1), r2 = S+D+q2, r3 = S+D+q3, r4 = S+D+q1+a1+f1 (a follow-up of r1)."""
    for name, v in (("len_s", len_s), ("len_d", len_d), ("len_q", len_q), ("len_a", len_a), ("len_f", len_f)):
        if not (isinstance(v, (int, np.integer)) and v >= 1):
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    rng = np.random.default_rng(seed)
    while True:                                   # the three questions must differ in their first token
        S, D = _tokens(rng, len_s, vocab), _tokens(rng, len_d, vocab)
        q = [_tokens(rng, len_q, vocab) for _ in range(3)]
        if len({int(x[0]) for x in q}) == 3:
            break
    a = [_tokens(rng, len_a, vocab) for _ in range(3)]
    f1 = _tokens(rng, len_f, vocab)
    r = [np.concatenate([S, D, q[i]]) for i in range(3)]
    return validate_trace([Request(0, 0, r[0], a[0]), Request(1, 0, r[1], a[1]), Request(2, 0, r[2], a[2]),
                           Request(0, 1, np.concatenate([r[0], a[0], f1]), _tokens(rng, len_a, vocab))])
