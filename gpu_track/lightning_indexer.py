"""DeepSeek-V3.2's lightning indexer: I[t, s] = Σ_j w[t, j] · ReLU(q[t, j] · k[s]), causal, then top-k.

Two launch shapes, one semantics:

- tiled (prefill, ``variant="tile"``): one program scores BLOCK_T queries against BLOCK_S keys. All Hi indexer
  heads of the BLOCK_T queries are stacked into one (BLOCK_T·Hi, di) operand so a single tensor-core dot gives
  every head's q·k; ReLU, the per-head weight and the sum over heads then run on that tile in registers.
- streamed (decode, ``variant="stream"``): one program loads its few queries' heads and weights ONCE and streams a
  span of keys, BLOCK_S at a time (the loop lets Triton keep the next key tiles in flight while it computes on
  this one). The dot is taken key-major, k (BLOCK_S, di) · qᵀ -> (BLOCK_S, heads), so the sum over heads runs
  along each thread's own registers. Each key is shared by all heads (one di-vector per token), so at decode the
  pass reads S · di · bytes of keys and writes S float32 scores: 64 FLOP per byte in bf16 for DeepSeek's 64 heads
  x 128 dims, below the H200's ridge (~160 FLOP/B measured): memory-bound.

FP8 (as DeepSeek-V3.2 runs it): keys are stored as e4m3 with one float32 scale per token, queries quantized per
(token, head) the same way; the query scale is folded into the head weight (both are > 0, so it passes through the
ReLU) and the key scale multiplies the summed score: I[t, s] = ks[s] · Σ_j (w[t, j] · qs[t, j]) · ReLU(q8[t, j] · k8[s]).
``quantize_fp8`` rounds like the numpy twin ``hybrid_lab.ops.lightning_indexer.quantize_fp8``: a power-of-two
scale per row (the smallest with amax / scale <= 448), x / scale rounded to float32, then to the nearest e4m3
value (ties to even). A key then costs di + 4 bytes instead of 2 · di.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpu_track.common import (FLOAT_DTYPES, TARGET_PROGRAMS, acc_dtype, acc_torch_dtype, alloc, check, check_finite,
                              check_int, check_tensor, check_tile, dot_precision, pow2, query_positions, split_chunk,
                              topk_stable, on_tensor_cores, policy_target, to_tensor_core_dtype)

FP8 = torch.float8_e4m3fn
E4M3_MAX = 448.0
VARIANTS = ("tile", "stream")


@triton.jit
def _query_tile(q_ptr, w_ptr, b, t0, T, HI: tl.constexpr, DI: tl.constexpr, BLOCK_T: tl.constexpr,
                BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, ACC_DTYPE: tl.constexpr):
    """The queries t0 .. t0 + BLOCK_T of sequence b, every index head, as BLOCK_T·BLOCK_H rows: row r is (query
    t0 + r // BLOCK_H, head r % BLOCK_H). Returns (q: (rows, BLOCK_D), w: (rows,) head weights, 0 for padded
    heads, offs_d, mask_d)."""
    rows = tl.arange(0, BLOCK_T * BLOCK_H)
    tq = t0 + rows // BLOCK_H
    hj = rows % BLOCK_H
    mask_r = (tq < T) & (hj < HI)
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < DI
    qrow = ((b * T + tq) * HI + hj).to(tl.int64)
    q = tl.load(q_ptr + qrow[:, None] * DI + offs_d[None, :], mask=mask_r[:, None] & mask_d[None, :], other=0.0)
    w = tl.load(w_ptr + qrow, mask=mask_r, other=0.0).to(ACC_DTYPE)        # padded heads weigh 0
    return q, w, offs_d, mask_d


@triton.jit
def _indexer_kernel(q_ptr, w_ptr, k_ptr, ks_ptr, q_pos_ptr, out_ptr, T, S,
                    HI: tl.constexpr, DI: tl.constexpr,
                    BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr,
                    HAS_KSCALE: tl.constexpr, ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr):
    b = tl.program_id(0)
    t0 = tl.program_id(1) * BLOCK_T
    s0 = tl.program_id(2) * BLOCK_S
    q, w, offs_d, mask_d = _query_tile(q_ptr, w_ptr, b, t0, T, HI, DI, BLOCK_T, BLOCK_H, BLOCK_D, ACC_DTYPE)
    offs_s = s0 + tl.arange(0, BLOCK_S)
    mask_s = offs_s < S
    krow = (b * S + offs_s).to(tl.int64)
    k = tl.load(k_ptr + krow[:, None] * DI + offs_d[None, :], mask=mask_s[:, None] & mask_d[None, :], other=0.0)
    logits = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE)   # (BLOCK_T*BLOCK_H, BLOCK_S)
    contrib = tl.maximum(logits, 0.0) * w[:, None]
    score = tl.sum(tl.reshape(contrib, (BLOCK_T, BLOCK_H, BLOCK_S)), 1)                   # (BLOCK_T, BLOCK_S)
    if HAS_KSCALE:
        score = score * tl.load(ks_ptr + krow, mask=mask_s, other=0.0).to(ACC_DTYPE)[None, :]
    offs_t = t0 + tl.arange(0, BLOCK_T)
    mask_t = offs_t < T
    qpos = tl.load(q_pos_ptr + offs_t, mask=mask_t, other=-1)
    visible = offs_s[None, :] <= qpos[:, None]
    score = tl.where(visible, score, float("-inf"))
    optr = out_ptr + (b * T + offs_t).to(tl.int64)[:, None] * S + offs_s[None, :]
    tl.store(optr, score.to(out_ptr.dtype.element_ty), mask=mask_t[:, None] & mask_s[None, :])


@triton.jit
def _indexer_stream_kernel(q_ptr, w_ptr, k_ptr, ks_ptr, q_pos_ptr, out_ptr, T, S, span,
                           HI: tl.constexpr, DI: tl.constexpr,
                           BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
                           BLOCK_S: tl.constexpr, HAS_KSCALE: tl.constexpr, ACC_DTYPE: tl.constexpr,
                           DOT_PRECISION: tl.constexpr):
    b = tl.program_id(0)
    t0 = tl.program_id(1) * BLOCK_T
    lo = tl.program_id(2) * span
    hi = tl.minimum(lo + span, S)
    q, w, offs_d, mask_d = _query_tile(q_ptr, w_ptr, b, t0, T, HI, DI, BLOCK_T, BLOCK_H, BLOCK_D, ACC_DTYPE)
    qt = tl.trans(q)                                # (BLOCK_D, rows): column r of the score tile is query row r
    offs_t = t0 + tl.arange(0, BLOCK_T)
    mask_t = offs_t < T
    qpos = tl.load(q_pos_ptr + offs_t, mask=mask_t, other=-1)
    orow = (b * T + offs_t).to(tl.int64) * S
    for start in range(lo, hi, BLOCK_S):
        offs_s = start + tl.arange(0, BLOCK_S)
        mask_s = offs_s < hi
        krow = (b * S + offs_s).to(tl.int64)
        k = tl.load(k_ptr + krow[:, None] * DI + offs_d[None, :], mask=mask_s[:, None] & mask_d[None, :], other=0.0)
        logits = tl.dot(k, qt, input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE)      # (BLOCK_S, rows)
        contrib = tl.maximum(logits, 0.0) * w[None, :]
        score = tl.sum(tl.reshape(contrib, (BLOCK_S, BLOCK_T, BLOCK_H)), 2)            # (BLOCK_S, BLOCK_T)
        if HAS_KSCALE:
            score = score * tl.load(ks_ptr + krow, mask=mask_s, other=0.0).to(ACC_DTYPE)[:, None]
        score = tl.where(offs_s[:, None] <= qpos[None, :], score, float("-inf"))
        tl.store(out_ptr + orow[None, :] + offs_s[:, None], score.to(out_ptr.dtype.element_ty),
                 mask=mask_s[:, None] & mask_t[None, :])


# public: gpu_track.targets compiles them ahead of time for each student GPU
KERNELS = {"tile": _indexer_kernel, "stream": _indexer_stream_kernel}


def check_indexer_args(q, w, k, block_s, block_t, k_scale=None, variant=None, span=None):
    """The torch wrapper's contract (shapes, dtypes, devices); ValueError naming the argument. With ``k_scale``
    (the FP8 form) q and k are float8_e4m3fn and k_scale is (B, S) float32 > 0."""
    fp8 = k_scale is not None
    dts = (FP8,) if fp8 else FLOAT_DTYPES
    check_tensor("q", q, (None,) * 4, dts, doc="(B, T, Hi, di)" + (" float8_e4m3fn" if fp8 else ""))
    B, T, Hi, di = q.shape
    # as the op's contract: a width of 0 has no q·k to score (the scores would all be 0, an arbitrary ranking)
    check(di >= 1, f"q must have an index width di >= 1, got shape {tuple(q.shape)}")
    check_tensor("w", w, (B, T, Hi), FLOAT_DTYPES, like=q, doc=f"(B={B}, T={T}, Hi={Hi})")
    check_tensor("k", k, (B, None, di), (q.dtype,), like=q, doc=f"(B={B}, S, di={di}) in q's dtype")
    if fp8:
        check_tensor("k_scale", k_scale, (B, k.shape[1]), (torch.float32,), like=q,
                     doc=f"(B={B}, S={k.shape[1]}) float32")
    check_tile("block_s", block_s)
    if block_t is not None:
        check_tile("block_t", block_t, lo=1)
        check(block_t * pow2(Hi, 1) >= 16, f"block_t * pow2(Hi={Hi}) must be >= 16 (tl.dot needs 16 rows), "
                                           f"got block_t={block_t}")
    check(variant is None or variant in VARIANTS, f"variant must be None or one of {VARIANTS}, got {variant!r}")
    if span is not None:
        check_int("span", span)


def default_block_t(T: int, Hi: int) -> int:
    """Queries per program: BLOCK_T · pow2(Hi) a power of two >= 16 (tl.dot needs 16 rows) and <= 128."""
    bh = pow2(Hi, 1)
    return max(1, min(pow2(T, 1), 128 // bh)) if T > 1 else max(1, 16 // bh)


@on_tensor_cores("q", "k")
def indexer_scores(q, w, k, q_pos=None, block_s: int = 64, block_t: int | None = None, num_warps: int = 4,
                   num_stages: int = 2, k_scale=None, variant: str | None = None, span: int | None = None):
    """Scores only (the pass the benchmark times). q: (B, T, Hi, di); w: (B, T, Hi); k: (B, S, di);
    q_pos: (T,) int >= 0 (q_pos >= S - 1 sees every key), default S - T + arange(T).
    Returns (B, T, S) float32 (float64 for float64 q), -inf where s > q_pos[t].

    ``k_scale`` (B, S) float32: the FP8 form (q, k float8_e4m3fn, w with the query scales folded in; see
    ``indexer_scores_fp8``): every score is multiplied by its key's scale. ``variant``: "stream" (decode: each
    program loads its queries once and streams ``span`` keys) or "tile" (one key tile per program); default
    "stream" when one query tile holds every query (T · pow2(Hi) <= 128), else "tile". ``span``: keys per program
    of the streamed form (default: enough programs for ~4 per SM of an H200).
    """
    check_indexer_args(q, w, k, block_s, block_t, k_scale, variant, span)
    if k_scale is not None:       # no FP8 tensor cores below sm_89: the exact 16-bit copy of the e4m3 values
        gpu = policy_target()
        q, k = (to_tensor_core_dtype(n, t, fp8=True, target=gpu) for n, t in (("q", q), ("k", k)))
    block_s = int(block_s)
    block_t, span = (None if a is None else int(a) for a in (block_t, span))
    B, T, Hi, di = q.shape
    S = k.shape[1]
    q_pos = query_positions(q_pos, T, S, like=q, hi=None)
    out = alloc((B, T, S), acc_torch_dtype(q.dtype), q.device)
    if B * T * S == 0:
        return out
    BLOCK_H = pow2(Hi, 1)
    if block_t is None:   # keep BLOCK_T * BLOCK_H a power of two >= 16 (tl.dot needs M >= 16)
        block_t = default_block_t(T, Hi)
    if variant is None:
        variant = "stream" if T <= block_t else "tile"
    n_t = triton.cdiv(T, block_t)
    # tl.dot needs K >= 16 (bf16/fp32) and K >= 32 for FP8 operands (1 byte): pad the dims (masked loads give zeros)
    meta = dict(HI=Hi, DI=di, BLOCK_T=block_t, BLOCK_H=BLOCK_H, BLOCK_D=pow2(di, 32 if q.element_size() == 1 else 16),
                BLOCK_S=block_s,
                HAS_KSCALE=k_scale is not None, ACC_DTYPE=acc_dtype(q.dtype), DOT_PRECISION=dot_precision(q.dtype),
                num_warps=num_warps, num_stages=num_stages)
    args = (q.contiguous(), w.contiguous(), k.contiguous(), out if k_scale is None else k_scale.contiguous(), q_pos,
            out, T, S)
    if variant == "tile":
        _indexer_kernel[(B, n_t, triton.cdiv(S, block_s))](*args, **meta)
        return out
    if span is None:
        span, n_span = split_chunk(S, block_s, max(1, TARGET_PROGRAMS // (B * n_t)))
    else:
        span = triton.cdiv(span, block_s) * block_s
        n_span = triton.cdiv(S, span)
    _indexer_stream_kernel[(B, n_t, n_span)](*args, span, **meta)
    return out


def lightning_indexer(q, w, k, topk, q_pos=None):
    """Scores and deterministic top-k: returns (scores (B, T, S), idx (B, T, topk) int64, -1 padded)."""
    topk = check_int("topk", topk)
    scores = indexer_scores(q, w, k, q_pos)
    return scores, topk_stable(scores, topk, "topk")


# ------------------------------------------------------------------------------------------------ FP8
def fp8_scale(x: torch.Tensor, name: str = "x") -> torch.Tensor:
    """Per-row (last axis) power-of-two scale: the smallest 2^e with max|x| / 2^e <= 448 (1 for an all-zero row).
    float32, shape x.shape[:-1]. Powers of two make x / scale exact, so only the e4m3 rounding remains. ``name``:
    x's name in the caller's signature (for the messages)."""
    check_tensor(name, x, None, FLOAT_DTYPES)
    check(x.ndim >= 1 and x.shape[-1] >= 1, f"{name} must have a last axis of length >= 1, got shape {tuple(x.shape)}")
    amax = x.detach().abs().amax(-1).to(torch.float64)
    # NaN would silently get scale 1 (NaN > 0 is False), inf an infinite one
    check_finite(f"{name}'s row maxima |{name}|", amax)
    e = torch.ceil(torch.log2(torch.where(amax > 0, amax / E4M3_MAX, 1.0)))
    e = e + (amax > E4M3_MAX * torch.exp2(e)).to(e.dtype)                 # fix a log2 rounded down ...
    e = e - ((amax > 0) & (amax <= E4M3_MAX * torch.exp2(e - 1))).to(e.dtype)   # ... or up
    return torch.exp2(e).to(torch.float32)


def quantize_fp8(x: torch.Tensor, name: str = "x"):
    """(x8, scale): x8 = e4m3(float32(x / scale)) with the per-row scale of ``fp8_scale``; x ≈ x8 · scale."""
    scale = fp8_scale(x, name)
    x8 = (x.to(torch.float64) / scale.to(torch.float64)[..., None]).to(torch.float32).to(FP8)
    return x8, scale


def indexer_scores_fp8(q8, wq, k8, k_scale, q_pos=None, **launch):
    """FP8 scores from quantized operands: q8 (B, T, Hi, di) and k8 (B, S, di) float8_e4m3fn, wq (B, T, Hi) = head
    weight · query scale, k_scale (B, S) float32. Returns (B, T, S) float32. ``launch``: as ``indexer_scores``."""
    return indexer_scores(q8, wq, k8, q_pos, k_scale=k_scale, **launch)


def lightning_indexer_fp8(q, w, k, topk, q_pos=None):
    """The FP8 path end to end, same signature as ``lightning_indexer``: quantize q per (token, head) and k per
    token, score in FP8 on tensor cores (float32 accumulation), top-k. Twin:
    ``hybrid_lab.ops.lightning_indexer.lightning_indexer_fp8``. Returns (scores float32, idx int64)."""
    topk = check_int("topk", topk)
    check_tensor("q", q, (None,) * 4, doc="(B, T, Hi, di)")
    check_tensor("w", w, q.shape[:3], like=q, doc=f"(B, T, Hi) = {tuple(q.shape[:3])}")
    check_tensor("k", k, (q.shape[0], None, q.shape[3]), like=q, doc=f"(B={q.shape[0]}, S, di={q.shape[3]})")
    q8, qs = quantize_fp8(q, "q")
    k8, ks = quantize_fp8(k, "k")
    scores = indexer_scores_fp8(q8, w.to(torch.float32) * qs, k8, ks, q_pos)
    return scores, topk_stable(scores, topk, "topk")
