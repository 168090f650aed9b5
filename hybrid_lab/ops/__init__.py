"""The swappable ops: each has one public contract ``check_<op>`` (``contracts``), a numpy implementation here and a
Triton kernel in ``gpu_track``; ``registry`` runs the contract once and dispatches to the active backend.

    contracts.py         check_<op> for every op (shapes, dtypes, ranges, NaN/inf, index bounds), float_dtype, n_blocks
    registry.py          use_backend / get_backend, @swappable: contract, then numpy or gpu_track.numpy_api
    ssm.py               selective_scan, selective_scan_step (Mamba-1), ssd_chunked (Mamba-2) + reference scans
    sparse_attention.py  sparse_attention (one softmax over an index set), topk_indices
    lightning_indexer.py lightning_indexer (DeepSeek-V3.2's indexer scores + top-k)
    block_sparse.py      block_sparse_attention (InfLLM-V2 / SparDA blocks)
    fa_decode.py         fa_decode_topk (HySparse2's cross FA at decode), forced_window_select

Layer: imports only ``hybrid_lab.core``."""
