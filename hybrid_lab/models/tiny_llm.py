"""Two sources of attention for the sparse-attention lab: a random-weight tiny transformer and a concentrated synthetic.

Top-k sparse attention is only as good as the attention is concentrated (集中). Two generators make the point:

- :class:`TinyLLM`: a small causal transformer with random (untrained) weights. Its attention logits are tiny, so
  every query spreads its probability almost uniformly over the past: entropy close to ``ln(#visible keys)``.
- :func:`concentrated_attention`: zero-mean, low-rank hidden states and random query/key maps, so the logits are a
  low-rank bilinear form (a stand-in for what training produces). A single ``concentration`` knob sets the spread (standard deviation) of the attention logits, so a few
  tokens hold most of the mass when it is large. The same hidden states feed the lightning indexer of notebook 04.

Shapes follow :mod:`hybrid_lab.ops.sparse_attention`: q (B, T, Hq, d), k (B, S, Hkv, d), v (B, S, Hkv, dv).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hybrid_lab.core import checks
from hybrid_lab.core.blocks import layer_norm, masked_attention


@dataclass(frozen=True)
class TinyLLMConfig:
    """vocab, d_model, n_heads (d_model % n_heads == 0), n_layers, max_len, init_std (GPT-2 style 0.02), seed."""

    vocab: int = 256
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    max_len: int = 2048
    init_std: float = 0.02
    seed: int = 0

    def __post_init__(self):
        for name in ("vocab", "d_model", "n_heads", "n_layers", "max_len"):
            checks.pos_int(name, getattr(self, name))
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be a multiple of n_heads={self.n_heads}")
        checks.positive_number("init_std", self.init_std)
        checks.nonneg_int("seed", self.seed)


class TinyLLM:
    """A pre-LayerNorm causal transformer with random weights (never trained).

    ``forward(tokens)`` returns ``(logits, attn)`` where ``attn`` is a list (one entry per layer) of
    ``(q, k, v)`` with q, k, v: (1, L, H, d_head): exactly what attention diagnostics need.
    """

    def __init__(self, cfg: TinyLLMConfig = TinyLLMConfig()):
        if not isinstance(cfg, TinyLLMConfig):
            raise ValueError(f"cfg must be a TinyLLMConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        rng = np.random.default_rng(cfg.seed)
        D, s = cfg.d_model, cfg.init_std
        self.tok_emb = rng.normal(0, s, (cfg.vocab, D))
        self.pos_emb = rng.normal(0, s, (cfg.max_len, D))
        self.layers = [
            {"Wqkv": rng.normal(0, s, (D, 3 * D)), "Wo": rng.normal(0, s, (D, D)),
             "W1": rng.normal(0, s, (D, 4 * D)), "W2": rng.normal(0, s, (4 * D, D))}
            for _ in range(cfg.n_layers)
        ]
        self.W_out = rng.normal(0, s, (D, cfg.vocab))

    def forward(self, tokens):
        """tokens: (L,) ints in [0, vocab). Returns logits (L, vocab) and [(q, k, v) per layer], each (1, L, H, dh)."""
        cfg = self.cfg
        tokens = checks.tokens("tokens", tokens, cfg.vocab)
        L = tokens.size
        if L > cfg.max_len:
            raise ValueError(f"len(tokens)={L} exceeds max_len={cfg.max_len}")
        H, dh = cfg.n_heads, cfg.d_model // cfg.n_heads
        x = self.tok_emb[tokens] + self.pos_emb[:L]
        causal = np.tri(L, dtype=bool)                                 # key s visible to query t iff s <= t
        attn = []
        for lyr in self.layers:
            qkv = layer_norm(x) @ lyr["Wqkv"]
            q, k, v = (a.reshape(L, H, dh) for a in np.split(qkv, 3, axis=-1))
            attn.append((q[None], k[None], v[None]))
            o, _ = masked_attention(q, k, v, causal, dh ** -0.5)
            x = x + o.reshape(L, cfg.d_model) @ lyr["Wo"]
            x = x + np.maximum(layer_norm(x) @ lyr["W1"], 0.0) @ lyr["W2"]
        return layer_norm(x) @ self.W_out, attn


@dataclass
class SyntheticAttention:
    """One draw of the concentrated synthetic (all float64).

    x_keys: (S, D) hidden states of the cached tokens; x_queries: (T, D) hidden states of the queries (all of them
    come after the S keys, so every query sees every key); q: (1, T, H, d) main-attention queries (already scaled:
    use ``scale=1``); k: (1, S, 1, d) one shared key per token (MQA, as MLA's latent); v: (1, S, 1, d).
    """

    x_keys: np.ndarray
    x_queries: np.ndarray
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    concentration: float

    @property
    def q_pos(self) -> np.ndarray:
        """Absolute query positions: every query sits after the last key (sees keys 0..S-1)."""
        return np.full(self.x_queries.shape[0], self.x_keys.shape[0] - 1, dtype=np.int64)


def concentrated_attention(n_keys: int = 2048, n_queries: int = 128, d_model: int = 64, n_heads: int = 4,
                           d_head: int = 32, rank: int = 8, concentration: float = 4.0, noise: float = 0.1,
                           head_spread: float = 0.3, seed: int = 0) -> SyntheticAttention:
    """Synthetic MQA attention whose sharpness is set by ``concentration``.

    Hidden states are low rank plus a little noise: x = z P + noise·ε with z ~ N(0, I_rank), P: (rank, D), so they
    have zero mean (like a normalized residual stream without its constant part). Shared key k_s = x_s W_k
    (D -> d_head); head h's query q_h = x_t (W_0 + head_spread · E_h): heads share a common map W_0 and differ by a
    random E_h (0: identical heads; large: independent heads). The logits q_h · k_s are therefore (nearly) rank-``rank``
    bilinear forms of (x_t, x_s). Each row of logits (per query and head) is rescaled so that its standard deviation
    over the keys equals ``concentration``: 0 gives uniform attention; 4 puts ~85-90% of the mass on the top 32 of
    2,048 keys (head-summed).
    """
    for name, val in (("n_keys", n_keys), ("n_queries", n_queries), ("d_model", d_model), ("n_heads", n_heads),
                      ("d_head", d_head), ("rank", rank)):
        checks.pos_int(name, val)
    if rank > d_model:
        raise ValueError(f"rank must be <= d_model={d_model}, got {rank}")
    for name, val in (("concentration", concentration), ("noise", noise), ("head_spread", head_spread)):
        checks.nonneg_number(name, val)
    checks.nonneg_int("seed", seed)
    for name, shape in (("n_queries, n_heads or n_keys (the logits are n_queries x n_heads x n_keys)",
                         (n_queries, n_heads, n_keys)),
                        ("n_keys or d_model (x_keys is n_keys x d_model)", (n_keys, d_model)),
                        ("n_queries or d_model (x_queries is n_queries x d_model)", (n_queries, d_model)),
                        ("n_heads, d_model or d_head (the query maps are n_heads x d_model x d_head)",
                         (n_heads, d_model, d_head)),
                        ("n_keys or d_head (v is n_keys x d_head)", (n_keys, d_head))):
        checks.output_size(name, shape)
    rng = np.random.default_rng(seed)
    P = rng.standard_normal((rank, d_model)) / np.sqrt(rank)
    x_k = rng.standard_normal((n_keys, rank)) @ P + noise * rng.standard_normal((n_keys, d_model))
    x_q = rng.standard_normal((n_queries, rank)) @ P + noise * rng.standard_normal((n_queries, d_model))
    W_k = rng.standard_normal((d_model, d_head)) / np.sqrt(d_model)
    W_0 = rng.standard_normal((d_model, d_head)) / np.sqrt(d_model)
    W_q = W_0[None] + head_spread * rng.standard_normal((n_heads, d_model, d_head)) / np.sqrt(d_model)
    k = x_k @ W_k                                                        # (S, d)
    q = np.einsum("td,hde->the", x_q, W_q)                               # (T, H, d)
    spread = np.einsum("the,se->ths", q, k).std(axis=-1)                 # logit std over keys, per (t, h)
    q = q * (concentration / np.maximum(spread, 1e-12))[..., None]
    v = rng.standard_normal((n_keys, d_head))
    return SyntheticAttention(x_keys=x_k, x_queries=x_q, q=q[None], k=k[None, :, None, :], v=v[None, :, None, :],
                              concentration=float(concentration))
