import os
import subprocess
import sys

import types

import numpy as np
import pytest

import hybrid_lab
from hybrid_lab.ops import contracts
from hybrid_lab.ops import registry as backend
from hybrid_lab.ops.ssm import selective_scan


def test_default_and_context_manager():
    assert hybrid_lab.get_backend() == "numpy"
    with hybrid_lab.use_backend("triton"):
        assert hybrid_lab.get_backend() == "triton"
    assert hybrid_lab.get_backend() == "numpy"
    with pytest.raises(ValueError, match="backend must be one of"):
        hybrid_lab.use_backend("cuda")


def test_dispatch_validates_then_routes_to_triton(monkeypatch):
    calls = []
    fake = types.SimpleNamespace(selective_scan=lambda *a: calls.append(a) or "kernel")
    monkeypatch.setattr(backend, "triton_module", lambda: fake)
    x = np.zeros((1, 2, 3))
    A, B = -np.ones((3, 2)), np.zeros((1, 2, 2))
    with hybrid_lab.use_backend("triton"):
        assert selective_scan(x, x, A, B, B) == "kernel"
        with pytest.raises(ValueError, match="A must be <= 0"):   # the contract runs before the backend
            selective_scan(x, x, -A, B, B)
    assert len(calls) == 1
    assert len(calls[0]) == 8 and calls[0][7] == 64                # validated arguments, in signature order
    y, _ = selective_scan(x, x, A, B, B)
    assert y.shape == (1, 2, 3) and len(calls) == 1


def test_op_attributes():
    assert selective_scan.op_name == "selective_scan"
    assert selective_scan.check is contracts.check_selective_scan
    x = np.zeros((1, 2, 3))
    with pytest.raises(ValueError, match="chunk_size"):
        selective_scan.numpy_impl(x, x, -np.ones((3, 2)), np.zeros((1, 2, 2)), np.zeros((1, 2, 2)), chunk_size=0)


def test_env_var_selects_backend():
    env = dict(os.environ, HYBRID_LAB_BACKEND="triton")
    out = subprocess.run([sys.executable, "-c", "import hybrid_lab; print(hybrid_lab.get_backend())"],
                         env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "triton"


def test_unknown_op():
    with pytest.raises(ValueError, match="op must be one of"):
        backend.swappable("not_an_op")
