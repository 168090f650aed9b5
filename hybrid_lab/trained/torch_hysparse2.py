"""Torch twin of the numpy HySparse2 model (``hybrid_lab.models.hysparse2``): train in torch, infer in numpy.

Built block for block like ``HySparse2.prefill(tokens, early_exit=False)`` (the Cross-decoder on every position),
with the numpy model's weight names and shapes, so that the weights of a trained twin (``numpy_weights()``) give
the numpy model the same logits (float32: <= 1e-4 relative; float64: ~1e-12)::

    w = HySparse2.init_weights(cfg)
    tm = TorchHySparse2(cfg, w)                    # trainable float32 parameters
    logits = tm(tokens)                            # tokens (B, T) int64 -> (B, T, vocab), every position
    HySparse2(cfg_float32, tm.numpy_weights()).forward(tokens[b])   # == logits[b]

The layers, as in the numpy model (weightless RMSNorm, eps 1e-6, before attention, MLP and the LM head):

- Self-decoder: ``self_swa_before`` SWA, one FA, ``self_swa_after`` SWA. SWA: partial RoPE (rotate-half, first
  ``rope_dims`` channels) on q and k, window ``swa_window`` (s in (t - swa_window, t]), per-head sink logit
  (``exp(sink)`` joins the softmax denominator), sigmoid output gate. FA: NoPE, causal, no gate, no sink.
- KV bridging: group g's K/V = RMSNorm(source) @ ``bridge.{g}.wk/wv``, the source being the self FA's INPUT hidden
  state (or the boundary state, ``bridge_sources``). ``bridging=False``: the cross FA projects them from its own
  input (``cross.{g}.fa.attn.wk/wv``).
- Cross group: FA (NoPE, causal, over the group's KV) -> selection -> (group_size - 1) SA layers, each ONE softmax of
  its own queries over the group's KV at the selected positions (with its sink), then its gate. The selection
  (paper §3.3 and the §17 ablations): forced window (s in (t - window, t]; none when ``window = 0``) ∪ the top
  ``topk`` positions s <= t - window by the FA's probability summed over a KV group's query heads (``"token"``), or
  the positions s <= t - window of the top ``topk // select_block`` blocks by that mass summed per block
  (``"block"``). Ties go to the smaller position / block (numpy's ``topk_indices``: a stable sort). The selection is
  discrete: it is computed under ``torch.no_grad()`` from the detached probabilities and used as a mask; gradients
  flow through the attention values. ``cross_swa_window > 0``: every SA layer adds the v1-style gated SWA branch
  with its own q/k/v (``swa.wq/wk/wv/wg``, NoPE, no sink) over the last ``cross_swa_window`` positions.

Full-sequence and batched: no Python loop over positions or batch rows, no numpy in ``forward`` (runs on CUDA). The
attention is dense with boolean masks (B, Hkv, G, T, S): fine at the lab's sizes (B=64, T=512, d_model=64).

With ``cross_swa_window > 0`` the numpy weights hold ``cross.{g}.sa.{j}.swa.wo``, which neither model reads (both
branches leave through ``attn.wo``): it stays at its initial value and its ``.grad`` stays None.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from hybrid_lab.models.hysparse2 import HySparse2, HySparse2Config
from hybrid_lab.trained.torch_blocks import TwinModule, apply_rope, attend, causal_mask, rms_norm

__all__ = ["TorchHySparse2", "topk_mask", "token_select", "block_select"]


# ------------------------------------------------------------------------------------------- the selection
def topk_mask(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Membership mask of numpy's ``topk_indices``: the ``k`` largest entries along the last axis, ties to the
    smaller index (a stable sort of -scores, as numpy's), ``-inf`` never selected. scores: (..., n).
    Returns bool (..., n) with at most k True per row."""
    kk = min(k, scores.shape[-1])
    order = torch.sort(-scores, dim=-1, stable=True).indices[..., :kk]
    ok = ~torch.isneginf(torch.gather(scores, -1, order))
    return torch.zeros_like(scores, dtype=torch.bool).scatter(-1, order, ok)


def token_select(score: torch.Tensor, pos: torch.Tensor, window: int, topk: int) -> torch.Tensor:
    """HySparse2's token rule as a mask (numpy ``forced_window_select``): forced window ∪ top-``topk`` positions
    s <= t - window by score. score: (B, Hkv, T, S) the FA's probability summed per KV group; pos: (T,) with S = T.
    Returns bool (B, Hkv, T, S)."""
    outside = pos[None, :] <= pos[:, None] - window                                 # (T, S)
    top = topk_mask(score.masked_fill(~outside, float("-inf")), topk)
    return top | causal_mask(pos, window)


def block_select(score: torch.Tensor, pos: torch.Tensor, window: int, topk: int, block: int) -> torch.Tensor:
    """The block rule as a mask (numpy ``HySparse2.select`` with ``select="block"``): forced window ∪ the positions
    s <= t - window of the top ``topk // block`` blocks of ``block`` positions, by the score summed per block over
    those positions (blocks that start after t - window are not candidates). score: (B, Hkv, T, S); pos: (T,).
    Returns bool (B, Hkv, T, S)."""
    S = score.shape[-1]
    nb = -(-S // block)
    outside = pos[None, :] <= pos[:, None] - window                                 # (T, S)
    mass = F.pad(score.masked_fill(~outside, 0.0), (0, nb * block - S))
    mass = mass.view(*score.shape[:-1], nb, block).sum(-1)                          # (B, Hkv, T, nb)
    starts = torch.arange(nb, device=score.device) * block
    candidate = starts[None, :] <= pos[:, None] - window                           # (T, nb)
    chosen = topk_mask(mass.masked_fill(~candidate, float("-inf")), topk // block)  # (B, Hkv, T, nb)
    s = torch.arange(S, device=score.device)
    return (chosen[..., s // block] & outside) | causal_mask(pos, window)


# ------------------------------------------------------------------------------------------------ the model
class TorchHySparse2(TwinModule):
    """HySparse2 in torch: ``forward(tokens (B, T) int64) -> logits (B, T, vocab)`` at every position.

    cfg: a ``HySparse2Config``; weights: {numpy name: array} with exactly the names and shapes of
    ``HySparse2.init_weights(cfg)`` (the default), stored as float32 parameters by numpy name
    (:class:`~hybrid_lab.trained.torch_blocks.TwinModule`).
    """

    def __init__(self, cfg: HySparse2Config, weights: dict | None = None):
        if not isinstance(cfg, HySparse2Config):
            raise ValueError(f"cfg must be a HySparse2Config, got {type(cfg).__name__}")
        ref = HySparse2.init_weights(cfg)
        if weights is None:
            weights = ref
        if not isinstance(weights, dict) or set(weights) != set(ref):
            diff = sorted(set(ref) ^ set(weights)) if isinstance(weights, dict) else ["(not a dict)"]
            raise ValueError(f"weights must hold exactly the arrays of HySparse2.init_weights(cfg); {diff[0]!r} is "
                             f"{'missing' if diff[0] in ref else 'unexpected'}")
        for n, a in weights.items():
            a = np.asarray(a)
            if a.shape != ref[n].shape or a.dtype.kind != "f" or not np.isfinite(a).all():
                raise ValueError(f"weights[{n!r}] must be a finite float array of shape {ref[n].shape}, got "
                                 f"{a.dtype} {a.shape}")
        super().__init__(cfg, {n: weights[n] for n in ref})          # in init_weights order

    # ------------------------------------------------------------------------ per-layer pieces (numpy's names)
    def _gate(self, p: str, x, o):
        """Sigmoid output gate (SWA and SA layers; none on FA layers or with ``gates=False``), numpy ``_gate``."""
        if not self.cfg.gates or not self.has(p + "attn.wg"):
            return o
        return o * torch.sigmoid(x @ self.w(p + "attn.wg")).view(o.shape)

    def _sink(self, p: str):
        return self.w(p + "attn.sink") if self.cfg.sinks and self.has(p + "attn.sink") else None

    def _layer_output(self, p: str, h, x, o):
        """Gate, output projection, residual, then the MLP with its residual (numpy ``layer_output``)."""
        o = self._gate(p, x, o)
        h = h + o.reshape(*h.shape[:2], -1) @ self.w(p + "attn.wo")
        return self.mlp(p, h)

    def _select(self, score, pos):
        cfg = self.cfg
        if cfg.select == "block":
            return block_select(score, pos, cfg.window, cfg.topk, cfg.select_block)
        return token_select(score, pos, cfg.window, cfg.topk)

    def forward(self, tokens: torch.Tensor, details: dict | None = None) -> torch.Tensor:
        """Causal full-sequence forward (numpy ``prefill(early_exit=False)``). tokens: (B, T) int.
        Returns logits (B, T, vocab).

        details (a dict, optional) collects per cross group ``"score"`` (B, Hkv, T, S) the FA's probability summed
        per KV group (detached) and ``"selected"`` (B, Hkv, T, S) bool, the SA layers' positions.
        """
        cfg = self.cfg
        tokens = self.check_tokens(tokens)
        B, T = tokens.shape
        Hq, Hkv, dk, dv = cfg.n_heads_q, cfg.n_heads_kv, cfg.d_qk, cfg.d_v
        scale = dk ** -0.5
        pos = torch.arange(T, device=tokens.device)
        causal = causal_mask(pos)                                                   # (T, S)
        h = F.embedding(tokens, self.w("embed"))
        fa_input = None
        for i in range(cfg.n_self):                                                 # Self-decoder
            p = f"self.{i}."
            x = rms_norm(h)
            q, k, v = self.qkv(x, p + "attn.")
            if i == cfg.self_swa_before:                                            # the self FA: NoPE, bridge source
                fa_input = h
                o, _ = attend(q, k, v, causal, scale)
            else:                                                                   # SWA: partial RoPE, window, sink
                q = apply_rope(q, pos, cfg.rope_dims, cfg.rope_base)
                k = apply_rope(k, pos, cfg.rope_dims, cfg.rope_base)
                o, _ = attend(q, k, v, causal_mask(pos, cfg.swa_window), scale, self._sink(p))
            h = self._layer_output(p, h, x, o)
        if cfg.bridging:                                                            # KV bridging: projections only
            srcs = [rms_norm(fa_input if s == "self_fa_input" else h) for s in cfg.sources]
            kv = [(self.heads(xs, f"bridge.{g}.wk", Hkv, dk), self.heads(xs, f"bridge.{g}.wv", Hkv, dv))
                  for g, xs in enumerate(srcs)]
        local = causal_mask(pos, cfg.cross_swa_window) if cfg.cross_swa_window else None
        for g in range(cfg.n_groups):                                               # Cross-decoder
            p = f"cross.{g}.fa."
            x = rms_norm(h)
            if cfg.bridging:
                q, (K, V) = self.heads(x, p + "attn.wq", Hq, dk), kv[g]
            else:                                                                   # §17.4: the FA's own KV
                q, K, V = self.qkv(x, p + "attn.")
            o, probs = attend(q, K, V, causal, scale)
            with torch.no_grad():                                                   # discrete: a mask, no gradient
                score = probs.detach().sum(2)                                       # (B, Hkv, T, S), summed over G
                selected = self._select(score, pos)
            if details is not None:
                details.setdefault("score", []).append(score)
                details.setdefault("selected", []).append(selected)
            h = self._layer_output(p, h, x, o)
            for j in range(cfg.group_size - 1):
                p = f"cross.{g}.sa.{j}."
                x = rms_norm(h)
                q = self.heads(x, p + "attn.wq", Hq, dk)
                o, _ = attend(q, K, V, selected[:, :, None], scale, self._sink(p))  # KV reuse at the selection
                if local is None:
                    h = self._layer_output(p, h, x, o)
                    continue
                o = self._gate(p, x, o)                                             # v1-style branch, its OWN KV
                ol, _ = attend(*self.qkv(x, p + "swa."), local, scale)
                o = o + ol * torch.sigmoid(x @ self.w(p + "swa.wg")).view(ol.shape)
                h = self.mlp(p, h + o.reshape(B, T, Hq * dv) @ self.w(p + "attn.wo"))
        return self.lm_head(h)
