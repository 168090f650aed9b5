"""hybrid-lab: a numpy teaching core for serving hybrid (SSM + attention) and sparse-attention LLMs.

Modules are one idea each (``ssm``, ``hybrid``, ``ledger``, ``sparse_attention``, ...); import what you need::

    from hybrid_lab.ops.ssm import ssm_scan, ssm_chunked

The six ops that have Triton twins in ``gpu_track`` are routed by :func:`use_backend`.
"""
from hybrid_lab.ops.registry import SWAPPABLE_OPS, get_backend, use_backend

__version__ = "0.1.0"
__all__ = ["use_backend", "get_backend", "SWAPPABLE_OPS", "__version__"]
