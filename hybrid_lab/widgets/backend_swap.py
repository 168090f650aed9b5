"""The backend swap, demonstrated (notebook 09): cells in the style of notebooks 01, 04, 06 and 08, run under both
backends.

Each ``demo_NN()`` calls only the public ``hybrid_lab`` functions (the ones those notebooks call) and returns the
lines it would print, numbers rounded as a notebook prints them. ``run_demo(demo, backend)`` runs it under
``hybrid_lab.use_backend(backend)`` and also counts how many calls reached each Triton op, to show the swap
really happened (the numpy backend must count none). The Triton side is found through the registry
(``registry.triton_module``), so importing this module needs neither torch nor triton.
"""
from __future__ import annotations

import contextlib
from collections import Counter

import numpy as np

from hybrid_lab.models import infllm
from hybrid_lab.ops import ssm
from hybrid_lab.ops.block_sparse import block_sparse_attention
from hybrid_lab.ops.fa_decode import fa_decode_topk
from hybrid_lab.ops.lightning_indexer import lightning_indexer
from hybrid_lab.ops.registry import SWAPPABLE_OPS, triton_module, use_backend
from hybrid_lab.ops.sparse_attention import sparse_attention, topk_indices


def demo_01() -> list:
    """Notebook 01: the Mamba-1 chunked scan and the Mamba-2 SSD chunked scan against their recurrences."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 40, 16))
    p = ssm.init_ssm(16, 8, seed=2)
    dt, B, C = ssm.ssm_inputs(p, x)
    y_rec, h_rec = ssm.ssm_scan(x, dt, p["A"], B, C, p["D"])
    y_chk, h_chk = ssm.selective_scan(x, dt, p["A"], B, C, p["D"], chunk_size=16)
    H, P, N = 4, 8, 16
    x2 = rng.normal(size=(1, 70, H, P))
    dt2 = np.log1p(np.exp(rng.normal(-1, 0.5, size=(1, 70, H))))
    A2 = -np.exp(rng.normal(0, 0.5, size=H))
    B2, C2 = rng.normal(size=(1, 70, N)), rng.normal(size=(1, 70, N))
    y_a, h_a = ssm.ssd_scan(x2, dt2, A2, B2, C2, np.ones(H))
    y_b, h_b = ssm.ssd_chunked(x2, dt2, A2, B2, C2, np.ones(H), chunk_size=32)
    return [
        f"selective_scan (chunk 16) vs recurrence agree <= 1e-6: {max(np.abs(y_chk - y_rec).max(), np.abs(h_chk - h_rec).max()) <= 1e-6}",
        f"y[0, -1, :4] = {np.round(y_chk[0, -1, :4], 4).tolist()}",
        f"ssd_chunked (chunk 32) vs recurrence agree <= 1e-6: {max(np.abs(y_a - y_b).max(), np.abs(h_a - h_b).max()) <= 1e-6}",
        f"h_last[0, 0, 0, :4] = {np.round(h_b[0, 0, 0, :4], 4).tolist()}",
    ]


def demo_04() -> list:
    """Notebook 04: deterministic top-k, sparse attention (MQA) = dense when k covers everything, the indexer."""
    rng = np.random.default_rng(4)
    T, S, Hq, d = 4, 48, 4, 16
    q = rng.normal(size=(1, T, Hq, d))
    k, v = rng.normal(size=(1, S, 1, d)), rng.normal(size=(1, S, 1, d))
    q_pos = S - T + np.arange(T)
    causal = np.where(np.arange(S)[None, :] <= q_pos[:, None], 0.0, -np.inf)
    idx_all = topk_indices(np.broadcast_to(causal, (1, 1, T, S)).transpose(0, 2, 1, 3), S)
    o_sparse = sparse_attention(q, k, v, idx_all)
    logits = np.einsum("bthd,bsd->bths", q, k[:, :, 0]) * d ** -0.5 + causal[None, :, None, :]
    p = np.exp(logits - logits.max(-1, keepdims=True))
    dense = np.einsum("bths,bsd->bthd", p / p.sum(-1, keepdims=True), v[:, :, 0])
    qi, wi, ki = rng.normal(size=(1, T, 2, 8)), rng.random((1, T, 2)), rng.normal(size=(1, S, 8))
    scores, idx = lightning_indexer(qi, wi, ki, topk=5, q_pos=np.array([3, 10, 20, 47]))
    o_top = sparse_attention(q, k, v, idx[:, :, None, :])
    return [
        f"k = S: sparse == dense (max |diff| < 1e-12): {bool(np.abs(o_sparse - dense).max() < 1e-12)}",
        f"indexer top-5 for the query at position 3: {idx[0, 0].tolist()}",
        f"indexer top-5 for the query at position 47: {idx[0, 3].tolist()}",
        f"scores row 1, first 4: {np.round(scores[0, 1, :4], 3).tolist()}",
        f"top-5 attention output o[0, 3, 0, :3] = {np.round(o_top[0, 3, 0, :3], 4).tolist()}",
    ]


def demo_06() -> list:
    """Notebook 06: HySparse2 decode: the FA layer returns its output and the group's top-k outside the window;
    an SA layer then reads window ∪ top-k with its own sink."""
    rng = np.random.default_rng(6)
    S, Hq, Hkv, d, topk, window = 64, 4, 2, 16, 6, 8
    q = rng.normal(size=(1, Hq, d))
    k, v = rng.normal(size=(1, S, Hkv, d)), rng.normal(size=(1, S, Hkv, d))
    o, idx = fa_decode_topk(q, k, v, topk, window)
    win = np.broadcast_to(np.arange(S - window, S), (1, Hkv, window))
    sel = np.concatenate([win, idx], axis=-1)[:, None]                   # (B, T=1, Hkv, window + topk)
    sink = np.array([0.5, -0.5, 0.0, 1.0])
    o_sa = sparse_attention(rng.normal(size=(1, 1, Hq, d)), k, v, sel, sink=sink)
    return [
        f"FA output o[0, 0, :4] = {np.round(o[0, 0, :4], 4).tolist()}",
        f"top-{topk} outside the window, group 0: {idx[0, 0].tolist()}",
        f"top-{topk} outside the window, group 1: {idx[0, 1].tolist()}",
        f"SA (window + top-k, sink) o[0, 0, 1, :4] = {np.round(o_sa[0, 0, 1, :4], 4).tolist()}",
    ]


def demo_08() -> list:
    """Notebook 08: InfLLM-V2 block selection, then attention over the selected 64-token blocks."""
    rng = np.random.default_rng(8)
    S, Hq, Hkv, d = 300, 4, 2, 16
    q_pos = np.array([299])
    q = rng.normal(size=(1, 1, Hq, d))
    k, v = rng.normal(size=(1, S, Hkv, d)), rng.normal(size=(1, S, Hkv, d))
    idx, _, _ = infllm.infllm_v2_select(q, k, topk=1, n_init=1, n_local=2, q_pos=q_pos)
    nb = infllm.n_blocks(S)
    all_blocks = np.broadcast_to(np.arange(nb), idx.shape[:3] + (nb,)).copy()
    o_dense = block_sparse_attention(q, k, v, all_blocks, q_pos=q_pos)
    o = block_sparse_attention(q, k, v, idx, q_pos=q_pos)
    return [
        f"selected blocks per group (init, top-k, local): {idx[0, 0].tolist()}",
        f"relative output error vs all blocks: {np.linalg.norm(o - o_dense) / np.linalg.norm(o_dense):.4f}",
        f"o[0, 0, 0, :4] = {np.round(o[0, 0, 0, :4], 4).tolist()}",
    ]


DEMOS = {"01": demo_01, "04": demo_04, "06": demo_06, "08": demo_08}


@contextlib.contextmanager
def count_triton_calls():
    """Counter of calls that reached ``gpu_track.numpy_api`` (i.e. the Triton kernels), by op name."""
    numpy_api = triton_module()
    counts: Counter = Counter()
    saved = {op: getattr(numpy_api, op) for op in SWAPPABLE_OPS}

    def wrap(op, fn):
        def counted(*a, **kw):
            counts[op] += 1
            return fn(*a, **kw)
        return counted

    for op, fn in saved.items():
        setattr(numpy_api, op, wrap(op, fn))
    try:
        yield counts
    finally:
        for op, fn in saved.items():
            setattr(numpy_api, op, fn)


def run_demo(demo, backend: str):
    """(printed lines, {op: calls routed to Triton}) of ``demo`` under ``backend``."""
    if backend not in ("numpy", "triton"):
        raise ValueError(f"backend must be 'numpy' or 'triton', got {backend!r}")
    with count_triton_calls() as counts, use_backend(backend):
        lines = demo()
    return lines, dict(sorted(counts.items()))


def compare(name: str) -> bool:
    """Print a demo's lines under numpy, whether Triton printed the same, and which ops Triton ran."""
    if name not in DEMOS:
        raise ValueError(f"demo must be one of {sorted(DEMOS)}, got {name!r}")
    ref, calls_np = run_demo(DEMOS[name], "numpy")
    got, calls_tr = run_demo(DEMOS[name], "triton")
    for line in ref:
        print("  " + line)
    same = ref == got
    print(f"notebook {name}: identical printed output under triton: {same} | ops on Triton: {calls_tr} "
          f"| on numpy backend: {calls_np or 'none'}")
    if not same:
        for a, b in zip(ref, got):
            if a != b:
                print(f"  numpy : {a}\n  triton: {b}")
    return same
