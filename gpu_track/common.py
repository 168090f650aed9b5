"""What every kernel wrapper shares: where kernels run, tile sizes, accumulator precision, output buffers, the
deterministic top-k, and the argument checks run before any launch.

Why the checks live here: a Triton kernel does not bounds-check its loads (and the interpreter forgives
out-of-bounds reads), so an index = S would read another sequence's keys and return a finite, wrong number.
Every torch wrapper therefore checks shapes, dtypes, devices and index ranges before it launches and raises a
ValueError naming the argument. Value checks that need the data on the host (index ranges) are skipped while a
CUDA graph is being captured (the benchmark replays graphs; it runs every call once, checked, before capture).
NaN/inf in q, k, v are not looked for here (a full extra pass over the KV cache): the dispatcher checks them.
"""
from __future__ import annotations

import math
import numbers

import numpy as np
import torch
import triton
import triton.language as tl

from gpu_track import INTERPRET

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
INT32_MAX = 2 ** 31 - 1
GRID_MAX = (2 ** 31 - 1, 65535, 65535)   # CUDA's limit on each launch grid axis
# Smallest tile natively along every dimension of a tl.dot in a kernel that has several dots. Triton 3.4-3.7 on
# Hopper (sm_90) reads past its shared-memory buffer (compute-sanitizer: "Invalid __shared__ read"; a fault or
# silently wrong output depending on what lies beyond) for wgmma operands of 16 or 32 along a dot dimension when two
# or more dots share a kernel (triton-lang/triton#10486, #11366; pytorch/helion#1905 keeps such tiles at 8 or >= 64).
# This is what broke the SSD two-pass kernels. The interpreter has no such bug: there the minimum is 16.
DOT_MIN = 16 if INTERPRET else 64
TARGET_PROGRAMS = 528   # split-K heuristics aim at ~4 programs per SM of an H200 (132 SMs)


def device() -> torch.device:
    """Where the kernels run: the GPU when there is one, else CPU tensors for the interpreter."""
    return torch.device("cpu" if INTERPRET else "cuda")


def pow2(n: int, lo: int = 16) -> int:
    """Next power of two >= n and >= lo (tl.arange and tl.dot need power-of-two extents of at least 16)."""
    return max(lo, triton.next_power_of_2(max(int(n), 1)))


# ------------------------------------------------------------------------------------- accumulator and dots
def acc_torch_dtype(*dtypes: torch.dtype) -> torch.dtype:
    """The accumulator's torch dtype: float64 when any input is float64 (an exact twin of numpy), else float32."""
    return torch.float64 if torch.float64 in dtypes else torch.float32


def acc_dtype(*dtypes: torch.dtype):
    """The same accumulator as a Triton dtype, for a kernel's ``ACC_DTYPE: tl.constexpr``."""
    return tl.float64 if acc_torch_dtype(*dtypes) == torch.float64 else tl.float32


def dot_precision(dtype: torch.dtype) -> str:
    """fp32/fp64 operands: true fp32 dots ("ieee"), not tf32, so fp32 results match numpy to ~1e-6."""
    return "ieee" if dtype in (torch.float32, torch.float64) else "tf32"


def fold_scale(q: torch.Tensor, scale, d: int):
    """(q, scale) for a kernel. A Python float kernel argument is float32 on the GPU, which would cost float64
    inputs ~3e-8 relative error, so for float64 the scale is folded into q and the kernel gets 1.0."""
    s = d ** -0.5 if scale is None else float(scale)
    if q.dtype == torch.float64:
        return q * s, 1.0
    return q, float(s)


def split_chunk(n: int, block: int, nsplit: int):
    """Split-K: cut ``n`` items (walked ``block`` at a time) into at most ``nsplit`` slices of whole blocks.
    Returns (items per slice, number of non-empty slices)."""
    chunk = triton.cdiv(triton.cdiv(n, block), nsplit) * block
    return chunk, triton.cdiv(n, chunk)


@triton.jit
def scan_combine(a1, u1, a2, u2):
    """The linear recurrence h = a h + u as an associative operator, for ``tl.associative_scan``: applying
    (a1, u1) then (a2, u2) is (a1 a2, a2 u1 + u2)."""
    return a1 * a2, a2 * u1 + u2


# ------------------------------------------------------------------------------------------- buffers
POISON = False   # tests set this: outputs start as NaN, so an element the kernel forgets to write fails the check


def alloc(shape, dtype, device) -> torch.Tensor:
    """Output/scratch buffer: uninitialized, or NaN-filled when ``POISON`` is on."""
    if POISON:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


def topk_stable(scores: torch.Tensor, k: int, name: str = "k") -> torch.Tensor:
    """Deterministic top-k over the last axis, same rules as ``hybrid_lab.ops.sparse_attention.topk_indices``.

    Descending score, ties to the smaller position (a stable sort keeps position order among equals), -inf never
    selected, -1 padding when fewer than k positions are selectable. Returns int64 (..., k). ``name``: k's name
    in the caller's signature (for the message).
    """
    # any device: numpy_api ranks CPU copies of the scores
    check(isinstance(scores, torch.Tensor) and scores.ndim >= 1 and scores.dtype in FLOAT_DTYPES,
          f"scores must be a float torch tensor (..., S), got "
          f"{scores.dtype if isinstance(scores, torch.Tensor) and scores.ndim else type(scores).__name__}")
    k = check_int(name, k)
    check_index_space(name, math.prod(scores.shape[:-1]) * k, f"the (..., {name}) output")
    S = scores.shape[-1]
    kk = min(k, S)
    vals, order = torch.sort(scores, dim=-1, descending=True, stable=True)
    vals, order = vals[..., :kk], order[..., :kk]
    order = torch.where(torch.isneginf(vals), torch.full_like(order, -1), order)
    if kk < k:
        pad = torch.full(order.shape[:-1] + (k - kk,), -1, dtype=order.dtype, device=order.device)
        order = torch.cat([order, pad], dim=-1)
    return order


# ------------------------------------------------------------------------------------------- argument checks
def check(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def check_tensor(name: str, t, shape=None, dtypes=FLOAT_DTYPES, like: torch.Tensor | None = None,
                 doc: str = "") -> torch.Tensor:
    """``t`` is a torch tensor of one of ``dtypes`` with ``shape`` (a tuple; None entries match any size) on the
    kernels' device (and on ``like``'s device when given). ``doc`` names the axes in the message."""
    check(isinstance(t, torch.Tensor), f"{name} must be a torch tensor, got {type(t).__name__}")
    if shape is not None:
        ok = t.ndim == len(shape) and all(s is None or int(n) == s for n, s in zip(t.shape, shape))
        want = doc or "(" + ", ".join("?" if s is None else str(s) for s in shape) + ")"
        check(ok, f"{name} must have shape {want}, got {tuple(t.shape)}")
    check(t.dtype in dtypes, f"{name} must have dtype in {[str(d).replace('torch.', '') for d in dtypes]}, "
                             f"got {str(t.dtype).replace('torch.', '')}")
    check(t.device.type == device().type, f"{name} must be on {device().type} (where the kernels run), got {t.device}")
    if like is not None:
        check(t.device == like.device, f"{name} must be on the same device as the other inputs ({like.device}), "
                                       f"got {t.device}")
    return t


def check_gqa_operands(q, k, v, q_doc: str = "(B, T, Hq, d)"):
    """q (B, ..., Hq, d), k (B, S, Hkv, d), v (B, S, Hkv, dv) in q's dtype and device, Hq a multiple of Hkv: the
    operands every attention kernel takes. Returns (B, S, Hq, Hkv, d, dv)."""
    check_tensor("q", q, (None,) * len(q_doc.split(",")), doc=q_doc)
    B, Hq, d = q.shape[0], q.shape[-2], q.shape[-1]
    check_tensor("k", k, (B, None, None, d), (q.dtype,), like=q, doc=f"(B={B}, S, Hkv, d={d}) in q's dtype")
    S, Hkv = k.shape[1], k.shape[2]
    check_tensor("v", v, (B, S, Hkv, None), (q.dtype,), like=q, doc=f"(B={B}, S={S}, Hkv={Hkv}, dv) in q's dtype")
    check(Hkv >= 1 and Hq % Hkv == 0, f"Hq={Hq} must be a multiple of Hkv={Hkv} (k's heads)")
    # as the ops' contracts: the default scale d**-0.5 needs d >= 1, and a value of width 0 gives no output
    check(d >= 1 and v.shape[3] >= 1, f"q, k and v must have d >= 1 and dv >= 1, got d={d}, dv={v.shape[3]}")
    return B, S, Hq, Hkv, d, v.shape[3]


def check_sink(sink, Hq: int, like: torch.Tensor) -> None:
    """An optional per-query-head sink logit: None, or a finite (Hq,) float tensor beside ``like``."""
    if sink is not None:
        check_tensor("sink", sink, (Hq,), FLOAT_DTYPES, like=like, doc=f"(Hq={Hq},)")
        check_finite("sink", sink)


def check_range(name: str, t: torch.Tensor, lo: int, hi: int | None) -> None:
    """Every entry of the integer tensor ``t`` lies in [lo, hi) (hi None: no upper bound)."""
    if t.numel() == 0 or _capturing():
        return
    mn, mx = (int(v) for v in torch.aminmax(t))
    check(mn >= lo and (hi is None or mx < hi),
          f"{name} entries must lie in [{lo}, {'inf' if hi is None else hi}), got range [{mn}, {mx}]")


def check_no_repeats(name: str, t: torch.Tensor, what: str = "position") -> None:
    """No entry >= 0 twice within one row (the last axis) of the integer tensor ``t``; -1 pads and may repeat. A
    repeated position would be read twice and weigh twice in the softmax: refused as the ops' contracts refuse it
    (``hybrid_lab.core.checks.no_repeats``, the same message). Skipped during a CUDA-graph capture, as the range."""
    if t.numel() == 0 or t.shape[-1] < 2 or _capturing():
        return
    srt = torch.sort(t, dim=-1).values
    dup = (srt[..., 1:] == srt[..., :-1]) & (srt[..., 1:] >= 0)
    if bool(dup.any()):
        first = dup.nonzero()[0]
        row = tuple(int(i) for i in first[:-1])
        value = int(srt[row][int(first[-1]) + 1])
        raise ValueError(f"{name} must not repeat a {what} within one row, got {value} twice in row {row}")


def check_index_space(name: str, n_elements: int, what: str) -> None:
    """A kernel that computes offsets into a buffer in int32 needs every offset below 2^31: ``n_elements`` is the
    buffer's size in elements; past INT32_MAX the offsets would wrap and read/write another tensor's memory."""
    check(n_elements <= INT32_MAX, f"{name}: {what} has {n_elements} elements, more than the kernels' int32 offsets "
                                   f"address ({INT32_MAX}); split the batch")


def check_grid(name: str, grid) -> tuple:
    """A launch grid within CUDA's limits (axis 0 < 2^31, axes 1 and 2 <= 65535); ``name`` is the argument that
    sets the offending axis."""
    for ax, (g, lim) in enumerate(zip(grid, GRID_MAX)):
        check(int(g) <= lim, f"{name}: the launch grid's axis {ax} would have {int(g)} programs, more than CUDA's "
                             f"{lim}; split the input")
    return tuple(int(g) for g in grid)


def check_finite(name: str, t: torch.Tensor) -> None:
    """No NaN/inf in a small tensor (a sink, a per-head vector)."""
    if t.numel() == 0 or _capturing():
        return
    check(bool(torch.isfinite(t).all()), f"{name} must be finite, got {t.tolist() if t.numel() <= 8 else 'NaN/inf'}")


def is_int(v) -> bool:
    """A Python or numpy integer scalar: bools, floats and arrays (a one-element array too) are not sizes."""
    return isinstance(v, (numbers.Integral, np.integer)) and not isinstance(v, (bool, np.bool_))


def check_int(name: str, v, lo: int = 1) -> int:
    """A Python or numpy integer >= lo, returned as a Python int (what the launch and the kernels must get: an
    ``np.int32`` constexpr or a one-element array fails inside Triton)."""
    check(is_int(v) and int(v) >= lo, f"{name} must be an integer >= {lo}, got {v!r}")
    return int(v)


TILE_MAX = 2 ** 20   # Triton's largest block (TRITON_MAX_TENSOR_NUMEL): a larger tile fails inside the launch


def check_tile(name: str, v, lo: int = 16) -> int:
    """A tile size: a power of two in [lo, TILE_MAX] (tl.arange needs a power of two, tl.dot at least 16)."""
    v = check_int(name, v, lo)
    check(v & (v - 1) == 0 and v <= TILE_MAX, f"{name} must be a power of two in [{lo}, {TILE_MAX}], got {v}")
    return v


def check_scale(scale) -> None:
    """The softmax scale: None (d ** -0.5) or a finite number > 0 (the inverse temperature, as the ops' contracts)."""
    # a real number only: float() would also take "1" or a one-element array
    ok = scale is None or (isinstance(scale, (numbers.Real, np.number)) and not isinstance(scale, (bool, np.bool_))
                           and math.isfinite(float(scale)))
    check(ok and (scale is None or float(scale) > 0), f"scale must be None or a finite number > 0, got {scale!r}")


def query_positions(q_pos, T: int, S: int, like: torch.Tensor, hi: int | None) -> torch.Tensor:
    """The queries' absolute positions as int32 on ``like``'s device: ``q_pos`` (T,) integers in [0, hi) (hi None: no
    upper bound; values past int32 are clamped, such a query sees every key anyway), or by default the last T of
    S positions, S - T + arange(T)."""
    if q_pos is None:
        check(T <= S, f"without q_pos the T={T} queries are the last T of S={S} keys, so T must be <= S")
        return torch.arange(S - T, S, device=like.device).to(torch.int32)
    check_tensor("q_pos", q_pos, (T,), INT_DTYPES, like=like, doc=f"(T={T},)")
    check_range("q_pos", q_pos, 0, hi)
    return q_pos.to(torch.int64).clamp(max=INT32_MAX).to(torch.int32).contiguous()


# ------------------------------------------------------------------------------------------- the GPU's dtypes
FP16_MAX = 65504.0


def policy_target():
    """The targets.Target whose dtype policy applies to this call (``HYBRID_LAB_GPU_TARGET`` or this GPU), or None
    (no GPU: the interpreter computes any dtype)."""
    from gpu_track import devices
    return devices.current()


def to_tensor_core_dtype(name: str, t, fp8: bool = False, target=None):
    """``t`` as the dtype a ``tl.dot`` on this GPU takes (gpu_track.devices.dtype_policy): below sm_80 a bfloat16
    tensor becomes float16 (fp32 accumulation either way; fp16 has more mantissa bits, so nothing is rounded, but
    it holds only |x| <= 65504: a larger bf16 value is refused by name rather than turned into inf); with ``fp8``,
    below sm_89 a float8_e4m3fn tensor becomes the 16-bit dtype (exact: e4m3's values all fit). Anything else, and
    every tensor where no GPU target applies, is returned unchanged. The fallback is printed once per process.
    ``target``: the caller's :func:`policy_target`, so a wrapper looks its GPU up once per call, not per operand."""
    t_ = policy_target() if target is None else target
    if t_ is None or not isinstance(t, torch.Tensor):
        return t
    from gpu_track import devices
    pol = devices.dtype_policy(t_)
    if t.dtype == torch.bfloat16 and pol["dot"] == "fp16":
        if not _capturing() and t.numel():
            big = t.detach().abs().amax().float().item()
            check(not big > FP16_MAX, f"{name}: on {t_.name} (sm_{t_.sm}, no bf16 tensor cores) bfloat16 inputs are "
                                      f"computed in float16, which holds |x| <= 65504; got max |{name}| = {big:.4g} "
                                      f"(scale it, or pass float32)")
        devices.announce(t_)
        return t.to(torch.float16)
    if fp8 and t.dtype == torch.float8_e4m3fn and not pol["fp8"]:
        devices.announce(t_)
        return t.to(torch.float16 if pol["dot"] == "fp16" else torch.bfloat16)
    return t


def on_tensor_cores(*names: str):
    """Decorator for a wrapper whose ``names`` arguments feed a ``tl.dot``: they get this GPU's dtype
    (:func:`to_tensor_core_dtype`) before the wrapper runs, and a float16 tensor it returns is handed back as
    bfloat16 when a bfloat16 input was cast (the caller gets the dtype it passed)."""
    import functools
    import inspect

    def wrap(fn):
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def run(*args, **kwargs):
            gpu = policy_target()
            if gpu is None:
                return fn(*args, **kwargs)
            bound = sig.bind_partial(*args, **kwargs)
            cast_bf16 = False
            for n in names:
                if n in bound.arguments:
                    v = bound.arguments[n]
                    new = to_tensor_core_dtype(n, v, target=gpu)
                    cast_bf16 |= new is not v and isinstance(v, torch.Tensor) and v.dtype == torch.bfloat16
                    bound.arguments[n] = new
            out = fn(*bound.args, **bound.kwargs)
            if not cast_bf16:
                return out
            back = (lambda o: o.to(torch.bfloat16) if isinstance(o, torch.Tensor) and o.dtype == torch.float16 else o)
            return tuple(back(o) for o in out) if isinstance(out, tuple) else back(out)
        return run
    return wrap
