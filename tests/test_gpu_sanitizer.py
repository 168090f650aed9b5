"""Memory safety: every gpu_track kernel, with every config the benchmark may pick, at ragged shapes and
at the large Bt·H where the old two-pass SSD faulted, run natively under ``compute-sanitizer --tool memcheck``.

A Triton kernel does not bounds-check, and an out-of-bounds access faults only when nothing is mapped beyond it:
at other shapes it silently reads or corrupts memory. The kernel tests never reach a large Bt·H, so this test
runs ``tests/sanitizer_cases.py`` (the kernels at those shapes) in a subprocess under the sanitizer and asserts its
report is clean. Needs a CUDA GPU and compute-sanitizer on PATH (skipped otherwise); ~2-4 minutes per group on an
H200 (the groups are independent processes: they can run side by side).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SANITIZER = shutil.which("compute-sanitizer")
needs = pytest.mark.skipif(not (torch.cuda.is_available() and SANITIZER), reason="needs a CUDA GPU and compute-sanitizer")

# the groups of tests/sanitizer_cases.py, in its order
GROUPS = ["ssd_single", "ssd_two64", "ssd_two128", "ssd_chained", "scan", "attention", "indexer", "block_sparse"]


@needs
@pytest.mark.parametrize("group", GROUPS)
def test_kernels_are_clean_under_memcheck(group):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p),
               TRITON_PRINT_AUTOTUNING="0")
    cmd = [SANITIZER, "--tool", "memcheck", "--print-limit", "5", "--error-exitcode", "3",
           sys.executable, os.path.join(HERE, "sanitizer_cases.py"), group]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, check=False)
    out = res.stdout + res.stderr
    assert "ERROR SUMMARY: 0 errors" in out, out[-4000:]
    assert res.returncode == 0, out[-4000:]
    assert f"cases done: {group}" in out, out[-4000:]


def test_cases_cover_every_group_and_the_bench_lists_only_configs_that_fit():
    """Runs without a GPU. The groups here are those sanitizer_cases.py runs; the SSD groups split the bench's list
    without leaving a config out; the configs that ran out of the H200's shared memory in the first native run
    (SSD single pass chunk 128 with 3 stages: 247,296 B; bf16 indexer block 256 with 4 stages: 279,552 B; limit
    232,448 B) are not in the lists the bench sweeps, so the bench never picks them and the sanitizer runs them all."""
    import ast

    with open(os.path.join(HERE, "sanitizer_cases.py")) as fh:
        src = fh.read()
    node = next(n for n in ast.parse(src).body if isinstance(n, ast.Assign) and n.targets[0].id == "GROUPS")
    assert [k.value for k in node.value.keys] == GROUPS
    from gpu_track import bench
    single = [c for c in bench.SSD_CANDIDATES if not c[4]]
    two = [c for c in bench.SSD_CANDIDATES if c[4]]
    assert single and two and {c[0] for c in two} == {64, 128}      # ssd_two64 + ssd_two128 = every two-pass config
    assert not any(c[0] == 128 and c[3] == 3 for c in single)
    assert not any(bs == 256 and ns == 4 for bs, _, ns in bench.INDEXER_CANDIDATES["bf16"])
    assert (256, 8, 4) in bench.INDEXER_CANDIDATES["fp8"]          # FP8 tiles are half the bytes: they fit
    assert {c[0] for c in bench.BLOCK_SPARSE_DECODE_CANDIDATES} == set(bench.BLOCK_SPARSE_SPLITS)
