"""Wrong answers to the exercises of notebook 09: (what is wrong, text in the solution's exercise cell, replacement).
tests/test_exercises.py asserts the check fails every one of them, on every seed, and passes the solution.
Only wrong answers that stay inside the buffers: Triton's interpreter does not catch an out-of-bounds access."""
import re
from pathlib import Path

import nbformat

_SOLUTION = Path(__file__).resolve().parents[2] / "solutions" / "09_gpu_track.ipynb"


def _grid_line() -> tuple[str, str]:
    """(the launch grid's assignment as 09.2's solution writes it, e.g. '    grid = (B, Hkv)', its indentation),
    found by a regex in the solution notebook as it is now: the wrong answers below replace that text, whatever
    spacing or comment the line has."""
    nb = nbformat.read(str(_SOLUTION), as_version=4)
    src = next(c.source for c in nb.cells if c.cell_type == "code" and c.source.startswith("# Exercise 09.2 "))
    m = re.search(r"^([ \t]*)grid\s*=\s*\(\s*B\s*,\s*Hkv\s*\)", src, re.M)
    if m is None:
        raise ValueError(f"{_SOLUTION.name}: 09.2's solution has no line 'grid = (B, Hkv)' for the wrong answers")
    return m.group(0), m.group(1)


GRID, _INDENT = _grid_line()


def _before_grid(code: str) -> str:
    """``code`` (lines indented by 4) put in front of the grid line, re-indented as the solution indents it."""
    return "".join(_INDENT + ln[4:] + "\n" for ln in code.splitlines()) + GRID


TORCH_ONLY = _before_grid("""    B, Hq, D = q.shape
    Hkv = k.shape[2]
    G = Hq // Hkv
    for b in range(B):
        for g in range(Hkv):
            sel = idx[b, g][idx[b, g] >= 0].long()
            heads = slice(g * G, (g + 1) * G)
            if len(sel) == 0:
                out[b, heads] = 0.0
                continue
            kk, vv = k[b, sel, g].double(), v[b, sel, g].double()
            w = torch.softmax(q[b, heads].double() @ kk.T * D ** -0.5, dim=-1)
            out[b, heads] = (w @ vv).to(out.dtype)
    return out""")
LIBRARY = _before_grid("""    from gpu_track import sparse_attention as sa
    out.copy_(sa.sparse_attention(q[:, None], k, v, idx[:, None])[:, 0])
    return out""")

WRONG = {
    "09.1": [
        ("padding rows left unwritten", "mask=in_list[:, None] & md[None, :])", "mask=valid[:, None] & md[None, :])"),
        ("padding rows read row 0 instead of zeros", "mask=valid[:, None] & md[None, :], other",
         "mask=md[None, :], other"),
        ("the store ignores K_SEL (writes past the list)", "mask=in_list[:, None] & md[None, :])", "mask=md[None, :])"),
    ],
    "09.2": [
        ("-1 slots not masked to -inf (they get score 0)", '        s = tl.where(valid[None, :], s, float("-inf"))\n', ""),
        ("no guard for a block with nothing valid (inf - inf = NaN)",
         'm_use = tl.where(m_new == float("-inf"), 0.0, m_new)', "m_use = m_new"),
        ("accumulator not rescaled when the running max moves", "acc = acc * alpha[:, None] + ", "acc = acc + "),
        ("batch offset forgotten in the gathered rows", "rows = (b * S + tl.where(valid, ids, 0)) * HKV + g",
         "rows = tl.where(valid, ids, 0) * HKV + g"),
        ("softmax scale left out", "idx.shape[2], D ** -0.5,", "idx.shape[2], 1.0,"),
        ("one program per sequence only (grid without the KV groups)", GRID, _INDENT + "grid = (B, 1)"),
        ("delegation to the library kernel", GRID, LIBRARY),
        # right numbers, no kernel: only the launch count fails it
        ("no kernel: the launcher computes the output with torch ops", GRID, TORCH_ONLY),
    ],
    "09.3": [
        ("mask applied after exp (inf * 0 = NaN for a large Δ)",
         "tl.where(t[:, None] >= t[None, :], tl.exp(tl.minimum(c[:, None] - c[None, :], 0.0)), 0.0)",
         "tl.where(t[:, None] >= t[None, :], 1.0, 0.0) * tl.exp(c[:, None] - c[None, :])"),
        ("off by one: diagonal masked out", "t[:, None] >= t[None, :]", "t[:, None] > t[None, :]"),
        ("transposed decay (c_s - c_t)", "tl.minimum(c[:, None] - c[None, :], 0.0)", "tl.minimum(c[None, :] - c[:, None], 0.0)"),
        ("decay left out (y = CB @ U)", "y = tl.dot(cb * decay, u,", "y = tl.dot(cb, u,"),
        # right numbers: the inf is masked away; only the check's overflow rule (float_errors, under Triton's
        # interpreter) fails it
        ("no clamp: exp overflows above the diagonal, tl.where hides the inf",
         "tl.exp(tl.minimum(c[:, None] - c[None, :], 0.0))", "tl.exp(c[:, None] - c[None, :])"),
    ],
}
