"""The GPUs students have, and which kernel configs each of them may run.

Why: every config list in ``gpu_track.bench`` was cut to fit the H200 (232,448 B of shared memory per block). A
T4 has 64 KiB, an A10 or L4 99 KiB, so some of those configs raise OutOfResources there; a T4 has no bf16 tensor
cores and only sm_89+ has FP8. This module holds the five targets, a dtype policy per capability, and
``configs(props)``: the bench's configs per kernel, kept only where the kernel's shared memory, compiled ahead of
time for that capability (``python -m gpu_track.targets --compile``, stored in ``results/targets_compile.json``),
fits the GPU. On the H200 it returns the bench's lists unchanged.

    TRITON_INTERPRET=0 python -m gpu_track.targets --compile --out gpu_track/results/targets_compile.json
    TRITON_INTERPRET=0 python -m gpu_track.targets --compile            # the same, printed as a matrix
    TRITON_INTERPRET=0 python -m gpu_track.targets --compile --worst    # recompile each target's largest pick
    TRITON_INTERPRET=0 python -m gpu_track.targets --sass-ssd           # SSD kernels' sm_90 spills (sass_ssd.json)

Shapes are the bench's (Mamba-2.8B / 2.7B, DeepSeek-V3.2's indexer, 32 query heads of width 128); shared memory
depends on tiles and dtypes, not on sequence lengths. The stored table describes this Triton's output; another
Triton may need a little more or less.
"""
from __future__ import annotations

import json
import os
import sys
import time

if __name__ == "__main__":
    os.environ.setdefault("TRITON_INTERPRET", "0")      # compile for a GPU even where none is present

from gpu_track.devices import (ALIASES, ANNOUNCED, STORED, TARGETS, Target, announce, config_key,  # noqa: F401
                               current, dtype_policy, fits, stored_table, target, tensor_core_dtype)


# ------------------------------------------------------------------------------------------------ configs
# The sparse-attention decode sweep's (block_k, num_warps, num_stages), as bench.sparse_attention_rows builds it
# (its nsplit is a launch size, not a compiled constant).
SPARSE_ATTENTION_CANDIDATES = [(bk, nw, ns) for bk in (32, 64) for nw in (4, 8) for ns in (2, 3, 4)]


def candidates() -> dict:
    """Every config each kernel may be launched with today (on the H200): the bench's sweep lists, and the
    wrappers' defaults where the bench sweeps nothing. Keys are the bench's result names."""
    from gpu_track import bench
    return {
        "ssd_chunked": list(bench.SSD_CANDIDATES),
        "selective_scan": list(bench.SCAN_CANDIDATES),
        "selective_scan_step": [(32, 4)],                               # (block_d, num_warps): the defaults
        "lightning_indexer_bf16": list(bench.INDEXER_CANDIDATES["bf16"]),
        "lightning_indexer_fp8": list(bench.INDEXER_CANDIDATES["fp8"]),
        # (block_s, block_t, num_warps, num_stages): the prefill default (T = 8192) and the bench's tile probe
        "lightning_indexer_tile": [(64, 2, 4, 2), (128, 1, 4, 4)],
        "sparse_attention": list(SPARSE_ATTENTION_CANDIDATES),
        "fa_decode_topk": [(64, 4)],                                    # (block_s, num_warps): the defaults
        "block_sparse_attention": list(bench.BLOCK_SPARSE_CANDIDATES),
        "block_sparse_attention_decode": list(bench.BLOCK_SPARSE_DECODE_CANDIDATES),
    }


def configs(props, table: dict | None = None) -> dict:
    """{kernel: [config, ...]}: the configs of ``candidates()`` this GPU may pick, in the bench's order: those
    whose kernels, compiled for its capability (the stored table), fit its shared memory and registers (a config
    the table has not compiled for that capability is left out: not known to fit). FP8
    configs only on sm_89+. A kernel left with none is absent (the caller falls back to the wrapper's defaults
    and, off sm_89+, to the bf16/fp16 path)."""
    t = target(props)
    table = stored_table() if table is None else table
    rows = table["rows"]
    fp8 = dtype_policy(t)["fp8"]
    out = {}
    for kernel, cands in candidates().items():
        if kernel.endswith("_fp8") and not fp8:
            continue
        measured = [(c, rows.get(kernel, {}).get(config_key(c), {}).get(f"sm_{t.sm}")) for c in cands]
        keep = [c for c, row in measured if row is not None and fits(row, t)]
        if keep:
            out[kernel] = keep
    return out


# The GPUs of the hardware table, with where a student meets them (Colab's accelerator menu, 2026: T4 free; L4,
# A100 and H100 on paid plans; a department: A10 / RTX cards, A100, H100)
WHERE = {"T4": "Colab free tier", "A10": "departments (A10, RTX 30xx)", "L4": "Colab paid plans",
         "A100": "Colab paid plans, departments", "H200": "H100: Colab paid plans; H100/H200 clusters"}
SHOWN = {"T4": "T4", "A10": "A10 / RTX 30xx", "L4": "L4", "A100": "A100", "H200": "H100 / H200"}


def hardware_rows(table: dict | None = None) -> list:
    """One row per student GPU (T4, A10, L4, A100, H100/H200): what the kernels compute in there, how many of the
    bench's configs the chooser keeps (compiled ahead of time for that capability and fitting its shared memory and
    registers), and which test backs the row. Derived from :func:`dtype_policy` and :func:`configs`, not typed."""
    table = stored_table() if table is None else table
    rows = []
    for name in ("T4", "A10", "L4", "A100", "H200"):
        t = TARGETS[name]
        pol = dtype_policy(t)
        # read from the stored table alone (every candidate compiled for every capability), not from the bench's
        # lists: notebook 09 prints this where neither torch nor Triton is installed
        listed = {k: v for k, v in table["rows"].items() if pol["fp8"] or not k.endswith("_fp8")}
        kept = {k: [c for c, r in v.items() if r.get(f"sm_{t.sm}") is not None and fits(r[f"sm_{t.sm}"], t)]
                for k, v in listed.items()}
        n_kept = sum(len(v) for v in kept.values())
        n_all = sum(len(v) for v in listed.values())
        cut = sorted(k for k in kept if len(kept[k]) < len(listed[k]))
        rows.append({
            "gpu": SHOWN[name], "sm": f"sm_{t.sm}", "where": WHERE[name],
            "smem_KiB": t.smem_per_block // 1024,
            "dot": ("fp16 (bf16 inputs cast), fp32 accumulation" if pol["dot"] == "fp16"
                    else "bf16 or fp16, fp32 accumulation"),
            "fp8": "FP8 e4m3" if pol["fp8"] else f"no FP8: the {pol['dot']} path",
            "configs": f"{n_kept} of {n_all}" + (f" (fewer for {', '.join(cut)})" if cut else ""),
            "dot_dtype": pol["dot"], "fp8_runs": pol["fp8"], "kept": n_kept, "listed": n_all, "cut": cut,
            "native": "tested natively (kernels, sanitizer, every notebook)" if name == "H200"
                      else "compiled ahead of time, not run on one",
            "tests": "tests/test_gpu_targets.py" + (", tests/test_gpu_kernels.py, tests/test_gpu_sanitizer.py"
                                                   if name == "H200" else ""),
        })
    return rows


def hardware_markdown(table: dict | None = None) -> str:
    """:func:`hardware_rows` as the README's markdown table."""
    head = ("| GPU | capability | where students have it | shared memory / block | tensor-core inputs | "
            "lightning indexer FP8 | bench configs kept | run here | backed by |")
    lines = [head, "|" + " --- |" * 9]
    for r in hardware_rows(table):
        tests = ", ".join(f"`{x}`" for x in r["tests"].split(", "))
        lines.append(f"| {r['gpu']} | {r['sm']} | {r['where']} | {r['smem_KiB']} KiB | {r['dot']} | {r['fp8']} | "
                     f"{r['configs']} | {r['native']} | {tests} |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ compiling
def _io(cap: int, kernel: str) -> str:
    """The tensor-core input dtype compiled for this capability (the dtype policy)."""
    if kernel.endswith("_fp8") and cap >= 89:
        return "fp8e4nv"
    return "fp16" if cap < 80 else "bf16"


def launches(kernel: str, config, cap: int) -> list:
    """The kernel launches ``config`` makes, at the bench's shapes, as (fn, signature, constexprs, num_warps,
    num_stages or None for Triton's default): what ``triton.compile`` needs. Mirrors each wrapper's tile logic."""
    import triton.language as tl
    from gpu_track import block_sparse, common, fa_decode_topk, lightning_indexer, selective_scan, ssd
    io = _io(cap, kernel)
    f32, acc = "*fp32", tl.float32
    prec = "tf32"                                       # common.dot_precision of a 16-bit (or FP8) input

    def sig(ptrs: dict, ints, const: dict) -> dict:
        s = dict(ptrs)
        s.update({k: "i32" for k in ints})
        s.update({k: "constexpr" for k in const})
        return s

    if kernel == "ssd_chunked":                         # H 80, P 64, N 128 (Mamba-2 2.7B)
        ch, bp, nw, ns, two, bn, _sd, pblock, pchunks, hg = config
        P, N, dmin = 64, 128, common.DOT_MIN
        Q, BP = max(dmin, common.pow2(ch)), max(dmin, min(bp, common.pow2(P)))
        if not two:
            c = dict(HAS_D=False, HAS_H0=False, Q=Q, BLOCK_P=BP, BLOCK_N=common.pow2(N, dmin), ACC_DTYPE=acc,
                     DOT_PRECISION=prec)
            p = {"x_ptr": f"*{io}", "dt_ptr": f32, "A_ptr": f32, "B_ptr": f"*{io}", "C_ptr": f"*{io}", "D_ptr": f32,
                 "h0_ptr": f32, "y_ptr": f"*{io}", "h_last_ptr": f32}
            return [(ssd.KERNELS["single"], sig(p, ("L", "H", "P", "N"), c), c, nw, ns)]
        c1 = dict(Q=Q, HEADS=hg, BLOCK_P=BP, BLOCK_N=max(dmin, min(bn, common.pow2(N))), ACC_DTYPE=acc,
                  DOT_PRECISION=prec)
        p1 = {"x_ptr": f"*{io}", "dt_ptr": f32, "A_ptr": f32, "B_ptr": f"*{io}", "states_ptr": f"*{io}",
              "decay_ptr": f32}
        c2 = dict(HAS_H0=False, BLOCK=pblock, KC=pchunks, ACC_DTYPE=acc)
        p2 = {"states_ptr": f"*{io}", "decay_ptr": f32, "h0_ptr": f32, "h_last_ptr": f32}
        c3 = dict(HAS_D=False, HAS_H0=False, Q=Q, HEADS=hg, BLOCK_P=BP, BLOCK_N=common.pow2(N, dmin),
                  ACC_DTYPE=acc, DOT_PRECISION=prec)
        p3 = {"x_ptr": f"*{io}", "dt_ptr": f32, "A_ptr": f32, "B_ptr": f"*{io}", "C_ptr": f"*{io}", "D_ptr": f32,
              "states_ptr": f"*{io}", "h0_ptr": f32, "y_ptr": f"*{io}"}
        return [(ssd.KERNELS["chunk_state"], sig(p1, ("L", "H", "P", "N", "n_chunks"), c1), c1, nw, ns),
                (ssd.KERNELS["state_pass"], sig(p2, ("PN", "n_chunks"), c2), c2, 4, None),
                (ssd.KERNELS["out"], sig(p3, ("L", "H", "P", "N", "n_chunks"), c3), c3, nw, ns)]
    if kernel in ("selective_scan", "selective_scan_step"):     # N 16 (Mamba-2.8B)
        p = {"x_ptr": f"*{io}", "dt_ptr": f"*{io}", "A_ptr": f32, "B_ptr": f"*{io}", "C_ptr": f"*{io}",
             "D_ptr": f32, "h0_ptr": f32, "y_ptr": f"*{io}", "h_last_ptr": f32}
        if kernel == "selective_scan_step":
            bd, nw = config
            c = dict(HAS_D=True, BLOCK_D=bd, BLOCK_N=16, ACC_DTYPE=acc)
            p = {"x_ptr": f"*{io}", "dt_ptr": f"*{io}", "A_ptr": f32, "B_ptr": f"*{io}", "C_ptr": f"*{io}",
                 "D_ptr": f32, "h_ptr": f32, "y_ptr": f32, "h_new_ptr": f32}
            return [(selective_scan.KERNELS["step"], sig(p, ("DM", "N"), c), c, nw, None)]
        variant, ch, bd, lanes, nw = config
        if variant == "sequential":
            c = dict(HAS_D=True, HAS_H0=False, BLOCK_D=bd, BLOCK_N=16, ACC_DTYPE=acc)
            return [(selective_scan.KERNELS["sequential"], sig(p, ("L", "DM", "N"), c), c, nw, None)]
        c = dict(HAS_D=True, HAS_H0=False, CHUNK=ch, BLOCK_D=bd, LANES_D=min(lanes, bd), BLOCK_N=16, ACC_DTYPE=acc)
        return [(selective_scan.KERNELS["chunked"], sig(p, ("L", "DM", "N"), c), c, nw, None)]
    if kernel.startswith("lightning_indexer"):          # Hi 64, di 128 (DeepSeek-V3.2)
        Hi, di = 64, 128
        fp8 = io == "fp8e4nv"
        p = {"q_ptr": f"*{io}", "w_ptr": f32, "k_ptr": f"*{io}", "ks_ptr": f32, "q_pos_ptr": "*i32",
             "out_ptr": f32}
        if kernel == "lightning_indexer_tile":
            bs, bt, nw, ns = config
            fn, ints = lightning_indexer.KERNELS["tile"], ("T", "S")
        else:
            (bs, nw, ns), bt = config, lightning_indexer.default_block_t(1, Hi)
            fn, ints = lightning_indexer.KERNELS["stream"], ("T", "S", "span")
        c = dict(HI=Hi, DI=di, BLOCK_T=bt, BLOCK_H=common.pow2(Hi, 1), BLOCK_D=common.pow2(di, 32 if fp8 else 16),
                 BLOCK_S=bs, HAS_KSCALE=fp8, ACC_DTYPE=acc, DOT_PRECISION=prec)
        return [(fn, sig(p, ints, c), c, nw, ns)]
    if kernel == "sparse_attention":                    # Hq 32, Hkv 4, d 128; the split-K decode form
        from gpu_track import sparse_attention
        bk, nw, ns = config
        c = dict(HQ=32, HKV=4, G=8, D=128, DV=128, BLOCK_G=16, BLOCK_D=128, BLOCK_DV=128, BLOCK_K=bk,
                 HAS_SINK=False, ACC_DTYPE=acc, DOT_PRECISION=prec, SPLIT=True)
        p = {"q_ptr": f"*{io}", "k_ptr": f"*{io}", "v_ptr": f"*{io}", "idx_ptr": "*i32", "sink_ptr": f32,
             "o_ptr": f"*{io}", "part_m_ptr": f32, "part_l_ptr": f32, "part_acc_ptr": f32, "scale": "fp32"}
        return [(sparse_attention.KERNELS["attention"], sig(p, ("T", "S", "n_idx", "split_len", "n_splits"), c), c,
                 nw, ns)]
    if kernel == "fa_decode_topk":                      # Hq 32, Hkv 4, d 128
        bs, nw = config
        c1 = dict(HQ=32, HKV=4, G=8, D=128, DV=128, BLOCK_G=16, BLOCK_D=128, BLOCK_DV=128, BLOCK_S=bs,
                  ACC_DTYPE=acc, DOT_PRECISION=prec)
        p1 = {"q_ptr": f"*{io}", "k_ptr": f"*{io}", "v_ptr": f"*{io}", "logits_ptr": f32, "part_m_ptr": f32,
              "part_l_ptr": f32, "part_acc_ptr": f32, "scale": "fp32"}
        c2 = dict(HQ=32, HKV=4, G=8, BLOCK_G=8, BLOCK_S=256)
        p2 = {"logits_ptr": f32, "m_ptr": f32, "l_ptr": f32, "score_ptr": f32}
        return [(fa_decode_topk.KERNELS["split"], sig(p1, ("S", "split_len", "n_splits"), c1), c1, nw, None),
                (fa_decode_topk.KERNELS["group_score"], sig(p2, ("S", "window_start"), c2), c2, 4, None)]
    if kernel.startswith("block_sparse_attention"):     # Hq 32, Hkv 2, d 128, 64-token blocks
        if kernel == "block_sparse_attention":
            (bt, nw, ns), split = config, False
        else:
            (nsplit, nw, ns), bt = config, 1
            split = nsplit > 1
        c = dict(HQ=32, HKV=2, G=16, D=128, DV=128, KV_BLOCK=64, BLOCK_T=bt, BLOCK_G=16, BLOCK_KV=64, BLOCK_D=128,
                 BLOCK_DV=128, ACC_DTYPE=acc, DOT_PRECISION=prec, SPLIT=split)
        p = {"q_ptr": f"*{io}", "k_ptr": f"*{io}", "v_ptr": f"*{io}", "block_idx_ptr": "*i32", "q_pos_ptr": "*i32",
             "o_ptr": f"*{io}", "part_m_ptr": f32, "part_l_ptr": f32, "part_acc_ptr": f32, "scale": "fp32"}
        return [(block_sparse.KERNELS["attention"], sig(p, ("T", "S", "n_listed", "split_len", "n_splits"), c), c, nw,
                 ns)]
    raise ValueError(f"kernel must be one of {sorted(candidates())}, got {kernel!r}")


def compile_launch(fn, signature: dict, constexprs: dict, cap: int, num_warps: int, num_stages):
    """Triton's compiled kernel for compute capability ``cap`` (75, 80, ...), ahead of time, no GPU needed."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    opts = {"num_warps": num_warps}
    if num_stages is not None:
        opts["num_stages"] = num_stages
    # pointers 16-byte aligned, as every torch allocation the wrappers pass: without it Triton cannot use async
    # copies and pipelines nothing, and the shared memory it reports is a fraction of what a launch needs (the
    # bf16 indexer with 256-key tiles and 4 stages: 81,920 B unaligned, 279,552 B aligned, as measured on the H200)
    attrs = {(i,): [["tt.divisibility", 16]] for i, ty in enumerate(signature.values()) if ty.startswith("*")}
    return triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs),
                          target=GPUTarget("cuda", cap, 32), options=opts)


def ssd_mix(config) -> list:
    """The SSD kernels one bench config launches (``gpu_track.bench.SSD_CANDIDATES``: chunk, block_p, warps, stages,
    two_pass, ...), each compiled for sm_90 as the bench's bf16 inputs compile: [{"kernel", "registers",
    "instructions" (static), "local_loads", "local_stores" (LDL/STL: register spills), "exps" (MUFU), "shared"}].
    Why: the output kernel's time is far above its byte and FLOP floors; spills are what the profile blamed."""
    from gpu_track.sass import instruction_mix
    rows = []
    for fn, sig, const, nw, ns in launches("ssd_chunked", tuple(config), 90):
        k = compile_launch(fn, sig, const, 90, nw, ns)
        ops, regs = instruction_mix(k)
        rows.append({"kernel": fn.__name__.strip("_"), "registers": regs, "instructions": sum(ops.values()),
                     "local_loads": ops.get("LDL", 0), "local_stores": ops.get("STL", 0),
                     "exps": ops.get("MUFU", 0), "shared": int(k.metadata.shared)})
    return rows


def measure(kernel: str, config, cap: int, cache: dict) -> dict:
    """Compile every launch of (kernel, config) for ``cap``: {"ok", "error", "kernels": [{"name", "shared",
    "regs", "spills", "threads"}]}. ``cache`` shares launches that several configs make (the SSD state pass)."""
    from gpu_track.sass import resource_usage
    row = {"ok": True, "error": None, "kernels": []}
    try:
        specs = launches(kernel, config, cap)
    except Exception as e:  # noqa: BLE001  (a config this target cannot express is a finding, not a crash)
        return {"ok": False, "error": f"{type(e).__name__}: {str(e)[:200]}", "kernels": []}
    for fn, sig, const, nw, ns in specs:
        key = (fn.__name__, cap, nw, ns, json.dumps({k: str(v) for k, v in sig.items()}, sort_keys=True),
               json.dumps({k: str(v) for k, v in const.items()}, sort_keys=True))
        if key not in cache:
            try:
                k = compile_launch(fn, sig, const, cap, nw, ns)
                regs, spills = resource_usage(k)
                cache[key] = {"name": fn.__name__, "shared": int(k.metadata.shared), "regs": regs,
                              "spills": spills, "threads": 32 * nw}
            except Exception as e:  # noqa: BLE001
                msg = str(e).strip().splitlines()
                cache[key] = {"name": fn.__name__, "error": f"{type(e).__name__}: {(msg[-1] if msg else '')[:300]}"}
        got = cache[key]
        if "error" in got:
            row["ok"], row["error"] = False, got["error"]
        else:
            row["kernels"].append(got)
    return row


def compile_all(caps=None, kernels=None, out: str | None = None) -> dict:
    """Compile every (kernel, config) of ``candidates()`` for every target capability: the table ``configs``
    reads. {"triton", "rows": {kernel: {config key: {"sm_XX": row}}}, "seconds", "compiles"}."""
    import triton
    caps = caps or [t.sm for t in TARGETS.values()]
    cache: dict = {}
    t0 = time.time()
    rows: dict = {}
    for kernel, cands in candidates().items():
        if kernels and kernel not in kernels:
            continue
        for c in cands:
            rows.setdefault(kernel, {})[config_key(c)] = {f"sm_{cap}": measure(kernel, c, cap, cache) for cap in caps}
            if out:                    # written as it goes: a long run cut short keeps what it compiled
                with open(out, "w") as fh:
                    json.dump({"triton": triton.__version__, "rows": rows, "seconds": round(time.time() - t0, 1),
                               "compiles": len(cache)}, fh, indent=1, sort_keys=True)
    return {"triton": triton.__version__, "rows": rows, "seconds": round(time.time() - t0, 1), "compiles": len(cache)}


# sm_86 and sm_89 take sm_80's code path in Triton (mma.sync, cp.async pipelining: the same shared-memory
# layout; only ptxas's target differs), so the stored table compiles bf16/fp16 configs for sm_80 and copies their
# rows to sm_86 and sm_89 (marked "as": "sm_80"); sm_89's FP8 configs are compiled for sm_89. The compile test
# recompiles each target's largest pick for that target's own capability, which checks the copy.
SAME_AS_SM80 = (86, 89)


def merge(*tables) -> dict:
    """One stored table from partial ``compile_all`` runs, sm_80's rows copied to ``SAME_AS_SM80`` where absent."""
    versions = {t["triton"] for t in tables}
    if len(versions) != 1:
        raise ValueError(f"tables must come from one Triton, got versions {sorted(versions)}")
    rows: dict = {}
    for t in tables:
        for kernel, by in t["rows"].items():
            for c, by_cap in by.items():
                rows.setdefault(kernel, {}).setdefault(c, {}).update(by_cap)
    for by in rows.values():
        for by_cap in by.values():
            for cap in SAME_AS_SM80:
                if f"sm_{cap}" not in by_cap and "sm_80" in by_cap:
                    by_cap[f"sm_{cap}"] = dict(by_cap["sm_80"], **{"as": "sm_80"})
    return {"triton": versions.pop(), "rows": rows, "seconds": round(sum(t["seconds"] for t in tables), 1),
            "compiles": sum(t["compiles"] for t in tables)}


def worst_cases(table: dict, caps=None) -> list:
    """(kernel, config, target name) per kernel and target: of the configs ``configs`` lets that target pick, the
    one whose stored shared memory is the largest (the case closest to the limit). Compiling these checks the
    table's claims in a fraction of the time of every (kernel, target, config)."""
    out = []
    for t in TARGETS.values():
        if caps and t.sm not in caps:
            continue
        for kernel, cands in configs(t, table).items():
            by = table["rows"][kernel]
            worst = max(cands, key=lambda c: max(k["shared"] for k in by[config_key(c)][f"sm_{t.sm}"]["kernels"]))
            out.append((kernel, worst, t.name))
    return out


def compile_worst(caps=None) -> dict:
    """Compile ``worst_cases`` of the stored table afresh: {"triton", "rows": [{kernel, config, target, row,
    stored}], "seconds", "compiles"}."""
    import triton
    table = stored_table()
    cache: dict = {}
    t0 = time.time()
    rows = []
    for kernel, c, name in worst_cases(table, caps):
        sm = TARGETS[name].sm
        rows.append({"kernel": kernel, "config": config_key(c), "target": name, "row": measure(kernel, c, sm, cache),
                     "stored": table["rows"][kernel][config_key(c)][f"sm_{sm}"]})
    return {"triton": triton.__version__, "stored_triton": table["triton"], "rows": rows,
            "seconds": round(time.time() - t0, 1), "compiles": len(cache)}


def matrix(table: dict) -> list:
    """(kernel, target, configs it may pick / candidates, first failure or None) for every kernel and target."""
    out = []
    for t in TARGETS.values():
        chosen = configs(t, table)
        for kernel, cands in candidates().items():
            by_cfg = table["rows"].get(kernel, {})
            rows = [by_cfg.get(config_key(c), {}).get(f"sm_{t.sm}") for c in cands]
            notes = []
            if kernel.endswith("_fp8") and not dtype_policy(t)["fp8"]:
                notes.append("no FP8 here (bf16/fp16 path)")
            fail = next((r["error"] for r in rows if r is not None and not r["ok"]), None)
            if fail:
                notes.append(fail)
            over = [max(k["shared"] for k in r["kernels"]) for r in rows
                    if r is not None and r["ok"] and not fits(r, t)]
            if over:
                notes.append(f"{len(over)} need more shared memory than {t.smem_per_block} B (up to {max(over)} B)")
            if None in rows:
                notes.append(f"{rows.count(None)} not compiled for sm_{t.sm}")
            out.append((kernel, t.name, len(chosen.get(kernel, [])), len(cands), "; ".join(notes) or None))
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from gpu_track import sass
    if not sass.available():
        print("this Triton cannot compile ahead of time here (no ahead-of-time API or no bundled cuobjdump)")
        return 1
    if "--merge" in argv:              # --merge OUT IN [IN ...]
        i = argv.index("--merge")
        parts = [json.load(open(p)) for p in argv[i + 2:]]
        with open(argv[i + 1], "w") as fh:
            json.dump(merge(*parts), fh, indent=1, sort_keys=True)
        return 0
    if "--sass-ssd" in argv:          # the SSD kernels of every SSD bench candidate for sm_90, as JSON
        import triton
        from gpu_track.bench import SSD_CANDIDATES, ssd_config_json
        rows = [{"config": ssd_config_json(c), "kernels": ssd_mix(c)} for c in SSD_CANDIDATES]
        print(json.dumps({"triton": triton.__version__, "arch": "sm_90", "ssd_chunked": rows}))
        return 0
    if "--compile" not in argv:
        print(__doc__)
        return 0
    caps = [int(c) for c in argv[argv.index("--caps") + 1].split(",")] if "--caps" in argv else None
    if "--worst" in argv:
        print(json.dumps(compile_worst(caps)))
        return 0
    kernels = argv[argv.index("--kernels") + 1].split(",") if "--kernels" in argv else None
    table = compile_all(caps, kernels, argv[argv.index("--out") + 1] if "--out" in argv else None)
    if "--out" in argv:
        return 0
    if "--json" in argv:
        print(json.dumps(table))
        return 0
    print(f"Triton {table['triton']}: {table['compiles']} compiles in {table['seconds']} s")
    for kernel, name, n, total, fail in matrix(table):
        print(f"  {kernel:30s} {name:5s} {n:3d}/{total:<3d} {fail or 'ok'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
