"""A roofline-style simulator of decode with the KV cache offloaded to CPU memory (SparDA §4.3, §5.3).

Per layer and decode step, with the block-sparse backbone (64-token blocks, init + local + top-k):

    serial     (Sparse, offloaded):  t_sel + t_transfer + t_compute
    overlapped (SparDA):             t_forecast+sel + max(t_transfer, t_compute') + t_sync

where the overlapped transfer is issued one layer early (the Forecast of layer l selects layer l+1's blocks),
runs on resident copy CTAs that take SMs away from compute (t_compute' > t_compute), and only moves blocks that
are newly selected and not already on the GPU (the previous step's blocks stay cached). The first layer's KV
stays on the GPU. This is a teaching approximation (the lab's), not the paper's performance model: it predicts
directions (who wins when), not the paper's absolute tokens/s.

Hardware numbers in the presets are ours, not the paper's: HBM and FLOP/s are spec-sheet values, the PCIe rates
are effective ones we assume (55 / 25 GB/s, 87% / 79% of Gen5 / Gen4 x16's nominal 63 / 31.5 GB/s per direction);
``efficiency`` scales them further. Every time is in seconds, every size in bytes.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from hybrid_lab.core import checks

__all__ = [
    "Hardware", "H100", "A100", "ModelSpec", "MINICPM_8B", "LayerTimes", "serial_layer_time",
    "overlapped_layer_time", "layer_times", "step_time", "throughput", "gpu_bytes", "max_batch", "batch_sweep",
    "cta_sweep", "heuristic_ctas", "new_blocks", "replay_trace", "synthetic_trace", "layer_timeline", "METHODS",
    "calibrate_selector", "reserve_bounds", "PAPER_ACCURACY", "accuracy_text",
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
    sel_latency_s: float = 0.0     # fixed extra latency per layer of the InfLLM-V2 selector at decode (0: roofline)
    fsel_latency_s: float = 0.0    # the same for the Forecast selector (see ``calibrate_selector``)

    def __post_init__(self):
        for f in ("hbm_bw", "pcie_bw", "flops", "hbm_bytes"):
            checks.positive_number(f"Hardware.{f}", getattr(self, f))
        checks.pos_int("Hardware.n_sms", self.n_sms, minimum=2)          # at least one SM computes beside a copy CTA
        checks.positive_number("Hardware.efficiency", self.efficiency)
        checks.number_in("Hardware.efficiency", self.efficiency, 0.0, 1.0)
        checks.nonneg_number("Hardware.launch_s", self.launch_s)
        checks.nonneg_number("Hardware.sync_s", self.sync_s)
        checks.pos_int("Hardware.cta_half", self.cta_half)      # 0 would give the full link to a single CTA
        checks.nonneg_number("Hardware.sel_latency_s", self.sel_latency_s)
        checks.nonneg_number("Hardware.fsel_latency_s", self.fsel_latency_s)

    def copy_bw(self, ctas: int) -> float:
        """Host->device bandwidth reached by `ctas` resident copy CTAs: saturating, c / (c + cta_half)."""
        ctas = checks.int_in("ctas", ctas, 1, self.n_sms)
        return self.pcie_bw * ctas / (ctas + self.cta_half)


# Our assumptions: spec-sheet HBM and FLOP/s; PCIe as effective rates (nominal x16: Gen5 63, Gen4 31.5 GB/s). H100
# SXM 80 GB HBM3 3.35 TB/s, PCIe Gen5 x16 ~55 GB/s effective,
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

    def __post_init__(self):
        for f in ("n_layers", "d_model", "n_q_heads", "n_kv_heads", "d_head", "d_ff", "vocab", "block", "window",
                  "stride", "bytes_per"):
            checks.pos_int(f"ModelSpec.{f}", getattr(self, f))
        checks.nonneg_int("ModelSpec.n_init", self.n_init)
        for f in ("n_local", "topk"):      # the query's own block is local; a budget without top-k is not sparse
            checks.pos_int(f"ModelSpec.{f}", getattr(self, f))
        checks.heads(self.n_q_heads, self.n_kv_heads, "ModelSpec.n_q_heads", "ModelSpec.n_kv_heads")
        if self.stride > self.window:
            raise ValueError(f"ModelSpec.stride={self.stride} must be <= window={self.window} "
                             f"(windows cover every token)")
        checks.number_in("ModelSpec.churn", self.churn, 0.0, 1.0)
        checks.nonneg_number("ModelSpec.reserve_bytes", self.reserve_bytes)

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


def _hw_m(hw, *m):
    """hw, and m where the caller takes one (None is not a ModelSpec)."""
    if not isinstance(hw, Hardware):
        raise ValueError(f"hw must be a Hardware (e.g. H100), got {type(hw).__name__}")
    if m and not isinstance(m[0], ModelSpec):
        raise ValueError(f"m must be a ModelSpec (e.g. MINICPM_8B), got {type(m[0]).__name__}")


def _method(method):
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    return method


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

    def __post_init__(self):
        for f in ("sel", "forecast_sel", "transfer", "transfer_serial", "compute", "compute_shared", "sync",
                  "new_blocks"):                  # new_blocks: an expected count (churn x top-k), so a real number
            checks.nonneg_number(f"LayerTimes.{f}", getattr(self, f))


def _times(t) -> LayerTimes:
    if not isinstance(t, LayerTimes):
        raise ValueError(f"t must be a LayerTimes (layer_times(...)), got {type(t).__name__}")
    return t


def serial_layer_time(t: LayerTimes) -> float:
    """Sparse with offload: select, then copy, then compute, one after the other."""
    t = _times(t)
    return t.sel + t.transfer_serial + t.compute


def overlapped_layer_time(t: LayerTimes) -> float:
    """SparDA: forecast + select, then the copy of the next layer's new blocks runs beside this layer's compute
    (on SMs taken from it), then the streams sync."""
    t = _times(t)
    return t.forecast_sel + max(t.transfer, t.compute_shared) + t.sync


def layer_times(hw: Hardware, m: ModelSpec, batch: int, context: int, ctas=None, churn=None) -> LayerTimes:
    """Roofline times of one layer for `batch` sequences of `context` cached tokens (one new token each).

    ctas: resident copy CTAs (None: the paper's heuristic, ``heuristic_ctas``); churn: fraction of the top-k
    blocks newly selected at each step (None: ``m.churn``). batch, context (tokens) >= 1; ctas in [1, n_sms).
    """
    _hw_m(hw, m)
    batch, context = checks.pos_int("batch", batch), checks.pos_int("context", context)
    ctas = checks.int_in("ctas", heuristic_ctas(hw, batch) if ctas is None else ctas, 1, hw.n_sms)
    churn = m.churn if churn is None else checks.number_in("churn", churn, 0.0, 1.0)
    hbm, fl = hw.hbm_bw * hw.efficiency, hw.flops * hw.efficiency
    n_c = max(0, (context - m.window) // m.stride + 1)                      # compressed positions
    n_b = -(-context // m.block)
    kc_bytes = batch * n_c * m.n_kv_heads * m.d_head * m.bytes_per          # read by both selectors
    # InfLLM-V2: Hq heads write fp32 scores, softmax reads/writes them, the group sum and the block pooling
    # read them again; the Forecast selector scores one head per group and skips the softmax.
    sel_bytes = kc_bytes + batch * m.n_q_heads * n_c * 4 * 4 + batch * m.n_kv_heads * n_b * 4 * 2
    fsel_bytes = kc_bytes + batch * m.n_kv_heads * n_c * 4 * 2 + batch * m.n_kv_heads * n_b * 4 * 2 \
        + m.d_model * m.n_kv_heads * m.d_head * m.bytes_per                 # the Forecast projection weights
    sel = 4 * hw.launch_s + sel_bytes / hbm + hw.sel_latency_s
    fsel = 3 * hw.launch_s + fsel_bytes / hbm + hw.fsel_latency_s
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
    _method(method)
    if overlapped_fn is not None and not callable(overlapped_fn):
        raise ValueError(f"overlapped_fn must be a function LayerTimes -> seconds, got {overlapped_fn!r}")
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
        checks.nonneg_number("overlapped_fn(t)", per)
    return first + (m.n_layers - 1) * per + head


def throughput(hw, m, batch, context, method, ctas=None, churn=None, overlapped_fn=None) -> float:
    """Decode tokens/s (one token per sequence per step); 0.0 when the batch does not fit in HBM (OOM)."""
    batch = checks.pos_int("batch", batch)
    if batch > max_batch(hw, m, context, method):
        return 0.0
    return batch / step_time(hw, m, batch, context, method, ctas, churn, overlapped_fn)


def gpu_bytes(m: ModelSpec, batch: int, context: int, method: str) -> float:
    """HBM needed: weights + reserve + per-sequence state.

    Sparse†: all KV + compressed keys. Sparse: compressed keys + the previous step's blocks (block cache).
    SparDA: compressed keys + the first layer's full KV + the block cache + one layer of prefetch buffer.
    The CPU holds the rest of the offloaded KV.
    """
    _method(method)
    if not isinstance(m, ModelSpec):
        raise ValueError(f"m must be a ModelSpec (e.g. MINICPM_8B), got {type(m).__name__}")
    batch = checks.pos_int("batch", batch)
    context = checks.pos_int("context", context)
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
    _hw_m(hw, m)
    one = gpu_bytes(m, 1, context, method)
    fixed = m.weight_bytes + m.reserve_bytes
    per = one - fixed
    return max(0, int((hw.hbm_bytes - fixed) // per))


def heuristic_ctas(hw: Hardware, batch: int) -> int:
    """The paper's rule (Table 7): 16 CTAs below a batch threshold (32 on H100, 64 on A100), else 32."""
    _hw_m(hw)
    batch = checks.pos_int("batch", batch)
    threshold = 64 if hw.name.startswith("A100") else 32
    return 16 if batch < threshold else 32


def batch_sweep(hw, m, context, batches=(4, 8, 16, 32, 64, 128), methods=METHODS, ctas=None, churn=None):
    """{method: [tokens/s per batch]} (0.0 = OOM); ctas=None uses the paper's heuristic per batch.

    batches: integers >= 1; methods: names from METHODS.
    """
    batches = checks.int_array("batches", batches, 1, lo=1)
    if batches.size == 0 or len(methods) == 0:
        raise ValueError(f"batches and methods must be non-empty, got {batches.tolist()} and {list(methods)}")
    for meth in methods:
        _method(meth)
    return {meth: [throughput(hw, m, int(b), context, meth, ctas, churn) for b in batches] for meth in methods}


def cta_sweep(hw, m, context, batches=(16, 64), ctas=(8, 16, 32, 64), churn=None):
    """SparDA tokens/s for each (batch, CTA count): array (len(batches), len(ctas)); both lists of integers >= 1."""
    batches, ctas = checks.int_array("batches", batches, 1, lo=1), checks.int_array("ctas", ctas, 1, lo=1)
    if batches.size == 0 or ctas.size == 0:
        raise ValueError(f"batches and ctas must be non-empty, got {batches.tolist()} and {ctas.tolist()}")
    return np.array([[throughput(hw, m, int(b), context, "SparDA", int(c), churn) for c in ctas] for b in batches])


# ---------------------------------------------------------------------------------------------------------
# what the roofline leaves out: the selectors' fixed latency, and the engine's memory beyond KV
# ---------------------------------------------------------------------------------------------------------
def calibrate_selector(hw: Hardware, m: ModelSpec, batch: int, context: int, sparse_tps: float,
                       no_prefetch_tps: float) -> Hardware:
    """A copy of `hw` whose two selectors carry the fixed per-layer latency that makes the simulator reproduce two
    measured throughputs at one (batch, context): Sparse (offloaded, serial) and SparDA without prefetch.

    The two methods differ only in the selector, and each selector runs once in every layer of a step, so each
    latency is (measured step time - simulated step time) / n_layers, in closed form. The roofline sees only the
    bytes a selector reads; decode selection kernels are small and latency-bound (SparDA Fig. 3: decode selection
    time nearly flat in the length). Raises ValueError when the simulator is already slower than the measurement.
    """
    _hw_m(hw, m)
    batch, context = checks.pos_int("batch", batch), checks.pos_int("context", context)
    base = replace(hw, sel_latency_s=0.0, fsel_latency_s=0.0)
    lat = {}
    for name, meth, tps in (("sel_latency_s", "Sparse", sparse_tps),
                            ("fsel_latency_s", "SparDA (no prefetch)", no_prefetch_tps)):
        arg = "sparse_tps" if meth == "Sparse" else "no_prefetch_tps"
        tps = checks.positive_number(arg, tps)
        extra = (batch / tps - step_time(base, m, batch, context, meth)) / m.n_layers
        if extra < 0:
            raise ValueError(f"{arg}={tps} tokens/s is faster than the simulator's {meth} "
                             f"({batch / step_time(base, m, batch, context, meth):.1f} tokens/s): no latency to add")
        lat[name] = extra
    return replace(base, **lat)


def reserve_bounds(hw: Hardware, m: ModelSpec, facts) -> tuple:
    """The range of fixed reserve (bytes beyond weights and per-sequence state) consistent with feasibility facts.

    facts: iterable of (context, method, batch, fits) with fits True (the paper ran it) or False (it reported OOM).
    A fact that fits needs reserve <= HBM - weights - batch·per_seq; an OOM needs reserve > that. Returns (lo, hi):
    lo > hi means no single reserve explains every fact, so the real engine holds per-sequence memory that
    ``gpu_bytes`` does not count.
    """
    _hw_m(hw, m)
    if not isinstance(facts, (list, tuple)):
        raise ValueError(f"facts must be a list of (context, method, batch, fits) tuples, got {type(facts).__name__}")
    lo, hi = 0.0, float(hw.hbm_bytes)
    for i, f in enumerate(facts):
        if not (isinstance(f, (tuple, list)) and len(f) == 4 and isinstance(f[3], bool)):
            raise ValueError(f"facts[{i}] must be (context, method, batch, fits: bool), got {f!r}")
        ctx, meth, b, fits = f
        if meth not in METHODS:
            raise ValueError(f"facts[{i}] method must be one of {METHODS}, got {meth!r}")
        per_seq = gpu_bytes(m, 1, ctx, meth) - m.weight_bytes - m.reserve_bytes
        room = hw.hbm_bytes - m.weight_bytes - checks.pos_int(f"facts[{i}] batch", b) * per_seq
        if fits:
            hi = min(hi, room)
        else:
            lo = max(lo, room)
    return lo, hi


# ---------------------------------------------------------------------------------------------------------
# block residency: what actually moves
# ---------------------------------------------------------------------------------------------------------
def new_blocks(selected, resident):
    """Blocks to copy: selected and not resident, ascending. selected, resident: 1-D int arrays >= -1 (-1 entries
    ignored).

    ``selected`` is one step's selection, an index set: a block id listed twice is refused (a selector lists each
    block once; a repeat means a bug upstream, e.g. two heads' selections concatenated, and a copy count that
    silently deduplicates it would hide it). ``resident`` is what the GPU holds, a set that is often the union of
    several caches (the previous step's blocks and the always-resident ones, which overlap): a repeated id there is
    accepted and means the same as one (membership only)."""
    selected = checks.no_repeats("selected", checks.int_array("selected", selected, 1, lo=-1), "block id")
    resident = checks.int_array("resident", resident, 1, lo=-1)
    sel = np.unique(selected[selected >= 0])
    return sel[~np.isin(sel, resident[resident >= 0])]


def replay_trace(trace, always_resident=()):
    """Replay a decode trace with a block cache holding the previous step's selection.

    trace: list over steps of 1-D int arrays (one layer, one sequence). always_resident: block ids >= 0 on the
    GPU anyway (e.g. init, or a layer kept on GPU). Returns the number of blocks copied at each step (the first
    step copies everything it selects that is not always resident). Block ids are integers >= -1 (-1 = empty); a
    step lists a block at most once (a repeat is refused, as in :func:`new_blocks`); ``always_resident`` may repeat
    one and may overlap the steps' selections.
    """
    resident = checks.int_array("always_resident", always_resident, 1, lo=0)
    if not isinstance(trace, (list, tuple)):
        raise ValueError(f"trace must be a list of 1-D block-id arrays (one per step), got {type(trace).__name__}")
    prev = np.zeros(0, np.int64)
    copied = []
    for i, sel in enumerate(trace):
        sel = checks.no_repeats(f"trace[{i}]", checks.int_array(f"trace[{i}]", sel, 1, lo=-1), "block id")
        new = new_blocks(sel, np.concatenate([prev, resident]))
        copied.append(len(new))
        prev = np.unique(sel[sel >= 0])
    return np.array(copied)


def synthetic_trace(n_candidates: int, topk: int, steps: int, churn: float, seed: int = 0):
    """Top-k selections over decode steps where a fraction `churn` of the blocks is replaced at each step.

    round(churn·topk) blocks are replaced by blocks not selected at the previous step, so that many must exist
    (n_candidates - topk of them).
    """
    n_candidates, steps = checks.pos_int("n_candidates", n_candidates), checks.pos_int("steps", steps)
    topk = checks.pos_int("topk", topk)
    checks.output_size("n_candidates (the candidate block ids, np.arange(n_candidates))", (n_candidates,))
    checks.output_size("steps or topk (steps selections of topk blocks)", (steps, topk))
    if topk > n_candidates:
        raise ValueError(f"topk must lie in [1, n_candidates={n_candidates}], got {topk}")
    churn = checks.number_in("churn", churn, 0.0, 1.0)
    checks.nonneg_int("seed", seed)
    if round(churn * topk) > n_candidates - topk:
        raise ValueError(f"churn={churn} replaces {round(churn * topk)} of {topk} blocks per step, but only "
                         f"n_candidates - topk = {n_candidates - topk} unselected blocks exist")
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
    = {"serial": seconds, "overlapped": seconds} for those layers (n_layers >= 1).
    """
    n_layers = checks.pos_int("n_layers", n_layers)
    checks.output_size("n_layers (7 segments per layer)", (n_layers, 7))
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
    """A copy of a preset with some fields changed (e.g. with_(H100, pcie_bw=25e9)); checked like a new one."""
    _hw_m(hw)
    unknown = sorted(set(kw) - set(Hardware.__dataclass_fields__))
    if unknown:
        raise ValueError(f"{unknown[0]!r} is not a Hardware field ({', '.join(Hardware.__dataclass_fields__)})")
    return replace(hw, **kw)


# ---------------------------------------------------------------------------------------------------------
# reported numbers (SparDA Tables 4, 7, 9, 10; tokens/s, None = OOM or not reported)
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
    # H100, MiniCPM, 32K: SparDA tokens/s by copy CTAs (Table 7, p. 15; only the cells the notebook uses)
    "cta_h100_32k": {16: {16: 918.5, 64: 737.3}, 64: {16: 1255.9, 32: 1328.0, 64: 1380.2}},
    # H100, 32K, MiniCPM batch 16 with the KV comfortably on the GPU (Sec. 5.3)
    "resident_h100_32k_b16": {"Sparse†": 1073.0, "SparDA": 918.5},
    # A100, 128K decode (Table 9): MiniCPM batch 8, NOSA batch 16
    "decode_a100_128k": {"MiniCPM b8": {"Sparse": 195.1, "SparDA": 303.3},
                         "NOSA b16": {"Sparse": 395.6, "SparDA": 526.3}},
}

# reported accuracy (SparDA Table 1, p. 7: four benchmark families and their arithmetic mean; Table 2, p. 7: RULER
# average accuracy at longer contexts). Higher is better.
PAPER_ACCURACY = {
    "families": ("HELMET", "LongBench", "RULER", "Reasoning", "Avg"),
    "table1": {"MiniCPM": {"Dense": (41.7, 44.8, 85.3, 82.3, 63.5), "Sparse": (38.9, 45.0, 78.2, 83.6, 61.4),
                           "InfiniGen": (33.5, 45.1, 68.4, 83.7, 57.7), "SparDA": (38.3, 45.1, 78.7, 84.7, 61.7)},
               "NOSA": {"Dense": (39.3, 42.5, 86.2, 41.6, 52.4), "Sparse": (32.2, 42.4, 72.2, 50.7, 49.4),
                        "InfiniGen": (28.1, 41.6, 65.2, 47.6, 45.6), "SparDA": (33.4, 42.3, 73.9, 57.2, 51.7)}},
    "lengths": (32768, 65536, 98304, 131072),
    "table2": {"MiniCPM": {"Sparse": (86.1, 78.2, 68.7, 67.7), "SparDA": (87.6, 78.7, 70.8, 68.8)},
               "NOSA": {"Sparse": (72.2, 56.6, 48.8, 40.7), "SparDA": (73.9, 60.5, 52.9, 45.0)}},
}


def accuracy_text() -> str:
    """The reported accuracy tables as plain text: Table 1 (four families + Avg) and Table 2 (RULER by length, with
    the SparDA - Sparse difference in points, computed from the reported values)."""
    fam = PAPER_ACCURACY["families"]
    out = ["reported (Table 1):   " + "  ".join(f"{f:>9}" for f in fam)]
    for model, rows in PAPER_ACCURACY["table1"].items():
        for meth, vals in rows.items():
            out.append(f"  {model + ' / ' + meth:<20}" + "  ".join(f"{v:>9.1f}" for v in vals))
    out.append("reported (Table 2, RULER): " + "  ".join(f"{L // 1024:>5}K" for L in PAPER_ACCURACY["lengths"]))
    for model, rows in PAPER_ACCURACY["table2"].items():
        for meth, vals in rows.items():
            out.append(f"  {model + ' / ' + meth:<24}" + "  ".join(f"{v:>6.1f}" for v in vals))
        diff = [b - a for a, b in zip(rows["Sparse"], rows["SparDA"])]
        out.append(f"  {model + ' SparDA - Sparse':<24}" + "  ".join(f"{d:>+6.1f}" for d in diff) + "  (computed)")
    return "\n".join(out)
