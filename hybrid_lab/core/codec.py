"""Results of a student's function as plain data: what crosses from the student's sandboxed process to the grader.

The grader never unpickles what a student's process sends (unpickling runs code). ``encode`` turns a result into
JSON built from None, bools, ints, floats (NaN and infinities included), strings, lists, tuples, dicts and numpy
arrays / scalars of bool, integer or float dtypes; ``decode`` builds only those types back, and refuses anything
else with a ValueError (so a hostile process can send a wrong answer, never code or an object with behaviour).
"""
from __future__ import annotations

import base64
import json
import math

import numpy as np

__all__ = ["encode", "decode", "MAX_BYTES"]

MAX_BYTES = 64 * 2 ** 20          # one result, encoded; a bigger one is refused, not read
_KINDS = "biuf"                   # numpy dtype kinds that cross: bool, signed / unsigned integers, floats
_MAX_DEPTH = 32


def _enc(v, depth: int):
    if depth > _MAX_DEPTH:
        raise ValueError(f"the result nests deeper than {_MAX_DEPTH} levels")
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return {"int": str(v)} if abs(v) >= 2 ** 53 else v
    if isinstance(v, float):
        return v if math.isfinite(v) else {"float": repr(v)}
    if isinstance(v, np.generic) and v.dtype.kind in _KINDS:
        return {"scalar": v.dtype.str, "data": base64.b64encode(np.asarray(v).tobytes()).decode()}
    if isinstance(v, np.ndarray):
        if v.dtype.kind not in _KINDS:
            raise ValueError(f"an array of dtype {v.dtype} cannot be sent (numbers and bools only)")
        a = np.array(v, order="C", copy=True)             # (ascontiguousarray would make a 0-d array 1-d)
        return {"array": a.dtype.str, "shape": list(a.shape), "data": base64.b64encode(a.tobytes()).decode()}
    if isinstance(v, tuple):
        return {"tuple": [_enc(x, depth + 1) for x in v]}
    if isinstance(v, list):
        return [_enc(x, depth + 1) for x in v]
    if isinstance(v, dict):
        if not all(isinstance(k, (str, int)) and not isinstance(k, bool) for k in v):
            raise ValueError("a dict in the result has keys other than str / int")
        return {"dict": [[_enc(k, depth + 1), _enc(x, depth + 1)] for k, x in v.items()]}
    torch = __import__("sys").modules.get("torch")          # a tensor result: its numbers (never import torch here)
    if torch is not None and isinstance(v, torch.Tensor):
        return _enc(v.detach().cpu().numpy(), depth)
    raise ValueError(f"a result of type {type(v).__name__} cannot be sent (numbers, strings, arrays, lists, tuples, "
                     f"dicts)")


def encode(value) -> str:
    """``value`` as one line of JSON (ValueError for a type that cannot cross)."""
    try:
        return json.dumps(_enc(value, 0), allow_nan=False, separators=(",", ":"))
    except ValueError as exc:
        raise ValueError(f"value: {exc}") from None


def _dtype(s):
    if not isinstance(s, str):
        raise ValueError(f"bad dtype {s!r}")
    dt = np.dtype(s)
    if dt.kind not in _KINDS or dt.hasobject:
        raise ValueError(f"dtype {s!r} does not cross (numbers and bools only)")
    return dt


def _dec(v, depth: int):
    if depth > _MAX_DEPTH:
        raise ValueError(f"the data nests deeper than {_MAX_DEPTH} levels")
    if v is None or isinstance(v, (bool, str, int, float)):
        return v
    if isinstance(v, list):
        return [_dec(x, depth + 1) for x in v]
    if not isinstance(v, dict) or len(v) not in (1, 2, 3):
        raise ValueError(f"unexpected item {str(v)[:80]!r}")
    if set(v) == {"int"} and isinstance(v["int"], str):
        return int(v["int"])
    if set(v) == {"float"} and v["float"] in ("nan", "inf", "-inf"):
        return float(v["float"])
    if set(v) == {"tuple"} and isinstance(v["tuple"], list):
        return tuple(_dec(x, depth + 1) for x in v["tuple"])
    if set(v) == {"dict"} and isinstance(v["dict"], list):
        out = {}
        for pair in v["dict"]:
            if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], (str, int))
                    and not isinstance(pair[0], bool)):
                raise ValueError(f"bad dict item {str(pair)[:80]!r}")
            out[pair[0]] = _dec(pair[1], depth + 1)
        return out
    if set(v) == {"scalar", "data"}:
        dt = _dtype(v["scalar"])
        raw = base64.b64decode(v["data"], validate=True)
        if len(raw) != dt.itemsize:
            raise ValueError("a scalar's bytes do not match its dtype")
        return np.frombuffer(raw, dt)[0]
    if set(v) == {"array", "shape", "data"}:
        dt = _dtype(v["array"])
        shape = v["shape"]
        if not (isinstance(shape, list) and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                                for n in shape)):
            raise ValueError(f"bad array shape {shape!r}")
        raw = base64.b64decode(v["data"], validate=True)
        if len(raw) != dt.itemsize * math.prod(shape):
            raise ValueError("an array's bytes do not match its shape and dtype")
        return np.frombuffer(raw, dt).reshape(shape).copy()
    raise ValueError(f"unexpected item {str(v)[:80]!r}")


def decode(text: str):
    """The value :func:`encode` wrote (ValueError for anything else, or over MAX_BYTES)."""
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    if len(text) > MAX_BYTES:
        raise ValueError(f"the result is {len(text)} bytes, more than the {MAX_BYTES} a result may have")
    return _dec(json.loads(text), 0)
