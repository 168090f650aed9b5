"""Exercises of notebook 01 (selective SSM): one recurrence step, the masked decay matrix, and Mamba-2's SSD scan
written twice, token by token and chunk by chunk (lecture 10 §2; Mamba-2's SSD).

Shapes are for one sequence (no batch axis), as the notebook states them."""
from __future__ import annotations

import numpy as np

from hybrid_lab.exercises.framework import Case, Exercise, register
from hybrid_lab.ops import ssm

SCANS = ("hybrid_lab.ops.ssm:selective_scan_step", "hybrid_lab.ops.ssm:ssm_scan", "hybrid_lab.ops.ssm:ssm_chunked",
         "hybrid_lab.ops.ssm:selective_scan", "hybrid_lab.ops.ssm:ssd_scan", "hybrid_lab.ops.ssm:ssd_chunked")


# ------------------------------------------------------------------------------------------ 01.1 one step
def ssm_step_reference(h, x_t, dt_t, A, B_t, C_t, D):
    """h: (D, N); x_t, dt_t, D: (D,); A: (D, N); B_t, C_t: (N,) -> (y_t: (D,), h_t: (D, N))."""
    y, h_new = ssm.selective_scan_step(x_t[None], dt_t[None], A, B_t[None], C_t[None], D, h[None])
    return y[0], h_new[0]


def _step_case(rng, name, Dm=None, N=None, h_zero=False, dt=None, D_zero=False):
    Dm = int(rng.integers(1, 9)) if Dm is None else Dm
    N = int(rng.integers(1, 7)) if N is None else N
    h = np.zeros((Dm, N)) if h_zero else rng.normal(size=(Dm, N))
    dt_t = rng.uniform(0.01, 1.0, Dm) if dt is None else np.full(Dm, float(dt))
    A = -rng.uniform(0.5, 4.0, (Dm, N))
    D = np.zeros(Dm) if D_zero else rng.normal(size=Dm)
    return Case(name, (h, rng.normal(size=Dm), dt_t, A, rng.normal(size=N), rng.normal(size=N), D),
                note=f"D={Dm}, N={N}")


def _step_cases(rng):
    return ([_step_case(rng, "random") for _ in range(4)]
            + [_step_case(rng, "t = 0 (h = 0)", h_zero=True), _step_case(rng, "Δ = 0 (skip the token)", dt=0.0),
               _step_case(rng, "large Δ (Δ = 50)", dt=50.0), _step_case(rng, "D = 0", D_zero=True),
               _step_case(rng, "one channel, one state", Dm=1, N=1)])


register(Exercise("01.1", "ssm_step", ssm_step_reference, _step_cases, outputs=("y", "h"),
                  axes={"y": ("d",), "h": ("d", "n")}, forbidden=SCANS))


# ------------------------------------------------------------------------------------------ 01.2 decay matrix
def decay_matrix_reference(c):
    """c: (q,) running sums of Δ·A inside a chunk -> L: (q, q), L[t, s] = exp(c[t] - c[s]) if s <= t else 0."""
    c = np.asarray(c, dtype=np.float64)
    diff = c[:, None] - c[None, :]
    return np.where(np.tri(len(c), dtype=bool), np.exp(np.minimum(diff, 0.0)), 0.0)


def _decay_cases(rng):
    def run(name, steps):
        return Case(name, (np.cumsum(steps),), note=f"q={len(steps)}, c = {np.round(np.cumsum(steps)[:4], 3)}...")
    return ([run("random", -rng.uniform(0.0, 2.0, int(rng.integers(2, 20)))) for _ in range(4)]
            + [run("q = 1", -rng.uniform(0.0, 2.0, 1)),
               run("large Δ (c spans thousands)", -rng.uniform(50.0, 200.0, 24)),
               run("Δ = 0 (no decay)", np.zeros(6)),
               run("one large step in the middle", np.r_[-rng.uniform(0, 1, 4), -500.0, -rng.uniform(0, 1, 4)])])


# float_errors: exp of the unmasked c_t - c_s overflows for large Δ; the lesson is to clamp before exp, so an
# overflow fails the case even when a later mask (np.tril) would hide the inf
register(Exercise("01.2", "decay_matrix", decay_matrix_reference, _decay_cases, axes={"result": ("t", "s")},
                  float_errors=True))


# ------------------------------------------------------------------------------------------ 01.3 / 01.4 SSD scans
def ssd_recurrent_reference(x, dt, A, B, C, D):
    """x: (L, H, P); dt: (L, H); A, D: (H,); B, C: (L, N) -> (y: (L, H, P), h: (H, P, N)), from h_0 = 0."""
    y, h = ssm.ssd_scan(x[None], dt[None], A, B[None], C[None], D)
    return y[0], h[0]


def ssd_chunked_reference(x, dt, A, B, C, D, chunk_size):
    """As ``ssd_recurrent_reference``, computed chunk by chunk (``chunk_size`` tokens; the last chunk may be short)."""
    y, h = ssm.ssd_chunked(x[None], dt[None], A, B[None], C[None], D, chunk_size=chunk_size)
    return y[0], h[0]


def _ssd_inputs(rng, L, H, P, N, dt_scale=1.0, D_zero=False):
    x = rng.normal(size=(L, H, P))
    dt = np.log1p(np.exp(rng.normal(-1.0, 0.7, (L, H)))) * dt_scale
    A = -np.exp(rng.normal(0.0, 0.5, H))
    D = np.zeros(H) if D_zero else rng.normal(size=H)
    return (x, dt, A, rng.normal(size=(L, N)), rng.normal(size=(L, N)), D)


def _shape(rng, L=None):
    L = int(rng.integers(2, 40)) if L is None else L
    return L, int(rng.integers(1, 4)), int(rng.integers(1, 5)), int(rng.integers(1, 6))


def _ssd_cases(rng):
    def case(name, L=None, **kw):
        L, H, P, N = _shape(rng, L)
        return Case(name, _ssd_inputs(rng, L, H, P, N, **kw), note=f"L={L}, H={H}, P={P}, N={N}")
    return ([case("random") for _ in range(3)]
            + [case("L = 1", L=1), case("large Δ (×1e3)", dt_scale=1e3), case("D = 0", D_zero=True)])


SSD_AXES = {"y": ("t", "head", "p"), "h": ("head", "p", "n")}
register(Exercise("01.3", "ssd_recurrent", ssd_recurrent_reference, _ssd_cases, outputs=("y", "h"), axes=SSD_AXES,
                  forbidden=SCANS))


def _chunked_cases(rng):
    def case(name, chunk, L=None, **kw):
        L, H, P, N = _shape(rng, L)
        chunk = chunk(L) if callable(chunk) else chunk
        return Case(name, _ssd_inputs(rng, L, H, P, N, **kw) + (chunk,),
                    note=f"L={L}, chunk_size={chunk}, H={H}, P={P}, N={N}")
    return ([case("ragged L", lambda L: int(rng.integers(2, 9)), L=int(rng.integers(2, 9)) * 5 + 3)
             for _ in range(3)]
            + [case("L a multiple of the chunk", 8, L=32), case("chunk = 1", 1),
               case("chunk >= L", lambda L: L + int(rng.integers(0, 5))),
               case("large Δ (×1e3)", 4, L=21, dt_scale=1e3), case("L = 1", 4, L=1)])


# float_errors, as 01.2: the notebook builds the chunk's decay with the (clamped) decay_matrix of 01.2 and teaches
# that "clamping the exponent keeps the chunked form finite for any Δ" (its pitfall: exp(c_t - c_s) before the mask
# overflows for large Δ); the large-Δ case makes an unclamped decay overflow, which a later mask (np.tril) would hide
register(Exercise("01.4", "ssd_chunked", ssd_chunked_reference, _chunked_cases, outputs=("y", "h"), axes=SSD_AXES,
                  forbidden=SCANS, forbidden_names=("ssd_recurrent",), float_errors=True,
                  preamble="import numpy as np\nfrom hybrid_lab.exercises.lab01 import decay_matrix_reference as "
                           "decay_matrix"))
