"""Exercises of notebook 09 (GPU track): Triton kernels, checked by launching them on fresh ragged shapes.

09.1 the masked gather of sparse attention (a kernel body), 09.2 token-sparse attention decode end to end (a whole
kernel and its launch: one program per (sequence, KV group), -1 padded indices, an online softmax), 09.3 the
intra-chunk decay step of the SSD scan (a kernel body). Without a GPU the kernels run in Triton's interpreter
(``import gpu_track`` sets ``TRITON_INTERPRET=1`` before triton is imported), so shapes stay small. Inputs are
float32; the references compute in float64 from the same float32 values and the checks allow 1e-5 (relative to
the largest entry): a float32 kernel passes, a 1e-3 error does not. Outputs are poisoned with NaN before each
launch, so an element the kernel forgets to write (or writes when it must not) fails the check.

Each check counts the launches of the student's own ``@triton.jit`` kernel (any kernel defined outside the
library): a result computed without one (torch ops in the launcher) fails, whatever it is. Without Triton (macOS,
Windows) the module still imports (``gpu_track.no_triton`` stands in) and every exercise says "needs Triton".
"""
from __future__ import annotations

import os
from contextlib import contextmanager

import numpy as np

from hybrid_lab.exercises.framework import Case, Exercise, RuleBroken, register
from hybrid_lab.exercises.lab01 import decay_matrix_reference
from hybrid_lab.ops.registry import gpu_track_package, triton_module, triton_stand_in
from hybrid_lab.ops.sparse_attention import sparse_attention as _sparse_attention

# gpu_track first: without a GPU it sets TRITON_INTERPRET=1 before triton is imported (looked up by name, as the
# backend does: hybrid_lab never imports it statically)
if gpu_track_package().HAS_TRITON:
    triton_module()
    import torch
    import triton
    import triton.language as tl
else:                 # the kernels below can be defined, not run; torch is not needed either (none on Intel Macs)
    triton = triton_stand_in()
    tl = triton.language

PREAMBLE = ("import gpu_track  # first: picks the GPU or Triton's interpreter\nimport numpy as np\nimport torch\n"
            "import triton\nimport triton.language as tl\nfrom gpu_track.common import device\nDEV = device()")
TOL = {"rtol": 1e-5, "atol": 1e-5}
_twin = _sparse_attention.numpy_impl          # the numpy twin, whatever backend is active


def _device():
    """Where the kernels run (as ``gpu_track.common.device``): CPU tensors under Triton's interpreter."""
    return torch.device("cpu" if os.environ.get("TRITON_INTERPRET", "0") == "1" else "cuda")


def _dev(a, dtype=None):
    t = torch.from_numpy(np.ascontiguousarray(a))
    return (t if dtype is None else t.to(dtype)).to(_device())


def _f32(rng, shape, scale=1.0):
    """Normal float32 values (the references read the same float32 values, in float64)."""
    return (scale * rng.normal(size=shape)).astype(np.float32)


def _nan(shape):
    return torch.full(shape, float("nan"), dtype=torch.float32, device=_device())


_LIBRARY = ("hybrid_lab", "gpu_track", "triton")


def _launchers():
    """The classes whose ``run`` launches a kernel: the interpreter's and the compiler's."""
    from triton.runtime.jit import JITFunction
    out = [JITFunction]
    try:
        from triton.runtime.interpreter import InterpretedFunction
        out.append(InterpretedFunction)
    except ImportError:
        pass
    return out


@contextmanager
def own_launches():
    """Inside the block, ``launches[0]`` counts the launches of kernels defined outside the library (the student's:
    their Python function's module is the notebook's, not hybrid_lab / gpu_track / triton)."""
    launches = [0]
    saved = [(cls, cls.__dict__["run"]) for cls in _launchers() if "run" in cls.__dict__]

    def counted(run):
        def wrapper(self, *args, **kwargs):
            mod = getattr(getattr(self, "fn", None), "__module__", None) or ""
            if not kwargs.get("warmup") and mod.split(".")[0] not in _LIBRARY:
                launches[0] += 1
            return run(self, *args, **kwargs)
        return wrapper
    try:
        for cls, run in saved:
            cls.run = counted(run)
        yield launches
    finally:
        for cls, run in saved:
            cls.run = run


def _no_kernel(name, what):
    return RuleBroken(f"{name} launched no @triton.jit kernel of yours: {what} (a result computed with torch or "
                      f"numpy ops does not count)")


# ------------------------------------------------------------------------------------------ 09.1 masked gather
def _gather_rows(k_sel, block_k):
    """Rows of the poisoned OUT: every program's BLOCK_K entries, + 1 (a store past K_SEL lands in the buffer)."""
    return triton.cdiv(k_sel, block_k) * block_k + 1


def gather_rows_numpy(Kmat, ids, block_k):
    """What the kernel must leave in OUT: row i < K_SEL is K[IDX[i]], or 0 where IDX[i] = -1; rows past K_SEL keep
    their NaN (the kernel must not touch them)."""
    out = np.full((_gather_rows(len(ids), block_k), Kmat.shape[1]), np.nan)
    out[:len(ids)] = np.where(ids[:, None] >= 0, Kmat.astype(np.float64)[np.maximum(ids, 0)], 0.0)
    return out


@triton.jit
def gather_rows_reference(K, IDX, OUT, K_SEL, D: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_D: tl.constexpr):
    """OUT[i, :] = K[IDX[i], :] where IDX[i] >= 0, 0 where IDX[i] == -1; entries i >= K_SEL are not touched.
    (The kernel that stands in when exercise 09.1 does not pass; its check compares with gather_rows_numpy.)"""
    offs_k = tl.program_id(0) * BLOCK_K + tl.arange(0, BLOCK_K)
    offs_d = tl.arange(0, BLOCK_D)
    in_list = offs_k < K_SEL
    ids = tl.load(IDX + offs_k, mask=in_list, other=-1)
    valid = ids >= 0
    md = offs_d < D
    rows = tl.load(K + tl.where(valid, ids, 0)[:, None] * D + offs_d[None, :], mask=valid[:, None] & md[None, :],
                   other=0.0)
    tl.store(OUT + offs_k[:, None] * D + offs_d[None, :], rows, mask=in_list[:, None] & md[None, :])


gather_rows_reference.numpy = gather_rows_numpy


def _run_gather(fn, case):
    Kmat, ids, block_k = case.args
    if getattr(fn, "numpy", None) is gather_rows_numpy:
        return gather_rows_numpy(Kmat, ids, block_k)
    D = Kmat.shape[1]
    out = _nan((_gather_rows(len(ids), block_k), D))
    with own_launches() as n:
        fn[(triton.cdiv(len(ids), block_k),)](_dev(Kmat), _dev(ids.astype(np.int32)), out, len(ids), D=D,
                                              BLOCK_K=block_k, BLOCK_D=triton.next_power_of_2(D))
    if not n[0]:
        raise _no_kernel(getattr(fn, "__name__", "gather_rows_kernel"), "exercise 09.1 is a @triton.jit kernel")
    return out.cpu().numpy()


def gather_case(rng, name, S=None, D=None, k_sel=None, pad=None, block_k=16):
    """A 09.1 Case (K (S, D) float32, IDX (K_SEL,) int64 with ``pad`` entries -1 (None: K_SEL // 5), BLOCK_K)."""
    S = int(rng.integers(20, 80)) if S is None else S
    D = int(rng.integers(3, 40)) if D is None else D
    k_sel = int(rng.integers(1, S + 1)) if k_sel is None else k_sel
    ids = rng.permutation(S)[:k_sel].astype(np.int64)
    n_pad = max(1, k_sel // 5) if pad is None else pad
    ids[rng.permutation(k_sel)[:n_pad]] = -1
    return Case(name, (_f32(rng, (S, D)), ids, block_k),
                note=f"S={S}, D={D}, K_SEL={k_sel}, BLOCK_K={block_k}, {int((ids < 0).sum())} padding entries")


def _gather_cases(rng):
    def case(name, **kw):
        return gather_case(rng, name, **kw)
    ragged = [int(rng.integers(17, 60)) for _ in range(3)]
    return ([case("ragged K_SEL (not a multiple of BLOCK_K)", S=k + 1 + int(rng.integers(0, 20)),
                  k_sel=k + (k % 16 == 0)) for k in ragged]
            + [case("D not a power of two", D=24, S=50, k_sel=37),
               case("D a power of two", D=16),
               case("K_SEL < BLOCK_K (one ragged program)", k_sel=int(rng.integers(2, 16))),
               case("K_SEL a multiple of BLOCK_K", S=64, k_sel=32),
               case("all padding", S=30, k_sel=21, pad=21)])


register(Exercise("09.1", "gather_rows_kernel", gather_rows_reference, _gather_cases, run=_run_gather,
                  axes={"result": ("i", "col")}, inputs=("K", "IDX", "BLOCK_K"), preamble=PREAMBLE,
                  needs=("triton",), **TOL))


# ------------------------------------------------------------------------------------------ 09.2 sparse decode
def sparse_decode_reference(q, k, v, idx, out, block_k=16):
    """The numpy twin (``hybrid_lab.ops.sparse_attention``) for one query per sequence, written into ``out``.
    q, out: (B, Hq, D); k, v: (B, S, Hkv, D); idx: (B, Hkv, K_SEL) -1 padded (torch tensors)."""
    f64 = [t.cpu().numpy().astype(np.float64) for t in (q, k, v)]
    o = _twin(f64[0][:, None], f64[1], f64[2], idx.cpu().numpy().astype(np.int64)[:, None])[:, 0]
    out.copy_(torch.from_numpy(o).to(out.dtype))
    return out


_DECODE_TWIN = sparse_decode_reference        # the reference launches no kernel: the one launcher exempt


def _run_decode(fn, case):
    q, k, v, idx, block_k = case.args
    out = _nan(q.shape)
    with own_launches() as n:
        fn(_dev(q), _dev(k), _dev(v), _dev(idx.astype(np.int32)), out, block_k=block_k)
    if not n[0] and fn is not _DECODE_TWIN:
        raise _no_kernel(getattr(fn, "__name__", "sparse_decode"), "exercise 09.2 asks for your kernel "
                         "(sparse_decode_kernel) and its launch, one program per (sequence, KV group)")
    return out.cpu().numpy()


def decode_case(rng, name, B=None, Hkv=None, G=None, D=None, S=None, k_sel=None, pad="some", q_scale=1.0,
                block_k=16):
    """A 09.2 Case (q (B, Hkv·G, D), k, v (B, S, Hkv, D) float32, idx (B, Hkv, K_SEL) int64 -1 padded, block_k)."""
    B = int(rng.integers(1, 3)) if B is None else B
    Hkv = int(rng.integers(1, 3)) if Hkv is None else Hkv
    G = int(rng.integers(1, 4)) if G is None else G
    D = int(rng.integers(3, 33)) if D is None else D
    S = int(rng.integers(20, 70)) if S is None else S
    k_sel = int(rng.integers(17, S + 1)) if k_sel is None else k_sel
    idx = np.stack([rng.permutation(S)[:k_sel] for _ in range(B * Hkv)]).reshape(B, Hkv, k_sel)
    if pad == "some" and k_sel:                           # a few -1 slots in every row
        for row in idx.reshape(-1, k_sel):
            row[rng.permutation(k_sel)[:max(1, k_sel // 6)]] = -1
    elif pad == "one row":                                # one (sequence, group) reads nothing at all
        idx[int(rng.integers(0, B)), int(rng.integers(0, Hkv))] = -1
    elif pad == "leading block":                          # every row: the first BLOCK_K slots are all -1
        idx[..., :block_k] = -1
    q = _f32(rng, (B, Hkv * G, D), q_scale)
    return Case(name, (q, _f32(rng, (B, S, Hkv, D)), _f32(rng, (B, S, Hkv, D)), idx, block_k),
                note=f"B={B}, Hkv={Hkv}, G={G}, D={D}, S={S}, K_SEL={k_sel}, BLOCK_K={block_k}, "
                     f"{int((idx < 0).sum())} padding slots")


def _decode_cases(rng):
    def case(name, **kw):
        return decode_case(rng, name, **kw)
    return ([case("random") for _ in range(2)]
            + [case("D = 24, K_SEL = 37: ragged tiles", B=2, Hkv=2, G=3, D=24, S=50, k_sel=37),
               case("one (sequence, group) all padding: output 0", B=2, Hkv=2, pad="one row"),
               case("a first block of padding only", Hkv=2, S=60, k_sel=int(rng.integers(33, 60)),
                    pad="leading block"),
               case("large scores (q x 20: the running max moves)", k_sel=int(rng.integers(40, 60)), S=60,
                    q_scale=20.0),
               case("K_SEL < BLOCK_K", k_sel=int(rng.integers(2, 16))),
               case("G = 1, D = 1", G=1, D=1),
               case("K_SEL = 0 (nothing selected): output 0", k_sel=0, pad="none")])


register(Exercise("09.2", "sparse_decode", sparse_decode_reference, _decode_cases, run=_run_decode,
                  axes={"result": ("b", "head", "dim")}, inputs=("q", "k", "v", "idx", "block_k"), preamble=PREAMBLE,
                  forbidden=("gpu_track.sparse_attention:sparse_attention",
                             "gpu_track.sparse_attention:_sparse_attn_kernel",
                             "gpu_track.softmax:online_softmax_step", "gpu_track.softmax:combine_splits",
                             "gpu_track.numpy_api:sparse_attention",
                             "hybrid_lab.ops.sparse_attention:sparse_attention"),
                  needs=("triton",), **TOL))


# ------------------------------------------------------------------------------------------ 09.3 chunk decay step
def chunk_decay_numpy(cum, cb, u):
    """Y = (CB ⊙ L) @ U with L[t, s] = exp(c_t - c_s) for s <= t, else 0 (float64, from the float32 inputs)."""
    cum, cb, u = (np.asarray(a, dtype=np.float64) for a in (cum, cb, u))
    return (cb * decay_matrix_reference(cum)) @ u


@triton.jit
def chunk_decay_reference(CUM, CB, U, Y, Q: tl.constexpr, P: tl.constexpr):
    """One chunk, intra-chunk part only: Y = (CB ⊙ L) @ U, L[t, s] = exp(c_t - c_s) if s <= t else 0.
    (The kernel that stands in when exercise 09.3 does not pass; its check compares with chunk_decay_numpy.)"""
    t = tl.arange(0, Q)
    p = tl.arange(0, P)
    c = tl.load(CUM + t)
    cb = tl.load(CB + t[:, None] * Q + t[None, :])
    u = tl.load(U + t[:, None] * P + p[None, :])
    decay = tl.where(t[:, None] >= t[None, :], tl.exp(tl.minimum(c[:, None] - c[None, :], 0.0)), 0.0)
    y = tl.dot(cb * decay, u, input_precision="ieee")
    tl.store(Y + t[:, None] * P + p[None, :], y)


chunk_decay_reference.numpy = chunk_decay_numpy


def _run_chunk(fn, case):
    cum, cb, u = case.args
    if getattr(fn, "numpy", None) is chunk_decay_numpy:
        return chunk_decay_numpy(cum, cb, u)
    Q, P = u.shape
    y = _nan((Q, P))
    with own_launches() as n:
        fn[(1,)](_dev(cum), _dev(cb), _dev(u), y, Q=Q, P=P)
    if not n[0]:
        raise _no_kernel(getattr(fn, "__name__", "chunk_decay_kernel"), "exercise 09.3 is a @triton.jit kernel")
    return y.cpu().numpy()


def chunk_case(rng, name, Q=None, P=None, dt=None):
    """A 09.3 Case (CUM (Q,), CB (Q, Q), U (Q, P) float32); dt(Q) -> the (Q,) steps Δ if given (else softplus noise)."""
    Q = int(rng.choice([16, 32])) if Q is None else Q
    P = int(rng.choice([16, 32])) if P is None else P
    N = int(rng.integers(4, 17))
    dt = np.log1p(np.exp(rng.normal(size=Q))) if dt is None else dt(Q)
    A = -float(rng.uniform(0.3, 1.5))
    B, C, x = rng.normal(size=(Q, N)), rng.normal(size=(Q, N)), rng.normal(size=(Q, P))
    cum = np.cumsum(dt * A).astype(np.float32)
    return Case(name, (cum, (C @ B.T).astype(np.float32), (dt[:, None] * x).astype(np.float32)),
                note=f"Q={Q}, P={P}, N={N}, A={A:.3f}, c spans [{cum.min():.3g}, {cum.max():.3g}]")


def _chunk_cases(rng):
    def case(name, Q=None, P=None, dt=None):
        return chunk_case(rng, name, Q, P, dt)

    def one_big(Q):
        dt = np.log1p(np.exp(rng.normal(size=Q)))
        dt[Q // 2] = 300.0
        return dt
    return ([case("random") for _ in range(3)]
            + [case("Q = 32, P = 16", 32, 16), case("large Δ (x500): clamp before exp",
                                                    dt=lambda Q: 500 * np.log1p(np.exp(rng.normal(size=Q)))),
               case("Δ = 0 (no decay: L is the causal mask)", dt=lambda Q: np.zeros(Q)),
               case("one large step in the middle", dt=one_big)])


# float_errors, as 01.2: the exercise says "clamp the exponent to <= 0 before exp so the masked entries cannot
# overflow when Δ is large". Under Triton's interpreter (no GPU: how the grader runs it) tl.exp is numpy's exp, so an
# unclamped exp overflows into a FloatingPointError, also where tl.where masks the inf afterwards. On a GPU the kernel
# runs on the device, out of numpy's reach: there an unclamped kernel whose mask hides the inf is not caught.
register(Exercise("09.3", "chunk_decay_kernel", chunk_decay_reference, _chunk_cases, run=_run_chunk,
                  axes={"result": ("t", "p")}, preamble=PREAMBLE, needs=("triton",), float_errors=True, **TOL))
