"""The contract of every swappable op: ``check_<op>`` takes the op's arguments and returns them validated.

One public check per op in ``registry.SWAPPABLE_OPS``, with the op's signature. The registry runs it once, before
either backend (the numpy implementation in ``hybrid_lab.ops`` or the Triton kernel behind ``gpu_track.numpy_api``),
so both receive the same validated arguments and no backend re-checks anything. A check returns the arguments as a
tuple in signature order: arrays as numpy arrays (index arrays as int64), query positions filled in where the op
has a default (``q_pos=None`` -> the last T of S positions), other defaults (``scale=None``, ``sink=None``) as given.

What is refused, with a ``ValueError`` that names the argument, what was expected and what was given:
wrong rank or shape, non-numeric dtypes, NaN or inf in any float input, a decay rate A > 0 or a step Δ < 0 in the
scans, non-positive chunk/block sizes, top-k and window sizes, a non-positive or non-finite ``scale``, index entries
outside [-1, n) or repeated within one row, query positions outside [0, S), a key or value width d, dv of 0, a
top-k whose output would exceed ``checks.MAX_ELEMENTS`` entries, and (the magnitude rule, ``_in_range``) operands
so large that a bound on the op's intermediates (the attention logits, the indexer scores, the scans' state)
exceeds the compute dtype's range: 3.4e38 in float32, 1.8e308 in float64. Sizes are Python or numpy integers (returned as
``int``); an empty batch, query or index axis is valid and gives the documented empty or zero result.

The precision rule (both backends): every float operand is returned in ``float_dtype`` of itself, so float16 and
integer operands are computed in float32 / float64 (never in float16); float32 and float64 stay as given, and an op
computes in the widest of its operands' dtypes. Outputs are in the dtype each op documents (``float_dtype`` of the
named inputs). bfloat16 is not a numpy dtype: it is refused like any non-numeric dtype.

The layout rule: an op's numbers do not depend on the memory layout of its inputs (C- or Fortran-ordered, strided
views, nested lists give the same result), on either backend.

Layer: imports only ``hybrid_lab.core``.
"""
from __future__ import annotations

import numpy as np

from hybrid_lab.core import checks

__all__ = [
    "check_selective_scan", "check_selective_scan_step", "check_ssd_chunked", "check_sparse_attention",
    "check_lightning_indexer", "check_block_sparse_attention", "check_fa_decode_topk", "check_fa_attention",
    "float_dtype", "n_blocks", "indexer_positions", "check_scores",
]


# ----------------------------------------------------------------------------------------------- shared rules
def float_dtype(*arrays) -> np.dtype:
    """The dtype an op computes and returns its float outputs in: the widest input dtype, at least float32
    (float16 or integer inputs give float32 / float64; ``checks.compute_dtype``). ``None`` entries are skipped."""
    return checks.compute_dtype(*arrays)


def check_scores(scores, inputs: str) -> np.ndarray:
    """The scores a top-k op ranks, computed from finite ``inputs``: NaN or +inf there means the inputs overflow the
    compute dtype (float32 products past 3.4e38), and no ranking of them is meaningful. Both backends call this on
    the scores they computed, so both refuse with this message. -inf (a masked position) is fine."""
    scores = checks.array("scores", scores, kinds="f")
    if (np.isnan(scores) | np.isposinf(scores)).any():      # no index in the message: the backends' loops differ
        raise ValueError(f"{inputs} overflow {scores.dtype} in the scores they rank (NaN or +inf from finite "
                         f"inputs): scale them down or pass float64")
    return scores


def n_blocks(S: int, block_size: int = 64) -> int:
    """Number of KV blocks of ``block_size`` tokens covering S tokens (the last one may be partial): block ids of
    ``block_sparse_attention`` lie in [0, n_blocks)."""
    return -(-checks.nonneg_int("S", S) // checks.pos_int("block_size", block_size))


def _shape(name, a, **axes):
    """``a`` must have exactly these axes, in order (None = any size); the message names every axis."""
    want = tuple(axes.values())
    if a.ndim != len(want) or any(w is not None and s != w for s, w in zip(a.shape, want)):
        doc = ", ".join(k if v is None else f"{k}={v}" for k, v in axes.items())
        raise ValueError(f"{name} must have shape ({doc}), got {a.shape}")


def _floats(name, a, **axes) -> np.ndarray:
    """A real array with no NaN and no inf, of the given axes (None = any size), in its compute dtype
    (``float_dtype``: float16 and integers are widened, so no op computes in float16)."""
    a = checks.finite_array(name, a, len(axes), "(" + ", ".join(axes) + ")")
    _shape(name, a, **axes)
    return a.astype(float_dtype(a), copy=False)


def _amax(a) -> float:
    return 0.0 if a is None else float(np.abs(a).max(initial=0.0))


def _in_range(what: str, bound: float, *arrays) -> None:
    """The magnitude rule: ``bound`` (a product of the operands' largest entries) bounds every intermediate of the
    op; past the largest finite value of the compute dtype (float32: 3.4e38) some intermediate may overflow and the
    backends would show inf or NaN in different places, so the input is refused. float64 reaches 1.8e308."""
    dt = float_dtype(*arrays)
    top = float(np.finfo(dt).max)            # a Python float: comparing with an np.float32 would cast the bound
    if not bound <= top:                     # also catches a bound that overflowed to inf
        raise ValueError(f"{what} may overflow {dt} (a bound on its magnitude is {bound:.3g}, more than "
                         f"{top:.3g}): scale the inputs down or pass float64")


def _topk(topk, *lead) -> int:
    """A top-k size >= 1 whose (*lead, topk) output fits in ``checks.MAX_ELEMENTS`` entries."""
    topk = checks.pos_int("topk", topk)
    checks.output_size("topk", (*lead, topk))
    return topk


def _sign(name, a, ok, want: str, why: str):
    """Every entry satisfies ``ok`` (an elementwise test) or the first offender is reported."""
    bad = ~ok(a)
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{name} must be {want} ({why}), got {a[first]} at index {first}")


def _scale(scale):
    """None (the op uses d**-0.5) or a finite number > 0: the softmax temperature 1/τ."""
    if scale is not None:
        checks.positive_number("scale", scale)
    return scale


def _index_sets(name, idx, what: str, hi: int, **lead) -> np.ndarray:
    """Integer index sets (..., K) over [0, hi), -1 padded, no entry repeated within a row. Returns int64."""
    idx = checks.int_array(name, idx, len(lead) + 1, "(" + ", ".join([*lead, "K"]) + ")", lo=-1, hi=hi)
    _shape(name, idx, **lead, K=None)
    return checks.no_repeats(name, idx, what)


def _attention_operands(q, k, v, q_axes=("B", "T")):
    """q (*q_axes, Hq, d); k (B, S, Hkv, d) [no B when q has none]; v like k with its own dv; Hq a multiple of Hkv.
    q_axes: ("B", "T") a batch of query rows, ("B",) one decode query per batch row, ("T",) rows over one KV."""
    q = _floats("q", q, **dict.fromkeys(q_axes), Hq=None, d=None)
    lead, d = ({"B": q.shape[0]} if "B" in q_axes else {}), q.shape[-1]
    k = _floats("k", k, **lead, S=None, Hkv=None, d=d)
    S, Hkv = k.shape[-3], k.shape[-2]
    v = _floats("v", v, **lead, S=S, Hkv=Hkv, dv=None)
    checks.heads(q.shape[-2], Hkv, "Hq (heads of q)", "Hkv (heads of k)")
    if d == 0 or v.shape[-1] == 0:      # the default scale is d**-0.5; a value of width 0 holds nothing to attend
        raise ValueError(f"q, k and v must have a key width d >= 1 and a value width dv >= 1, got q {q.shape}, "
                         f"v {v.shape}")
    return q, k, v


def _logits_in_range(q, k, v, scale):
    """|q·k·scale| <= max|q| max|k| d scale, and |o| <= max|v|: both within the compute dtype."""
    s = q.shape[-1] ** -0.5 if scale is None else scale
    _in_range("q·k·scale (the attention logits)", _amax(q) * _amax(k) * q.shape[-1] * s, q, k, v)


def _sink(sink, Hq):
    return None if sink is None else _floats("sink", sink, Hq=Hq)


def indexer_positions(q_pos, T: int, S: int) -> np.ndarray:
    """The lightning indexer's query positions: (T,) integers >= 0, default the last T of S positions. Key s is
    visible to query t iff s <= q_pos[t], so a position >= S - 1 sees every key (allowed: a query may sit past the
    cached keys). Returns int64."""
    T, S = checks.nonneg_int("T", T), checks.nonneg_int("S", S)
    if q_pos is None:
        return checks.query_positions(None, T, S)
    q_pos = checks.int_array("q_pos", q_pos, 1, f"(T={T},)", lo=0)
    _shape("q_pos", q_pos, T=T)
    return q_pos


# ----------------------------------------------------------------------------------------------- Mamba-1 / Mamba-2
def _mamba1(x, dt, A, B, C, D, h, h_name: str, step: bool):
    """x, dt: (Bt, L, Dm) [step: (Bt, Dm)]; A: (Dm, N) <= 0; B, C: (Bt, L, N) [step: (Bt, N)]; D: (Dm,) or None;
    h: (Bt, Dm, N) or None (required for a step)."""
    axes = ("Bt",) if step else ("Bt", "L")
    x = _floats("x", x, **dict.fromkeys(axes), Dm=None)
    lead, Dm = dict(zip(axes, x.shape)), x.shape[-1]
    dt = _floats("dt", dt, **lead, Dm=Dm)
    _sign("dt", dt, lambda a: a >= 0, ">= 0", "a step size: pass softplus(x W_Δ + b)")
    A = _floats("A", A, Dm=Dm, N=None)
    _sign("A", A, lambda a: a <= 0, "<= 0", "a decay rate: exp(Δ·A) <= 1 keeps the state bounded")
    N = A.shape[1]
    B = _floats("B", B, **lead, N=N)
    C = _floats("C", C, **lead, N=N)
    if D is not None:
        D = _floats("D", D, Dm=Dm)
    if h is not None or step:
        h = _floats(h_name, h, Bt=x.shape[0], Dm=Dm, N=N)
    _scan_in_range(x, dt, B, C, D, h, L=1 if step else x.shape[1], N=N)
    return x, dt, A, B, C, D, h


def _scan_in_range(x, dt, B, C, D, h, L, N):
    """|h_t| <= |h0| + L max|Δ| max|x| max|B| (the decays are <= 1) and |y| <= N max|C| |h| + max|D| max|x|."""
    h_bound = _amax(h) + L * _amax(dt) * _amax(x) * _amax(B)
    _in_range("the scan's state and output", N * _amax(C) * h_bound + _amax(D) * _amax(x), x, dt, B, C, h)


def check_selective_scan(x, dt, A, B, C, D=None, h0=None, chunk_size=64):
    """Mamba-1 scan: x, dt (Bt, L, Dm), dt >= 0; A (Dm, N) <= 0; B, C (Bt, L, N); D (Dm,); h0 (Bt, Dm, N);
    chunk_size an integer >= 1."""
    return (*_mamba1(x, dt, A, B, C, D, h0, "h0", step=False), checks.pos_int("chunk_size", chunk_size))


def check_selective_scan_step(x, dt, A, B, C, D, h):
    """One Mamba-1 decode step: x, dt (Bt, Dm), dt >= 0; A (Dm, N) <= 0; B, C (Bt, N); D (Dm,) or None;
    h (Bt, Dm, N)."""
    return _mamba1(x, dt, A, B, C, D, h, "h", step=True)


def check_ssd_chunked(x, dt, A, B, C, D=None, h0=None, chunk_size=64):
    """Mamba-2 SSD scan: x (Bt, L, H, P); dt (Bt, L, H) >= 0; A (H,) <= 0 (one scalar decay per head);
    B, C (Bt, L, N); D (H,); h0 (Bt, H, P, N); chunk_size an integer >= 1."""
    x = _floats("x", x, Bt=None, L=None, H=None, P=None)
    Bt, L, H, P = x.shape
    dt = _floats("dt", dt, Bt=Bt, L=L, H=H)
    _sign("dt", dt, lambda a: a >= 0, ">= 0", "a step size: pass softplus(...)")
    A = _floats("A", A, H=H)
    _sign("A", A, lambda a: a <= 0, "<= 0", "a decay rate per head: exp(Δ·A) <= 1 keeps the state bounded")
    B = _floats("B", B, Bt=Bt, L=L, N=None)
    N = B.shape[2]
    C = _floats("C", C, Bt=Bt, L=L, N=N)
    if D is not None:
        D = _floats("D", D, H=H)
    if h0 is not None:
        h0 = _floats("h0", h0, Bt=Bt, H=H, P=P, N=N)
    _scan_in_range(x, dt, B, C, D, h0, L, N)
    return x, dt, A, B, C, D, h0, checks.pos_int("chunk_size", chunk_size)


# ----------------------------------------------------------------------------------------------- attention ops
def check_sparse_attention(q, k, v, idx, scale=None, sink=None):
    """q (B, T, Hq, d); k (B, S, Hkv, d); v (B, S, Hkv, dv); idx (B, T, Hkv, K) integers in [-1, S), no position
    twice in a row (K = 0 allowed: the output is 0); scale None or > 0; sink None or (Hq,), all finite."""
    q, k, v = _attention_operands(q, k, v)
    B, T, Hq, _ = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    idx = _index_sets("idx", idx, "position", S, B=B, T=T, Hkv=Hkv)
    _logits_in_range(q, k, v, _scale(scale))
    return q, k, v, idx, scale, _sink(sink, Hq)


def check_lightning_indexer(q, w, k, topk, q_pos=None):
    """q (B, T, Hi, di) with di >= 1; w (B, T, Hi); k (B, S, di), all finite; topk an integer >= 1; q_pos (T,)
    integers >= 0 (see :func:`indexer_positions`; returned filled in)."""
    checks.pos_int("topk", topk)
    q = _floats("q", q, B=None, T=None, Hi=None, di=None)
    B, T, Hi, di = q.shape
    if di == 0:
        raise ValueError(f"q must have an index width di >= 1, got shape {q.shape}")
    w = _floats("w", w, B=B, T=T, Hi=Hi)
    k = _floats("k", k, B=B, S=None, di=di)
    _in_range("Σ_j w·ReLU(q·k) (the indexer scores)", _amax(w) * Hi * _amax(q) * _amax(k) * di, q, w, k)
    return q, w, k, _topk(topk, B, T), indexer_positions(q_pos, T, k.shape[1])


def check_block_sparse_attention(q, k, v, block_idx, block_size=64, scale=None, q_pos=None):
    """q, k, v as in :func:`check_sparse_attention`; block_size an integer >= 1; block_idx (B, T, Hkv, nb) block
    ids in [-1, n_blocks(S, block_size)), no block twice in a row; q_pos (T,) integers in [0, S), default the
    last T positions (returned filled in)."""
    q, k, v = _attention_operands(q, k, v)
    B, T = q.shape[:2]
    S, Hkv = k.shape[1], k.shape[2]
    block_size = checks.pos_int("block_size", block_size)
    block_idx = _index_sets("block_idx", block_idx, "block", n_blocks(S, block_size), B=B, T=T, Hkv=Hkv)
    _logits_in_range(q, k, v, _scale(scale))
    return q, k, v, block_idx, block_size, scale, checks.query_positions(q_pos, T, S)


def check_fa_decode_topk(q, k, v, topk, window, scale=None, sink=None):
    """q (B, Hq, d); k (B, S, Hkv, d) with S >= 1; v (B, S, Hkv, dv); topk and window integers >= 1; scale None or
    > 0; sink None or (Hq,), all finite."""
    q, k, v = _attention_operands(q, k, v, q_axes=("B",))
    if k.shape[1] == 0:
        raise ValueError(f"k must hold at least one position (S >= 1) to decode after, got shape {k.shape}")
    topk, window = _topk(topk, q.shape[0], k.shape[2]), checks.pos_int("window", window)
    _logits_in_range(q, k, v, _scale(scale))
    return q, k, v, topk, window, scale, _sink(sink, q.shape[1])


def check_fa_attention(q, k, v, q_pos, scale=None, sink=None):
    """Exact attention of T query rows over one KV (HySparse2's cross FA at prefill, ``ops.fa_decode.fa_attention``):
    q (T, Hq, d); k (S, Hkv, d); v (S, Hkv, dv); q_pos (T,) integers in [0, S) (None: the last T); scale None or
    > 0; sink None or (Hq,), all finite."""
    q, k, v = _attention_operands(q, k, v, q_axes=("T",))
    T, Hq = q.shape[:2]
    _logits_in_range(q, k, v, _scale(scale))
    return q, k, v, checks.query_positions(q_pos, T, k.shape[0]), scale, _sink(sink, Hq)
