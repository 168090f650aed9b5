"""HySparse (first generation): one full-attention (FA) layer finds the important blocks, the sparse-attention (SA)
layers after it reuse its KV and block indices (oracle selection, KV sharing) plus their own sliding-window branch.

The HySparse paper (the first generation), as the HySparse2 paper §3 contrasts it with its successor; notebook 05.
A group is ``FA, SA, SA, ...``; the model is a stack of groups.

- FA: exact causal attention over its own KV (projected from its own input hidden state). From its attention
  probabilities (summed over the query heads of a KV group) it scores 64-token blocks and keeps the top 16
  (16 x 64 = 1,024 tokens in the paper; toy sizes here).
- SA: its OWN queries read the group FA's KV at the tokens of the selected blocks (``sparse_attention``, one softmax
  over those tokens), and an independent sliding-window branch (window 128 in the paper) reads a local KV that the SA
  layer projects from its OWN hidden states. Two softmaxes; a learned sigmoid gate per branch fuses them.
- MLP in place of the paper's MoE (the routing does not change any dependency this lab studies).
- Positions: FA and the sparse branch are NoPE, as in the papers. ``rope_dims > 0`` rotates the first ``rope_dims``
  channels of the sliding-window branch's q and k (partial RoPE, ``apply_rope``), as HySparse2's SWA layers do.
  Off by default (the random-weight notebooks are NoPE), but a model you TRAIN needs it: inside a window a NoPE
  softmax sees a set of tokens, not a sequence, so the window branch cannot tell which token came right before
  which, and a v1 model could not learn "the value follows its key". ``sinks=True`` adds a per-head sink logit to
  the window branch (``layer.{i}.swa.sink``: ``exp(sink)`` joins its softmax denominator), as HySparse2's SWA
  layers have. ``n_params(cfg)`` counts the weight elements.

The shared blocks (RMSNorm, masked dense attention, weight init) come from ``hybrid_lab.core.blocks``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hybrid_lab.core import checks
from hybrid_lab.core.blocks import (apply_rope, attn_weights, init_weight, masked_attention, masked_attention_probs,
                                    mlp_weights, rms_norm, sigmoid, silu)
from hybrid_lab.ops.sparse_attention import sparse_attention, topk_indices

__all__ = [
    "HySparseConfig", "HySparse", "n_params",
    "block_scores", "select_blocks", "blocks_to_tokens", "gated_fusion",
    "drifting_attention_stack", "topk_overlap_by_distance",
]


# ---------------------------------------------------------------------------------------- v1 block selection
def block_scores(probs: np.ndarray, block_size: int, n_kv_heads: int = 1) -> np.ndarray:
    """Block importance = attention probability mass of the FA in each block, summed over a KV group's query heads.

    probs: (T, Hq, S) FA probabilities (finite, >= 0). Returns (T, Hkv, ceil(S / block_size)).
    """
    block_size = checks.pos_int("block_size", block_size)
    probs = checks.finite_array("probs", probs, 3, "(T, Hq, S)")
    if probs.dtype == np.float16:                     # summed in float32 at least, like every op
        probs = probs.astype(np.float32)
    T, Hq, S = probs.shape
    checks.heads(Hq, n_kv_heads, "probs' query heads Hq", "n_kv_heads")
    if (probs < 0).any():
        raise ValueError(f"probs must be >= 0 (attention probabilities), got min {probs.min():.6g}")
    block_size = min(block_size, max(S, 1))           # one block holds everything: no padding past S
    nb = -(-S // block_size)
    pad = np.zeros((T, Hq, nb * block_size - S), probs.dtype)
    per_head = np.concatenate([probs, pad], axis=-1).reshape(T, Hq, nb, block_size).sum(-1)
    return per_head.reshape(T, n_kv_heads, Hq // n_kv_heads, nb).sum(2)


def select_blocks(scores: np.ndarray, q_pos: np.ndarray, block_size: int, n_blocks: int) -> np.ndarray:
    """Top ``n_blocks`` blocks per (query, KV group) among the blocks the query can see (block start <= q_pos).

    scores: (T, Hkv, nb) finite; q_pos: (T,) ints in [0, nb * block_size) (a query lies inside the scored blocks).
    Returns block ids (T, Hkv, n_blocks), -1 padded (deterministic ties).
    """
    block_size, n_blocks = checks.pos_int("block_size", block_size), checks.pos_int("n_blocks", n_blocks)
    scores = checks.finite_array("scores", scores, 3, "(T, Hkv, nb)").astype(np.float64)
    T, _, nb = scores.shape
    q_pos = checks.int_array("q_pos", q_pos, 1, "(T,)", lo=0, hi=max(1, nb * block_size))
    if q_pos.shape != (T,) or nb == 0:
        raise ValueError(f"q_pos must have shape (T={T},) and scores at least one block, got q_pos {q_pos.shape}, "
                         f"scores {scores.shape}")
    checks.output_size("n_blocks", (T, scores.shape[1], n_blocks))
    visible = (np.arange(nb)[None, :] * block_size) <= q_pos[:, None]   # (T, nb)
    return topk_indices(np.where(visible[:, None, :], scores, -np.inf), n_blocks)


def blocks_to_tokens(block_idx: np.ndarray, block_size: int, q_pos: np.ndarray) -> np.ndarray:
    """Expand block ids to the causal token positions they cover (s <= q_pos), -1 padded.

    block_idx: (T, Hkv, nb_sel) block ids >= -1 (-1 = empty slot), no block twice in a row; q_pos: (T,) ints >= 0.
    Returns (T, Hkv, nb_sel * block_size) unique positions (ids ascending per block).
    """
    block_size = checks.pos_int("block_size", block_size)
    block_idx = checks.index_sets("block_idx", block_idx, np.iinfo(np.int64).max, 3, "(T, Hkv, nb_sel)")
    q_pos = checks.int_array("q_pos", q_pos, 1, "(T,)", lo=0)
    if q_pos.shape != block_idx.shape[:1]:
        raise ValueError(f"q_pos must have shape (T={block_idx.shape[0]},), got {q_pos.shape}")
    checks.output_size("block_size", block_idx.shape + (block_size,))
    # a block that starts after q_pos covers nothing; dropping it before the multiply keeps ids near 2**63 from
    # overflowing into small (wrong) positions
    live = (block_idx >= 0) & (block_idx <= (q_pos // block_size)[:, None, None])
    tok = np.where(live, block_idx, 0)[..., None] * block_size + np.arange(block_size)   # (T, Hkv, nb_sel, bs)
    ok = live[..., None] & (tok <= q_pos[:, None, None, None])
    return np.where(ok, tok, -1).reshape(block_idx.shape[:-1] + (block_idx.shape[-1] * block_size,)).astype(np.int64)


def gated_fusion(o_sparse, o_local, g_sparse, g_local):
    """v1's fusion of the two branches: sigmoid(g_sparse) * o_sparse + sigmoid(g_local) * o_local (elementwise).

    All four finite; the two branch outputs of one shape (e.g. (T, Hq, dv)), each gate broadcastable to it.
    """
    o_sparse, o_local = checks.finite_array("o_sparse", o_sparse), checks.finite_array("o_local", o_local)
    if o_sparse.shape != o_local.shape:
        raise ValueError(f"o_sparse and o_local must have one shape, got {o_sparse.shape} and {o_local.shape}")
    for name, g in (("g_sparse", g_sparse), ("g_local", g_local)):
        g = checks.finite_array(name, g)
        try:
            ok = np.broadcast_shapes(g.shape, o_sparse.shape) == o_sparse.shape
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"{name} must broadcast to the outputs' shape {o_sparse.shape}, got {g.shape}")
    return sigmoid(g_sparse) * o_sparse + sigmoid(g_local) * o_local


# ------------------------------------------------------------------------------------------------ the v1 model
@dataclass(frozen=True)
class HySparseConfig:
    """HySparse (v1) at toy width. Paper: 64-token blocks, 16 blocks, SWA window 128, GQA 64/4, head dims 192/128.

    ``n_layers`` layers in groups of ``group_size`` = 1 FA + (group_size - 1) SA.
    ``rope_dims`` (even, <= d_qk; 0 = NoPE) and ``rope_base``: partial RoPE on the q and k of the SA layers'
    sliding-window branch only (FA and the sparse branch stay NoPE). ``sinks``: a per-head sink logit on that branch.
    The defaults (NoPE, no sinks) keep the weights and outputs of the random-weight notebooks.
    """
    vocab: int = 64
    d_model: int = 32
    n_heads_q: int = 4
    n_heads_kv: int = 2
    d_qk: int = 8
    d_v: int = 8
    d_ff: int = 64
    n_layers: int = 8
    group_size: int = 4
    block_size: int = 4
    n_blocks: int = 4
    window: int = 8
    rope_dims: int = 0
    rope_base: float = 10000.0
    sinks: bool = False
    seed: int = 0
    dtype: str = "float64"

    def __post_init__(self):
        for name in ("vocab", "d_model", "d_qk", "d_v", "d_ff", "n_layers", "group_size", "block_size",
                     "n_blocks", "window"):
            checks.pos_int(name, getattr(self, name))
        checks.heads(self.n_heads_q, self.n_heads_kv)
        checks.nonneg_int("seed", self.seed)
        checks.nonneg_int("rope_dims", self.rope_dims)
        if self.rope_dims % 2 or self.rope_dims > self.d_qk:
            raise ValueError(f"rope_dims must be even and in [0, d_qk={self.d_qk}], got {self.rope_dims}")
        checks.positive_number("rope_base", self.rope_base)
        if not isinstance(self.sinks, (bool, np.bool_)):
            raise ValueError(f"sinks must be True or False, got {self.sinks!r}")
        if self.n_layers % self.group_size:
            raise ValueError(f"group_size={self.group_size} must divide n_layers={self.n_layers} "
                             f"(each group is 1 FA + {self.group_size - 1} SA)")
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"dtype must be 'float32' or 'float64', got {self.dtype!r}")

    @property
    def layers(self) -> tuple:
        """Layer kinds in order, e.g. ('fa', 'sa', 'sa', 'sa', 'fa', ...)."""
        return tuple("fa" if i % self.group_size == 0 else "sa" for i in range(self.n_layers))


class HySparse:
    """The v1 model (prefill forward only): groups of FA + SA with an own-KV sliding-window branch in every SA.

    ``weights`` is a dict of named arrays (``layer.{i}.attn.wq``, ...); pass your own to share or edit them.
    """

    def __init__(self, cfg: HySparseConfig, weights: dict | None = None):
        if not isinstance(cfg, HySparseConfig):
            raise ValueError(f"cfg must be a HySparseConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        if weights is None:
            self.weights = self.init_weights(cfg)
            return
        ref = self.init_weights(cfg)                     # the names and shapes this config needs
        if set(weights) != set(ref):
            diff = sorted(set(ref) ^ set(weights))
            raise ValueError(f"weights must hold exactly the arrays of init_weights(cfg); {diff[0]!r} is "
                             f"{'missing' if diff[0] in ref else 'unexpected'}")
        for n, a in weights.items():
            if checks.finite_array(f"weights[{n!r}]", a).shape != ref[n].shape:
                raise ValueError(f"weights[{n!r}] must have shape {ref[n].shape}, got {np.shape(a)}")
        self.weights = dict(weights)

    @staticmethod
    def init_weights(cfg: HySparseConfig) -> dict:
        rng = np.random.default_rng(cfg.seed)
        D, Hq, Hkv, dk, dv, dt = cfg.d_model, cfg.n_heads_q, cfg.n_heads_kv, cfg.d_qk, cfg.d_v, cfg.dtype
        w = {"embed": rng.standard_normal((cfg.vocab, D)).astype(dt), "lm_head": init_weight(rng, (D, cfg.vocab), D, dt)}
        for i, kind in enumerate(cfg.layers):
            p = f"layer.{i}."
            if kind == "fa":
                w.update(attn_weights(rng, p + "attn.", D, Hq, Hkv, dk, dv, dt))
            else:  # sparse branch (queries only: K/V come from the FA) + local branch with its own KV
                w.update(attn_weights(rng, p + "attn.", D, Hq, Hkv, dk, dv, dt, kv=False, gate=True))
                w.update(attn_weights(rng, p + "swa.", D, Hq, Hkv, dk, dv, dt, gate=True, sink=cfg.sinks))
            w.update(mlp_weights(rng, p + "mlp.", D, cfg.d_ff, dt))
        return w

    def forward(self, tokens, return_details: bool = False):
        """Causal prefill. tokens: (L,) int. Returns logits (L, vocab) [, details].

        details: {"fa_probs": [per group (L, Hq, L)], "block_idx": [per group (L, Hkv, n_blocks)],
                  "sa_outputs": [per SA layer (L, Hq, dv) sparse-branch outputs],
                  "kept_mass": [per layer (L, Hq): the probability mass that full attention of THIS layer's
                  queries over the group FA's KV puts on the selected tokens; FA rows = the FA's own]}.
        """
        cfg, w = self.cfg, self.weights
        tokens = checks.tokens("tokens", tokens, cfg.vocab)
        L = len(tokens)
        pos = np.arange(L)
        Hq, Hkv, dk, dv = cfg.n_heads_q, cfg.n_heads_kv, cfg.d_qk, cfg.d_v
        scale = dk ** -0.5
        causal = pos[None, :] <= pos[:, None]
        local = causal & (pos[None, :] > pos[:, None] - cfg.window)
        h = w["embed"][tokens]
        details = {"fa_probs": [], "block_idx": [], "sa_outputs": [], "kept_mass": []}
        G = Hq // Hkv
        K = V = tok_idx = None
        for i, kind in enumerate(cfg.layers):
            p = f"layer.{i}."
            x = rms_norm(h)
            q = (x @ w[p + "attn.wq"]).reshape(L, Hq, dk)
            if kind == "fa":
                K = (x @ w[p + "attn.wk"]).reshape(L, Hkv, dk)
                V = (x @ w[p + "attn.wv"]).reshape(L, Hkv, dv)
                o, probs = masked_attention(q, K, V, causal, scale)
                bidx = select_blocks(block_scores(probs, cfg.block_size, Hkv), pos, cfg.block_size, cfg.n_blocks)
                tok_idx = blocks_to_tokens(bidx, cfg.block_size, pos)
                member = np.zeros((L, Hkv, L + 1), bool)            # column L collects the -1 padding
                member[np.arange(L)[:, None, None], np.arange(Hkv)[None, :, None], tok_idx] = True
                member = np.repeat(member[..., :L], G, axis=1)      # (L, Hq, L)
                details["fa_probs"].append(probs)
                details["block_idx"].append(bidx)
                details["kept_mass"].append(np.where(member, probs, 0.0).sum(-1))
            else:
                o_sa = sparse_attention(q[None], K[None], V[None], tok_idx[None], scale=scale)[0]
                p_full = masked_attention_probs(q, K, causal, scale)        # what this layer WOULD attend to
                details["kept_mass"].append(np.where(member, p_full, 0.0).sum(-1))
                kl = (x @ w[p + "swa.wk"]).reshape(L, Hkv, dk)        # the local branch's OWN KV, from this layer
                vl = (x @ w[p + "swa.wv"]).reshape(L, Hkv, dv)
                ql = (x @ w[p + "swa.wq"]).reshape(L, Hq, dk)
                ql = apply_rope(ql, pos, cfg.rope_dims, cfg.rope_base)    # rope_dims = 0: unchanged (NoPE)
                kl = apply_rope(kl, pos, cfg.rope_dims, cfg.rope_base)
                o_loc, _ = masked_attention(ql, kl, vl, local, scale, sink=w.get(p + "swa.sink"))
                g_sa = (x @ w[p + "attn.wg"]).reshape(L, Hq, dv)
                g_loc = (x @ w[p + "swa.wg"]).reshape(L, Hq, dv)
                details["sa_outputs"].append(o_sa)
                o = gated_fusion(o_sa, o_loc, g_sa, g_loc)
            h = h + o.reshape(L, Hq * dv) @ w[p + "attn.wo"]
            h = h + silu(rms_norm(h) @ w[p + "mlp.w1"]) @ w[p + "mlp.w2"]
        logits = rms_norm(h) @ w["lm_head"]
        return (logits, details) if return_details else logits


def n_params(cfg: HySparseConfig) -> int:
    """Number of weight elements of ``HySparse.init_weights(cfg)`` (embedding and LM head included).

    Counts every stored array, also ``layer.{i}.swa.wo``, which ``init_weights`` creates but the forward never reads
    (both branches leave through ``attn.wo`` after the gated fusion).
    """
    if not isinstance(cfg, HySparseConfig):
        raise ValueError(f"cfg must be a HySparseConfig, got {type(cfg).__name__}")
    D, Hq, Hkv, dk, dv = cfg.d_model, cfg.n_heads_q, cfg.n_heads_kv, cfg.d_qk, cfg.d_v
    q_o = D * Hq * dk + Hq * dv * D                      # wq, wo
    kv = D * Hkv * (dk + dv)                              # wk, wv
    gate = D * Hq * dv                                    # wg
    mlp = 2 * D * cfg.d_ff
    fa = q_o + kv + mlp
    sa = (q_o + gate) + (q_o + kv + gate + (Hq if cfg.sinks else 0)) + mlp   # sparse branch + window branch
    n_fa = cfg.n_layers // cfg.group_size
    return 2 * cfg.vocab * D + n_fa * fa + (cfg.n_layers - n_fa) * sa


# ------------------------------------------------------------------ cross-layer stability of the top-k sets
def drifting_attention_stack(L: int, n_layers: int, d: int = 16, drift: float = 0.3, seed: int = 0,
                             temperature: float = 2.0):
    """Attention of one query over L keys in ``n_layers`` layers whose Q/K projections drift like a random walk.

    A stand-in for a trained model (random independent layers have no cross-layer stability at all): layer l+1's
    projections are ``cos(drift) * W_l + sin(drift) * noise``, so nearby layers look at similar tokens and far
    layers decorrelate. Returns (probs: (n_layers, L), values: (L, d)).
    """
    checks.pos_int("L", L)
    checks.pos_int("n_layers", n_layers)
    checks.pos_int("d", d)
    checks.number_in("drift", drift, 0.0, np.pi / 2)
    checks.nonneg_int("seed", seed)
    checks.positive_number("temperature", temperature)
    checks.output_size("L, n_layers", (n_layers, L))
    checks.output_size("L, d", (L, d))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((L, d))
    qx = rng.standard_normal(d)
    wq, wk = rng.standard_normal((d, d)), rng.standard_normal((d, d))
    probs = np.empty((n_layers, L))
    for layer in range(n_layers):
        logits = (qx @ wq) @ (x @ wk).T * temperature / d
        e = np.exp(logits - logits.max())
        probs[layer] = e / e.sum()
        wq = np.cos(drift) * wq + np.sin(drift) * rng.standard_normal((d, d))
        wk = np.cos(drift) * wk + np.sin(drift) * rng.standard_normal((d, d))
    return probs, rng.standard_normal((L, d))


def topk_overlap_by_distance(probs: np.ndarray, k: int) -> np.ndarray:
    """Mean overlap |S_a ∩ S_b| / k of the top-k sets of layers a, b as a function of distance b - a.

    probs: (n_layers, L) finite scores. Returns (n_layers,) with entry 0 = 1.0 (a layer overlaps itself).
    """
    probs = checks.finite_array("probs", probs, 2, "(n_layers, L)")
    n, L = probs.shape
    checks.pos_int("n_layers (probs.shape[0])", n)
    checks.pos_int("k", k)
    if k > L:
        raise ValueError(f"k must be <= L={L}, got {k}")
    sets = topk_indices(probs, k)                               # (n, k)
    member = np.zeros((n, L), bool)
    member[np.arange(n)[:, None], sets] = True
    inter = member.astype(np.int64) @ member.T.astype(np.int64)  # (n, n) |S_a ∩ S_b|
    return np.array([np.mean(np.diagonal(inter, offset=dist)) / k for dist in range(n)])
