"""Bad input never becomes a silent number, for every public wrapper of gpu_track (the Triton kernels' torch and
numpy entry points). The twin of ``tests/test_bad_input_property.py`` for the GPU track.

For each public callable, ``GPU_TABLE`` holds one small valid baseline call: torch tensors for the torch wrappers,
numpy arrays for ``numpy_api``. The test changes ONE argument at a time:

    kind of argument          mutations (expected: ValueError naming the argument)
    float tensor/array (F)    nan, +inf, -inf at one element; extra / missing axis; one axis one shorter;
                              int dtype (ints where floats are expected), bool dtype; None (required arguments)
    int tensor/array   (I)    the same shapes and None; an entry == the size it indexes, or below its lowest
                              allowed value; float dtype (floats where ints are expected), bool dtype
    size               (Size) a one-element array, 2.0, -1, 0, 2**62, None (required sizes)
    number             (Real) nan, inf, -1, 0, True, "1"
    name               (Choice) an unknown name
    layouts            (F, I) non-contiguous (transposed), Fortran-ordered (all axes reversed) and strided (every
                              other entry) tensors, and a size as ``np.int32``: these must return exactly the
                              baseline's numbers, not raise.
    extremes           (F) every entry x 1e30 or x 1e-30, one entry set to ±1e30; every tensor of the call with
                              every axis 0 at once: a ValueError or a result without NaN, never another exception.
    precision          (F) one operand in float16 or bfloat16, the others as given: a ValueError (the wrapper wants
                              one dtype for them) or the numbers of the call with that operand widened back to the
                              baseline's dtype, to the output dtype's rounding (a wrapper computes in the widest of
                              its operands' dtypes and never rounds the others down to the narrow one).
    scalars, repeats   (F) a Python float where a tensor belongs; (I, -1 padded index sets) one entry repeated
                              within a row: a ValueError.

Anything else, a TypeError, RuntimeError, IndexError, Triton's interpreter error, or a return where a ValueError
was expected, fails. ``ALLOW`` lists the (callable, argument, mutation) cases where a return is the documented
behaviour, with the reason and a predicate the result must satisfy. ``SKIP`` lists the public callables not
called here, with the reason; ``test_gpu_table_covers_every_public_wrapper`` checks that every other public
callable has a ``GPU_TABLE`` entry. The kernels run under ``TRITON_INTERPRET=1`` without a GPU (``gpu_track``
sets it), so every size is tiny.
"""
from __future__ import annotations

import fnmatch
import importlib
import inspect
import math
import pkgutil
import re
from dataclasses import dataclass, field

import numpy as np
import pytest

import gpu_track  # noqa: F401  (before triton: sets TRITON_INTERPRET without a GPU)

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
# NaN / inf mutations make the interpreter's numpy warn (invalid value in matmul): the outcome is what is checked
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

from gpu_track import (block_sparse, common, fa_decode_topk, lightning_indexer, numpy_api, selective_scan,  # noqa: E402
                       sparse_attention, ssd)

# ------------------------------------------------------------------------------------------ what is not called
TOOLING = {
    "gpu_track.bench": "the H200 benchmark script (timings of every kernel against its peers; needs a GPU)",
    "gpu_track.peers": "loads the reference Mamba kernels the benchmark compares with (optional packages)",
    "gpu_track.report": "reads and plots the stored benchmark results (no kernel; tests/test_gpu_report.py)",
    "gpu_track.sass": "compiles kernels ahead of time to count SASS instructions (needs the CUDA toolchain)",
    "gpu_track.targets": "which of the benchmark's kernel configs fit each student's GPU (tooling beside bench.py)",
    "gpu_track.devices": "the student GPUs' facts and dtype policy, below targets (tests/test_gpu_targets.py, "
                         "tests/test_gpu_dtype_policy.py)",
    "gpu_track.no_triton": "the stand-in for triton where it does not install (tests/test_no_triton.py)",
}
_CHECKS = "an argument check itself: every wrapper below calls it, so the wrappers' mutations exercise it"
_LAUNCH = "a launch helper: called only by the wrappers, with values they have already checked"
SKIP = {
    **{f"gpu_track.common.{n}": _CHECKS for n in ("check", "check_tensor", "check_gqa_operands", "check_sink",
                                                  "check_range", "check_no_repeats", "check_index_space",
                                                  "check_grid", "check_finite", "is_int", "check_int", "check_tile",
                                                  "check_scale")},
    **{f"gpu_track.common.{n}": _LAUNCH for n in ("device", "pow2", "acc_torch_dtype", "acc_dtype", "dot_precision",
                                                  "fold_scale", "split_chunk", "alloc", "query_positions")},
    "gpu_track.common.scan_combine": "a @triton.jit combine function: callable only inside a kernel",
    **{f"gpu_track.common.{n}": "the dtype policy's plumbing (tests/test_gpu_dtype_policy.py): it casts a wrapper's "
                                "validated operands, it validates nothing of its own"
       for n in ("policy_target", "to_tensor_core_dtype", "on_tensor_cores")},
    "gpu_track.softmax.online_softmax_step": "a @triton.jit device function: callable only inside a kernel",
    "gpu_track.softmax.combine_splits_kernel": "a Triton kernel: launched by softmax.combine_splits",
    "gpu_track.selective_scan.CHUNKED_SCAN_KERNEL": "the scan kernel itself, exposed for gpu_track.sass",
    "gpu_track.softmax.combine_splits": "the split-K merge inside sparse_attention / fa_decode / block_sparse: its "
                                        "partials are the kernels' own scratch buffers, never a caller's input",
    "gpu_track.lightning_indexer.default_block_t": "a launch heuristic of indexer_scores (sizes it has checked)",
    **{f"gpu_track.{m}.{n}": "the wrapper's contract: the wrapper's mutations exercise it"
       for m, n in (("sparse_attention", "check_sparse_attention_args"), ("block_sparse", "check_block_sparse_args"),
                    ("fa_decode_topk", "check_fa_decode_args"), ("lightning_indexer", "check_indexer_args"),
                    ("selective_scan", "check_selective_scan_args"),
                    ("selective_scan", "check_selective_scan_step_args"), ("ssd", "check_ssd_args"))},
}
# arguments of the tabled wrappers that are not mutated, and why
NOT_MUTATED = {
    "num_warps": "a launch hint (the interpreter ignores it; Triton itself validates it on a GPU)",
    "num_stages": "a launch hint (the interpreter ignores it; Triton itself validates it on a GPU)",
    "out_dtype": "the benchmark's output dtype override (a torch dtype, not data)",
    "states_dtype": "the benchmark's chunk-state dtype override (a torch dtype, not data)",
    "two_pass": "a flag choosing the launch form; both forms are tabled",
}


# ------------------------------------------------------------------------------------------ argument kinds
def _is_torch(a):
    return isinstance(a, torch.Tensor)


def _np(a):
    if _is_torch(a):
        a = a.detach().cpu()
        return (a.float() if a.dtype == torch.float8_e4m3fn else a).numpy()   # numpy has no float8
    return np.asarray(a)


def _like(a, arr):
    """``arr`` (numpy) as the same kind of container as ``a``."""
    return torch.from_numpy(np.ascontiguousarray(arr)).to(a.device) if _is_torch(a) else arr


def _poke(a, i, value):
    arr = _np(a).copy()
    arr.flat[i % arr.size] = value
    return _like(a, arr)


def _sized_axes(a, free):
    return [i for i, n in enumerate(a.shape) if n >= 2 and i not in free and i - a.ndim not in free]


def _layout(a, label):
    """Same values, another memory layout."""
    if label == "layout_transposed":      # the last two axes swapped in memory
        if _is_torch(a):
            return a.transpose(-1, -2).contiguous().transpose(-1, -2)
        return np.swapaxes(np.ascontiguousarray(np.swapaxes(a, -1, -2)), -1, -2)
    if label == "layout_fortran":
        if _is_torch(a):
            rev = tuple(range(a.ndim))[::-1]
            return a.permute(rev).contiguous().permute(rev)
        return np.asfortranarray(a)
    if label == "layout_strided":         # every other entry of a twice-as-wide buffer
        if _is_torch(a):
            return torch.repeat_interleave(a, 2, dim=-1)[..., ::2]
        return np.repeat(a, 2, axis=-1)[..., ::2]
    raise KeyError(label)


def _layout_labels(a):
    out = ["layout_strided"] if a.ndim >= 1 and a.shape[-1] >= 1 else []
    if a.ndim >= 2:
        out += ["layout_transposed", "layout_fortran"]
    return out


def _shape_labels(a, free):
    return ["extra_axis"] + (["missing_axis"] if a.ndim else []) + (["wrong_length"] if _sized_axes(a, free) else [])


def _shape_mutate(a, label, free):
    arr = _np(a)
    if label == "extra_axis":            # a new leading axis of length 2 (length 1 could broadcast)
        return _like(a, np.stack([arr, arr]))
    if label == "missing_axis":
        return _like(a, arr[0])
    if label == "wrong_length":          # the last pinned axis one shorter
        ax = _sized_axes(arr, free)[-1]
        return _like(a, np.take(arr, np.arange(arr.shape[ax] - 1), axis=ax))
    raise KeyError(label)


@dataclass
class Arg:
    v: object

    def labels(self):
        return []

    def mutate(self, label):
        raise KeyError(label)


@dataclass
class Fixed(Arg):
    """Not mutated (a flag, a dtype)."""


def _array_mutate(a, label, free):
    """The mutations float and int tensors share: bool dtype, None, a layout, a shape change."""
    if label == "dtype_bool":
        return _like(a, _np(a) > 0)
    if label == "none":
        return None
    if label.startswith("layout"):
        return _layout(a, label)
    return _shape_mutate(a, label, free)


@dataclass
class F(Arg):
    """A float tensor (or numpy array). ``free``: axes no other argument pins (never shortened); ``optional``: None
    is a valid value; ``neginf_ok``: -inf is meaningful."""
    free: tuple = ()
    optional: bool = False
    neginf_ok: bool = False

    def labels(self):
        out = ["nan", "+inf"] + ([] if self.neginf_ok else ["-inf"]) + _shape_labels(self.v, self.free)
        out += ["dtype_int", "dtype_bool"] + ([] if self.optional else ["none"]) + _layout_labels(self.v)
        if _is_torch(self.v):
            out += list(BEHAVE[:3]) + list(PRECISION) + ["scalar"]
        return out

    def mutate(self, label):
        a = self.v
        if label in ("nan", "+inf", "-inf"):
            return _poke(a, 1, {"nan": math.nan, "+inf": math.inf, "-inf": -math.inf}[label])
        if label == "dtype_int":
            return _like(a, np.round(_np(a) * 3).astype(np.int64))
        if label in ("magnitude_1e30", "magnitude_1e-30"):
            return a * (1e30 if label == "magnitude_1e30" else 1e-30)
        if label == "extreme_entry":            # keeps a one-signed operand's sign (A <= 0, dt >= 0)
            one_signed = bool((a >= 0).all() or (a <= 0).all())
            return _poke(a, 1, (-1e30 if (a <= 0).all() else 1e30) if one_signed else -1e30)
        if label in PRECISION:
            return a.to(PRECISION[label])
        if label == "scalar":
            return float(a.flatten()[0])
        return _array_mutate(a, label, self.free)


@dataclass
class I(Arg):  # noqa: E742
    """An int tensor (or numpy array) whose entries index something of size ``hi`` (None: unbounded), ``lo`` the
    smallest allowed entry (-1 where -1 pads)."""
    hi: int | None = None
    lo: int = 0
    free: tuple = ()
    optional: bool = False

    def labels(self):
        out = _shape_labels(self.v, self.free) + (["index_eq_size"] if self.hi is not None else [])
        out += ["index_below_lo", "dtype_float", "dtype_bool"] + ([] if self.optional else ["none"])
        if self.lo == -1 and self.v.shape[-1] >= 2 and _is_torch(self.v):      # -1 padded index sets
            out.append("duplicate")
        return out + _layout_labels(self.v)

    def mutate(self, label):
        a = self.v
        if label == "index_eq_size":
            return _poke(a, 0, self.hi)
        if label == "duplicate":                # the first entry >= 0 of a row written into the next slot
            arr = _np(a).copy()
            rows = np.argwhere((arr >= 0).any(-1))
            row = tuple(rows[0])
            j = int(np.flatnonzero(arr[row] >= 0)[0])
            arr[row][(j + 1) % arr.shape[-1]] = arr[row][j]
            return _like(a, arr)
        if label == "index_below_lo":
            return _poke(a, 0, self.lo - 1)
        if label == "dtype_float":
            return _like(a, _np(a).astype(np.float64) + 0.5)
        return _array_mutate(a, label, self.free)


@dataclass
class Size(Arg):
    """An integer size >= ``lo``; ``optional``: None is valid (a default)."""
    lo: int = 1
    optional: bool = False

    def labels(self):
        out = ["size_np_int32", "one_element_array", "float_whole", "negative"] + (["zero"] if self.lo >= 1 else [])
        return out + ["huge"] + ([] if self.optional else ["none"])

    def mutate(self, label):
        return {"size_np_int32": lambda: np.int32(self.v), "one_element_array": lambda: np.array([self.v]),
                "float_whole": lambda: float(self.v), "negative": lambda: -1, "zero": lambda: 0,
                "huge": lambda: 2 ** 62, "none": lambda: None}[label]()


@dataclass
class Real(Arg):
    """A number > 0 (a softmax scale); None is valid."""

    def labels(self):
        return ["nan", "+inf", "negative", "zero", "bool", "str"]

    def mutate(self, label):
        return {"nan": math.nan, "+inf": math.inf, "negative": -1.0, "zero": 0.0, "bool": True, "str": "1"}[label]


@dataclass
class Choice(Arg):
    def labels(self):
        return ["unknown_name"]

    def mutate(self, label):
        return "no-such-choice"


SAME = ("layout_", "size_np_int32")       # mutations that must give the baseline's numbers
BEHAVE = ("magnitude_1e30", "magnitude_1e-30", "extreme_entry", "all_axes_zero")   # ValueError or no NaN
PRECISION = {"float16": torch.float16, "bfloat16": torch.bfloat16}   # ValueError, or the widened call's numbers


# ------------------------------------------------------------------------------------------ the baselines
def _r(seed=0):
    return np.random.default_rng(seed)


def tf(*shape, seed=0, sign=0):
    """A float64 torch tensor on the kernels' device (float64: the kernels' exact twin path)."""
    a = _r(seed + sum(shape)).standard_normal(shape)
    if sign:
        a = sign * (np.abs(a) + 0.1)
    return torch.from_numpy(a).to(common.device())


def nf(*shape, seed=0, sign=0):
    return tf(*shape, seed=seed, sign=sign).cpu().numpy()


def ti(a):
    return torch.tensor(a, dtype=torch.int64, device=common.device())


@dataclass
class Entry:
    fn: object
    args: dict = field(default_factory=dict)

    def call(self, **over):
        kw = {n: a.v for n, a in self.args.items()}
        kw.update(over)
        return self.fn(**kw)


# sizes: B = 1, T = 2 queries, S = 8 keys, Hq = 2, Hkv = 1, d = dv = 4; scans: Bt = 1, L = 4, Dm = 2, N = 2
B, T, S, HQ, HKV, D, DV = 1, 2, 8, 2, 1, 4, 4


def _attn(np_=False, q3=False):
    mk = nf if np_ else tf
    q = mk(B, HQ, D, seed=1) if q3 else mk(B, T, HQ, D, seed=1)
    return dict(q=F(q), k=F(mk(B, S, HKV, D, seed=2)), v=F(mk(B, S, HKV, DV, seed=3), free=(-1,)))


def _scan(mk, step=False):
    Bt, L, Dm, N = 1, 4, 2, 2
    lead = (Bt,) if step else (Bt, L)
    return dict(x=F(mk(*lead, Dm, seed=4)), dt=F(mk(*lead, Dm, seed=5, sign=1)), A=F(mk(Dm, N, seed=6, sign=-1)),
                B=F(mk(*lead, N, seed=7)), C=F(mk(*lead, N, seed=8)), D=F(mk(Dm, seed=9), optional=not step),
                **({"h": F(mk(Bt, Dm, N, seed=10))} if step else {"h0": F(mk(Bt, Dm, N, seed=10), optional=True)}))


def _ssd(mk):
    Bt, L, H, P, N = 1, 4, 2, 2, 2
    return dict(x=F(mk(Bt, L, H, P, seed=11)), dt=F(mk(Bt, L, H, seed=12, sign=1)), A=F(mk(H, seed=13, sign=-1)),
                B=F(mk(Bt, L, N, seed=14)), C=F(mk(Bt, L, N, seed=15)), D=F(mk(H, seed=16), optional=True),
                h0=F(mk(Bt, H, P, N, seed=17), optional=True))


def _idx(np_=False):
    a = np.array([[[[0, 3, -1]], [[5, 1, 7]]]])                      # (B, T, Hkv, K), -1 pads
    return I(a if np_ else ti(a), hi=S, lo=-1, free=(-1,))


def _block_idx(np_=False):
    a = np.array([[[[0, -1]], [[1, 0]]]])                            # (B, T, Hkv, nb), blocks of 4 keys: Nb = 2
    return I(a if np_ else ti(a), hi=2, lo=-1, free=(-1,))


def _indexer(mk):
    return dict(q=F(mk(B, T, 2, D, seed=18)), w=F(mk(B, T, 2, seed=19)), k=F(mk(B, S, D, seed=20), free=(1,)))


def _qpos(hi, np_=False):
    a = np.array([5, 7])
    return I(a if np_ else ti(a), hi=hi, lo=0, optional=True)


SINK = dict(sink=F(tf(HQ, seed=21), optional=True))
GPU_TABLE: dict[str, Entry] = {}
G = "gpu_track"
GPU_TABLE[f"{G}.sparse_attention.sparse_attention"] = Entry(sparse_attention.sparse_attention, dict(
    **_attn(), idx=_idx(), scale=Real(0.7), **SINK, block_k=Size(16), nsplit=Size(2, optional=True)))
GPU_TABLE[f"{G}.block_sparse.block_sparse_attention"] = Entry(block_sparse.block_sparse_attention, dict(
    **_attn(), block_idx=_block_idx(), block_size=Size(4), scale=Real(0.7), q_pos=_qpos(S),
    block_t=Size(1, optional=True), nsplit=Size(2, optional=True)))
GPU_TABLE[f"{G}.block_sparse.tile_uniform"] = Entry(block_sparse.tile_uniform, dict(
    block_idx=_block_idx(), block_t=Size(2)))
GPU_TABLE[f"{G}.fa_decode_topk.fa_decode"] = Entry(fa_decode_topk.fa_decode, dict(
    **_attn(q3=True), window=Size(2), scale=Real(0.7), **SINK, block_s=Size(16), nsplit=Size(2, optional=True)))
GPU_TABLE[f"{G}.fa_decode_topk.fa_decode_topk"] = Entry(fa_decode_topk.fa_decode_topk, dict(
    **_attn(q3=True), topk=Size(3), window=Size(2), scale=Real(0.7), **SINK))
GPU_TABLE[f"{G}.lightning_indexer.indexer_scores"] = Entry(lightning_indexer.indexer_scores, dict(
    **_indexer(tf), q_pos=_qpos(None), block_s=Size(16), block_t=Size(8, optional=True),
    variant=Choice("tile"), span=Size(16, optional=True)))
GPU_TABLE[f"{G}.lightning_indexer.lightning_indexer"] = Entry(lightning_indexer.lightning_indexer, dict(
    **_indexer(tf), topk=Size(3), q_pos=_qpos(None)))
GPU_TABLE[f"{G}.lightning_indexer.lightning_indexer_fp8"] = Entry(lightning_indexer.lightning_indexer_fp8, dict(
    **_indexer(lambda *s, **kw: tf(*s, **kw).float()), topk=Size(3), q_pos=_qpos(None)))
GPU_TABLE[f"{G}.lightning_indexer.fp8_scale"] = Entry(lightning_indexer.fp8_scale, dict(x=F(tf(2, 3, seed=22))))
GPU_TABLE[f"{G}.lightning_indexer.quantize_fp8"] = Entry(lightning_indexer.quantize_fp8, dict(x=F(tf(2, 3, seed=22))))
_q8 = {n: lightning_indexer.quantize_fp8(a.v.float()) for n, a in _indexer(tf).items() if n != "w"}
GPU_TABLE[f"{G}.lightning_indexer.indexer_scores_fp8"] = Entry(lightning_indexer.indexer_scores_fp8, dict(
    q8=Fixed(_q8["q"][0]), wq=F(tf(B, T, 2, seed=19).float()), k8=Fixed(_q8["k"][0]),
    k_scale=F(_q8["k"][1], free=(1,)), q_pos=_qpos(None)))
for _fn in (selective_scan.selective_scan, selective_scan.selective_scan_unfused):
    GPU_TABLE[f"{G}.selective_scan.{_fn.__name__}"] = Entry(_fn, dict(**_scan(tf), chunk=Size(2), block_d=Size(2)))
GPU_TABLE[f"{G}.selective_scan.selective_scan"].args.update(variant=Choice("chunked"), lanes_d=Size(2))
GPU_TABLE[f"{G}.selective_scan.selective_scan_step"] = Entry(selective_scan.selective_scan_step, dict(
    **_scan(tf, step=True), block_d=Size(2)))
GPU_TABLE[f"{G}.selective_scan.selective_scan_step"].args["D"].optional = True     # "D: (Dm,) or None"
GPU_TABLE[f"{G}.ssd.ssd_chunked"] = Entry(ssd.ssd_chunked, dict(**_ssd(tf), chunk=Size(2), block_p=Size(16)))
GPU_TABLE[f"{G}.ssd.ssd_chunked[two_pass]"] = Entry(ssd.ssd_chunked, dict(
    **_ssd(tf), chunk=Size(2), block_p=Size(16), two_pass=Fixed(True), block_n_states=Size(16), pass_block=Size(16),
    pass_chunks=Size(2), heads_per_program=Size(2)))
GPU_TABLE[f"{G}.common.topk_stable"] = Entry(common.topk_stable, dict(
    scores=F(tf(2, 5, seed=23), neginf_ok=True, free=(-1,)), k=Size(3)))
# numpy_api: numpy in / numpy out
_NSINK = dict(sink=F(nf(HQ, seed=21), optional=True))
GPU_TABLE[f"{G}.numpy_api.sparse_attention"] = Entry(numpy_api.sparse_attention, dict(
    **_attn(np_=True), idx=_idx(np_=True), scale=Real(0.7), **_NSINK))
GPU_TABLE[f"{G}.numpy_api.block_sparse_attention"] = Entry(numpy_api.block_sparse_attention, dict(
    **_attn(np_=True), block_idx=_block_idx(np_=True), block_size=Size(4), scale=Real(0.7),
    q_pos=_qpos(S, np_=True)))
GPU_TABLE[f"{G}.numpy_api.fa_decode_topk"] = Entry(numpy_api.fa_decode_topk, dict(
    **_attn(np_=True, q3=True), topk=Size(3), window=Size(2), scale=Real(0.7), **_NSINK))
GPU_TABLE[f"{G}.numpy_api.lightning_indexer"] = Entry(numpy_api.lightning_indexer, dict(
    **_indexer(nf), topk=Size(3), q_pos=_qpos(None, np_=True)))
GPU_TABLE[f"{G}.numpy_api.selective_scan"] = Entry(numpy_api.selective_scan, dict(**_scan(nf), chunk_size=Size(2)))
GPU_TABLE[f"{G}.numpy_api.selective_scan_step"] = Entry(numpy_api.selective_scan_step, _scan(nf, step=True))
GPU_TABLE[f"{G}.numpy_api.ssd_chunked"] = Entry(numpy_api.ssd_chunked, dict(**_ssd(nf), chunk_size=Size(16)))


# numpy_api is the registry's back end: ``hybrid_lab.use_backend("triton")`` runs ``contracts.check_<op>`` on the
# arguments first (covered by tests/test_bad_input_property.py) and numpy_api only converts, by design (it checks
# nothing, and tests/test_contracts.py counts that the contract runs once per call). Here its layouts only: a
# Fortran-ordered or strided array must give the contiguous call's numbers.
VALIDATED_UPSTREAM = {f"{G}.numpy_api.*": "the registry's back end: the op's contract has run on its arguments"}


# ------------------------------------------------------------------------------------------ allowed returns
def _nonfinite_or_same(out, base, bad):
    """NaN/inf in: NaN/inf out, or the poked entry is never read (the baseline's numbers)."""
    for o, b in zip(_leaves(out), _leaves(base)):
        o, b = _np(o), _np(b)
        if o.dtype.kind == "f" and o.shape == b.shape and (np.isfinite(o) != np.isfinite(b)).any():
            return True
    return _same(out, base)


def _close(out, base, bad):
    """Another launch configuration of the same computation: the baseline's numbers up to rounding."""
    return all(np.allclose(_np(o), _np(b), rtol=1e-9, atol=1e-12, equal_nan=True)
               for o, b in zip(_leaves(out), _leaves(base)))


def _same_o(out, base, bad):
    return _same(out[0], base[0])


def _row_shape(out, base, bad):
    """A per-row function of any shape: one scale per row of ``bad``."""
    return tuple(_leaves(out)[-1].shape) == tuple(bad.shape[:-1])


ALLOW: dict[tuple, tuple] = {}     # (entry, argument, mutation) fnmatch patterns -> (reason, predicate(out, base, bad))
_CAPPED = "a launch size past what the input needs is capped (split_chunk / min): the same numbers"
for _e, _a in (("sparse_attention.sparse_attention", "nsplit"), ("block_sparse.block_sparse_attention", "nsplit"),
               ("fa_decode_topk.fa_decode", "nsplit"), ("lightning_indexer.indexer_scores", "span"),
               ("ssd.ssd_chunked[[]two_pass[]]", "heads_per_program"), ("selective_scan.selective_scan", "lanes_d")):
    ALLOW[(f"{G}.{_e}", _a, "huge")] = (_CAPPED, _close)
ALLOW[(f"{G}.fa_decode_topk.fa_decode*", "window", "huge")] = (
    "a window past the first key leaves no position outside it (documented): o is unchanged", _same_o)
for _m in ("extra_axis", "missing_axis", "wrong_length"):
    for _e in ("lightning_indexer.fp8_scale", "lightning_indexer.quantize_fp8"):
        ALLOW[(f"{G}.{_e}", "x", _m)] = ("per-row quantization of a tensor of any shape", _row_shape)
    ALLOW[(f"{G}.common.topk_stable", "scores", _m)] = (
        "top-k over the last axis of any shape", lambda out, base, bad: out.shape == bad.shape[:-1] + (3,))
for _m in ("wrong_length", "index_eq_size", "index_below_lo", "duplicate"):
    ALLOW[(f"{G}.block_sparse.tile_uniform", "block_idx", _m)] = (
        "compares the block lists only; their range is block_sparse_attention's check",
        lambda out, base, bad: isinstance(out, bool))
# NaN/inf in that come out as finite numbers: the gap the dispatcher's contract closes (the numpy API and the
# registry refuse these before any kernel runs); the result must still have the baseline's shapes
_GAP = ("finite output from a non-finite operand: not looked for here (a full pass), refused by contracts.check_<op> "
        "before the registry calls the kernels")
for _e, _a, _m in (("sparse_attention.sparse_attention", "q", "-inf"), ("fa_decode_topk.fa_decode*", "k", "+inf"),
                   ("lightning_indexer.*indexer", "[qk]", "nan"), ("lightning_indexer.indexer_scores", "[qk]", "nan"),
                   ("selective_scan.*", "A", "-inf")):
    ALLOW[(f"{G}.{_e}", _a, _m)] = (_GAP, lambda out, base, bad: [o.shape for o in _leaves(out)]
                                    == [b.shape for b in _leaves(base)])
ALLOW[(f"{G}.common.topk_stable", "scores", "+inf")] = (
    "+inf is the highest score: ranked first", lambda out, base, bad: int(out[0, 0]) == 1)
ALLOW[(f"{G}.common.topk_stable", "scores", "nan")] = (
    "its callers rank scores the kernels computed (numpy_api refuses NaN scores: contracts.check_scores); a NaN "
    "check here would sync inside a CUDA-graph capture", lambda out, base, bad: out.shape == base.shape)
# a ValueError that names another argument, the one the bad value is checked through
NAMED_AS = {
    **{(f"{G}.{e}", a, "wrong_length"): ("*", "the first operand sets the sizes the next one is checked against")
       for e, a in (("selective_scan.*", "x"), ("ssd.*", "x"), ("lightning_indexer.*", "q"))},
    (f"{G}.block_sparse.block_sparse_attention", "block_size", "huge"): (
        "block_idx", "one block of every key: the listed block 1 is out of [-1, ceil(S / block_size))"),
    (f"{G}.lightning_indexer.indexer_scores_fp8", "wq", "*"): ("w", "passed on as indexer_scores' w"),
    (f"{G}.lightning_indexer.indexer_scores_fp8", "k_scale", "none"): (
        "q", "without k_scale the call is the unquantized indexer_scores, which refuses float8 q"),
}
_OPERANDS = ("NaN/inf in the operands are left to the dispatcher (contracts.check_<op>: a full pass over the "
             "KV cache / sequence, common.py's docstring): NaN/inf must come out, or the entry is never read")
for _e in ("sparse_attention.sparse_attention", "block_sparse.block_sparse_attention", "fa_decode_topk.fa_decode*",
           "lightning_indexer.*", "selective_scan.*", "ssd.*", "common.topk_stable"):
    for _m in ("nan", "+inf", "-inf"):
        ALLOW[(f"{G}.{_e}", "*", _m)] = (_OPERANDS, _nonfinite_or_same)


def _allowed(name, arg, label):
    for (pe, pa, pl), v in ALLOW.items():
        if fnmatch.fnmatchcase(name, pe) and fnmatch.fnmatchcase(arg, pa) and fnmatch.fnmatchcase(label, pl):
            return v
    return None


def _named_as(name, arg, label):
    for (pe, pa, pl), (other, _why) in NAMED_AS.items():
        if fnmatch.fnmatchcase(name, pe) and fnmatch.fnmatchcase(arg, pa) and fnmatch.fnmatchcase(label, pl):
            return other
    return arg


# ------------------------------------------------------------------------------------------ the test
def _leaves(out):
    if isinstance(out, (tuple, list)):
        return [x for o in out for x in _leaves(o)]
    return [out]


def _same(a, b):
    la, lb = _leaves(a), _leaves(b)
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        if _is_torch(x) or isinstance(x, np.ndarray):
            x, y = _np(x), _np(y)
            if x.shape != y.shape or x.dtype != y.dtype or not np.array_equal(x, y, equal_nan=x.dtype.kind == "f"):
                return False
        elif x != y:
            return False
    return True


_BASE: dict[str, object] = {}


def _baseline(name):
    if name not in _BASE:
        _BASE[name] = GPU_TABLE[name].call()
    return _BASE[name]


def _tensors(e):
    """The entry's torch tensor arguments (fixed ones too: the float8 operands of the FP8 indexer)."""
    return {n: a for n, a in e.args.items() if _is_torch(a.v)}


CASES = [(name, arg, label) for name, e in GPU_TABLE.items() for arg, a in e.args.items() for label in a.labels()
         if not any(fnmatch.fnmatchcase(name, p) for p in VALIDATED_UPSTREAM) or label.startswith(SAME)]
CASES += [(name, "*", "all_axes_zero") for name, e in GPU_TABLE.items() if _tensors(e)]


def _arg_named(msg, arg):
    return re.search(rf"(^|[^A-Za-z0-9_]){re.escape(arg)}([^A-Za-z0-9_]|$)", msg) is not None


def _has_nan(out):
    return any(_np(o).dtype.kind == "f" and np.isnan(_np(o)).any() for o in _leaves(out)
               if _is_torch(o) or isinstance(o, np.ndarray))


_TOL = {np.dtype(np.float64): 1e-12, np.dtype(np.float32): 1e-6, np.dtype(np.float16): 1e-3}


def _same_numbers(a, b):
    """The same shapes, dtypes and integers, floats to the output dtype's rounding (relative to the largest)."""
    for x, y in zip(_leaves(a), _leaves(b)):
        if not (_is_torch(x) or isinstance(x, np.ndarray)):
            if x != y:
                return False
            continue
        x, y = _np(x), _np(y)
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if x.dtype.kind != "f":
            if not np.array_equal(x, y):
                return False
            continue
        fin = np.isfinite(y)
        if not np.array_equal(fin, np.isfinite(x)) or not np.array_equal(x[~fin], y[~fin], equal_nan=True):
            return False
        tol = _TOL.get(x.dtype, 1e-6) * max(float(np.abs(y[fin]).max(initial=0.0)), 1e-300)
        if fin.any() and float(np.abs(x[fin].astype(np.float64) - y[fin]).max()) > tol:
            return False
    return True


def _mutated(name, arg, label):
    """{argument: value} of the mutated call."""
    e = GPU_TABLE[name]
    if label == "all_axes_zero":            # every tensor of the call, with every axis of length 0
        return {n: torch.zeros((0,) * a.v.ndim, dtype=a.v.dtype, device=a.v.device) for n, a in _tensors(e).items()}
    return {arg: e.args[arg].mutate(label)}


def _outcome(name, arg, label):
    """None when the case passes, else a one-line description of what happened."""
    e = GPU_TABLE[name]
    over = _mutated(name, arg, label)
    bad = over.get(arg)
    try:
        out = e.call(**over)
    except ValueError as err:
        if label.startswith(SAME):
            return f"raised ValueError for a valid layout: {err}"
        if label in BEHAVE or label in PRECISION:   # any argument may be the one checked first (k against q's dtype)
            aliases = [o for (pe, _, _), (o, _) in NAMED_AS.items() if fnmatch.fnmatchcase(name, pe) and o != "*"]
            names = [n for n in [*e.args, *aliases] if _arg_named(str(err), n)]
            return None if names else f"ValueError naming no argument: {err}"
        # sizes of the first checked tensor may be named by the axis's letter (S, L, ...) rather than the argument
        named = _named_as(name, arg, label)
        return None if named == "*" or _arg_named(str(err), named) else f"ValueError not naming {named}: {err}"
    except Exception as err:  # noqa: BLE001  (the property: nothing but ValueError)
        return f"{type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}"
    if label.startswith(SAME):
        return None if _same(out, _baseline(name)) else "returned other numbers than the baseline"
    if label in BEHAVE:
        return "returned NaN" if _has_nan(out) else None
    if label in PRECISION:                  # computed in the widest dtype: the same values, widened, give the same
        ref = e.call(**{arg: bad.to(e.args[arg].v.dtype)})
        return None if _same_numbers(out, ref) else (f"{label} {arg} rounded other operands down: other numbers than "
                                                     f"with {arg} widened back to {e.args[arg].v.dtype}")
    allowed = _allowed(name, arg, label)
    if allowed is not None:
        return None if allowed[1](out, _baseline(name), bad) else f"allowed return failed its check ({allowed[0]})"
    return "returned (silent)"


def test_gpu_table_covers_every_public_wrapper():
    found = set()
    for m in pkgutil.iter_modules(gpu_track.__path__):
        mod = f"gpu_track.{m.name}"
        if mod in TOOLING:
            continue
        for n, v in vars(importlib.import_module(mod)).items():
            home = getattr(getattr(v, "fn", v), "__module__", None)     # a @triton.jit function: its Python fn
            if not n.startswith("_") and callable(v) and not inspect.ismodule(v) and home == mod:
                found.add(f"{mod}.{n}")
    tabled = {n.split("[")[0] for n in GPU_TABLE}
    assert found - tabled - set(SKIP) == set(), "public gpu_track callables with neither a GPU_TABLE nor a SKIP entry"
    assert (tabled | set(SKIP)) - found == set(), "GPU_TABLE / SKIP entries that name no public callable"
    assert not tabled & set(SKIP)


def test_baselines_run():
    for name in GPU_TABLE:
        assert _leaves(_baseline(name)), name


@pytest.mark.parametrize("name,arg,label", CASES, ids=[f"{n}-{a}-{m}" for n, a, m in CASES])
def test_bad_gpu_input_raises_value_error(name, arg, label):
    what = _outcome(name, arg, label)
    assert what is None, f"{name}({arg}={label}): {what}"


if __name__ == "__main__":   # the survey: every failing case, grouped by callable
    bad = [(c, w) for c in CASES if (w := _outcome(*c)) is not None]
    for (name, arg, label), what in bad:
        print(f"{name:50s} {arg:12s} {label:20s} {what}")
    print(f"{len(bad)} of {len(CASES)} cases fail")
