"""Wrong answers to the exercises of notebook 05: (what is wrong, text in the solution's exercise cell, replacement).
tests/test_exercises.py asserts the check fails every one of them, on every seed, and passes the solution."""
WRONG = {
    "05.1": [
        ("ties to the higher block id", "key=lambda b: (-mass[b], b)", "key=lambda b: (-mass[b], -b)"),
        ("the block that starts at t not visible (< instead of <=)", "if b * block_size <= t]",
         "if b * block_size < t]"),
        ("only blocks that end at or before t (the query's own block dropped)", "if b * block_size <= t]",
         "if (b + 1) * block_size - 1 <= t]"),
        ("the ragged last block dropped (reshape into full blocks)",
         "    nb = -(-len(p_row) // block_size)                          # the last block may be shorter\n"
         "    mass = np.zeros(nb)\n    np.add.at(mass, np.arange(len(p_row)) // block_size, p_row)",
         "    nb = len(p_row) // block_size\n    mass = p_row[:nb * block_size].reshape(nb, block_size).sum(1)"),
        ("causality ignored: blocks after t are candidates", "visible = [b for b in range(nb) if b * block_size <= t]",
         "visible = list(range(nb))"),
        ("visible blocks of zero mass dropped", "if b * block_size <= t]", "if b * block_size <= t and mass[b] > 0]"),
        ("delegation to the library", "    ### BEGIN SOLUTION",
         "    from hybrid_lab.models.hysparse import block_scores, select_blocks\n"
         "    idx = select_blocks(block_scores(p_row[None, None], block_size), np.array([t]), block_size, n_blocks)[0, 0]\n"
         "    return idx[idx >= 0]"),
    ],
    "05.2": [
        ("renormalized by the source layer's kept mass 1 - ε instead of the later layer's",
         "/ q[keep].sum()", "/ (1 - eps)"),
        ("no renormalization over the kept set", "o_hat = (q[keep] @ v[keep]) / q[keep].sum()",
         "o_hat = q[keep] @ v[keep]"),
        ("total variation without the ½", "delta = 0.5 * float(", "delta = float("),
        ("missing mass measured under q instead of p", "eps = float(p[~keep].sum())", "eps = float(q[~keep].sum())"),
        ("the source layer's error instead of the later layer's",
         "    o = q @ v\n    o_hat = (q[keep] @ v[keep]) / q[keep].sum()",
         "    o = p @ v\n    o_hat = (p[keep] @ v[keep]) / p[keep].sum()"),
        ("delegation to the library", "    ### BEGIN SOLUTION",
         "    from hybrid_lab.costs import bounds\n"
         "    return float(bounds.missing_mass(p, keep)), float(bounds.tv_distance(p, q)), "
         "float(bounds.sparse_error(q, v, keep))"),
    ],
    "05.3": [
        ("ties to the larger position (descending argsort reversed)", 'np.argsort(-row, kind="stable")[:k]',
         "np.argsort(row)[::-1][:k]"),
        ("divided by the number of layers, not the number of pairs",
         "np.mean([len(sets[a] & sets[a + d]) / k for a in range(n - d)])",
         "np.sum([len(sets[a] & sets[a + d]) / k for a in range(n - d)]) / n"),
        ("intersection over union (Jaccard) instead of / k", "len(sets[a] & sets[a + d]) / k",
         "len(sets[a] & sets[a + d]) / len(sets[a] | sets[a + d])"),
        ("pairs wrapped around the last layer", "len(sets[a] & sets[a + d]) / k for a in range(n - d)",
         "len(sets[a] & sets[(a + d) % n]) / k for a in range(n)"),
        ("delegation to the library", "    ### BEGIN SOLUTION",
         "    from hybrid_lab.models.hysparse import topk_overlap_by_distance\n"
         "    return topk_overlap_by_distance(probs, k)"),
    ],
}
