"""The grader's own verdicts: plain data across the process boundary, the answer removed from the student's library,
and the same verdicts as the in-notebook check on every solution and every kept wrong answer."""
from __future__ import annotations

import importlib
import subprocess
import sys

import numpy as np
import pytest

from hybrid_lab.core import codec, sandbox
from hybrid_lab.exercises import evaluate, framework, get, verdicts
from tests.test_exercises import ALL, IDS, _function, _patched, _strip_markers, _wrong


# ------------------------------------------------------------------------------------------------ codec
@pytest.mark.parametrize("value", [
    None, True, 3, -2 ** 70, 1.5, float("nan"), float("inf"), "s", [1, [2.0]], (1, (2, "x")), {"a": 1, 2: (3,)},
    np.float32(1.25), np.int64(-7), np.bool_(True), np.arange(6.0).reshape(2, 3), np.array(3.0),
    np.zeros((0, 4), np.int32), np.array([True, False]), np.arange(12, dtype=np.float16).reshape(3, 4)[:, ::2],
    np.asfortranarray(np.arange(6.0).reshape(2, 3)),
])
def test_codec_round_trip(value):
    back = codec.decode(codec.encode(value))
    if isinstance(value, int) and abs(value) >= 2 ** 63:          # beyond numpy: plain equality
        assert back == value
    else:
        assert framework.compare_values(back, value) is None
    assert type(back) is type(value) or (isinstance(value, np.ndarray) and type(back) is np.ndarray)
    if isinstance(value, np.ndarray):
        assert back.dtype == value.dtype and back.shape == value.shape
    if isinstance(value, tuple):
        assert isinstance(back, tuple)


@pytest.mark.parametrize("value, what", [
    (np.array([object()]), "dtype object"), (object(), "type object"), ({(1, 2): 3}, "keys"),
    (np.array(["a"]), "dtype <U1"), (lambda: 0, "type function"), (1 + 2j, "type complex"),
])
def test_codec_refuses_what_cannot_cross(value, what):
    with pytest.raises(ValueError, match=what):
        codec.encode(value)


@pytest.mark.parametrize("text, what", [
    ('{"array": "|O", "shape": [1], "data": ""}', "does not cross"),
    ('{"array": "<f8", "shape": [2], "data": "AAAAAAAAAAA="}', "bytes do not match"),
    ('{"__reduce__": 1}', "unexpected item"), ('{"scalar": "<f8", "data": "AA=="}', "bytes do not match"),
    ('{"array": "<f8", "shape": [-1], "data": ""}', "shape"), ('{"float": "1e5"}', "unexpected item"),
    ('{"dict": [[true, 1]]}', "bad dict item"),
])
def test_codec_decode_builds_only_plain_data(text, what):
    with pytest.raises(ValueError, match=what):
        codec.decode(text)


def test_codec_refuses_oversized_text():
    with pytest.raises(ValueError, match="more than"):
        codec.decode(" " * (codec.MAX_BYTES + 1))


# ------------------------------------------------------------------------------------------------ the sandbox
needs_sandbox = pytest.mark.skipif(not sandbox.available()[0], reason=f"no sandbox here: {sandbox.available()[1]}")


@needs_sandbox
def test_sandbox_shows_the_system_read_only_and_one_scratch_folder(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    outside = tmp_path / "outside.txt"
    code = ("import os, socket, numpy\n"
            f"open({str(scratch / 'ok.txt')!r}, 'w').write('1')\n"
            f"print('outside visible', os.path.exists({str(tmp_path)!r} + '/scratch/ok.txt'))\n"
            "for p in ('/usr/x', '/etc/x'):\n"
            "    try:\n        open(p, 'w')\n        print('wrote', p)\n    except OSError:\n        print('ro', p)\n"
            f"print('sees repo', os.path.exists({str(verdicts._package_dir('hybrid_lab').parent / 'solutions')!r}))\n"
            "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=2)\n    print('net')\n"
            "except OSError:\n    print('no net')\n"
            f"os.system('echo x > {outside}')\n")
    cmd, env = sandbox.wrap([sys.executable, "-c", code], scratch)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, preexec_fn=sandbox.limits(30))
    assert r.returncode == 0, r.stderr
    assert "ro /usr/x" in r.stdout and "ro /etc/x" in r.stdout and "no net" in r.stdout, r.stdout
    assert "sees repo False" in r.stdout, r.stdout
    assert (scratch / "ok.txt").exists() and not outside.exists()


@needs_sandbox
def test_sandbox_limits_cpu_time(tmp_path):
    cmd, env = sandbox.wrap([sys.executable, "-c", "while True: pass"], tmp_path)
    r = subprocess.run(cmd, env=env, capture_output=True, timeout=60, preexec_fn=sandbox.limits(2))
    assert r.returncode != 0                             # SIGXCPU / SIGKILL after 2 s of CPU


# ------------------------------------------------------------------------------------------------ answers removed
@pytest.mark.parametrize("ex_id", sorted({e.id for _, e, _, _ in ALL}))
def test_the_students_library_has_no_answer(ex_id, tmp_path):
    """In the stripped copy every forbidden callable of the exercise and its reference raise LibraryCallError;
    the copy is the package otherwise (it imports; the solution passes through it below)."""
    ex = get(ex_id)
    verdicts.stripped_package(ex, tmp_path)
    probe = ("import sys, importlib, inspect, json\nfrom hybrid_lab.exercises import framework\n"
             f"ex = framework.get({ex_id!r})\nout = []\n"
             "for obj in [ex.reference] + [framework.resolve_forbidden(s) for s in ex.forbidden]:\n"
             "    fn = getattr(obj, 'fn', obj)\n"
             "    fn = inspect.unwrap(fn.fget if isinstance(fn, property) else getattr(fn, '__func__', fn))\n"
             "    try:\n        fn(*([None] * getattr(getattr(fn, '__code__', None), 'co_argcount', 0)))\n"
             "        out.append('ran')\n"
             "    except framework.LibraryCallError:\n        out.append('removed')\n"
             "    except Exception as e:\n        out.append(f'{getattr(fn, \"__qualname__\", fn)}: {e!r}')\n"
             "print(json.dumps(out))\n")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                       env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin", "TRITON_INTERPRET": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    got = r.stdout.strip().splitlines()[-1]
    assert set(__import__("json").loads(got)) == {"removed"}, (ex_id, got)


def _cells(sol, upto: str, replace: str | None = None):
    from tests.test_exercises import _exercise_cells
    out = []
    for e, src, _ in _exercise_cells(sol):
        out.append((e.id, _strip_markers(replace if (e.id == upto and replace is not None) else src)))
        if e.id == upto:
            return out
    raise AssertionError(upto)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("answers_removed")


@pytest.mark.parametrize("sol, ex, src, nxt", ALL, ids=IDS)
def test_trusted_verdict_agrees_with_the_check(sol, ex, src, nxt, cache, tmp_path):
    """Through the sandboxed worker: the solution passes, every kept wrong answer fails (one seed each)."""
    unsafe = not sandbox.available()[0]
    v = verdicts.verdict(ex.id, _cells(sol, ex.id), 11, tmp_path / "ok", cache, unsafe=unsafe)
    assert v["status"] == "pass", (v["message"], v["details"], v["stderr"][-5:])
    for k, (what, old, new) in enumerate(_wrong(sol.name[:2]).get(ex.id, [])):
        wrong = _patched(src, old, new)
        fn, ns = _function(sol, ex.id, wrong)
        local = evaluate(ex.id, fn, 11, globals_=ns)
        v = verdicts.verdict(ex.id, _cells(sol, ex.id, wrong), 11, tmp_path / f"w{k}", cache, unsafe=unsafe)
        assert v["status"] == "fail", f"{ex.id} wrong answer '{what}': {v['message']}"
        if "switched off" not in local.message and "not available" not in v["message"]:
            assert v["message"] == local.message, (what, v["message"], local.message)


def test_worker_module_is_importable_without_running():
    importlib.import_module("hybrid_lab.exercises.worker")
