"""The two backends agree on every input: a property test over the swappable ops (``registry.SWAPPABLE_OPS``).

Hypothesis draws one call per example: small sizes with any of them 0 (every axis at once too), float16 / float32 /
float64 / integer operands (and torch bfloat16 tensors, which both refuse: bfloat16 is no numpy dtype), C-,
Fortran-ordered, strided or nested-list layouts, magnitudes from 1e-30 to 1e30 and one extreme entry, index sets
with -1 padding (and duplicates, which both refuse), sizes as Python ints, numpy ints and huge values. The call runs
under the numpy backend and under the Triton backend (the kernels under ``TRITON_INTERPRET=1`` on CPU). The property:

- the numpy backend refuses the input with a ValueError  ->  the Triton backend refuses it with the same message;
- the numpy backend returns                               ->  the Triton backend returns the same shapes and dtypes,
  the same numbers within the documented tolerance (max |triton - numpy| / max |numpy|: 1e-9 when the op computes
  in float64, 2e-4 in float32; ``contracts.float_dtype``) and, for top-k ops, a selection of the same scores.

``derandomize=True``: the same examples on every run; ``EXAMPLES`` per op keeps the interpreter's cost ~1 min.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
import gpu_track  # noqa: E402,F401  (before triton: sets TRITON_INTERPRET without a GPU)

pytest.importorskip("triton")

import hybrid_lab  # noqa: E402
from hybrid_lab.ops import block_sparse, fa_decode, lightning_indexer, registry, sparse_attention, ssm  # noqa: E402

EXAMPLES = 150
TOL = {np.dtype(np.float64): 1e-9, np.dtype(np.float32): 2e-4}
OPS = {"selective_scan": ssm.selective_scan, "selective_scan_step": ssm.selective_scan_step,
       "ssd_chunked": ssm.ssd_chunked, "sparse_attention": sparse_attention.sparse_attention,
       "lightning_indexer": lightning_indexer.lightning_indexer,
       "block_sparse_attention": block_sparse.block_sparse_attention, "fa_decode_topk": fa_decode.fa_decode_topk}


def test_every_swappable_op_is_drawn():
    assert set(OPS) == set(registry.SWAPPABLE_OPS)


# ------------------------------------------------------------------------------------------------ the draws
class Draw:
    """Arrays and sizes from one hypothesis example: one dtype, layout and magnitude per example."""

    def __init__(self, data):
        self.data = data
        seed = data.draw(st.integers(0, 2 ** 32 - 1), label="seed")
        self.rng = np.random.default_rng(seed)
        self.dtype = data.draw(st.sampled_from(["float64", "float32", "float16", "int64"]), label="dtype")
        if seed % 10 == 3:          # ~1 example in 10 (a drawn flag would come up far more often: bounds first)
            self.dtype = "bfloat16"
        self.layout = data.draw(st.sampled_from(["C", "F", "strided", "list"]), label="layout")
        self.scale = 10.0 ** data.draw(st.sampled_from([0, 0, 0, -30, 30, 8]), label="log10 magnitude")
        self.extreme = data.draw(st.sampled_from([None, None, 1e30, -1e30, 1e-30]), label="one extreme entry")
        self.all_zero = data.draw(st.integers(0, 9), label="all axes 0") == 0

    def size(self, lo=0, hi=3, label="size"):
        return 0 if self.all_zero and lo == 0 else self.data.draw(st.integers(lo, hi), label=label)

    def int_like(self, v):
        """A size as given by a caller: a Python int or a numpy integer."""
        types = [int, np.int64] + ([np.int32] if v < 2 ** 31 else [])
        return self.data.draw(st.sampled_from(types), label="size type")(v)

    def _lay(self, a):
        if self.layout == "F":
            return np.asfortranarray(a)
        if self.layout == "strided" and a.ndim:
            big = np.repeat(a, 2, axis=-1)                  # every other entry of a twice-as-wide array
            return big[..., ::2]
        if self.layout == "list" and a.size:        # an empty nested list has lost its shape
            return a.tolist()
        return a

    def floats(self, *shape, sign=0, extreme=True):
        """sign 0: any; +1: >= 0 (Δ); -1: <= 0 (A)."""
        a = self.rng.standard_normal(shape)
        if sign:
            a = sign * (np.abs(a) + 0.1)
        if self.dtype == "int64":
            a = np.round(a * 2)
        elif sign == 0:
            a = a * self.scale
        if extreme and self.extreme is not None and a.size and (sign == 0 or self.extreme * sign > 0):
            a.flat[self.data.draw(st.integers(0, a.size - 1), label="extreme at")] = self.extreme
        if self.dtype == "bfloat16":                # a torch tensor: numpy has no bfloat16
            return torch.from_numpy(a).to(torch.bfloat16)
        fits = self.dtype != "float16" or np.abs(a).max(initial=0) < 6e4     # else float32: no inf from the cast
        return self._lay(a.astype(self.dtype if fits else np.float32))

    def index_sets(self, lead, K, n, dup=False):
        """(*lead, K) distinct entries of [0, n) per row, -1 padded; ``dup``: one row repeats an entry."""
        out = -np.ones((*lead, K), np.int64)
        for row in np.ndindex(*lead):
            m = min(K, n)
            pick = self.rng.permutation(n)[: self.rng.integers(0, m + 1)] if n else np.zeros(0, int)
            out[row][: len(pick)] = pick
        if dup and K >= 2 and n >= 1 and out.size:
            out.reshape(-1, K)[0, :2] = 0
        return out


# ------------------------------------------------------------------------------------------------ one call per op
def draw_call(op, d: Draw):
    """(positional args) of one call of ``op``."""
    Bt, L, Dm, N = d.size(label="Bt"), d.size(label="L"), d.size(label="Dm"), d.size(label="N")
    if op in ("selective_scan", "selective_scan_step"):
        lead = (Bt, L) if op == "selective_scan" else (Bt,)
        args = [d.floats(*lead, Dm), d.floats(*lead, Dm, sign=1), d.floats(Dm, N, sign=-1), d.floats(*lead, N),
                d.floats(*lead, N), d.floats(Dm), d.floats(Bt, Dm, N)]
        return args + ([d.int_like(d.size(1, 8, "chunk"))] if op == "selective_scan" else [])
    if op == "ssd_chunked":
        H, P = d.size(label="H"), d.size(label="P")
        return [d.floats(Bt, L, H, P), d.floats(Bt, L, H, sign=1), d.floats(H, sign=-1), d.floats(Bt, L, N),
                d.floats(Bt, L, N), d.floats(H), d.floats(Bt, H, P, N), d.int_like(d.size(1, 8, "chunk"))]
    B, T, S = d.size(label="B"), d.size(label="T"), d.size(1, 9, "S")
    Hkv, G = d.size(1, 2, "Hkv"), d.size(1, 2, "G")
    dk, dv = (d.data.draw(st.sampled_from([1, 2, 4, 5, 0]), label=n) for n in ("d", "dv"))   # 0: both refuse
    q, k, v = d.floats(B, T, Hkv * G, dk), d.floats(B, S, Hkv, dk), d.floats(B, S, Hkv, dv)
    sink = d.floats(Hkv * G) if d.data.draw(st.booleans(), label="sink") else None
    scale = d.data.draw(st.sampled_from([None, 0.5, 3.0]), label="scale")
    dup = d.data.draw(st.integers(0, 5), label="duplicate") == 0
    if op == "sparse_attention":
        return [q, k, v, d.index_sets((B, T, Hkv), d.size(label="K"), S, dup), scale, sink]
    if op == "block_sparse_attention":
        bs = d.int_like(d.data.draw(st.sampled_from([1, 2, 4, 64, 2 ** 62]), label="block_size"))
        nb = -(-S // int(bs))
        given = T <= S and d.data.draw(st.booleans(), label="q_pos given")
        return [q, k, v, d.index_sets((B, T, Hkv), d.size(label="nb"), nb, dup), bs, scale,
                np.sort(d.rng.integers(0, S, T)) if given else None]
    if op == "fa_decode_topk":
        topk = d.data.draw(st.sampled_from([1, 3, 8, 2 ** 62]), label="topk")
        window = d.data.draw(st.sampled_from([1, 2, 5, 2 ** 62]), label="window")
        return [d.floats(B, Hkv * G, dk), k, v, d.int_like(topk), d.int_like(window), scale, sink]
    if op == "lightning_indexer":
        Hi = d.size(1, 3, "Hi")
        topk = d.data.draw(st.sampled_from([1, 3, 8, 2 ** 62]), label="topk")
        return [d.floats(B, T, Hi, dk), d.floats(B, T, Hi), d.floats(B, S, dk), d.int_like(topk),
                None if T > S else d.rng.integers(0, S + 3, T)]
    raise KeyError(op)


def _leaves(out):
    return list(out) if isinstance(out, tuple) else [out]


def _run(op, args, backend):
    with hybrid_lab.use_backend(backend):
        try:
            return OPS[op](*args), None
        except ValueError as e:
            return None, str(e)


def _selection_scores(op, args, idx):
    """The score each selected position has under the numpy backend (-inf for a -1 slot), per row."""
    if op == "lightning_indexer":
        scores = _run(op, args, "numpy")[0][0]
        return np.where(idx >= 0, np.take_along_axis(scores, np.maximum(idx, 0), -1), -np.inf)
    q, k, v, _, window, scale, sink = args
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    out = []
    for b in range(q.shape[0]):
        _, score = fa_decode.fa_attention(q[b][None], k[b], v[b], [k.shape[1] - 1], scale,
                                          None if sink is None else np.asarray(sink, np.float64))
        out.append(np.where(idx[b] >= 0, np.take_along_axis(score[0], np.maximum(idx[b], 0), -1), -np.inf))
    return np.stack(out) if out else np.zeros(idx.shape)


def check_agree(op, args):
    ref, ref_err = _run(op, args, "numpy")
    got, got_err = _run(op, args, "triton")
    assert (ref_err is None) == (got_err is None), f"numpy: {ref_err or 'returns'}; triton: {got_err or 'returns'}"
    if ref_err is not None:
        assert got_err == ref_err
        return
    for r, g in zip(_leaves(ref), _leaves(got)):
        assert r.shape == g.shape and r.dtype == g.dtype, (r.shape, r.dtype, g.shape, g.dtype)
        if r.dtype.kind == "i":
            if np.array_equal(r, g):
                continue
            sr, sg = _selection_scores(op, args, r), _selection_scores(op, args, g)
            tol = TOL[np.dtype(np.float32)]
            assert np.allclose(np.sort(sr, -1), np.sort(sg, -1), rtol=tol, atol=tol * np.abs(sr[np.isfinite(sr)]).max(
                initial=1e-300)), f"{op}: the selections differ in score\nnumpy {r}\ntriton {g}"
            continue
        fin = np.isfinite(r)         # float32 products past 3.4e38 overflow (IEEE): both backends show it alike
        assert np.array_equal(fin, np.isfinite(g)) and np.array_equal(r[~fin], g[~fin], equal_nan=True), \
            f"{op}: NaN/inf differ between the backends"
        if fin.any():
            err = np.abs(g[fin] - r[fin]).max() / max(np.abs(r[fin]).max(), np.finfo(r.dtype).tiny)
            assert err <= TOL[r.dtype], f"{op}: relative error {err:.3g} > {TOL[r.dtype]:g}"


@pytest.mark.parametrize("op", sorted(OPS))
def test_triton_agrees_with_numpy(op):
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    @given(st.data())
    def agree(data):
        check_agree(op, draw_call(op, Draw(data)))

    agree()
