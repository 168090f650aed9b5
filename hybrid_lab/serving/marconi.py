"""Marconi's FLOP-aware eviction and the bootstrap replay that tunes α (seed 003 §4.3).

Score of a cached node n (the lowest is evicted)::

    S(n) = recency(n) + α · flop_efficiency(n),     both min-max normalized to [0, 1] over the current nodes
    flop_efficiency(n) = FLOPs saved by reusing n, relative to its parent / bytes n holds (KV + state)

α = 0 is LRU. Why it matters for hybrids: a Transformer's KV bytes grow with the FLOPs they save, so recency is
enough; an SSM state has a fixed size, so a long prefix saves many more FLOPs per byte than a short one.

α is tuned online: run LRU until the first eviction (n0 requests), keep LRU for a bootstrap window of
``bootstrap`` × n0 more requests while recording them, then replay the window from the cache as it was at its start
once per α of a grid, in parallel processes; the α with the best token hit rate wins (ties go to the smaller α).
"""
from __future__ import annotations

import multiprocessing as mp

import numpy as np

DEFAULT_ALPHAS = (0.0, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)


def normalize(x) -> np.ndarray:
    """Min-max to [0, 1] (all zeros when x is constant). x: (n,)."""
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return x
    lo, hi = x.min(), x.max()
    return (x - lo) / (hi - lo) if hi > lo else np.zeros_like(x)


def flop_efficiency(saved_flops, nbytes) -> np.ndarray:
    """FLOPs saved per byte held; a node holding no bytes gets 0 (it costs nothing to keep)."""
    saved = np.asarray(saved_flops, dtype=np.float64)
    nbytes = np.asarray(nbytes, dtype=np.float64)
    if saved.shape != nbytes.shape:
        raise ValueError(f"saved_flops {saved.shape} and nbytes {nbytes.shape} must have the same shape")
    if (nbytes < 0).any():
        raise ValueError("nbytes must be >= 0")
    return np.divide(saved, nbytes, out=np.zeros_like(saved), where=nbytes > 0)


def eviction_scores(last_access, saved_flops, nbytes, alpha: float) -> np.ndarray:
    """Marconi's score per node: normalized recency + α · normalized FLOP efficiency (lowest evicted first).

    last_access, saved_flops, nbytes: (n,) over the current nodes; alpha >= 0.
    """
    if not (np.isscalar(alpha) and np.isfinite(alpha) and alpha >= 0):
        raise ValueError(f"alpha must be a finite number >= 0, got {alpha!r}")
    t = np.asarray(last_access, dtype=np.float64)
    if t.shape != np.shape(saved_flops):
        raise ValueError(f"last_access {t.shape} and saved_flops {np.shape(saved_flops)} must have the same shape")
    return normalize(t) + alpha * normalize(flop_efficiency(saved_flops, nbytes))


# ------------------------------------------------------------------------------------------------- α by replay
_REPLAY = {}      # set before forking so workers inherit the snapshot instead of unpickling it per task


def _replay_one(alpha: float) -> float:
    snap, window = _REPLAY["snap"], _REPLAY["window"]
    c = snap.clone()
    c.alpha = alpha
    hit = sum(c.serve(r) for r in window)
    return hit / max(1, sum(r.n_input for r in window))


def tune_alpha(snapshot, window, alphas=DEFAULT_ALPHAS, processes: int = 2):
    """Replay ``window`` (requests) from a copy of ``snapshot`` (a RadixCache) once per α.

    Returns (best α, {α: token hit rate}); ties go to the smaller α (α = 0, LRU, when nothing helps).
    ``processes`` > 1 replays in parallel worker processes (fork), 1 replays in this process.
    """
    alphas = [float(a) for a in alphas]
    if not alphas or any(not (np.isfinite(a) and a >= 0) for a in alphas):
        raise ValueError(f"alphas must be a non-empty list of numbers >= 0, got {alphas}")
    if not (isinstance(processes, (int, np.integer)) and processes >= 1):
        raise ValueError(f"processes must be an integer >= 1, got {processes!r}")
    window = list(window)
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


def run_marconi_auto(trace, capacity, model=None, bootstrap: float = 5.0, alphas=None, processes: int = 2,
                     score_fn=None, progress_desc=None):
    """Serve a trace with Marconi, tuning α online by bootstrap replay. Returns a SimResult whose ``alpha`` is the
    chosen α and ``alpha_scores`` the replay hit rate per α (empty if the trace ended before tuning)."""
    from hybrid_lab.serving.radix_cache import RadixCache, SimResult
    from hybrid_lab.serving.workloads import validate_trace

    if not (np.isscalar(bootstrap) and bootstrap > 0):
        raise ValueError(f"bootstrap must be > 0 (Marconi uses 5-15), got {bootstrap!r}")
    trace = validate_trace(trace)
    alphas = DEFAULT_ALPHAS if alphas is None else alphas
    cache = RadixCache(capacity, model, alpha=0.0, score_fn=score_fn, policy="marconi")
    hits = np.zeros(len(trace), np.int64)
    phase, start, stop, snap, scores = "warmup", 0, 0, None, {}
    it = trace
    if progress_desc:
        from hybrid_lab.core.progress import progress
        it = progress(trace, desc=progress_desc)
    for i, r in enumerate(it):
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
