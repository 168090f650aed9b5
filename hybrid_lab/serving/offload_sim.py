"""A roofline-style simulator of decode with the KV cache offloaded to CPU memory (seed 002, Secs. 4.3, 5.3).

Per layer and decode step, with the block-sparse backbone (64-token blocks, init + local + top-k):

    serial     (Sparse, offloaded):  t_sel + t_transfer + t_compute
    overlapped (SparDA):             t_forecast+sel + max(t_transfer, t_compute') + t_sync

where the overlapped transfer is issued one layer early (the Forecast of layer l selects layer l+1's blocks),
runs on resident copy CTAs that take SMs away from compute (t_compute' > t_compute), and only moves blocks that
are newly selected and not already on the GPU (the previous step's blocks stay cached). The first layer's KV
stays on the GPU. This is the seed's teaching approximation, not the paper's performance model: it predicts
directions (who wins when), not the paper's absolute tokens/s.

Hardware numbers in the presets are nominal spec-sheet values chosen by us (not from the paper); ``efficiency``
scales them to achievable rates. Every time is in seconds, every size in bytes.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

__all__ = [
    "Hardware", "H100", "A100", "ModelSpec", "MINICPM_8B", "LayerTimes", "serial_layer_time",
    "overlapped_layer_time", "layer_times", "step_time", "throughput", "gpu_bytes", "max_batch", "batch_sweep",
    "cta_sweep", "heuristic_ctas", "new_blocks", "replay_trace", "synthetic_trace", "layer_timeline", "METHODS",
]


@dataclass(frozen=True)
class Hardware:
    """GPU + host link. hbm_bw, pcie_bw in bytes/s; flops in FLOP/s (dense bf16); hbm_bytes: capacity."""
    name: str
    hbm_bw: float
    pcie_bw: float
    flops: float
    n_sms: int
    hbm_bytes: float
    efficiency: float = 0.7        # achievable fraction of the peak HBM bandwidth and FLOP rate
    launch_s: float = 5e-6         # fixed cost of one kernel launch / small op
    sync_s: float = 10e-6          # cross-stream event wait at the end of an overlapped layer
    cta_half: int = 16             # copy CTAs reaching half the link bandwidth (UVA loads need many in flight)

    def __post_init__(self):
        for f in ("hbm_bw", "pcie_bw", "flops", "hbm_bytes"):
            if not getattr(self, f) > 0:
                raise ValueError(f"Hardware.{f} must be > 0, got {getattr(self, f)!r}")
        if not (isinstance(self.n_sms, (int, np.integer)) and self.n_sms > 0):
            raise ValueError(f"Hardware.n_sms must be a positive integer, got {self.n_sms!r}")
        if not 0 < self.efficiency <= 1:
            raise ValueError(f"Hardware.efficiency must lie in (0, 1], got {self.efficiency!r}")

    def copy_bw(self, ctas: int) -> float:
        """Host->device bandwidth reached by `ctas` resident copy CTAs: saturating, c / (c + cta_half)."""
        ctas = _check_ctas(ctas, self)
        return self.pcie_bw * ctas / (ctas + self.cta_half)


# Nominal spec-sheet values (our assumption): H100 SXM 80 GB HBM3 3.35 TB/s, PCIe Gen5 x16 ~55 GB/s achievable,
# 989 TFLOP/s bf16 dense, 132 SMs; A100 SXM 80 GB HBM2e 2.0 TB/s, PCIe Gen4 x16 ~25 GB/s, 312 TFLOP/s, 108 SMs.
H100 = Hardware("H100 (80 GB HBM3, PCIe Gen5 x16)", hbm_bw=3.35e12, pcie_bw=55e9, flops=989e12, n_sms=132,
                hbm_bytes=80e9)
A100 = Hardware("A100 (80 GB HBM2e, PCIe Gen4 x16)", hbm_bw=2.0e12, pcie_bw=25e9, flops=312e12, n_sms=108,
                hbm_bytes=80e9)


@dataclass(frozen=True)
class ModelSpec:
    """An 8B GQA decoder with an InfLLM-V2 block-sparse budget (sizes in elements; bf16 = 2 bytes)."""
    n_layers: int = 32
    d_model: int = 4096
    n_q_heads: int = 32
    n_kv_heads: int = 2
    d_head: int = 128
    d_ff: int = 16384
    vocab: int = 73448
    block: int = 64
    n_init: int = 1
    n_local: int = 32              # 2048-token local window
    topk: int = 63                 # 96-block budget minus init and local (our reading, see notebook)
    window: int = 32               # compressed keys (32, 16)
    stride: int = 16
    bytes_per: int = 2
    churn: float = 0.1             # fraction of the top-k blocks that are new at each step (assumption)
    reserve_bytes: float = 10e9    # CUDA context, allocator slack, activations, prefill workspace (assumption)

    @property
    def kv_token_layer(self) -> int:
        """Bytes of K and V for one token in one layer."""
        return 2 * self.n_kv_heads * self.d_head * self.bytes_per

    @property
    def block_bytes(self) -> int:
        return self.block * self.kv_token_layer

    @property
    def layer_params(self) -> int:
        d, hq, hk = self.d_model, self.n_q_heads * self.d_head, self.n_kv_heads * self.d_head
        return d * hq * 2 + d * hk * 2 + 3 * d * self.d_ff          # q, o, k, v, gated MLP

    @property
    def forecast_params(self) -> int:
        """One Forecast head per GQA group per layer: d_model -> Hkv·d_head."""
        return self.n_layers * self.d_model * self.n_kv_heads * self.d_head

    @property
    def weight_bytes(self) -> int:
        return (self.n_layers * self.layer_params + 2 * self.vocab * self.d_model) * self.bytes_per

    @property
    def budget_blocks(self) -> int:
        return self.n_init + self.n_local + self.topk


MINICPM_8B = ModelSpec()
METHODS = ("Sparse†", "Sparse", "SparDA (no prefetch)", "SparDA")


def _check_ctas(ctas, hw):
    if not (isinstance(ctas, (int, np.integer)) and 1 <= ctas < hw.n_sms):
        raise ValueError(f"ctas must be an integer in [1, n_sms={hw.n_sms}), got {ctas!r}")
    return int(ctas)


def _check_bc(batch, context):
    if not (isinstance(batch, (int, np.integer)) and batch >= 1):
        raise ValueError(f"batch must be an integer >= 1, got {batch!r}")
    if not (isinstance(context, (int, np.integer)) and context >= 1):
        raise ValueError(f"context must be an integer >= 1 (tokens), got {context!r}")


@dataclass(frozen=True)
class LayerTimes:
    """Per-layer phase times of one decode step (seconds).

    sel: InfLLM-V2 selector (Hq heads + softmax); forecast_sel: Forecast selector (Hkv heads, logits only);
    transfer: host->device copy of the new blocks on the resident copy CTAs; transfer_serial: the same bytes
    with the whole GPU free to copy; compute: attention + projections + MLP on all SMs; compute_shared: the
    same with `ctas` SMs lent to copying; sync: cross-stream wait.
    """
    sel: float
    forecast_sel: float
    transfer: float
    transfer_serial: float
    compute: float
    compute_shared: float
    sync: float
    new_blocks: float


def serial_layer_time(t: LayerTimes) -> float:
    """Sparse with offload: select, then copy, then compute, one after the other."""
    return t.sel + t.transfer_serial + t.compute


def overlapped_layer_time(t: LayerTimes) -> float:
    """SparDA: forecast + select, then the copy of the next layer's new blocks runs beside this layer's compute
    (on SMs taken from it), then the streams sync."""
    return t.forecast_sel + max(t.transfer, t.compute_shared) + t.sync


def layer_times(hw: Hardware, m: ModelSpec, batch: int, context: int, ctas=None, churn=None) -> LayerTimes:
    """Roofline times of one layer for `batch` sequences of `context` cached tokens (one new token each).

    ctas: resident copy CTAs (None: the paper's heuristic, ``heuristic_ctas``); churn: fraction of the top-k
    blocks newly selected at each step (None: ``m.churn``).
    """
    _check_bc(batch, context)
    ctas = _check_ctas(heuristic_ctas(hw, batch) if ctas is None else ctas, hw)
    churn = m.churn if churn is None else churn
    if not 0 <= churn <= 1:
        raise ValueError(f"churn must lie in [0, 1], got {churn!r}")
    hbm, fl = hw.hbm_bw * hw.efficiency, hw.flops * hw.efficiency
    n_c = max(0, (context - m.window) // m.stride + 1)                      # compressed positions
    n_b = -(-context // m.block)
    kc_bytes = batch * n_c * m.n_kv_heads * m.d_head * m.bytes_per          # read by both selectors
    # InfLLM-V2: Hq heads write fp32 scores, softmax reads/writes them, the group sum and the block pooling
    # read them again; the Forecast selector scores one head per group and skips the softmax.
    sel_bytes = kc_bytes + batch * m.n_q_heads * n_c * 4 * 4 + batch * m.n_kv_heads * n_b * 4 * 2
    fsel_bytes = kc_bytes + batch * m.n_kv_heads * n_c * 4 * 2 + batch * m.n_kv_heads * n_b * 4 * 2 \
        + m.d_model * m.n_kv_heads * m.d_head * m.bytes_per                 # the Forecast projection weights
    sel = 4 * hw.launch_s + sel_bytes / hbm
    fsel = 3 * hw.launch_s + fsel_bytes / hbm
    # only newly selected dynamic blocks move; init and local blocks were resident at the previous step
    sel_blocks = min(m.budget_blocks, n_b)
    dyn = max(0, min(m.topk, n_b - m.n_init - m.n_local))
    new = churn * dyn
    bytes_new = batch * new * m.block_bytes
    transfer = hw.launch_s + bytes_new / hw.copy_bw(ctas)
    transfer_serial = hw.launch_s + bytes_new / hw.copy_bw(hw.n_sms - 1)
    attn_tokens = min(context, sel_blocks * m.block)
    attn_bytes = batch * attn_tokens * m.kv_token_layer
    flops = 2 * batch * m.layer_params + 4 * batch * attn_tokens * m.n_q_heads * m.d_head
    compute = 6 * hw.launch_s + max((m.layer_params * m.bytes_per + attn_bytes) / hbm, flops / fl)
    compute_shared = 6 * hw.launch_s + (compute - 6 * hw.launch_s) * hw.n_sms / (hw.n_sms - ctas)
    return LayerTimes(sel, fsel, transfer, transfer_serial, compute, compute_shared, hw.sync_s, new)


def step_time(hw: Hardware, m: ModelSpec, batch: int, context: int, method: str, ctas=None, churn=None,
              overlapped_fn=None) -> float:
    """Seconds for one decode step of the whole model (all layers + the LM head).

    method: "Sparse†" (all KV on GPU, InfLLM-V2 selector), "Sparse" (offloaded, serial), "SparDA (no prefetch)"
    (Forecast selector, serial copy), "SparDA" (Forecast selector, overlapped copy). The first layer never
    transfers (its KV stays on GPU for SparDA; for the others we grant the same to keep the comparison fair).
    overlapped_fn: the per-layer overlapped formula (default ``overlapped_layer_time``; the exercise swaps it).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    t = layer_times(hw, m, batch, context, ctas, churn)
    head = hw.launch_s + 2 * m.vocab * m.d_model * m.bytes_per / (hw.hbm_bw * hw.efficiency)
    first_sparse = t.sel + t.compute
    first_fc = t.forecast_sel + t.compute
    if method == "Sparse†":
        per, first = t.sel + t.compute, first_sparse
    elif method == "Sparse":
        per, first = serial_layer_time(t), first_sparse
    elif method == "SparDA (no prefetch)":
        per, first = t.forecast_sel + t.transfer_serial + t.compute, first_fc
    else:
        per, first = (overlapped_fn or overlapped_layer_time)(t), first_fc + t.sync
    return first + (m.n_layers - 1) * per + head


def throughput(hw, m, batch, context, method, ctas=None, churn=None, overlapped_fn=None) -> float:
    """Decode tokens/s (one token per sequence per step); 0.0 when the batch does not fit in HBM (OOM)."""
    if batch > max_batch(hw, m, context, method):
        return 0.0
    return batch / step_time(hw, m, batch, context, method, ctas, churn, overlapped_fn)


def gpu_bytes(m: ModelSpec, batch: int, context: int, method: str) -> float:
    """HBM needed: weights + reserve + per-sequence state.

    Sparse†: all KV + compressed keys. Sparse: compressed keys + the previous step's blocks (block cache).
    SparDA: compressed keys + the first layer's full KV + the block cache + one layer of prefetch buffer.
    The CPU holds the rest of the offloaded KV.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    _check_bc(batch, context)
    n_c = max(0, (context - m.window) // m.stride + 1)
    kc = n_c * m.n_kv_heads * m.d_head * m.bytes_per * m.n_layers
    full_kv = context * m.kv_token_layer * m.n_layers
    cache = min(m.budget_blocks * m.block, context) * m.kv_token_layer * m.n_layers
    if method == "Sparse†":
        per_seq = full_kv + kc
    elif method == "Sparse":
        per_seq = kc + cache
    else:
        per_seq = kc + context * m.kv_token_layer + cache + m.topk * m.block_bytes
    return m.weight_bytes + m.reserve_bytes + batch * per_seq


def max_batch(hw: Hardware, m: ModelSpec, context: int, method: str) -> int:
    """Largest batch whose `gpu_bytes` fits in HBM (0 if not even one sequence fits)."""
    one = gpu_bytes(m, 1, context, method)
    fixed = m.weight_bytes + m.reserve_bytes
    per = one - fixed
    return max(0, int((hw.hbm_bytes - fixed) // per))


def heuristic_ctas(hw: Hardware, batch: int) -> int:
    """The paper's rule (Table 7): 16 CTAs below a batch threshold (32 on H100, 64 on A100), else 32."""
    threshold = 64 if hw.name.startswith("A100") else 32
    return 16 if batch < threshold else 32


def batch_sweep(hw, m, context, batches=(4, 8, 16, 32, 64, 128), methods=METHODS, ctas=None, churn=None):
    """{method: [tokens/s per batch]} (0.0 = OOM); ctas=None uses the paper's heuristic per batch."""
    out = {}
    for meth in methods:
        out[meth] = [throughput(hw, m, int(b), context, meth, ctas, churn) for b in batches]
    return out


def cta_sweep(hw, m, context, batches=(16, 64), ctas=(8, 16, 32, 64), churn=None):
    """SparDA tokens/s for each (batch, CTA count): array (len(batches), len(ctas))."""
    return np.array([[throughput(hw, m, int(b), context, "SparDA", int(c), churn) for c in ctas] for b in batches])


# ---------------------------------------------------------------------------------------------------------
# block residency: what actually moves
# ---------------------------------------------------------------------------------------------------------
def new_blocks(selected, resident):
    """Blocks to copy: selected and not resident. selected, resident: 1-D int arrays (-1 entries ignored)."""
    selected, resident = np.asarray(selected), np.asarray(resident)
    sel = np.unique(selected[selected >= 0])
    return sel[~np.isin(sel, resident[resident >= 0])]


def replay_trace(trace, always_resident=()):
    """Replay a decode trace with a block cache holding the previous step's selection.

    trace: list over steps of 1-D int arrays (one layer, one sequence). always_resident: blocks on the GPU
    anyway (e.g. init, or a layer kept on GPU). Returns the number of blocks copied at each step (the first
    step copies everything it selects that is not always resident).
    """
    resident = np.asarray(always_resident, dtype=np.int64)
    prev = np.zeros(0, np.int64)
    copied = []
    for sel in trace:
        new = new_blocks(sel, np.concatenate([prev, resident]))
        copied.append(len(new))
        prev = np.unique(np.asarray(sel)[np.asarray(sel) >= 0])
    return np.array(copied)


def synthetic_trace(n_candidates: int, topk: int, steps: int, churn: float, seed: int = 0):
    """Top-k selections over decode steps where a fraction `churn` of the blocks is replaced at each step."""
    if not (1 <= topk <= n_candidates):
        raise ValueError(f"topk must lie in [1, n_candidates={n_candidates}], got {topk}")
    if not 0 <= churn <= 1:
        raise ValueError(f"churn must lie in [0, 1], got {churn!r}")
    rng = np.random.default_rng(seed)
    cur = np.sort(rng.choice(n_candidates, topk, replace=False))
    trace = [cur]
    n_new = int(round(churn * topk))
    for _ in range(steps - 1):
        keep = rng.choice(cur, topk - n_new, replace=False)
        pool = np.setdiff1d(np.arange(n_candidates), cur)
        cur = np.sort(np.concatenate([keep, rng.choice(pool, min(n_new, len(pool)), replace=False)]))
        trace.append(cur)
    return trace


# ---------------------------------------------------------------------------------------------------------
# timelines for plots
# ---------------------------------------------------------------------------------------------------------
def layer_timeline(hw, m, batch, context, ctas=None, n_layers=3, churn=None):
    """Segments (lane, start_s, end_s, label) of `n_layers` middle layers, serial vs overlapped.

    Lanes: "serial: GPU", "overlapped: compute", "overlapped: copy". Returns (segments, totals) where totals
    = {"serial": seconds, "overlapped": seconds} for those layers.
    """
    t = layer_times(hw, m, batch, context, ctas, churn)
    segs, s = [], 0.0
    for _ in range(n_layers):
        for dur, lab in ((t.sel, "select"), (t.transfer_serial, "copy"), (t.compute, "compute")):
            segs.append(("serial: GPU", s, s + dur, lab))
            s += dur
    o = 0.0
    for _ in range(n_layers):
        segs.append(("overlapped: compute", o, o + t.forecast_sel, "forecast+select"))
        o += t.forecast_sel
        segs.append(("overlapped: compute", o, o + t.compute_shared, "compute"))
        segs.append(("overlapped: copy", o, o + t.transfer, "copy next layer"))
        o += max(t.transfer, t.compute_shared)
        segs.append(("overlapped: compute", o, o + t.sync, "sync"))
        o += t.sync
    return segs, {"serial": s, "overlapped": o}


def with_(hw: Hardware, **kw) -> Hardware:
    """A copy of a preset with some fields changed (e.g. with_(H100, pcie_bw=25e9))."""
    return replace(hw, **kw)


# ---------------------------------------------------------------------------------------------------------
# reported numbers (seed 002: Tables 4, 7, 9, 10 of the paper; tokens/s, None = OOM or not reported)
# ---------------------------------------------------------------------------------------------------------
PAPER = {
    # H100, 128K context, decode (Table 4, p. 9)
    "decode_h100_128k": {
        "batches": (4, 8, 16, 64),
        "MiniCPM": {"Dense†": (108.6, None, None, None), "Sparse†": (189.5, None, None, None),
                    "Sparse": (167.8, 279.5, 447.9, 788.9), "InfiniGen": (51.8, 66.5, 85.6, None),
                    "SparDA": (240.2, 471.2, 705.3, 1000.1)},
        "NOSA": {"Sparse†": (179.3, None, None, None), "Sparse": (173.2, 285.4, 529.2, 1298.3),
                 "InfiniGen": (77.5, 105.2, 131.7, None), "SparDA": (219.0, 399.3, 735.0, 1463.3)},
    },
    # H100, 128K, decode without / with asynchronous prefetch (Table 10, p. 16)
    "no_prefetch_h100_128k": {
        "batches": (4, 16, 64),
        "MiniCPM": {"Sparse": (167.8, 447.9, 788.9), "SparDA (no prefetch)": (247.3, 505.9, 696.9),
                    "SparDA": (240.2, 705.3, 1000.1)},
        "NOSA": {"Sparse": (173.2, 529.2, 1298.3), "SparDA (no prefetch)": (226.5, 653.0, 1063.8),
                 "SparDA": (219.0, 735.0, 1463.3)},
    },
    # H100, MiniCPM, 32K: SparDA tokens/s by copy CTAs (Table 7, p. 15; only the cells the seed quotes)
    "cta_h100_32k": {16: {16: 918.5, 64: 737.3}, 64: {16: 1255.9, 32: 1328.0, 64: 1380.2}},
    # H100, 32K, MiniCPM batch 16 with the KV comfortably on the GPU (Sec. 5.3)
    "resident_h100_32k_b16": {"Sparse†": 1073.0, "SparDA": 918.5},
    # A100, 128K decode (Table 9): MiniCPM batch 8, NOSA batch 16
    "decode_a100_128k": {"MiniCPM b8": {"Sparse": 195.1, "SparDA": 303.3},
                         "NOSA b16": {"Sparse": 395.6, "SparDA": 526.3}},
}
