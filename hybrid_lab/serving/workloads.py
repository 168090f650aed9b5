"""Seeded synthetic request traces for prefix-caching experiments (Marconi §4.1, §5; lecture 10 §4.2, §4.4).

Marconi sorts prefix reuse into two kinds, and the generators produce both:

- input + output sharing: multi-turn chat (LMSys / ShareGPT-like lengths) and agent trajectories (SWE-bench-like,
  a wide spread of lengths): turn k's input is turn k-1's input + output + a new user message / tool result;
- pure-input sharing: many requests start with the same system prompt, few-shot block or long document; or the
  very same prompt is sampled several times (n samples per prompt, regenerations: :func:`regeneration_trace`).

A trace is plain data: a list of :class:`Request` (session, turn, input token ids, output token ids), saved and
loaded as JSONL so a trace can be replayed exactly. Only the lengths resemble the real datasets; the token ids are
random draws (distinct segments never share a prefix by accident unless ``vocab`` is tiny).
"""
from __future__ import annotations

import json
import os

import numpy as np

from hybrid_lab.core.checks import (array, finite_number, int_in, nonneg_int, nonneg_number, output_size, pos_int,
                                    positive_number)

MAX_VOCAB = 2 ** 31            # token ids are drawn as int32


def token_ids(name: str, ids) -> np.ndarray:
    """A 1-D integer array of token ids >= 0 (no copy when it already is one; an empty list is fine)."""
    a = np.asarray(ids)
    if a.size == 0 and a.dtype.kind not in "iu":     # np.asarray([]) is float64
        a = a.astype(np.int32)
    a = array(name, a, ndim=1, shape_doc="(L,) of token ids", kinds="iu")
    if a.size and a.min() < 0:
        raise ValueError(f"{name} must hold token ids >= 0, got min {a.min()}")
    return a


class Request:
    """One request: the prompt ``input_ids`` (L_in >= 1 token ids) and what the model decodes after it,
    ``output_ids`` (L_out >= 0).

    Both are views of one array, ``tokens`` = input + output: the sequence a prefix cache inserts after serving the
    request (the next turn of a conversation continues from its last decoded token). ``Request(session, turn,
    input_ids, output_ids)`` joins the two (a copy); :meth:`from_tokens` wraps an existing array without a copy (the
    generators build a session's turns as prefixes of one buffer). Checked when built.
    """

    __slots__ = ("session", "turn", "tokens", "n_input")

    def __init__(self, session: int, turn: int, input_ids, output_ids=()):
        inp, out = token_ids("input_ids", input_ids), token_ids("output_ids", output_ids)
        if inp.size == 0:
            raise ValueError("input_ids must hold at least one token (a request needs an input), got an empty array")
        self._set(session, turn, np.concatenate([inp, out]), inp.size)

    @classmethod
    def from_tokens(cls, session: int, turn: int, tokens, n_input: int) -> "Request":
        """The request whose input is ``tokens[:n_input]`` and output the rest (``tokens`` is kept, not copied)."""
        r = cls.__new__(cls)
        r._set(session, turn, token_ids("tokens", tokens), n_input)
        return r

    def _set(self, session, turn, tokens, n_input):
        self.session = nonneg_int("session", session)
        self.turn = nonneg_int("turn", turn)
        self.n_input = int_in("n_input", n_input, 1, len(tokens) + 1)
        self.tokens = tokens

    @property
    def input_ids(self) -> np.ndarray:
        return self.tokens[: self.n_input]

    @property
    def output_ids(self) -> np.ndarray:
        return self.tokens[self.n_input:]

    @property
    def n_output(self) -> int:
        return len(self.tokens) - self.n_input

    def __repr__(self):
        return f"Request(session={self.session}, turn={self.turn}, n_input={self.n_input}, n_output={self.n_output})"


def validate_trace(trace) -> list:
    """Check a trace and return it as a list; raise ``ValueError`` on the first bad request.

    Rules: a non-empty sequence of :class:`Request` (each checked when built); a session's turns appear in order
    0, 1, 2, ...; a turn > 0 must belong to a session already seen (else "unknown session").
    """
    if isinstance(trace, (str, bytes, dict, Request)) or not hasattr(trace, "__iter__"):
        raise ValueError(f"trace must be a list of Requests, got {type(trace).__name__}")
    trace = list(trace)
    if not trace:
        raise ValueError("trace must hold at least one request, got an empty trace")
    next_turn = {}
    for i, r in enumerate(trace):
        if not isinstance(r, Request):
            raise ValueError(f"trace[{i}] must be a Request, got {type(r).__name__}")
        expected = next_turn.get(r.session)
        if expected is None and r.turn != 0:
            raise ValueError(f"trace[{i}] refers to unknown session {r.session} (turn {r.turn}): a session must "
                             "start with turn 0")
        if expected is not None and r.turn != expected:
            raise ValueError(f"trace[{i}]: session {r.session} expects turn {expected} next, got turn {r.turn}")
        next_turn[r.session] = r.turn + 1
    return trace


# ---- JSONL -----------------------------------------------------------------------------------------------------

def _check_path(path):
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"path must be a file path (str or os.PathLike), got {type(path).__name__}")
    return path


def save_jsonl(trace, path) -> None:
    """One JSON object per line: {"session", "turn", "input", "output"} (token ids as lists)."""
    trace = validate_trace(trace)
    with open(_check_path(path), "w", encoding="utf-8") as f:
        for r in trace:
            f.write(json.dumps({"session": int(r.session), "turn": int(r.turn),
                                "input": r.input_ids.tolist(), "output": r.output_ids.tolist()}) + "\n")


def load_jsonl(path) -> list:
    """Inverse of :func:`save_jsonl`; the loaded trace is validated (a bad line: ``ValueError`` with its number)."""
    trace = []
    with open(_check_path(path), encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                trace.append(Request(d["session"], d["turn"], np.asarray(d["input"], dtype=np.int32).reshape(-1),
                                     np.asarray(d["output"], dtype=np.int32).reshape(-1)))
            except (KeyError, TypeError, ValueError) as e:      # json.JSONDecodeError is a ValueError
                raise ValueError(f"{path}:{lineno}: not a trace line with session, turn, input, output ({e})") from e
    return validate_trace(trace)


# ---- generators ---------------------------------------------------------------------------------------------------

def _check_scale(scale, shortest_max: float) -> float:
    """``scale`` multiplies every length; the smallest length range (``shortest_max`` tokens at scale 1) must still
    hold one token."""
    scale = positive_number("scale", scale)
    if shortest_max * scale < 1:
        raise ValueError(f"scale must be >= {1 / shortest_max:.3g} (every length range must hold at least one "
                         f"token), got {scale!r}")
    return scale


def _check_count(name, n, what):
    """A count of requests, sessions or tokens a generator makes (``what``, for the message): at most
    ``checks.MAX_ELEMENTS``. Past it the count is a mistake (2**62 sessions): refused by name, not run as an endless
    loop or a MemoryError."""
    output_size(f"{name} ({what})", (n,))


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
    """A multi-turn session: input_k = prefix + first + Σ_{j<k}(out_j + in_j) + ..., built in one buffer: every
    turn's tokens are a prefix of it (no copies)."""
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
    return [Request.from_tokens(sid, k, buf[:b], a) for k, (a, b) in enumerate(bounds)]


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
    n_sessions, concurrency = pos_int("n_sessions", n_sessions), pos_int("concurrency", concurrency)
    seed, vocab = nonneg_int("seed", seed), int_in("vocab", vocab, 1, MAX_VOCAB)
    system_prompt_len = nonneg_int("system_prompt_len", system_prompt_len)
    p = CHAT_PRESETS[kind]
    scale = _check_scale(scale, p["max_len"])
    _check_count("n_sessions", n_sessions, "sessions, one or more requests each")
    _check_count("system_prompt_len", round(system_prompt_len * scale), "tokens of the system prompt, times scale")
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

    mean_steps >= 1: the mean of the geometric number of steps beyond 2; max_steps: its cap.
    """
    n_requests, concurrency = pos_int("n_requests", n_requests), pos_int("concurrency", concurrency)
    seed, vocab = nonneg_int("seed", seed), int_in("vocab", vocab, 1, MAX_VOCAB)
    system_prompt_len, max_steps = nonneg_int("system_prompt_len", system_prompt_len), pos_int("max_steps", max_steps)
    mean_steps = finite_number("mean_steps", mean_steps)
    if mean_steps < 1:
        raise ValueError(f"mean_steps must be >= 1, got {mean_steps!r}")
    scale = _check_scale(scale, 1500)
    _check_count("n_requests", n_requests, "requests")
    _check_count("system_prompt_len", round(system_prompt_len * scale), "tokens of the system prompt, times scale")
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
    Zipf-popular prefixes (exponent ``zipf_a`` >= 0); with probability ``followup_prob`` in [0, 1) the next request of the pool is a follow-up
    turn of an earlier request (input + output sharing).

    Prefix lengths: system prompts ~400, few-shot blocks ~2,000, documents ~6,000 tokens (times ``scale``).
    """
    n_requests = pos_int("n_requests", n_requests)
    seed, vocab = nonneg_int("seed", seed), int_in("vocab", vocab, 1, MAX_VOCAB)
    n_system, n_fewshot, n_docs = (nonneg_int("n_system", n_system), nonneg_int("n_fewshot", n_fewshot),
                                   nonneg_int("n_docs", n_docs))
    if n_system + n_fewshot + n_docs == 0:
        raise ValueError("n_system + n_fewshot + n_docs must be >= 1 (a pool of shared prefixes), got 0")
    zipf_a = nonneg_number("zipf_a", zipf_a)                # 0: every prefix equally popular
    followup_prob = finite_number("followup_prob", followup_prob)
    if not 0 <= followup_prob < 1:
        raise ValueError(f"followup_prob must lie in [0, 1), got {followup_prob!r}")
    scale = _check_scale(scale, 2000)
    _check_count("n_requests", n_requests, "requests")
    for name, n in (("n_system", n_system), ("n_fewshot", n_fewshot), ("n_docs", n_docs)):
        _check_count(name, n, "shared prefixes drawn")
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
        seq = np.concatenate([inp, out]).astype(np.int32)
        trace.append(Request.from_tokens(s, turn, seq, len(inp)))
        last[s] = (seq, turn + 1)
    return validate_trace(trace)


def regeneration_trace(n_prompts: int = 100, samples: int = 4, seed: int = 0, vocab: int = 32000,
                       prompt_median: int = 1000, output_median: int = 200, system_prompt_len: int = 0) -> list:
    """n samples per prompt, or regenerations (pure-input sharing with an identical input): each of ``n_prompts``
    prompts is sent ``samples`` times in a row, each time with a different output, every sample its own session.

    The input of a repeated sample ends inside the edge that the first sample's input + output inserted, so the
    cache only hits if the branch the new output creates at the input's end gets a state (Marconi §4.1's speculative
    insertion; Lecture 10 §4.2): then samples 3, 4, ... of a prompt reuse the whole input. Prompt and output lengths
    are lognormal around ``prompt_median`` and ``output_median`` tokens (>= 1); ``system_prompt_len`` > 0 puts one
    shared system prompt in front of every prompt.
    """
    n_prompts, samples = pos_int("n_prompts", n_prompts), pos_int("samples", samples)
    seed, vocab = nonneg_int("seed", seed), int_in("vocab", vocab, 1, MAX_VOCAB)
    prompt_median, output_median = pos_int("prompt_median", prompt_median), pos_int("output_median", output_median)
    system_prompt_len = nonneg_int("system_prompt_len", system_prompt_len)
    output_size("n_prompts or samples (n_prompts x samples requests)", (n_prompts, samples))
    _check_count("prompt_median", 20 * prompt_median, "a prompt may reach 20 x prompt_median tokens")
    _check_count("output_median", 20 * output_median, "an output may reach 20 x output_median tokens")
    _check_count("system_prompt_len", system_prompt_len, "tokens of the system prompt")
    rng = np.random.default_rng(seed)
    system = _tokens(rng, system_prompt_len, vocab)
    trace = []
    for p in range(n_prompts):
        prompt = np.concatenate([system, _tokens(rng, _lognormal_len(rng, prompt_median, 0.5, 1, 20 * prompt_median),
                                                 vocab)]).astype(np.int32)
        for k in range(samples):
            out = _tokens(rng, _lognormal_len(rng, output_median, 0.5, 1, 20 * output_median), vocab)
            trace.append(Request(p * samples + k, 0, prompt, out))
    return validate_trace(trace)


def trace_stats(trace) -> dict:
    """Request / session counts and input-length percentiles (rounded ints)."""
    trace = validate_trace(trace)
    lin = np.array([r.n_input for r in trace])
    lout = np.array([r.n_output for r in trace])
    return {"requests": len(trace), "sessions": len({r.session for r in trace}),
            "input_tokens": int(lin.sum()), "output_tokens": int(lout.sum()),
            "input_p5": int(np.percentile(lin, 5)), "input_p50": int(np.percentile(lin, 50)),
            "input_p95": int(np.percentile(lin, 95)), "input_max": int(lin.max())}


def exercise3_trace(len_s: int = 40, len_d: int = 200, len_q: int = 20, len_a: int = 30, len_f: int = 15,
                    seed: int = 3, vocab: int = 64) -> list:
    """Exercise 3 of lecture 10 (§4.2): a shared system prompt S and document D, then
    r1 = S+D+q1 (answer a1), r2 = S+D+q2, r3 = S+D+q3, r4 = S+D+q1+a1+f1 (a follow-up of r1).

    Lengths >= 1; vocab >= 3 (the three questions must differ in their first token).
    """
    for name, v in (("len_s", len_s), ("len_d", len_d), ("len_q", len_q), ("len_a", len_a), ("len_f", len_f)):
        _check_count(name, pos_int(name, v), "tokens of one segment")
    seed, vocab = nonneg_int("seed", seed), int_in("vocab", vocab, 3, MAX_VOCAB)
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
