"""The official Mamba kernels as benchmark peers, imported from their source tree without installing mamba-ssm.

``mamba_ssm/__init__.py`` imports the CUDA extension (selective_scan_cuda, causal_conv1d), which needs a build with
nvcc; the Triton kernels under ``mamba_ssm/ops/triton/`` need only torch, triton, einops and packaging. So the
package and its subpackages are registered as empty modules whose ``__path__`` points into the extracted source
(their ``__init__`` files are never run), and the two entry points are imported from there:

- ``mamba_chunk_scan_combined`` (``ops/triton/ssd_combined.py``): Mamba-2 SSD prefill, five Triton kernels;
- ``selective_state_update`` (``ops/triton/selective_state_update.py``): one decode step of Mamba-1/2;
- ``selective_scan_cuda`` (``csrc/selective_scan/``): Mamba-1's CUDA prefill scan, the kernel mamba-ssm users run,
  built here by :func:`build_selective_scan_cuda` for the GPU at hand only (torch's JIT extension loader, the
  sdist's own sources and nvcc flags; about 140 s with 16 jobs on the H200 machine; the build stays out of the
  repository).

Get the source (no build, no dependencies): ``MAMBA_SKIP_CUDA_BUILD=TRUE pip download --no-deps --no-binary :all:
--no-build-isolation mamba-ssm==2.3.2.post1 -d .devrun/peers`` and untar it there; ``MAMBA_SSM_SRC`` may point to
another extracted tree. If einops is not installed, an ``einops-*.whl`` beside the tree is put on ``sys.path``
(a wheel is a zip archive Python imports from).
"""
from __future__ import annotations

import glob
import importlib
import os
import sys
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_GLOB = os.path.join(ROOT, ".devrun", "peers", "mamba_ssm-*")


def mamba_source(src: str | None = None) -> str:
    """The extracted mamba-ssm source tree (the folder holding ``mamba_ssm/``)."""
    src = src or os.environ.get("MAMBA_SSM_SRC")
    if src is None:
        found = sorted(d for d in glob.glob(DEFAULT_GLOB) if os.path.isdir(os.path.join(d, "mamba_ssm")))
        if not found:
            raise ImportError(f"no mamba-ssm source tree at {DEFAULT_GLOB} (see gpu_track/peers.py) and MAMBA_SSM_SRC "
                              f"is not set")
        src = found[-1]
    if not os.path.isdir(os.path.join(src, "mamba_ssm", "ops", "triton")):
        raise ImportError(f"{src} has no mamba_ssm/ops/triton/")
    return src


def load_mamba(src: str | None = None):
    """Returns (mamba_chunk_scan_combined, selective_state_update, version) from the source tree, or raises
    ImportError with the reason."""
    src = mamba_source(src)
    try:
        import einops  # noqa: F401
    except ImportError:
        wheels = sorted(glob.glob(os.path.join(os.path.dirname(src), "einops-*.whl")))
        if not wheels:
            raise
        sys.path.append(wheels[-1])
    for name in ("mamba_ssm", "mamba_ssm.ops", "mamba_ssm.ops.triton", "mamba_ssm.utils"):
        path = os.path.join(src, *name.split("."))
        mod = sys.modules.get(name)
        if mod is None or getattr(mod, "__path__", None) != [path]:
            mod = types.ModuleType(name)
            mod.__path__ = [path]                  # a package whose __init__ is never run
            sys.modules[name] = mod
    ssd = importlib.import_module("mamba_ssm.ops.triton.ssd_combined")
    ssu = importlib.import_module("mamba_ssm.ops.triton.selective_state_update")
    version = os.path.basename(os.path.normpath(src)).replace("mamba_ssm-", "")
    return ssd.mamba_chunk_scan_combined, ssu.selective_state_update, version


# csrc/selective_scan/ of mamba-ssm 2.3.2: the module's C++ front end registers fwd and bwd, so every file is built
SCAN_SOURCES = ("selective_scan.cpp",) + tuple(
    f"selective_scan_{d}_{t}.cu" for d, ts in (("fwd", ("fp32", "fp16", "bf16")),
                                               ("bwd", ("fp32_real", "fp32_complex", "fp16_real", "fp16_complex",
                                                        "bf16_real", "bf16_complex")))
    for t in ts)
# setup.py's nvcc flags, with one -gencode for the GPU at hand instead of its list of architectures
SCAN_NVCC_FLAGS = ("-O3", "-std=c++17", "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
                   "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
                   "-U__CUDA_NO_BFLOAT162_OPERATORS__", "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
                   "--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math", "-lineinfo")


def selective_scan_cuda_build(src: str | None = None, capability: tuple = (9, 0)) -> dict:
    """What :func:`build_selective_scan_cuda` passes to ``torch.utils.cpp_extension.load``: the source files (all
    present in the tree, else ImportError naming the first missing one), the include folder and the flags for one
    compute capability (major, minor)."""
    base = os.path.join(mamba_source(src), "csrc", "selective_scan")
    sources = [os.path.join(base, f) for f in SCAN_SOURCES]
    missing = [f for f in sources if not os.path.isfile(f)]
    if missing:
        raise ImportError(f"the mamba-ssm tree has no {missing[0]} (a source distribution has csrc/; a wheel does not)")
    if not (isinstance(capability, tuple) and len(capability) == 2 and all(isinstance(c, int) for c in capability)):
        raise ValueError(f"capability must be (major, minor) ints, got {capability!r}")
    arch = f"{capability[0]}{capability[1]}"
    return {"name": "selective_scan_cuda", "sources": sources, "extra_include_paths": [base],
            "extra_cflags": ["-O3", "-std=c++17"],
            "extra_cuda_cflags": list(SCAN_NVCC_FLAGS) + ["-gencode", f"arch=compute_{arch},code=sm_{arch}"]}


def build_selective_scan_cuda(src: str | None = None, build_dir: str | None = None):
    """mamba-ssm's ``selective_scan_cuda`` module built for the current GPU (``MAX_JOBS`` sets ninja's jobs), or
    ImportError with the reason (no tree, no CUDA, no nvcc, a failed build). Its ``fwd(u, delta, A, B, C, D, z,
    delta_bias, delta_softplus)`` takes u, delta (Bt, Dm, L), A (Dm, N) float32, B, C (Bt, 1, N, L) and returns
    [out (Bt, Dm, L), ...]."""
    import shutil

    import torch
    from torch.utils import cpp_extension

    if not torch.cuda.is_available():
        raise ImportError("building selective_scan_cuda needs a CUDA GPU")
    if shutil.which("nvcc") is None and not os.path.isfile(os.path.join(cpp_extension.CUDA_HOME or "", "bin", "nvcc")):
        raise ImportError("building selective_scan_cuda needs nvcc (CUDA_HOME or PATH)")
    kw = selective_scan_cuda_build(src, torch.cuda.get_device_capability())
    if build_dir is not None:
        os.makedirs(build_dir, exist_ok=True)
    try:
        return cpp_extension.load(**kw, build_directory=build_dir, verbose=False)
    except Exception as e:  # noqa: BLE001  (a compiler or linker failure: the peer is skipped with the reason)
        raise ImportError(f"selective_scan_cuda did not build: {e!r}"[:600]) from None
