"""Wrong answers to the exercises of notebook 08: (what is wrong, text in the solution's exercise cell, replacement).
tests/test_exercises.py asserts the check fails every one of them, on every seed, and passes the solution."""
WRONG = {
    "08.1": [
        ("last full window dropped (no + 1)", "else (S - window) // stride + 1", "else (S - window) // stride"),
        ("a partial last window counted", "Nc = 0 if S < window else (S - window) // stride + 1",
         "Nc = 0 if S < window else -(-(S - window) // stride) + 1\n    k = np.concatenate([k, np.zeros((B, stride, H, d))], axis=1)"),
        ("windows laid end to end (stride ignored)", "starts = np.arange(Nc) * stride", "starts = np.arange(Nc) * window"),
        ("sum instead of mean", "(cs[:, starts + window] - cs[:, starts]) / window", "(cs[:, starts + window] - cs[:, starts])"),
        ("delegation to the library", "    ### BEGIN SOLUTION",
         "    from hybrid_lab.models import infllm\n    return infllm.compress_keys(k, window, stride)"),
    ],
    "08.2": [
        ("rest positions get q_c - p_c too (no shared bucket factor)", "grad[rest] = q[rest] * (1 - P[-1] / Q[-1])",
         "grad[rest] = q[rest] - p[rest]"),
        ("ties to the larger index", 'sel = np.argsort(-p, kind="stable")[:k]', "sel = np.argsort(p, kind=\"stable\")[::-1][:k]"),
        ("teacher not renormalized", "p = np.asarray(teacher, float) / np.sum(teacher)", "p = np.asarray(teacher, float)"),
        ("0 * log 0 taken as NaN (empty rest bucket)", "loss = float(np.sum(P[nz] * np.log(P[nz] / Q[nz])))",
         "loss = float(np.sum(P * np.log(P / Q)))"),
        ("delegation to the library", "    ### BEGIN SOLUTION",
         "    from hybrid_lab.models import forecast as fc\n    return fc.rest_bucket_kl(teacher, logits, min(k, len(teacher)))"),
    ],
    "08.3": [
        ("mean over all rows, also the queries without candidates", "n_rows = max(len(losses), 1)", "n_rows = B * T * H"),
        ("gradient without the 1/sqrt(d) of the logits",
         'grad = np.einsum("btD,btgd->Dgd", x, np.einsum("btgn,bngd->btgd", dz, kc)) * scale',
         'grad = np.einsum("btD,btgd->Dgd", x, np.einsum("btgn,bngd->btgd", dz, kc))'),
        ("softmax over every position, not only the candidates",
         "loss_row, dz[b, i, g, c] = rest_bucket_kl(teacher[b, i, g, c], z[b, i, g, c], k)",
         "loss_row, dz[b, i, g] = rest_bucket_kl(teacher[b, i, g] * mask[i], z[b, i, g], k)"),
        ("Adam without bias correction", "m_hat, v_hat = m / (1 - b1 ** (t + 1)), v / (1 - b2 ** (t + 1))",
         "m_hat, v_hat = m, v"),
        ("bias correction off by one step", "m_hat, v_hat = m / (1 - b1 ** (t + 1)), v / (1 - b2 ** (t + 1))",
         "m_hat, v_hat = m / (1 - b1 ** max(t, 1)), v / (1 - b2 ** max(t, 1))"),
        ("gradient always rescaled to max_norm", "if norm > max_norm else grad", "if norm > 0 else grad"),
        ("delegation to the library", "    ### BEGIN SOLUTION",
         ("    from hybrid_lab.models import forecast as fc\n"
          "    loss, dz = fc.rest_bucket_kl(teacher, np.einsum('btgd,bngd->btgn', np.einsum('btD,Dgd->btgd', x, W), kc)"
          " * W.shape[2] ** -0.5, k, mask[None, :, None, :])")),
        ("Adam's moments updated in place (the caller's m and v change)",
         "    m = b1 * m + (1 - b1) * g_step\n    v = b2 * v + (1 - b2) * g_step * g_step\n",
         "    m *= b1\n    m += (1 - b1) * g_step\n    v *= b2\n    v += (1 - b2) * g_step * g_step\n"),
    ],
}
