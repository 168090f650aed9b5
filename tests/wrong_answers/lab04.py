"""Wrong answers to the exercises of notebook 04: (what is wrong, text in the solution's exercise cell, replacement).
tests/test_exercises.py asserts the check fails every one of them, on every seed, and passes the solution."""
WRONG = {
    "04.1": [
        ("ReLU of the weighted sum (after the head weight)",
         'np.einsum("tj,tjs->ts", w, np.maximum(np.einsum("tjd,sd->tjs", q, k), 0.0))',
         'np.maximum(np.einsum("tj,tjs->ts", w, np.einsum("tjd,sd->tjs", q, k)), 0.0)'),
        ("causal mask off by one (s < q_pos)", "<= q_pos[:, None]", "< q_pos[:, None]"),
        ("invisible keys scored 0 instead of -inf", "I, -np.inf)", "I, 0.0)"),
        ("delegation to the library", "    ### BEGIN SOLUTION",
         ("    from hybrid_lab.ops.lightning_indexer import lightning_indexer\n"
          "    return lightning_indexer(q[None], w[None], k[None], 1, q_pos)[0][0]")),
    ],
    "04.2": [
        ("no causal mask: the softmax runs over every key",
         "visible = np.arange(len(x_keys))[None, :] <= q_pos[:, None]",
         "visible = np.ones((len(x_queries), len(x_keys)), dtype=bool)"),
        # right numbers (the step is computed before the update): only the comparison of the inputs before and
        # after the call fails it ("params is left unchanged", says the exercise)
        ("params updated in place and returned (params must be left unchanged)",
         "new_params = {name: params[name] - lr * scale * g for name, g in grads.items()}",
         "for name, g in grads.items():\n        params[name] -= lr * scale * g\n    new_params = params"),
        ("gradient not gated by the ReLU", "dz = dI[:, None, :] * w[:, :, None] * (z > 0)",
         "dz = dI[:, None, :] * w[:, :, None]"),
        ("ReLU'(0) = 1 instead of 0", "* (z > 0)", "* (z >= 0)"),
        ("causal mask off by one (s < q_pos)", "<= q_pos[:, None]", "< q_pos[:, None]"),
        ("head-weight gradient through z instead of ReLU(z)", 'dw = np.einsum("ts,tjs->tj", dI, a)',
         'dw = np.einsum("ts,tjs->tj", dI, z)'),
        ("key gradient from index head 0 only", 'dk = np.einsum("tjs,tje->se", dz, q)',
         'dk = np.einsum("tjs,tje->se", dz[:, :1], q[:, :1])'),
        ("0 · log 0 not taken as 0 (NaN loss)",
         "loss = float(np.sum(np.where(has, target * (np.log(np.where(has, target, 1.0)) - logq), 0.0)))",
         "loss = float(np.sum(target * (np.log(target) - logq)))"),
        ("each parameter clipped by its own norm",
         "new_params = {name: params[name] - lr * scale * g for name, g in grads.items()}",
         ("new_params = {name: params[name] - lr * (1.0 if clip is None else"
          " min(1.0, clip / max(np.sqrt(np.sum(g ** 2)), 1e-300))) * g for name, g in grads.items()}")),
        ("returns the clipped gradients",
         "new_params = {name: params[name] - lr * scale * g for name, g in grads.items()}",
         ("grads = {name: scale * g for name, g in grads.items()}\n"
          "    new_params = {name: params[name] - lr * g for name, g in grads.items()}")),
        ("sparse stage: target not renormalized over the selected set",
         "target = np.where(mass > 0, target / np.where(mass > 0, mass, 1.0), 0.0)", "target = target"),
        ("sparse stage: a set without target mass still trained (softmax pulled to 0)",
         "dI = np.where(counted & live, np.exp(logq), 0.0) - target",
         "dI = np.where(counted, np.exp(logq), 0.0) - target"),
        ("sparse stage: ties go to the larger position", "idx = topk_indices(I, topk)",
         "r = topk_indices(I[:, ::-1], topk)\n        idx = np.where(r >= 0, I.shape[1] - 1 - r, -1)"),
        ("sparse stage: the set picked by the target p, not by the scores", "idx = topk_indices(I, topk)",
         "idx = topk_indices(np.where(visible, p, -np.inf), topk)"),
        ("delegation to the library", "    ### BEGIN SOLUTION",
         ("    from hybrid_lab.models.lightning_indexer import LightningIndexer\n"
          "    D, Hi, di = params['Wq'].shape\n"
          "    ix = LightningIndexer(D, Hi, di, use_bias='bw' in params)\n"
          "    ix.params = {n: a.copy() for n, a in params.items()}\n"
          "    loss, grads = ix.loss_and_grads(x_queries, x_keys, p, q_pos, stage, topk)\n"
          "    return loss, grads, {n: params[n] - lr * g for n, g in grads.items()}")),
    ],
    "04.3": [
        ("Σ_t min(t, k) off by one: k(k - 1)/2 for the ramp", "k * (k + 1) / 2 + (L - k) * k",
         "k * (k - 1) / 2 + (L - k) * k"),
        ("indexer counted at full cost (FP8 speedup left out)", "cfg.index_flops_per_pair * pairs / cfg.fp8_speedup",
         "cfg.index_flops_per_pair * pairs"),
        ("integer arithmetic: L(L + 1) overflows int64 at long contexts", "L = np.asarray(L, dtype=np.float64)",
         "L = np.asarray(L)"),
        ("the ramp left out: L·k selected pairs once L > k", "k * (k + 1) / 2 + (L - k) * k", "L * k"),
        ("delegation to the library", "    ### BEGIN SOLUTION",
         "    from hybrid_lab.costs import dsa_cost\n    return dsa_cost.prefill_flops(L, cfg)['speedup']"),
    ],
}
