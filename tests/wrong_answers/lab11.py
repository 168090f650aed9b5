"""Wrong answers to the exercises of notebook 11: (what is wrong, text in the solution's exercise cell, replacement).
tests/test_exercises.py asserts the check fails every one of them, on every seed, and passes the solution."""
WRONG = {
    "11.1": [
        ("ties to the larger position (an ascending sort reversed)",
         ("        mine = keys[np.argsort(-scores[t, keys], kind=\"stable\")[:k]]\n"
          "        best = keys[np.argsort(-probs[t, keys], kind=\"stable\")[:k]]"),
         ("        mine = keys[np.argsort(scores[t, keys], kind=\"stable\")[::-1][:k]]\n"
          "        best = keys[np.argsort(probs[t, keys], kind=\"stable\")[::-1][:k]]")),
        ("divided by k, not by |oracle| (< 1 when a query sees fewer than k keys)",
         "/ len(best)", "/ k"),
        ("0 instead of NaN for a query that sees nothing", "recall = np.full(len(scores), np.nan)",
         "recall = np.zeros(len(scores))"),
        ("invisible (-inf) positions counted as keys", "keys = np.nonzero(np.isfinite(scores[t]))[0]",
         "keys = np.arange(scores.shape[1])"),
        ("the oracle only among keys of positive probability",
         "        best = keys[np.argsort(-probs[t, keys], kind=\"stable\")[:k]]",
         ("        pos = keys[probs[t, keys] > 0]\n"
          "        best = pos[np.argsort(-probs[t, pos], kind=\"stable\")[:k]]")),
        ("delegation to the library", "    ### BEGIN SOLUTION",
         ("    from hybrid_lab.models.lightning_indexer import topk_recall\n"
          "    from hybrid_lab.ops.sparse_attention import topk_indices\n"
          "    mine = topk_indices(scores, k)\n"
          "    best = topk_indices(np.where(np.isfinite(scores), probs, -np.inf), k)\n"
          "    return np.array([topk_recall(m, b) if (b >= 0).any() else np.nan for m, b in zip(mine, best)])")),
    ],
    "11.2": [
        ("softmax over all S positions (not renormalized over the selection)",
         ("        logits = k[sel, g] @ q[h] * scale                # (n,) the selected positions only\n"
          "        w = np.exp(logits - logits.max())                # the max subtracted: exp never overflows\n"
          "        o[h] = w @ v[sel, g] / w.sum()"),
         ("        logits = k[:, g] @ q[h] * scale\n"
          "        w = np.exp(logits - logits.max())\n"
          "        o[h] = w[sel] @ v[sel, g] / w.sum()")),
        ("-1 padding read as position S - 1 (numpy's negative index)", "sel = idx[g][idx[g] >= 0]", "sel = idx[g]"),
        ("query head h mapped to KV head h % Hkv (not h // G)", "g = h // G ", "g = h % Hkv "),
        ("no max subtracted before exp (overflows on large logits)", "np.exp(logits - logits.max())",
         "np.exp(logits)"),
        ("an empty selection not handled (max of an empty array)",
         ("        if len(sel) == 0:\n"
          "            continue                                     # nothing selected: zeros\n"), ""),
        ("delegation to the library", "    ### BEGIN SOLUTION",
         ("    from hybrid_lab.ops.sparse_attention import sparse_attention\n"
          "    return sparse_attention(q[None, None], k[None], v[None], idx[None, None], scale=scale)[0, 0]")),
    ],
    "11.3": [
        ("-1 counted as a block (set difference of the raw arrays)",
         ("    selected = new_blocks[new_blocks >= 0]                   # -1 is an empty slot, not a block\n"
          "    cached = np.concatenate([prev_blocks, resident])         # on the GPU already\n"
          "    missing = selected[~np.isin(selected, cached)]           # the blocks to copy from host memory\n"),
         "    missing = list(set(new_blocks.tolist()) - set(prev_blocks.tolist()) - set(resident.tolist()))\n"),
        ("the always-resident blocks ignored (copied again)",
         "cached = np.concatenate([prev_blocks, resident])", "cached = prev_blocks"),
        ("set difference the wrong way (the evicted blocks, prev - new)",
         "missing = selected[~np.isin(selected, cached)]",
         "missing = prev_blocks[(prev_blocks >= 0) & ~np.isin(prev_blocks, selected)]"),
        ("the number of blocks, not bytes", "return int(len(missing)) * block_bytes", "return int(len(missing))"),
        ("delegation to the library", "    ### BEGIN SOLUTION",
         ("    from hybrid_lab.serving.offload_sim import new_blocks as blocks_to_copy\n"
          "    return len(blocks_to_copy(new_blocks, np.concatenate([prev_blocks, resident]))) * block_bytes")),
    ],
}
