"""The student GPUs' facts and the dtype policy: what a kernel may take on which GPU. The bottom of gpu_track's
tooling: it imports nothing of gpu_track, so the wrappers (``common``) and the bench can ask it without a cycle;
``gpu_track.targets`` builds the config chooser and the ahead-of-time compile on top of it (and re-exports these
names).

Why: every config list in ``gpu_track.bench`` was cut to fit the H200 (232,448 B of shared memory per block). A
T4 has 64 KiB, an A10 or L4 99 KiB; a T4 has no bf16 tensor cores and only sm_89+ has FP8.
"""
from __future__ import annotations

import dataclasses
import json
import os

STORED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "targets_compile.json")


@dataclasses.dataclass(frozen=True)
class Target:
    name: str
    capability: tuple                 # (major, minor)
    smem_per_block: int               # opt-in maximum of dynamic shared memory per block, bytes
    sms: int
    regs_per_sm: int = 65536
    max_threads_per_sm: int = 2048
    max_threads_per_block: int = 1024

    @property
    def sm(self) -> int:
        return self.capability[0] * 10 + self.capability[1]


TARGETS = {t.name: t for t in (
    Target("T4", (7, 5), 65536, 40, max_threads_per_sm=1024),
    Target("A100", (8, 0), 166912, 108),
    Target("A10", (8, 6), 101376, 72, max_threads_per_sm=1536),     # RTX 30xx: same sm_86 limits, other SM counts
    Target("L4", (8, 9), 101376, 58, max_threads_per_sm=1536),
    Target("H200", (9, 0), 232448, 132),                             # H100: the same sm_90 limits
)}
ALIASES = {"H100": "H200", "RTX": "A10", "sm_75": "T4", "sm_80": "A100", "sm_86": "A10", "sm_89": "L4",
           "sm_90": "H200"}


def target(props) -> Target:
    """The Target for a name ("T4", "A100", "A10", "RTX", "L4", "H100", "H200", "sm_86", ...), a
    ``torch.cuda.get_device_properties`` result (or any object / dict with ``major``, ``minor`` and optionally
    ``name``, ``multi_processor_count``, ``shared_memory_per_block_optin``, ``regs_per_multiprocessor``,
    ``max_threads_per_multi_processor``). A GPU's own properties override the table's (an RTX card's SM count)."""
    if isinstance(props, Target):
        return props
    if isinstance(props, str):
        key = ALIASES.get(props, props)
        if key not in TARGETS:
            raise ValueError(f"target must be one of {sorted(TARGETS) + sorted(ALIASES)} or device properties, "
                             f"got {props!r}")
        return TARGETS[key]
    get = props.get if isinstance(props, dict) else (lambda k, d=None: getattr(props, k, d))
    major, minor = get("major"), get("minor")
    if not (isinstance(major, int) and isinstance(minor, int)):
        raise ValueError(f"props must have integer major and minor (the compute capability), got "
                         f"major={major!r}, minor={minor!r}")
    cap = (major, minor)
    # the closest listed capability at or below this one (an sm_87 Orin gets sm_86's configs; sm_100 gets sm_90's)
    known = [t for t in TARGETS.values() if t.capability <= cap]
    if not known:
        raise ValueError(f"props: compute capability {major}.{minor} is below the oldest target the kernels "
                         f"support (7.5, T4)")
    base = max(known, key=lambda t: t.capability)
    return Target(str(get("name", base.name) or base.name), base.capability,
                  int(get("shared_memory_per_block_optin", None) or base.smem_per_block),
                  int(get("multi_processor_count", None) or base.sms),
                  int(get("regs_per_multiprocessor", None) or base.regs_per_sm),
                  int(get("max_threads_per_multi_processor", None) or base.max_threads_per_sm),
                  base.max_threads_per_block)


# ------------------------------------------------------------------------------------------------ dtypes
def dtype_policy(props) -> dict:
    """What the kernels' tensor-core inputs are on this GPU: bf16 where the hardware has bf16 tensor cores
    (sm_80+), fp16 with fp32 accumulation on sm_75; FP8 (e4m3) only on sm_89+ (elsewhere the FP8 indexer takes the
    bf16 / fp16 path). Accumulation is fp32 everywhere. ``note``: the fallback to tell the student, or None."""
    t = target(props)
    if t.sm < 80:
        return {"dot": "fp16", "acc": "fp32", "fp8": False,
                "note": f"{t.name} (sm_{t.sm}) has no bf16 tensor cores: using fp16 with fp32 accumulation; "
                        f"no FP8 (the FP8 indexer runs in fp16)"}
    if t.sm < 89:
        return {"dot": "bf16", "acc": "fp32", "fp8": False,
                "note": f"{t.name} (sm_{t.sm}) has no FP8 tensor cores: the FP8 indexer runs in bf16"}
    return {"dot": "bf16", "acc": "fp32", "fp8": True, "note": None}


ANNOUNCED: set = set()


def announce(props) -> str | None:
    """Print the dtype fallback for this GPU once per process (a notebook cell run twice says it once).
    Returns the note (None where nothing falls back)."""
    note = dtype_policy(props)["note"]
    if note is not None and note not in ANNOUNCED:
        ANNOUNCED.add(note)
        print(note)
    return note


# ------------------------------------------------------------------------------------------------ the stored table
def config_key(config) -> str:
    """A config as the stored table's key (JSON; a dtype as its name)."""
    return json.dumps([str(c) if not isinstance(c, (int, bool, str, type(None))) else c for c in config])


def stored_table(path: str = STORED) -> dict:
    with open(path) as fh:
        return json.load(fh)


def fits(row: dict, t: Target) -> bool:
    """A compiled config (every launch it makes) fits the GPU: it compiled, and each launch's shared memory and
    registers x threads are within the target's limits."""
    return row["ok"] and all(k["shared"] <= t.smem_per_block and k["regs"] * k["threads"] <= t.regs_per_sm
                             for k in row["kernels"])


# ------------------------------------------------------------------------------------------------ this GPU
def current(env: dict | None = None):
    """The Target the kernels run for: ``HYBRID_LAB_GPU_TARGET`` (a name as :func:`target` takes: "T4", "A100",
    "sm_80", ...) when set, so an H200 can run the sm_80 config set and dtype path; else this process's CUDA
    device; None on a machine without one (Triton's interpreter: nothing to choose)."""
    env = os.environ if env is None else env
    forced = env.get("HYBRID_LAB_GPU_TARGET", "").strip()
    if forced:
        return target(forced)
    try:
        import torch
    except ImportError:
        return None
    if env.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available():
        return None
    return target(torch.cuda.get_device_properties(torch.cuda.current_device()))


def tensor_core_dtype(dtype, t=None, fp8: bool = False):
    """The dtype a kernel's ``tl.dot`` inputs get on target ``t`` (default :func:`current`) for inputs of torch
    ``dtype``: bf16 becomes fp16 below sm_80 (no bf16 tensor cores; fp32 accumulation either way); an FP8 request
    below sm_89 takes the 16-bit path. float32 / float64 are kept (CUDA-core dots). Prints the fallback once."""
    import torch
    t = current() if t is None else target(t)
    if t is None:
        return dtype
    policy = dtype_policy(t)
    if fp8 and not policy["fp8"] or (dtype == torch.bfloat16 and policy["dot"] == "fp16"):
        announce(t)
    if dtype == torch.bfloat16 and policy["dot"] == "fp16":
        return torch.float16
    return dtype
