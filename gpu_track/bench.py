"""Benchmarks of the six kernels on a GPU, against the machine's ceilings and against peers on the same inputs.

    python -m gpu_track.bench --out gpu_track/results/h200.json

Method (the device README's): first measure the ceilings (a large device-to-device copy, counting bytes read AND
written; an 8192^3 bf16 matmul on random data), then time each kernel with the median of
``triton.testing.do_bench`` at realistic shapes, with the bytes it must move and the FLOPs it must do counted by
hand. ``frac_bw = bytes / time / copy_GBps``: the fraction of the copy bandwidth the kernel reaches. Peers run on
the same inputs: torch eager references, torch.compile, FlexAttention with the same block mask, torch gather +
SDPA, and flash-linear-attention's ``chunk_simple_gla`` for the SSD scan.

Each section is guarded: an exception is recorded under ``errors`` and the run continues; the JSON is rewritten
after every row so a run cut short still leaves its rows.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import sys
import time
import traceback

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

from gpu_track import block_sparse, devices, fa_decode_topk, lightning_indexer, selective_scan, sparse_attention, ssd

BF16 = torch.bfloat16
DEV = "cuda"
RESULT: dict = {}
OUT_PATHS: list = []
QUICK = False
DRY = False   # --dry-cpu: tiny shapes on CPU under the interpreter, to test this script without a GPU


TARGET = None  # the GPU's devices.Target (HYBRID_LAB_GPU_TARGET forces one): which configs and dtypes it may take


def fitting(kernel: str, cands: list, width: int | None = None) -> list:
    """The candidates this GPU may run (as gpu_track.targets.configs: compiled for its capability in the stored
    table, fitting its shared memory and registers; no FP8 below sm_89), in the given order; all of them in the
    interpreter. ``width``: match only a candidate's first entries (the sparse-attention sweep adds a launch size)."""
    if TARGET is None:
        return list(cands)
    if kernel.endswith("_fp8") and not devices.dtype_policy(TARGET)["fp8"]:
        return []
    rows = devices.stored_table()["rows"].get(kernel, {})

    def ok(c) -> bool:
        row = rows.get(devices.config_key(tuple(c[:width]) if width else c), {}).get(f"sm_{TARGET.sm}")
        return row is not None and devices.fits(row, TARGET)
    return [c for c in cands if ok(c)]


def save():
    for p in OUT_PATHS:
        os.makedirs(os.path.dirname(p) or ".", exist_ok=True)
        with open(p, "w") as f:
            json.dump(RESULT, f, indent=1)


def bench(fn, rep=100):
    """Median milliseconds over repeated launches (do_bench flushes L2 between runs)."""
    if DRY:
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    return float(do_bench(fn, warmup=25, rep=rep, return_mode="median"))


L2_ROTATE_BYTES = 512 * 2 ** 20   # > 10x the H200's 50 MB L2


def n_copies(nbytes):
    """Input sets to cycle through so that one pass over them moves > L2_ROTATE_BYTES (data from HBM, not L2)."""
    return 1 if DRY else max(1, min(32, math.ceil(L2_ROTATE_BYTES / max(nbytes, 1))))


def bench_graph(calls, rep=100):
    """Median ms per call for short (decode) launches: the calls, cycling over distinct input sets, are replayed
    from a CUDA graph, so Python launch overhead (tens of microseconds) does not hide the GPU time, as in a serving
    engine that replays graphs. Falls back to do_bench if capture fails."""
    def run():
        for c in calls:
            c()
    if DRY:
        return bench(run) / len(calls)
    try:
        run()
        torch.cuda.synchronize()
        return float(triton.testing.do_bench_cudagraph(run, rep=rep, return_mode="median")) / len(calls)
    except Exception as e:  # noqa: BLE001
        RESULT["errors"].append({"section": "graph capture", "error": repr(e)[:300]})
        return bench(run) / len(calls)


def try_graph(calls, rep=100):
    try:
        return bench_graph(calls, rep)
    except Exception as e:  # noqa: BLE001
        RESULT["errors"].append({"section": "peer (graph)", "error": repr(e)[:300]})
        return None


def row(kernel, phase, shape, ms, nbytes, flops, peers: dict, **extra):
    peers = {k: v for k, v in peers.items() if v is not None}
    best = min(peers, key=peers.get) if peers else None
    r = {"kernel": kernel, "phase": phase, "shape": shape, "ms": round(ms, 5), "bytes": int(nbytes),
         "flops": int(flops), "frac_bw": round(nbytes / (ms * 1e-3) / 1e9 / RESULT["copy_GBps"], 4),
         "TFLOPs": round(flops / (ms * 1e-3) / 1e12, 2),
         "peer": best, "peer_ms": None if best is None else round(peers[best], 5),
         "peers": {k: round(v, 5) for k, v in peers.items()}}
    r.update(extra)
    RESULT["rows"].append(r)
    print(f"{kernel:24s} {phase:7s} {json.dumps(shape):70s} {ms:8.4f} ms  frac_bw {r['frac_bw']:.3f}  "
          f"{r['TFLOPs']:7.1f} TF/s  peers {r['peers']}", flush=True)
    save()


def guarded(name, fn):
    t0 = time.time()
    try:
        fn()
    except Exception as e:  # record and go on: one broken peer must not lose the other rows
        RESULT["errors"].append({"section": name, "error": repr(e)[:500], "trace": traceback.format_exc()[-1500:]})
        print(f"!! {name}: {e!r}", flush=True)
        save()
    print(f"-- {name}: {time.time() - t0:.1f} s", flush=True)


def try_ms(fn, rep=100):
    try:
        fn()
        if not DRY:
            torch.cuda.synchronize()
        return bench(fn, rep)
    except Exception as e:
        RESULT["errors"].append({"section": getattr(fn, "__name__", "peer"), "error": repr(e)[:300]})
        return None


def compiled(fn):
    """torch.compile'd peer (None if compilation fails)."""
    try:
        return torch.compile(fn, dynamic=False)
    except Exception:
        return None


# ------------------------------------------------------------------------------------------------ ceilings
def ceilings():
    n = 2 * 1024 ** 3 // 2 if not DRY else 2 ** 20  # 2 GiB of bf16 per buffer
    a = torch.randn(n, device=DEV, dtype=BF16)
    b = torch.empty_like(a)
    ms = bench(lambda: b.copy_(a))
    RESULT["copy_GBps"] = round(2 * a.numel() * 2 / (ms * 1e-3) / 1e9, 1)
    del a, b
    n = 8192 if not DRY else 256
    x = torch.randn(n, n, device=DEV, dtype=BF16)
    y = torch.randn(n, n, device=DEV, dtype=BF16)
    ms = bench(lambda: x @ y)
    RESULT["bf16_TFLOPs"] = round(2 * n ** 3 / (ms * 1e-3) / 1e12, 1)
    print(f"copy {RESULT['copy_GBps']} GB/s, bf16 matmul {RESULT['bf16_TFLOPs']} TFLOP/s", flush=True)
    save()


# ------------------------------------------------------------------------------------------------ token-sparse
def random_index(B, T, Hkv, S, K, window=0):
    """K unique positions per (b, t, group) among the first S (window ∪ top-k style: the last `window` forced)."""
    r = torch.rand(B * T * Hkv, S, device=DEV)
    if window:
        r[:, S - window:] = 2.0                      # forced local window
    return r.topk(K, dim=-1).indices.reshape(B, T, Hkv, K).to(torch.int32)


def gather_sdpa(q, k, v, idx):
    """Peer: gather the selected K/V rows with torch, then SDPA (GQA) per query token."""
    B, T, Hq, d = q.shape
    Hkv, K = idx.shape[2], idx.shape[3]
    ii = idx.long().clamp_min(0)
    bi = torch.arange(B, device=q.device)[:, None, None, None]
    gi = torch.arange(Hkv, device=q.device)[None, None, :, None]
    ks = k[bi, ii, gi]                                # (B, T, Hkv, K, d)
    vs = v[bi, ii, gi]
    qq = q.reshape(B * T, Hq, 1, d)
    ks = ks.reshape(B * T, Hkv, K, d)
    vs = vs.reshape(B * T, Hkv, K, vs.shape[-1])
    o = torch.nn.functional.scaled_dot_product_attention(qq, ks, vs, enable_gqa=True)
    return o.reshape(B, T, Hq, -1)


def sparse_attention_rows():
    Hq, Hkv, d = 32, 4, 128
    shapes = [(64, 32768, 2048), (64, 32768, 1152), (8, 131072, 2048), (8, 131072, 1152), (1, 131072, 2048)]
    if QUICK:
        shapes = shapes[:2]
    if DRY:
        shapes = [(2, 300, 40), (2, 300, 1152 // 16)]
    cfg_best = None
    for B, S, K in shapes:
        k = torch.randn(B, S, Hkv, d, device=DEV, dtype=BF16)
        v = torch.randn(B, S, Hkv, d, device=DEV, dtype=BF16)
        q = torch.randn(B, 1, Hq, d, device=DEV, dtype=BF16)
        nbytes = B * Hkv * K * 2 * d * 2 + q.numel() * 2 * 2 + B * Hkv * K * 4
        idxs = [random_index(B, 1, Hkv, S, K, window=128 if K == 1152 else 0) for _ in range(n_copies(nbytes))]
        sorted_idxs = [i.sort(dim=-1).values for i in idxs]

        def ours(c, ii):
            return [lambda i=i: sparse_attention.sparse_attention(q, k, v, i, block_k=c[0], num_warps=c[1], num_stages=c[2],
                                                                  nsplit=c[3]) for i in ii]
        if cfg_best is None:                          # manual autotune on the first shape (interpreter: never)
            nb = triton.cdiv(K, 32)
            base = max(1, min(nb, 528 // (B * Hkv)))
            cands = [(bk, nw, ns, sp) for bk in (32, 64) for nw in (4, 8) for ns in (2, 3, 4) for sp in (base, 2 * base)]
            cands = fitting("sparse_attention", cands, 3) if not DRY else cands[:1]
            times = {c: bench_graph(ours(c, idxs), 50) for c in cands}
            cfg_best = min(times, key=times.get)
            RESULT["config"]["sparse_attention"] = {"block_k": cfg_best[0], "num_warps": cfg_best[1],
                                                    "num_stages": cfg_best[2], "nsplit_at_B64": cfg_best[3]}
        c = cfg_best[:3] + (None if B != shapes[0][0] else cfg_best[3],)
        ms = bench_graph(ours(c, idxs))
        ms_sorted = bench_graph(ours(c, sorted_idxs))
        flops = 2 * B * Hq * K * 2 * d
        peers = {"torch gather+SDPA (eager)": try_graph([lambda i=i: gather_sdpa(q, k, v, i) for i in idxs])}
        if B == 8 and K == 2048:
            cg = compiled(gather_sdpa)
            if cg:
                peers["torch gather+SDPA (torch.compile)"] = try_ms(lambda: cg(q, k, v, idxs[0]))
        row("sparse_attention", "decode", {"B": B, "S": S, "K": K, "Hq": Hq, "Hkv": Hkv, "d": d, "dtype": "bf16"},
            ms, nbytes, flops, peers, input_sets=len(idxs), ms_sorted_idx=round(ms_sorted, 5),
            note="CUDA-graph replay over input sets cycling past the L2; ms_sorted_idx: same sets sorted by position")
        del k, v
    # prefill: every query of an 8K prompt reads its own 2,048 positions
    B, T, S, K = (1, 8192, 8192, 2048) if not DRY else (1, 8, 64, 16)
    k = torch.randn(B, S, Hkv, d, device=DEV, dtype=BF16)
    v = torch.randn(B, S, Hkv, d, device=DEV, dtype=BF16)
    q = torch.randn(B, T, Hq, d, device=DEV, dtype=BF16)
    idx = random_index(B, T, Hkv, S, K)
    bk, nw, ns, _ = cfg_best
    ms = bench(lambda: sparse_attention.sparse_attention(q, k, v, idx, block_k=bk, num_warps=nw, num_stages=ns), 50)
    nbytes = B * T * Hkv * K * 2 * d * 2 + 2 * q.numel() * 2 + idx.numel() * 4
    row("sparse_attention", "prefill", {"B": B, "T": T, "S": S, "K": K, "Hq": Hq, "Hkv": Hkv, "d": d, "dtype": "bf16"},
        ms, nbytes, 2 * B * T * Hq * K * 2 * d, {"torch gather+SDPA (eager)": try_ms(lambda: gather_sdpa(q, k, v, idx), 20)},
        note="no causal structure used: each query gathers its own rows (the rows reuse comes only from L2)")


# ------------------------------------------------------------------------------------------------ indexer
def indexer_torch(q, w, k):
    """Peer: the same scores in torch (einsum -> ReLU -> weighted sum), causal mask by position."""
    S, T = k.shape[1], q.shape[1]
    z = torch.einsum("btjd,bsd->btjs", q, k).float().relu_()
    sc = torch.einsum("btj,btjs->bts", w.float(), z)
    vis = torch.arange(S, device=q.device)[None, :] <= torch.arange(S - T, S, device=q.device)[:, None]
    return sc.masked_fill(~vis, float("-inf"))


@triton.jit
def _empty(x_ptr):
    tl.store(x_ptr + tl.program_id(0), 0.0)


def launch_floor():
    """The fixed cost of one and of two graph-replayed launches of an empty kernel (ms): what a decode step that
    moves only a few MB cannot go below, whatever its bytes (stored once under ``launch_floor_ms``)."""
    if "launch_floor_ms" in RESULT or DRY:
        return RESULT.get("launch_floor_ms")
    x = torch.zeros(1024, device=DEV)
    one = bench_graph([lambda: _empty[(1,)](x)] * 16)
    two = bench_graph([lambda: (_empty[(1,)](x), _empty[(132,)](x))] * 16)
    RESULT["launch_floor_ms"] = {"1 launch": round(one, 5), "2 launches": round(two, 5), "3 launches": round(
        bench_graph([lambda: (_empty[(1,)](x), _empty[(132,)](x), _empty[(4,)](x))] * 16), 5)}
    return RESULT["launch_floor_ms"]


def indexer_bytes(B, S, T, Hi, di, elem):
    """Bytes one score pass must move: keys (di x elem per token, + a float32 scale per token in FP8), the float32
    scores written, q (elem) and w (bf16 in bf16; the float32 folded weights in FP8)."""
    scale = 4 if elem == 1 else 0
    return B * S * (di * elem + scale) + B * T * S * 4 + B * T * Hi * di * elem + B * T * Hi * (4 if elem == 1 else 2)


# (block_s, num_warps, num_stages) per key format: every config the decode sweep may pick (tests/sanitizer_cases.py
# runs them all). bf16 keys with block_s 256 and 4 stages need 279,552 B of shared memory, more than the H200's
# 232,448 B (OutOfResources on the H200): left out. FP8 keys (half the bytes per tile) fit at every size.
INDEXER_CANDIDATES = {
    "bf16": [(bs, nw, ns) for bs in (64, 128, 256) for nw in (4, 8) for ns in (2, 3, 4) if not (bs == 256 and ns == 4)],
    "fp8": [(bs, nw, ns) for bs in (64, 128, 256) for nw in (4, 8) for ns in (2, 3, 4)],
}


def indexer_rows():
    Hi, di = 64, 128
    shapes = [(64, 131072), (64, 32768), (8, 131072), (1, 131072)] if not QUICK else [(8, 131072)]
    shapes = shapes if not DRY else [(8, 3000), (1, 3000)]
    floor = launch_floor()
    cfg = {}
    for B, S in shapes:
        q = torch.randn(B, 1, Hi, di, device=DEV, dtype=BF16)
        w = torch.rand(B, 1, Hi, device=DEV, dtype=BF16)
        for form in ("bf16", "fp8") if TARGET is None or devices.dtype_policy(TARGET)["fp8"] else ("bf16",):
            nbytes = indexer_bytes(B, S, 1, Hi, di, 2 if form == "bf16" else 1)
            if form == "bf16":
                ks = [torch.randn(B, S, di, device=DEV, dtype=BF16) for _ in range(n_copies(nbytes))]
                ops = [(q, w, k, None) for k in ks]
            else:
                q8, qs = lightning_indexer.quantize_fp8(q)
                wq = w.float() * qs
                ops = []
                for _ in range(n_copies(nbytes)):
                    k8, kscale = lightning_indexer.quantize_fp8(torch.randn(B, S, di, device=DEV, dtype=BF16))
                    ops.append((q8, wq, k8, kscale))

            def ours(c, nsplit_mult=1, variant="stream"):
                span = None
                if variant == "stream" and nsplit_mult != 1:
                    span = max(c[0], triton.cdiv(S, max(1, nsplit_mult * 528 // B)))
                return [lambda o=o: lightning_indexer.indexer_scores(o[0], o[1], o[2], block_s=c[0], num_warps=c[1],
                                                                     num_stages=c[2], k_scale=o[3], variant=variant,
                                                                     span=span) for o in ops]
            if form not in cfg:                       # manual sweep on the first shape (interpreter: one config)
                cands = fitting(f"lightning_indexer_{form}", INDEXER_CANDIDATES[form]) if not DRY else INDEXER_CANDIDATES[form][:1]
                times = {}
                for c in cands:
                    try:
                        times[c] = bench_graph(ours(c), 50)
                    except Exception as e:  # noqa: BLE001  (recorded: a config that fails is a finding)
                        RESULT["errors"].append({"section": f"indexer {form} config {c}", "error": repr(e)[:200]})
                cfg[form] = min(times, key=times.get)
                RESULT["config"][f"lightning_indexer_{form}"] = {"block_s": cfg[form][0], "num_warps": cfg[form][1],
                                                                 "num_stages": cfg[form][2], "variant": "stream"}
            c = cfg[form]
            per_split = {m: bench_graph(ours(c, m), 50) for m in ((1, 2, 4) if not DRY else (1,))}
            mult = min(per_split, key=per_split.get)
            ms = bench_graph(ours(c, mult))
            tile_ms = bench_graph(ours((128, 4, 4), 1, "tile"), 50) if form == "bf16" else None
            o = ops[0]
            scores = lightning_indexer.indexer_scores(o[0], o[1], o[2], block_s=c[0], num_warps=c[1], num_stages=c[2],
                                                      k_scale=o[3])
            topk_ms = bench(lambda: torch.topk(scores, min(2048, S), dim=-1))
            peers = {}
            if form == "bf16":
                peers["torch einsum (eager)"] = try_graph([lambda o=o: indexer_torch(o[0], o[1], o[2]) for o in ops])
                if B == 8:
                    ci = compiled(indexer_torch)
                    peers["torch einsum (torch.compile)"] = try_ms(lambda: ci(q, w, ops[0][2])) if ci else None
            extra = {}
            if form == "fp8" and B == 8:             # what FP8 costs in selection quality, on these random keys
                k_bf = ops[0][2].to(torch.float32) * ops[0][3][..., None]
                ref = lightning_indexer.indexer_scores(q.float(), w.float(), k_bf)
                kk = min(2048, S)
                a_i, b_i = torch.topk(scores, kk, dim=-1).indices, torch.topk(ref, kk, dim=-1).indices
                hit = (a_i[..., :, None] == b_i[..., None, :]).any(-1).float().mean()
                RESULT["checks"]["indexer_fp8_topk2048_recall_vs_fp32_on_dequantized_keys"] = round(float(hit), 4)
                extra["topk_recall_vs_fp32"] = round(float(hit), 4)
            if B == 1 and floor:
                extra["launch_floor_ms"] = floor["1 launch"]
            row("lightning_indexer", "decode", {"B": B, "S": S, "Hi": Hi, "di": di, "dtype": form}, ms, nbytes,
                2 * B * Hi * di * S, peers, topk_ms_k2048=round(topk_ms, 5), input_sets=len(ops), launches=1,
                nsplit_mult=mult, tile_variant_ms=None if tile_ms is None else round(tile_ms, 5),
                config={"block_s": c[0], "num_warps": c[1], "num_stages": c[2], "variant": "stream"},
                note="score pass timed (CUDA-graph replay over input sets past the L2); bytes: keys "
                     + ("(bf16)" if form == "bf16" else "(e4m3 + a float32 scale per token)")
                     + ", float32 scores written, q and w; top-k (torch.topk, k=2048) timed separately in topk_ms_k2048;"
                     " tile_variant_ms: the one-key-tile-per-program launch of the previous run", **extra)
            del ops
    B, T, S = (1, 8192, 8192) if not DRY else (1, 8, 64)
    k = torch.randn(B, S, di, device=DEV, dtype=BF16)
    q = torch.randn(B, T, Hi, di, device=DEV, dtype=BF16)
    w = torch.rand(B, T, Hi, device=DEV, dtype=BF16)
    ms = bench(lambda: lightning_indexer.indexer_scores(q, w, k), 50)
    row("lightning_indexer", "prefill", {"B": B, "T": T, "S": S, "Hi": Hi, "di": di, "dtype": "bf16"}, ms,
        indexer_bytes(B, S, T, Hi, di, 2), 2 * B * T * Hi * di * S,
        {"torch einsum (eager)": try_ms(lambda: indexer_torch(q, w, k), 20)},
        note="prefill scores are compute-bound: compare TFLOPs with bf16_TFLOPs (causal half not skipped)")


# ------------------------------------------------------------------------------------------------ FA decode + top-k
def fa_torch(q, k, v, window, topk):
    """Peer: exact attention in torch with explicit probabilities, group sum, then top-k."""
    B, Hq, d = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    G = Hq // Hkv
    lg = torch.einsum("bgjd,bsgd->bgjs", q.reshape(B, Hkv, G, d).float(), k.float()) * d ** -0.5
    p = lg.softmax(-1)
    o = torch.einsum("bgjs,bsgd->bgjd", p, v.float()).reshape(B, Hq, -1)
    sc = p.sum(2)
    sc[..., S - window:] = float("-inf")
    return o, sc.topk(topk, dim=-1).indices


def fa_rows():
    Hq, Hkv, d, topk, window = 32, 4, 128, 1024, 128
    shapes = [(1, 131072), (8, 131072), (64, 32768), (16, 131072)] if not QUICK else [(8, 131072)]
    if DRY:
        shapes, topk = [(2, 2000)], 64
    for B, S in shapes:
        nbytes = B * S * Hkv * 2 * d * 2 + 2 * B * Hq * d * 2 + B * Hkv * S * 4
        sets = [(torch.randn(B, Hq, d, device=DEV, dtype=BF16), torch.randn(B, S, Hkv, d, device=DEV, dtype=BF16),
                 torch.randn(B, S, Hkv, d, device=DEV, dtype=BF16)) for _ in range(n_copies(nbytes))]
        q, k, v = sets[0]
        ms = bench_graph([lambda st=st: fa_decode_topk.fa_decode(st[0], st[1], st[2], window) for st in sets])
        _, score = fa_decode_topk.fa_decode(q, k, v, window)
        topk_ms = bench(lambda: torch.topk(score, topk, dim=-1))
        peers = {"SDPA (attention only, no scores)": try_graph([
            lambda st=st: torch.nn.functional.scaled_dot_product_attention(
                st[0][:, :, None], st[1].transpose(1, 2), st[2].transpose(1, 2), enable_gqa=True) for st in sets])}
        if B * S <= 8 * 131072:
            peers["torch eager (softmax + group sum + topk)"] = try_ms(lambda: fa_torch(q, k, v, window, topk), 20)
        row("fa_decode_topk", "decode", {"B": B, "S": S, "Hq": Hq, "Hkv": Hkv, "d": d, "topk": topk, "window": window,
                                         "dtype": "bf16"}, ms, nbytes, 2 * B * Hq * S * 2 * d, peers,
            topk_ms=round(topk_ms, 5), input_sets=len(sets),
            note="attention + group scores timed (CUDA-graph replay) (3 launches, logits scratch G*4 B/position written and read "
                 "again, not counted in bytes); top-k by torch.topk timed separately in topk_ms")
        del k, v, sets


# ------------------------------------------------------------------------------------------------ Mamba-1
def scan_torch_steps(x, dt, A, B, C, D):
    """Peer: the recurrence in torch, one step at a time (what a framework does without a fused kernel)."""
    Bt, L, Dm = x.shape
    h = torch.zeros(Bt, Dm, A.shape[1], device=x.device)
    ys = []
    for t in range(L):
        h = torch.exp(dt[:, t, :, None].float() * A) * h + (dt[:, t] * x[:, t]).float()[:, :, None] * B[:, t, None, :].float()
        ys.append(torch.einsum("bdn,bn->bd", h, C[:, t].float()))
    return torch.stack(ys, 1) + D * x.float()


def mufu_exp_rate():
    """exp/s of the special-function units: 16 ex2 per clock per SM (Hopper) x SMs x the max SM clock (nvidia-smi;
    1,980 MHz, the H200's boost clock, if it cannot be read). Returns (rate, how it was obtained)."""
    mhz, src = 1980.0, "H200 boost clock 1980 MHz (nvidia-smi not read)"
    if not DRY:
        try:
            import subprocess
            out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.max.sm", "--format=csv,noheader,nounits", "-i", "0"],
                                 capture_output=True, text=True, timeout=20, check=False).stdout.strip()
            mhz, src = float(out.splitlines()[0]), "nvidia-smi clocks.max.sm"
        except Exception:  # noqa: BLE001
            pass
    sms = RESULT["sms"] or 132
    return 16 * sms * mhz * 1e6, f"16 ex2/clock/SM x {sms} SMs x {mhz:.0f} MHz ({src})"


def load_mamba_peer():
    """(mamba_chunk_scan_combined, selective_state_update) from the source tree (gpu_track/peers.py), or (None,
    None) with the reason in errors."""
    try:
        from gpu_track.peers import load_mamba
        f, g, version = load_mamba()
        RESULT["mamba_ssm"] = version
        return f, g
    except Exception as e:  # noqa: BLE001
        RESULT["errors"].append({"section": "mamba_ssm import", "error": repr(e)[:400]})
        return None, None


def load_scan_cuda_peer():
    """mamba-ssm's CUDA ``selective_scan_cuda`` built for this GPU from the source tree (gpu_track/peers.py), or None
    with the reason in errors (the dry run builds nothing)."""
    if DRY:
        return None
    try:
        from gpu_track.peers import ROOT, build_selective_scan_cuda
        t0 = time.time()
        mod = build_selective_scan_cuda(build_dir=os.path.join(ROOT, ".devrun", "build", "selective_scan_cuda"))
        RESULT["config"]["selective_scan_cuda_build_s"] = round(time.time() - t0, 1)
        return mod
    except Exception as e:  # noqa: BLE001
        RESULT["errors"].append({"section": "mamba selective_scan_cuda build", "error": repr(e)[:400]})
        return None


def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


# (variant, chunk, block_d, lanes_d, num_warps): every config the benchmark may pick (tests/sanitizer_cases.py runs
# them all). Chosen from the SASS of the chunked kernel compiled for sm_90: 11.6-15 instructions per
# (t, d, n) element and no register spills (lanes_d 8: 168-254 registers; lanes_d 16 with 2 warps: 166-255;
# block_d 4: 18-21 instructions, 106-168 registers, but twice the programs: Bt = 1 has too few warps otherwise).
SCAN_CANDIDATES = ([("chunked", ch, bd, 8, 1) for ch, bd in ((16, 16), (8, 32), (16, 8), (8, 16))]
                   + [("chunked", ch, 4, 4, 1) for ch in (16, 32)]          # twice the programs (for Bt = 1)
                   + [("chunked", ch, bd, 16, nw) for ch, bd, nw in ((16, 32, 2), (16, 16, 2), (8, 32, 2), (8, 32, 1))]
                   + [("sequential", 1, bd, bd, 2) for bd in (32, 64)])
SCAN_CONFIG_KEYS = ("variant", "chunk", "block_d", "lanes_d", "num_warps")


def scan_rows():
    from gpu_track.selective_scan import scan_bytes, selective_scan_unfused
    Dm, N = 5120, 16                                   # Mamba-2.8B: d_inner 5120, d_state 16
    shapes = [(1, 8192), (4, 8192), (2, 32768)] if not QUICK else [(1, 8192)]
    if DRY:
        Dm, shapes = 32, [(1, 40)]
    exp_rate, exp_src = mufu_exp_rate()
    _, ssu = load_mamba_peer()
    scan_cuda = load_scan_cuda_peer()
    top = None
    for Bt, L in shapes:
        x = torch.randn(Bt, L, Dm, device=DEV, dtype=BF16)
        dt = torch.nn.functional.softplus(torch.randn(Bt, L, Dm, device=DEV) - 4).to(BF16)
        A = -torch.rand(Dm, N, device=DEV) * 4 - 0.5
        Bm = torch.randn(Bt, L, N, device=DEV, dtype=BF16)
        Cm = torch.randn(Bt, L, N, device=DEV, dtype=BF16)
        D = torch.ones(Dm, device=DEV)

        def run_scan(c):
            return selective_scan.selective_scan(x, dt, A, Bm, Cm, D, chunk=c[1], block_d=c[2], lanes_d=c[3],
                                                 num_warps=c[4], out_dtype=BF16, variant=c[0])
        if top is None:
            cands = fitting("selective_scan", SCAN_CANDIDATES) if not DRY else SCAN_CANDIDATES[:1] + SCAN_CANDIDATES[-1:]
            ref, _ = selective_scan.selective_scan(x[:, :512], dt[:, :512], A, Bm[:, :512], Cm[:, :512], D)
            times = {}
            for c in cands:
                try:
                    got, _ = selective_scan.selective_scan(x[:, :512], dt[:, :512], A, Bm[:, :512], Cm[:, :512], D,
                                                           chunk=c[1], block_d=c[2], lanes_d=c[3], num_warps=c[4],
                                                           variant=c[0])
                    err = rel(got, ref)
                    if not err < 1e-3:
                        raise ValueError(f"disagrees with the default config: rel err {err:.2e}")
                    times[c] = bench(lambda c=c: run_scan(c), 30)
                except Exception as e:  # noqa: BLE001
                    RESULT["errors"].append({"section": f"selective_scan config {c}", "error": repr(e)[:200]})
            top = sorted(times, key=times.get)[:3]     # swept at the first shape; the best of these per shape
            RESULT["config"]["selective_scan"] = dict(zip(SCAN_CONFIG_KEYS, top[0]))
            RESULT["config"]["selective_scan_candidates_ms"] = [[list(c), round(t, 4)] for c, t in sorted(times.items(), key=lambda kv: kv[1])]
            RESULT["config"]["selective_scan_variants_ms"] = {
                v: [list(c), round(times[c], 4)] for v in ("chunked", "sequential")
                for c in [min((c for c in times if c[0] == v), key=times.get, default=None)] if c is not None}
        per_shape = {c: bench(lambda c=c: run_scan(c), 30) for c in top} if len(top) > 1 else {top[0]: 0.0}
        cfg = min(per_shape, key=per_shape.get)
        ms = bench(lambda: run_scan(cfg))
        nbytes = scan_bytes(Bt, L, Dm, N, fused=True)
        flops = Bt * L * Dm * N * 9                    # exp, 2 mul for a/u, scan combine, C dot: ~9 per (t, d, n)
        n_exp = Bt * L * Dm * N
        bound_ms = max(n_exp / exp_rate, nbytes / (RESULT["copy_GBps"] * 1e9)) * 1e3
        peers = {}
        if Bt == 1 and L == 8192 and not DRY:
            t0 = torch.cuda.Event(enable_timing=True)
            t1 = torch.cuda.Event(enable_timing=True)
            scan_torch_steps(x[:, :64], dt[:, :64], A, Bm[:, :64], Cm[:, :64], D)
            t0.record()
            scan_torch_steps(x, dt, A, Bm, Cm, D)
            t1.record()
            torch.cuda.synchronize()
            peers["torch eager step loop (1 run)"] = t0.elapsed_time(t1)
        if scan_cuda is not None:
            try:   # mamba's own layout, made outside the timed call: u, delta (Bt, Dm, L); B, C (Bt, 1, N, L)
                u, delta = x.transpose(1, 2).contiguous(), dt.transpose(1, 2).contiguous()
                Bv, Cv = (t.transpose(1, 2).unsqueeze(1).contiguous() for t in (Bm, Cm))

                def mamba_scan():
                    return scan_cuda.fwd(u, delta, A, Bv, Cv, D, None, None, False)[0]
                RESULT["checks"][f"selective_scan_cuda_vs_ours_rel_err_Bt{Bt}_L{L}"] = rel(
                    mamba_scan().transpose(1, 2), run_scan(cfg)[0])
                peers["mamba selective_scan_cuda (CUDA)"] = bench(mamba_scan)
            except Exception as e:  # noqa: BLE001
                RESULT["errors"].append({"section": "mamba selective_scan_cuda", "error": repr(e)[:300]})
        row("selective_scan", "prefill", {"Bt": Bt, "L": L, "Dm": Dm, "N": N, "dtype": "bf16"}, ms, nbytes, flops, peers,
            config=dict(zip(SCAN_CONFIG_KEYS, cfg)), bound_ms=round(bound_ms, 5),
            frac_of_bound=round(bound_ms / ms, 4), exps=n_exp, exp_rate_per_s=exp_rate,
            bound="max(Bt·L·Dm·N exps at the MUFU rate, bytes at copy bandwidth)", exp_rate_from=exp_src)
        if Bt == shapes[0][0] and L == shapes[0][1]:
            # Lecture 10 §2.3: the fused kernel (discretize + scan in registers/SRAM) against the unfused pipeline
            # (Ā = exp(ΔA) and B̄x materialized in HBM as fp32 (Bt, L, Dm, N) tensors, then the same chunked scan)
            ch, bd, nw = 32, 8, 2     # the unfused kernel's own tiles (its time is its HBM traffic, not its layout)
            try:
                yu, _ = selective_scan_unfused(x, dt, A, Bm, Cm, D, chunk=ch, block_d=bd, num_warps=nw, out_dtype=BF16)
                yf, _ = run_scan(cfg)
                RESULT["checks"]["selective_scan_unfused_vs_fused_rel_err"] = rel(yu, yf)
                ms_u = bench(lambda: selective_scan_unfused(x, dt, A, Bm, Cm, D, chunk=ch, block_d=bd, num_warps=nw,
                                                            out_dtype=BF16), 20)
                ub = scan_bytes(Bt, L, Dm, N, fused=False)
                row("selective_scan_unfused", "prefill", {"Bt": Bt, "L": L, "Dm": Dm, "N": N, "dtype": "bf16"}, ms_u, ub,
                    flops, {}, fused_ms=round(ms, 5), fused_bytes=int(nbytes), unfused_over_fused_ms=round(ms_u / ms, 3),
                    unfused_over_fused_bytes=round(ub / nbytes, 3), frac_of_bound=round(ub / (RESULT["copy_GBps"] * 1e9) * 1e3 / ms_u, 4),
                    bound="its own bytes at copy bandwidth",
                    note="Lecture 10 §2.3: unfused = Ā, B̄x (fp32, Bt·L·Dm·N each) written to HBM by torch and read "
                         "back by the same chunked scan; fused = selective_scan (computed in registers)")
                RESULT["lecture_2_3"] = {"shape": {"Bt": Bt, "L": L, "Dm": Dm, "N": N}, "fused_ms": round(ms, 5),
                                         "unfused_ms": round(ms_u, 5), "fused_bytes": int(nbytes), "unfused_bytes": int(ub),
                                         "speedup": round(ms_u / ms, 3), "bytes_ratio": round(ub / nbytes, 3)}
                del yu, yf
            except Exception as e:  # noqa: BLE001
                RESULT["errors"].append({"section": "selective_scan unfused", "error": repr(e)[:300]})
    for Bt in ((64, 256) if not DRY else (2,)):
        x = torch.randn(Bt, Dm, device=DEV, dtype=BF16)
        dt = torch.nn.functional.softplus(torch.randn(Bt, Dm, device=DEV) - 4).to(BF16)
        Bm, Cm = torch.randn(Bt, N, device=DEV, dtype=BF16), torch.randn(Bt, N, device=DEV, dtype=BF16)
        nbytes = Bt * Dm * N * 4 * 2 + Bt * Dm * 2 * 2 * 2
        hs = [torch.randn(Bt, Dm, N, device=DEV) for _ in range(n_copies(nbytes))]
        ms = bench_graph([lambda h=h: selective_scan.selective_scan_step(x, dt, A, Bm, Cm, D, h) for h in hs])
        eager = [lambda h=h: (torch.exp(dt[:, :, None].float() * A) * h + (dt * x).float()[:, :, None] * Bm[:, None, :].float()) for h in hs]
        peers = {"torch eager (state update only)": try_graph(eager)}
        if ssu is not None and not DRY:
            try:   # in place on its state, like ours writes h_new: same bytes
                # mamba-ssm 2.3.2's launch unpacks `*(dt_bias.stride(0), dt_bias.stride(1)) if dt_bias is not None
                # else 0`, which is `*0` (a TypeError) without dt_bias: pass zeros (dt + 0, no softplus: same math)
                zb = torch.zeros(Dm, device=DEV)
                st = hs[0].clone()
                ym = ssu(st, x, dt, A, Bm, Cm, D=D, dt_bias=zb)
                yo, ho = selective_scan.selective_scan_step(x, dt, A, Bm, Cm, D, hs[0])
                RESULT["checks"][f"selective_state_update_vs_ours_rel_err_Bt{Bt}"] = [rel(ym, yo), rel(st, ho)]
                sts = [h.clone() for h in hs]
                peers["mamba selective_state_update (Triton)"] = try_graph([lambda s=s: ssu(s, x, dt, A, Bm, Cm, D=D, dt_bias=zb)
                                                                            for s in sts])
            except Exception as e:  # noqa: BLE001
                RESULT["errors"].append({"section": "mamba selective_state_update", "error": repr(e)[:300]})
        row("selective_scan", "decode", {"Bt": Bt, "Dm": Dm, "N": N, "dtype": "bf16 in, fp32 state"}, ms,
            nbytes, Bt * Dm * N * 6, peers, input_sets=len(hs), bound="bytes at copy bandwidth",
            frac_of_bound=round(nbytes / (RESULT["copy_GBps"] * 1e9) * 1e3 / ms, 4))


# ------------------------------------------------------------------------------------------------ Mamba-2 SSD
# (chunk, block_p, num_warps, num_stages, two_pass, block_n_states, states_dtype, pass_block, pass_chunks,
# heads_per_program): every config the benchmark may pick; tests/sanitizer_cases.py runs exactly these.
# Only configs that fit the H200's 232,448 B of shared memory per block: the single pass with chunk 128 and 3 stages needs
# 247,296 B (4 warps) / 248,320 B (8 warps) (OutOfResources on the H200), so no 3 stages here.
# The two-pass kernels with several heads per program (B, C and C Bᵀ shared) compiled for sm_90 need 17-68 KB.
SSD_CANDIDATES = ([(ch, 64, nw, 2, False, 64, None, 512, 8, 1) for ch in (64, 128) for nw in (4, 8)]
                  + [(ch, 64, nw, 2, True, bn, BF16, 1024, 8, hg) for ch in (64, 128) for nw in (4, 8)
                     for bn in (64, 128) for hg in (4, 8, 16)]
                  + [(ch, 64, nw, 1, True, 128, BF16, 1024, 8, 8) for ch in (64, 128) for nw in (4, 8)])
SSD_CONFIG_KEYS = ("chunk", "block_p", "num_warps", "num_stages", "two_pass", "block_n_states", "states_dtype",
                   "pass_block", "pass_chunks", "heads_per_program")


def ssd_config_json(c) -> list:
    """An SSD candidate as the JSON files store it (the states dtype as its name)."""
    return list(c[:6]) + [str(c[6])] + list(c[7:])


def ssd_rows():
    H, P, N = 80, 64, 128                              # Mamba-2 2.7B: d_inner 5120 = 80 heads x 64, d_state 128
    try:
        from fla.ops.simple_gla import chunk_simple_gla
    except Exception as e:  # noqa: BLE001
        chunk_simple_gla = None
        RESULT["errors"].append({"section": "fla import", "error": repr(e)[:300]})
    mamba_scan, _ = load_mamba_peer()
    shapes = [(1, 8192), (4, 8192), (1, 32768), (2, 32768), (8, 4096)] if not QUICK else [(1, 8192)]
    if DRY:
        H, shapes = 2, [(1, 100)]
    cfg, top = None, None
    for Bt, L in shapes:
        x = torch.randn(Bt, L, H, P, device=DEV, dtype=BF16)
        dt = torch.nn.functional.softplus(torch.randn(Bt, L, H, device=DEV) - 3)
        A = -torch.rand(H, device=DEV) * 2 - 0.5
        Bm = torch.randn(Bt, L, N, device=DEV, dtype=BF16) * N ** -0.5
        Cm = torch.randn(Bt, L, N, device=DEV, dtype=BF16) * N ** -0.5

        def run_ssd(c, out=BF16):
            return ssd.ssd_chunked(x, dt, A, Bm, Cm, chunk=c[0], block_p=c[1], num_warps=c[2], num_stages=c[3],
                                   out_dtype=out, two_pass=c[4], block_n_states=c[5], states_dtype=c[6],
                                   pass_block=c[7], pass_chunks=c[8], heads_per_program=c[9])
        # reference: the single pass with fp32 output, the default tiles
        y_ref, _ = ssd.ssd_chunked(x, dt, A, Bm, Cm)
        if cfg is None:
            cands = fitting("ssd_chunked", SSD_CANDIDATES) if not DRY else [(16, 16, 4, 1, False, 16, None, 512, 8, 1), (32, 16, 4, 1, True, 16, BF16, 64, 2, 2)]
            times = {}
            for c in cands:
                try:   # a config must first agree with the reference: a miscompiled kernel never gets timed
                    err = rel(run_ssd(c)[0], y_ref)
                    if not err < 2e-2 and not DRY:     # (the interpreter's bf16 dots are not trustworthy)
                        raise ValueError(f"disagrees with the single pass: rel err {err:.2e}")
                    times[c] = bench(lambda c=c: run_ssd(c), 30)
                except Exception as e:  # a config can run out of shared memory / registers
                    RESULT["errors"].append({"section": f"ssd config {c}", "error": repr(e)[:200]})
            top = sorted(times, key=times.get)[:4]
            top_two = min((c for c in times if c[4]), key=times.get, default=None)
            top_one = min((c for c in times if not c[4]), key=times.get, default=None)
            top = list(dict.fromkeys(top + [c for c in (top_two, top_one) if c is not None]))
            RESULT["config"]["ssd_chunked_candidates"] = [ssd_config_json(c) for c in top]
            RESULT["config"]["ssd_chunked_sweep_ms"] = [[ssd_config_json(c), round(t, 4)]
                                                       for c, t in sorted(times.items(), key=lambda kv: kv[1])]
        per_shape = {}
        for c in top:
            err = rel(run_ssd(c)[0], y_ref)
            if err < 2e-2 or DRY:
                per_shape[c] = bench(lambda c=c: run_ssd(c), 50)
            else:
                RESULT["errors"].append({"section": f"ssd config {c} at Bt={Bt} L={L}", "error": f"rel err {err:.2e}"})
        cfg = min(per_shape, key=per_shape.get)
        ms = per_shape[cfg]
        fused_ms = min((v for c, v in per_shape.items() if not c[4]), default=float("nan"))
        two_ms = min((v for c, v in per_shape.items() if c[4]), default=float("nan"))
        Q = cfg[0]
        nbytes = Bt * L * H * P * 2 * 2 + Bt * L * H * 4 + 2 * Bt * L * N * 2 + Bt * H * P * N * 4
        flops = Bt * L * H * (2 * Q * N + 2 * Q * P + 4 * N * P)
        bound_ms = max(nbytes / (RESULT["copy_GBps"] * 1e9), flops / (max(RESULT["bf16_TFLOPs"], 1e-3) * 1e12)) * 1e3
        states_bytes = 0
        if cfg[4]:
            n_chunks = -(-L // max(Q, 64 if not DRY else 16))
            states_bytes = Bt * H * n_chunks * P * N * 2 * 4          # bf16, written, read+written, read
        peers = {}
        if mamba_scan is not None:
            B4, C4 = Bm[:, :, None, :], Cm[:, :, None, :]
            for cs in (64, 128, 256):
                name = f"mamba mamba_chunk_scan_combined cs{cs}"
                peers[name] = try_ms(lambda cs=cs: mamba_scan(x, dt, A, B4, C4, cs), 50)
                if peers[name] is None:
                    RESULT["errors"][-1]["section"] = name
            if Bt == 1:
                try:
                    RESULT["checks"][f"ssd_vs_mamba_rel_err_L{L}"] = rel(mamba_scan(x, dt, A, B4, C4, 256), y_ref)
                except Exception as e:  # noqa: BLE001
                    RESULT["errors"].append({"section": "mamba ssd check", "error": repr(e)[:300]})
        if chunk_simple_gla is not None:
            qh = Cm[:, :, None, :].expand(Bt, L, H, N).contiguous()
            kh = Bm[:, :, None, :].expand(Bt, L, H, N).contiguous()
            vh = (x.float() * dt[..., None]).to(BF16)
            g = (dt * A).float()
            peers["fla chunk_simple_gla"] = try_ms(lambda: chunk_simple_gla(qh, kh, vh, g=g, scale=1.0, output_final_state=True))
            if Bt == 1 and L == 8192:   # same function? (fla's y excludes D; ours without D too)
                y_fla, _ = chunk_simple_gla(qh, kh, vh, g=g, scale=1.0, output_final_state=True)
                RESULT["checks"]["ssd_vs_fla_rel_err"] = rel(y_ref, y_fla)
            del qh, kh, vh
        named = {k: v for k, v in peers.items() if v is not None}
        best_peer = min(named.values(), default=None)
        row("ssd_chunked", "prefill", {"Bt": Bt, "L": L, "H": H, "P": P, "N": N, "dtype": "bf16"}, ms, nbytes, flops,
            peers, config={k: (str(v) if k == "states_dtype" else v) for k, v in zip(SSD_CONFIG_KEYS, cfg)},
            fused_ms=round(fused_ms, 5), two_pass_ms=round(two_ms, 5), bound_ms=round(bound_ms, 5),
            frac_of_bound=round(bound_ms / ms, 4), bound="max(bytes at copy bandwidth, flops at bf16 matmul peak)",
            states_bytes=states_bytes, frac_bw_with_states=round((nbytes + states_bytes) / (ms * 1e-3) / 1e9 / RESULT["copy_GBps"], 4),
            speedup_vs_best_peer=None if best_peer is None else round(best_peer / ms, 3), target_speedup=1.5,
            note="bytes: x, y, dt, B, C, the last state; two_pass also moves states_bytes (bf16 chunk states: written, "
                 "read and rewritten by the pass, read), in frac_bw_with_states; every config checked against the "
                 "single pass (rel err < 2e-2) before timing; mamba gets B/C as one group (ngroups=1), fla gets them "
                 "expanded to every head (no shared-group form) and Δx precomputed")
        del x, Bm, Cm, y_ref


# ------------------------------------------------------------------------------------------------ block-sparse
def block_lists(B, T, Hkv, S, nb, bs=64, tile=64, n_init=1, n_local=2):
    """InfLLM-V2-like selection, shared by each tile of 64 queries: init block, local blocks, random top-k."""
    nq = triton.cdiv(T, tile)
    nblk = triton.cdiv(S, bs)
    qpos_tile_end = (S - T) + torch.clamp(torch.arange(nq, device=DEV) * tile + tile - 1, max=T - 1)
    cur = qpos_tile_end // bs                                            # (nq,)
    r = torch.rand(B, nq, Hkv, nblk, device=DEV)
    ar = torch.arange(nblk, device=DEV)
    future = ar[None, None, None, :] > cur[None, :, None, None]
    r = r.masked_fill(future, -1.0)
    r[..., :n_init] = 3.0
    local = (ar[None, :] <= cur[:, None]) & (ar[None, :] > cur[:, None] - n_local)
    r = torch.where(local[None, :, None, :], torch.full_like(r, 2.0), r)
    sel = r.topk(min(nb, nblk), dim=-1)
    ids = torch.where(sel.values >= 0, sel.indices, torch.full_like(sel.indices, -1))
    return ids.repeat_interleave(tile, dim=1)[:, :T].to(torch.int32).contiguous()


# (block_t, num_warps, num_stages) of the prefill sweep; (nsplit, num_warps, num_stages) of the decode sweep (warps
# and stages swept at DECODE_SWEEP_NSPLIT, then nsplit alone). tests/sanitizer_cases.py runs all of them.
BLOCK_SPARSE_CANDIDATES = [(bt, nw, ns) for bt in (4, 8) for nw in (4, 8) for ns in (2, 3)]
BLOCK_SPARSE_SPLITS = (1, 2, 4, 8, 16, 32)
DECODE_SWEEP_NSPLIT = 8
BLOCK_SPARSE_DECODE_CANDIDATES = sorted({(n, nw, ns) for nw in (4, 8) for ns in (2, 3)
                                         for n in BLOCK_SPARSE_SPLITS + (DECODE_SWEEP_NSPLIT,)})
FLEX_T = 8192   # FlexAttention (torch.compile'd per shape and block size, ~1 min each) is timed at this T only


def block_sparse_rows():
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    flex = torch.compile(flex_attention, dynamic=False) if not DRY else flex_attention
    Hq, Hkv, d, bs = 32, 2, 128, 64
    block_sparse_decode_rows(Hq if not DRY else 4, Hkv, d, bs)
    # the shape with the FlexAttention peer (FLEX_T) last: its compile is the slow part of this section
    shapes = [(1, 32768, 32), (2, 16384, 64), (1, 8192, 32)] if not QUICK else [(1, 8192, 32)]
    if DRY:
        Hq, shapes = 4, [(1, 192, 2)]
    cfg = None
    for B, T, nb in shapes:
        S = T
        q = torch.randn(B, T, Hq, d, device=DEV, dtype=BF16)
        k = torch.randn(B, S, Hkv, d, device=DEV, dtype=BF16)
        v = torch.randn(B, S, Hkv, d, device=DEV, dtype=BF16)
        bidx = block_lists(B, T, Hkv, S, nb)
        if cfg is None:
            cands = fitting("block_sparse_attention", BLOCK_SPARSE_CANDIDATES) if not DRY else BLOCK_SPARSE_CANDIDATES[:1]
            times = {c: bench(lambda c=c: block_sparse.block_sparse_attention(q, k, v, bidx, bs, block_t=c[0], num_warps=c[1], num_stages=c[2]), 30) for c in cands}
            cfg = min(times, key=times.get)
            RESULT["config"]["block_sparse_attention"] = {"block_t": cfg[0], "num_warps": cfg[1], "num_stages": cfg[2]}
        ms = bench(lambda: block_sparse.block_sparse_attention(q, k, v, bidx, bs, block_t=cfg[0], num_warps=cfg[1], num_stages=cfg[2]))
        # the same mask for FlexAttention: a dense (B, Hkv, T/64, S/64) table + causality
        nq, nk = T // 64, triton.cdiv(S, bs)
        table = torch.zeros(B, Hkv, nq, nk + 1, dtype=torch.bool, device=DEV)
        sel = bidx[:, ::64].permute(0, 2, 1, 3).long()                    # (B, Hkv, nq, nb)
        table.scatter_(-1, torch.where(sel < 0, nk, sel), True)
        table = table[..., :nk].contiguous()
        G = Hq // Hkv

        def mask_mod(b, h, qi, ki):
            return table[b, h // G, qi // 64, ki // bs] & (ki <= qi + (S - T))

        peers = {}
        if T == FLEX_T or DRY:      # (the compile of every new shape cost the round-1 run its time budget)
            try:
                bm = create_block_mask(mask_mod, B, Hq, T, S, device=DEV, BLOCK_SIZE=64, _compile=not DRY)
                bm128 = create_block_mask(mask_mod, B, Hq, T, S, device=DEV, BLOCK_SIZE=128, _compile=not DRY)
                qf, kf, vf = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
                ko = {"BLOCK_M": 64, "BLOCK_N": 64} if not DRY else None
                peers["FlexAttention (same mask, 64x64 blocks, compiled)"] = try_ms(
                    lambda: flex(qf, kf, vf, block_mask=bm, enable_gqa=True, kernel_options=ko))
                peers["FlexAttention (same mask, 128x128 blocks, compiled)"] = try_ms(
                    lambda: flex(qf, kf, vf, block_mask=bm128, enable_gqa=True))
                if T in (8192, 192):
                    of = flex(qf, kf, vf, block_mask=bm128, enable_gqa=True).transpose(1, 2)
                    oo = block_sparse.block_sparse_attention(q, k, v, bidx, bs, block_t=cfg[0])
                    RESULT["checks"][f"block_sparse_vs_flex_rel_err_T{T}"] = float((oo.float() - of.float()).norm() / of.float().norm())
            except Exception as e:  # noqa: BLE001
                RESULT["errors"].append({"section": "flex", "error": repr(e)[:400]})
        qf, kf, vf = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        peers["SDPA dense causal (flash, reference)"] = try_ms(lambda: torch.nn.functional.scaled_dot_product_attention(
            qf, kf, vf, is_causal=True, enable_gqa=True), 20)
        reads = int((bidx >= 0).sum()) * bs                                 # (query, group, token) pairs read
        kv_bytes = int((bidx[:, ::cfg[0]] >= 0).sum()) * bs * 2 * d * 2     # each tile of block_t queries loads its blocks
        nbytes = kv_bytes + 2 * q.numel() * 2
        flops = 2 * reads * G * 2 * d
        row("block_sparse_attention", "prefill", {"B": B, "T": T, "S": S, "nb": nb, "block": bs, "Hq": Hq, "Hkv": Hkv,
                                                  "d": d, "dtype": "bf16"}, ms, nbytes, flops, peers,
            note="bytes = K/V blocks as loaded by the tiles (each tile of block_t queries reloads its blocks) + q + o; "
                 f"FlexAttention peers (same mask, compiled) at T = {FLEX_T} only")
        del q, k, v


def block_sparse_decode_rows(Hq, Hkv, d, bs):
    """Decode rows of block_sparse_attention (split-K): run before the prefill rows, whose FlexAttention peer
    compiles for minutes, so that a run cut short by its time limit still has them."""
    G = Hq // Hkv
    floor = launch_floor()
    dcfg = None
    for B, S, nb in ((64, 32768, 32), (8, 131072, 32), (1, 131072, 32)) if not DRY else ((2, 300, 3), (1, 300, 3)):
        q = torch.randn(B, 1, Hq, d, device=DEV, dtype=BF16)
        k = torch.randn(B, S, Hkv, d, device=DEV, dtype=BF16)
        v = torch.randn(B, S, Hkv, d, device=DEV, dtype=BF16)
        bidx = block_lists(B, 1, Hkv, S, nb)
        nbytes = int((bidx >= 0).sum()) * bs * 2 * d * 2 + 2 * q.numel() * 2 + bidx.numel() * 4
        bsets = [block_lists(B, 1, Hkv, S, nb) for _ in range(n_copies(nbytes))]

        def dec(c):
            return [lambda b_=b_: block_sparse.block_sparse_attention(q, k, v, b_, bs, nsplit=c[0], num_warps=c[1],
                                                                      num_stages=c[2]) for b_ in bsets]
        splits = [n for n in BLOCK_SPARSE_SPLITS if n <= nb] if not DRY else [1, 2]
        if dcfg is None:                              # sweep warps/stages on the first shape (B = 64), then nsplit
            cands = ([c for c in fitting("block_sparse_attention_decode", BLOCK_SPARSE_DECODE_CANDIDATES)
                      if c[0] == DECODE_SWEEP_NSPLIT] if not DRY
                     else [(2, 4, 2)])
            times = {c: bench_graph(dec(c), 50) for c in cands}
            dcfg = min(times, key=times.get)
            RESULT["config"]["block_sparse_attention_decode"] = {"swept_at_nsplit": dcfg[0], "num_warps": dcfg[1],
                                                                 "num_stages": dcfg[2]}
        per_split = {n: bench_graph(dec((n,) + dcfg[1:]), 50) for n in splits}
        best = min(per_split, key=per_split.get)
        ms = bench_graph(dec((best,) + dcfg[1:]))
        extra = {"launch_floor_ms": floor["2 launches" if best > 1 else "1 launch"]} if B == 1 and floor else {}
        row("block_sparse_attention", "decode", {"B": B, "S": S, "nb": nb, "block": bs, "Hq": Hq, "Hkv": Hkv, "d": d,
                                                 "dtype": "bf16"}, ms, nbytes, 2 * int((bidx >= 0).sum()) * bs * G * 2 * d,
            {}, input_sets=len(bsets), nsplit=best, launches=2 if best > 1 else 1,
            no_split_ms=round(per_split[1], 5), ms_by_nsplit={str(n): round(t, 5) for n, t in per_split.items()},
            note="split-K: each block list cut into nsplit slices (B*Hkv*nsplit programs) + the combine launch; "
                 "bytes: the listed K/V blocks, q, o and the block lists", **extra)


def main(argv=None):
    global QUICK, DRY, DEV
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", action="append", default=None, help="JSON path (repeatable)")
    ap.add_argument("--quick", action="store_true", help="one shape per kernel")
    ap.add_argument("--only", default="", help="comma-separated sections")
    ap.add_argument("--dry-cpu", action="store_true", help="tiny shapes on CPU (interpreter): tests the script")
    a = ap.parse_args(argv)
    QUICK = a.quick
    if a.dry_cpu:
        DRY, DEV = True, "cpu"
    OUT_PATHS.extend(a.out or ["gpu_track/results/h200.json"])
    if not torch.cuda.is_available() and not DRY:
        sys.exit("no CUDA GPU: the benchmark needs one (the interpreter measures nothing useful)")
    global TARGET, BF16
    TARGET = None if DRY else devices.current()
    if TARGET is not None:
        BF16 = devices.tensor_core_dtype(torch.bfloat16, TARGET, fp8=True)     # fp16 on a T4; prints the fallback
    RESULT.update({"machine": torch.cuda.get_device_name() if not DRY else "cpu (dry run)",
                   "sms": torch.cuda.get_device_properties(0).multi_processor_count if not DRY else 0,
                   "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                   "target": None if TARGET is None else TARGET.name,
                   "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
                   # where it wrote is not part of what it measured: --out keeps the file name only
                   "command": "python -m gpu_track.bench " + " ".join(
                       os.path.basename(x) if i and args_[i - 1] == "--out" else x
                       for args_ in [list(argv if argv is not None else sys.argv[1:])] for i, x in enumerate(args_)),
                   "copy_GBps": None, "bf16_TFLOPs": None, "rows": [], "config": {}, "checks": {}, "errors": []})
    try:
        import fla
        RESULT["fla"] = fla.__version__
    except Exception:  # noqa: BLE001
        RESULT["fla"] = None
    ceilings()
    sections = {"sparse_attention": sparse_attention_rows, "lightning_indexer": indexer_rows, "fa_decode_topk": fa_rows,
                "selective_scan": scan_rows, "ssd_chunked": ssd_rows, "block_sparse_attention": block_sparse_rows}
    only = [s for s in a.only.split(",") if s]
    for name, fn in sections.items():
        if not only or name in only:
            guarded(name, fn)
            if not DRY:
                torch.cuda.empty_cache()
    save()


if __name__ == "__main__":
    main()
