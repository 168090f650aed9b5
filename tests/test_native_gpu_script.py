"""benchmarks/native_gpu.sh splits a pytest group into parts that each fit one 10-minute device command: SHARD=I/N
takes every N-th test from the I-th, the N parts together are the whole group with no test twice, and a bad SHARD
or a SHARD on a group that is not pytest is refused. DRY=1 prints the part's test ids (collection only: no GPU)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash (the script's shell)")


def _run(group, shard=None, dry=True, tmp=None):
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    env.pop("SHARD", None)
    if shard is not None:
        env["SHARD"] = shard
    if dry:
        env["DRY"] = "1"
    return subprocess.run(["bash", "benchmarks/native_gpu.sh", group, str(tmp)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def _ids(group, shard, tmp):
    r = _run(group, shard, tmp=tmp)
    assert r.returncode == 0, r.stdout + r.stderr
    return [line for line in r.stdout.splitlines() if line]


@pytest.mark.parametrize("group, n", [("sanitizer", 3), ("retrain", 3)])
def test_the_parts_of_a_group_are_the_whole_group_once(group, n, tmp_path):
    whole = _ids(group, "1/1", tmp_path)
    parts = [_ids(group, f"{i}/{n}", tmp_path) for i in range(1, n + 1)]
    assert len(whole) >= n and all("::" in t for t in whole)
    assert sorted(t for p in parts for t in p) == sorted(whole)          # every test once, none twice
    assert parts[0] == whole[0::n] and parts[-1] == whole[n - 1::n]     # every n-th, in collection order


def test_without_shard_dry_names_the_files(tmp_path):
    assert _ids("kernels", None, tmp_path) == ["tests/test_gpu_kernels.py"]


@pytest.mark.parametrize("group, shard, says", [("kernels", "0/2", "SHARD must be I/N"),
                                                 ("kernels", "3/2", "SHARD must be I/N"),
                                                 ("kernels", "1-2", "SHARD must be I/N"),
                                                 ("bench", "1/2", "SHARD splits the pytest groups only")])
def test_a_bad_shard_is_refused_before_anything_runs(group, shard, says, tmp_path):
    r = _run(group, shard, dry=False, tmp=tmp_path)
    assert r.returncode == 2 and says in r.stdout
    assert (f"'{shard}'" if says.startswith("SHARD must") else group) in r.stdout      # names what was given
    assert not list(tmp_path.glob("*.log"))
