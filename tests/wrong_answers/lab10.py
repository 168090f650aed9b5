"""Wrong answers to the exercises of notebook 10: (what is wrong, text in the solution's exercise cell, replacement).
tests/test_exercises.py asserts the check fails every one of them, on every seed, and passes the solution."""
WRONG = {
    "10.1": [
        ("upper edge included (dist <= hi)", "(dist < edges[b + 1])", "(dist <= edges[b + 1])"),
        ("positions with target -1 counted", "sel = asked & (dist", "sel = (dist"),
        ("0.0 instead of NaN for an empty bucket", "np.full(nb, np.nan)", "np.zeros(nb)"),
        ("right when the target ties for the maximum (not numpy's first maximum)",
         "right = logits.argmax(-1) == targets",
         "right = np.take_along_axis(logits, np.maximum(targets, 0)[..., None], -1)[..., 0] == logits.max(-1)"),
        ("np.histogram: its last bin includes the upper edge", "    ### BEGIN SOLUTION",
         ("    ok = targets >= 0\n"
          "    count = np.histogram(dist[ok], bins=edges)[0]\n"
          "    hits = np.histogram(dist[ok & (logits.argmax(-1) == targets)], bins=edges)[0]\n"
          "    return np.where(count > 0, hits / np.maximum(count, 1), np.nan), count")),
        ("delegation to the library (one bucket at a time)", "    ### BEGIN SOLUTION",
         ("    from hybrid_lab.trained.tasks import Batch, accuracy\n"
          "    z = np.zeros_like(targets)\n"
          "    res = [accuracy(logits, Batch(z, targets, z, dist), dist_range=(lo, hi))\n"
          "           for lo, hi in zip(edges[:-1], edges[1:])]\n"
          "    return np.array([a for a, _ in res]), np.array([n for _, n in res])")),
    ],
    "10.2": [
        ("a sliding window keeps `window` positions even before it is full",
         '"swa": min(context, window) * kv_bytes', '"swa": window * kv_bytes'),
        ("Mamba-2 state counted per position", '"mamba2": state_bytes}', '"mamba2": context * state_bytes}'),
        ("an unknown kind counted as Mamba-2 (no error)",
         ("        if kind not in keeps:\n"
          "            raise ValueError(f\"layers: unknown kind {kind!r}, expected one of {sorted(keeps)}\")\n"
          "        total += keeps[kind]"),
         "        total += keeps.get(kind, state_bytes)"),
        ("an unknown kind raises KeyError, not ValueError",
         "            raise ValueError(f\"layers: unknown kind {kind!r}, expected one of {sorted(keeps)}\")\n",
         "            pass\n"),
        ("delegation to the library", "    ### BEGIN SOLUTION",
         ("    from hybrid_lab.models.stack import StackConfig\n"
          "    from hybrid_lab.trained.families import decode_ledger\n"
          "    return decode_ledger(StackConfig(layers=layers, window=window), context)[\"cache_bytes\"]")),
    ],
    "10.3": [
        ("any evidence position kept is enough (any, not all)",
         "return np.all(found | (evidence < 0), axis=1)", "return np.any(found & (evidence >= 0), axis=1)"),
        ("unused evidence slots (-1) not ignored", "return np.all(found | (evidence < 0), axis=1)",
         "return np.all(found, axis=1)"),
        ("-1 padding clamped to position 0", "idx[:, None, :]).any(-1)", "np.maximum(idx, 0)[:, None, :]).any(-1)"),
        ("matches counted, -1 matching -1 included",
         "return np.all(found | (evidence < 0), axis=1)",
         "return (evidence[:, :, None] == idx[:, None, :]).sum((1, 2)) == (evidence >= 0).sum(1)"),
        ("delegation to the library (captured mass of an indicator score)", "    ### BEGIN SOLUTION",
         ("    from hybrid_lab.models.hysparse2 import captured_mass\n"
          "    S = int(max(idx.max(initial=0), evidence.max(initial=0))) + 1\n"
          "    score = np.zeros((len(idx), S))\n"
          "    for q, row in enumerate(evidence):\n"
          "        score[q, row[row >= 0]] = 1.0\n"
          "    has = score.sum(1) > 0\n"
          "    score[~has, 0] = 1.0\n"
          "    return ~has | (captured_mass(score, idx) == 1.0)")),
    ],
}
