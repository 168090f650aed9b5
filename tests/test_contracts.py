"""One contract per swappable op, run once by the registry before either backend.

Table-driven: for every op in ``SWAPPABLE_OPS`` a valid call passes under both backends with the same result, and
each bad variant raises a ``ValueError`` naming the argument under the numpy backend AND the triton backend (Triton's
interpreter on a CPU), having run the contract exactly once and reached no kernel. Also: each contract is defined once
in the whole tree, exactly one public function dispatches each op, and the Triton side receives the validated
arguments (a recorder stands in for ``gpu_track.numpy_api``).
"""
from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil

import numpy as np
import pytest

pytest.importorskip("torch")
import gpu_track  # noqa: E402,F401  (first: it sets TRITON_INTERPRET before triton is imported)

pytest.importorskip("triton")

import gpu_track.numpy_api as numpy_api  # noqa: E402
import hybrid_lab.ops  # noqa: E402
from hybrid_lab.course.pipeline import repo_root  # noqa: E402
from hybrid_lab.ops import contracts, registry  # noqa: E402
from hybrid_lab.ops.block_sparse import block_sparse_attention  # noqa: E402
from hybrid_lab.ops.fa_decode import fa_decode_topk  # noqa: E402
from hybrid_lab.ops.lightning_indexer import lightning_indexer  # noqa: E402
from hybrid_lab.ops.registry import SWAPPABLE_OPS, use_backend  # noqa: E402
from hybrid_lab.ops.sparse_attention import sparse_attention  # noqa: E402
from hybrid_lab.ops.ssm import selective_scan, selective_scan_step, ssd_chunked  # noqa: E402
from hybrid_lab.widgets.backend_swap import count_triton_calls  # noqa: E402

OPS = {"selective_scan": selective_scan, "selective_scan_step": selective_scan_step, "ssd_chunked": ssd_chunked,
       "sparse_attention": sparse_attention, "lightning_indexer": lightning_indexer,
       "block_sparse_attention": block_sparse_attention, "fa_decode_topk": fa_decode_topk}


def valid_args(op: str) -> dict:
    """A small valid call of ``op`` (keyword arguments), fresh arrays from a fixed seed."""
    r = np.random.default_rng(12)
    n = r.standard_normal
    if op == "selective_scan":
        return dict(x=n((1, 5, 3)), dt=np.abs(n((1, 5, 3))), A=-np.abs(n((3, 2))), B=n((1, 5, 2)), C=n((1, 5, 2)),
                    D=n(3), h0=n((1, 3, 2)), chunk_size=4)
    if op == "selective_scan_step":
        return dict(x=n((2, 3)), dt=np.abs(n((2, 3))), A=-np.abs(n((3, 2))), B=n((2, 2)), C=n((2, 2)), D=n(3),
                    h=n((2, 3, 2)))
    if op == "ssd_chunked":
        return dict(x=n((1, 5, 2, 4)), dt=np.abs(n((1, 5, 2))), A=-np.abs(n(2)), B=n((1, 5, 3)), C=n((1, 5, 3)),
                    D=n(2), h0=n((1, 2, 4, 3)), chunk_size=4)
    if op == "sparse_attention":
        return dict(q=n((1, 2, 2, 8)), k=n((1, 9, 1, 8)), v=n((1, 9, 1, 8)),
                    idx=np.array([[[[0, 3, -1]], [[1, 2, 8]]]]), scale=0.3, sink=n(2))
    if op == "lightning_indexer":
        return dict(q=n((1, 2, 2, 4)), w=n((1, 2, 2)), k=n((1, 6, 4)), topk=3, q_pos=np.array([2, 5]))
    if op == "block_sparse_attention":
        return dict(q=n((1, 2, 2, 8)), k=n((1, 9, 1, 8)), v=n((1, 9, 1, 8)), block_idx=np.array([[[[0, -1]], [[1, 2]]]]),
                    block_size=4, scale=0.3, q_pos=np.array([5, 8]))
    if op == "fa_decode_topk":
        return dict(q=n((1, 2, 8)), k=n((1, 9, 1, 8)), v=n((1, 9, 1, 8)), topk=2, window=3, scale=0.3, sink=n(2))
    raise KeyError(op)


def poke(a, index, value):
    a = np.array(a, dtype=np.float64)
    a[index] = value
    return a


# (op, argument the message must name, change to the valid call): each row is one bad input
BAD = [
    # Mamba-1 prefill: A > 0 (the chunked path used to clamp silently), inf/NaN anywhere, shapes, chunk size
    ("selective_scan", "A", lambda a: dict(A=-a["A"])),
    ("selective_scan", "A", lambda a: dict(A=poke(a["A"], (0, 0), np.nan))),
    ("selective_scan", "x", lambda a: dict(x=poke(a["x"], (0, 4, 0), np.inf))),
    ("selective_scan", "x", lambda a: dict(x=a["x"][0])),
    ("selective_scan", "x", lambda a: dict(x=a["x"] > 0)),
    ("selective_scan", "dt", lambda a: dict(dt=-a["dt"])),
    ("selective_scan", "dt", lambda a: dict(dt=poke(a["dt"], (0, 2, 1), np.nan))),
    ("selective_scan", "B", lambda a: dict(B=a["B"][:, :4])),
    ("selective_scan", "B", lambda a: dict(B=poke(a["B"], (0, 1, 1), -np.inf))),
    ("selective_scan", "C", lambda a: dict(C=poke(a["C"], (0, 3, 0), np.inf))),
    ("selective_scan", "D", lambda a: dict(D=np.ones(2))),
    ("selective_scan", "h0", lambda a: dict(h0=np.zeros((1, 3, 3)))),
    ("selective_scan", "chunk_size", lambda a: dict(chunk_size=0)),
    ("selective_scan", "chunk_size", lambda a: dict(chunk_size=2.5)),
    # Mamba-1 decode step
    ("selective_scan_step", "A", lambda a: dict(A=np.abs(a["A"]))),
    ("selective_scan_step", "x", lambda a: dict(x=poke(a["x"], (1, 2), np.inf))),
    ("selective_scan_step", "dt", lambda a: dict(dt=-a["dt"])),
    ("selective_scan_step", "h", lambda a: dict(h=None)),
    ("selective_scan_step", "h", lambda a: dict(h=np.zeros((2, 3)))),
    ("selective_scan_step", "C", lambda a: dict(C=np.zeros((2, 3)))),
    # Mamba-2 SSD
    ("ssd_chunked", "A", lambda a: dict(A=np.abs(a["A"]) + 0.1)),
    ("ssd_chunked", "x", lambda a: dict(x=poke(a["x"], (0, 4, 1, 2), np.inf))),
    ("ssd_chunked", "dt", lambda a: dict(dt=poke(a["dt"], (0, 0, 0), np.nan))),
    ("ssd_chunked", "B", lambda a: dict(B=a["B"][:, :4])),
    ("ssd_chunked", "C", lambda a: dict(C=a["C"][:, :, :2])),
    ("ssd_chunked", "h0", lambda a: dict(h0=np.zeros((1, 2, 4, 2)))),
    ("ssd_chunked", "chunk_size", lambda a: dict(chunk_size=-1)),
    # token-level sparse attention
    ("sparse_attention", "idx", lambda a: dict(idx=np.array([[[[0, 3, -1]], [[1, 2, 9]]]]))),
    ("sparse_attention", "idx", lambda a: dict(idx=np.array([[[[0, 3, -2]], [[1, 2, 8]]]]))),
    ("sparse_attention", "idx", lambda a: dict(idx=np.array([[[[0, 3, 3]], [[1, 2, 8]]]]))),
    ("sparse_attention", "idx", lambda a: dict(idx=a["idx"].astype(float))),
    ("sparse_attention", "idx", lambda a: dict(idx=a["idx"][:, :1])),
    ("sparse_attention", "q", lambda a: dict(q=poke(a["q"], (0, 1, 1, 7), np.nan))),
    ("sparse_attention", "k", lambda a: dict(k=poke(a["k"], (0, 8, 0, 0), np.nan))),
    ("sparse_attention", "v", lambda a: dict(v=poke(a["v"], (0, 2, 0, 3), np.inf))),
    ("sparse_attention", "k", lambda a: dict(k=np.zeros((1, 9, 3, 8)), v=np.zeros((1, 9, 3, 8)))),
    ("sparse_attention", "scale", lambda a: dict(scale=np.nan)),
    ("sparse_attention", "scale", lambda a: dict(scale=np.inf)),
    ("sparse_attention", "scale", lambda a: dict(scale=0.0)),
    ("sparse_attention", "sink", lambda a: dict(sink=np.array([0.5, np.nan]))),
    ("sparse_attention", "sink", lambda a: dict(sink=np.array([np.inf, 0.0]))),
    ("sparse_attention", "sink", lambda a: dict(sink=np.zeros(3))),
    # lightning indexer
    ("lightning_indexer", "topk", lambda a: dict(topk=0)),
    ("lightning_indexer", "topk", lambda a: dict(topk=2.0)),
    ("lightning_indexer", "q", lambda a: dict(q=poke(a["q"], (0, 0, 1, 3), np.nan))),
    ("lightning_indexer", "w", lambda a: dict(w=poke(a["w"], (0, 1, 0), np.inf))),
    ("lightning_indexer", "k", lambda a: dict(k=np.zeros((1, 6, 5)))),
    ("lightning_indexer", "q_pos", lambda a: dict(q_pos=np.array([2.0, 5.0]))),
    ("lightning_indexer", "q_pos", lambda a: dict(q_pos=np.array([-1, 5]))),
    ("lightning_indexer", "q_pos", lambda a: dict(q_pos=np.array([5]))),
    # block-sparse attention
    ("block_sparse_attention", "block_size", lambda a: dict(block_size=0)),
    ("block_sparse_attention", "block_idx", lambda a: dict(block_idx=np.array([[[[0, -1]], [[1, 3]]]]))),
    ("block_sparse_attention", "block_idx", lambda a: dict(block_idx=np.array([[[[0, 0]], [[1, 2]]]]))),
    ("block_sparse_attention", "q", lambda a: dict(q=poke(a["q"], (0, 0, 0, 0), np.inf))),
    ("block_sparse_attention", "k", lambda a: dict(k=poke(a["k"], (0, 1, 0, 1), np.nan))),
    ("block_sparse_attention", "v", lambda a: dict(v=poke(a["v"], (0, 4, 0, 2), np.nan))),
    ("block_sparse_attention", "scale", lambda a: dict(scale=np.nan)),
    ("block_sparse_attention", "q_pos", lambda a: dict(q_pos=np.array([5, 9]))),
    ("block_sparse_attention", "q_pos", lambda a: dict(q_pos=np.array([5.0, 8.0]))),
    # HySparse2 FA decode
    ("fa_decode_topk", "topk", lambda a: dict(topk=0)),
    ("fa_decode_topk", "window", lambda a: dict(window=-3)),
    ("fa_decode_topk", "k", lambda a: dict(k=np.zeros((1, 0, 1, 8)), v=np.zeros((1, 0, 1, 8)))),
    ("fa_decode_topk", "k", lambda a: dict(k=np.zeros((1, 9, 1, 5)))),
    ("fa_decode_topk", "q", lambda a: dict(q=poke(a["q"], (0, 1, 2), np.nan))),
    ("fa_decode_topk", "v", lambda a: dict(v=poke(a["v"], (0, 8, 0, 0), np.inf))),
    ("fa_decode_topk", "sink", lambda a: dict(sink=np.array([np.nan, 0.0]))),
    ("fa_decode_topk", "sink", lambda a: dict(sink=np.zeros(1))),
    ("fa_decode_topk", "scale", lambda a: dict(scale=-1.0)),
]


@pytest.fixture
def contract_calls(monkeypatch):
    """Counts calls of every ``contracts.check_<op>`` (the registry looks the contract up on each call)."""
    counts = {op: 0 for op in SWAPPABLE_OPS}
    for op in SWAPPABLE_OPS:
        fn = getattr(contracts, f"check_{op}")

        def counted(*a, _op=op, _fn=fn, **kw):
            counts[_op] += 1
            return _fn(*a, **kw)

        monkeypatch.setattr(contracts, f"check_{op}", counted)
    return counts


def test_every_op_has_one_contract_and_a_table_row():
    assert set(OPS) == set(SWAPPABLE_OPS) == {op for op, _, _ in BAD}
    for op, fn in OPS.items():
        assert fn.check is getattr(contracts, f"check_{op}") and fn.op_name == op


@pytest.mark.parametrize("op", SWAPPABLE_OPS)
def test_valid_call_same_result_on_both_backends(op, contract_calls):
    args = valid_args(op)
    with count_triton_calls() as kernel_calls:
        ref = OPS[op](**args)
        assert contract_calls[op] == 1 and kernel_calls[op] == 0
        with use_backend("triton"):
            got = OPS[op](**args)
        assert contract_calls[op] == 2 and kernel_calls[op] == 1      # checked once more, then the kernel
    ref, got = (ref if isinstance(ref, tuple) else (ref,)), (got if isinstance(got, tuple) else (got,))
    assert len(ref) == len(got) >= 1
    for a, b in zip(ref, got):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-10)
    # numpy_impl: validate + numpy, whatever the backend
    with use_backend("triton"):
        again = OPS[op].numpy_impl(**args)
    for a, b in zip(ref, again if isinstance(again, tuple) else (again,)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("backend", ["numpy", "triton"])
@pytest.mark.parametrize("op, name, change", BAD, ids=[f"{op}-{name}-{i}" for i, (op, name, _) in enumerate(BAD)])
def test_bad_input_is_refused_before_either_backend(op, name, change, backend, contract_calls):
    args = valid_args(op)
    args.update(change(args))
    with count_triton_calls() as kernel_calls, use_backend(backend):
        with pytest.raises(ValueError, match=rf"\b{name}\b"):
            OPS[op](**args)
    assert contract_calls[op] == 1 and kernel_calls[op] == 0


def test_contract_returns_validated_arguments_in_signature_order():
    a = valid_args("block_sparse_attention")
    out = contracts.check_block_sparse_attention(a["q"], a["k"], a["v"], a["block_idx"].astype(np.int32), 4)
    assert len(out) == 7 and out[3].dtype == np.int64 and out[4] == 4 and out[5] is None
    np.testing.assert_array_equal(out[6], [7, 8])                   # default q_pos: the last T of S positions
    a = valid_args("lightning_indexer")
    assert contracts.check_lightning_indexer(a["q"], a["w"], a["k"], 3, [2, 40])[4].tolist() == [2, 40]


def test_empty_index_list_gives_zeros_on_both_backends():
    a = valid_args("sparse_attention")
    a["idx"] = np.zeros((1, 2, 1, 0), np.int64)                     # K = 0: nothing to attend to
    ref = sparse_attention(**a)
    with use_backend("triton"):
        got = sparse_attention(**a)
    assert ref.shape == got.shape == (1, 2, 2, 8)
    assert (ref == 0).all() and (got == 0).all()
    a = valid_args("block_sparse_attention")
    a["block_idx"] = np.full((1, 2, 1, 2), -1)                      # only padding: 0 as well
    assert (block_sparse_attention(**a) == 0).all()
    with use_backend("triton"):
        assert (block_sparse_attention(**a) == 0).all()


# ------------------------------------------------------- one contract, one dispatcher, validated arguments only
def dispatched_ops():
    """{op name: [public functions declared with @swappable(op)]} over the modules of hybrid_lab.ops."""
    out = {op: [] for op in SWAPPABLE_OPS}
    for info in pkgutil.iter_modules(hybrid_lab.ops.__path__, "hybrid_lab.ops."):
        mod = importlib.import_module(info.name)
        for name, fn in vars(mod).items():
            if not name.startswith("_") and callable(fn) and getattr(fn, "__module__", None) == mod.__name__ \
                    and hasattr(fn, "op_name"):
                out.setdefault(fn.op_name, []).append(fn)
    return out



def test_contract_is_defined_once_in_the_whole_tree():
    """No second copy of a contract (the old numpy_api re-validation) anywhere in hybrid_lab/ or gpu_track/."""
    names = {f"check_{op}" for op in SWAPPABLE_OPS}
    where = {}
    for pkg in ("hybrid_lab", "gpu_track"):
        for p in sorted((repo_root() / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(p.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names:
                    where.setdefault(node.name, []).append(f"{p.relative_to(repo_root())}:{node.lineno}")
    twice = {k: v for k, v in where.items() if len(v) != 1 or not v[0].startswith("hybrid_lab/ops/contracts.py")}
    assert not twice, f"contracts defined outside hybrid_lab/ops/contracts.py or more than once: {twice}"


@pytest.mark.parametrize("op", SWAPPABLE_OPS)
def test_one_dispatched_function_with_the_contract_signature(op):
    fns = dispatched_ops().get(op, [])
    assert len(fns) == 1, f"{op}: {len(fns)} public functions declared @swappable({op!r}): {fns}"
    fn = fns[0]
    check = getattr(contracts, f"check_{op}")
    assert fn.check is check
    op_sig, check_sig = inspect.signature(fn), inspect.signature(check)
    assert [(p.name, p.default) for p in op_sig.parameters.values()] == \
        [(p.name, p.default) for p in check_sig.parameters.values()], f"{op}: op {op_sig} vs contract {check_sig}"


@pytest.mark.parametrize("op", SWAPPABLE_OPS)
@pytest.mark.parametrize("backend", ["numpy", "triton"])
def test_contract_runs_once_and_the_backend_gets_validated_arguments(op, backend, monkeypatch):
    """Count the contract's calls; on the Triton side a recorder stands in for gpu_track.numpy_api.<op>."""
    check = getattr(contracts, f"check_{op}")
    calls, got = [], []

    def counted(*args, **kwargs):
        calls.append(1)
        return check(*args, **kwargs)

    monkeypatch.setattr(contracts, f"check_{op}", counted)
    if backend == "triton":
        monkeypatch.setattr(numpy_api, op, lambda *args: got.append(args) or "recorded")
    kw = valid_args(op)
    with use_backend(backend):
        result = OPS[op](**kw)
    assert len(calls) == 1, f"{op} under {backend}: the contract ran {len(calls)} times"
    if backend == "triton":
        assert result == "recorded" and len(got) == 1
        expected = check(**kw)
        assert len(got[0]) == len(expected)
        for a, b in zip(got[0], expected):
            if isinstance(b, np.ndarray):
                assert isinstance(a, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
            else:
                assert a == b
    else:
        assert result is not None


def test_registry_looks_up_the_triton_module_by_name():
    """hybrid_lab never imports gpu_track statically (tests/test_layers.py); the registry finds it by name."""
    assert registry.triton_module() is numpy_api
