"""Shared test setup. Nothing here may leak into the environment: nbval's kernels inherit it (one exception: on a
machine without bubblewrap the grader runs unsandboxed, ``HYBRID_LAB_GRADE_UNSAFE=1``, and the sandbox tests skip)."""
import os
import shutil
import subprocess

import matplotlib

matplotlib.use("Agg")  # this process only; notebook kernels keep the inline backend

import numpy as np  # noqa: E402
import pytest  # noqa: E402

# variables that change what a later test's kernel computes (a backend, the interpreter): a test that leaves one
# changed fails, and the value is put back, so it cannot turn every later notebook into another run. One addition
# is the package's own: importing gpu_track without a GPU sets TRITON_INTERPRET=1 for the rest of the process.
_GUARDED = ("HYBRID_LAB_", "TRITON_")


def _guarded_env() -> dict:
    return {k: v for k, v in os.environ.items() if k.startswith(_GUARDED)}


@pytest.fixture(autouse=True)
def _no_env_leak():
    before = _guarded_env()
    yield
    after = _guarded_env()
    if before.get("TRITON_INTERPRET") is None and after.get("TRITON_INTERPRET") == "1":
        before["TRITON_INTERPRET"] = "1"                           # gpu_track's import, not the test's doing
    if after != before:
        for k in set(after) - set(before):
            del os.environ[k]
        os.environ.update(before)
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        pytest.fail(f"the test left environment variables changed: {changed} (use monkeypatch.setenv / delenv)")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def _ensure_bubblewrap() -> None:
    """The grader runs student code inside bubblewrap: in CI (``CI=true``, as root) install Debian's package as the
    browser test installs chromium; elsewhere, without it, grade unsandboxed in the tests and say so."""
    if shutil.which("bwrap") is None and os.environ.get("CI") == "true" and hasattr(os, "geteuid") \
            and os.geteuid() == 0 and shutil.which("apt-get"):
        for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "bubblewrap"]):
            subprocess.run(cmd, capture_output=True, timeout=600, check=False)
    from hybrid_lab.core import sandbox

    if not sandbox.available()[0]:
        os.environ["HYBRID_LAB_GRADE_UNSAFE"] = "1"


def pytest_configure(config):
    _ensure_bubblewrap()


def pytest_report_header(config):
    from hybrid_lab.core import sandbox

    ok, why = sandbox.available()
    return f"grading sandbox: {'bubblewrap at ' + why if ok else 'none (' + why + '): sandbox tests skip'}"
