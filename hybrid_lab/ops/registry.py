"""Backend switch and op registry: the numpy core (default) or the Triton kernels of ``gpu_track``.

Seven ops (``SWAPPABLE_OPS``) have a numpy implementation in ``hybrid_lab.ops`` and a Triton kernel with the same
signature. An op is declared with ``@swappable("name")``; every call then runs

    1. ``contracts.check_<name>(*args, **kwargs)``  once: shapes, dtypes, ranges, NaN/inf, index bounds;
    2. the active backend on the validated arguments: the numpy function itself, or
       ``gpu_track.numpy_api.<name>`` (numpy in, numpy out, so notebooks do not change).

    hybrid_lab.use_backend("triton")          # switch for the rest of the session
    with hybrid_lab.use_backend("triton"):    # or only inside a block
        ...
    HYBRID_LAB_BACKEND=triton jupyter lab     # or from the environment

Each op also carries ``op.check`` (its contract) and ``op.numpy_impl`` (validate, then run numpy, whatever the
backend: what the kernels are tested against).
"""
from __future__ import annotations

import functools
import importlib
import os

from hybrid_lab.ops import contracts

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
    """A backend name, case and surrounding spaces ignored (``use_backend("TRITON")`` as
    ``HYBRID_LAB_BACKEND=TRITON``); returned lower-case."""
    if not isinstance(name, str) or name.strip().lower() not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS} (any case), got {name!r}")
    return name.strip().lower()


_state = {"backend": _check(os.environ.get("HYBRID_LAB_BACKEND", "numpy").strip() or "numpy")}


def get_backend() -> str:
    """The active backend name: ``"numpy"`` or ``"triton"``."""
    return _state["backend"]


class use_backend:
    """Select the backend. Takes effect immediately; used as a context manager it is restored on exit."""

    def __init__(self, backend: str):
        self._previous = _state["backend"]
        _state["backend"] = _check(backend)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _state["backend"] = self._previous
        return False


def triton_module():
    """``gpu_track.numpy_api``, found by name: a plugin lookup, not a static import. ``hybrid_lab`` never imports
    ``gpu_track`` (which depends only on ``hybrid_lab.ops.contracts``), so the numpy core runs without torch."""
    try:
        return importlib.import_module("gpu_track.numpy_api")
    except ImportError as e:  # torch/triton missing: say how to get them
        raise RuntimeError(
            "the triton backend needs torch and triton: pip install -e '.[gpu]' (see README)") from e


def gpu_track_package():
    """The ``gpu_track`` package, found by name as in :func:`triton_module`. Importing it needs neither torch nor
    triton; its ``HAS_TRITON`` says whether the Triton kernels can run here (triton installs on Linux only)."""
    return importlib.import_module("gpu_track")


def triton_stand_in():
    """``gpu_track.no_triton.triton``: a stand-in for the ``triton`` module where triton is missing, with which
    kernels can be defined but not launched (launching says that Triton is needed)."""
    return importlib.import_module("gpu_track.no_triton").triton


def swappable(op: str):
    """Declare ``fn`` as the numpy implementation of the swappable op ``op``: ``fn`` receives the arguments
    validated by ``contracts.check_<op>`` (same signature, positional, in signature order)."""
    if op not in SWAPPABLE_OPS:
        raise ValueError(f"op must be one of {SWAPPABLE_OPS}, got {op!r}")
    contract = f"check_{op}"

    def wrap(fn):
        @functools.wraps(fn)
        def dispatch(*args, **kwargs):
            valid = getattr(contracts, contract)(*args, **kwargs)   # looked up per call: a test can count it
            impl = getattr(triton_module(), op) if _state["backend"] == "triton" else fn
            return impl(*valid)

        @functools.wraps(fn)
        def numpy_impl(*args, **kwargs):
            return fn(*getattr(contracts, contract)(*args, **kwargs))

        dispatch.numpy_impl = numpy_impl
        dispatch.check = getattr(contracts, contract)
        dispatch.op_name = op
        return dispatch

    return wrap
