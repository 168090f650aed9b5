"""Wrong answers to the exercises of notebook 03: (what is wrong, text in the solution's exercise cell, replacement).
tests/test_exercises.py asserts the check fails every one of them, on every seed, and passes the solution."""
EVICT_LOOP = """    while freed < bytes_to_free and len(tree) > 0:
        cand = np.flatnonzero(tree.n_children <= 1)
        end, edge = tree.end[cand], tree.edge_len[cand]
        saved = tree.flops(end) - tree.flops(end - edge)
        nbytes = end * tree.kv_bytes_per_token + tree.has_state[cand] * tree.state_bytes
        score = eviction_score(tree.last_access[cand], saved, nbytes, alpha, tree.now)
        best = score.min()
        tied = cand[score <= best + 1e-12 * max(1.0, abs(best))]
        victim = tied[np.argmax(tree.end[tied])]
        freed += tree.evict(tree.ids[victim])"""
EVICT_ONCE = """    cand = np.flatnonzero(tree.n_children <= 1)
    end, edge, ids = tree.end[cand], tree.edge_len[cand], tree.ids
    saved = tree.flops(end) - tree.flops(end - edge)
    nbytes = end * tree.kv_bytes_per_token + tree.has_state[cand] * tree.state_bytes
    score = eviction_score(tree.last_access[cand], saved, nbytes, alpha, tree.now)
    for v in cand[np.lexsort((-end, score))]:
        if freed >= bytes_to_free:
            break
        freed += tree.evict(ids[v])"""

WRONG = {
    "03.1": [
        ("state saved at the end of the input, not at the last decoded token", "positions.append(n_tokens)",
         "positions.append(n_input)"),
        ("an input that ends inside an edge (m = n_input: the same prompt, another answer) not taken for a branch",
         "if 0 < m <= n_input and new_branch:", "if 0 < m < n_input and new_branch:"),
        ("nothing matched (m = 0) taken for a branch at the root", "if 0 < m <= n_input and new_branch:",
         "if 0 <= m <= n_input and new_branch:"),
        ("a split inside an edge not seen as a branch", "new_branch = inside_edge or (", "new_branch = ("),
        ("checkpoints a node that already holds a state",
         "(node_children >= 1 and not node_has_state)", "(node_children >= 1)"),
        ("extending a leaf taken for a branch", "(node_children >= 1 and not node_has_state)",
         "(not node_has_state)"),
        ("delegation to the library", "    positions = []",
         ("    from hybrid_lab.serving.radix_cache import marconi_admission\n"
         "    return marconi_admission(n_input, n_tokens, m, inside_edge, node_children, node_has_state)")),
    ],
    "03.2": [
        ("a node holding 0 bytes divides by zero",
         "np.divide(saved_flops, nbytes, out=np.zeros_like(nbytes), where=nbytes > 0)", "saved_flops / nbytes"),
        ("no guard for a constant column (0 / 0)",
         "(x - x.min()) / (x.max() - x.min()) if x.max() > x.min() else np.zeros_like(x)",
         "(x - x.min()) / (x.max() - x.min())"),
        ("alpha weights recency instead of FLOP efficiency", "norm(recency) + alpha * norm(eff)",
         "alpha * norm(recency) + norm(eff)"),
        ("recency not normalized", "norm(recency) + alpha", "recency + alpha"),
        ("linear recency (the lecture's variant), not 1 / age",
         "recency = 1.0 / (now - np.asarray(last_access, dtype=float))",
         "recency = np.asarray(last_access, dtype=float)"),
        ("the age itself, not its inverse (the oldest node scores highest)",
         "recency = 1.0 / (now - np.asarray(last_access, dtype=float))",
         "recency = now - np.asarray(last_access, dtype=float)"),
        ("delegation to the library", "    def norm(x):",
         ("    from hybrid_lab.serving.eviction import eviction_scores\n"
         "    return eviction_scores(last_access, saved_flops, nbytes, alpha, now=now)\n    def norm(x):")),
        ("0 bytes patched in the caller's nbytes array (np.asarray does not copy a float array)",
         "eff = np.divide(saved_flops, nbytes, out=np.zeros_like(nbytes), where=nbytes > 0)",
         "nbytes[nbytes == 0] = np.inf\n    eff = saved_flops / nbytes"),
    ],
    "03.3": [
        ("branch points (two or more children) not excluded", "cand = np.flatnonzero(tree.n_children <= 1)",
         "cand = np.arange(len(tree))"),
        ("only leaves are candidates", "cand = np.flatnonzero(tree.n_children <= 1)",
         "cand = np.flatnonzero(tree.n_children == 0)"),
        ("ties go to the lower id, not the deeper node", "victim = tied[np.argmax(tree.end[tied])]",
         "victim = tied[0]"),
        ("FLOPs saved counted from the root, not relative to the parent",
         "saved = tree.flops(end) - tree.flops(end - edge)", "saved = tree.flops(end)"),
        ("the node's own KV bytes, not its whole prefix's (the lecture's variant)",
         "nbytes = end * tree.kv_bytes_per_token", "nbytes = edge * tree.kv_bytes_per_token"),
        ("alpha ignored (pure recency whatever alpha)",
         "score = eviction_score(tree.last_access[cand], saved, nbytes, alpha, tree.now)",
         "score = eviction_score(tree.last_access[cand], saved, nbytes, 0.0, tree.now)"),
        ("one eviction per call (no loop)", "    while freed < bytes_to_free and len(tree) > 0:",
         "    for _ in range(1):"),
        ("scores computed once, candidates evicted in that order", EVICT_LOOP, EVICT_ONCE),
        ("delegation to the library", "    freed = 0\n",
         ("    from hybrid_lab.serving.radix_cache import marconi_evict\n"
         "    return marconi_evict(tree, bytes_to_free, alpha)\n")),
    ],
}
