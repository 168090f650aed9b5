"""numpy in, numpy out: what ``hybrid_lab.use_backend("triton")`` calls in place of the numpy twins.

Same names, signatures and semantics as the twins (``hybrid_lab.ops.ssm``, ``hybrid_lab.ops.sparse_attention``,
``hybrid_lab.models.lightning_indexer``, ``hybrid_lab.models.infllm``, ``hybrid_lab.models.hysparse2``). Each function checks its
arguments with the same ValueErrors, moves the arrays to the kernels' device (the GPU, or CPU tensors under
``TRITON_INTERPRET=1``), runs the Triton kernel and returns numpy arrays of the twin's dtype. float64 inputs run
the kernels in float64 so the two backends print the same rounded numbers.
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
from hybrid_lab.ops.sparse_attention import query_positions
from gpu_track._common import device

_FLOATS = (np.float16, np.float32, np.float64)


def _t(a, name):
    """numpy -> torch on the kernels' device; floats keep their precision (other float kinds go to float32)."""
    a = np.asarray(a)
    if a.dtype.kind == "f":
        if a.dtype.type not in _FLOATS:
            a = a.astype(np.float32)
        if np.isnan(a).any():
            raise ValueError(f"{name} contains NaN")
    elif a.dtype.kind in "iu":
        a = a.astype(np.int64)
    elif a.dtype.kind == "b":
        raise ValueError(f"{name} must be numeric, got dtype {a.dtype}")
    else:
        raise ValueError(f"{name} must be a real numeric array, got dtype {a.dtype}")
    return torch.from_numpy(np.ascontiguousarray(a)).to(device())


def _common_float(*arrays):
    """One float dtype for the kernel operands: the widest of the inputs (float16 stays float16)."""
    dt = np.result_type(*[np.asarray(a).dtype for a in arrays if a is not None])
    if dt.kind != "f":
        dt = np.dtype(np.float32)
    return {np.dtype(np.float16): torch.float16, np.dtype(np.float32): torch.float32}.get(dt, torch.float64)


def _np(t, dtype):
    return t.detach().cpu().numpy().astype(dtype, copy=False)


# ------------------------------------------------------------------------------------------- selective scans
def selective_scan(x, dt, A, B, C, D=None, h0=None, chunk_size=64):
    """Mamba-1 chunked selective scan on the Triton kernel; see ``hybrid_lab.ops.ssm.selective_scan``."""
    from hybrid_lab.ops.ssm import _check_mamba1, _chunk, _ftype
    x, dt, A, B, C, D, h0 = _check_mamba1(x, dt, A, B, C, D, h0)
    _chunk(chunk_size)
    out = _ftype(x, dt, A, B, C)
    ft = _common_float(x, dt, A, B, C)
    y, h = _ss.selective_scan(*[_t(a, n).to(ft) if a is not None else None for a, n in
                                ((x, "x"), (dt, "dt"), (A, "A"), (B, "B"), (C, "C"), (D, "D"), (h0, "h0"))])
    return _np(y, out if D is None else np.result_type(out, D.dtype)), _np(h, out)


def selective_scan_step(x, dt, A, B, C, D, h):
    """One Mamba-1 decode step on the Triton kernel; see ``hybrid_lab.ops.ssm.selective_scan_step``."""
    from hybrid_lab.ops.ssm import _check_mamba1
    x, dt, A, B, C, D, h = _check_mamba1(
        np.asarray(x)[:, None], np.asarray(dt)[:, None], A, np.asarray(B)[:, None], np.asarray(C)[:, None], D,
        np.asarray(h))
    x, dt, B, C = x[:, 0], dt[:, 0], B[:, 0], C[:, 0]
    ft = _common_float(x, dt, A, B, C, h)
    out = np.result_type(x, dt, A, B, C, h, *([D] if D is not None else []))
    y, hn = _ss.selective_scan_step(*[_t(a, n).to(ft) if a is not None else None for a, n in
                                      ((x, "x"), (dt, "dt"), (A, "A"), (B, "B"), (C, "C"), (D, "D"), (h, "h"))])
    return _np(y, out), _np(hn, out)


def ssd_chunked(x, dt, A, B, C, D=None, h0=None, chunk_size=64):
    """Mamba-2 SSD chunked scan on the Triton kernel; see ``hybrid_lab.ops.ssm.ssd_chunked``."""
    from hybrid_lab.ops.ssm import _check_mamba2, _chunk, _ftype
    x, dt, A, B, C, D, h0 = _check_mamba2(x, dt, A, B, C, D, h0)
    Q = _chunk(chunk_size)
    out = _ftype(x, dt, A, B, C)
    ft = _common_float(x, dt, A, B, C)
    # the kernel's chunk is a power of two in [16, 64]; the result does not depend on it beyond rounding
    y, h = _ssd.ssd_chunked(*[_t(a, n).to(ft) if a is not None else None for a, n in
                              ((x, "x"), (dt, "dt"), (A, "A"), (B, "B"), (C, "C"), (D, "D"), (h0, "h0"))],
                            chunk=min(64, max(16, Q)))
    yo = out if D is None else np.result_type(out, D.dtype)
    return _np(y, yo), _np(h, out)


# ------------------------------------------------------------------------------------------- sparse attention
def sparse_attention(q, k, v, idx, scale=None, sink=None):
    """Token-level sparse attention on the Triton kernel; see ``hybrid_lab.ops.sparse_attention.sparse_attention``."""
    from hybrid_lab.ops.sparse_attention import sparse_attention as twin
    q, k, v, idx = np.asarray(q), np.asarray(k), np.asarray(v), np.asarray(idx)
    # the twin's checks on a zero-length copy of the work: same ValueErrors, no cost
    twin.numpy_impl(q[:, :0], k, v, idx[:, :0], scale, sink) if q.ndim == 4 and idx.ndim == 4 else twin.numpy_impl(
        q, k, v, idx, scale, sink)
    if (idx < -1).any() or (idx >= k.shape[1]).any():
        raise ValueError(f"idx entries must lie in [-1, S={k.shape[1]}), got range [{idx.min()}, {idx.max()}]")
    srt = np.sort(idx, axis=-1)
    if ((srt[..., 1:] == srt[..., :-1]) & (srt[..., 1:] >= 0)).any():
        raise ValueError("idx must not repeat a position within one index set")
    if np.isnan(q).any():
        raise ValueError("q contains NaN")
    ft = _common_float(q, k, v)
    o = _sa.sparse_attention(_t(q, "q").to(ft), _t(k, "k").to(ft), _t(v, "v").to(ft), _t(idx, "idx"), scale,
                             None if sink is None else _t(sink, "sink").reshape(-1))
    return _np(o, np.result_type(q.dtype, np.float32))


def lightning_indexer(q, w, k, topk, q_pos=None):
    """Lightning indexer scores + deterministic top-k on the Triton kernel; see ``hybrid_lab.models.lightning_indexer``."""
    from hybrid_lab.models.lightning_indexer import lightning_indexer as twin
    q, w, k = np.asarray(q), np.asarray(w), np.asarray(k)
    if q.ndim == 4 and w.ndim == 3:
        twin.numpy_impl(q[:, :0], w[:, :0], k, topk, None if q_pos is None else np.asarray(q_pos)[:0])
    else:
        twin.numpy_impl(q, w, k, topk, q_pos)
    B, T, Hi, di = q.shape
    S = k.shape[1]
    q_pos = query_positions(q_pos, T, S)
    for name, a in (("q", q), ("w", w), ("k", k)):
        if np.isnan(a).any():
            raise ValueError(f"{name} contains NaN")
    ft = _common_float(q, w, k)
    qp = np.minimum(q_pos, np.iinfo(np.int32).max)
    scores, idx = _li.lightning_indexer(_t(q, "q").to(ft), _t(w, "w").to(ft), _t(k, "k").to(ft), int(topk),
                                        _t(qp, "q_pos"))
    return _np(scores, np.result_type(q.dtype, w.dtype, k.dtype, np.float32)), _np(idx, np.int64)


def fa_decode_topk(q, k, v, topk, window, scale=None, sink=None):
    """HySparse2 FA decode + top-k on the Triton kernels; see ``hybrid_lab.models.hysparse2.fa_decode_topk``."""
    from hybrid_lab.models.hysparse2 import check_fa_decode_args
    q, k, v = check_fa_decode_args(q, k, v, topk, window, sink)
    ft = _common_float(q, k, v)
    o, idx = _fa.fa_decode_topk(_t(q, "q").to(ft), _t(k, "k").to(ft), _t(v, "v").to(ft), int(topk), int(window),
                                scale, None if sink is None else _t(sink, "sink").reshape(-1))
    return _np(o, np.result_type(q.dtype, np.float32)), _np(idx, np.int64)


def block_sparse_attention(q, k, v, block_idx, block_size=64, scale=None, q_pos=None):
    """Block-sparse attention on the Triton kernel; see ``hybrid_lab.models.infllm.block_sparse_attention``."""
    from hybrid_lab.models.infllm import _check_q_pos, block_sparse_attention as twin
    q, k, v, block_idx = np.asarray(q), np.asarray(k), np.asarray(v), np.asarray(block_idx)
    if q.ndim == 4 and block_idx.ndim == 4:   # the twin's checks on zero queries (q_pos checked below)
        twin.numpy_impl(q[:, :0], k, v, block_idx[:, :0], block_size, scale, np.zeros(0, np.int64))
    else:
        twin.numpy_impl(q, k, v, block_idx, block_size, scale, q_pos)
    Nb = -(-k.shape[1] // block_size)
    if block_idx.size and ((block_idx < -1).any() or (block_idx >= Nb).any()):
        raise ValueError(f"block_idx entries must lie in [-1, Nb={Nb}), got range [{block_idx.min()}, {block_idx.max()}]")
    srt = np.sort(block_idx, axis=-1)
    if ((srt[..., 1:] == srt[..., :-1]) & (srt[..., 1:] >= 0)).any():
        raise ValueError("block_idx must not repeat a block within one row")
    q_pos = _check_q_pos(q_pos, k.shape[1], q.shape[1])
    ft = _common_float(q, k, v)
    o = _bs.block_sparse_attention(_t(q, "q").to(ft), _t(k, "k").to(ft), _t(v, "v").to(ft),
                                   _t(block_idx, "block_idx"), int(block_size), scale, _t(q_pos, "q_pos"))
    return _np(o, np.result_type(q.dtype, np.float32))
