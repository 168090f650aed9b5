"""hybrid_lab.trained.probes: attention probabilities of every family, the previous-token probe, the needle mass of
the cross FA and the answer breakdown, on hand-built cases with known answers, plus two stored checkpoints."""
import numpy as np
import pytest

from hybrid_lab.core.blocks import apply_rope, rms_norm
from hybrid_lab.models import hysparse, hysparse2, stack
from hybrid_lab.trained import families as fam
from hybrid_lab.trained import probes, store, tasks

N, Q = tasks.NEEDLE, tasks.QUERY

HS1 = hysparse.HySparseConfig(vocab=32, n_layers=4, group_size=2, block_size=4, n_blocks=2, window=4, rope_dims=4,
                              sinks=True)
HS2 = dict(vocab=32, self_swa_before=1, self_swa_after=1, cross_layers=4, group_size=2, window=2, topk=4,
           swa_window=4)
FAMILY_CFGS = {
    "stack": stack.StackConfig(vocab=32, d_model=16, layers=("swa", "mamba2", "attn"), window=4, rope_dims_attn=4,
                               d_state=4, head_dim=8),
    "hysparse": HS1,
    "hysparse2": hysparse2.HySparse2Config(**HS2),
    "hysparse2_crossswa": hysparse2.HySparse2Config(**dict(HS2, cross_swa_window=3)),
    "hysparse2_nobridge": hysparse2.HySparse2Config(**dict(HS2, bridging=False)),
    "hysparse2_block_gqa": hysparse2.HySparse2Config(**dict(HS2, window=0, topk=8, select="block", select_block=4,
                                                            n_heads_kv=2)),
}


def _tokens(rng, n=24, vocab=32):
    return rng.integers(0, vocab, n)


# ----------------------------------------------------------------------------------------- Stack's hook
def test_stack_details_hook_changes_no_output_and_gives_the_swa_probabilities(rng):
    cfg = stack.StackConfig(vocab=32, d_model=16, layers=("swa", "mamba2", "attn"), window=4, d_state=4, head_dim=8)
    model, t = stack.Stack(cfg), _tokens(rng, 12)
    d = {"attn_probs": ["stale"]}
    logits = model.forward(t, details=d)
    assert np.array_equal(logits, model.forward(t))                     # the hook changes nothing
    P = d["attn_probs"]
    assert len(P) == 3 and P[1] is None and P[0].shape == P[2].shape == (12, 4, 12)
    # layer 0 by hand: x = RMSNorm(embed), partial RoPE, window 4, sink in the denominator
    w, T = model.weights, 12
    x = rms_norm(w["embed"][t])
    q = apply_rope((x @ w["layer.0.attn.wq"]).reshape(T, 4, 16), np.arange(T), cfg.rope_dims_swa)
    k = apply_rope((x @ w["layer.0.attn.wk"]).reshape(T, 1, 16), np.arange(T), cfg.rope_dims_swa)
    s = np.einsum("thd,sd->ths", q, k[:, 0]) / 4.0
    i, j = np.arange(T)[:, None, None], np.arange(T)[None, None, :]
    e = np.where((j <= i) & (j > i - 4), np.exp(s), 0.0)
    want = e / (e.sum(-1, keepdims=True) + np.exp(w["layer.0.attn.sink"])[None, :, None])
    assert np.allclose(P[0], want, atol=1e-12)
    # continuing a cache: the new rows' probabilities over absolute key positions equal the full forward's rows
    _, cache = model.prefill(t[:7])
    d2 = {}
    model.run(t[7:], cache, details=d2)
    assert [p is None for p in d2["attn_probs"]] == [False, True, False]
    for a, b in zip(d2["attn_probs"], P):
        if a is not None:
            assert a.shape == (5, 4, 12) and np.allclose(a, b[7:], atol=1e-12)
    with pytest.raises(ValueError, match="^details"):
        model.forward(t, details=[])


def _prev_token_stack():
    """One attn layer, 2 heads, 2-dim RoPE on the constant channel: head 0 scores cos(t - s - 1) x 554 (peak at
    s = t - 1), head 1 has q = 0 (uniform). Then a mamba2 layer (no attention)."""
    cfg = stack.StackConfig(vocab=7, d_model=8, layers=("attn", "mamba2"), n_heads_q=2, n_heads_kv=1, d_qk=2, d_v=2,
                            d_ff=4, rope_dims_attn=2, rope_dims_swa=2, d_state=4, head_dim=4)
    w = stack.Stack.init_weights(cfg)
    w["embed"] = np.zeros((7, 8))
    w["embed"][:, 0] = 1.0                                    # every token: the same norm, the same channel 0
    w["embed"][np.arange(7), 1 + np.arange(7)] = 1.0
    a = 14.0
    w["layer.0.attn.wq"] = np.zeros((8, 4))
    w["layer.0.attn.wq"][0, 0] = a
    w["layer.0.attn.wk"] = np.zeros((8, 2))
    w["layer.0.attn.wk"][0] = a * np.array([np.cos(1.0), np.sin(1.0)])   # k = R(1) q: q_t . k_s ~ cos(s - t + 1)
    return stack.Stack(cfg, w)


def test_a_hand_built_previous_token_head_scores_one_and_a_uniform_head_its_mean():
    model, T = _prev_token_stack(), 10
    tokens = np.random.default_rng(0).integers(0, 7, (3, T))
    sc = probes.previous_token_scores(model, tokens)
    assert sc.shape == (2, 2) and np.isnan(sc[1]).all()
    assert sc[0, 0] == pytest.approx(1.0, abs=1e-6)
    assert sc[0, 1] == pytest.approx(np.mean(1.0 / (np.arange(1, T) + 1)), abs=1e-9)
    P = probes.attention_probs(model, tokens[0])
    assert P[1] is None and P[0].shape == (2, T, T)
    assert np.allclose(P[0][0, np.arange(1, T), np.arange(T - 1)], 1.0, atol=1e-6)
    assert probes.layer_names(model) == ["0:attn", "1:mamba2"] and probes.cross_fa_layers(model) == [0]


# ---------------------------------------------------------------------------- every family's probabilities
@pytest.mark.parametrize("name", list(FAMILY_CFGS))
def test_the_replay_gives_the_models_logits_and_causal_rows_that_sum_to_at_most_one(name, rng):
    model, t = fam.numpy_model(FAMILY_CFGS[name]), _tokens(rng)
    main, loc, logits = probes._replay(model, t)
    # each attention output was computed FROM the returned probabilities: equal logits = the model used them
    assert np.allclose(logits, model.forward(t), atol=1e-10)
    kinds, T = probes._kinds(model), len(t)
    P = probes.attention_probs(model, t)
    assert len(P) == len(kinds) == len(probes.layer_names(model))
    for kind, p in zip(kinds, P):
        if kind == "mamba2":
            assert p is None
            continue
        assert p.shape == (model.cfg.n_heads_q, T, T)
        assert (p >= 0).all() and np.allclose(np.triu(p, 1), 0.0)       # causal: nothing above the diagonal
        sums = p.sum(-1)
        if kind in ("attn", "fa"):                                      # no sink: every visible key, sum 1
            assert np.allclose(sums, 1.0)
        else:
            assert (sums <= 1 + 1e-12).all() and (sums > 0).all()
    local = probes.attention_probs(model, t, branch="local")
    has_local = [p is not None for p in local]
    if isinstance(model, hysparse.HySparse) or model.cfg.__dict__.get("cross_swa_window"):
        assert has_local == [k == "sa" for k in kinds]
    else:
        assert not any(has_local)


def test_hysparse_fa_probabilities_equal_its_details_and_sa_reads_only_the_selected_blocks(rng):
    model, t = hysparse.HySparse(HS1), _tokens(rng)
    _, det = model.forward(t, return_details=True)
    P = probes.attention_probs(model, t)
    assert np.array_equal(P[0], det["fa_probs"][0].transpose(1, 0, 2))
    # after an SA layer: equal up to rounding (the replay sums its sparse softmax in another order)
    assert np.allclose(P[2], det["fa_probs"][1].transpose(1, 0, 2), atol=1e-12)
    tok = hysparse.blocks_to_tokens(det["block_idx"][0], HS1.block_size, np.arange(len(t)))   # (T, 1, K)
    read = probes._index_mask(tok, len(t))[:, 0]                                              # (T, T)
    assert np.array_equal(P[1][0] > 0, read)
    L = probes.attention_probs(model, t, branch="local")[1]             # window 4 of the SA's own KV
    i, j = np.indices((len(t), len(t)))
    assert np.array_equal(L[0] > 0, (j <= i) & (j > i - HS1.window))


def test_hysparse2_cross_fa_score_and_sa_selection_equal_the_models_details(rng):
    model, t = hysparse2.HySparse2(FAMILY_CFGS["hysparse2"]), _tokens(rng)
    d = {}
    model.prefill(t, early_exit=False, details=d)
    P, names = probes.attention_probs(model, t), probes.layer_names(model)
    for g in range(model.cfg.n_groups):
        fa, sa = names.index(f"cross.{g}.fa"), names.index(f"cross.{g}.sa.0")
        assert np.allclose(P[fa].sum(0), d["scores"][g][:, 0], atol=1e-12)    # summed over the 4 query heads
        assert np.array_equal(P[sa][0] > 0, probes._index_mask(d["idx"][g], len(t))[:, 0])
    assert probes.cross_fa_layers(model) == [names.index("cross.0.fa"), names.index("cross.1.fa")]
    assert probes.cross_fa_layers(hysparse.HySparse(HS1)) == [0, 2]


def test_previous_token_scores_is_the_mean_subdiagonal_of_attention_probs(rng):
    model = hysparse2.HySparse2(FAMILY_CFGS["hysparse2"])
    tokens = rng.integers(0, 32, (3, 16))
    want = np.mean([[p[:, np.arange(1, 16), np.arange(15)].mean(-1) for p in probes.attention_probs(model, row)]
                    for row in tokens], axis=0)
    assert np.allclose(probes.previous_token_scores(model, tokens), want)
    assert np.allclose(probes.previous_token_scores(model, tokens[0]), probes.previous_token_scores(model,
                                                                                                   tokens[:1]))
    loc = probes.previous_token_scores(hysparse.HySparse(HS1), tokens, branch="local")
    assert np.isnan(loc[[0, 2]]).all() and np.isfinite(loc[[1, 3]]).all()


# ------------------------------------------------------------------------------------------- needle mass
def _needle_batch():
    """Row 0: needles (k20 v130) at 2 and (k21 v131) at 8; queries k21 (answer at 15), then k20 (answer at 18).
    Row 1: one needle (k22 v132) at 3, an unmarked k22 at 10 (a distractor), its query's answer at 18."""
    tok = np.full((2, 20), 40)
    tok[0, 2:5], tok[0, 8:11], tok[0, 14:17], tok[0, 17:20] = (N, 20, 130), (N, 21, 131), (Q, 21, 131), (Q, 20, 130)
    tok[1, 3:6], tok[1, 10], tok[1, 17:20] = (N, 22, 132), 22, (Q, 22, 132)
    tgt, kind = np.full((2, 20), -1), np.zeros((2, 20), np.int64)
    for b, a, v in ((0, 15, 131), (0, 18, 130), (1, 18, 132)):
        tgt[b, a], kind[b, a] = v, tasks.KIND_NEEDLE
    tgt[1, 12], kind[1, 12] = 40, tasks.KIND_LOCAL                      # not a needle answer: ignored
    return tasks.Batch(tok, tgt, kind, np.zeros((2, 20), np.int64))


def _fake_probs(tokens):
    """Hand-made (Hq=2, T, T) probabilities for the rows of _needle_batch (only the answer rows matter)."""
    p = np.zeros((2, 20, 20))
    if tokens[2] == N:                                                  # row 0
        p[0, 15, 9], p[0, 15, 3], p[1, 15, 10], p[1, 15, 2] = 0.5, 0.1, 0.3, 0.3    # asked 0.4, other 0.2
        p[0, 18, 4], p[0, 18, 8], p[1, 18, 3], p[1, 18, 9] = 0.1, 0.6, 0.1, 0.2     # asked 0.1, other 0.4
    else:
        p[0, 18, 4], p[1, 18, 5], p[:, 18, 10] = 0.8, 0.4, 0.2          # asked 0.6; the distractor is no needle
    return p


def test_needle_mass_on_hand_made_probabilities(monkeypatch):
    model = stack.Stack(stack.StackConfig(vocab=256, d_model=8, layers=("attn", "mamba2", "attn"), d_qk=4, d_v=4,
                                          d_ff=4, rope_dims_swa=4, d_state=4, head_dim=4))
    calls = []

    def fake(m, tokens, branch="main"):
        calls.append(int(tokens[2]))
        return [_fake_probs(tokens), None, np.zeros((2, 20, 20))]       # layer 2: no mass on any needle

    monkeypatch.setattr(probes, "attention_probs", fake)
    batch = _needle_batch()
    nm = probes.needle_mass(model, batch, layer=0)
    assert nm["n"] == 3 and nm["n_multi"] == 2 and nm["layers"] == [0]
    assert nm["asked"] == pytest.approx((0.4 + 0.1 + 0.6) / 3)
    assert nm["other"] == pytest.approx((0.2 + 0.4) / 2)
    assert nm["top1_asked"] == pytest.approx(0.5)
    both = probes.needle_mass(model, batch)                              # default: both attn layers, averaged
    assert both["layers"] == [0, 2] and both["per_layer"][0] == nm["per_layer"][0]
    assert both["per_layer"][2] == {"asked": 0.0, "other": 0.0, "top1_asked": 0.0}   # a tie is not a hit
    assert both["asked"] == pytest.approx(nm["asked"] / 2) and both["other"] == pytest.approx(nm["other"] / 2)
    assert calls == [N, 40, N, 40]                                       # one forward per row with an answer
    one = tasks.Batch(batch.tokens[1:], batch.targets[1:], batch.kind[1:], batch.dist[1:])
    r = probes.needle_mass(model, one, layer=0)
    assert r["asked"] == pytest.approx(0.6) and np.isnan(r["other"]) and np.isnan(r["top1_asked"])
    none = probes.needle_mass(model, tasks.local_copy(2, 40, seed=0, n_queries=2))
    assert none["n"] == 0 and np.isnan(none["asked"])


def test_needle_mass_of_a_real_model_is_read_from_its_attention_probs(rng):
    model = hysparse2.HySparse2(hysparse2.HySparse2Config(**dict(HS2, vocab=256)))
    batch = tasks.needles(2, 48, (2, 3), seed=5)
    nm = probes.needle_mass(model, batch)
    fa = probes.cross_fa_layers(model)
    assert nm["layers"] == fa and nm["n"] == int((batch.kind == tasks.KIND_NEEDLE).sum())
    asked = []
    for b, a in zip(*np.nonzero(batch.kind == tasks.KIND_NEEDLE)):
        P = probes.attention_probs(model, batch.tokens[b])
        s = int(np.flatnonzero((batch.tokens[b] == N) & (np.roll(batch.tokens[b], -1) == batch.tokens[b, a]))[0])
        asked.append(np.mean([P[i][:, a, s:s + 3].sum(-1).mean() for i in fa]))
    assert nm["asked"] == pytest.approx(np.mean(asked))


# ---------------------------------------------------------------------------------------- answer breakdown
def test_answer_breakdown_counts_on_hand_made_logits():
    tok, tgt, kind = np.full((2, 8), 40), np.full((2, 8), -1), np.zeros((2, 8), np.int64)
    for b, t, v in ((0, 2, 130), (0, 5, 131), (0, 7, 132), (1, 3, 140), (1, 6, 140)):
        tgt[b, t], kind[b, t] = v, tasks.KIND_NEEDLE
    tgt[0, 0], kind[0, 0] = 200, tasks.KIND_LOCAL                       # a local target is no candidate
    batch = tasks.Batch(tok, tgt, kind, np.zeros((2, 8), np.int64))
    logits = np.zeros((2, 8, 256))
    for b, t, v in ((0, 2, 130), (0, 5, 130), (0, 7, 200), (1, 3, 140), (1, 6, 141), (0, 0, 200)):
        logits[b, t, v] = 1.0
    ab = probes.answer_breakdown(logits, batch, tasks.KIND_NEEDLE)
    assert ab["n"] == 5
    assert ab["correct"] == pytest.approx(2 / 5) and ab["other_candidate"] == pytest.approx(1 / 5)
    assert ab["other"] == pytest.approx(2 / 5) and ab["wrong_other_candidate"] == pytest.approx(1 / 3)
    # row 0: 3 distinct values (1/3 each); row 1: both needles hold 140, so a uniform pick is always right
    assert ab["chance_pick_any"] == pytest.approx((3 * (1 / 3) + 2 * 1.0) / 5)
    assert ab["mean_candidates"] == pytest.approx((3 * 3 + 2 * 2) / 5)
    assert probes.answer_breakdown(logits, batch, tasks.KIND_MQAR)["n"] == 0


def test_answer_breakdown_on_mqar_when_every_answer_is_the_first_pairs_value():
    batch = tasks.mqar(6, 64, [2, 4, 8], seed=3)
    logits = np.zeros(batch.tokens.shape + (256,))
    first = batch.tokens[:, 1]                                          # the first pair's value
    logits[np.arange(6), :, first] = 1.0
    ab = probes.answer_breakdown(logits, batch, tasks.KIND_MQAR)
    sel = batch.kind == tasks.KIND_MQAR
    right = (batch.targets == first[:, None])[sel]
    assert ab["n"] == sel.sum() and ab["correct"] == pytest.approx(right.mean())
    assert ab["other_candidate"] == pytest.approx(1 - right.mean()) and ab["other"] == 0.0
    n_pairs = sel.sum(1)
    chance = [np.mean(batch.tokens[b, 1:2 * n_pairs[b]:2] == batch.targets[b, a]) for b, a in zip(*np.nonzero(sel))]
    assert ab["chance_pick_any"] == pytest.approx(np.mean(chance))


# ---------------------------------------------------------------------------------------------- bad input
def test_bad_inputs_raise_value_errors_naming_the_argument():
    model, t = _prev_token_stack(), np.arange(6) % 7
    batch = _needle_batch()
    big = stack.Stack(stack.StackConfig(vocab=256, d_model=8, layers=("attn", "mamba2"), d_qk=4, d_v=4, d_ff=4,
                                        rope_dims_swa=4, d_state=4, head_dim=4))
    for call, name in [
        (lambda: probes.attention_probs("dense", t), "model"),
        (lambda: probes.attention_probs(model, t[None]), "tokens"),
        (lambda: probes.attention_probs(model, [1, 99]), "tokens"),
        (lambda: probes.attention_probs(model, t, branch="sparse"), "branch"),
        (lambda: probes.previous_token_scores(model, [3]), "tokens"),
        (lambda: probes.previous_token_scores(model, np.zeros((2, 3, 4), int)), "tokens"),
        (lambda: probes.previous_token_scores(model, [0.5, 1.5]), "tokens"),
        (lambda: probes.needle_mass(big, "batch"), "batch"),
        (lambda: probes.needle_mass(model, batch), "batch.tokens"),          # vocab 7 < the needle tokens
        (lambda: probes.needle_mass(big, batch, layer=2), "layer"),
        (lambda: probes.needle_mass(big, batch, layer=1), "layer"),           # a mamba2 layer
        (lambda: probes.needle_mass(big, batch, layer=True), "layer"),
        (lambda: probes.needle_mass(stack.Stack(stack.StackConfig(vocab=256, layers=("mamba2",))), batch), "layer"),
        (lambda: probes.answer_breakdown(np.zeros((2, 20, 256)), batch, tasks.KIND_LOCAL), "kind"),
        (lambda: probes.answer_breakdown(np.zeros((2, 20, 256)), batch, "needle"), "kind"),
        (lambda: probes.answer_breakdown(np.zeros((2, 19, 256)), batch, tasks.KIND_NEEDLE), "logits"),
        (lambda: probes.answer_breakdown(np.zeros((2, 20, 100)), batch, tasks.KIND_NEEDLE), "logits"),
        (lambda: probes.answer_breakdown(np.full((2, 20, 256), np.nan), batch, tasks.KIND_NEEDLE), "logits"),
        (lambda: probes.answer_breakdown(np.zeros((2, 20, 256)), batch.tokens, tasks.KIND_NEEDLE), "batch"),
        (lambda: probes.layer_names(None), "model"),
    ]:
        with pytest.raises(ValueError, match=f"^{name}"):
            call()
    bad = _needle_batch()
    bad.tokens[0, 9] = 23                                                # the needle of k21 is gone
    with pytest.raises(ValueError, match="^batch: the needle answer at \\(row 0, position 15\\) asks key 21"):
        probes.needle_mass(big, bad)


# ------------------------------------------------------------------------------------ stored checkpoints
def _ckpt(exp, name):
    return store.load_checkpoint(store.CHECKPOINTS / exp / name / "seed0")[0]


def test_stored_dense_retrieval_model_has_a_previous_token_head():
    model = _ckpt("retrieval", "dense")
    # needles only: a mix batch's BACK_j markers ask for the token j back, where the head rightly looks elsewhere
    sc = probes.previous_token_scores(model, tasks.needles(16, 128, (1, 2, 3, 4), seed=tasks.EVAL_SEED + 900).tokens)
    assert np.nanmax(sc) > 0.9
    assert np.nanmax(sc[0]) < 0.5                                        # layer 0 is not one (sanity)


def test_stored_hysparse2_wrong_answers_are_another_needles_value():
    model = _ckpt("retrieval", "hysparse2")
    batch = tasks.needles(64, 128, (1, 2, 3, 4), seed=tasks.EVAL_SEED + 801)
    ab = probes.answer_breakdown(fam.numpy_logits(model, batch.tokens), batch, tasks.KIND_NEEDLE)
    assert ab["n"] > 100 and ab["correct"] < 0.8                         # the plateau this probe diagnoses
    assert ab["wrong_other_candidate"] > 0.5                             # most wrong answers: another needle's value
