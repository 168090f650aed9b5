"""Backend switch: the numpy core (default) or the Triton kernels of ``gpu_track``.

Six ops have a Triton kernel with the same signature as their numpy twin (see ``SWAPPABLE_OPS``). A twin is
declared with ``@swappable("name")``; when the backend is ``"triton"`` the call is forwarded to
``gpu_track.numpy_api.<name>``, which takes and returns numpy arrays (so notebooks do not change).

    hybrid_lab.use_backend("triton")          # switch for the rest of the session
    with hybrid_lab.use_backend("triton"):    # or only inside a block
        ...
    HYBRID_LAB_BACKEND=triton jupyter lab     # or from the environment
"""
from __future__ import annotations

import functools
import importlib
import os

BACKENDS = ("numpy", "triton")
SWAPPABLE_OPS = (
    "selective_scan",
    "selective_scan_step",
    "ssd_chunked",
    "sparse_attention",
    "lightning_indexer",
    "block_sparse_attention",
    "fa_decode_topk",
)


def _check(name: str) -> str:
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {name!r}")
    return name


_state = {"backend": _check(os.environ.get("HYBRID_LAB_BACKEND", "numpy").strip().lower() or "numpy")}


def get_backend() -> str:
    """The active backend name: ``"numpy"`` or ``"triton"``."""
    return _state["backend"]


class use_backend:
    """Select the backend. Takes effect immediately; used as a context manager it is restored on exit."""

    def __init__(self, name: str):
        self._previous = _state["backend"]
        _state["backend"] = _check(name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _state["backend"] = self._previous
        return False


def _triton_impl(op: str):
    try:
        module = importlib.import_module("gpu_track.numpy_api")
    except ImportError as e:  # torch/triton missing: say how to get them
        raise RuntimeError(
            "the triton backend needs torch and triton: pip install -e '.[gpu]' (see README)") from e
    return getattr(module, op)


def swappable(op: str):
    """Mark a numpy function as the twin of the Triton op ``op`` (same signature, same semantics)."""
    if op not in SWAPPABLE_OPS:
        raise ValueError(f"op must be one of {SWAPPABLE_OPS}, got {op!r}")

    def wrap(fn):
        @functools.wraps(fn)
        def dispatch(*args, **kwargs):
            if _state["backend"] == "triton":
                return _triton_impl(op)(*args, **kwargs)
            return fn(*args, **kwargs)

        dispatch.numpy_impl = fn
        dispatch.op_name = op
        return dispatch

    return wrap
