"""The kernels at the shapes and configs ``tests/test_gpu_sanitizer.py`` runs under compute-sanitizer (not a test
module: run as ``python tests/sanitizer_cases.py GROUP``). Every config the benchmark may pick, exactly its lists:
SSD (gpu_track.bench.SSD_CANDIDATES, groups ssd_single / ssd_two64 / ssd_two128; the chained form, not a bench
candidate, with six of its probe's ten configs: ssd_chained) and selective scan (SCAN_CANDIDATES) at ragged
shapes (no size a multiple of a tile) and at a large Bt·H (H = 80, Bt·H = 1280; and (Bt, L) =
(4, 8192), where the old two-pass kernel faulted); the lightning indexer's decode configs (INDEXER_CANDIDATES, bf16
and FP8, with the spans the split sweep uses) and block-sparse attention's prefill and split-K decode configs
(BLOCK_SPARSE_CANDIDATES, BLOCK_SPARSE_DECODE_CANDIDATES) at ragged shapes; the other attention kernels with
their default tiles at ragged shapes and a large batch. A config that does not fit the GPU's shared memory is not
in those lists (the benchmark never picks it), so it is not run here. Prints "cases done: GROUP"."""
from __future__ import annotations

import sys

import torch

import gpu_track  # noqa: F401  (before triton)
from gpu_track import bench, block_sparse, fa_decode_topk, lightning_indexer, selective_scan, sparse_attention, ssd

DEV = "cuda"
BF16 = torch.bfloat16
G = torch.Generator(device=DEV).manual_seed(0)


def rnd(*shape, dtype=BF16, scale=1.0):
    return (torch.randn(*shape, device=DEV, generator=G) * scale).to(dtype)


def ssd_inputs(Bt, L, H, P, N, dtype=BF16):
    dt = torch.nn.functional.softplus(rnd(Bt, L, H, dtype=torch.float32) - 3)
    A = -(torch.rand(H, device=DEV, generator=G) * 2 + 0.5)
    return (rnd(Bt, L, H, P, dtype=dtype), dt, A, rnd(Bt, L, N, dtype=dtype, scale=N ** -0.5),
            rnd(Bt, L, N, dtype=dtype, scale=N ** -0.5))


def run_ssd(inputs, c, D=None, h0=None):
    x, dt, A, B, C = inputs
    return ssd.ssd_chunked(x, dt, A, B, C, D, h0, chunk=c[0], block_p=c[1], num_warps=c[2], num_stages=c[3],
                           out_dtype=BF16, two_pass=c[4], block_n_states=c[5], states_dtype=c[6], pass_block=c[7],
                           pass_chunks=c[8], heads_per_program=c[9])


def ssd_group(two_pass, chunks=(64, 128)):
    cands = [c for c in bench.SSD_CANDIDATES if c[4] == two_pass and c[0] in chunks]
    ragged = ssd_inputs(2, 333, 3, 40, 100)
    big = ssd_inputs(16, 256, 80, 64, 128)                       # Bt·H = 1280, as at (16, 2048) in the bench
    D, h0 = rnd(3, dtype=torch.float32), rnd(2, 3, 40, 100)
    for c in cands:
        run_ssd(ragged, c, D, h0)
        run_ssd(big, c)
        torch.cuda.synchronize()
    fault = ssd_inputs(4, 8192, 80, 64, 128)                      # the faulting shape, the fastest configs' tiles
    for c in [c for c in cands if c[2] == 4 and c[3] == 2 or not c[4] and c[3] == 2]:
        run_ssd(fault, c)
    torch.cuda.synchronize()
    x, dt, A, B, C = ssd_inputs(1, 77, 2, 20, 12, torch.float32)  # fp32 inputs, default tiles, both forms
    ssd.ssd_chunked(x, dt, A, B, C, chunk=16, block_p=16, two_pass=two_pass)


def ssd_chained_group():
    """The one-launch chained form (not a bench candidate): six of the ten configs of benchmarks/ssd_chained_probe.py
    (both chunk sizes, both warp counts, every head-group size), ragged with a partial last head group, and at
    Bt·H = 1280, where the ring and flags span the most tiles."""
    ragged = ssd_inputs(2, 333, 3, 40, 100)
    big = ssd_inputs(16, 256, 80, 64, 128)
    D, h0 = rnd(3, dtype=torch.float32), rnd(2, 3, 40, 100)
    for chunk, nw, hg in [(64, 4, 1), (64, 4, 2), (64, 8, 4), (64, 8, 8), (128, 8, 1), (128, 8, 4)]:
        kw = dict(chunk=chunk, num_warps=nw, num_stages=2, chained=True, heads_per_program=hg, out_dtype=BF16)
        ssd.ssd_chunked(*ragged, D, h0, **kw)
        ssd.ssd_chunked(*big, **kw)
        torch.cuda.synchronize()
    x, dt, A, B, C = ssd_inputs(1, 77, 5, 20, 12, torch.float32)  # fp32 inputs, default tiles, heads 5 in groups of 2
    ssd.ssd_chunked(x, dt, A, B, C, chunk=16, block_p=16, chained=True, heads_per_program=2)


def scan_group():
    for Bt, L, Dm, N in ((2, 100, 300, 16), (1, 37, 50, 5), (4, 1024, 5120, 16)):
        x, dt = rnd(Bt, L, Dm), torch.nn.functional.softplus(rnd(Bt, L, Dm, dtype=torch.float32) - 4).to(BF16)
        A = -torch.rand(Dm, N, device=DEV, generator=G) * 4 - 0.5
        B, C, D, h0 = rnd(Bt, L, N), rnd(Bt, L, N), rnd(Dm, dtype=torch.float32), rnd(Bt, Dm, N, dtype=torch.float32)
        for v, ch, bd, lanes, nw in bench.SCAN_CANDIDATES:
            selective_scan.selective_scan(x, dt, A, B, C, D, h0 if Bt < 4 else None, chunk=ch, block_d=bd,
                                          lanes_d=lanes, num_warps=nw, out_dtype=BF16, variant=v)
        selective_scan.selective_scan_unfused(x, dt, A, B, C, D, h0, chunk=16, block_d=16, out_dtype=BF16)
        torch.cuda.synchronize()
    for Bt, Dm, N in ((3, 300, 16), (256, 5120, 16)):
        h = rnd(Bt, Dm, N, dtype=torch.float32)
        selective_scan.selective_scan_step(rnd(Bt, Dm), rnd(Bt, Dm), -torch.rand(Dm, N, device=DEV), rnd(Bt, N),
                                           rnd(Bt, N), rnd(Dm, dtype=torch.float32), h)
    torch.cuda.synchronize()


def attention_group():
    for B, T, Hq, Hkv, S, d, K in ((2, 3, 4, 2, 333, 72, 50), (64, 1, 32, 4, 4000, 128, 300)):
        q, k, v = rnd(B, T, Hq, d), rnd(B, S, Hkv, d), rnd(B, S, Hkv, d)
        idx = torch.rand(B, T, Hkv, S, device=DEV, generator=G).topk(K, dim=-1).indices
        idx[..., K // 2:] = -1                                          # -1 padding

        sparse_attention.sparse_attention(q, k, v, idx)
        sparse_attention.sparse_attention(q, k, v, idx, nsplit=4)
        lightning_indexer.indexer_scores(q, rnd(B, T, Hq), k[:, :, 0])
        fa_decode_topk.fa_decode(q[:, 0], k, v, 16)
        nb = (S + 63) // 64
        bidx = torch.rand(B, T, Hkv, nb, device=DEV, generator=G).topk(5, dim=-1).indices
        bidx[..., 3:] = -1
        block_sparse.block_sparse_attention(q, k, v, bidx, 64)
        torch.cuda.synchronize()


def indexer_group():
    """Every decode config of the benchmark's sweep (both key formats) at a ragged S, with the default span and the
    shortest span of the split sweep (one tile per program: the most programs, the most ragged ends)."""
    B, Hi, di, S = 3, 64, 128, 3001
    q, w = rnd(B, 1, Hi, di), rnd(B, 1, Hi).abs()
    k = rnd(B, S, di)
    q8, qs = lightning_indexer.quantize_fp8(q)
    k8, ks = lightning_indexer.quantize_fp8(k)
    forms = {"bf16": (q, w, k, None), "fp8": (q8, w.float() * qs, k8, ks)}
    for form, (qq, ww, kk, sc) in forms.items():
        for bs, nw, ns in bench.INDEXER_CANDIDATES[form]:
            for span in (None, bs):
                lightning_indexer.indexer_scores(qq, ww, kk, block_s=bs, num_warps=nw, num_stages=ns, k_scale=sc,
                                                 variant="stream", span=span)
        torch.cuda.synchronize()
    lightning_indexer.indexer_scores(q, w, k, block_s=128, num_warps=4, num_stages=4, variant="tile")  # bench's tile row
    torch.cuda.synchronize()


def block_sparse_group():
    """The prefill sweep's (block_t, warps, stages) and the split-K decode sweep's (nsplit, warps, stages), ragged."""
    Hq, Hkv, bs = 8, 2, 64
    B, T, d = 2, 333, 72
    q, k, v = rnd(B, T, Hq, d), rnd(B, T, Hkv, d), rnd(B, T, Hkv, d)
    bidx = bench.block_lists(B, T, Hkv, T, 3)
    for bt, nw, ns in bench.BLOCK_SPARSE_CANDIDATES:
        block_sparse.block_sparse_attention(q, k, v, bidx, bs, block_t=bt, num_warps=nw, num_stages=ns)
    torch.cuda.synchronize()
    B, S, nb = 3, 4001, 33                       # 63 blocks, the last one ragged; 33 listed, some -1
    q, k, v = rnd(B, 1, Hq, 128), rnd(B, S, Hkv, 128), rnd(B, S, Hkv, 128)
    bidx = bench.block_lists(B, 1, Hkv, S, nb)
    bidx[0, 0, 0, nb // 2:] = -1
    for n, nw, ns in bench.BLOCK_SPARSE_DECODE_CANDIDATES:
        block_sparse.block_sparse_attention(q, k, v, bidx, bs, nsplit=n, num_warps=nw, num_stages=ns)
    torch.cuda.synchronize()


GROUPS = {"ssd_single": lambda: ssd_group(False), "ssd_two64": lambda: ssd_group(True, (64,)),
          "ssd_two128": lambda: ssd_group(True, (128,)), "ssd_chained": ssd_chained_group, "scan": scan_group,
          "attention": attention_group, "indexer": indexer_group, "block_sparse": block_sparse_group}

if __name__ == "__main__":
    group = sys.argv[1]
    GROUPS[group]()
    torch.cuda.synchronize()
    print(f"cases done: {group}", flush=True)
