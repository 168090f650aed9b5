"""Wrong answers to the exercises of notebook 01: (what is wrong, text in the solution's exercise cell, replacement).
tests/test_exercises.py asserts the check fails every one of them, on every seed, and passes the solution."""
WRONG = {
    "01.1": [
        ("wrong sign of the skip term D", "y = h @ C_t + D * x_t", "y = h @ C_t - D * x_t"),
        ("output read from the old state", "    h = np.exp(dt_t[:, None] * A) * h + (dt_t * x_t)[:, None] * B_t[None, :]\n    y = h @ C_t + D * x_t",
         "    y = h @ C_t + D * x_t\n    h = np.exp(dt_t[:, None] * A) * h + (dt_t * x_t)[:, None] * B_t[None, :]"),
        ("input not scaled by Δ", "(dt_t * x_t)[:, None]", "x_t[:, None]"),
        ("delegation to the library", "    ### BEGIN SOLUTION",
         "    from hybrid_lab.ops import ssm\n    y, h = ssm.selective_scan_step(x_t[None], dt_t[None], A, B_t[None], C_t[None], D, h[None])\n    return y[0], h[0]"),
        # right numbers: only the comparison of the inputs before and after the call fails it
        ("state updated in place (the caller's h changes)",
         "    h = np.exp(dt_t[:, None] * A) * h + (dt_t * x_t)[:, None] * B_t[None, :]\n",
         "    h *= np.exp(dt_t[:, None] * A)\n    h += (dt_t * x_t)[:, None] * B_t[None, :]\n"),
    ],
    "01.2": [
        ("mask applied after exp (inf * 0 = nan for large Δ)",
         "np.where(np.tri(len(c), dtype=bool), np.exp(np.minimum(diff, 0.0)), 0.0)", "np.tri(len(c)) * np.exp(diff)"),
        ("off by one: diagonal masked out", "np.tri(len(c), dtype=bool)", "np.tri(len(c), k=-1, dtype=bool)"),
        ("transposed (c_s - c_t)", "diff = c[:, None] - c[None, :]", "diff = c[None, :] - c[:, None]"),
        ("no clamp: exp overflows above the diagonal, np.tril hides the inf",
         "np.where(np.tri(len(c), dtype=bool), np.exp(np.minimum(diff, 0.0)), 0.0)", "np.tril(np.exp(diff))"),
    ],
    "01.3": [
        ("skip term D left out", "y[t] = h @ C[t] + D[:, None] * x[t]", "y[t] = h @ C[t]"),
        ("decay per head broadcast on the wrong axis", "np.exp(dt[t] * A)[:, None, None] * h", "np.exp(dt[t] * A)[None, None, :1] * h"),
        ("delegation to the library", "    ### BEGIN SOLUTION",
         "    from hybrid_lab.ops.ssm import ssd_scan\n    y, h = ssd_scan(x[None], dt[None], A, B[None], C[None], D)\n    return y[0], h[0]"),
    ],
    "01.4": [
        ("state carried in from earlier chunks dropped (y_inter missing)",
         " + np.exp(c)[:, None] * (C[s0:s1] @ h[hd].T)", ""),
        ("h_end without the decay of the carried state", "h[hd] = np.exp(c[-1]) * h[hd] +", "h[hd] = h[hd] +"),
        ("last chunk dropped when L is not a multiple", "s1 = min(s0 + chunk_size, L)", "s1 = s0 + chunk_size\n        if s1 > L:\n            break"),
        ("uses the recurrent scan instead", "    ### BEGIN SOLUTION", "    return ssd_recurrent(x, dt, A, B, C, D)"),
        # right numbers: the inf is masked away; only the check's overflow rule (float_errors, as 01.2) fails it
        ("its own decay matrix without the clamp: exp overflows above the diagonal, np.tril hides the inf",
         "Lm = decay_matrix(c)", "Lm = np.tril(np.exp(c[:, None] - c[None, :]))"),
    ],
}
