import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hybrid_lab.models.infllm import (block_overlap, blocks_from_compressed, compress_keys, compressed_visible,
                                      group_scores, infllm_v2_select, pool_to_blocks, select_blocks)
from hybrid_lab.ops.block_sparse import block_sparse_attention
from hybrid_lab.ops.contracts import n_blocks


def _loop_compress(k, window, stride):
    S = k.shape[1]
    out = []
    j = 0
    while j * stride + window <= S:
        out.append(k[:, j * stride:j * stride + window].mean(axis=1))
        j += 1
    return np.stack(out, axis=1) if out else np.zeros((k.shape[0], 0) + k.shape[2:])


@settings(max_examples=30, deadline=None)
@given(S=st.integers(1, 200), window=st.integers(1, 40), stride=st.integers(1, 40))
def test_compress_keys_matches_loop_on_ragged_lengths(S, window, stride):
    if window < stride:
        with pytest.raises(ValueError, match="window"):
            compress_keys(np.zeros((1, S, 1, 2)), window, stride)
        return
    k = np.random.default_rng(S).normal(size=(2, S, 3, 4))
    kc = compress_keys(k, window, stride)
    assert kc.shape == (2, 0 if S < window else (S - window) // stride + 1, 3, 4)
    np.testing.assert_allclose(kc, _loop_compress(k, window, stride), atol=1e-12)


def test_compress_keys_default_grid_and_values():
    k = np.arange(100, dtype=np.float64).reshape(1, 100, 1, 1)      # key value = its position
    kc = compress_keys(k)                                             # (32, 16): windows [0,32), [16,48), ...
    assert kc.shape == (1, 5, 1, 1)                                  # (100 - 32) // 16 + 1
    np.testing.assert_allclose(kc[0, :, 0, 0], [15.5, 31.5, 47.5, 63.5, 79.5])


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="window must be >= stride"):
        compress_keys(np.zeros((1, 64, 1, 4)), window=8, stride=16)
    with pytest.raises(ValueError, match="multiple"):
        group_scores(np.zeros((1, 4, 3, 8)), np.zeros((1, 2, 2, 8)))
    with pytest.raises(ValueError, match="multiple"):
        block_sparse_attention(np.zeros((1, 2, 3, 4)), np.zeros((1, 8, 2, 4)), np.zeros((1, 8, 2, 4)),
                               np.zeros((1, 2, 2, 1), np.int64), block_size=4)
    with pytest.raises(ValueError, match="larger than the candidate blocks"):
        select_blocks(np.zeros((1, 1, 1, 6)), np.array([380]), topk=4, n_init=1, n_local=2)
    with pytest.raises(ValueError, match="repeat"):
        block_sparse_attention(np.zeros((1, 1, 2, 4)), np.zeros((1, 8, 2, 4)), np.zeros((1, 8, 2, 4)),
                               np.array([[[[0, 0], [1, -1]]]]), block_size=4)


def test_zero_block_size_and_nan_are_refused():
    """block_size=0 used to return garbage (select_blocks) or raise ZeroDivisionError (infllm_v2_select); NaN used to
    pass through compress_keys, group_scores and block_sparse_attention."""
    rng = np.random.default_rng(7)
    q, k = rng.normal(size=(1, 2, 4, 8)), rng.normal(size=(1, 200, 2, 8))
    with pytest.raises(ValueError, match="block_size must be an integer >= 1"):
        select_blocks(np.zeros((1, 2, 2, 4)), np.array([100, 199]), topk=1, block_size=0)
    with pytest.raises(ValueError, match="block_size must be an integer >= 1"):
        infllm_v2_select(q, k, topk=1, block_size=0)
    with pytest.raises(ValueError, match="block_size must be an integer >= 1"):
        blocks_from_compressed(np.zeros((1, 2, 2, 11)), 200, np.array([100, 199]), topk=1, block_size=0)
    k_nan = k.copy()
    k_nan[0, 17, 1, 3] = np.nan
    with pytest.raises(ValueError, match=r"k must be finite, got NaN or inf at index \(0, 17, 1, 3\)"):
        compress_keys(k_nan)
    kc = compress_keys(k)
    kc_inf = kc.copy()
    kc_inf[0, 3, 0, 0] = np.inf
    with pytest.raises(ValueError, match="kc must be finite"):
        group_scores(q, kc_inf)
    with pytest.raises(ValueError, match="q must be finite"):
        group_scores(np.full_like(q, np.nan), kc)
    with pytest.raises(ValueError, match="k must be finite"):
        block_sparse_attention(q, k_nan, k, np.zeros((1, 2, 2, 1), np.int64))
    with pytest.raises(ValueError, match="block_scores must be finite"):
        select_blocks(np.full((1, 2, 2, 4), np.nan), np.array([100, 199]), topk=1)


def test_block_overlap_is_the_5_wide_kernel():
    lo, hi = block_overlap(4, 100)
    np.testing.assert_array_equal(lo, [0, 3, 7, 11])                  # 4b - 1 (clipped at 0)
    np.testing.assert_array_equal(hi, [3, 7, 11, 15])                 # 4b + 3


def test_pool_to_blocks_takes_the_max_of_overlapping_positions():
    sc = np.full(15, -1.0)
    sc[7] = 5.0                                                       # window [112, 144): blocks 1 and 2
    bs = pool_to_blocks(sc, 4)
    np.testing.assert_array_equal(bs, [-1.0, 5.0, 5.0, -1.0])


@settings(max_examples=25, deadline=None)
@given(S=st.integers(70, 700), topk=st.integers(1, 3), n_local=st.integers(1, 3), seed=st.integers(0, 10))
def test_selection_keeps_init_and_local_and_never_a_future_block(S, topk, n_local, seed):
    rng = np.random.default_rng(seed)
    Nb = n_blocks(S)
    if topk > Nb - 1 - n_local:
        return
    T = min(S, 40)
    q_pos = np.sort(rng.choice(S, T, replace=False))
    scores = rng.normal(size=(2, T, 2, Nb))
    idx = select_blocks(scores, q_pos, topk, n_init=1, n_local=n_local)
    assert idx.shape == (2, T, 2, 1 + n_local + topk)
    cur = q_pos // 64
    for t in range(T):
        row = idx[0, t, 0]
        valid = row[row >= 0]
        assert len(np.unique(valid)) == len(valid)
        assert (valid <= cur[t]).all()                                # never a future block
        assert 0 in valid                                             # init block
        for b in range(max(0, cur[t] - n_local + 1), cur[t] + 1):
            assert b in valid                                         # local blocks
        n_cand = max(0, cur[t] + 1 - 1 - n_local)
        assert len(valid) == min(cur[t] + 1, 1 + n_local) + min(topk, n_cand)


def test_topk_picks_the_highest_candidate_blocks():
    scores = np.zeros((1, 1, 1, 10))
    scores[0, 0, 0, [2, 5, 9]] = [3.0, 2.0, 9.0]                      # block 9 is local/future for q at 500
    idx = select_blocks(scores, np.array([500]), topk=2, n_init=1, n_local=2)
    np.testing.assert_array_equal(idx[0, 0, 0], [0, 2, 5, 6, 7])


def _dense_ref(q, k, v, q_pos, allowed):
    B, T, Hq, d = q.shape
    G = Hq // k.shape[2]
    o = np.zeros(q.shape[:3] + (v.shape[3],))
    for b in range(B):
        for t in range(T):
            for h in range(Hq):
                ok = allowed[b, t, h // G] & (np.arange(k.shape[1]) <= q_pos[t])
                if not ok.any():
                    continue
                lg = k[b, ok, h // G] @ q[b, t, h] / np.sqrt(d)
                p = np.exp(lg - lg.max())
                o[b, t, h] = (p / p.sum()) @ v[b, ok, h // G]
    return o


def test_block_sparse_attention_matches_a_loop_reference():
    rng = np.random.default_rng(0)
    B, S, T, Hq, Hkv, d, bs = 2, 37, 5, 4, 2, 8, 8
    q, k, v = rng.normal(size=(B, T, Hq, d)), rng.normal(size=(B, S, Hkv, d)), rng.normal(size=(B, S, Hkv, 6))
    q_pos = np.array([3, 10, 20, 30, 36])
    Nb = n_blocks(S, bs)
    block_idx = np.full((B, T, Hkv, 3), -1)
    allowed = np.zeros((B, T, Hkv, S), bool)
    for b in range(B):
        for t in range(T):
            for g in range(Hkv):
                chosen = rng.choice(Nb, 2, replace=False)
                block_idx[b, t, g, :2] = chosen
                for c in chosen:
                    allowed[b, t, g, c * bs:(c + 1) * bs] = True
    o = block_sparse_attention(q, k, v, block_idx, block_size=bs, q_pos=q_pos)
    ref = _dense_ref(q, k, v, q_pos, allowed)
    np.testing.assert_allclose(o, ref, atol=1e-12)
    assert np.abs(o).sum() > 0


def test_all_blocks_equals_causal_attention_and_pipeline_runs():
    rng = np.random.default_rng(1)
    B, S, T, Hq, Hkv, d = 1, 300, 300, 4, 2, 8
    q, k, v = rng.normal(size=(B, T, Hq, d)), rng.normal(size=(B, S, Hkv, d)), rng.normal(size=(B, S, Hkv, d))
    allb = np.broadcast_to(np.arange(n_blocks(S)), (B, T, Hkv, n_blocks(S))).copy()
    o = block_sparse_attention(q, k, v, allb)
    ref = _dense_ref(q, k, v, np.arange(S), np.ones((B, T, Hkv, S), bool))
    np.testing.assert_allclose(o, ref, atol=1e-12)
    idx, bsc, sc = infllm_v2_select(q, k, topk=1, n_local=2)
    assert idx.shape == (B, T, Hkv, 4) and sc.shape == (B, T, Hkv, 17) and bsc.shape == (B, T, Hkv, 5)
    G = Hq // Hkv
    vis = compressed_visible(np.arange(S), 17)
    expected = np.broadcast_to(np.where(vis.any(1), G, 0.0)[None, :, None], sc.shape[:3])
    np.testing.assert_allclose(sc.sum(-1), expected)                 # G softmaxes summed


def test_group_scores_finds_a_planted_match():
    rng = np.random.default_rng(2)
    k = 0.1 * rng.normal(size=(1, 256, 1, 16))
    q = np.zeros((1, 1, 2, 16))
    q[0, 0, :, 0] = 20.0
    k[0, 150:170, 0, 0] = 3.0                                        # inside compressed window 8 = [128, 160)...
    kc = compress_keys(k)
    sc = group_scores(q, kc, q_pos=np.array([255]), S=256)
    assert int(np.argmax(sc[0, 0, 0])) in (8, 9)                     # ... and 9 = [144, 176)
    idx, _ = blocks_from_compressed(np.log(sc + 1e-30), 256, np.array([255]), topk=1)
    assert 2 in idx[0, 0, 0]                                          # tokens 150..169 live in block 2


@settings(max_examples=20, deadline=None)
@given(S=st.integers(200, 900), seed=st.integers(0, 50))
def test_pipeline_on_ragged_lengths(S, seed):
    rng = np.random.default_rng(seed)
    T = 7
    q_pos = np.sort(rng.choice(np.arange(192, S), T, replace=False))
    q, k = rng.normal(size=(1, T, 4, 8)), rng.normal(size=(1, S, 2, 8))
    idx, bs, sc = infllm_v2_select(q, k, topk=1, n_init=1, n_local=2, q_pos=q_pos)
    Nc, Nb = (S - 32) // 16 + 1, -(-S // 64)
    assert sc.shape == (1, T, 2, Nc) and bs.shape == (1, T, 2, Nb) and idx.shape == (1, T, 2, 4)
    vis = compressed_visible(q_pos, Nc)
    assert (sc[0, :, 0][~vis] == 0).all()                            # future windows get no score
    cur = q_pos // 64
    assert (idx[0, :, :, -1] >= 0).all() and (idx[0] <= cur[:, None, None]).all()
    assert (idx[0, :, :, 0] == 0).all()
    assert ((idx[0] == cur[:, None, None]).any(-1)).all() and ((idx[0] == cur[:, None, None] - 1).any(-1)).all()


def test_top0_selection_and_inconsistent_grids_are_refused():
    """topk=0 (a top-0 selection), a compressed grid that is not the grid of S, and q/k that disagree used to return
    a selection (or a message naming the wrong argument)."""
    rng = np.random.default_rng(11)
    q, k = rng.normal(size=(1, 2, 4, 8)), rng.normal(size=(1, 200, 2, 8))
    q_pos = np.array([100, 199])
    with pytest.raises(ValueError, match="topk must be an integer >= 1"):
        select_blocks(np.zeros((1, 2, 2, 4)), q_pos, topk=0)
    with pytest.raises(ValueError, match="topk must be an integer >= 1"):
        infllm_v2_select(q, k, topk=0)
    with pytest.raises(ValueError, match="topk must be an integer >= 1"):
        blocks_from_compressed(np.zeros((1, 2, 2, 11)), 200, q_pos, topk=0)
    kc = compress_keys(k)                                            # Nc = 11 for S = 200
    with pytest.raises(ValueError, match="kc must hold the 11 compressed keys of S=200"):
        group_scores(q, kc[:, :10], q_pos, S=200)
    with pytest.raises(ValueError, match="scores_c must be on the compressed grid of S=200"):
        blocks_from_compressed(np.zeros((1, 2, 2, 10)), 200, q_pos, topk=1)
    with pytest.raises(ValueError, match=r"scores_c has Nc=20 .* give Nc in \[11, 15\]"):
        pool_to_blocks(np.zeros((2, 20)), 4)                         # 4 blocks of 64 tokens: S in [193, 256]
    with pytest.raises(ValueError, match="k must be"):               # names k (the argument), not kc
        infllm_v2_select(q[..., :7], k, topk=1)
    # S = 193 (Nc = 11): the last block has no full compression window yet, so it pools nothing (-inf)
    np.testing.assert_array_equal(pool_to_blocks(np.zeros((2, 11)), 4), [[0, 0, 0, -np.inf]] * 2)


def test_fewer_tokens_than_one_window_select_init_and_local_only():
    # S < window: no compressed key yet (Nc = 0), so no score: group_scores gives an empty grid (it used to reach a
    # softmax over nothing) and the selection is the init and local blocks, -1 padded (decided)
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((1, 2, 2, 4)), rng.standard_normal((1, 20, 1, 4))
    q_pos = np.array([18, 19])
    sc = group_scores(q, compress_keys(k), q_pos, S=20)
    assert sc.shape == (1, 2, 1, 0) and sc.dtype == np.float64
    idx, bs, sc2 = infllm_v2_select(q, k, 1, 8, q_pos=q_pos, n_local=1)
    np.testing.assert_array_equal(idx[0, :, 0], [[0, 2, -1], [0, 2, -1]])
    assert np.isneginf(bs).all() and sc2.shape == (1, 2, 1, 0)
    idx_huge, _, _ = infllm_v2_select(q, k, 1, 8, window=2 ** 62, q_pos=q_pos, n_local=1)   # same: Nc = 0
    np.testing.assert_array_equal(idx_huge, idx)
