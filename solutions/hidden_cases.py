"""The lecturer's hidden cases: added to each exercise's public cases when ``hybrid-lab grade`` decides a verdict.

Students never get this file (it sits with the answers in ``solutions/``), so an answer fitted to what the public
cases look like (their sizes, their ranges) fails here. ``CASES = {exercise id: fn(rng) -> [Case]}``; each function
builds its cases with the exercise's own generators, outside the public ranges. Exercises not listed are graded on
their public cases (with the grader's own seeds).
"""
from __future__ import annotations

import numpy as np

from hybrid_lab.exercises.framework import Case


def _ssm_step(rng):
    def case(name, Dm, N, dt=None):
        dt_t = rng.uniform(0.01, 1.0, Dm) if dt is None else np.full(Dm, float(dt))
        return Case(name, (rng.normal(size=(Dm, N)), rng.normal(size=Dm), dt_t, -rng.uniform(0.5, 4.0, (Dm, N)),
                           rng.normal(size=N), rng.normal(size=N), rng.normal(size=Dm)), note=f"D={Dm}, N={N}")
    return [case("hidden: wide (D = 33, N = 17)", 33, 17), case("hidden: tiny Δ (1e-6)", 12, 9, 1e-6),
            case("hidden: huge Δ (1e3)", 10, 8, 1e3)]


def _decay(rng):
    def run(name, steps):
        return Case(name, (np.cumsum(steps),), note=f"q={len(steps)}")
    return [run("hidden: a long chunk (q = 96)", -rng.uniform(0.0, 0.5, 96)),
            run("hidden: zeros and huge steps mixed", np.where(rng.random(40) < 0.5, 0.0, -rng.uniform(100, 900, 40)))]


def _ssd(rng, chunked):
    out = []
    for name, (L, H, P, N) in (("hidden: long (L = 203, H = 4, P = 8, N = 16)", (203, 4, 8, 16)),
                               ("hidden: wide heads (L = 45, H = 6, P = 12, N = 9)", (45, 6, 12, 9))):
        dt = np.log1p(np.exp(rng.normal(-1.0, 0.7, (L, H))))
        args = (rng.normal(size=(L, H, P)), dt, -np.exp(rng.normal(0.0, 0.5, H)), rng.normal(size=(L, N)),
                rng.normal(size=(L, N)), rng.normal(size=H))
        out.append(Case(name, args + ((int(rng.integers(9, 40)),) if chunked else ()),
                        note=f"L={L}, H={H}, P={P}, N={N}"))
    return out


CASES = {"01.1": _ssm_step, "01.2": _decay, "01.3": lambda rng: _ssd(rng, False), "01.4": lambda rng: _ssd(rng, True)}
