"""Wrong answers to the exercises of notebook 03: (what is wrong, text in the solution's exercise cell, replacement).
tests/test_exercises.py asserts the check fails every one of them, on every seed, and passes the solution."""
EVICT_LOOP = """    while freed < bytes_to_free and len(tree) > 0:
        end, edge = tree.end, tree.edge_len
        saved = tree.flops(end) - tree.flops(end - edge)
        nbytes = edge * tree.kv_bytes_per_token + tree.has_state * tree.state_bytes
        score = eviction_score(tree.last_access, saved, nbytes, alpha)
        cand = np.flatnonzero(tree.n_children <= 1)
        best = score[cand].min()
        tied = cand[score[cand] <= best + 1e-12 * max(1.0, abs(best))]
        victim = tied[np.argmax(end[tied])]
        freed += tree.evict(tree.ids[victim])"""
EVICT_ONCE = """    end, edge, ids = tree.end, tree.edge_len, tree.ids
    saved = tree.flops(end) - tree.flops(end - edge)
    nbytes = edge * tree.kv_bytes_per_token + tree.has_state * tree.state_bytes
    score = eviction_score(tree.last_access, saved, nbytes, alpha)
    cand = np.flatnonzero(tree.n_children <= 1)
    for v in cand[np.lexsort((-end[cand], score[cand]))]:
        if freed >= bytes_to_free:
            break
        freed += tree.evict(ids[v])"""

WRONG = {
    "03.1": [
        ("state saved at the end of the input, not at the last decoded token", "positions.append(n_tokens)",
         "positions.append(n_input)"),
        ("a fully matched input (m = n_input) taken for a branch", "if 0 < m < n_input and new_branch:",
         "if 0 < m <= n_input and new_branch:"),
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
        ("alpha weights recency instead of FLOP efficiency", "norm(last_access) + alpha * norm(eff)",
         "alpha * norm(last_access) + norm(eff)"),
        ("recency not normalized", "norm(last_access) + alpha", "np.asarray(last_access, dtype=float) + alpha"),
        ("delegation to the library", "    def norm(x):",
         ("    from hybrid_lab.serving.eviction import eviction_scores\n"
         "    return eviction_scores(last_access, saved_flops, nbytes, alpha)\n    def norm(x):")),
    ],
    "03.3": [
        ("branch points (two or more children) not excluded", "cand = np.flatnonzero(tree.n_children <= 1)",
         "cand = np.arange(len(tree))"),
        ("only leaves are candidates", "cand = np.flatnonzero(tree.n_children <= 1)",
         "cand = np.flatnonzero(tree.n_children == 0)"),
        ("ties go to the lower id, not the deeper node", "victim = tied[np.argmax(end[tied])]", "victim = tied[0]"),
        ("FLOPs saved counted from the root, not relative to the parent",
         "saved = tree.flops(end) - tree.flops(end - edge)", "saved = tree.flops(end)"),
        ("alpha ignored (LRU whatever alpha)", "score = eviction_score(tree.last_access, saved, nbytes, alpha)",
         "score = eviction_score(tree.last_access, saved, nbytes, 0.0)"),
        ("one eviction per call (no loop)", "    while freed < bytes_to_free and len(tree) > 0:",
         "    for _ in range(1):"),
        ("scores computed once, candidates evicted in that order", EVICT_LOOP, EVICT_ONCE),
        ("delegation to the library", "    freed = 0\n",
         ("    from hybrid_lab.serving.radix_cache import marconi_evict\n"
         "    return marconi_evict(tree, bytes_to_free, alpha)\n")),
    ],
}
