"""Serving: request traces (``workloads``), the radix prefix cache and its policies (``radix_cache``, ``marconi``),
the P/D hand-off (``pd_bundle``, ``pd_workers``, ``pd_timeline``) and the SparDA offload simulator (``offload_sim``).

Layer: imports ``core``, ``ops``, ``models`` and ``costs``."""
