"""Torch twin of the numpy HySparse (v1) model (``hybrid_lab.models.hysparse``): train in torch, infer in numpy.

Built block for block like ``HySparse.forward``, with the numpy model's weight names and shapes, so that the weights
of a trained twin (``numpy_weights()``) give the numpy model the same logits (float32: <= 1e-4 relative)::

    w = HySparse.init_weights(cfg)
    tm = TorchHySparse(cfg, w)                     # trainable float32 parameters
    logits = tm(tokens)                            # tokens (B, T) int64 -> (B, T, vocab), every position
    HySparse(cfg_float32, tm.numpy_weights()).forward(tokens[b])   # == logits[b]

One layer, as in the numpy model (a group = FA, SA, SA, ...):

- FA: exact causal attention over its own KV (NoPE). Its probabilities, summed over a KV group's query heads, score
  ``block_size``-token blocks; each query keeps the top ``n_blocks`` blocks among those it can see (block start <=
  its position), ties to the smaller block id (numpy's ``topk_indices``). The selection is discrete: it is computed
  under ``torch.no_grad()`` from the detached probabilities and used as a mask; gradients flow through the values.
- SA: sparse branch = ONE softmax of this layer's own queries over the selected tokens (causal part of the selected
  blocks) of the group FA's KV; local branch = its own q/k/v over the last ``window`` positions, partial RoPE on q
  and k (``cfg.rope_dims``), optional per-head sink (``cfg.sinks``). Fusion: sigmoid(g_sa) o_sa + sigmoid(g_loc) o_loc.
- MLP (SiLU), weightless RMSNorm (eps 1e-6) before attention, MLP and the LM head.

Full-sequence and batched: no Python loop over positions or batch rows, no numpy in ``forward`` (runs on CUDA). The
attention is dense with boolean masks (B, Hkv, G, T, S): fine at the lab's sizes (B=64, T=512, d_model=64).

``layer.{i}.swa.wo`` exists in the numpy weights but neither model reads it (both branches leave through
``attn.wo``); it stays at its initial value and its ``.grad`` stays None.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from hybrid_lab.models.hysparse import HySparse, HySparseConfig
from hybrid_lab.trained.torch_blocks import TwinModule, apply_rope, attend, causal_mask, rms_norm

__all__ = ["TorchHySparse", "block_scores", "select_blocks", "block_token_mask"]


# ------------------------------------------------------------------------------------------- the selection
def block_scores(p: torch.Tensor, block_size: int) -> torch.Tensor:
    """FA probability mass per block, summed over a KV group's query heads (numpy ``block_scores``, same order of sums).

    p: (B, Hkv, G, T, S). Returns (B, Hkv, T, ceil(S / block_size)).
    """
    B, Hkv, G, T, S = p.shape
    nb = -(-S // block_size)
    per_head = F.pad(p, (0, nb * block_size - S)).view(B, Hkv, G, T, nb, block_size).sum(-1)
    return per_head.sum(2)


def select_blocks(scores: torch.Tensor, q_pos: torch.Tensor, block_size: int, n_blocks: int) -> torch.Tensor:
    """Top ``n_blocks`` visible blocks (block start <= q_pos) per query, numpy ``select_blocks`` + ``topk_indices``.

    scores: (..., T, nb); q_pos: (T,) int. Returns block ids (..., T, n_blocks) int64 in descending score order,
    ties to the smaller block id (a stable sort of -scores, as numpy's), -1 where fewer blocks are visible.
    """
    nb = scores.shape[-1]
    visible = torch.arange(nb, device=scores.device)[None, :] * block_size <= q_pos[:, None]   # (T, nb)
    s = scores.masked_fill(~visible, float("-inf"))
    kk = min(n_blocks, nb)
    order = torch.sort(-s, dim=-1, stable=True).indices[..., :kk]
    order = torch.where(torch.isneginf(torch.gather(s, -1, order)), -1, order)
    if kk < n_blocks:
        order = F.pad(order, (0, n_blocks - kk), value=-1)
    return order


def block_token_mask(block_idx: torch.Tensor, block_size: int, q_pos: torch.Tensor, S: int) -> torch.Tensor:
    """The token set of selected blocks as a mask: s in a selected block and s <= q_pos (numpy ``blocks_to_tokens``).

    block_idx: (..., T, k) int64, -1 = empty slot; q_pos: (T,). Returns bool (..., T, S).
    """
    nb = -(-S // block_size)
    slot = torch.where(block_idx >= 0, block_idx, nb)                 # empty slots land in a dropped column nb
    chosen = torch.zeros(block_idx.shape[:-1] + (nb + 1,), dtype=torch.bool, device=block_idx.device)
    chosen = chosen.scatter(-1, slot, torch.ones_like(slot, dtype=torch.bool))[..., :nb]   # (..., T, nb)
    s = torch.arange(S, device=block_idx.device)
    return chosen[..., s // block_size] & (s[None, :] <= q_pos[:, None])


# ------------------------------------------------------------------------------------------------ the model
class TorchHySparse(TwinModule):
    """The v1 model in torch: ``forward(tokens (B, T) int64) -> logits (B, T, vocab)`` at every position.

    cfg: a ``HySparseConfig``; weights: {numpy name: array} as ``HySparse.init_weights(cfg)`` returns (the default),
    stored as float32 parameters by numpy name (:class:`~hybrid_lab.trained.torch_blocks.TwinModule`).
    """

    def __init__(self, cfg: HySparseConfig, weights: dict | None = None):
        if not isinstance(cfg, HySparseConfig):
            raise ValueError(f"cfg must be a HySparseConfig, got {type(cfg).__name__}")
        super().__init__(cfg, HySparse(cfg, weights).weights)   # the numpy model checks names, shapes, finiteness

    def forward(self, tokens: torch.Tensor, return_block_idx: bool = False):
        """Causal full-sequence forward. tokens: (B, T) int. Returns logits (B, T, vocab) [, block_idx].

        block_idx (with ``return_block_idx``): per group, the FA's selected blocks (B, T, Hkv, n_blocks), -1 padded,
        the layout of numpy's ``details["block_idx"]`` with a batch axis.
        """
        cfg = self.cfg
        tokens = self.check_tokens(tokens)
        B, T = tokens.shape
        Hq, dk, dv = cfg.n_heads_q, cfg.d_qk, cfg.d_v
        scale = dk ** -0.5
        pos = torch.arange(T, device=tokens.device)
        causal, local = causal_mask(pos), causal_mask(pos, cfg.window)              # (T, S)
        h = F.embedding(tokens, self.w("embed"))
        K = V = member = None
        picked = []
        for i, kind in enumerate(cfg.layers):
            p = f"layer.{i}."
            x = rms_norm(h)
            if kind == "fa":
                q, K, V = self.qkv(x, p + "attn.")                                 # K, V: the group's KV (NoPE)
                o, probs = attend(q, K, V, causal, scale)
                with torch.no_grad():                                               # discrete: a mask, no gradient
                    bidx = select_blocks(block_scores(probs.detach(), cfg.block_size), pos, cfg.block_size,
                                         cfg.n_blocks)                              # (B, Hkv, T, n_blocks)
                    member = block_token_mask(bidx, cfg.block_size, pos, T)[:, :, None]   # (B, Hkv, 1, T, S)
                picked.append(bidx.permute(0, 2, 1, 3))
            else:
                q = self.heads(x, p + "attn.wq", Hq, dk)
                o_sa, _ = attend(q, K, V, member, scale)                            # FA's KV at the selected tokens
                ql, kl, vl = self.qkv(x, p + "swa.")                                # the local branch's OWN KV
                ql = apply_rope(ql, pos, cfg.rope_dims, cfg.rope_base)
                kl = apply_rope(kl, pos, cfg.rope_dims, cfg.rope_base)
                sink = self.w(p + "swa.sink") if cfg.sinks else None
                o_loc, _ = attend(ql, kl, vl, local, scale, sink)
                g_sa = self.heads(x, p + "attn.wg", Hq, dv)
                g_loc = self.heads(x, p + "swa.wg", Hq, dv)
                o = torch.sigmoid(g_sa) * o_sa + torch.sigmoid(g_loc) * o_loc      # gated_fusion
            h = h + o.reshape(B, T, Hq * dv) @ self.w(p + "attn.wo")
            h = self.mlp(p, h)
        logits = self.lm_head(h)
        return (logits, picked) if return_block_idx else logits
