"""gpu_track.peers without a GPU: the mamba CUDA scan's build recipe (the sdist's sources and nvcc flags, one
-gencode for the GPU at hand) from a source tree, and the reasons it refuses; building needs CUDA and nvcc."""
import pytest

pytest.importorskip("torch")

from gpu_track import peers  # noqa: E402


def _tree(tmp_path, skip=()):
    base = tmp_path / "mamba_ssm-2.3.2.post1"
    (base / "mamba_ssm" / "ops" / "triton").mkdir(parents=True)
    (base / "csrc" / "selective_scan").mkdir(parents=True)
    for f in peers.SCAN_SOURCES:
        if f not in skip:
            (base / "csrc" / "selective_scan" / f).write_text("// source\n")
    return str(base)


def test_the_build_takes_every_source_and_the_gpus_own_architecture(tmp_path):
    kw = peers.selective_scan_cuda_build(_tree(tmp_path), (8, 6))
    assert len(kw["sources"]) == 10 and kw["sources"][0].endswith("selective_scan.cpp")
    assert sum(s.endswith(".cu") and "_fwd_" in s for s in kw["sources"]) == 3                # fp32, fp16, bf16
    assert kw["extra_cuda_cflags"][-2:] == ["-gencode", "arch=compute_86,code=sm_86"]
    assert "--use_fast_math" in kw["extra_cuda_cflags"] and kw["name"] == "selective_scan_cuda"


def test_a_tree_without_sources_or_a_bad_capability_is_refused(tmp_path):
    with pytest.raises(ImportError, match="selective_scan_bwd_bf16_real.cu"):
        peers.selective_scan_cuda_build(_tree(tmp_path, skip=("selective_scan_bwd_bf16_real.cu",)))
    with pytest.raises(ValueError, match="capability"):
        peers.selective_scan_cuda_build(_tree(tmp_path / "b"), (9,))
    with pytest.raises(ImportError, match="no mamba-ssm source tree|has no mamba_ssm"):
        peers.selective_scan_cuda_build(str(tmp_path / "nowhere"))


def test_building_without_a_gpu_says_why(tmp_path, monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ImportError, match="needs a CUDA GPU"):
        peers.build_selective_scan_cuda(_tree(tmp_path))
