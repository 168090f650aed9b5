"""Count a kernel's machine instructions without a GPU: compile it for Hopper (sm_90) ahead of time and read the SASS.

Why: a kernel whose time is far above both its byte bound and its exp (SFU) bound is usually bound by how many
instructions it issues per element. Triton ships ptxas and nvdisasm, so the instruction mix of any config can be
counted on a laptop, and a layout change judged before a GPU is at hand. It was used on the Mamba-1 scan: the
old (time, channel, state) tiles put the state axis on a warp's lanes, so the sum over states cost 4 shuffles and
4 adds per element (26 instructions per (t, d, n) element); the (time, channel group, state, channel lane) tiles
of ``selective_scan.CHUNKED_SCAN_KERNEL`` issue 12-21 instructions per element.

    TRITON_INTERPRET=0 python -m gpu_track.sass            # the scan's bench candidates, per element
    TRITON_INTERPRET=0 python -m gpu_track.sass --json     # the same as JSON

Counts are static (each instruction of the compiled kernel once, loop body included once), divided by the
(t, d, n) elements one loop iteration of one thread handles: a per-element cost of the loop, prologue included.
The Triton here may differ from the GPU host's: the counts describe this compiler's output.
"""
from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
import tempfile

if __name__ == "__main__":
    os.environ.setdefault("TRITON_INTERPRET", "0")      # compile for a GPU even where none is present

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

SASS_OP = re.compile(r"\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")


def _tool(name: str) -> str:
    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def available() -> bool:
    """Can this Triton compile for sm_90 here (its ahead-of-time API and its bundled nvdisasm/cuobjdump)?"""
    try:
        from triton.backends.compiler import GPUTarget  # noqa: F401
        from triton.compiler import ASTSource  # noqa: F401
    except ImportError:
        return False
    return os.path.exists(_tool("nvdisasm")) and os.path.exists(_tool("cuobjdump"))


def compile_sm90(fn, signature: dict, constexprs: dict, num_warps: int = 4, num_stages: int = 2):
    """Triton's compiled kernel of ``fn`` for an H100/H200 (sm_90). signature: {arg: "*bf16" | "i32" | ...,
    constexpr args: "constexpr"}; constexprs: {name: value}."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": num_warps, "num_stages": num_stages})


def instruction_mix(kernel) -> tuple[collections.Counter, int]:
    """(opcode counts of the kernel's SASS, registers per thread)."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        with open(path, "wb") as fh:
            fh.write(kernel.asm["cubin"])
        sass = subprocess.run([_tool("nvdisasm"), "-c", path], capture_output=True, text=True, check=True).stdout
        usage = subprocess.run([_tool("cuobjdump"), "--dump-resource-usage", path], capture_output=True, text=True,
                               check=True).stdout
    ops = collections.Counter(m.group(1) for m in map(SASS_OP.match, sass.splitlines()) if m)
    regs = re.search(r"REG:(\d+)", usage)
    return ops, int(regs.group(1)) if regs else -1


def resource_usage(kernel) -> tuple[int, bool]:
    """(registers per thread, whether it spills to local memory) of a compiled kernel, read from its cubin by
    cuobjdump (no GPU needed; ``kernel.n_regs`` is only filled in once a driver loads the kernel)."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        with open(path, "wb") as fh:
            fh.write(kernel.asm["cubin"])
        usage = subprocess.run([_tool("cuobjdump"), "--dump-resource-usage", path], capture_output=True, text=True,
                               check=True).stdout
    regs = re.search(r"REG:(\d+)", usage)
    stack = re.search(r"STACK:(\d+)", usage)
    local = re.search(r"LOCAL:(\d+)", usage)
    spills = bool(stack and int(stack.group(1))) or bool(local and int(local.group(1)))
    return (int(regs.group(1)) if regs else -1), spills


def scan_mix(chunk: int, block_d: int, lanes_d: int, num_warps: int, n_state: int = 16) -> dict:
    """Instructions per (t, d, n) element of ``selective_scan.CHUNKED_SCAN_KERNEL`` (bf16 x/Δ/B/C, fp32 A, D and
    state)."""
    from gpu_track.selective_scan import CHUNKED_SCAN_KERNEL
    sig = {"x_ptr": "*bf16", "dt_ptr": "*bf16", "A_ptr": "*fp32", "B_ptr": "*bf16", "C_ptr": "*bf16",
           "D_ptr": "*fp32", "h0_ptr": "*fp32", "y_ptr": "*bf16", "h_last_ptr": "*fp32", "L": "i32", "DM": "i32",
           "N": "i32"}
    const = {"HAS_D": True, "HAS_H0": False, "CHUNK": chunk, "BLOCK_D": block_d, "LANES_D": min(lanes_d, block_d),
             "BLOCK_N": n_state, "ACC_DTYPE": tl.float32}
    sig.update({k: "constexpr" for k in const})
    ops, regs = instruction_mix(compile_sm90(CHUNKED_SCAN_KERNEL, sig, const, num_warps=num_warps))
    per = chunk * block_d * n_state / (32 * num_warps)          # elements one thread handles per loop iteration
    return {"config": [chunk, block_d, lanes_d, num_warps], "registers": regs, "spills": ops["STL"] > 0,
            "per_element": round(sum(ops.values()) / per, 2),
            "mix_per_element": {op: round(n / per, 2) for op, n in ops.most_common(10)}}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not available():
        print("this Triton cannot compile for sm_90 here (no ahead-of-time API or no bundled nvdisasm)")
        return 1
    from gpu_track.bench import SCAN_CANDIDATES
    rows = [scan_mix(ch, bd, lanes, nw) for v, ch, bd, lanes, nw in SCAN_CANDIDATES if v == "chunked"]
    if "--json" in argv:
        print(json.dumps({"triton": triton.__version__, "arch": "sm_90", "selective_scan": rows}))
        return 0
    print(f"selective_scan chunked kernel, sm_90, Triton {triton.__version__} (chunk, block_d, lanes_d, warps):")
    for r in rows:
        mix = " ".join(f"{k} {v}" for k, v in list(r["mix_per_element"].items())[:6])
        print(f"  {str(tuple(r['config'])):16s} {r['per_element']:5.1f} instructions per element, "
              f"{r['registers']} registers{', spills' if r['spills'] else ''} | {mix}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
