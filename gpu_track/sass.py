"""Count a kernel's machine instructions without a GPU: compile it for Hopper (sm_90) ahead of time and read the SASS.

Why: a kernel whose time is far above both its byte bound and its exp (SFU) bound is usually bound by how many
instructions it issues per element. Triton ships ptxas and nvdisasm, so the instruction mix of any config can be
counted on a laptop, and a layout change judged before a GPU is at hand. It was used on the Mamba-1 scan: the
old (time, channel, state) tiles put the state axis on a warp's lanes, so the sum over states cost 4 shuffles and
4 adds per element (26 instructions per (t, d, n) element); the (time, channel group, state, channel lane) tiles
of ``selective_scan.CHUNKED_SCAN_KERNEL`` issue 12-21 instructions per element.

    TRITON_INTERPRET=0 python -m gpu_track.sass            # the scan's bench candidates, per element
    TRITON_INTERPRET=0 python -m gpu_track.sass --json     # the same as JSON
    TRITON_INTERPRET=0 python -m gpu_track.sass --json --peer   # and mamba-ssm's CUDA scan, compiled with nvcc

The peer: mamba's forward scan puts time on the threads (16 items each, 128 threads a block, one channel a block,
the 16 states one after another) and issues more instructions per element than our kernel's picks, but a batch-1
sequence of 5,120 channels still gives it 5,120 blocks of 4 warps; the chunked kernel's batch-1 pick makes 1,280
programs of one warp. ``mamba_scan_mix`` counts it (nvcc from the CUDA toolkit, the sdist of gpu_track.peers).

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


# mamba-ssm's CUDA forward scan as the bench times it: 128 threads x 16 items (L >= 2048), L a multiple of 2048,
# B and C varying over time, no z, bf16 inputs, float32 A (the mangled template arguments of its kernel traits)
MAMBA_FWD_KERNEL = "Selective_Scan_fwd_kernel_traitsILi128ELi16ELi1ELb1ELb1ELb1ELb0EN3c108BFloat16EfE"
MAMBA_ITEMS, MAMBA_THREADS = 16, 128
_SASS_LINE = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")


def sass_loops(sass: str) -> list:
    """The loops of one function's SASS text: every backward branch, as {"start", "end", "count", "ops"} (byte
    addresses, the instructions from the branch target to the branch, their opcode counts without modifiers),
    outermost first."""
    ins = [(int(m.group(1), 16), m.group(2), m.group(3)) for m in map(_SASS_LINE.match, sass.splitlines()) if m]
    at = {a: i for i, (a, _, _) in enumerate(ins)}
    loops = []
    for i, (a, op, rest) in enumerate(ins):
        target = re.search(r"0x([0-9a-f]+)", rest) if op.startswith("BRA") else None
        if target and int(target.group(1), 16) < a and int(target.group(1), 16) in at:
            body = ins[at[int(target.group(1), 16)]:i + 1]
            loops.append({"start": body[0][0], "end": a, "count": len(body),
                          "ops": collections.Counter(o.split(".")[0] for _, o, _ in body)})
    return sorted(loops, key=lambda lp: (lp["start"], -lp["end"]))


def mamba_function_sass(sass: str, kernel: str = MAMBA_FWD_KERNEL) -> str:
    """The SASS of the one function of ``cuobjdump -sass`` output whose (mangled) name contains ``kernel``."""
    parts = re.split(r"\n\s*Function : ", sass)
    found = [p for p in parts[1:] if kernel in p.split("\n", 1)[0]]
    if len(found) != 1:
        raise ValueError(f"sass must hold exactly one function named like {kernel!r}, found {len(found)}")
    return found[0]


def loop_mix(sass: str, items: int, states: int) -> dict:
    """Instructions per (t, d, n) element of mamba's forward scan from its function's SASS: the state loop (the
    innermost loop with ``items`` exps: one thread's items for one state) divided by ``items``, plus the rest of
    the chunk loop around it divided by items x states (its loads, the D term, the store, shared by all states)."""
    loops = sass_loops(sass)
    inner = [lp for lp in loops if lp["ops"]["MUFU"] == items]
    if not inner:
        raise ValueError(f"no loop with {items} exps (MUFU) in the SASS: not a {items}-item scan")
    state = min(inner, key=lambda lp: lp["count"])
    outer = [lp for lp in loops if lp["start"] <= state["start"] and lp["end"] >= state["end"] and lp is not state]
    chunk = min(outer, key=lambda lp: lp["count"]) if outer else state
    extra = (chunk["count"] - state["count"]) / (items * states)
    return {"state_loop": state["count"], "chunk_loop": chunk["count"],
            "per_element": round(state["count"] / items + extra, 2),
            "mix_per_element": {op: round(n / items, 2) for op, n in state["ops"].most_common(10)}}


def mamba_scan_mix(src: str | None = None, n_state: int = 16) -> dict:
    """mamba-ssm's CUDA forward scan (``csrc/selective_scan/selective_scan_fwd_bf16.cu``) compiled for sm_90 with
    nvcc and setup.py's flags (no GPU needed; torch's headers, any build), read like ``scan_mix``: instructions
    per (t, d, n) element, registers, warps per block. Raises RuntimeError with the reason where nvcc or the
    source tree is missing."""
    import shutil
    import sysconfig

    from gpu_track import peers
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise RuntimeError("no nvcc on PATH")
    try:
        base = os.path.join(peers.mamba_source(src), "csrc", "selective_scan")
        from torch.utils.cpp_extension import include_paths
    except ImportError as e:
        raise RuntimeError(str(e)) from None
    with tempfile.TemporaryDirectory() as d:
        # a CPU build of torch lacks one generated CUDA header that c10/cuda includes; it only defines export macros
        stub = os.path.join(d, "c10", "cuda", "impl")
        os.makedirs(stub)
        with open(os.path.join(stub, "cuda_cmake_macros.h"), "w") as fh:
            fh.write("#pragma once\n")
        incs = [d] + include_paths() + [base, sysconfig.get_paths()["include"]]
        obj = os.path.join(d, "fwd.o")
        cmd = [nvcc, *peers.SCAN_NVCC_FLAGS, "-gencode", "arch=compute_90,code=sm_90", *[f"-I{i}" for i in incs],
               "-c", os.path.join(base, "selective_scan_fwd_bf16.cu"), "-o", obj]
        p = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if p.returncode != 0:
            raise RuntimeError(f"nvcc failed: {p.stderr.strip()[-400:]}")
        sass = subprocess.run([_tool("cuobjdump"), "-sass", obj], capture_output=True, text=True, check=True).stdout
        usage = subprocess.run([_tool("cuobjdump"), "--dump-resource-usage", obj], capture_output=True, text=True,
                               check=True).stdout
    regs = re.search(MAMBA_FWD_KERNEL + r"[^\n]*\n\s*REG:(\d+)", usage)
    row = loop_mix(mamba_function_sass(sass), MAMBA_ITEMS, n_state)
    nvcc_version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    return {"kernel": "selective_scan_fwd_kernel<128 threads, 16 items, bf16, varying B and C>",
            "nvcc": nvcc_version[-1] if nvcc_version else "?", "registers": int(regs.group(1)) if regs else -1,
            "warps_per_block": MAMBA_THREADS // 32, **row}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not available():
        print("this Triton cannot compile for sm_90 here (no ahead-of-time API or no bundled nvdisasm)")
        return 1
    from gpu_track.bench import SCAN_CANDIDATES
    rows = [scan_mix(ch, bd, lanes, nw) for v, ch, bd, lanes, nw in SCAN_CANDIDATES if v == "chunked"]
    peer = None
    if "--peer" in argv:
        try:
            peer = mamba_scan_mix()
        except RuntimeError as e:
            peer = {"error": str(e)}
    if "--json" in argv:
        out = {"triton": triton.__version__, "arch": "sm_90", "selective_scan": rows}
        if peer is not None:
            out["mamba_selective_scan_cuda"] = peer
        print(json.dumps(out))
        return 0
    print(f"selective_scan chunked kernel, sm_90, Triton {triton.__version__} (chunk, block_d, lanes_d, warps):")
    for r in rows:
        mix = " ".join(f"{k} {v}" for k, v in list(r["mix_per_element"].items())[:6])
        print(f"  {str(tuple(r['config'])):16s} {r['per_element']:5.1f} instructions per element, "
              f"{r['registers']} registers{', spills' if r['spills'] else ''} | {mix}")
    if peer is not None:
        print("mamba-ssm's CUDA forward scan (sm_90):", peer.get("error") or
              f"{peer['per_element']} instructions per element, {peer['registers']} registers, "
              f"{peer['warps_per_block']} warps per block")
    return 0


if __name__ == "__main__":
    sys.exit(main())
