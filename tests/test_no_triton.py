"""The lab where Triton does not install (macOS, Windows), simulated on Linux: ``triton`` made unimportable.

A ``sitecustomize`` on PYTHONPATH puts a finder first on ``sys.meta_path`` that refuses ``triton`` (as a venv without
it would); every process the test starts inherits it: the notebook's kernel and the grader. Notebook 09 (the
student's lab) must run to the end, show the stored H200 results and say its Triton exercises need Triton; grading
the solved lab reports those exercises as "needs Triton" (0 points, neither FAIL nor "not done yet").
The same for torch (an Intel Mac: no torch wheels): notebook 07 must run to the end, say that its live two-process
run needs torch, and still compute everything that needs only numpy; its exercises need no torch.
Also here, with Triton: a Triton exercise passes only if the student's own kernel ran, and a kernel that crashes
the interpreter is reported as a crash of that kernel.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAB = ROOT / "labs" / "09_gpu_track.ipynb"
LAB_07 = ROOT / "labs" / "07_pd_disaggregation.ipynb"
SOLVED_07 = ROOT / "solutions" / "07_pd_disaggregation.ipynb"
SOLVED = ROOT / "solutions" / "09_gpu_track.ipynb"
TRITON_IDS = ("09.1", "09.2", "09.3")

BLOCKER = '''
import sys

BLOCKED = {blocked!r}


class _NotInstalled:
    """Refuse the BLOCKED packages, as a machine where they are not installed does."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, _NotInstalled())
'''


PROBES = {"triton": "import gpu_track\ntry:\n    import triton\nexcept ImportError:\n"
                    "    print('blocked', gpu_track.HAS_TRITON)",
          "torch": "from hybrid_lab.serving import pd_workers\ntry:\n    import torch\nexcept ImportError:\n"
                   "    print('blocked', pd_workers.HAS_TORCH)"}


def _env(site: Path, blocked: tuple) -> dict:
    """The environment of a process (and of every process it starts) where ``blocked`` cannot be imported."""
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER.format(blocked=tuple(blocked)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYBRID_LAB_GRADE", "COVERAGE"))}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
    env["HYBRID_LAB_GRADE_UNSAFE"] = "1"       # the blocker's folder is outside what the sandbox shows
    env["MPLBACKEND"] = "Agg"
    probe = subprocess.run([sys.executable, "-c", PROBES[blocked[0]]],
                           env=env, capture_output=True, text=True, timeout=120)
    assert probe.stdout.strip() == "blocked False", probe.stdout + probe.stderr
    return env


@pytest.fixture(scope="module")
def no_triton_env(tmp_path_factory):
    return _env(tmp_path_factory.mktemp("no_triton_site"), ("triton",))


def _run_lab(lab: Path, env: dict, tmp_path: Path) -> str:
    """Run ``lab`` to the end (nbclient raises on the first cell that fails) with a last cell that prints which of
    triton / torch got imported; returns every cell's printed text, stream chunks joined as printed."""
    script = textwrap.dedent(f"""
        import json, sys
        import nbclient, nbformat
        nb = nbformat.read({str(lab)!r}, as_version=4)
        nb.cells.append(nbformat.v4.new_code_cell(
            "import sys; print('loaded:', sorted({{'triton', 'torch'}} & set(sys.modules)))"))
        nbclient.NotebookClient(nb, timeout=300, resources={{"metadata": {{"path": {str(tmp_path)!r}}}}}).execute()
        text = []
        for c in nb.cells:
            for o in c.get("outputs", []):
                if o.get("output_type") == "stream":       # one print may arrive as several stream messages
                    text.append(o.get("text", ""))
                else:
                    text.append("".join(o.get("data", {{}}).get("text/plain", "")) + "\\n")
        print(json.dumps(text))
    """)
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                       timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    return "".join(json.loads(r.stdout.strip().splitlines()[-1]))


# macOS arm64 / Windows: torch without Triton; an Intel Mac: neither (torch has no wheels there)
@pytest.mark.parametrize("blocked", [("triton",), ("triton", "torch")], ids=["no triton", "no triton, no torch"])
def test_lab_09_runs_to_the_end_without_triton(blocked, tmp_path):
    out = _run_lab(LAB, _env(tmp_path / "site", blocked), tmp_path)
    for ex in TRITON_IDS:
        assert f"Exercise {ex} needs Triton" in out, out[:3000]
    assert "machine: NVIDIA H200" in out and "computed ridge:" in out        # the stored H200 run, §5-§6
    assert "loaded: []" in out or ("torch" not in blocked and "loaded: ['torch']" in out), out[-500:]
    assert "FAIL" not in out and "not done yet" not in out


def test_grade_reports_needs_triton_for_the_solved_lab(no_triton_env, tmp_path):
    r = subprocess.run([str(Path(sys.executable).with_name("hybrid-lab")), "grade", str(SOLVED), "--seed", "1"],
                       env=no_triton_env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    rows = {ln.split()[0]: ln for ln in r.stdout.splitlines() if ln.split() and ln.split()[0] in TRITON_IDS}
    assert set(rows) == set(TRITON_IDS), r.stdout + r.stderr[-2000:]
    for ex, line in rows.items():
        assert line.split()[2] == "NEEDS" and "needs Triton" in line, line
    score = next(ln for ln in r.stdout.splitlines() if ln.startswith("score:"))
    assert "0/11 points" in score and "0 fail, 0 not done yet, 3 need Triton" in score, score
    assert "FAILED" not in score


# an Intel Mac: no torch (and no Triton). Notebook 07's live run needs torch; §7-§9 and its exercises do not.
def test_lab_07_runs_to_the_end_without_torch(tmp_path):
    from hybrid_lab.serving.pd_workers import NEEDS_TORCH
    out = _run_lab(LAB_07, _env(tmp_path / "site", ("torch", "triton")), tmp_path)
    for what in ("the two-process hand-off (run_pd)", "measuring the bytes on the wire",
                 "the measured timeline of the live run"):
        assert f"{what} {NEEDS_TORCH}" in out, out[-3000:]
    assert "request 0: D generated" not in out and "errors:" not in out      # the live run was not attempted
    assert "installed on D: []" in out and "P.first_token ->" in out          # §2-§4: numpy
    assert "4 cross KVs 20,480 B vs the source hidden 20,480 B" in out         # §7
    assert "computed (ms): critical path 1327.2" in out                        # §9
    for ex in ("07.1", "07.2", "07.3"):                                       # the stubs: the reference stands in
        assert f"Exercise {ex} not done yet" in out, out[:3000]
    assert "loaded: []" in out and "FAIL" not in out and "needs Triton" not in out, out[-500:]


def test_grade_grades_every_lab_07_exercise_without_torch(tmp_path):
    env = _env(tmp_path / "site", ("torch", "triton"))
    r = subprocess.run([str(Path(sys.executable).with_name("hybrid-lab")), "grade", str(SOLVED_07), "--seed", "1"],
                       env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    score = next((ln for ln in r.stdout.splitlines() if ln.startswith("score:")), r.stdout + r.stderr[-2000:])
    assert "9/9 points (3 pass, 0 fail, 0 not done yet)" in score, score        # no exercise of lab 07 needs torch


# --------------------------------------------------------------------------------------------- with Triton
def _solution_cell(ex_id):
    import nbformat
    from hybrid_lab.course import pipeline as course
    nb = nbformat.read(str(SOLVED), as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    e = next(e for e in course.exercises(nb) if e.id == ex_id)
    return "\n".join(ln for ln in code[e.cell].source.splitlines() if ln.strip() not in (course.BEGIN, course.END))


def _define(src, tmp_path, ex_id):
    from hybrid_lab.exercises.framework import get
    ex = get(ex_id)
    path = tmp_path / f"exercise_{ex_id.replace('.', '_')}.py"     # a real file: @triton.jit reads the source
    path.write_text(src)
    ns = {"__name__": "__main__"}
    exec(compile(ex.preamble, "<preamble>", "exec"), ns)
    exec(compile(src, str(path), "exec"), ns)
    return ns[ex.function], ns


def test_torch_only_launcher_fails_because_no_kernel_ran(tmp_path):
    import gpu_track
    if not gpu_track.HAS_TRITON:     # gpu_track first: it picks the interpreter
        pytest.skip("Triton is not installed")
    import numpy as np
    import torch
    from hybrid_lab.exercises.framework import compare, evaluate, get
    from tests.wrong_answers.lab09 import TORCH_ONLY
    src = _solution_cell("09.2").replace("    grid = (B, Hkv)  ", TORCH_ONLY, 1)
    fn, ns = _define(src, tmp_path, "09.2")
    v = evaluate("09.2", fn, seed=3, globals_=ns)
    assert v.status == "fail" and "launched no @triton.jit kernel of yours" in v.message, v.message
    ex = get("09.2")                                   # its numbers are right: only the launch count fails it
    for case in ex.cases(np.random.default_rng(3)):
        q, k, v_, idx, block_k = case.args
        out = torch.full(q.shape, float("nan"))
        fn(*(torch.from_numpy(a) for a in (q, k, v_, idx.astype(np.int32))), out, block_k=block_k)
        assert compare(ex, out.numpy(), ex.run(ex.reference, case), case) is None, case.name
    ok, ns2 = _define(_solution_cell("09.2"), tmp_path, "09.2")
    assert evaluate("09.2", ok, seed=3, globals_=ns2).passed


def test_kernel_that_crashes_the_interpreter_is_reported_as_its_crash(tmp_path):
    import gpu_track
    if not gpu_track.HAS_TRITON:     # gpu_track first: it picks the interpreter
        pytest.skip("Triton is not installed")
    from hybrid_lab.exercises import verdicts
    src = _solution_cell("09.1").replace("ids = tl.load(IDX + offs_k, mask=in_list, other=-1)",
                                         "ids = tl.load(IDX + offs_k, mask=in_list, other=-1) + 10 ** 8", 1)
    v = verdicts.verdict("09.1", [("09.1", src)], 1, tmp_path / "worker", tmp_path / "cache", unsafe=True)
    assert v["status"] == "fail", v
    said = v["message"] + " ".join(v["details"])
    assert "your kernel crashed" in said and "out-of-bounds" in said and "out of memory" not in said, v


def test_the_registry_finds_gpu_track_and_a_stand_in_that_refuses_to_launch():
    from hybrid_lab.ops import registry

    pkg = registry.gpu_track_package()
    assert pkg.__name__ == "gpu_track" and isinstance(pkg.HAS_TRITON, bool)
    stand_in = registry.triton_stand_in()

    @stand_in.jit
    def kernel(x_ptr, BLOCK: stand_in.language.constexpr):
        pass

    with pytest.raises(ImportError, match="kernel kernel needs Triton"):
        kernel[(1,)](None, BLOCK=4)
