"""Probe: the chained SSD form (one launch, chunk states handed chunk to chunk through L2) against the two-pass
form the bench picks and against mamba-ssm's ``mamba_chunk_scan_combined``, at the bench's shapes, in one run.

    python3 benchmarks/ssd_chained_probe.py OUT.json [--check-only]   (--check-only: the ragged checks alone, for
                                                                        compute-sanitizer)

Writes the medians (``triton.testing.do_bench``), each config's relative error against the single pass in fp32,
and a repeat check (the chained form run 20 times on one input must give the same bits: a race in the hand-off
would show as a difference). Needs a GPU; mamba-ssm from .devrun/peers (gpu_track/peers.py), fla-core if present.
"""
from __future__ import annotations

import json
import sys
import time

import torch
import triton
from triton.testing import do_bench

from gpu_track import ssd

BF16 = torch.bfloat16
H, P, N = 80, 64, 128
SHAPES = [(1, 8192), (4, 8192), (1, 32768), (2, 32768), (8, 4096)]
TWO_PASS = [dict(chunk=64, num_warps=4, num_stages=2, two_pass=True, block_n_states=128, states_dtype=BF16,
                 pass_block=1024, pass_chunks=8, heads_per_program=8)]
CHAINED = ([dict(chunk=64, num_warps=nw, num_stages=2, chained=True, heads_per_program=hg)
            for nw in (4, 8) for hg in (1, 2, 4, 8)]
           + [dict(chunk=128, num_warps=8, num_stages=2, chained=True, heads_per_program=hg) for hg in (1, 4)])


def rel(a, b) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


def inputs(Bt, L, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(Bt, L, H, P, device="cuda", generator=g).to(BF16)
    dt = torch.nn.functional.softplus(torch.randn(Bt, L, H, device="cuda", generator=g) - 3)
    A = -torch.rand(H, device="cuda", generator=g) * 2 - 0.5
    B = (torch.randn(Bt, L, N, device="cuda", generator=g) * N ** -0.5).to(BF16)
    C = (torch.randn(Bt, L, N, device="cuda", generator=g) * N ** -0.5).to(BF16)
    return x, dt, A, B, C


def key(c: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in c.items() if k not in ("states_dtype",))


def ragged_checks(out: dict, repeat: bool = True) -> None:
    """Ragged shapes, fp32 and bf16, with D and h0, against the single pass; the repeat check."""
    res = []
    for (Bt, L, Hh, Pp, Nn, ch) in [(2, 333, 3, 40, 100, 64), (2, 4100, 7, 64, 128, 128)]:
        for dtype in (torch.float32, BF16):
            g = torch.Generator(device="cuda").manual_seed(Bt * 1000 + L)
            x = torch.randn(Bt, L, Hh, Pp, device="cuda", generator=g).to(dtype)
            dt = torch.nn.functional.softplus(torch.randn(Bt, L, Hh, device="cuda", generator=g) - 2)
            A = -torch.rand(Hh, device="cuda", generator=g) - 0.2
            B = (torch.randn(Bt, L, Nn, device="cuda", generator=g) * Nn ** -0.5).to(dtype)
            C = (torch.randn(Bt, L, Nn, device="cuda", generator=g) * Nn ** -0.5).to(dtype)
            D = torch.randn(Hh, device="cuda", generator=g)
            h0 = torch.randn(Bt, Hh, Pp, Nn, device="cuda", generator=g)
            y1, h1 = ssd.ssd_chunked(x.float(), dt, A, B.float(), C.float(), D, h0, chunk=64)
            for nw, hg in ((4, 1), (4, 3), (8, 2)):
                r = {"shape": [Bt, L, Hh, Pp, Nn], "chunk": ch, "num_warps": nw, "heads_per_program": hg,
                     "dtype": str(dtype)}
                try:   # a config may not fit this GPU (fp32 tiles at chunk 128): recorded, not fatal
                    y2, h2 = ssd.ssd_chunked(x, dt, A, B, C, D, h0, chunk=ch, num_warps=nw, chained=True,
                                             heads_per_program=hg)
                    r.update(rel_y=rel(y2, y1), rel_h=rel(h2, h1))
                except Exception as e:  # noqa: BLE001
                    r["error"] = repr(e)[:160]
                res.append(r)
    out["ragged"] = res
    if not repeat:
        return
    x, dt, A, B, C = inputs(4, 8192, seed=3)
    kw = dict(chunk=64, chained=True, out_dtype=BF16, heads_per_program=4)
    first = ssd.ssd_chunked(x, dt, A, B, C, **kw)
    same = all(all(torch.equal(a, b) for a, b in zip(first, ssd.ssd_chunked(x, dt, A, B, C, **kw)))
               for _ in range(20))
    out["repeat_bitwise_equal_20"] = same


def run_checks(out: dict, argv, path: str) -> None:
    ragged_checks(out, repeat="--check-only" not in argv)
    ok = [r for r in out["ragged"] if "error" not in r]
    out["ragged_max_rel"] = max((max(r["rel_y"], r["rel_h"]) for r in ok if "float32" in r["dtype"]), default=None)
    out["ragged_max_rel_bf16"] = max((max(r["rel_y"], r["rel_h"]) for r in ok if "bfloat16" in r["dtype"]),
                                     default=None)
    out["ragged_errors"] = sum("error" in r for r in out["ragged"])
    print("checks", out["ragged_max_rel"], out["ragged_max_rel_bf16"], out.get("repeat_bitwise_equal_20"),
          out["ragged_errors"], flush=True)
    json.dump(out, open(path, "w"), indent=1)


def main(argv) -> int:
    path = argv[0]
    out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "command": "python3 benchmarks/ssd_chained_probe.py " + " ".join(argv), "rows": [], "errors": []}
    t0 = time.time()
    if "--check-only" in argv:
        run_checks(out, argv, path)
        return 0
    try:
        from gpu_track.peers import load_mamba
        mamba, _, version = load_mamba()
        out["mamba_ssm"] = version
    except Exception as e:  # noqa: BLE001
        mamba = None
        out["errors"].append(repr(e)[:300])
    for Bt, L in SHAPES:
        x, dt, A, B, C = inputs(Bt, L)
        y_ref, h_ref = ssd.ssd_chunked(x, dt, A, B, C)
        row = {"Bt": Bt, "L": L, "ms": {}, "rel": {}}
        for c in TWO_PASS + CHAINED:
            try:
                y, h = ssd.ssd_chunked(x, dt, A, B, C, out_dtype=BF16, **c)
                row["rel"][key(c)] = [rel(y, y_ref), rel(h, h_ref)]
                row["ms"][key(c)] = float(do_bench(lambda c=c: ssd.ssd_chunked(x, dt, A, B, C, out_dtype=BF16, **c),
                                                   warmup=25, rep=50, return_mode="median"))
            except Exception as e:  # noqa: BLE001
                out["errors"].append(f"{key(c)} {Bt} {L}: {repr(e)[:200]}")
        if mamba is not None:
            for cs in (128, 256):
                B4, C4 = B[:, :, None, :], C[:, :, None, :]
                row["ms"][f"mamba cs{cs}"] = float(do_bench(lambda cs=cs: mamba(x, dt, A, B4, C4, cs), warmup=25,
                                                            rep=50, return_mode="median"))
        mine = {k: v for k, v in row["ms"].items() if k.startswith("chunk") and "chained" in k}
        best = min(mine, key=mine.get) if mine else None
        peer = min((v for k, v in row["ms"].items() if k.startswith("mamba")), default=None)
        row["best_chained"] = best
        row["speedup_best_chained_vs_mamba"] = None if (best is None or peer is None) else peer / mine[best]
        out["rows"].append(row)
        print(Bt, L, best, mine.get(best), "two-pass", row["ms"].get(key(TWO_PASS[0])), "mamba", peer, flush=True)
        json.dump(out, open(path, "w"), indent=1)
    run_checks(out, argv, path)
    out["wall_s"] = round(time.time() - t0, 1)
    json.dump(out, open(path, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
