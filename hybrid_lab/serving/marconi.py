"""Marconi's α, tuned online by bootstrap replay (Marconi §4.2; lecture 10 §4.3), and :func:`simulate`, one call to
replay a trace through a policy.

The eviction score S = recency + α · FLOP efficiency is in :mod:`hybrid_lab.serving.eviction`; the cache that uses
it in :mod:`hybrid_lab.serving.radix_cache`. α = 0 is LRU, and no α is best for every workload, so Marconi picks it
from the workload itself: run LRU until the first eviction (n0 requests), keep LRU for a bootstrap window of
``bootstrap`` × n0 more requests (Marconi: 5-15) while recording them, then replay the window from the cache as it
was at its start once per α of a grid, in parallel processes; the α with the best token hit rate wins (ties go to
the smaller α, so LRU when nothing helps).
"""
from __future__ import annotations

import multiprocessing as mp

import numpy as np

from hybrid_lab.core.checks import nonneg_number, pos_int, positive_number
from hybrid_lab.core.progress import progress
from hybrid_lab.serving.radix_cache import POLICIES, RadixCache, SimResult, check_block, make_cache
from hybrid_lab.serving.workloads import Request, validate_trace

DEFAULT_ALPHAS = (0.0, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)


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
    snap, window = _REPLAY["snap"], _REPLAY["window"]
    c = snap.clone()
    c.alpha = alpha
    hit = sum(c.serve(r) for r in window)
    return hit / max(1, sum(r.n_input for r in window))


def tune_alpha(snapshot: RadixCache, window, alphas=DEFAULT_ALPHAS, processes: int = 2):
    """Replay ``window`` (a non-empty list of Requests) from a copy of ``snapshot`` once per α of ``alphas``.

    Returns (best α, {α: token hit rate}); ties go to the smaller α (α = 0, LRU, when nothing helps).
    ``processes`` > 1 replays in parallel worker processes (fork), 1 replays in this process.
    """
    if not isinstance(snapshot, RadixCache):
        raise ValueError(f"snapshot must be a RadixCache, got {type(snapshot).__name__}")
    alphas = _check_alphas(alphas)
    processes = pos_int("processes", processes)
    if isinstance(window, (str, bytes)) or not hasattr(window, "__iter__"):
        raise ValueError(f"window must be a list of Requests, got {type(window).__name__}")
    window = list(window)
    if not window:
        raise ValueError("window must hold at least one request, got an empty list")
    for i, r in enumerate(window):
        if not isinstance(r, Request):
            raise ValueError(f"window[{i}] must be a Request, got {type(r).__name__}")
    _REPLAY.update(snap=snapshot, window=window)
    try:
        if processes > 1 and len(alphas) > 1 and "fork" in mp.get_all_start_methods():
            with mp.get_context("fork").Pool(min(processes, len(alphas))) as pool:
                rates = pool.map(_replay_one, alphas)
        else:
            rates = [_replay_one(a) for a in alphas]
    finally:
        _REPLAY.clear()
    scores = dict(zip(alphas, (float(r) for r in rates)))
    best = max(sorted(scores), key=lambda a: (round(scores[a], 12), -a))
    return best, scores


def run_marconi_auto(trace, capacity: float, model=None, bootstrap: float = 5.0, alphas=None, processes: int = 2,
                     score_fn=None, progress_desc: str | None = None) -> SimResult:
    """Serve a trace with Marconi, tuning α online by bootstrap replay. Returns a SimResult whose ``alpha`` is the
    chosen α and ``alpha_scores`` the replay hit rate per α (empty if the trace ended before tuning);
    ``stats["bootstrap_window"]`` = (first, last + 1) request of the replayed window.

    capacity: bytes; bootstrap > 0: the window's length in units of the requests before the first eviction;
    alphas: the grid (default :data:`DEFAULT_ALPHAS`); processes >= 1: replay workers.
    """
    bootstrap = positive_number("bootstrap", bootstrap)
    alphas = _check_alphas(DEFAULT_ALPHAS if alphas is None else alphas)
    processes = pos_int("processes", processes)
    trace = validate_trace(trace)
    if progress_desc is not None and not isinstance(progress_desc, str):
        raise ValueError(f"progress_desc must be a string or None, got {progress_desc!r}")
    cache = RadixCache(capacity, model, alpha=0.0, score_fn=score_fn, policy="marconi")
    hits = np.zeros(len(trace), np.int64)
    phase, start, stop, snap, scores = "warmup", 0, 0, None, {}
    for i, r in enumerate(progress(trace, desc=progress_desc) if progress_desc else trace):
        ev = cache.stats["evictions"]
        hits[i] = cache.serve(r)
        if phase == "warmup" and cache.stats["evictions"] > ev:
            n0 = i + 1                                     # requests seen up to the first eviction
            start, stop = i + 1, min(len(trace), i + 1 + int(round(bootstrap * n0)))
            snap = cache.clone()
            phase = "bootstrap"
        elif phase == "bootstrap" and i + 1 == stop:
            best, scores = tune_alpha(snap, trace[start:stop], alphas, processes)
            cache.alpha = best
            phase = "tuned"
    res = SimResult.from_run(cache, trace, hits, alpha_scores=scores)
    res.stats["bootstrap_window"] = (start, stop)
    return res


# ------------------------------------------------------------------------------------------------- one call
def simulate(trace, policy: str = "marconi", capacity: float = 50e9, model=None, alpha="auto", block: int = 32,
             bootstrap: float = 5.0, alphas=None, processes: int = 2, score_fn=None,
             progress_desc: str | None = None) -> SimResult:
    """Replay a trace through one policy ("vllm+", "sglang+", "marconi") at ``capacity`` bytes.

    For "marconi", ``alpha="auto"`` tunes α by bootstrap replay (:func:`run_marconi_auto`, with ``bootstrap``,
    ``alphas``, ``processes``); a number >= 0 fixes it. The other policies ignore ``alpha``.
    """
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    if isinstance(alpha, str) and alpha != "auto":
        raise ValueError(f"alpha must be a number >= 0 or 'auto', got {alpha!r}")
    check_block(block)
    if policy == "marconi" and alpha == "auto":
        return run_marconi_auto(trace, capacity, model=model, bootstrap=bootstrap, alphas=alphas,
                                processes=processes, score_fn=score_fn, progress_desc=progress_desc)
    trace = validate_trace(trace)
    cache = make_cache(policy, capacity, model, alpha=0.0 if isinstance(alpha, str) else alpha, block=block,
                       score_fn=score_fn)
    return cache.serve_trace(trace, progress_desc=progress_desc)
