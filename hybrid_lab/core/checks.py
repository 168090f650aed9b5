"""Argument checks shared by every layer: one copy of each rule, one wording of each message.

Every check raises ``ValueError`` naming the argument, what was expected and what was given, so a bad input never
becomes a silent number. Checks return the value converted (``int``, ``np.ndarray``) so callers use what was checked.
"""
from __future__ import annotations

import numbers

import numpy as np

__all__ = [
    "pos_int", "nonneg_int", "int_in", "finite_number", "positive_number", "nonneg_number", "array", "finite_array",
    "int_array", "prob_rows", "heads", "tokens", "query_positions", "number_in", "index_sets", "qkv", "output_size",
    "no_repeats", "MAX_ELEMENTS", "compute_dtype", "flag",
]

MAX_ELEMENTS = 2 ** 40
"""The most entries an array a size argument asks for may hold (8 TiB of float64): past it a size is a mistake
(2**62 rows), and numpy's own "array is too big" / MemoryError would name no argument."""


def _is_int(value) -> bool:
    return isinstance(value, (numbers.Integral, np.integer)) and not isinstance(value, (bool, np.bool_))


def pos_int(name: str, value, minimum: int = 1) -> int:
    """An integer >= ``minimum`` (bools and floats are refused: ``2.0`` is not a count)."""
    if not _is_int(value) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def nonneg_int(name: str, value) -> int:
    return pos_int(name, value, 0)


def int_in(name: str, value, lo: int, hi: int) -> int:
    """An integer in [lo, hi)."""
    if not _is_int(value) or not lo <= value < hi:
        raise ValueError(f"{name} must be an integer in [{lo}, {hi}), got {value!r}")
    return int(value)


def flag(name: str, value) -> bool:
    """``value`` as a bool if it is one (numpy's bool too); anything else (1, "yes", None) is a ValueError."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ValueError(f"{name} must be True or False, got {value!r}")


def finite_number(name: str, value) -> float:
    """A finite real number (NaN, inf, strings and arrays are refused)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.number)) \
            or not np.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def positive_number(name: str, value) -> float:
    v = finite_number(name, value)
    if v <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return v


def nonneg_number(name: str, value) -> float:
    v = finite_number(name, value)
    if v < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return v


def number_in(name: str, value, lo: float, hi: float) -> float:
    """A finite number in the closed interval [lo, hi] (a fraction, an angle, ...)."""
    v = finite_number(name, value)
    if not lo <= v <= hi:
        raise ValueError(f"{name} must lie in [{lo:g}, {hi:g}], got {value!r}")
    return v


def compute_dtype(*arrays) -> np.dtype:
    """The precision rule: the dtype float math on these arrays runs in, the widest of their dtypes and at least
    float32 (float16 and integers are widened: float16 sums lose ~1e-3). ``None`` entries are skipped."""
    return np.result_type(np.float32, *[np.asarray(a).dtype for a in arrays if a is not None])


def _asarray(name: str, a) -> np.ndarray:
    """``np.asarray(a)``, or a ValueError naming ``name`` where numpy makes no array of it: a ragged nested list, a
    torch bfloat16 tensor (bfloat16 is not a numpy dtype: refused like any non-numeric dtype), a tensor on a GPU."""
    try:
        return np.asarray(a)
    except (TypeError, ValueError, RuntimeError) as e:
        raise ValueError(f"{name} must be an array of numbers (numpy dtypes), got {type(a).__name__} that numpy "
                         f"cannot read: {str(e).splitlines()[0][:100]}") from None


def array(name: str, a, ndim: int | None = None, shape_doc: str = "", kinds: str = "fiu") -> np.ndarray:
    """A numpy array of the given rank whose dtype kind is in ``kinds`` (f float, i/u integer, b bool)."""
    a = _asarray(name, a)
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D {shape_doc}".rstrip() + f", got shape {a.shape}")
    if a.dtype.kind not in kinds:
        want = {"f": "float", "i": "integer", "u": "integer", "b": "bool"}
        names = "/".join(dict.fromkeys(want[k] for k in kinds if k in want))
        article = "an" if names[0] in "aeiou" else "a"
        raise ValueError(f"{name} must be {article} {names} array, got dtype {a.dtype}")
    return a


def finite_array(name: str, a, ndim: int | None = None, shape_doc: str = "", allow_neginf: bool = False) -> np.ndarray:
    """A real array with no NaN and no inf (``allow_neginf``: -inf allowed, it marks a masked position)."""
    a = array(name, a, ndim, shape_doc)
    if a.dtype.kind == "f":
        bad = np.isnan(a) | (np.isposinf(a) if allow_neginf else np.isinf(a))
        if bad.any():
            first = tuple(int(i) for i in np.argwhere(bad)[0])
            what = "NaN or +inf" if allow_neginf else "NaN or inf"
            raise ValueError(f"{name} must be finite, got {what} at index {first} ({a[first]})")
    return a


def int_array(name: str, a, ndim: int | None = None, shape_doc: str = "", lo: int | None = None,
              hi: int | None = None) -> np.ndarray:
    """An integer array (returned as int64) whose entries lie in [lo, hi) where given."""
    a = _asarray(name, a)
    if a.size == 0 and a.dtype.kind == "f":      # np.asarray([]) is float64: an empty list of indices is fine
        a = a.astype(np.int64)
    a = array(name, a, ndim, shape_doc, kinds="iu").astype(np.int64)
    if a.size and ((lo is not None and a.min() < lo) or (hi is not None and a.max() >= hi)):
        raise ValueError(f"{name} entries must lie in [{lo if lo is not None else '-inf'}, "
                         f"{hi if hi is not None else 'inf'}), got range [{a.min()}, {a.max()}]")
    return a


def prob_rows(name: str, p, atol: float = 1e-6) -> np.ndarray:
    """Probabilities over the last axis: finite, >= 0, each row summing to 1."""
    p = finite_array(name, p).astype(np.float64)
    if p.ndim < 1:
        raise ValueError(f"{name} must be an array (..., S) of probabilities, got a scalar")
    if (p < 0).any():
        raise ValueError(f"{name} must be >= 0, got min {p.min():.6g}")
    sums = p.sum(-1)
    if not np.allclose(sums, 1.0, atol=atol):
        raise ValueError(f"{name} rows must sum to 1, got sums in [{sums.min():.6g}, {sums.max():.6g}]")
    return p


def heads(Hq, Hkv, q_name: str = "n_heads_q", kv_name: str = "n_heads_kv") -> int:
    """Grouped-query heads: Hq query heads share Hkv KV heads; returns the group size G = Hq // Hkv."""
    Hq, Hkv = pos_int(q_name, Hq), pos_int(kv_name, Hkv)
    if Hq % Hkv:
        raise ValueError(f"{q_name}={Hq} must be a multiple of {kv_name}={Hkv} (query heads share KV heads)")
    return Hq // Hkv


def qkv(q, k, v=None):
    """Batched grouped-query attention operands, finite, no empty axis: q (B, T, Hq, d), k (B, S, Hkv, d) and
    optionally v (B, S, Hkv, dv), with Hq a multiple of Hkv. Returns (q, k, v) as arrays in ``compute_dtype`` of
    each (v stays None)."""
    q = finite_array("q", q, 4, "(B, T, Hq, d)")
    k = finite_array("k", k, 4, "(B, S, Hkv, d)")
    if 0 in q.shape or 0 in k.shape:
        raise ValueError(f"q and k must have no empty axis, got q {q.shape} and k {k.shape}")
    B, T, Hq, d = q.shape
    if k.shape[0] != B or k.shape[3] != d:
        raise ValueError(f"k must be (B={B}, S, Hkv, d={d}) to match q {q.shape}, got shape {k.shape}")
    heads(Hq, k.shape[2], "query heads Hq", "KV heads Hkv")
    if v is not None:
        v = finite_array("v", v, 4, "(B, S, Hkv, dv)")
        if v.shape[:3] != k.shape[:3] or v.shape[3] == 0:
            raise ValueError(f"v must be (B, S, Hkv, dv) matching k {k.shape[:3]}, got shape {v.shape}")
        v = v.astype(compute_dtype(v), copy=False)
    return q.astype(compute_dtype(q), copy=False), k.astype(compute_dtype(k), copy=False), v


def output_size(name: str, shape) -> int:
    """The number of entries of an array of ``shape`` that the argument ``name`` sizes; refused past
    ``MAX_ELEMENTS``, counting an empty axis as 1 (numpy refuses an array of shape (0, 2**62) too). Computed with
    Python ints: no int64 overflow."""
    n = 1
    for s in shape:
        n *= max(nonneg_int(f"{name} (an axis of the shape {tuple(shape)!r})", s), 1)
    if n > MAX_ELEMENTS:
        raise ValueError(f"{name} asks for an array of shape {tuple(int(s) for s in shape)} ({n} entries), more than "
                         f"{MAX_ELEMENTS} (2**40)")
    return n


def no_repeats(name: str, idx, what: str = "position") -> np.ndarray:
    """Index sets over the last axis with -1 as an empty slot: no entry >= 0 twice in a row (it would be counted,
    read or weighted twice). Returns ``idx``."""
    idx = _asarray(name, idx)
    if idx.ndim < 1:
        raise ValueError(f"{name} must be an array (..., K) of index sets, got a scalar")
    srt = np.sort(idx, axis=-1)
    dup = (srt[..., 1:] == srt[..., :-1]) & (srt[..., 1:] >= 0)
    if dup.any():
        row = tuple(int(i) for i in np.argwhere(dup)[0][:-1])
        value = int(srt[row][1:][dup[row]][0])
        raise ValueError(f"{name} must not repeat a {what} within one row, got {value} twice in row {row}")
    return idx


def tokens(name: str, toks, vocab: int) -> np.ndarray:
    """A non-empty 1-D array of token ids in [0, vocab)."""
    vocab = pos_int("vocab", vocab)
    toks = _asarray(name, toks)
    if toks.ndim != 1 or toks.size == 0 or toks.dtype.kind not in "iu":
        raise ValueError(f"{name} must be a non-empty 1-D integer array, got shape {toks.shape} dtype {toks.dtype}")
    return int_array(name, toks, lo=0, hi=vocab)


def query_positions(q_pos, T: int, S: int) -> np.ndarray:
    """Absolute positions of T queries over S keys: the given (T,) integers in [0, S), or by default the last T
    positions (``S - T + arange(T)``: a prefill chunk or a decode step at the end of the cache). Returns int64."""
    T, S = nonneg_int("T (the number of queries)", T), nonneg_int("S (the number of keys)", S)
    if q_pos is None:
        if T > S:
            raise ValueError(f"without q_pos the T={T} queries are the last T of S={S} keys, so T must be <= S")
        return S - T + np.arange(T, dtype=np.int64)
    q_pos = _asarray("q_pos", q_pos)
    if q_pos.shape != (T,) or q_pos.dtype.kind not in "iu":
        raise ValueError(f"q_pos must be an integer array of shape (T={T},), got shape {q_pos.shape} "
                         f"dtype {q_pos.dtype}")
    return int_array("q_pos", q_pos, lo=0, hi=S)


def index_sets(name: str, idx, n: int, ndim: int | None = None, shape_doc: str = "") -> np.ndarray:
    """Index sets over ``n`` positions, one per row (last axis): integers in [-1, n), -1 = an empty slot, and no
    position listed twice in a row (it would be counted twice). Returns int64."""
    n = nonneg_int(f"n (the number of positions {name} indexes)", n)
    idx = int_array(name, idx, ndim, shape_doc, lo=-1, hi=n)
    if idx.ndim < 1:
        raise ValueError(f"{name} must be an array (..., K) of index sets, got a scalar")
    srt = np.sort(idx, axis=-1)
    dup = (srt[..., 1:] == srt[..., :-1]) & (srt[..., 1:] >= 0)
    if dup.any():
        row = tuple(int(i) for i in np.argwhere(dup)[0])
        raise ValueError(f"{name} must not list a position twice in one row, got {srt[row]} twice in row {row[:-1]}")
    return idx
