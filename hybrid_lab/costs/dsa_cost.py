"""Roofline cost model of DeepSeek-V3.2's attention: dense MLA vs DSA (lightning indexer + top-k), after the
DeepSeek-V3.2 report §2 (DSA, inference costs) and appendix A (MLA in MHA mode for prefill, MQA mode for decode);
lecture 10 §5.3, exercises 6 and 7.

All formulas are per the attention part only (projections, MLP and MoE are the same for both and left out).

Decode (memory bound: bytes read per generated token, per layer), context length L:
    dense  = latent · L
    DSA    = index_key · L + latent · min(L, k)
    crossover (DSA starts to read fewer bytes): latent·L = index_key·L + latent·k  ->  L* = latent·k / (latent - index_key)

Prefill (compute bound: FLOPs over a causal prompt of L tokens, all layers). Query t (1-based) sees t keys:
    pairs_dense   = Σ_t t          = L(L+1)/2
    pairs_topk    = Σ_t min(t, k)  = k(k+1)/2 + (L-k)·k  for L >= k
    dense         = layers · pairs_dense · mla_flops_per_pair
    DSA main      = layers · pairs_topk  · mla_flops_per_pair
    DSA indexer   = layers · pairs_dense · index_flops_per_pair,  counted at 1/fp8_speedup in time (FP8 runs 2x)
    speedup       = dense / (main + indexer / fp8_speedup)  ->  mla_flops_per_pair · fp8_speedup / index_flops_per_pair

Storage: DSA keeps every latent AND adds one index key per token: overhead = index_key / latent.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hybrid_lab.core import checks


@dataclass(frozen=True)
class DSAConfig:
    """Attention shape of a DSA model. Defaults: DeepSeek-V3.2 (numbers reported in the paper / lecture notes).

    latent_bytes: MLA latent per token per layer (576 dims x 2 B = 1,152 B); index_key_bytes: one FP8 index key
    (128 dims x 1 B); topk: selected tokens per query; mla_heads, qk_dim, v_dim: MLA in MHA mode during prefill
    (128 heads, q·k over 192 dims, p·v over 128 dims); index_heads x index_dim: 64 x 128; fp8_speedup: FP8 math
    rate relative to BF16.
    """

    n_layers: int = 61
    latent_bytes: int = 1152
    index_key_bytes: int = 128
    topk: int = 2048
    mla_heads: int = 128
    qk_dim: int = 192
    v_dim: int = 128
    index_heads: int = 64
    index_dim: int = 128
    fp8_speedup: float = 2.0

    def __post_init__(self):
        for name in ("n_layers", "latent_bytes", "index_key_bytes", "topk", "mla_heads", "qk_dim", "v_dim",
                     "index_heads", "index_dim"):
            object.__setattr__(self, name, checks.pos_int(name, getattr(self, name)))
        object.__setattr__(self, "fp8_speedup", checks.positive_number("fp8_speedup", self.fp8_speedup))

    @property
    def mla_flops_per_pair(self) -> int:
        """2 FLOPs per multiply-add, q·k and p·v for every head: 2·128·(192 + 128) = 81,920."""
        return 2 * self.mla_heads * (self.qk_dim + self.v_dim)

    @property
    def index_flops_per_pair(self) -> int:
        """2·64·128 = 16,384 (the weighted sum over heads is negligible)."""
        return 2 * self.index_heads * self.index_dim


DEEPSEEK_V32 = DSAConfig()


def _config(cfg) -> DSAConfig:
    if not isinstance(cfg, DSAConfig):
        raise ValueError(f"cfg must be a DSAConfig (e.g. DEEPSEEK_V32), got {type(cfg).__name__}")
    return cfg


def _args(L, cfg) -> tuple:
    """(L as float64, cfg): context lengths are integers >= 1 (a number or an array); cfg a DSAConfig."""
    return checks.int_array("L", L, lo=1).astype(np.float64), _config(cfg)


def decode_bytes(L, cfg: DSAConfig = DEEPSEEK_V32) -> dict:
    """Bytes read per decoded token per layer at context length L (scalar or array): {"dense", "dsa", "speedup"}."""
    Lf, cfg = _args(L, cfg)
    dense = cfg.latent_bytes * Lf
    dsa = cfg.index_key_bytes * Lf + cfg.latent_bytes * np.minimum(Lf, cfg.topk)
    return {"dense": dense, "dsa": dsa, "speedup": dense / dsa}


def decode_crossover(cfg: DSAConfig = DEEPSEEK_V32) -> float:
    """Context length above which DSA reads fewer bytes than dense: latent·k / (latent - index_key) (2,304)."""
    cfg = _config(cfg)
    if cfg.latent_bytes <= cfg.index_key_bytes:
        raise ValueError(f"cfg.index_key_bytes ({cfg.index_key_bytes}) must be < cfg.latent_bytes ({cfg.latent_bytes}):"
                         f" with index keys as large as the latent DSA never reads fewer bytes")
    return cfg.latent_bytes * cfg.topk / (cfg.latent_bytes - cfg.index_key_bytes)


def prefill_flops(L, cfg: DSAConfig = DEEPSEEK_V32) -> dict:
    """Causal prefill FLOPs of the attention over all layers for a prompt of L tokens (scalar or array).

    Returns {"dense", "dsa_main", "indexer", "indexer_fp8" (indexer / fp8_speedup: its BF16-equivalent time),
    "dsa" (main + indexer_fp8), "speedup" (dense / dsa)}.
    """
    Lf, cfg = _args(L, cfg)
    k = float(cfg.topk)
    pairs_dense = Lf * (Lf + 1) / 2
    pairs_topk = np.where(Lf <= k, pairs_dense, k * (k + 1) / 2 + (Lf - k) * k)
    dense = cfg.n_layers * pairs_dense * cfg.mla_flops_per_pair
    main = cfg.n_layers * pairs_topk * cfg.mla_flops_per_pair
    indexer = cfg.n_layers * pairs_dense * cfg.index_flops_per_pair
    dsa = main + indexer / cfg.fp8_speedup
    return {"dense": dense, "dsa_main": main, "indexer": indexer, "indexer_fp8": indexer / cfg.fp8_speedup,
            "dsa": dsa, "speedup": dense / dsa}


def prefill_speedup_limit(cfg: DSAConfig = DEEPSEEK_V32) -> float:
    """L -> infinity: dense and indexer are both O(L²), so speedup -> mla_flops_per_pair·fp8 / index_flops (10)."""
    cfg = _config(cfg)
    return cfg.mla_flops_per_pair * cfg.fp8_speedup / cfg.index_flops_per_pair


def kv_overhead(cfg: DSAConfig = DEEPSEEK_V32) -> float:
    """Extra KV storage of DSA relative to MLA alone: index_key / latent (+11%)."""
    cfg = _config(cfg)
    return cfg.index_key_bytes / cfg.latent_bytes


# H800 (our assumption, nominal spec values): HBM3 3.35 TB/s, 989 TFLOP/s dense BF16 (the H100 SXM's compute).
H800_HBM_BW = 3.35e12
H800_FLOPS = 989e12


def cost_per_million(L, usd_per_gpu_hour: float = 2.0, hbm_bw: float = H800_HBM_BW, flops: float = H800_FLOPS,
                     cfg: DSAConfig = DEEPSEEK_V32) -> dict:
    """Attention's cost, in USD per million tokens, of the token at position L (scalar or array), on one GPU at its
    peak rates: {"decode_dense", "decode_dsa", "prefill_dense", "prefill_dsa"}.

    Decode: the bytes one token reads in all layers (``decode_bytes``) / hbm_bw. Prefill: the marginal FLOPs of the
    L-th prompt token (it scores L keys: dense 81,920 per pair; DSA 81,920 per selected key + the indexer's
    16,384 per key at the FP8 rate) / flops. A lower bound of the attention part only (no weights, no MoE, no
    batching, ideal kernels), priced like DeepSeek's figure 3 (H800 at $2 per GPU-hour).
    """
    Lf, cfg = _args(L, cfg)
    usd = checks.positive_number("usd_per_gpu_hour", usd_per_gpu_hour) / 3600.0 * 1e6     # $ per 1e6 GPU-seconds
    hbm_bw, flops = checks.positive_number("hbm_bw", hbm_bw), checks.positive_number("flops", flops)
    b = decode_bytes(L, cfg)
    dense_f = cfg.n_layers * cfg.mla_flops_per_pair * Lf
    dsa_f = cfg.n_layers * (cfg.mla_flops_per_pair * np.minimum(Lf, cfg.topk)
                            + cfg.index_flops_per_pair * Lf / cfg.fp8_speedup)
    return {"decode_dense": usd * cfg.n_layers * b["dense"] / hbm_bw,
            "decode_dsa": usd * cfg.n_layers * b["dsa"] / hbm_bw,
            "prefill_dense": usd * dense_f / flops, "prefill_dsa": usd * dsa_f / flops}
