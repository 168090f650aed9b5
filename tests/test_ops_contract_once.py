"""One contract per swappable op, run once, before either backend.

For every op in ``SWAPPABLE_OPS``: ``hybrid_lab.ops.contracts.check_<op>`` exists, has the op's signature, and is
the only function of that name in ``hybrid_lab/`` and ``gpu_track/``; exactly one public function dispatches the
op; a bad argument gives the same ValueError under the numpy and the Triton backend (the check runs before the
backend is chosen, so the Triton backend never sees it); a good call runs the check exactly once and hands the
backend the validated arguments (the Triton side is replaced by a recorder here: its kernels are tested in
test_gpu_kernels.py).
"""
import ast
import importlib
import inspect
import pkgutil

import numpy as np
import pytest

import gpu_track.numpy_api as numpy_api
import hybrid_lab.ops
from hybrid_lab.course.pipeline import repo_root
from hybrid_lab.ops import contracts, registry
from hybrid_lab.ops.registry import SWAPPABLE_OPS, use_backend

ROOT = repo_root()


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


OPS = dispatched_ops()


# ------------------------------------------------------------------ one valid call per op (small sizes), seed 0
def _valid(op):
    r = np.random.default_rng(0)
    N = r.standard_normal
    if op in ("selective_scan", "selective_scan_step"):
        lead = (1, 5) if op == "selective_scan" else (1,)
        kw = dict(x=N((*lead, 3)), dt=r.uniform(0.1, 1.0, (*lead, 3)), A=-r.uniform(0.5, 2.0, (3, 2)),
                  B=N((*lead, 2)), C=N((*lead, 2)), D=N(3))
        return dict(kw, h0=N((1, 3, 2)), chunk_size=2) if op == "selective_scan" else dict(kw, h=N((1, 3, 2)))
    if op == "ssd_chunked":
        return dict(x=N((1, 5, 2, 2)), dt=r.uniform(0.1, 1.0, (1, 5, 2)), A=-r.uniform(0.5, 2.0, 2), B=N((1, 5, 3)),
                    C=N((1, 5, 3)), D=N(2), h0=N((1, 2, 2, 3)), chunk_size=2)
    if op == "sparse_attention":
        return dict(q=N((1, 2, 2, 4)), k=N((1, 5, 1, 4)), v=N((1, 5, 1, 3)),
                    idx=np.array([[[[0, 2, -1]], [[1, 3, 4]]]]), scale=0.5, sink=np.array([0.3, -0.2]))
    if op == "lightning_indexer":
        return dict(q=N((1, 2, 2, 4)), w=N((1, 2, 2)), k=N((1, 5, 4)), topk=3, q_pos=np.array([3, 4]))
    if op == "block_sparse_attention":
        return dict(q=N((1, 2, 2, 4)), k=N((1, 32, 1, 4)), v=N((1, 32, 1, 3)),
                    block_idx=np.array([[[[0, 2, -1]], [[0, 3, 1]]]]), block_size=8, scale=0.5,
                    q_pos=np.array([20, 31]))
    if op == "fa_decode_topk":
        return dict(q=N((1, 2, 4)), k=N((1, 6, 1, 4)), v=N((1, 6, 1, 3)), topk=2, window=2, scale=0.5,
                    sink=np.array([0.3, -0.2]))
    raise KeyError(f"no valid call for the swappable op {op!r}: add one to tests/test_ops_contract_once.py")


def _bad_inputs(op):
    """(label, kwargs) pairs the contract must refuse: NaN, a wrong rank, a string dtype in the first array, and a
    non-positive integer size or an out-of-range index where the op has one."""
    kw = _valid(op)
    first = next(iter(kw))
    nan = kw[first].copy()
    nan.flat[0] = np.nan
    out = [("nan", {**kw, first: nan}), ("extra_axis", {**kw, first: kw[first][None]}),
           ("dtype_str", {**kw, first: kw[first].astype(str)})]
    for size in ("chunk_size", "topk", "block_size", "window"):
        if size in kw:
            out.append((f"{size}=0", {**kw, size: 0}))
    for name, hi in (("idx", 5), ("block_idx", 4)):
        if name in kw:
            bad = kw[name].copy()
            bad.flat[0] = hi
            out.append((f"{name}=size", {**kw, name: bad}))
    if "A" in kw:
        out.append(("A>0", {**kw, "A": -kw["A"]}))
    return out


CASES = [(op, label, kw) for op in SWAPPABLE_OPS for label, kw in _bad_inputs(op)]


# ---------------------------------------------------------------------------------------------------- tests
def test_every_swappable_op_has_one_public_contract():
    missing = [op for op in SWAPPABLE_OPS if not callable(getattr(contracts, f"check_{op}", None))]
    assert not missing, f"hybrid_lab.ops.contracts lacks check_<op> for {missing}"
    assert all(f"check_{op}" in contracts.__all__ for op in SWAPPABLE_OPS)


def test_contract_is_defined_once_in_the_whole_tree():
    """No second copy of a contract (the old numpy_api re-validation) anywhere in hybrid_lab/ or gpu_track/."""
    names = {f"check_{op}" for op in SWAPPABLE_OPS}
    where = {}
    for pkg in ("hybrid_lab", "gpu_track"):
        for p in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(p.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names:
                    where.setdefault(node.name, []).append(f"{p.relative_to(ROOT)}:{node.lineno}")
    twice = {k: v for k, v in where.items() if len(v) != 1 or not v[0].startswith("hybrid_lab/ops/contracts.py")}
    assert not twice, f"contracts defined outside hybrid_lab/ops/contracts.py or more than once: {twice}"


@pytest.mark.parametrize("op", SWAPPABLE_OPS)
def test_one_dispatched_function_with_the_contract_signature(op):
    fns = OPS.get(op, [])
    assert len(fns) == 1, f"{op}: {len(fns)} public functions declared @swappable({op!r}): {fns}"
    fn = fns[0]
    check = getattr(contracts, f"check_{op}")
    assert fn.check is check
    op_sig, check_sig = inspect.signature(fn), inspect.signature(check)
    assert [(p.name, p.default) for p in op_sig.parameters.values()] == \
        [(p.name, p.default) for p in check_sig.parameters.values()], f"{op}: op {op_sig} vs contract {check_sig}"


@pytest.mark.parametrize("op", SWAPPABLE_OPS)
def test_valid_call_passes_its_contract(op):
    out = getattr(contracts, f"check_{op}")(**_valid(op))
    assert isinstance(out, tuple) and len(out) == len(inspect.signature(getattr(contracts, f"check_{op}")).parameters)


@pytest.mark.parametrize("op, label, kwargs", CASES, ids=[f"{op}-{label}" for op, label, _ in CASES])
def test_same_value_error_under_both_backends(op, label, kwargs):
    fn = OPS[op][0]
    messages = {}
    for backend in ("numpy", "triton"):
        with use_backend(backend), pytest.raises(ValueError) as e:
            fn(**kwargs)
        messages[backend] = str(e.value)
    with pytest.raises(ValueError) as e:
        getattr(contracts, f"check_{op}")(**kwargs)
    assert messages["numpy"] == messages["triton"] == str(e.value)


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
    kw = _valid(op)
    with use_backend(backend):
        result = OPS[op][0](**kw)
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
