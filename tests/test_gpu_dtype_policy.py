"""The dtype policy applied by the Triton wrappers (gpu_track.common.on_tensor_cores, gpu_track.targets): on a GPU
without bf16 tensor cores (a T4, sm_75) bfloat16 operands are computed in float16 and handed back as bfloat16; a
value float16 cannot hold is refused by name; below sm_89 the FP8 indexer runs on the exact 16-bit copy of its
e4m3 operands; each fallback is printed once. Run here in Triton's interpreter with the target forced by
``HYBRID_LAB_GPU_TARGET`` (the variable an H200 uses to run as a smaller GPU); with no target nothing is cast."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import gpu_track  # noqa: E402,F401  (before triton)

pytest.importorskip("triton")

from gpu_track import (block_sparse, common, fa_decode_topk, lightning_indexer, selective_scan,  # noqa: E402
                       sparse_attention, ssd, targets)

BF, HALF = torch.bfloat16, torch.float16


def _g(seed):
    return torch.Generator().manual_seed(seed)


def _attn(seed, S=40, T=3, Hq=4, Hkv=2, d=16):
    g = _g(seed)
    q = torch.randn(1, T, Hq, d, generator=g).to(BF)
    k = torch.randn(1, S, Hkv, d, generator=g).to(BF)
    v = torch.randn(1, S, Hkv, d, generator=g).to(BF)
    return q, k, v


def _calls(seed):
    """(name, call on bf16 inputs, the same call on the float16 copies of the bf16 inputs)."""
    q, k, v = _attn(seed)
    idx = torch.stack([torch.stack([torch.randperm(40, generator=_g(seed + 2 * t + j))[:12] for j in range(2)])
                       for t in range(3)])[None]                                  # (B, T, Hkv, K)
    bidx = torch.tensor([[[0, 1], [0, 2], [1, 2]]])[:, :, None, :].expand(1, 3, 2, 2).contiguous()
    g = _g(seed + 99)
    x = torch.randn(1, 20, 6, generator=g).to(BF)
    dt = torch.nn.functional.softplus(torch.randn(1, 20, 6, generator=g)).to(BF)
    A = -torch.rand(6, 4, generator=g) - 0.5
    Bm, Cm = (torch.randn(1, 20, 4, generator=g).to(BF) for _ in range(2))
    xs = torch.randn(1, 20, 2, 16, generator=g).to(BF)
    dts = torch.nn.functional.softplus(torch.randn(1, 20, 2, generator=g)).to(BF)
    As = -torch.rand(2, generator=g) - 0.5
    Bs, Cs = (torch.randn(1, 20, 16, generator=g).to(BF) for _ in range(2))
    qi = torch.randn(1, 2, 4, 16, generator=g).to(BF)
    wi = torch.rand(1, 2, 4, generator=g)
    ki = torch.randn(1, 30, 16, generator=g).to(BF)
    h = lambda t: t.to(HALF) if t.dtype == BF else t      # noqa: E731
    return [
        ("sparse_attention", lambda f: sparse_attention.sparse_attention(f(q), f(k), f(v), idx)),
        ("fa_decode", lambda f: fa_decode_topk.fa_decode(f(q[:, 0]), f(k), f(v), 8)),
        ("block_sparse_attention", lambda f: block_sparse.block_sparse_attention(f(q), f(k), f(v), bidx, 16)),
        ("indexer_scores", lambda f: lightning_indexer.indexer_scores(f(qi), wi, f(ki))),
        ("selective_scan", lambda f: selective_scan.selective_scan(f(x), f(dt), A, f(Bm), f(Cm))),
        ("ssd_chunked", lambda f: ssd.ssd_chunked(f(xs), f(dts), As, f(Bs), f(Cs), chunk=16)),
    ], h


def _flat(out):
    return list(out) if isinstance(out, tuple) else [out]


@pytest.mark.parametrize("i", range(6))
def test_t4_computes_bf16_in_fp16_and_hands_back_bf16(i, monkeypatch, capsys):
    monkeypatch.setenv("HYBRID_LAB_GPU_TARGET", "T4")
    targets.ANNOUNCED.clear()
    calls, h = _calls(7 + i)
    name, call = calls[i]
    got = _flat(call(lambda t: t))                       # bf16 in
    want = _flat(call(h))                                # what the kernel computes: the fp16 copies
    for a, b in zip(got, want):
        assert a.dtype == (BF if b.dtype == HALF else b.dtype), name
        assert torch.equal(a, b.to(BF) if b.dtype == HALF else b), name
    if name in ("sparse_attention", "fa_decode", "block_sparse_attention"):   # their output has q's dtype
        assert got[0].dtype == BF, name
    assert capsys.readouterr().out.count("no bf16 tensor cores") == 1, name     # said once, not per call
    targets.ANNOUNCED.clear()


def test_a_bf16_value_fp16_cannot_hold_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("HYBRID_LAB_GPU_TARGET", "T4")
    q, k, v = _attn(3)
    k[0, 5, 1, 2] = 1e6                                   # fine in bf16, inf in fp16
    idx = torch.arange(12)[None, None, None].expand(1, 3, 2, 12).contiguous()
    with pytest.raises(ValueError, match=r"^k: on T4 \(sm_75, no bf16 tensor cores\).*max \|k\| = 9.99\d*e\+05"):
        sparse_attention.sparse_attention(q, k, v, idx)
    monkeypatch.setenv("HYBRID_LAB_GPU_TARGET", "A100")      # bf16 tensor cores: nothing to refuse
    assert sparse_attention.sparse_attention(q, k, v, idx).dtype == BF
    targets.ANNOUNCED.clear()


def test_without_a_target_nothing_is_cast(monkeypatch):
    monkeypatch.delenv("HYBRID_LAB_GPU_TARGET", raising=False)
    monkeypatch.setenv("HYBRID_LAB_GPU_TARGET", "")
    assert common.policy_target() is None
    t = torch.ones(3, dtype=BF)
    assert common.to_tensor_core_dtype("t", t) is t
    for name in ("A100", "L4", "H200"):                  # bf16 tensor cores everywhere from sm_80
        monkeypatch.setenv("HYBRID_LAB_GPU_TARGET", name)
        assert common.to_tensor_core_dtype("t", t) is t


def test_fp8_indexer_below_sm89_runs_on_the_exact_16_bit_copy(monkeypatch, capsys):
    """Values checked on the T4 path (fp16: the interpreter's bf16 arithmetic is not trustworthy); the A100 path
    checked for its dtype and exactness (its numbers natively)."""
    g = _g(5)
    q = torch.randn(1, 2, 4, 32, generator=g)
    w = torch.rand(1, 2, 4, generator=g)
    k = torch.randn(1, 30, 32, generator=g)
    q8, qs = lightning_indexer.quantize_fp8(q, "q")
    k8, ks = lightning_indexer.quantize_fp8(k, "k")
    wq = (w * qs).contiguous()
    monkeypatch.setenv("HYBRID_LAB_GPU_TARGET", "T4")
    targets.ANNOUNCED.clear()
    got = lightning_indexer.indexer_scores_fp8(q8, wq, k8, ks)
    assert "the FP8 indexer runs in fp16" in capsys.readouterr().out
    want = lightning_indexer.indexer_scores(q8.to(HALF).float(), wq, k8.to(HALF).float()) * ks[:, None, :]
    finite = torch.isfinite(want)
    assert torch.equal(finite, torch.isfinite(got)) and finite.any()
    assert torch.allclose(got[finite], want[finite], rtol=1e-6, atol=1e-6)
    monkeypatch.setenv("HYBRID_LAB_GPU_TARGET", "A100")
    targets.ANNOUNCED.clear()
    k16 = common.to_tensor_core_dtype("k", k8, fp8=True)
    assert k16.dtype == BF and torch.equal(k16.to(torch.float8_e4m3fn), k8)          # e4m3 -> bf16 is exact
    assert "the FP8 indexer runs in bf16" in capsys.readouterr().out
    monkeypatch.setenv("HYBRID_LAB_GPU_TARGET", "L4")                                # FP8 tensor cores: kept
    assert common.to_tensor_core_dtype("k", k8, fp8=True) is k8
    targets.ANNOUNCED.clear()
