"""Wrong answers to the exercises of notebook 06: (what is wrong, text in the solution's exercise cell, replacement).
tests/test_exercises.py asserts the check fails every one of them, on every seed, and passes the solution."""
WRONG = {
    "06.1": [
        ("forced window off by one (t - window .. t - 1)", "range(t - window + 1, t + 1)", "range(t - window, t)"),
        ("ties to the larger position", "key=lambda s: (-score_row[s], s)", "key=lambda s: (-score_row[s], -s)"),
        ("negative window positions kept instead of -1", "[s if s >= 0 else -1 for s in", "[s for s in"),
        ("top-k drawn from every position (the window and the future too)", "cand = range(0, t - window + 1)",
         "cand = range(len(score_row))"),
        ("no -1 padding when fewer candidates than topk", " + [-1] * (topk - len(best))", ""),
        ("delegation to the library", "    ### BEGIN SOLUTION",
         "    from hybrid_lab.ops.fa_decode import forced_window_select\n"
         "    return forced_window_select(score_row[None, None], np.array([t]), window, topk)[0, 0]"),
    ],
    "06.2": [
        ("SWA reads the old window + the new key before evicting (window + 1 keys)",
         "            win.k = np.concatenate([win.k, k])[-win.window:]\n"
         "            win.v = np.concatenate([win.v, v])[-win.window:]\n"
         "            win.pos = np.append(win.pos, pos)[-win.window:]\n"
         "            o, _ = fa_attention(q, win.k, win.v, [len(win) - 1], sink=model.sink(name))\n",
         "            kk, vv = np.concatenate([win.k, k]), np.concatenate([win.v, v])\n"
         "            o, _ = fa_attention(q, kk, vv, [len(kk) - 1], sink=model.sink(name))\n"
         "            win.k, win.v = kk[-win.window:], vv[-win.window:]\n"
         "            win.pos = np.append(win.pos, pos)[-win.window:]\n"),
        ("every group bridged from the Self-decoder's output (the sources ignored)",
         'model.bridge_kv(g, fa_input if src == "self_fa_input" else h)', "model.bridge_kv(g, h)"),
        ("every group bridged from the FA input (the boundary sources ignored)",
         'model.bridge_kv(g, fa_input if src == "self_fa_input" else h)', "model.bridge_kv(g, fa_input)"),
        ("the selection recomputed by every SA layer from its own query (not reused)",
         "            o = sparse_attention(q[None], K[None], V[None], idx[None], sink=model.sink(name))[0]",
         "            _, s2 = fa_attention(q, K, V, [pos])\n"
         "            idx = np.stack([forced_window_one(s2[0, j], pos, cfg.window, cfg.topk)\n"
         "                            for j in range(cfg.n_heads_kv)])[None]\n"
         "            o = sparse_attention(q[None], K[None], V[None], idx[None], sink=model.sink(name))[0]"),
        ("SA layers read every cross KV entry instead of the selection",
         "sparse_attention(q[None], K[None], V[None], idx[None], sink=model.sink(name))",
         "sparse_attention(q[None], K[None], V[None], np.broadcast_to(np.arange(len(K)), (1, 1, cfg.n_heads_kv, "
         "len(K))), sink=model.sink(name))"),
        ("self SWA windows indexed by layer number (the FA not skipped)", "win = next(swa)",
         "win = cache.self_swa[i]"),
        ("SWA window positions not updated", "            win.pos = np.append(win.pos, pos)[-win.window:]\n", ""),
        ("RoPE at the wrong position (pos + 1)", "model.layer_input(name, h, [pos])",
         "model.layer_input(name, h, [pos + 1])"),
        ("the SA forced window set to the SWA width", "forced_window_one(score[0, j], pos, cfg.window, cfg.topk)",
         "forced_window_one(score[0, j], pos, cfg.swa_window, cfg.topk)"),
        ("pos not advanced", "cache.pos, cache.boundary = pos + 1, h[0].copy()", "cache.boundary = h[0].copy()"),
        ("sink left out of the SA layers", "idx[None], sink=model.sink(name))", "idx[None])"),
        ("delegation to the library", "    ### BEGIN SOLUTION", "    return model.decode_step(token, cache)"),
    ],
    "06.3": [
        ("a window counted for every self layer (the FA too)", "(cfg.n_self - 1) * min(L, cfg.swa_window)",
         "cfg.n_self * min(L, cfg.swa_window)"),
        ("one cross KV per cross layer (SA layers counted)", '"cross": cfg.n_groups * L * entry',
         '"cross": cfg.cross_layers * L * entry'),
        ("windows that grow with L", "min(L, cfg.swa_window)", "L"),
        ("the SA forced window taken for the SWA window", "min(L, cfg.swa_window)", "min(L, cfg.window)"),
        ("KV heads left out", "entry = cfg.n_heads_kv * (cfg.d_qk + cfg.d_v) * bytes_per_elem",
         "entry = (cfg.d_qk + cfg.d_v) * bytes_per_elem"),
        ("delegation to the library", "    ### BEGIN SOLUTION",
         "    from hybrid_lab.serving.pd_bundle import bundle_bytes\n    b = bundle_bytes(cfg, max(L, 1), bytes_per_elem)"),
    ],
}
