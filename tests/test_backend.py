import os
import subprocess
import sys

import numpy as np
import pytest

import hybrid_lab
from hybrid_lab.ops import registry as backend
from hybrid_lab.ops.ssm import selective_scan


def test_default_and_context_manager():
    assert hybrid_lab.get_backend() == "numpy"
    with hybrid_lab.use_backend("triton"):
        assert hybrid_lab.get_backend() == "triton"
    assert hybrid_lab.get_backend() == "numpy"
    with pytest.raises(ValueError, match="backend must be one of"):
        hybrid_lab.use_backend("cuda")


def test_dispatch_routes_to_triton(monkeypatch):
    calls = []
    monkeypatch.setattr(backend, "_triton_impl", lambda op: (lambda *a, **k: calls.append(op) or "kernel"))
    with hybrid_lab.use_backend("triton"):
        assert selective_scan(1, 2, 3, 4, 5) == "kernel"
    assert calls == ["selective_scan"]
    x = np.zeros((1, 2, 3))
    y, _ = selective_scan(x, x, -np.ones((3, 2)), np.zeros((1, 2, 2)), np.zeros((1, 2, 2)))
    assert y.shape == (1, 2, 3)


def test_env_var_selects_backend():
    env = dict(os.environ, HYBRID_LAB_BACKEND="triton")
    out = subprocess.run([sys.executable, "-c", "import hybrid_lab; print(hybrid_lab.get_backend())"],
                         env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "triton"


def test_unknown_op():
    with pytest.raises(ValueError, match="op must be one of"):
        backend.swappable("not_an_op")
