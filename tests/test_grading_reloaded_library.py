"""Delegation through a private copy of the library fails in the grader, exercise by exercise.

The audit passed 01.4, 04.2, 06.2, 08.3 and 11.3 with a function that loads its own copy of the library module that
holds the answer (``importlib.util.spec_from_file_location`` on the module's file, or its source compiled under
another file name) and calls the answer there: the in-notebook check switches the library off by attribute, and a
fresh copy of the module has fresh attributes. The grader's worker runs on a copy of the package with the answers'
bodies *removed from the source* (:func:`verdicts.stripped_package`), so whatever copy the student's code loads, the
answer is not in it. Each test: one small submission (the lab's solution cells before the exercise, then the
attack) through :func:`verdicts.verdict`, the trusted verdict the grader computes; about 5-15 s each.

Each attack is first shown to be a working answer where the library is whole (it agrees with the reference on a
case, in this process), so a fail in the grader is the grader's doing.
"""
from __future__ import annotations

import numpy as np
import pytest

from hybrid_lab.core import sandbox
from hybrid_lab.exercises import framework, get, verdicts
from tests.test_exercises import ALL, SOURCES
from tests.test_trusted_verdicts import _cells

SOLUTION = {e.id: sol for sol, e, _, _ in ALL}
UNSAFE = not sandbox.available()[0]

PRIVATE = '''import importlib.util, sys
def _private(module, name):
    """A private copy of ``module``, loaded from its file under another name."""
    spec = importlib.util.spec_from_file_location(name, module.__file__)
    lib = importlib.util.module_from_spec(spec)
    sys.modules[name] = lib
    spec.loader.exec_module(lib)
    return lib
'''

COMPILED = '''import sys, types
def _private(module, name):
    """A private copy of ``module``: its source compiled under another file name, run in a new module."""
    lib = types.ModuleType(name)
    lib.__file__ = "/tmp/" + name + ".py"
    sys.modules[name] = lib
    with open(module.__file__) as f:
        exec(compile(f.read(), lib.__file__, "exec"), lib.__dict__)
    return lib
'''

ATTACKS = {
    "01.4": PRIVATE + '''import hybrid_lab.ops.ssm as _ssm
_lib = _private(_ssm, "my_ssm")
def ssd_chunked(x, dt, A, B, C, D, chunk_size):
    y, h = _lib.ssd_chunked(x[None], dt[None], A, B[None], C[None], D, chunk_size=chunk_size)
    return y[0], h[0]
''',
    "04.2": PRIVATE + '''import hybrid_lab.models.lightning_indexer as _li
_lib = _private(_li, "my_indexer")
def indexer_step(params, x_queries, x_keys, p, q_pos, lr, clip=None, stage="dense", topk=None):
    D, Hi, di = params["Wq"].shape
    ix = _lib.LightningIndexer(D, Hi, di, use_bias="bw" in params)
    ix.params = {n: np.array(a, dtype=np.float64) for n, a in params.items()}
    loss, grads = ix.loss_and_grads(x_queries, x_keys, p, q_pos, stage, topk)
    raw = {n: g.copy() for n, g in grads.items()}
    _lib.optimizer_step(ix.params, grads, lr, clip=clip)
    return loss, raw, ix.params
''',
    "06.2": PRIVATE + '''import hybrid_lab.models.hysparse2 as _h2
_lib = _private(_h2, "my_hysparse2")
def decode_step(model, token, cache):
    return _lib.HySparse2.decode_step(model, token, cache)
''',
    "08.3": COMPILED + '''import hybrid_lab.models.forecast as _fc, hybrid_lab.core.optim as _optim
fc, optim = _private(_fc, "my_forecast"), _private(_optim, "my_optim")
fc.Adam, fc.clip_grad_norm = optim.Adam, optim.clip_grad_norm          # the private forecast uses the private optim
def forecast_train_step(W, x, kc, teacher, mask, k, m, v, t, lr=0.05, max_norm=0.5, betas=(0.9, 0.95),
                        eps=1e-6):
    mask = np.asarray(mask, dtype=bool)
    sel = fc.teacher_topk(teacher, k, mask[None, :, None, :])
    setup = fc.TrainSetup([x], [kc], [teacher], mask, [sel], np.arange(x.shape[1]), int(k))
    params = {"W0": np.array(W, dtype=np.float64)}
    opt = optim.Adam(params, lr=lr, betas=betas, eps=eps)
    opt.m["W0"], opt.v["W0"], opt.t = np.array(m, dtype=float), np.array(v, dtype=float), int(t)
    loss, grads = fc.train_step(params, setup, opt, max_norm)
    return loss, grads["W0"], params["W0"], opt.m["W0"], opt.v["W0"]
''',
    "11.3": COMPILED + '''import hybrid_lab.serving.offload_sim as _os
_lib = _private(_os, "my_offload_sim")
def fetch_bytes(prev_blocks, new_blocks, resident, block_bytes):
    on_gpu = np.concatenate([np.asarray(prev_blocks, np.int64), np.asarray(resident, np.int64)])
    return len(_lib.new_blocks(np.asarray(new_blocks, np.int64), on_gpu)) * int(block_bytes)
''',
}


def _attack_function(ex_id: str):
    """The attack's function, defined in this process (where the library is whole)."""
    ns: dict = {"__name__": f"attack_{ex_id.replace('.', '_')}"}
    exec(compile(get(ex_id).preamble, "<preamble>", "exec"), ns)
    path = SOURCES / f"attack_{ex_id.replace('.', '_')}.py"
    path.write_text(ATTACKS[ex_id])
    exec(compile(ATTACKS[ex_id], str(path), "exec"), ns)
    return ns[get(ex_id).function]


def test_the_audit_exercises_are_all_here():
    assert sorted(ATTACKS) == ["01.4", "04.2", "06.2", "08.3", "11.3"]


@pytest.mark.parametrize("ex_id", sorted(ATTACKS))
def test_a_reloaded_copy_of_the_library_fails_in_the_grader(ex_id, tmp_path):
    ex = get(ex_id)
    case = ex.cases(np.random.default_rng(0))[0]
    fn = _attack_function(ex_id)
    got, want = framework._run(ex, fn, case), framework._run(ex, ex.reference, case)
    assert framework.compare(ex, got, want, case) is None, f"{ex_id}: the attack is not even a working answer"

    v = verdicts.verdict(ex_id, _cells(SOLUTION[ex_id], ex_id, ATTACKS[ex_id]), 1, tmp_path / "worker",
                         tmp_path / "cache", unsafe=UNSAFE)
    assert v["status"] == "fail", (ex_id, v["message"], v["details"], v["stderr"][-5:])
    assert "is not available while an exercise is graded" in v["message"], (ex_id, v["message"], v["details"])
