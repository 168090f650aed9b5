"""The model families the lab trains, how to build each at a parameter budget, and how the numpy models read them.

A *model spec* names a family (which numpy model and which torch twin) and its configuration; the configuration is
completed with ``d_ff`` (chosen so every compared model has the same parameter count, ± 2%), ``vocab``, ``seed`` and
``dtype``. Training runs the torch twin (``hybrid_lab.trained.torch_*``); inference runs the numpy model
(``hybrid_lab.models.*``) on the same weights, with the same logits.

    family      numpy model                          torch twin
    stack       hybrid_lab.models.stack.Stack        hybrid_lab.trained.torch_stack.TorchStack
    hysparse    hybrid_lab.models.hysparse.HySparse  hybrid_lab.trained.torch_hysparse.TorchHySparse
    hysparse2   hybrid_lab.models.hysparse2.HySparse2  hybrid_lab.trained.torch_hysparse2.TorchHySparse2

This module never imports torch (the notebooks run without it).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from hybrid_lab.core import checks
from hybrid_lab.models import hysparse, hysparse2, stack

__all__ = ["FAMILIES", "ModelSpec", "SPECS", "make_config", "config_to_json", "config_from_json", "numpy_model",
           "torch_model", "numpy_logits", "n_params", "match_d_ff", "decode_ledger"]

FAMILIES = {
    "stack": (stack.StackConfig, stack.Stack, stack.n_params),
    "hysparse": (hysparse.HySparseConfig, hysparse.HySparse, hysparse.n_params),
    "hysparse2": (hysparse2.HySparse2Config, hysparse2.HySparse2, hysparse2.n_params),
}
_TORCH = {"stack": ("hybrid_lab.trained.torch_stack", "TorchStack"),
          "hysparse": ("hybrid_lab.trained.torch_hysparse", "TorchHySparse"),
          "hysparse2": ("hybrid_lab.trained.torch_hysparse2", "TorchHySparse2")}

# Width shared by every trained model: 4 query heads, one KV head (MQA, as the papers' GQA at toy size), 16-dim heads.
WIDTH = dict(d_model=64, n_heads_q=4, n_heads_kv=1, d_qk=16, d_v=16)
LAYERS = 4


_SET_HERE = ("vocab", "d_ff", "seed", "dtype")         # config fields a spec leaves to make_config


def _config_kw(name: str, family: str, kw) -> dict:
    """kw (a spec's ``kw`` or make_config's ``override``): a dict of the family's config fields other than
    vocab / d_ff / seed / dtype."""
    if not isinstance(kw, dict):
        raise ValueError(f"{name} must be a dict of {family} config fields, got {type(kw).__name__}")
    fields = {f.name for f in dataclasses.fields(FAMILIES[family][0])} - set(_SET_HERE)
    bad = [k for k in kw if k not in fields]
    if bad:
        raise ValueError(f"{name}: {bad[0]!r} is not a {family} config field that a spec sets (fields: "
                         f"{', '.join(sorted(fields))}; vocab, d_ff, seed and dtype are make_config's arguments)")
    return kw


@dataclass(frozen=True)
class ModelSpec:
    """name: the model's name in tables; family: a key of FAMILIES; kw: its config fields (no d_ff / vocab / seed /
    dtype); label: one line for a table; match: match the parameter budget by choosing d_ff (False: use d_ff)."""
    name: str
    family: str
    kw: dict = field(default_factory=dict)
    label: str = ""
    match: bool = True
    d_ff: int = 96

    def __post_init__(self):
        for name in ("name", "label"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"{name} must be a str, got {getattr(self, name)!r}")
        if not self.name:
            raise ValueError("name must be a non-empty str, got ''")
        if not isinstance(self.family, str) or self.family not in FAMILIES:
            raise ValueError(f"family must be one of {sorted(FAMILIES)}, got {self.family!r}")
        if not isinstance(self.match, (bool, np.bool_)):
            raise ValueError(f"match must be True or False, got {self.match!r}")
        checks.pos_int("d_ff", self.d_ff)
        _config_kw("kw", self.family, self.kw)
        try:                                            # the fields' own checks, once, where the spec is written
            FAMILIES[self.family][0](vocab=2, d_ff=self.d_ff, **self.kw)
        except ValueError as e:
            raise ValueError(f"kw must hold valid {self.family} config fields: {e}") from None


def _stack(name, layers, label, **kw):
    return ModelSpec(name, "stack", dict(WIDTH, layers=tuple(layers), **kw), label)


_S, _A, _M = "swa", "attn", "mamba2"
_HS2 = dict(WIDTH, self_swa_before=1, self_swa_after=0, cross_layers=2, group_size=2, swa_window=16, window=8,
            topk=16, rope_dims=8)

SPECS = {s.name: s for s in [
    # why hybrids (lecture §3): the same 4 layers as pure SSM, hybrid (1 attention in 4), attention only; every
    # model at the budget's parameter count (d_ff matched), the state-size sweep included
    _stack("mamba2", [_M] * 4, "pure Mamba-2 (SSD), N=16", d_state=16),
    *[_stack(f"mamba2_N{n}", [_M] * 4, f"pure Mamba-2, N={n}", d_state=n) for n in (32, 64)],
    _stack("mamba2_hybrid", [_M, _M, _M, _A], "Mamba-2 hybrid, 1 attention in 4, N=16", d_state=16),
    _stack("dense", [_A] * 4, "dense attention (MQA, partial RoPE 8)", rope_dims_attn=8),
    _stack("dense_mha", [_A] * 4, "dense attention, 4 KV heads, full RoPE", rope_dims_attn=16, n_heads_kv=4),
    _stack("dense_local", [_S, _A, _A, _A], "attention only: local (window 4) + 3 full", rope_dims_attn=8,
           window=4),
    # why HySparse2: the same number of full-attention layers (2 of 4) and of positions a sparse layer reads (24)
    _stack("swa", [_S] * 4, "sliding window only (window 16): the control"),
    _stack("hybrid_swa", [_S, _A, _S, _A], "hybrid SWA: 2 SWA (window 16) + 2 full attention"),
    ModelSpec("hysparse", "hysparse", dict(WIDTH, n_layers=4, group_size=2, block_size=8, n_blocks=2, window=8,
                                           rope_dims=8, sinks=True),
              "HySparse: 2 x (FA + SA), 2 blocks of 8 + own SWA window 8"),
    ModelSpec("hysparse2", "hysparse2", dict(_HS2), "HySparse2: SWA, FA | FA, SA; window 8 + top-16 tokens"),
    # the paper's ablation directions, at the same budget of 24 positions per sparse query
    ModelSpec("hysparse2_block", "hysparse2", dict(_HS2, select="block", select_block=8),
              "HySparse2, block-level selection (2 blocks of 8)"),
    ModelSpec("hysparse2_nowindow", "hysparse2", dict(_HS2, window=0, topk=24), "HySparse2, no forced window (top-24)"),
    ModelSpec("hysparse2_gatedswa", "hysparse2", dict(_HS2, window=0, topk=16, cross_swa_window=8),
              "HySparse2, gated SWA branch with own KV (window 8) + top-16"),
    ModelSpec("hysparse2_nobridge", "hysparse2", dict(_HS2, bridging=False),
              "HySparse2 without bridging: the cross FA projects its own KV"),
    # why HySparse2 in the papers' layer order (9 layers, 3 full attention each; train.EXPERIMENTS "retrieval9"):
    # the self SWA layers before and
    # after the self FA, as the paper's 12 + FA + 12; hybrid SWA is HySparse2 with every SA replaced by an SWA layer;
    # HySparse groups of 1 FA + 2 SA; dense attention in every layer
    _stack("dense_9", [_A] * 9, "dense attention, 9 layers (MQA, partial RoPE 8)", rope_dims_attn=8),
    _stack("hybrid_swa_9", [_S, _S, _A, _S, _S, _A, _S, _A, _S],
           "hybrid SWA: SWA, SWA, FA, SWA, SWA, FA, SWA, FA, SWA (window 16)"),
    ModelSpec("hysparse_9", "hysparse", dict(WIDTH, n_layers=9, group_size=3, block_size=8, n_blocks=2, window=8,
                                             rope_dims=8, sinks=True),
              "HySparse: 3 x (FA, SA, SA); 2 blocks of 8 + own SWA window 8"),
    ModelSpec("hysparse2_9", "hysparse2", dict(_HS2, self_swa_before=2, self_swa_after=2, cross_layers=4),
              "HySparse2: SWA, SWA, FA, SWA, SWA | FA, SA, FA, SA; window 8 + top-16 tokens"),
    # the paper's ablation directions in the 9-layer order (train.EXPERIMENTS "ablation9", a task with headroom): each
    # one change from hysparse2_9, at its budget of 24 positions per sparse query
    *[ModelSpec(f"hysparse2_9_{name}", "hysparse2",
                dict(_HS2, self_swa_before=2, self_swa_after=2, cross_layers=4, **kw), f"HySparse2 (9 layers), {label}")
      for name, kw, label in (
          ("block", dict(select="block", select_block=8), "block-level selection (2 blocks of 8)"),
          ("nowindow", dict(window=0, topk=24), "no forced window (top-24)"),
          ("gatedswa", dict(window=0, topk=16, cross_swa_window=8), "gated SWA branch with own KV (window 8) + top-16"),
          ("nobridge", dict(bridging=False), "without bridging: each cross FA projects its own KV"))],
]}


def make_config(spec: ModelSpec, vocab: int, d_ff: int, seed: int = 0, dtype: str = "float32", **override):
    """The family's config for ``spec`` with the given width of the MLPs (``override`` replaces spec fields)."""
    if not isinstance(spec, ModelSpec):
        raise ValueError(f"spec must be a ModelSpec, got {type(spec).__name__}")
    cls = FAMILIES[spec.family][0]
    kw = dict(spec.kw, **_config_kw("override", spec.family, override))
    return cls(vocab=vocab, d_ff=checks.pos_int("d_ff", d_ff), seed=seed, dtype=dtype, **kw)


def n_params(cfg) -> int:
    """Total weight elements of a config of any family."""
    return int(FAMILIES[_family_of(cfg)][2](cfg))


def match_d_ff(spec: ModelSpec, vocab: int, target: int, **override) -> int:
    """The MLP width (a multiple of 4, >= 8) whose model has the parameter count closest to ``target``."""
    target = checks.pos_int("target", target)
    make_config(spec, vocab, 8, **override)             # spec, vocab and override checked once, before the search
    best = None
    for d_ff in range(8, 1025, 4):
        n = n_params(make_config(spec, vocab, d_ff, **override))
        if best is None or abs(n - target) < abs(best[1] - target):
            best = (d_ff, n)
    return best[0]


def _family_of(cfg) -> str:
    for name, (cls, _, _) in FAMILIES.items():
        if isinstance(cfg, cls):
            return name
    raise ValueError(f"cfg must be a config of one of {sorted(FAMILIES)}, got {type(cfg).__name__}")


def config_to_json(cfg) -> dict:
    """{"family": ..., "config": {field: value}} (tuples as lists)."""
    family = _family_of(cfg)
    d = {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(cfg).items()}
    return {"family": family, "config": d}


def config_from_json(d: dict, dtype: str | None = None):
    """Inverse of :func:`config_to_json`; ``dtype`` overrides the stored one (inference runs in float32)."""
    try:
        fam, kw = d["family"], dict(d["config"])
        cls = FAMILIES[fam][0]
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"d must be {{'family': one of {sorted(FAMILIES)}, 'config': {{...}}}}, got "
                         f"{d!r:.200}") from None
    fields = {f.name for f in dataclasses.fields(cls)}
    bad = [k for k in kw if k not in fields]
    if bad:
        raise ValueError(f"d['config']: {bad[0]!r} is not a {fam} config field")
    kw = {k: (tuple(v) if isinstance(v, list) else v) for k, v in kw.items()}
    if dtype is not None:
        kw["dtype"] = dtype
    try:
        return cls(**kw)
    except ValueError as e:                             # the field's own message, said to come from d or dtype
        raise ValueError(f"d['config'] (with dtype={dtype!r}) is not a valid {fam} config: {e}") from None


def numpy_model(cfg, weights: dict | None = None):
    """The numpy model of ``cfg``'s family (weights cast to the config's dtype)."""
    fam = _family_of(cfg)
    if weights is not None:
        if not isinstance(weights, dict):
            raise ValueError(f"weights must be a dict name -> float array, got {type(weights).__name__}")
        # checked before the cast: astype would turn strings, complex numbers or bools into floats silently
        weights = {k: checks.array(f"weights[{k!r}]", v, kinds="f").astype(cfg.dtype) for k, v in weights.items()}
    return FAMILIES[fam][1](cfg, weights)


def torch_model(cfg, weights: dict | None = None):
    """The torch twin of ``cfg``'s family (imports torch)."""
    import importlib

    mod, cls = _TORCH[_family_of(cfg)]
    return getattr(importlib.import_module(mod), cls)(cfg, weights)


def numpy_logits(model, tokens) -> np.ndarray:
    """Full-sequence logits of a numpy model of any family. tokens: (B, T) or (T,) ints in [0, vocab), no empty axis
    -> (B, T, vocab) / (T, vocab)."""
    if not isinstance(model, tuple(m for _, m, _ in FAMILIES.values())):
        raise ValueError(f"model must be a numpy model of one of {sorted(FAMILIES)}, got {type(model).__name__}")
    t = np.asarray(tokens)
    if t.ndim == 1:
        return numpy_logits(model, t[None])[0]
    t = checks.int_array("tokens", t, 2, "(B, T) or (T,) token ids", lo=0, hi=model.cfg.vocab)
    if 0 in t.shape:
        raise ValueError(f"tokens must have no empty axis, got shape {t.shape}")
    if isinstance(model, hysparse2.HySparse2):
        return np.stack([model.prefill(row, early_exit=False)[0] for row in t])
    return np.stack([model.forward(row) for row in t])


def decode_ledger(cfg, context: int, bytes_per: int = 2) -> dict:
    """What one decode step at ``context`` cached positions keeps and reads, from the config (fp16 by default).

    Returns {"cache_bytes": bytes of every cache the sequence keeps (KV, windows, SSM and conv states),
    "read_bytes": bytes of cache one decode step reads, "attn_reads": cached positions the attention layers read
    per step, summed over layers}. KV entries are counted per KV head with d_qk + d_v numbers.
    """
    fam, S = _family_of(cfg), checks.pos_int("context", context)
    bytes_per = checks.pos_int("bytes_per", bytes_per)
    cache = read = reads = 0
    if fam in ("stack", "hysparse", "hysparse2"):
        kv = cfg.n_heads_kv * (cfg.d_qk + cfg.d_v) * bytes_per        # one position of one layer's KV
    if fam == "stack":
        for kind in cfg.layers:
            if kind == "attn":
                cache, read, reads = cache + S * kv, read + S * kv, reads + S
            elif kind == "swa":
                w = min(S, cfg.window)
                cache, read, reads = cache + w * kv, read + w * kv, reads + w
            else:
                st = (cfg.d_inner * cfg.d_state + (cfg.d_conv - 1) * (cfg.d_inner + 2 * cfg.d_state)) * bytes_per
                cache, read = cache + st, read + st
    elif fam == "hysparse":
        for kind in cfg.layers:
            if kind == "fa":
                cache, read, reads = cache + S * kv, read + S * kv, reads + S
            else:                                       # selected blocks of the FA's KV + its own window KV
                sel, w = min(S, cfg.n_blocks * cfg.block_size), min(S, cfg.window)
                cache, read, reads = cache + w * kv, read + (sel + w) * kv, reads + sel + w
    else:
        n_swa = cfg.n_self - 1
        w = min(S, cfg.swa_window)
        cache += n_swa * w * kv + S * kv + cfg.n_groups * S * kv
        read += n_swa * w * kv + S * kv + cfg.n_groups * S * kv
        reads += n_swa * w + S + cfg.n_groups * S
        sel = min(S, cfg.window + cfg.topk)
        n_sa = cfg.n_groups * (cfg.group_size - 1)
        read, reads = read + n_sa * sel * kv, reads + n_sa * sel
        if cfg.cross_swa_window:
            cw = min(S, cfg.cross_swa_window)
            cache, read, reads = cache + n_sa * cw * kv, read + n_sa * cw * kv, reads + n_sa * cw
    return {"cache_bytes": int(cache), "read_bytes": int(read), "attn_reads": int(reads)}
