"""Torch twin of HySparse2 (hybrid_lab.trained.torch_hysparse2) and the numpy model's §17 ablation variants.

The twin trains, the numpy model infers: equal logits on the same weights, at the init and after Adam steps, for
the paper model and every variant (block-level selection, no forced window, gated SWA branch, no bridging, GQA with
the boundary as bridge source). The variants' own semantics: block selection, window = 0, no early exit without
bridging, early exit exact after training where the paper says it is.
"""
import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from trained_helpers import adam_steps, next_token_loss, one_torch_thread  # noqa: E402, F401 (an autouse fixture)

from hybrid_lab.models.hysparse2 import HySparse2, HySparse2Config, n_params  # noqa: E402
from hybrid_lab.ops.fa_decode import forced_window_select, with_forced_window  # noqa: E402
from hybrid_lab.trained.torch_blocks import param_key  # noqa: E402
from hybrid_lab.trained.torch_hysparse2 import TorchHySparse2, block_select, token_select  # noqa: E402

BASE = dict(vocab=32, d_model=32, self_swa_before=1, self_swa_after=1, cross_layers=3, group_size=3, window=4,
            topk=8, swa_window=4, rope_dims=4)
VARIANTS = {
    "token": {},                                                    # the paper model: forced window ∪ top-k tokens
    "block": dict(select="block", select_block=4),                  # §17.2: HySparse v1's block rule, same budget
    "no_window": dict(window=0),                                    # §17.3 "No SWA": top-k over everything visible
    "gated_swa": dict(cross_swa_window=4),                          # §17.3 "Gated SWA": v1-style branch, own KV
    "no_bridging": dict(bridging=False),                            # §17.4: each cross FA projects its own KV
    "gqa_boundary": dict(n_heads_kv=2, bridge_sources=("boundary",)),
}
EARLY_EXIT = ("token", "block", "no_window", "gqa_boundary")       # the variants whose early exit is exact
B, T = 3, 32


def cfg_of(variant, **kw):
    return HySparse2Config(**dict(BASE, **VARIANTS[variant], **kw))


def batch(seed, b=B, t=T, vocab=32):
    return torch.randint(0, vocab, (b, t), generator=torch.Generator().manual_seed(seed))


_TRAINED = {}


def trained_weights(variant):
    """float32 weights after 20 Adam steps on random tokens (off the init), trained once per variant."""
    if variant not in _TRAINED:
        torch.manual_seed(0)
        tm = TorchHySparse2(cfg_of(variant))
        adam_steps(tm, lambda step: batch(100 + step, b=4), 20)
        _TRAINED[variant] = tm.numpy_weights()
    return _TRAINED[variant]


def selection_masks(idx, S):
    """numpy selections (T, Hkv, K) -1 padded -> membership (Hkv, T, S), the twin's layout."""
    Tq, Hkv, _ = idx.shape
    member = np.zeros((Tq, Hkv, S + 1), bool)
    member[np.arange(Tq)[:, None, None], np.arange(Hkv)[None, :, None], np.where(idx >= 0, idx, S)] = True
    return member[..., :S].transpose(1, 0, 2)


def compare(cfg, w32, toks, dtype):
    """Max over the batch of max|numpy - torch| / max|torch|, after checking both ran the same selections."""
    tm = TorchHySparse2(cfg, w32)
    if dtype == "float64":
        tm = tm.double()      # float32 weights are exact in float64: both models hold the same numbers
    m = HySparse2(dataclasses.replace(cfg, dtype=dtype), {n: a.astype(dtype) for n, a in w32.items()})
    det = {}
    with torch.no_grad():
        lt = tm(toks, details=det).numpy()
    worst = 0.0
    for b in range(toks.shape[0]):
        dn = {}
        ln, _ = m.prefill(toks[b].numpy(), early_exit=False, details=dn)
        assert ln.dtype == np.dtype(dtype) and ln.shape == (toks.shape[1], cfg.vocab)
        for g, idx in enumerate(dn["idx"]):
            np.testing.assert_array_equal(selection_masks(idx, toks.shape[1]), det["selected"][g][b].numpy(),
                                          err_msg=f"selection of group {g}, row {b}")
        worst = max(worst, np.abs(ln - lt[b]).max() / np.abs(lt[b]).max())
    return worst


# ------------------------------------------------------------------------------------------- twin == numpy
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_twin_logits_equal_numpy_at_init_and_after_training(variant):
    # float32: <= 1e-4 relative, on tokens where no top-k near-tie flips (the selections are asserted equal, so a
    # flip would show as a selection mismatch, not as a vague logit error); float64: selections are exact there.
    cfg = cfg_of(variant)
    init = TorchHySparse2(cfg).numpy_weights()
    for w in (init, trained_weights(variant)):
        toks = batch(7)
        assert compare(cfg, w, toks, "float32") <= 1e-4
        assert compare(cfg, w, toks, "float64") <= 1e-10
    assert any(np.abs(trained_weights(variant)[n] - init[n]).max() > 1e-3 for n in init)   # really off the init


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_gradient_flows_and_loss_decreases(variant):
    torch.manual_seed(1)
    tm = TorchHySparse2(cfg_of(variant))
    pattern = torch.arange(T).remainder(5)[None].repeat(4, 1) + torch.arange(4)[:, None]   # 4 repeating rows
    next_token_loss(tm(pattern), pattern).backward()
    for n in tm.names:
        g = tm.w(n).grad
        if n.endswith(".swa.wo"):                  # in the numpy weights, read by neither model (see the module)
            assert g is None
        else:
            assert g is not None and float(g.abs().max()) > 0, n
    losses = adam_steps(tm, pattern, 30)
    assert losses[-1] < 0.3 * losses[0]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_numpy_weights_names_and_shapes(variant):
    cfg = cfg_of(variant)
    ref = HySparse2.init_weights(cfg)
    w = TorchHySparse2(cfg).numpy_weights()
    assert {n: a.shape for n, a in w.items()} == {n: a.shape for n, a in ref.items()}
    assert all(a.dtype == np.float32 for a in w.values())
    np.testing.assert_array_equal(w["embed"], ref["embed"].astype(np.float32))     # the default is the numpy init
    n_torch = sum(p.numel() for p in TorchHySparse2(cfg).parameters())
    assert n_params(cfg) == sum(a.size for a in ref.values()) == n_torch
    for kw in (dict(gates=False), dict(sinks=False, cross_swa_window=2),
               dict(self_swa_before=0, group_size=1, bridge_sources=None)):
        c = dataclasses.replace(cfg, **kw)                     # n_params counts shapes: every switch of init_weights
        assert n_params(c) == sum(a.size for a in HySparse2.init_weights(c).values())


@pytest.mark.parametrize("window, topk, block", [(4, 8, 4), (0, 6, 2), (1, 3, 1), (3, 9, 3), (2, 40, 8)])
def test_selection_masks_follow_numpy_tie_rule(window, topk, block):
    # scores from {0, 1, 2}: ties everywhere, so only the same tie rule (the smaller position / block) agrees
    Tq, Hkv = 21, 2
    score = np.random.default_rng(window + topk).integers(0, 3, (Tq, Hkv, Tq)).astype(np.float64)
    pos = np.arange(Tq)
    st, sp = torch.tensor(score.transpose(1, 0, 2))[None], torch.arange(Tq)
    got = token_select(st, sp, window, topk)[0].numpy()
    np.testing.assert_array_equal(got, selection_masks(forced_window_select(score, pos, window, topk), Tq))
    m = HySparse2(HySparse2Config(**dict(BASE, n_heads_kv=2, window=window, topk=topk, select="block",
                                         select_block=block)))
    got = block_select(st, sp, window, topk, block)[0].numpy()
    np.testing.assert_array_equal(got, selection_masks(m.select(score, pos), Tq))


# ------------------------------------------------------------------- the variants in the numpy model
@pytest.mark.parametrize("variant", EARLY_EXIT)
def test_early_exit_equals_full_prefill_after_training(variant):
    cfg = cfg_of(variant, dtype="float64")
    m = HySparse2(cfg, {n: a.astype(np.float64) for n, a in trained_weights(variant).items()})
    seq = batch(11, b=1)[0].numpy()
    full = m.forward(seq)
    early, _ = m.prefill(seq, early_exit=True)
    assert np.abs(early[0] - full[-1]).max() <= 1e-10 * np.abs(full[-1]).max()
    _, cache = m.prefill(seq[:26])                             # decode (the general path for block / window 0)
    for t in range(26, T):
        lg, cache = m.decode_step(int(seq[t]), cache)
        assert np.abs(lg - full[t]).max() <= 1e-10 * np.abs(full[t]).max()


def test_no_bridging_has_no_early_exit_but_decodes():
    cfg = cfg_of("no_bridging")
    w = HySparse2.init_weights(cfg)
    assert not any(n.startswith("bridge.") for n in w) and "cross.0.fa.attn.wk" in w
    m = HySparse2(cfg, w)
    seq = batch(12, b=1)[0].numpy()
    for call in (lambda: m.prefill(seq), lambda: m.prefill(seq, cross_tail=4), lambda: m.prefill_self(seq),
                 lambda: m.first_token(m.new_cache()), lambda: m.bridge_kv(0, np.zeros((2, 32)))):
        with pytest.raises(ValueError, match="bridging=False"):
            call()
    full, cache = m.prefill(seq, early_exit=False)
    assert len(cache.cross[0]) == T                            # the cross FA filled its own KV on every row
    lg, _ = m.prefill(seq[:20], early_exit=False)
    np.testing.assert_allclose(lg, full[:20], rtol=0, atol=1e-12)
    _, cache = m.prefill(seq[:29], early_exit=False)
    for t in range(29, T):
        lg, cache = m.decode_step(int(seq[t]), cache)
        assert np.abs(lg - full[t]).max() <= 1e-10
    with pytest.raises(ValueError, match="every position"):   # a cache without the cross KV cannot be decoded
        m._run_cross(np.zeros((1, 32)), np.array([5]), m.new_cache())


def test_block_selection_is_v1_rule_at_the_same_budget():
    m = HySparse2(HySparse2Config(**dict(BASE, select="block", select_block=2, window=3, topk=4)))
    # S = 12, q_pos = 11: outside the window s <= 8; blocks {0,1} .. {8,9}: block 4 counts position 8 only
    score = np.array([[[.05, .05, .01, .01, .2, .0, .0, .0, .3, .9, .9, .9]]])
    idx = m.select(score, np.array([11]))[0, 0]
    assert list(idx[:3]) == [9, 10, 11]                        # the forced window
    assert sorted(idx[3:]) == [-1, 4, 5, 8]                    # blocks 4 (mass .3, only s = 8) and 2 (.2)
    score = np.full((1, 1, 12), 0.1)                           # all tied: the smaller block ids win
    assert sorted(m.select(score, np.array([11]))[0, 0, 3:]) == [0, 1, 2, 3]
    assert list(m.select(score, np.array([2]))[0, 0]) == [0, 1, 2, -1, -1, -1, -1]   # nothing outside the window
    det = {}
    m.prefill(batch(3, b=1)[0].numpy(), early_exit=False, details=det)
    for idx in det["idx"]:                                     # whole blocks (cut at the window), never more than k
        top = idx[..., 3:]
        assert ((top >= 0).sum(-1) <= 4).all()
        for row in top.reshape(-1, 4):
            blocks = {s // 2 for s in row if s >= 0}
            assert len(blocks) <= 2


def test_window_zero_is_top_k_over_everything_visible():
    scores = np.array([[[5., 1., 4., 3., 9., 0., 2.]]])
    assert list(forced_window_select(scores, np.array([6]), 0, 3)[0, 0]) == [4, 0, 2]
    assert list(forced_window_select(scores, np.array([1]), 0, 3)[0, 0]) == [0, 1, -1]
    assert with_forced_window(np.array([[[4, 0]]]), np.array([6]), 0).tolist() == [[[4, 0]]]
    m = HySparse2(cfg_of("no_window"))
    det = {}
    m.prefill(batch(4, b=1)[0].numpy(), early_exit=False, details=det)
    assert det["idx"][0].shape == (T, 1, 8)                    # the budget is topk alone
    assert not (det["idx"][0][:, 0, :] == np.arange(T)[:, None]).all(1).any()   # no forced own position


@pytest.mark.parametrize("kw, msg", [
    (dict(select="tokens"), "select must be one of"),
    (dict(select=3), "select must be one of"),
    (dict(select="block", select_block=3), "multiple of select_block=3"),
    (dict(select_block=0), "select_block"),
    (dict(window=-1), "window"),
    (dict(bridging="no"), "bridging must be True or False"),
    (dict(bridging=False, cross_layers=3, bridge_sources=("boundary",)), "bridge_sources needs bridging=True"),
])
def test_bad_configs(kw, msg):
    with pytest.raises(ValueError, match=msg):
        HySparse2Config(**dict(BASE, **kw))


def test_twin_refuses_bad_inputs():
    cfg = cfg_of("token")
    w = HySparse2.init_weights(cfg)
    with pytest.raises(ValueError, match="HySparse2Config"):
        TorchHySparse2(dataclasses.asdict(cfg))
    with pytest.raises(ValueError, match="'bridge.0.wk' is missing"):
        TorchHySparse2(cfg, {n: a for n, a in w.items() if n != "bridge.0.wk"})
    with pytest.raises(ValueError, match="shape"):
        TorchHySparse2(cfg, dict(w, embed=w["embed"][:5]))
    tm = TorchHySparse2(cfg)
    with pytest.raises(ValueError, match="vocab"):
        tm(torch.tensor([[1, 32]]))
    with pytest.raises(ValueError, match="integer torch tensor"):
        tm(torch.zeros(2, 3))
    assert param_key("cross.0.fa.attn.wq") == "cross__0__fa__attn__wq"
