"""The official Mamba kernels as benchmark peers, imported from their source tree without installing mamba-ssm.

``mamba_ssm/__init__.py`` imports the CUDA extension (selective_scan_cuda, causal_conv1d), which needs a build with
nvcc; the Triton kernels under ``mamba_ssm/ops/triton/`` need only torch, triton, einops and packaging. So the
package and its subpackages are registered as empty modules whose ``__path__`` points into the extracted source
(their ``__init__`` files are never run), and the two entry points are imported from there:

- ``mamba_chunk_scan_combined`` (``ops/triton/ssd_combined.py``): Mamba-2 SSD prefill, five Triton kernels;
- ``selective_state_update`` (``ops/triton/selective_state_update.py``): one decode step of Mamba-1/2.

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
