"""Helpers shared by the kernels' torch wrappers."""
from __future__ import annotations

import torch
import triton

from gpu_track import INTERPRET


def device() -> torch.device:
    """Where the kernels run: the GPU when there is one, else CPU tensors for the interpreter."""
    return torch.device("cpu" if INTERPRET else "cuda")


def pow2(n: int, lo: int = 16) -> int:
    """Next power of two >= n and >= lo (tl.arange and tl.dot need power-of-two extents of at least 16)."""
    return max(lo, triton.next_power_of_2(max(int(n), 1)))


def topk_stable(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Deterministic top-k over the last axis, same rules as ``hybrid_lab.ops.sparse_attention.topk_indices``.

    Descending score, ties to the smaller position (a stable sort keeps position order among equals), -inf never
    selected, -1 padding when fewer than k positions are selectable. Returns int64 (..., k).
    """
    S = scores.shape[-1]
    kk = min(k, S)
    vals, order = torch.sort(scores, dim=-1, descending=True, stable=True)
    vals, order = vals[..., :kk], order[..., :kk]
    order = torch.where(torch.isneginf(vals), torch.full_like(order, -1), order)
    if kk < k:
        pad = torch.full(order.shape[:-1] + (k - kk,), -1, dtype=order.dtype, device=order.device)
        order = torch.cat([order, pad], dim=-1)
    return order


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


POISON = False   # tests set this: outputs start as NaN, so an element the kernel forgets to write fails the check


def alloc(shape, dtype, device) -> torch.Tensor:
    """Output/scratch buffer: uninitialized, or NaN-filled when ``POISON`` is on."""
    if POISON:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


def fold_scale(q: torch.Tensor, scale, d: int):
    """(q, scale) for a kernel. A Python float kernel argument is float32 on the GPU, which would cost float64
    inputs ~3e-8 relative error, so for float64 the scale is folded into q and the kernel gets 1.0."""
    s = d ** -0.5 if scale is None else float(scale)
    if q.dtype == torch.float64:
        return q * s, 1.0
    return q, float(s)
