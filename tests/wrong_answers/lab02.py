"""Wrong answers to the exercises of notebook 02: (what is wrong, text in the solution's exercise cell, replacement).
tests/test_exercises.py asserts the check fails every one of them, on every seed, and passes the solution."""
WRONG = {
    "02.1": [
        ("a partial last interval counted as a snapshot (ceil instead of floor)", "n_snapshots = L // every",
         "n_snapshots = -(-L // every)"),
        ("a snapshot counted at position 0", "n_snapshots = L // every", "n_snapshots = L // every + 1"),
        ("one SSM layer's state taken for the full state", "state = n_ssm * d_inner", "state = d_inner"),
        ("no guard for a model without KV (division by zero)",
         'state / kv_per_token if kv_per_token else float("inf")', "state / kv_per_token"),
        ("the KV left out of the total", "return state_tokens, n_snapshots, L * kv_per_token + n_snapshots * state",
         "return state_tokens, n_snapshots, n_snapshots * state"),
        ("delegation to the library", "    state = n_ssm * d_inner * d_state * bytes_per_elem",
         "    from hybrid_lab.costs import ledger\n    from hybrid_lab.costs.shape7b import HybridLayout\n"
         "    state = ledger.ssm_state_bytes(HybridLayout(n_attn=0, n_ssm=max(n_ssm, 1), n_mlp=0, d_model=d_inner, "
         "n_heads=1, d_state=d_state, dtype_bytes=bytes_per_elem, ssm_head_dim=1)) if n_ssm else 0"),
    ],
    "02.2": [
        ("a state exactly at the shared length refused (< instead of <=)", "if p <= shared]", "if p < shared]"),
        ("positions assumed sorted: stops at the first one beyond the shared prefix",
         "    ok = [p for p in state_positions if p <= shared]\n    return max(ok) if ok else 0",
         "    best = 0\n    for p in state_positions:\n        if p > shared:\n            break\n        best = p\n"
         "    return best"),
        ("the last saved position taken, not the largest",
         "    return max(ok) if ok else 0", "    return ok[-1] if ok else 0"),
        ("no saved state not handled (max of an empty list)", "    return max(ok) if ok else 0", "    return max(ok)"),
        ("the shared length ignored: the latest state is used", "ok = [p for p in state_positions if p <= shared]",
         "ok = list(state_positions)"),
        ("a pure Transformer treated like a hybrid", "    if not hybrid:\n        return shared\n", ""),
        ("delegation to the library", "    ### BEGIN SOLUTION",
         "    from hybrid_lab.models.hybrid import reusable_prefix\n"
         "    return reusable_prefix(shared, state_positions) if hybrid else shared"),
        ("the fallback 0 appended to the caller's state_positions (an input changed)",
         "    ok = [p for p in state_positions if p <= shared]\n    return max(ok) if ok else 0",
         "    state_positions.append(0)\n    return max(p for p in state_positions if p <= shared)"),
    ],
}
