"""Seeded synthetic tasks for the trained models: what a hybrid must remember, and what a sliding window cannot see.

Every task returns a :class:`Batch`: ``tokens`` (B, T) int64 and ``targets`` (B, T) int64 with -1 where there is
nothing to predict. ``targets[b, t]`` is the token the model must output AFTER reading ``tokens[b, :t+1]`` (the
logits at position t), so the loss and the accuracy read only the answer positions. ``kind`` (B, T) names what each
answer tests (``KIND_*``) and ``dist`` (B, T) how far back its evidence lies (0 where there is no answer).

One vocabulary for all tasks (``VOCAB`` = 256):

    0 PAD · 1 NEEDLE · 2 QUERY · 8..15 BACK_1..BACK_8 (local copy markers) · 16..127 keys · 128..255 values

- :func:`mqar` multi-query associative recall as Zoology (Arora et al. 2023) generates it: ``k1 v1 ... kn vn`` then
  the keys again at power-law distributed places among random filler, each answered by its value. Knobs:
  ``n_pairs``, ``seq_len``, ``power_a``. A model must keep n associations: attention looks them up, a fixed-size SSM
  state must compress them.
- :func:`needles` multi-needle retrieval (RULER / MRCR-like): filler drawn from the key and value ranges (so keys
  also occur unmarked: distractors), 1-4 needles ``NEEDLE k v`` anywhere, and at the end ``QUERY k v`` for each
  needle: answer v at the k. Knob: ``min_dist`` puts every needle at least that far from its query.
- :func:`local_copy` the recent window matters: ``BACK_j`` at position p asks for the token at p - j (j = 1..8).
- :func:`mix` needles and local copies in one sequence (the SWA-branch ablation's task).

Generators are vectorized over the batch where it is simple and seeded with ``np.random.default_rng(seed)``;
training draws seeds from one range and evaluation sets from another (:data:`EVAL_SEED`), never the same sequence.
"""
from __future__ import annotations

import inspect
import numbers
from dataclasses import dataclass

import numpy as np

from hybrid_lab.core import checks

__all__ = ["VOCAB", "PAD", "NEEDLE", "QUERY", "BACK", "KEYS", "VALUES", "KIND_MQAR", "KIND_NEEDLE", "KIND_LOCAL",
           "KIND_NAMES", "EVAL_SEED", "VAL_SEED", "Batch", "mqar", "needles", "local_copy", "mix", "make_task", "TASKS",
           "accuracy", "token_name", "show"]

VOCAB = 256
PAD, NEEDLE, QUERY = 0, 1, 2
BACK = tuple(range(8, 16))                      # BACK[j - 1] asks for the token j positions back
KEYS = np.arange(16, 128)
VALUES = np.arange(128, 256)
KIND_MQAR, KIND_NEEDLE, KIND_LOCAL = 1, 2, 3
KIND_NAMES = {KIND_MQAR: "mqar", KIND_NEEDLE: "needle", KIND_LOCAL: "local"}
EVAL_SEED = 1_000_000                           # test sets: seeds >= this; training: seeds below
VAL_SEED = 2_000_000                            # validation sets (the learning-rate choice): seeds >= this


@dataclass
class Batch:
    """tokens, targets, kind, dist: (B, T) int64 (targets -1, kind 0, dist 0 where nothing is asked).

    Checked on construction: four non-empty (B, T) integer arrays, tokens >= 0, targets >= -1, kind 0 or a
    ``KIND_*``, dist >= 0 (stored as int64). The vocabulary is the consumer's to check (:func:`accuracy` checks the
    targets against the logits' vocab axis)."""
    tokens: np.ndarray
    targets: np.ndarray
    kind: np.ndarray
    dist: np.ndarray

    def __post_init__(self):
        self.tokens = checks.int_array("tokens", self.tokens, 2, "(B, T) token ids", lo=0)
        if 0 in self.tokens.shape:
            raise ValueError(f"tokens must be a non-empty (B, T) array, got shape {self.tokens.shape}")
        for name, lo in (("targets", -1), ("kind", 0), ("dist", 0)):
            a = checks.int_array(name, getattr(self, name), 2, "(B, T)", lo=lo)
            if a.shape != self.tokens.shape:
                raise ValueError(f"{name} must have the shape of tokens {self.tokens.shape}, got {a.shape}")
            setattr(self, name, a)
        bad = ~np.isin(self.kind, (0,) + tuple(KIND_NAMES))
        if bad.any():
            raise ValueError(f"kind entries must be 0 (no answer) or one of {sorted(KIND_NAMES)} (KIND_*), got "
                             f"{int(self.kind[bad][0])}")

    @property
    def n_answers(self) -> int:
        return int((self.targets >= 0).sum())


def _empty(B, T):
    z = np.zeros((B, T), np.int64)
    return z.copy(), np.full((B, T), -1, np.int64), z.copy(), z.copy()


def _args(batch, seq_len, seed):
    B, T = checks.pos_int("batch", batch), checks.pos_int("seq_len", seq_len)
    checks.output_size("batch x seq_len", (B, T))       # before four (B, T) int64 arrays are allocated
    return B, T, checks.nonneg_int("seed", seed)


def mqar(batch: int, seq_len: int, n_pairs, seed: int, power_a: float = 0.01) -> Batch:
    """Multi-query associative recall as Zoology's ``multiquery_ar`` defines it. n_pairs: an int, or a sequence of
    ints drawn from per sequence (a mixture, as Zoology's training mix of segments).

    ``k1 v1 ... kn vn`` (keys distinct, values distinct: both drawn without replacement), then each key once more at
    an even offset of the query region, answered by its value (the logits AT the repeated key); every other position
    of the query region is random filler from the key and value ranges (Zoology's ``random_non_queries``), so the
    value never follows the repeated key in the input. The query offsets are drawn without replacement from the power
    law p(gap) ∝ gap^(power_a - 1) (Zoology's default ``power_a`` = 0.01: most queries come soon after the pairs).
    Needs 4 * n_pairs <= seq_len (Zoology's assertion). Vectorized per pair count: one draw for every row with that n.
    """
    B, T, seed = _args(batch, seq_len, seed)
    choices = np.atleast_1d(checks.int_array("n_pairs", n_pairs, None, "an int or (k,) ints", lo=1))
    if choices.ndim != 1 or choices.size == 0:
        raise ValueError(f"n_pairs must be an int or a non-empty list of ints, got {n_pairs!r}")
    if 4 * choices.max() > T or choices.max() > len(KEYS):
        raise ValueError(f"n_pairs must satisfy 4 * n_pairs <= seq_len={T} and n_pairs <= {len(KEYS)} keys, "
                         f"got max n_pairs {int(choices.max())}")
    power_a = checks.number_in("power_a", power_a, 0.0, 1.0)
    if power_a == 0.0:
        raise ValueError("power_a must be in (0, 1] (1: uniform query offsets), got 0")
    rng = np.random.default_rng(seed)
    tok, tgt, kind, dist = _empty(B, T)
    tok[:] = _filler(rng, B, T)
    ns = rng.choice(choices, B)
    for n in np.unique(ns):
        rows = np.nonzero(ns == n)[0]
        R, n = len(rows), int(n)
        # n distinct keys / values per row: the first n of a random permutation (argsort of uniforms)
        keys = KEYS[np.argsort(rng.random((R, len(KEYS))), axis=1)[:, :n]]
        vals = VALUES[np.argsort(rng.random((R, len(VALUES))), axis=1)[:, :n]]
        tok[rows[:, None], np.arange(0, 2 * n, 2)] = keys
        tok[rows[:, None], np.arange(1, 2 * n, 2)] = vals
        # n query slots without replacement from the power law: Gumbel top-n of log p is successive sampling
        space = (T - 2 * n) // 2
        logp = (power_a - 1.0) * np.log(np.arange(1, space + 1))
        gaps = np.argsort(-(logp + rng.gumbel(size=(R, space))), axis=1, kind="stable")[:, :n]   # (R, n): key i
        at = 2 * n + 2 * gaps
        r = np.repeat(rows, n)
        tok[r, at.ravel()] = keys.ravel()
        tgt[r, at.ravel()] = vals.ravel()
        kind[r, at.ravel()] = KIND_MQAR
        dist[r, at.ravel()] = (at - 2 * np.arange(n)).ravel()      # back to the key's first occurrence
    return Batch(tok, tgt, kind, dist)


def _filler(rng, B, T):
    return rng.integers(int(KEYS[0]), int(VALUES[-1]) + 1, size=(B, T))


def _place_needles(rng, tok, tgt, kind, dist, b, n, start, end, q_at, min_dist):
    """Put n needles ``NEEDLE k v`` in tok[b, start:end] (non-overlapping, each >= min_dist before its query at q_at
    [i]) and the queries ``QUERY k v`` at q_at. Returns False when they do not fit."""
    latest = min(end, min(q_at) - min_dist) - 3                 # last allowed needle start
    if latest - start + 1 < 4 * n:
        return False
    starts = np.sort(rng.choice(np.arange(start, latest + 1, 4), n, replace=False))   # 4-apart: never overlap
    keys = rng.choice(KEYS, n, replace=False)
    vals = rng.choice(VALUES, n)
    for i in range(n):
        s = starts[i]
        tok[b, s:s + 3] = (NEEDLE, keys[i], vals[i])
    for i, q in enumerate(q_at):                                 # query i asks needle i (q_at is shuffled)
        tok[b, q:q + 3] = (QUERY, keys[i], vals[i])
        tgt[b, q + 1], kind[b, q + 1], dist[b, q + 1] = vals[i], KIND_NEEDLE, q + 1 - (starts[i] + 1)
    return True


def needles(batch: int, seq_len: int, n_needles=(1, 2, 3, 4), seed: int = 0, min_dist: int = 0) -> Batch:
    """Multi-needle retrieval: needles anywhere in filler, one ``QUERY k v`` per needle at the end (random order).

    n_needles: int or choices per sequence (1-4). min_dist: every needle's key at least this many positions before
    the key of its query. dist = query key position - needle key position.
    """
    B, T, seed = _args(batch, seq_len, seed)
    choices = np.atleast_1d(checks.int_array("n_needles", n_needles, None, "an int or (k,) ints", lo=1, hi=5))
    if choices.ndim != 1 or choices.size == 0:
        raise ValueError(f"n_needles must be an int or a non-empty list of ints in [1, 4], got {n_needles!r}")
    min_dist = checks.nonneg_int("min_dist", min_dist)
    if 3 * choices.max() + 4 * choices.max() + min_dist + 3 > T:
        raise ValueError(f"seq_len={T} is too short for {int(choices.max())} needles at min_dist={min_dist}")
    rng = np.random.default_rng(seed)
    tok, tgt, kind, dist = _empty(B, T)
    tok[:] = _filler(rng, B, T)
    for b in range(B):
        n = int(rng.choice(choices))
        q0 = T - 3 * n
        q_at = q0 + 3 * rng.permutation(n)                      # query i at q_at[i] asks needle i
        ok = _place_needles(rng, tok, tgt, kind, dist, b, n, 0, q0, list(q_at), min_dist)
        assert ok, "checked above"
    return Batch(tok, tgt, kind, dist)


def local_copy(batch: int, seq_len: int, seed: int = 0, n_queries: int = 8, max_back: int = 8) -> Batch:
    """Local copies: ``BACK_j`` at position p asks for tokens[p - j], j uniform in 1..max_back (<= 8)."""
    B, T, seed = _args(batch, seq_len, seed)
    n_queries = checks.pos_int("n_queries", n_queries)
    max_back = checks.int_in("max_back", max_back, 1, 9)
    if T < 2 * (max_back + 1) * n_queries:
        raise ValueError(f"seq_len={T} is too short for {n_queries} local queries (needs "
                         f">= {2 * (max_back + 1) * n_queries})")
    rng = np.random.default_rng(seed)
    tok, tgt, kind, dist = _empty(B, T)
    tok[:] = _filler(rng, B, T)
    _add_local(rng, tok, tgt, kind, dist, np.ones((B, T), bool), n_queries, max_back)
    return Batch(tok, tgt, kind, dist)


def _add_local(rng, tok, tgt, kind, dist, allowed, n_queries, max_back):
    """Insert up to n_queries BACK markers per row at positions where ``allowed`` holds for the marker and the
    max_back tokens before it (filler only, never a needle or a query)."""
    B, T = tok.shape
    bad = np.concatenate([np.zeros((B, 1), np.int64), np.cumsum(~allowed, axis=1)], axis=1)   # prefix counts
    ok = np.zeros((B, T), bool)
    ok[:, max_back:] = (bad[:, max_back + 1:] - bad[:, :T - max_back]) == 0    # allowed[p - max_back .. p] all True
    for b in range(B):
        cand = np.nonzero(ok[b])[0]
        picked = []
        for p in rng.permutation(cand):
            if all(abs(p - q) > max_back for q in picked):
                picked.append(int(p))
            if len(picked) == n_queries:
                break
        for p in picked:
            j = int(rng.integers(1, max_back + 1))
            tok[b, p] = BACK[j - 1]
            tgt[b, p], kind[b, p], dist[b, p] = tok[b, p - j], KIND_LOCAL, j


def mix(batch: int, seq_len: int, seed: int = 0, n_needles=(1, 2, 3, 4), n_local: int = 8, min_dist: int = 0) -> Batch:
    """Needles and local copies in one sequence: the needles' queries at the end, BACK markers in the filler.
    n_local: BACK markers per row at most (0: none)."""
    n_local = checks.nonneg_int("n_local", n_local)
    b = needles(batch, seq_len, n_needles, seed, min_dist)
    rng = np.random.default_rng([seed, 1])
    free = (b.kind == 0) & ~np.isin(b.tokens, (NEEDLE, QUERY))
    # the tokens right after a NEEDLE or QUERY marker belong to it (k and v): keep them
    for off in (1, 2):
        marked = np.zeros_like(free)
        marked[:, off:] = np.isin(b.tokens[:, :-off], (NEEDLE, QUERY))
        free &= ~marked
    _add_local(rng, b.tokens, b.targets, b.kind, b.dist, free, n_local, 8)
    return b


TASKS = {"mqar": mqar, "needles": needles, "local": local_copy, "mix": mix}


def make_task(name: str, batch: int, seq_len: int, seed: int, **knobs) -> Batch:
    """``TASKS[name](batch, seq_len, seed=seed, **knobs)`` with a clear error for an unknown task or knob."""
    if not isinstance(name, str) or name not in TASKS:
        raise ValueError(f"name: task must be one of {sorted(TASKS)}, got {name!r}")
    fn = TASKS[name]
    allowed = [k for k in inspect.signature(fn).parameters if k not in ("batch", "seq_len", "seed")]
    bad = [k for k in knobs if k not in allowed]
    if bad:
        raise ValueError(f"knobs: {bad[0]!r} is not a knob of task {name!r} (knobs: {', '.join(allowed)})")
    if name == "mqar":
        return mqar(batch, seq_len, knobs.pop("n_pairs", 8), seed, **knobs)
    return TASKS[name](batch, seq_len, seed=seed, **knobs)


def accuracy(logits: np.ndarray, batch: Batch, kind: int | None = None, dist_range=None) -> tuple:
    """Share of answer positions whose argmax is the target. logits: (B, T, vocab) finite floats, vocab above every
    target of ``batch`` (a :class:`Batch`); kind: None or a ``KIND_*``, only answers of that kind; dist_range: None
    or a (lo, hi) pair of ints, 0 <= lo <= hi, only answers whose evidence lies lo <= dist < hi back. Returns
    (accuracy, n answers); accuracy is NaN when nothing is selected (n = 0)."""
    if not isinstance(batch, Batch):
        raise ValueError(f"batch must be a tasks.Batch, got {type(batch).__name__}")
    logits = checks.finite_array("logits", checks.array("logits", logits, 3, "(B, T, vocab)", kinds="f"))
    if logits.shape[:2] != batch.tokens.shape:
        raise ValueError(f"logits must be (B, T, vocab) with (B, T) = {batch.tokens.shape}, got {logits.shape}")
    top = int(batch.targets.max())
    if logits.shape[2] <= top:
        raise ValueError(f"logits must have a vocab axis above every target (> {top}), got vocab {logits.shape[2]}")
    sel = batch.targets >= 0
    if kind is not None:
        if not isinstance(kind, (numbers.Integral, np.integer)) or isinstance(kind, (bool, np.bool_)) \
                or kind not in KIND_NAMES:
            raise ValueError(f"kind must be None or one of {sorted(KIND_NAMES)} (KIND_*), got {kind!r}")
        sel &= batch.kind == kind
    if dist_range is not None:
        lo, hi = _dist_range(dist_range)
        sel &= (batch.dist >= lo) & (batch.dist < hi)
    n = int(sel.sum())
    if n == 0:
        return float("nan"), 0
    return float((logits.argmax(-1)[sel] == batch.targets[sel]).mean()), n


def _dist_range(dist_range) -> tuple:
    if isinstance(dist_range, (str, bytes, dict)) or not hasattr(dist_range, "__len__") or len(dist_range) != 2:
        raise ValueError(f"dist_range must be None or a (lo, hi) pair of ints, got {dist_range!r}")
    lo = checks.nonneg_int("dist_range[0] (lo)", dist_range[0])
    hi = checks.nonneg_int("dist_range[1] (hi)", dist_range[1])
    if lo > hi:
        raise ValueError(f"dist_range must satisfy lo <= hi, got {dist_range!r}")
    return lo, hi


def token_name(t: int) -> str:
    """A readable name: '.' PAD, 'N' NEEDLE, 'Q' QUERY, '<j' BACK_j, 'k<id>' a key, 'v<id>' a value, '?<id>' an id
    no task uses. t: an integer token id in [0, VOCAB)."""
    t = checks.int_in("t", t, 0, VOCAB)
    if t == PAD:
        return "."
    if t == NEEDLE:
        return "N"
    if t == QUERY:
        return "Q"
    if t in BACK:
        return f"<{t - BACK[0] + 1}"
    if KEYS[0] <= t <= KEYS[-1]:
        return f"k{t}"
    if VALUES[0] <= t <= VALUES[-1]:
        return f"v{t}"
    return f"?{t}"


def show(batch: Batch, row: int = 0, start: int = 0, stop: int | None = None, per_line: int = 16) -> str:
    """One sequence of a batch as text, ``per_line`` tokens a line with the position of the first; an answer position
    shows its target after an arrow: ``k17→v200`` (the model reads k17 and must output v200)."""
    if not isinstance(batch, Batch):
        raise ValueError(f"batch must be a tasks.Batch, got {type(batch).__name__}")
    row = checks.int_in("row", row, 0, batch.tokens.shape[0])
    per_line = checks.pos_int("per_line", per_line)
    checks.int_array("batch.tokens", batch.tokens[row], lo=0, hi=VOCAB)       # token_name's range, named here
    checks.int_array("batch.targets", batch.targets[row], lo=-1, hi=VOCAB)
    T = batch.tokens.shape[1]
    stop = T if stop is None else checks.int_in("stop", stop, 0, T + 1)
    start = checks.int_in("start", start, 0, max(stop, 1))
    names = []
    for t in range(start, stop):
        n = token_name(batch.tokens[row, t])
        if batch.targets[row, t] >= 0:
            n += "→" + token_name(batch.targets[row, t])
        names.append(n)
    lines = []
    for i in range(0, len(names), per_line):
        lines.append(f"{start + i:4d}  " + " ".join(f"{n:>6s}" if "→" not in n else f"{n:>9s}"
                                                   for n in names[i:i + per_line]))
    return "\n".join(lines)
