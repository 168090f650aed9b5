"""Wrong answers to the exercises of notebook 07: (what is wrong, text in the solution's exercise cell, replacement).
tests/test_exercises.py asserts the check fails every one of them, on every seed, and passes the solution."""
WRONG = {
    "07.1": [
        ("the whole prompt prefilled before the first chunk is sent (no streaming)",
         "    cache = None\n    for c0 in range(0, len(tokens), chunk_size):\n"
         "        c1 = min(c0 + chunk_size, len(tokens))\n"
         "        # continue the caches: rows < c1 are final now\n"
         "        cache = model.prefill_self(tokens[c0:c1], cache)\n",
         "    cache = model.prefill_self(tokens)\n    for c0 in range(0, len(tokens), chunk_size):\n"
         "        c1 = min(c0 + chunk_size, len(tokens))\n"),
        ("the SWA windows sent with every chunk", "            yield kv.v[c0:c1]\n",
         "            yield kv.v[c0:c1]\n        for w in cache.self_swa:\n            yield w.k\n            yield w.v\n"
         "            yield w.pos\n"),
        ("every row so far sent again with each chunk (0 .. c1)", "yield cache.self_fa.k[c0:c1]",
         "yield cache.self_fa.k[:c1]"),
        ("the last short chunk dropped", "for c0 in range(0, len(tokens), chunk_size):",
         "for c0 in range(0, len(tokens) - chunk_size + 1, chunk_size):"),
        ("rows taken as the last chunk_size rows of the cache", "            yield kv.k[c0:c1]",
         "            yield kv.k[-chunk_size:]"),
        ("delegation to the library", "    ### BEGIN SOLUTION",
         "    from hybrid_lab.serving.pd_bundle import PDBundle\n"
         "    yield from PDBundle.from_cache(model.prefill_self(tokens), model.cfg, 'x', chunk_size).to_arrays()\n"
         "    return"),
    ],
    "07.2": [
        ("n_new decode steps: the last token fed back too", "for _ in range(n_new - 1):", "for _ in range(n_new):"),
        ("a decode step even when n_new = 1", "for _ in range(n_new - 1):", "for _ in range(max(n_new - 1, 1)):"),
        ("every step decodes from the installed cache (the returned cache dropped)",
         "logits, cache = model.decode_step(tokens[-1], cache)", "logits, _ = model.decode_step(tokens[-1], cache)"),
        ("the first token from a decode step on position L (token 0 fed in) instead of first_token",
         "tokens = [int(np.argmax(model.first_token(cache)))]",
         "logits, cache = model.decode_step(0, cache)\n    tokens = [int(np.argmax(logits))]"),
        ("delegation to the library", "    ### BEGIN SOLUTION",
         "    from hybrid_lab.serving.pd_workers import DWorker\n    d = DWorker(model.cfg, model.weights)\n"
         "    r = d.install(bundle)\n    return d.generate(r, n_new), d.installed[r]"),
    ],
    "07.3": [
        ("release times ignored", "max([release.get(n, 0.0)] + [finish[p] for p in preds.get(n, [])])",
         "max([0.0] + [finish[p] for p in preds.get(n, [])])"),
        ("ties to the last listed predecessor", "node = binding[0]", "node = binding[-1]"),
        ("the path ends at the last task in order", "node = max(order, key=lambda n: finish[n])",
         "node = order[-1]"),
        ("length = sum of the durations on the path (waits for a release lost)", "return finish[path[0]], path[::-1]",
         "return sum(durations[n] for n in path), path[::-1]"),
        ("the path not reversed (latest task first)", "return finish[path[0]], path[::-1]",
         "return finish[path[0]], path"),
        ("delegation to the library", "    ### BEGIN SOLUTION",
         "    from hybrid_lab.serving.pd_timeline import critical_path\n"
         "    return critical_path(durations, preds, order, release)[:2]"),
        ("tasks without predecessors filled into the caller's preds (setdefault changes an input)",
         "[finish[p] for p in preds.get(n, [])]", "[finish[p] for p in preds.setdefault(n, [])]"),
    ],
}
