"""Marconi's α, tuned online by bootstrap replay (Marconi §4.2; Lecture 10 §4.3), and :func:`simulate`, one call to
replay a trace through a policy.

The eviction score S = recency + α · FLOP efficiency is in :mod:`hybrid_lab.serving.eviction`; the cache that uses
it in :mod:`hybrid_lab.serving.radix_cache`. α = 0 is pure recency, and no α is best for every workload, so Marconi
picks it from the workload itself. Both start with α = 0 and note n0, the number of requests served up to and
including the first one that had to evict. Two procedures, named by :data:`TUNINGS`:

- ``"lecture"`` (Lecture 10 §4.3's description): keep α = 0 for a bootstrap window of ``bootstrap`` × n0 more
  requests (requests n0 .. (1 + bootstrap)·n0) while recording them, then replay the window from a snapshot of the
  cache taken at the first eviction, once per α of the grid, and keep the α with the best **token hit rate**.
- ``"official"`` (what the official simulator, ruipeterpan/marconi, does): when ``bootstrap`` × n0 requests have
  been served in all, replay **all of them from an empty tree** once per α (its grid: 0, 0.1, ..., 2.0,
  :data:`OFFICIAL_ALPHAS`) and keep the α that saves the most **prefill FLOPs over the last 500 requests** of the
  replay (fewer if the window is shorter).

Either way the replays run in parallel processes; ties go to the smaller α (so α = 0 when nothing helps), and the
chosen α applies to the requests after the window. If the trace ends first, no request is served with a tuned α and
the result reports α = 0, the α that was applied.
"""
from __future__ import annotations

import multiprocessing as mp

import numpy as np

from hybrid_lab.core.checks import nonneg_number, pos_int, positive_number
from hybrid_lab.core.progress import progress
from hybrid_lab.serving.radix_cache import POLICIES, RadixCache, SimResult, check_block, make_cache
from hybrid_lab.serving.workloads import Request, validate_trace

DEFAULT_ALPHAS = (0.0, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)
OFFICIAL_ALPHAS = tuple(round(0.1 * i, 1) for i in range(21))
TUNINGS = ("lecture", "official")
OFFICIAL_LAST = 500            # the official tuner scores the FLOPs saved over the replay's last 500 requests


def _check_alphas(alphas) -> list:
    if isinstance(alphas, (str, bytes)) or not hasattr(alphas, "__iter__"):
        raise ValueError(f"alphas must be a non-empty list of numbers >= 0, got {alphas!r}")
    alphas = [nonneg_number(f"alphas[{i}]", a) for i, a in enumerate(alphas)]
    if not alphas:
        raise ValueError("alphas must be a non-empty list of numbers >= 0, got an empty list")
    return alphas


# ------------------------------------------------------------------------------------------------- α by replay
_REPLAY = {}      # set before forking so workers inherit the snapshot instead of unpickling it per task


def _replay_one(alpha: float) -> float:
    snap, window, metric = _REPLAY["snap"], _REPLAY["window"], _REPLAY["metric"]
    c = snap.clone()
    c.alpha = alpha
    hits = [c.serve(r) for r in window]
    if metric == "hit_rate":
        return sum(hits) / max(1, sum(r.n_input for r in window))
    last = min(len(window), OFFICIAL_LAST)               # "flops": prefill FLOPs saved over the last requests
    fl = c.model.flops
    return float(fl(np.asarray(hits[-last:], dtype=np.int64)).sum())


def tune_alpha(snapshot: RadixCache, window, alphas=DEFAULT_ALPHAS, processes: int = 2, metric: str = "hit_rate"):
    """Replay ``window`` (a non-empty list of Requests) from a copy of ``snapshot`` once per α of ``alphas``.

    metric: "hit_rate" (the window's token hit rate; the lecture's tuning) or "flops" (prefill FLOPs saved over the
    window's last 500 requests; the official tuning). Returns (best α, {α: metric}); ties go to the smaller α (α = 0
    when nothing helps). ``processes`` > 1 replays in parallel worker processes (fork), 1 in this process.
    """
    if not isinstance(snapshot, RadixCache):
        raise ValueError(f"snapshot must be a RadixCache, got {type(snapshot).__name__}")
    alphas = _check_alphas(alphas)
    processes = pos_int("processes", processes)
    if metric not in ("hit_rate", "flops"):
        raise ValueError(f"metric must be 'hit_rate' or 'flops', got {metric!r}")
    if isinstance(window, (str, bytes)) or not hasattr(window, "__iter__"):
        raise ValueError(f"window must be a list of Requests, got {type(window).__name__}")
    window = list(window)
    if not window:
        raise ValueError("window must hold at least one request, got an empty list")
    for i, r in enumerate(window):
        if not isinstance(r, Request):
            raise ValueError(f"window[{i}] must be a Request, got {type(r).__name__}")
    _REPLAY.update(snap=snapshot, window=window, metric=metric)
    try:
        if processes > 1 and len(alphas) > 1 and "fork" in mp.get_all_start_methods():
            with mp.get_context("fork").Pool(min(processes, len(alphas))) as pool:
                rates = pool.map(_replay_one, alphas)
        else:
            rates = [_replay_one(a) for a in alphas]
    finally:
        _REPLAY.clear()
    scores = dict(zip(alphas, (float(r) for r in rates)))
    top = max(scores.values())
    tol = 1e-12 * max(1.0, abs(top))
    best = min(a for a in scores if scores[a] >= top - tol)
    return best, scores


def run_marconi_auto(trace, capacity: float, model=None, bootstrap: float = 5.0, alphas=None, processes: int = 2,
                     score_fn=None, progress_desc: str | None = None, tuning: str = "lecture",
                     score: str = "paper") -> SimResult:
    """Serve a trace with Marconi, tuning α online by bootstrap replay (``tuning`` "lecture" or "official", see the
    module docstring). Returns a SimResult whose ``alpha`` is the α applied after the window (0 if no request came
    after it) and ``alpha_scores`` the replay's metric per α (empty if the trace ended before tuning);
    ``stats["bootstrap_window"]`` = (first, last + 1) request of the replayed window, ``stats["alpha_tuned"]`` the α
    the replay chose (None before tuning), ``stats["tuning"]`` the procedure.

    capacity: bytes; bootstrap > 0: the window's length in units of n0; alphas: the grid (default
    :data:`DEFAULT_ALPHAS` for "lecture", :data:`OFFICIAL_ALPHAS` for "official"); processes >= 1: replay workers;
    score: Marconi's score ("paper" / "lecture").
    """
    bootstrap = positive_number("bootstrap", bootstrap)
    if tuning not in TUNINGS:
        raise ValueError(f"tuning must be one of {TUNINGS}, got {tuning!r}")
    default = DEFAULT_ALPHAS if tuning == "lecture" else OFFICIAL_ALPHAS
    alphas = _check_alphas(default if alphas is None else alphas)
    processes = pos_int("processes", processes)
    trace = validate_trace(trace)
    if progress_desc is not None and not isinstance(progress_desc, str):
        raise ValueError(f"progress_desc must be a string or None, got {progress_desc!r}")
    cache = RadixCache(capacity, model, alpha=0.0, score_fn=score_fn, policy="marconi", score=score)
    empty = cache.clone()
    hits = np.zeros(len(trace), np.int64)
    phase, start, stop, snap, scores, tuned = "warmup", 0, 0, None, {}, None
    for i, r in enumerate(progress(trace, desc=progress_desc) if progress_desc else trace):
        ev = cache.stats["evictions"]
        hits[i] = cache.serve(r)
        if phase == "warmup" and cache.stats["evictions"] > ev:
            n0 = i + 1                                     # requests seen up to the first eviction
            if tuning == "lecture":
                start, stop, snap = i + 1, min(len(trace), i + 1 + round(bootstrap * n0)), cache.clone()
            else:
                start, stop, snap = 0, min(len(trace), max(i + 1, round(bootstrap * n0))), empty
            phase = "bootstrap"
        if phase == "bootstrap" and i + 1 == stop and stop > start:
            tuned, scores = tune_alpha(snap, trace[start:stop], alphas, processes,
                                       metric="hit_rate" if tuning == "lecture" else "flops")
            cache.alpha = tuned
            phase = "tuned"
    applied = tuned if tuned is not None and stop < len(trace) else 0.0
    res = SimResult.from_run(cache, trace, hits, alpha_scores=scores, alpha=applied)
    res.stats.update(bootstrap_window=(start, stop), alpha_tuned=tuned, tuning=tuning)
    return res


# ------------------------------------------------------------------------------------------------- one call
def simulate(trace, policy: str = "marconi", capacity: float = 50e9, model=None, alpha="auto", block: int = 32,
             bootstrap: float = 5.0, alphas=None, processes: int = 2, score_fn=None,
             progress_desc: str | None = None, tuning: str = "lecture", score: str = "paper") -> SimResult:
    """Replay a trace through one policy ("vllm+", "sglang+", "marconi") at ``capacity`` bytes.

    For "marconi", ``alpha="auto"`` tunes α by bootstrap replay (:func:`run_marconi_auto`, with ``bootstrap``,
    ``alphas``, ``processes``, ``tuning``); a number >= 0 fixes it; ``score``: "paper" (default) or "lecture". The
    other policies ignore ``alpha``, ``tuning`` and ``score``.
    """
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    if isinstance(alpha, str) and alpha != "auto":
        raise ValueError(f"alpha must be a number >= 0 or 'auto', got {alpha!r}")
    if tuning not in TUNINGS:
        raise ValueError(f"tuning must be one of {TUNINGS}, got {tuning!r}")
    check_block(block)
    if policy == "marconi" and alpha == "auto":
        return run_marconi_auto(trace, capacity, model=model, bootstrap=bootstrap, alphas=alphas,
                                processes=processes, score_fn=score_fn, progress_desc=progress_desc, tuning=tuning,
                                score=score)
    trace = validate_trace(trace)
    cache = make_cache(policy, capacity, model, alpha=0.0 if isinstance(alpha, str) else alpha, block=block,
                       score_fn=score_fn, score=score)
    return cache.serve_trace(trace, progress_desc=progress_desc)
