"""The swappable ops: each has one public contract ``check_<op>`` (``contracts``), a numpy implementation here and a
Triton kernel in ``gpu_track``; ``registry`` validates once and dispatches to the active backend.

Layer: imports only ``hybrid_lab.core``."""
