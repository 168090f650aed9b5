"""The cache / FLOP ledger of Hybrid SWA, HySparse and HySparse2 at the paper's 80B-A3B configuration.

The configurations are the HySparse2 paper's Table 1; the reported KV cache at 1M tokens and the prefill-FLOP ratios
are its efficiency comparison (HySparse2 Table 1 and Fig. 4). All three designs have 49 layers, hidden 2,048,
3B active parameters, 64 query heads:

| design     | global (FA) layers | heads Q/KV | head dim QK/V | local                                             |
| Hybrid SWA | 9                  | 64/4       | 192/128       | 40 SWA layers, window 128                         |
| HySparse   | 5                  | 64/4       | 192/128       | 44 SA: 1,024 tokens (16 x 64 blocks) + own SWA 128 |
| HySparse2  | 5 (1 self + 4 cross)| 64/1 (MQA)| 256/256       | 24 self SWA (128); 20 SA: 128 forced + 1,024 top-k |

KV model (FP8 = 1 byte per element, GB = 1e9): every global layer stores (d_qk + d_v) * Hkv bytes per token for
every token; every layer with a local KV stores ``window`` tokens of the same size. HySparse2's self SWA layers are
assumed to use the design's head config (512 B per token); at 1M tokens the windows are < 0.1% of the total.

Prefill FLOP model (stated, not the paper's code): a token through a layer costs 2 * (3e9 / 49) FLOPs of dense
(projection + MoE-active) work; attention costs 2 * Hq * (d_qk + d_v) FLOPs per (query, key) pair read (QK^T and
PV); causal full attention reads t + 1 keys at query t; SWA min(t + 1, 128); SA min(t + 1, 1,152) (HySparse2: forced
128 + top-1,024; HySparse: 1,024 block tokens + its SWA branch 128). HySparse2 with early exit runs the 25 Self
layers + the 4 bridging K/V projections on every position, and the 24 Cross layers at the last position only.
Block/token scoring, norms, the LM head and the MTP layer are not counted.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hybrid_lab.core import checks

__all__ = [
    "AttnDesign", "HYBRID_SWA", "HYSPARSE", "HYSPARSE2", "HYSPARSE2_FULL_PREFILL", "DESIGNS", "REPORTED",
    "kv_bytes", "kv_gb", "prefill_flops", "decode_work", "kv_attribution", "ledger_table", "GB", "ABLATIONS",
    "ablation_text",
]

GB = 1e9


@dataclass(frozen=True)
class AttnDesign:
    """Attention layout of one 49-layer design (counts of each layer kind and the KV head config)."""
    name: str
    n_fa: int             # global layers: full attention over every past token
    n_sa: int             # sparse layers reading a shared global KV (no KV of their own)
    n_swa: int            # standalone SWA layers (own KV, a sliding window)
    heads_q: int
    heads_kv: int
    d_qk: int
    d_v: int
    window: int = 128
    sa_tokens: int = 1024          # global tokens an SA query reads (in addition to any window)
    sa_local: int = 0              # forced local tokens an SA query reads in the SAME softmax (HySparse2)
    sa_own_window: bool = False    # v1: every SA layer also has its own sliding-window KV branch
    n_layers: int = 49
    d_model: int = 2048
    active_params: float = 3e9
    early_exit_layers: int = 0     # HySparse2: layers that run on every prompt position (the Self-decoder)
    n_bridge: int = 0              # HySparse2: cross groups whose K/V are projected from the Self-decoder
    n_fa_prefill: int | None = None  # FA layers that run on every prompt position (default: all)

    def __post_init__(self):
        def set_(f, v):                                   # frozen: store the checked values (plain ints)
            object.__setattr__(self, f, v)

        if not isinstance(self.name, str):
            raise ValueError(f"name must be a string, got {self.name!r}")
        for f in ("n_fa", "n_sa", "n_swa", "sa_local", "early_exit_layers", "n_bridge"):
            set_(f, checks.nonneg_int(f, getattr(self, f)))
        for f in ("heads_q", "heads_kv", "d_qk", "d_v", "window", "sa_tokens", "n_layers", "d_model"):
            set_(f, checks.pos_int(f, getattr(self, f)))
        set_("active_params", checks.positive_number("active_params", self.active_params))
        if not isinstance(self.sa_own_window, (bool, np.bool_)):
            raise ValueError(f"sa_own_window must be a bool, got {self.sa_own_window!r}")
        checks.heads(self.heads_q, self.heads_kv, "heads_q", "heads_kv")
        if self.n_fa + self.n_sa + self.n_swa != self.n_layers:
            raise ValueError(f"n_fa + n_sa + n_swa must equal n_layers={self.n_layers} (every layer attends one "
                             f"way), got {self.n_fa} + {self.n_sa} + {self.n_swa}")
        if self.early_exit_layers > self.n_layers:
            raise ValueError(f"early_exit_layers must be <= n_layers={self.n_layers}, got {self.early_exit_layers}")
        if self.n_fa_prefill is not None:
            set_("n_fa_prefill", checks.int_in("n_fa_prefill", self.n_fa_prefill, 0, self.n_fa + 1))

    @property
    def bytes_per_token(self) -> int:
        """KV elements per token per layer = (d_qk + d_v) * Hkv (= bytes in FP8)."""
        return (self.d_qk + self.d_v) * self.heads_kv


HYBRID_SWA = AttnDesign("Hybrid SWA", n_fa=9, n_sa=0, n_swa=40, heads_q=64, heads_kv=4, d_qk=192, d_v=128)
# v1: each of the 44 SA layers reads 1,024 block tokens AND has its own 128-token SWA KV branch.
HYSPARSE = AttnDesign("HySparse", n_fa=5, n_sa=44, n_swa=0, heads_q=64, heads_kv=4, d_qk=192, d_v=128,
                      sa_own_window=True)
HYSPARSE2 = AttnDesign("HySparse2", n_fa=5, n_sa=20, n_swa=24, heads_q=64, heads_kv=1, d_qk=256, d_v=256,
                       sa_local=128, early_exit_layers=25, n_bridge=4, n_fa_prefill=1)
# The same model prefilled without the early exit (every Cross layer on every position): isolates bridging's effect.
HYSPARSE2_FULL_PREFILL = AttnDesign("HySparse2 (full prefill)", n_fa=5, n_sa=20, n_swa=24, heads_q=64, heads_kv=1,
                                    d_qk=256, d_v=256, sa_local=128, n_bridge=4)
DESIGNS = (HYBRID_SWA, HYSPARSE, HYSPARSE2)

REPORTED = {
    "kv_gb_1m_fp8": {"Hybrid SWA": 12.09, "HySparse": 6.72, "HySparse2": 2.69},
    "prefill_flops_ratio_1m": {"HySparse / HySparse2": 2.92, "Hybrid SWA / HySparse2": 5.02},
}


def _design(design) -> AttnDesign:
    if not isinstance(design, AttnDesign):
        raise ValueError(f"design must be an AttnDesign (e.g. HYSPARSE2), got {type(design).__name__}")
    return design


def kv_bytes(design: AttnDesign, L: int, bytes_per_elem: float = 1.0) -> dict:
    """KV cache bytes at context length L (tokens, an integer >= 1): {'global', 'local', 'total'} (FP8:
    bytes_per_elem = 1)."""
    design, L = _design(design), checks.pos_int("L", L)
    per = design.bytes_per_token * checks.positive_number("bytes_per_elem", bytes_per_elem)
    glob = design.n_fa * L * per
    local = _n_windows(design) * min(L, design.window) * per
    return {"global": glob, "local": local, "total": glob + local}


def kv_gb(design: AttnDesign, L: int = 2 ** 20, bytes_per_elem: float = 1.0) -> float:
    """Total KV cache in GB (1e9 bytes)."""
    return kv_bytes(design, L, bytes_per_elem)["total"] / GB


def _n_windows(design: AttnDesign) -> int:
    """Layers holding a sliding-window KV of their own."""
    return design.n_swa + (design.n_sa if design.sa_own_window else 0)


def _pairs_capped(L: int, cap: int) -> float:
    """Σ_{t=0}^{L-1} min(t + 1, cap): keys read by a causal query stream capped at ``cap`` keys."""
    c = min(cap, L)
    return c * (c + 1) / 2 + (L - c) * c


def prefill_flops(design: AttnDesign, L: int) -> dict:
    """Prefill FLOPs of an L-token prompt under the module's FLOP model.

    Returns {'dense', 'attn_global', 'attn_local', 'bridge', 'total'} in FLOPs.
    """
    design, L = _design(design), checks.pos_int("L", L)
    pair = 2 * design.heads_q * (design.d_qk + design.d_v)        # FLOPs per (query, key) pair
    per_layer = 2 * design.active_params / design.n_layers        # FLOPs per token per layer (dense part)
    full_rows = design.early_exit_layers or design.n_layers       # layers that process every prompt position
    dense = per_layer * (full_rows * L + (design.n_layers - full_rows))
    n_fa_all = design.n_fa if design.n_fa_prefill is None else design.n_fa_prefill
    attn_global = pair * (n_fa_all * L * (L + 1) / 2 + (design.n_fa - n_fa_all) * L)   # others: last query only
    if design.early_exit_layers:                      # HySparse2: Self SWA on all rows, Cross SA on the last row
        attn_local = pair * (design.n_swa * _pairs_capped(L, design.window)
                             + design.n_sa * min(L, design.sa_tokens + design.sa_local))
    else:
        sa = design.n_sa * _pairs_capped(L, design.sa_tokens + design.sa_local)
        swa = _n_windows(design) * _pairs_capped(L, design.window)
        attn_local = pair * (sa + swa)
    bridge = 2 * design.n_bridge * design.d_model * design.bytes_per_token * L
    total = dense + attn_global + attn_local + bridge
    return {"dense": dense, "attn_global": attn_global, "attn_local": attn_local, "bridge": bridge, "total": total}


def decode_work(design: AttnDesign, L: int) -> dict:
    """Attention work of one decoded token at context L: KV entries read over all layers and their bytes (FP8).

    HySparse2: 5L + 20 * 1,152 + 24 * 128 entries (grows with L through the 5 FA layers).
    """
    design, L = _design(design), checks.pos_int("L", L)
    entries = (design.n_fa * L + design.n_sa * min(L, design.sa_tokens + design.sa_local)
               + _n_windows(design) * min(L, design.window))
    return {"entries": entries, "bytes": entries * design.bytes_per_token}


def kv_attribution(L: int = 2 ** 20) -> list:
    """Walk HySparse -> HySparse2 one change at a time: [(step, GB, factor vs previous step)].

    1. HySparse (GQA 64/4, 192/128); 2. same layout with HySparse2's head config (MQA, 256/256);
    3. + the HySparse2 layout (bridging, no SA windows, 24 self SWA windows) = HySparse2.
    """
    steps = [("HySparse", HYSPARSE),
             ("HySparse + HySparse2 head config", AttnDesign("tmp", n_fa=5, n_sa=44, n_swa=0, heads_q=64, heads_kv=1,
                                                              d_qk=256, d_v=256, sa_own_window=True)),
             ("HySparse2 (bridging layout)", HYSPARSE2)]
    out, prev = [], None
    for name, d in steps:
        gb = kv_gb(d, L)
        out.append((name, gb, None if prev is None else prev / gb))
        prev = gb
    return out


def ledger_table(L: int = 2 ** 20) -> list:
    """One row per design: {'design', 'kv_gb', 'prefill_pflops', 'decode_entries'} at context L."""
    return [{"design": d.name, "kv_gb": kv_gb(d, L), "prefill_pflops": prefill_flops(d, L)["total"] / 1e15,
             "decode_entries": decode_work(d, L)["entries"]} for d in DESIGNS]


# Paper ablations, reported (HySparse2 §4: selection granularity, local branch, bridging at scale, bridging vs
# KV mirror). Printed as "reported", never recomputed.
ABLATIONS = {
    "selection granularity (1,024-token global budget, pretraining)": {
        "columns": ("Block", "Token"),
        "rows": {"RULER-v2": (49.56, 56.13), "MRCR-v2 2-needle": (12.94, 21.08), "GraphWalks": (29.38, 34.92),
                 "BBH": (61.93, 60.70), "NoLiMa": (40.27, 38.43)}},
    "local branch": {
        "columns": ("Gated SWA", "No SWA", "Forced SWA"),
        "rows": {"GSM8K": (64.52, 60.35, 59.44), "MRCR-v2": (27.66, 20.73, 22.67), "RULER": (88.19, 84.55, 89.84),
                 "RULER-v2": (53.66, 54.62, 55.98), "GraphWalks": (35.39, 36.48, 37.13),
                 "LongPPL (lower is better)": (6.8807, 7.1307, 6.9838)}},
    "KV bridging at scale (290B-A8B, ~1.8T tokens, 32k)": {
        "columns": ("without", "with bridging"),
        "rows": {"MMLU": (72.68, 72.80), "TriviaQA": (73.32, 74.10), "LongPPL (lower is better)": (3.6053, 3.4202),
                 "DROP": (71.37, 68.17), "GSM8K": (77.63, 76.65), "RULER": (96.32, 96.01)}},
    "bridging vs KV mirror (final RULER)": {
        "columns": ("Bridging", "Mirror"),
        "rows": {"RULER": (87.65, 81.28)}},
}


def ablation_text(name: str) -> str:
    """One ablation of :data:`ABLATIONS` as an aligned text table (all numbers reported by the paper)."""
    if not isinstance(name, str) or name not in ABLATIONS:
        raise ValueError(f"name must be one of {list(ABLATIONS)}, got {name!r}")
    t = ABLATIONS[name]
    lines = [f"reported: {name}", f"{'metric':<26}" + "".join(f"{c:>14}" for c in t["columns"])]
    lines += [f"{m:<26}" + "".join(f"{x:>14.4f}" if "PPL" in m else f"{x:>14.2f}" for x in vals)
              for m, vals in t["rows"].items()]
    return "\n".join(lines)
