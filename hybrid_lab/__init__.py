"""hybrid-lab: a numpy teaching core for serving hybrid (SSM + attention) and sparse-attention LLMs.

The package is layered; each layer imports only the ones below it (tests/test_layers.py checks it):

    core/      shared building blocks (norms, RoPE, masked attention) and argument checks
    ops/       the swappable ops (scans, sparse / block-sparse attention, indexer, FA decode): one contract each,
               a numpy implementation here, a Triton kernel in ``gpu_track``
    costs/     closed-form ledgers: the one 7B hybrid shape, KV / state / FLOP formulas, DSA roofline, bounds
    models/    models built from the ops: mini hybrid, tiny LLM, HySparse, HySparse2, indexer, InfLLM-V2, Forecast
    serving/   traces, the radix prefix cache and Marconi, the P/D hand-off, the SparDA offload simulator
    widgets/   plots and explorers for the notebooks
    exercises/ the graded exercises: the reference and cases of each, and ``check``
    course/    the notebook pipeline and the ``hybrid-lab`` command (apart from the rest)

README's "Layout" maps each module to its notebook and paper section. Import what you need::

    from hybrid_lab.ops.ssm import ssm_scan, ssm_chunked

The swappable ops are routed by :func:`use_backend` (numpy by default, or Triton).
"""
from hybrid_lab.ops.registry import SWAPPABLE_OPS, get_backend, use_backend

__version__ = "0.1.0"
__all__ = ["use_backend", "get_backend", "SWAPPABLE_OPS", "__version__"]
