"""Models built from the ops: the mini hybrid (02), the tiny LLM and lightning indexer (04), HySparse (05),
HySparse2 (06), InfLLM-V2 selection and the Forecast head (08), attention statistics.

Layer: imports ``core`` and ``ops``."""
