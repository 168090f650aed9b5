"""A stand-in for ``triton`` where Triton does not install (macOS, Windows): kernels can be *defined*, not run.

``from gpu_track.no_triton import triton, tl`` gives a ``triton.jit`` that wraps the function in a
:class:`MissingKernel` (launching or calling it raises :class:`TritonMissing`), ``tl.constexpr`` for the
annotations, and the host-side helpers a launcher uses (``triton.cdiv``, ``triton.next_power_of_2``). Everything
else under ``tl`` raises TritonMissing when used, never at definition time.
"""
from __future__ import annotations

import types

from gpu_track import NEEDS_TRITON


class TritonMissing(ImportError):
    """A Triton kernel was launched where Triton is not installed."""


class MissingKernel:
    """What ``triton.jit`` returns here: the Python function, kept for its name and source; launching raises."""

    def __init__(self, fn):
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "kernel")
        self.__doc__ = getattr(fn, "__doc__", None)

    def _missing(self, *args, **kwargs):
        raise TritonMissing(f"the kernel {self.__name__} {NEEDS_TRITON}")

    def __getitem__(self, grid):
        return self._missing

    __call__ = run = _missing


def jit(fn=None, **kwargs):
    """``@triton.jit`` and ``@triton.jit(...)``: a MissingKernel."""
    if fn is None:
        return lambda f: MissingKernel(f)
    return MissingKernel(fn)


def cdiv(a, b):
    return -(-a // b)


def next_power_of_2(n):
    n = int(n)
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


class _Language(types.ModuleType):
    constexpr = type("constexpr", (), {"__doc__": "annotation of a compile-time argument (stand-in)"})

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)

        def missing(*args, **kwargs):
            raise TritonMissing(f"triton.language.{name} {NEEDS_TRITON}")
        return missing


tl = _Language("triton.language", "stand-in for triton.language (Triton is not installed)")
triton = types.ModuleType("triton", "stand-in for triton (Triton is not installed)")
triton.jit, triton.cdiv, triton.next_power_of_2, triton.language = jit, cdiv, next_power_of_2, tl
triton.TritonMissing, triton.MissingKernel = TritonMissing, MissingKernel
