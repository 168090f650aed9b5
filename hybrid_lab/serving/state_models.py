"""What a prefix cache's nodes hold: sizes and FLOPs only (:class:`ByteModel`), or the mini hybrid's real KV and SSM
states (:class:`RealModel`). Lecture 10 §3-§4; Marconi §3.

The byte model takes KV bytes per token, state bytes and prefill FLOPs from the one hybrid shape
(:mod:`hybrid_lab.costs.shape7b`; default Marconi's 7B: 65,536 B of KV per token, 25 MB per state). The real model
maps the mini hybrid's config to the same shape (:func:`mini_hybrid_layout`), so both are accounted by one formula,
and it restores every hit from the cached arrays and checks it against a fresh prefill.
"""
from __future__ import annotations

import numpy as np

from hybrid_lab.core.checks import positive_number
from hybrid_lab.costs.shape7b import L7B, HybridLayout
from hybrid_lab.models.hybrid import HybridCache, HybridConfig, MiniHybrid


class ByteModel:
    """Sizes and FLOPs of a hybrid layout (default: Marconi's 7B, ``L7B``). No tensors: the fast model for sweeps.

    kv_bytes_per_token, state_bytes and prefill FLOPs are the layout's (``hybrid_lab.costs.shape7b``).
    """

    real = False

    def __init__(self, layout: HybridLayout = L7B):
        if not isinstance(layout, HybridLayout):
            raise ValueError(f"layout must be a HybridLayout, got {type(layout).__name__}")
        self.layout = layout
        self.kv_bytes_per_token = int(layout.kv_bytes_per_token)
        self.state_bytes = int(layout.state_bytes)
        self.needs_state = layout.n_ssm > 0          # pure attention: any matched prefix is a hit

    def flops(self, L):
        """Prefill FLOPs of the first L tokens (int or array of ints >= 0)."""
        return self.layout.prefill_flops(L)


def mini_hybrid_layout(cfg: HybridConfig) -> HybridLayout:
    """The :class:`HybridLayout` of a mini hybrid's config: same layer counts and widths, so its KV bytes per token
    and state bytes equal the real arrays' and its FLOPs (for eviction scores) come from the one formula."""
    if not isinstance(cfg, HybridConfig):
        raise ValueError(f"cfg must be a HybridConfig, got {type(cfg).__name__}")
    return HybridLayout(n_attn=cfg.n_attn, n_ssm=cfg.n_ssm, n_mlp=len(cfg.layers) if cfg.mlp else 0,
                        d_model=cfg.d_model, n_heads=cfg.n_heads, d_state=cfg.d_state,
                        dtype_bytes=np.dtype(cfg.dtype).itemsize, mlp_hidden=4 * cfg.d_model, expand=1,
                        ssm_head_dim=cfg.d_model)


class RealModel(ByteModel):
    """The mini hybrid's real KV and SSM states (:class:`hybrid_lab.models.hybrid.MiniHybrid`).

    Sizes and FLOPs are those of :func:`mini_hybrid_layout`. ``verify=True`` restores every hit and compares it with
    a fresh prefill of the same prefix: a mismatch raises ``RuntimeError`` (a cache must never serve a wrong
    state). ``atol``: the comparison tolerance (default 1e-4 for float32, 1e-9 for float64).
    """

    real = True

    def __init__(self, model: MiniHybrid, verify: bool = True, atol: float | None = None):
        if not isinstance(model, MiniHybrid):
            raise ValueError(f"model must be a MiniHybrid, got {type(model).__name__}")
        if not isinstance(verify, (bool, np.bool_)):
            raise ValueError(f"verify must be True or False, got {verify!r}")
        super().__init__(mini_hybrid_layout(model.cfg))
        self.model = model
        self.verify = bool(verify)
        self.atol = (1e-4 if self.layout.dtype_bytes == 4 else 1e-9) if atol is None else positive_number("atol", atol)
        self.verified_hits = 0

    def restore(self, edges_kv: list, state, hit: int) -> HybridCache:
        """The model cache after ``hit`` tokens: the KV of the path's edges (root first; each a list of (K, V) per
        attention layer), cut to ``hit``, and the SSM states saved at ``hit`` (None: no SSM layer)."""
        kv = [(np.concatenate([e[a][0] for e in edges_kv])[:hit], np.concatenate([e[a][1] for e in edges_kv])[:hit])
              for a in range(self.layout.n_attn)]
        return HybridCache.from_parts(kv, state if state is not None else [], hit)

    def check_hit(self, restored: HybridCache, tokens, hit: int, policy: str):
        """Compare a restored prefix with recomputation; raise ``RuntimeError`` if the cache would serve a wrong
        state."""
        _, fresh, _ = self.model.prefill(tokens[:hit])
        def close(a, b):
            return np.allclose(a, b, rtol=0, atol=self.atol)

        ok = all(close(a, b) for a, b in zip(restored.ssm, fresh.ssm))
        ok = ok and all(close(k1, k2) and close(v1, v2) for (k1, v1), (k2, v2) in zip(restored.kv, fresh.kv))
        if not ok:
            raise RuntimeError(f"{policy}: cache hit of {hit} tokens does not match recomputation")
        self.verified_hits += 1

    def resume(self, tokens, hit: int, restored: HybridCache | None, positions):
        """Prefill tokens[hit:] on top of the restored prefix. Returns (the cache at the end, {position: SSM states}
        for the ``positions`` in (hit, len(tokens)])."""
        positions = sorted(p for p in set(positions) if hit < p <= len(tokens))
        _, cache, snaps = self.model.prefill(tokens[hit:], cache=restored, snapshot_at=positions)
        return cache, snaps

    @staticmethod
    def kv_slice(cache: HybridCache, a: int, b: int) -> list:
        """Copies of the KV of tokens [a, b): [(K, V) per attention layer]."""
        return [(K[a:b].copy(), V[a:b].copy()) for K, V in cache.kv]
