"""GPU track: Triton kernels that are twins of the numpy core's swappable ops.

Layout: ``common`` (device, accumulator/precision, buffers, argument checks) and ``softmax`` (the online-softmax
step and split-K combine every attention kernel uses) at the bottom, then one module per kernel, each with a torch
wrapper taking/returning torch tensors:

- ``sparse_attention``   token-level sparse attention (index set per query and KV group, one softmax)
- ``lightning_indexer``  DSA indexer scores Σ_j w·ReLU(q·k) + deterministic top-k
- ``fa_decode_topk``     HySparse2's full-attention decode that also returns top-k positions
- ``selective_scan``     Mamba-1 chunked selective scan (prefill) and one decode step
- ``ssd``                Mamba-2 SSD chunked scan (intra-chunk masked matmul on tensor cores)
- ``block_sparse``       InfLLM-V2 / SparDA block-sparse attention over 64-token blocks
- ``numpy_api``          numpy in / numpy out, what ``hybrid_lab.use_backend("triton")`` calls

Without a CUDA GPU the kernels run in Triton's interpreter on CPU tensors. ``TRITON_INTERPRET=1`` must be set
before any ``@triton.jit`` function is defined, so it is set here, on import of the package, when no GPU is seen.

Triton has wheels for Linux only. Elsewhere (macOS, Windows) ``HAS_TRITON`` is False, the kernel modules cannot
be imported, and :mod:`gpu_track.no_triton` stands in for ``triton`` so a notebook's kernel definitions still run;
the stored H200 results (:mod:`gpu_track.report`) need neither torch nor triton.
"""
from __future__ import annotations

import importlib.util
import os
import sys

NEEDS_TRITON = ("needs Triton, which installs on Linux only (not on macOS or Windows): run this part on Linux, "
                "Colab, or the course hub")


def _triton_found() -> bool:
    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):      # a finder that refuses it, or a broken entry in sys.modules
        return False


HAS_TRITON = _triton_found()


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:  # the backend reports the missing extra
        return False
    return torch.cuda.is_available()


if not _cuda_available():
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        # triton's own library functions (tl.zeros, ...) were already compiled for a GPU: too late to interpret
        raise RuntimeError("no CUDA GPU: set TRITON_INTERPRET=1 before importing triton, or import gpu_track first")
    os.environ.setdefault("TRITON_INTERPRET", "1")

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
