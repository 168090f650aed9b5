"""gpu_track.targets: the five student GPUs (T4, A100, A10/RTX, L4, H100/H200), the dtype policy, and the configs
each may pick, filtered by the shared memory of the kernels compiled ahead of time for it (the stored
gpu_track/results/targets_compile.json). The compile test recompiles each target's largest pick per kernel for
that target's capability (no GPU needed); skipped where this Triton cannot compile ahead of time."""
import json
import os
import subprocess
import sys
import types

import pytest

import gpu_track  # noqa: F401  (before triton)
from gpu_track import bench, targets

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

H200_PROPS = types.SimpleNamespace(name="NVIDIA H200", major=9, minor=0, multi_processor_count=132,
                                   shared_memory_per_block_optin=232448, regs_per_multiprocessor=65536,
                                   max_threads_per_multi_processor=2048)


def test_h200_keeps_every_config_it_picks_today():
    """On the H200 the chooser changes nothing: every kernel keeps the bench's list, in the bench's order."""
    today = {"ssd_chunked": bench.SSD_CANDIDATES, "selective_scan": bench.SCAN_CANDIDATES,
             "lightning_indexer_bf16": bench.INDEXER_CANDIDATES["bf16"],
             "lightning_indexer_fp8": bench.INDEXER_CANDIDATES["fp8"],
             "block_sparse_attention": bench.BLOCK_SPARSE_CANDIDATES,
             "block_sparse_attention_decode": bench.BLOCK_SPARSE_DECODE_CANDIDATES}
    for props in (H200_PROPS, "H200", "H100", "sm_90"):
        got = targets.configs(props)
        assert got == targets.candidates(), props
        for kernel, cands in today.items():
            assert got[kernel] == list(cands), kernel


def test_the_table_of_targets():
    t = {name: (x.sm, x.smem_per_block, x.regs_per_sm) for name, x in targets.TARGETS.items()}
    assert t == {"T4": (75, 65536, 65536), "A100": (80, 166912, 65536), "A10": (86, 101376, 65536),
                 "L4": (89, 101376, 65536), "H200": (90, 232448, 65536)}
    assert targets.target("RTX").sm == 86 and targets.target("H100").name == "H200"
    # a GPU's own properties win over the table's; an unlisted capability takes the closest one below it
    orin = targets.target({"major": 8, "minor": 7, "name": "Orin", "multi_processor_count": 16,
                           "shared_memory_per_block_optin": 166912})
    assert (orin.capability, orin.sms, orin.smem_per_block) == ((8, 6), 16, 166912)
    assert targets.target({"major": 12, "minor": 0}).capability == (9, 0)


@pytest.mark.parametrize("bad, what", [("V100", "target must be one of"), ({"major": 7, "minor": 0}, "below the"),
                                       ({"major": "9", "minor": 0}, "integer major and minor")])
def test_bad_targets_are_named(bad, what):
    with pytest.raises(ValueError, match=what):
        targets.target(bad)


def test_dtype_policy():
    pol = {name: targets.dtype_policy(name) for name in targets.TARGETS}
    assert [(p["dot"], p["acc"], p["fp8"]) for p in pol.values()] == [
        ("fp16", "fp32", False), ("bf16", "fp32", False), ("bf16", "fp32", False), ("bf16", "fp32", True),
        ("bf16", "fp32", True)]
    assert "no bf16 tensor cores: using fp16 with fp32 accumulation" in pol["T4"]["note"]
    assert pol["H200"]["note"] is None and pol["L4"]["note"] is None


def test_fallback_is_printed_once(capsys):
    targets.ANNOUNCED.clear()
    for _ in range(3):
        targets.announce("T4")
    assert targets.announce("H200") is None
    out = capsys.readouterr().out
    assert out.count("T4 (sm_75) has no bf16 tensor cores: using fp16 with fp32 accumulation") == 1
    assert out.count("\n") == 1


def test_small_gpus_lose_what_does_not_fit_and_fp8_below_sm89():
    table = targets.stored_table()
    for name, t in targets.TARGETS.items():
        got = targets.configs(name, table)
        assert ("lightning_indexer_fp8" in got) == (t.sm >= 89), name
        for kernel, cands in got.items():
            for c in cands:
                row = table["rows"][kernel][targets.config_key(c)][f"sm_{t.sm}"]
                assert row["ok"] and all(k["shared"] <= t.smem_per_block for k in row["kernels"]), (name, kernel, c)
        # every kernel except FP8 off sm_89+ keeps at least one config (the module runs on every student GPU)
        assert set(targets.candidates()) - set(got) <= {"lightning_indexer_fp8"}, (name, set(got))
    # the table's own claim: the T4 cannot take all the configs the H200 takes
    assert sum(map(len, targets.configs("T4", table).values())) < sum(map(len, targets.candidates().values()))


@pytest.fixture(scope="module")
def fresh():
    """Each target's largest pick per kernel, compiled afresh for its capability: two processes (the targets
    split between them), as the test machine has two cores."""
    env = dict(os.environ, TRITON_INTERPRET="0", TRITON_DEFAULT_FP_FUSION="1")
    halves = ("75", "80,86,89,90")
    procs = [subprocess.Popen([sys.executable, "-m", "gpu_track.targets", "--compile", "--worst", "--caps", h],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for h in halves]
    outs = [p.communicate(timeout=600) + (p.returncode,) for p in procs]
    rows = []
    for out, err, rc in outs:
        if rc != 0 and "cannot compile ahead of time" in out:
            pytest.skip(out.strip())
        assert rc == 0, err[-2000:]
        got = json.loads(out)
        rows += got["rows"]
    return got["triton"], got["stored_triton"], rows


def test_every_targets_largest_pick_compiles_and_fits(fresh):
    _, _, rows = fresh
    assert {(r["kernel"], r["target"]) for r in rows} == {(k, name) for name in targets.TARGETS
                                                         for k in targets.configs(name)}
    for r in rows:
        t = targets.TARGETS[r["target"]]
        assert r["row"]["ok"], r
        for k in r["row"]["kernels"]:
            assert k["shared"] <= t.smem_per_block, r
            assert k["regs"] * k["threads"] <= t.regs_per_sm, r


def test_stored_table_is_what_this_compiler_gives(fresh):
    version, stored_version, rows = fresh
    if version != stored_version:
        pytest.skip(f"stored with Triton {stored_version}, this is {version}")
    for r in rows:
        assert [k["shared"] for k in r["row"]["kernels"]] == [k["shared"] for k in r["stored"]["kernels"]], r


# ------------------------------------------------------------------------------------------------ the hardware table
def test_readme_hardware_table_is_the_modules():
    """The README's table is what hardware_rows derives (not typed twice), and every test a row names exists."""
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    assert targets.hardware_markdown() in readme
    rows = targets.hardware_rows()
    assert [r["gpu"] for r in rows] == ["T4", "A10 / RTX 30xx", "L4", "A100", "H100 / H200"]
    for r in rows:
        for t in r["tests"].split(", "):
            assert os.path.exists(os.path.join(ROOT, t)), t
    t4, _, l4, a100, h = rows
    assert "fp16" in t4["dot"] and "no FP8" in t4["fp8"] and "fp16" in t4["fp8"]
    assert "FP8" in l4["fp8"] and "no FP8" not in l4["fp8"] and "no FP8" in a100["fp8"]
    assert h["configs"].split(" of ")[0] == h["configs"].split(" of ")[1]          # the H200 keeps every config
    assert "fewer for" in t4["configs"]                                             # 64 KiB cuts some


def test_current_target_forced_by_the_environment():
    assert targets.current({"HYBRID_LAB_GPU_TARGET": "A100"}).name == "A100"
    assert targets.current({"HYBRID_LAB_GPU_TARGET": "sm_75"}).name == "T4"
    assert targets.current({"TRITON_INTERPRET": "1"}) is None              # the interpreter: nothing to choose
    with pytest.raises(ValueError, match="target must be one of"):
        targets.current({"HYBRID_LAB_GPU_TARGET": "V100"})


def test_tensor_core_dtype_policy(capsys):
    import torch
    targets.ANNOUNCED.clear()
    assert targets.tensor_core_dtype(torch.bfloat16, "T4") == torch.float16
    assert targets.tensor_core_dtype(torch.bfloat16, "T4") == torch.float16
    assert capsys.readouterr().out.count("no bf16 tensor cores") == 1          # said once
    for t in ("A100", "L4", "H200"):
        assert targets.tensor_core_dtype(torch.bfloat16, t) == torch.bfloat16
    for dt in (torch.float16, torch.float32, torch.float64):
        assert targets.tensor_core_dtype(dt, "T4") == dt
    targets.tensor_core_dtype(torch.bfloat16, "A100", fp8=True)
    assert "the FP8 indexer runs in bf16" in capsys.readouterr().out
    targets.tensor_core_dtype(torch.bfloat16, "H200", fp8=True)
    assert capsys.readouterr().out == ""
    targets.ANNOUNCED.clear()


def test_bench_sweeps_only_what_the_gpu_fits(monkeypatch):
    """The bench's sweep lists, filtered by the GPU's target: a T4 loses the configs that do not fit 64 KiB (and
    the sparse-attention sweep's launch size is not part of the match); the interpreter keeps every candidate."""
    monkeypatch.setattr(bench, "TARGET", None)
    assert bench.fitting("ssd_chunked", bench.SSD_CANDIDATES) == list(bench.SSD_CANDIDATES)
    monkeypatch.setattr(bench, "TARGET", targets.target("T4"))
    t4 = bench.fitting("ssd_chunked", bench.SSD_CANDIDATES)
    assert t4 == targets.configs("T4")["ssd_chunked"] and 0 < len(t4) < len(bench.SSD_CANDIDATES)
    sa = [c + (7,) for c in targets.SPARSE_ATTENTION_CANDIDATES]
    assert bench.fitting("sparse_attention", sa, 3) == [c + (7,) for c in targets.configs("T4")["sparse_attention"]]
    assert bench.fitting("lightning_indexer_fp8", bench.INDEXER_CANDIDATES["fp8"]) == []      # no FP8 below sm_89
    monkeypatch.setattr(bench, "TARGET", targets.target("H200"))
    assert bench.fitting("lightning_indexer_fp8", bench.INDEXER_CANDIDATES["fp8"]) == \
        list(bench.INDEXER_CANDIDATES["fp8"])


def test_hardware_rows_count_what_the_chooser_keeps():
    """hardware_rows reads the stored table alone (no bench import: notebook 09 prints it without torch or Triton);
    its counts are those of configs(), which the bench uses."""
    cands = targets.candidates()
    for r, name in zip(targets.hardware_rows(), ("T4", "A10", "L4", "A100", "H200")):
        kept = targets.configs(name)
        fp8 = targets.dtype_policy(name)["fp8"]
        n_all = sum(len(v) for k, v in cands.items() if fp8 or not k.endswith("_fp8"))
        assert r["configs"].split(" (")[0] == f"{sum(len(v) for v in kept.values())} of {n_all}", name
