"""numpy in, numpy out: what ``hybrid_lab.use_backend("triton")`` calls in place of the numpy implementations.

Same names and signatures as the swappable ops (``hybrid_lab.ops.registry.SWAPPABLE_OPS``). The registry has
already run the op's contract (``hybrid_lab.ops.contracts.check_<op>``) on the arguments, so this module checks
nothing: it converts numpy -> torch on the kernels' device (the GPU, or CPU tensors under ``TRITON_INTERPRET=1``),
runs the Triton kernel and converts back to numpy in the dtype the numpy implementation returns
(``contracts.float_dtype``). float64 inputs run the kernels in float64 so both backends print the same numbers.
"""
from __future__ import annotations

import numpy as np
import torch

import gpu_track  # noqa: F401  (sets TRITON_INTERPRET before any kernel is defined)
from gpu_track import block_sparse as _bs
from gpu_track import fa_decode_topk as _fa
from gpu_track import lightning_indexer as _li
from gpu_track import selective_scan as _ss
from gpu_track import sparse_attention as _sa
from gpu_track import ssd as _ssd
from gpu_track.common import device, topk_stable
from hybrid_lab.ops.contracts import check_scores, float_dtype

_TORCH_FLOAT = {np.dtype(np.float16): torch.float16, np.dtype(np.float32): torch.float32,
                np.dtype(np.float64): torch.float64}


def _operand_dtype(*arrays) -> torch.dtype:
    """One float dtype for a kernel's float operands: the widest input dtype (float16 stays float16; integer-only
    or other float kinds run in float32)."""
    dt = np.result_type(*[np.asarray(a).dtype for a in arrays if a is not None])
    return _TORCH_FLOAT.get(dt, torch.float64 if dt.kind == "f" and dt.itemsize > 8 else torch.float32)


def _t(a, dtype: torch.dtype | None = None):
    """numpy -> torch on the kernels' device: integers as int64, floats as ``dtype``; None stays None."""
    if a is None:
        return None
    a = np.asarray(a)
    if a.dtype.kind in "iub":
        a = a.astype(np.int64)
    elif a.dtype not in _TORCH_FLOAT:
        a = a.astype(np.float64)
    t = torch.from_numpy(np.ascontiguousarray(a)).to(device())
    return t if dtype is None else t.to(dtype)


def _np(t, dtype):
    return t.detach().cpu().numpy().astype(dtype, copy=False)


# ------------------------------------------------------------------------------------------- selective scans
def selective_scan(x, dt, A, B, C, D=None, h0=None, chunk_size=64):
    """Mamba-1 chunked selective scan on the Triton kernel; see ``hybrid_lab.ops.ssm.selective_scan``."""
    ft = _operand_dtype(x, dt, A, B, C)
    y, h = _ss.selective_scan(*[_t(a, ft) for a in (x, dt, A, B, C, D, h0)])
    return _np(y, float_dtype(x, dt, A, B, C, D)), _np(h, float_dtype(x, dt, A, B, C))


def selective_scan_step(x, dt, A, B, C, D, h):
    """One Mamba-1 decode step on the Triton kernel; see ``hybrid_lab.ops.ssm.selective_scan_step``."""
    ft = _operand_dtype(x, dt, A, B, C, h)
    y, hn = _ss.selective_scan_step(*[_t(a, ft) for a in (x, dt, A, B, C, D, h)])
    return _np(y, float_dtype(x, dt, A, B, C, D, h)), _np(hn, float_dtype(x, dt, A, B, C, h))


def ssd_chunked(x, dt, A, B, C, D=None, h0=None, chunk_size=64):
    """Mamba-2 SSD chunked scan on the Triton kernel; see ``hybrid_lab.ops.ssm.ssd_chunked``."""
    ft = _operand_dtype(x, dt, A, B, C)
    # the kernel's chunk is a power of two in [16, 64]; the result does not depend on it beyond rounding
    y, h = _ssd.ssd_chunked(*[_t(a, ft) for a in (x, dt, A, B, C, D, h0)], chunk=min(64, max(16, int(chunk_size))))
    return _np(y, float_dtype(x, dt, A, B, C, D)), _np(h, float_dtype(x, dt, A, B, C))


# ------------------------------------------------------------------------------------------- attention ops
def sparse_attention(q, k, v, idx, scale=None, sink=None):
    """Token-level sparse attention on the Triton kernel; see ``hybrid_lab.ops.sparse_attention``."""
    ft = _operand_dtype(q, k, v)
    sink_t = None if sink is None else _t(sink).reshape(-1)
    o = _sa.sparse_attention(_t(q, ft), _t(k, ft), _t(v, ft), _t(idx), scale, sink_t)
    return _np(o, float_dtype(q))


def lightning_indexer(q, w, k, topk, q_pos=None):
    """Lightning indexer scores + deterministic top-k on the Triton kernel; see ``hybrid_lab.ops.lightning_indexer``."""
    ft = _operand_dtype(q, w, k)
    # positions past the last key all mean "sees every key": clamp to what the kernel's int32 holds
    qp = None if q_pos is None else _t(np.minimum(q_pos, np.iinfo(np.int32).max))
    scores = check_scores(_np(_li.indexer_scores(_t(q, ft), _t(w, ft), _t(k, ft), qp), float_dtype(q, w, k)),
                          "q, w and k")
    return scores, _np(topk_stable(torch.from_numpy(scores), int(topk)), np.int64)


def fa_decode_topk(q, k, v, topk, window, scale=None, sink=None):
    """HySparse2 FA decode + top-k on the Triton kernels; see ``hybrid_lab.ops.fa_decode.fa_decode_topk``."""
    ft = _operand_dtype(q, k, v)
    sink_t = None if sink is None else _t(sink).reshape(-1)
    o, score = _fa.fa_decode(_t(q, ft), _t(k, ft), _t(v, ft), int(window), scale, sink_t)
    check_scores(score.cpu().numpy(), "q and k")                 # -inf inside the window: what is ranked
    return _np(o, float_dtype(q)), _np(topk_stable(score, int(topk)), np.int64)


def block_sparse_attention(q, k, v, block_idx, block_size=64, scale=None, q_pos=None):
    """Block-sparse attention on the Triton kernel; see ``hybrid_lab.ops.block_sparse.block_sparse_attention``."""
    ft = _operand_dtype(q, k, v)
    o = _bs.block_sparse_attention(_t(q, ft), _t(k, ft), _t(v, ft), _t(block_idx), int(block_size), scale,
                                   _t(q_pos))
    return _np(o, float_dtype(q))
