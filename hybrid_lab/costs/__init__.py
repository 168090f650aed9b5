"""Closed-form costs: the one 7B hybrid shape (``shape7b``), the three-costs ledger (00, 02), Marconi's FLOP
efficiency (03), the DSA roofline (04), the HySparse/HySparse2 KV and FLOP ledger (06), the sparse-attention error
bounds (05).

Layer: imports only ``core``."""
