"""Wrong answers to the exercises of notebook 00: (what is wrong, text in the solution's exercise cell, replacement).
tests/test_exercises.py asserts the check fails every one of them, on every seed, and passes the solution."""
WRONG = {
    "00.1": [
        ("query heads counted instead of KV heads (GQA ignored)", "2 * n_attn * n_kv_heads", "2 * n_attn * n_heads"),
        ("K only: the factor 2 for V missing", "return 2 * n_attn", "return n_attn"),
        ("bytes per number left out", " * d_head * bytes_per_elem", " * d_head"),
        ("delegation to the library", "    ### BEGIN SOLUTION",
         "    from hybrid_lab.costs import ledger\n    from hybrid_lab.costs.shape7b import HybridLayout\n"
         "    return ledger.kv_bytes_per_token(HybridLayout(n_attn=n_attn, n_ssm=1, n_mlp=0, d_model=n_heads * d_head,"
         " n_heads=n_heads, n_kv_heads=n_kv_heads, dtype_bytes=bytes_per_elem, ssm_head_dim=1))"),
    ],
    "00.2": [
        ("the weight term's L forgotten: 2·n·d·L² = 2·P gives a square root",
         "return params / (n_attn * d_model)", "return (params / (n_attn * d_model)) ** 0.5"),
        ("no attention layer not handled (division by zero)", "    if n_attn == 0:\n        return float(\"inf\")\n", ""),
        ("d_model squared (FLOPs per layer taken as d²)", "params / (n_attn * d_model)", "params / (n_attn * d_model ** 2)"),
        ("a pure SSM said to turn quadratic at once (L* = 0)", "        return float(\"inf\")", "        return 0.0"),
    ],
}
