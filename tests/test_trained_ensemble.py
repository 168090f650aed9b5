"""trained.ensemble: K (seed, lr) members of one architecture trained together (torch.func.vmap) are K plain trainings.

On the CPU, at a shrunk MQAR (32 tokens, 2-4 pairs, 25 steps of 8 sequences, warm-up 5):

- each member of a 2-member ensemble (different seeds and learning rates) has the losses and the stored (fp16)
  weights of a plain single-model training with ``torch.optim.AdamW`` (betas 0.9 / 0.95, weight decay 0.1 on the
  matrices only), ``clip_grad_norm_(1.0)``, the lr ``lr * train.lr_factor(step, exp)`` and the data
  ``train._batch_fn(exp)(seed, step)``; its final accuracies are those of its fp16 weights;
- two runs of one ensemble are bit-identical; a member's numbers depend neither on the member order nor on the other
  members (a one-member ensemble gives the same bits); ``--verify`` finds a rerun bit-identical and a changed weight;
- mismatched configs / members are refused with ValueError;
- ``code_version`` ignores docstrings, comments and the names left out of training, and changes with any training
  code and with ``extra``; every stored checkpoint that records a code version was trained by the current code.

The GPU counterpart (CUDA graph, bit-identical to the stored checkpoints) is tests/test_gpu_training_repro.py.
"""
import dataclasses
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from trained_helpers import one_torch_thread  # noqa: E402, F401 (an autouse fixture)

from hybrid_lab.trained import ensemble, train  # noqa: E402
from hybrid_lab.trained import families as fam  # noqa: E402

EXP = dataclasses.replace(train.EXPERIMENTS["mqar"], seq_len=32, task_kw={"n_pairs": (2, 4)}, steps=25, batch=8,
                          warmup=5, eval_every=10)
MEMBERS = [(0, 1e-2), (1, 3e-3)]
MODELS = ["mamba2_hybrid", "dense"]
EVAL = train.eval_sets(EXP, n=32, split="val")


@pytest.fixture(autouse=True, scope="module")
def torch_flags_restored():
    """train_ensemble switches torch to deterministic algorithms for the whole process and sets
    CUBLAS_WORKSPACE_CONFIG (train.main too): undo both after this module (nbval's kernels inherit the environment)."""
    flags = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,
             torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    cublas = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    yield
    torch.use_deterministic_algorithms(flags[0])
    (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32,
     torch.backends.cudnn.allow_tf32) = flags[1:]
    if cublas is None:
        os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    else:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = cublas


def run_ensemble(model, members, **kw):
    cfgs = [train.model_config(EXP, model, s) for s, _ in members]
    return ensemble.train_ensemble(cfgs, members, train._Schedule(EXP), train._batch_fn(EXP),
                                   train._sets_fn(EVAL), "cpu", EXP.eval_every, None, EXP.weight_decay, **kw)


@pytest.fixture(scope="module")
def ensembles():
    return {m: run_ensemble(m, MEMBERS) for m in MODELS}


def plain_training(model, seed, lr):
    """One model, the textbook way. Returns (the torch twin, the losses of every step)."""
    net = fam.torch_model(train.model_config(EXP, model, seed))
    decay = [p for p in net.parameters() if p.ndim >= 2]
    rest = [p for p in net.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}], lr=lr,
                            betas=(0.9, 0.95))
    make_batch = train._batch_fn(EXP)
    losses = []
    for step in range(EXP.steps):
        x, y = make_batch(seed, step)
        for g in opt.param_groups:
            g["lr"] = lr * train.lr_factor(step, EXP)
        opt.zero_grad()
        logits = net(torch.as_tensor(x))
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.as_tensor(y).reshape(-1),
                                                 ignore_index=-1)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return net, losses


# ------------------------------------------------------------------------------------------ the maths of a member
@pytest.mark.parametrize("model", MODELS)
def test_each_member_is_a_plain_adamw_training(ensembles, model):
    res = ensembles[model]
    assert len(res["weights"]) == len(res["log"]) == len(res["final"]) == len(MEMBERS)
    for k, (seed, lr) in enumerate(MEMBERS):
        net, losses = plain_training(model, seed, lr)
        log = res["log"][k]
        assert log["step"] == [0, 10, 20, EXP.steps - 1]
        assert np.allclose(log["loss"], [losses[s] for s in log["step"]], rtol=0, atol=2e-5), (log["loss"], losses)
        want = {n: w.astype(np.float16).astype(np.float32) for n, w in net.numpy_weights().items()}
        got = res["weights"][k]
        assert set(got) == set(want)
        for n in want:
            assert got[n].dtype == np.float32 and got[n].shape == want[n].shape
            assert np.array_equal(got[n], got[n].astype(np.float16).astype(np.float32)), f"{n}: not fp16-rounded"
            # a value on an fp16 rounding boundary may round either way: one fp16 step where that is > 1e-3 (|w| >= 2)
            tol = np.maximum(1e-3, np.spacing(np.abs(want[n]).astype(np.float16)).astype(np.float32))
            assert (np.abs(got[n] - want[n]) <= tol).all(), (model, k, n, float(np.abs(got[n] - want[n]).max()))
        # the final accuracies are those of the stored (fp16) weights
        net16 = fam.torch_model(train.model_config(EXP, model, seed), got)
        with torch.no_grad():
            acc = train.evaluate(lambda t: net16(torch.as_tensor(t)).numpy(), EVAL)
        assert res["final"][k] == pytest.approx(acc, abs=1.5 / (32 * 2)), (res["final"][k], acc)
        assert log["eval_step"] == [10, 20, EXP.steps]
        assert set(log["eval"][-1]) == {"pairs=2", "pairs=4"}


def test_the_members_learn_apart(ensembles):
    """Different seeds and learning rates: different weights (a broadcast bug would make them equal)."""
    w = ensembles["dense"]["weights"]
    assert any(not np.array_equal(w[0][n], w[1][n]) for n in w[0])
    assert ensembles["dense"]["log"][0]["loss"] != ensembles["dense"]["log"][1]["loss"]


# ------------------------------------------------------------------------------------------ reproducibility
def _same(a, b, ka=0, kb=0):
    wa, wb = a["weights"][ka], b["weights"][kb]
    assert list(wa) == list(wb)
    bad = [n for n in wa if not np.array_equal(wa[n], wb[n])]
    assert not bad, f"weights differ: {bad[:4]}"
    assert a["log"][ka] == b["log"][kb]
    assert a["final"][ka] == b["final"][kb]


@pytest.mark.parametrize("model", MODELS)
def test_two_runs_are_bit_identical(ensembles, model):
    again = run_ensemble(model, MEMBERS)
    for k in range(len(MEMBERS)):
        _same(ensembles[model], again, k, k)
    assert again["step_mode"] == "eager"
    v = again["versions"]
    assert {"python", "numpy", "torch", "code_version", "device", "threads"} <= set(v)


@pytest.mark.parametrize("model", MODELS)
def test_a_member_depends_neither_on_the_order_nor_on_the_others(ensembles, model):
    reversed_ = run_ensemble(model, MEMBERS[::-1])
    _same(ensembles[model], reversed_, 0, 1)
    _same(ensembles[model], reversed_, 1, 0)
    alone = run_ensemble(model, MEMBERS[1:])
    _same(ensembles[model], alone, 1, 0)


def test_mismatched_configs_and_members_are_refused():
    cfgs = [train.model_config(EXP, "dense", s) for s, _ in MEMBERS]
    args = (train._Schedule(EXP), train._batch_fn(EXP), train._sets_fn(EVAL), "cpu")
    with pytest.raises(ValueError, match="one config per member"):
        ensemble.train_ensemble(cfgs, MEMBERS[:1], *args)
    with pytest.raises(ValueError, match="one config per member"):
        ensemble.train_ensemble(cfgs[:1], MEMBERS, *args)
    with pytest.raises(ValueError, match="non-empty"):
        ensemble.train_ensemble([], [], *args)
    mixed = [cfgs[0], train.model_config(EXP, "mamba2", 1)]
    with pytest.raises(ValueError, match="one architecture"):
        ensemble.train_ensemble(mixed, MEMBERS, *args)


def test_verify_finds_a_rerun_bit_identical_and_a_changed_weight(tmp_path, capsys):
    """``hybrid-lab train ... --verify`` on the CPU (the GPU test runs it on the stored checkpoints): a second run of
    the same command is bit-identical; one changed stored weight is reported."""
    from hybrid_lab.trained import store

    args = ["mqar", "--quick", "--models", "dense", "--steps", "10", "--seeds", "4", "--out", str(tmp_path)]
    assert train.main(args) == 0
    capsys.readouterr()
    assert train.main(args + ["--verify"]) == 0
    assert "every weight and accuracy bit-identical" in capsys.readouterr().out
    path = tmp_path / "mqar" / "dense" / "seed4"
    w, meta = store.read_checkpoint(path)
    w["embed"] = w["embed"].copy()
    w["embed"].flat[0] += np.float16(0.01)
    store.save_checkpoint(path, w, meta)
    assert train.main(args + ["--verify"]) == 1
    assert "dense seed 4: weights differ (embed)" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------ code_version
@pytest.fixture
def sources(tmp_path):
    """A copy of ensemble.TRAINING_SOURCES under tmp_path (the package's relative layout); its code_version is the
    package's."""
    pkg = Path(ensemble.__file__).resolve().parents[1]
    for rel in ensemble.TRAINING_SOURCES:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(pkg / rel, tmp_path / rel)
    assert ensemble.code_version("x", root=tmp_path) == ensemble.code_version("x")
    return tmp_path


def _edit(path, old, new):
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))


def test_code_version_ignores_docstrings_comments_and_what_no_training_runs(sources):
    before = ensemble.code_version("x", root=sources)
    tr = sources / "trained" / "train.py"
    _edit(tr, '"""The learning rate at ``step``', '"""The (edited) learning rate at ``step``')
    _edit(tr, "    if step < exp.warmup:\n", "    # a new comment\n    if step < exp.warmup:  # and another\n")
    _edit(sources / "trained" / "ensemble.py", "from __future__ import annotations\n",
          "from __future__ import annotations\n# a comment at the top\n")
    # the command line, the aggregation and the table of experiments are not training code
    _edit(tr, 'print(f"checkpoints and results.json under {out}")', 'print(f"checkpoints under {out}")')
    _edit(tr, 'MQAR_MODELS = ("mamba2", "mamba2_N32", "mamba2_N64", "mamba2_hybrid", "dense", "dense_local", "dense_mha")',
          'MQAR_MODELS = ("mamba2", "dense")')
    assert ensemble.code_version("x", root=sources) == before


@pytest.mark.parametrize("rel, old, new", [
    ("trained/train.py", "return 0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * t))",
     "return 0.2 + 0.8 * 0.5 * (1 + np.cos(np.pi * t))"),
    ("trained/ensemble.py", "b1, b2, eps = 0.9, 0.95, 1e-8", "b1, b2, eps = 0.9, 0.999, 1e-8"),
    ("core/blocks.py", "import numpy as np\n", "import numpy as np\nimport math\n"),
])
def test_code_version_changes_with_training_code(sources, rel, old, new):
    before = ensemble.code_version("x", root=sources)
    _edit(sources / rel, old, new)
    assert ensemble.code_version("x", root=sources) != before


def test_code_version_changes_with_extra():
    exp = train.EXPERIMENTS["mqar"]
    texts = {train.training_text(exp, m) for m in exp.models}
    texts.add(train.training_text(dataclasses.replace(exp, steps=exp.steps + 1), "dense"))
    assert len({ensemble.code_version(t) for t in texts}) == len(texts) == len(exp.models) + 1
    assert ensemble.code_version("") != ensemble.code_version("x")
    assert len(ensemble.code_version("x")) == 16


def test_the_stored_checkpoints_were_trained_by_this_code():
    """Every checkpoint that records a code version (those of the vmapped ensemble) matches the current code: a
    change to the training code needs a retraining (hybrid-lab train ... ; the GPU test checks bit-identity)."""
    current, checked = {}, 0
    for p in train.list_checkpoints():
        meta = json.loads(p.with_suffix(".json").read_text())
        stored = meta.get("versions", {}).get("code_version")
        if stored is None:
            continue
        key = (meta["experiment"], meta["model"])
        if key not in current:
            current[key] = ensemble.code_version(train.training_text(train.EXPERIMENTS[key[0]], key[1]))
        assert stored == current[key], f"{p}: trained by code version {stored}, the code is now {current[key]}"
        checked += 1
    assert checked >= len(train.EXPERIMENTS["mqar"].models)
