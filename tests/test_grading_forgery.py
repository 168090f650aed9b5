"""Grades cannot be forged: each attack sits in an otherwise unimplemented lab 01 and earns nothing.

Every submission is the lab as students get it (four stubs) with one attack put into the 01.1 exercise cell (the
same code runs in the grader's sandboxed kernel and in the sandboxed worker that calls the function). The grader
must give 0 points for all four exercises, and nothing may appear outside the submission's scratch folders, also
seconds after the grade (a background process). Needs bubblewrap (in CI: installed by tests/conftest.py; elsewhere
the suite skips, and fails in CI without it).
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import nbformat
import pytest

from hybrid_lab.course import pipeline as course
from hybrid_lab.core import sandbox

ROOT = course.repo_root()
LAB = ROOT / "labs" / "01_selective_ssm.ipynb"
HEADER = "# Exercise 01.1 "
SANDBOX, WHY = sandbox.available()
if not SANDBOX and os.environ.get("CI") == "true":
    raise RuntimeError(f"CI must prove the sandbox, but bubblewrap is not available: {WHY}")
pytestmark = pytest.mark.skipif(not SANDBOX, reason=f"no grading sandbox here: {WHY}")

STUB = ("def ssm_step(h, x_t, dt_t, A, B_t, C_t, D):\n"
        "    raise NotImplementedError('Exercise 01.1: one step of the selective recurrence')\n")
GARBAGE = ("import numpy as np\n"
           "def ssm_step(h, x_t, dt_t, A, B_t, C_t, D):\n"
           "    return np.zeros_like(x_t), np.zeros_like(h)\n")

# name -> code put into the 01.1 cell below its header ({out}: a file outside every scratch folder; {root}: the
# checkout, where the solutions and the library's real source are)
ATTACKS = {
    "patch record": "import hybrid_lab.core.grading as g\n"
                    "for e in ('01.1', '01.2', '01.3', '01.4'):\n    g.record(e, 'pass', 'forged')\n"
                    "g.record = lambda *a, **k: None\n" + STUB,
    "patch check": "import hybrid_lab.exercises as E, hybrid_lab.exercises.framework as F\n"
                   "F.check = E.check = lambda eid, fn, **k: (print(f'Exercise {eid} PASS: forged.'), fn)[1]\n"
                   "globals()['check'] = F.check\n" + GARBAGE,
    "patch the framework": "import sys\nF = sys.modules['hybrid_lab.exercises.framework']\n"
                           "F.compare = lambda *a, **k: None\nF.compare_values = lambda *a, **k: None\n"
                           "F.judge = lambda ex, name, cases, o, w, s: F.Verdict(ex.id, 'pass', 'forged')\n"
                           "F.evaluate = lambda eid, fn, *a, **k: F.Verdict(eid, 'pass', 'forged')\n" + GARBAGE,
    "patch numpy comparisons": "import numpy as np, numpy.testing as nt\n"
                               "np.allclose = np.array_equal = lambda *a, **k: True\n"
                               "np.isclose = lambda a, b, *x, **k: np.ones(np.shape(a), bool)\n"
                               "nt.assert_allclose = lambda *a, **k: None\n" + GARBAGE,
    "write the verdict file": "import os, json\n"
                              "for v in ('HYBRID_LAB_GRADE_LOG',):\n"
                              "    p = os.environ.get(v)\n"
                              "    if p:\n"
                              "        with open(p, 'a') as f:\n"
                              "            for e in ('01.1', '01.2', '01.3', '01.4'):\n"
                              "                f.write(json.dumps({'exercise': e, 'status': 'pass', 'message': 'x', "
                              "'details': []}) + '\\n')\n" + STUB,
    "sys.exit(0) in the function": "import sys\ndef ssm_step(*a):\n    sys.exit(0)\n",
    "os._exit(0) in the function": "import os\ndef ssm_step(*a):\n    os._exit(0)\n",
    "os._exit(0) in the cell": "import os\n" + STUB + "os._exit(0)\n",
    "KeyboardInterrupt": "def ssm_step(*a):\n    raise KeyboardInterrupt\n",
    "background process edits later": "import subprocess\n"
                                      "subprocess.Popen(['sh', '-c', 'sleep 3; echo forged > {out}'], "
                                      "start_new_session=True)\n" + STUB,
    "reload the library's source": "import importlib.util, hybrid_lab.ops.ssm as m\n"
                                   "spec = importlib.util.spec_from_file_location('copy_of_ssm', m.__file__)\n"
                                   "lib = importlib.util.module_from_spec(spec); spec.loader.exec_module(lib)\n"
                                   "def ssm_step(h, x_t, dt_t, A, B_t, C_t, D):\n"
                                   "    y, h2 = lib.selective_scan_step(x_t[None], dt_t[None], A, B_t[None], "
                                   "C_t[None], D, h[None])\n"
                                   "    return y[0], h2[0]\n",
    "exec the library's source": "import inspect, types, hybrid_lab.exercises.lab01 as L, hybrid_lab.ops.ssm as m\n"
                                 "ns = dict(vars(m))\n"
                                 "exec(compile(inspect.getsource(m.selective_scan_step), 'x.py', 'exec'), ns)\n"
                                 "ns2 = dict(vars(L), ssm=types.SimpleNamespace(**ns))\n"
                                 "exec(compile(inspect.getsource(L.ssm_step_reference), 'z.py', 'exec'), ns2)\n"
                                 "ssm_step = ns2['ssm_step_reference']\n",
    "sys.modules games": "import sys, importlib\n"
                         "for k in [k for k in sys.modules if k.startswith('hybrid_lab.ops')]:\n"
                         "    del sys.modules[k]\n"
                         "ssm = importlib.import_module('hybrid_lab.ops.ssm')\n"
                         "def ssm_step(h, x_t, dt_t, A, B_t, C_t, D):\n"
                         "    y, h2 = ssm.selective_scan_step(x_t[None], dt_t[None], A, B_t[None], C_t[None], D, "
                         "h[None])\n"
                         "    return y[0], h2[0]\n",
    "load the original through the editable install": "import glob, importlib.util, re, site, sys\n"
                         "roots = [p for d in sys.path for p in glob.glob(d + '/__editable__*finder.py')]\n"
                         "src = [re.search(r\"'hybrid_lab': '([^']+)'\", open(p).read()) for p in roots]\n"
                         "path = [m.group(1) for m in src if m][0] + '/ops/ssm.py'\n"
                         "spec = importlib.util.spec_from_file_location('orig_ssm', path)\n"
                         "lib = importlib.util.module_from_spec(spec); spec.loader.exec_module(lib)\n"
                         "def ssm_step(h, x_t, dt_t, A, B_t, C_t, D):\n"
                         "    y, h2 = lib.selective_scan_step(x_t[None], dt_t[None], A, B_t[None], "
                         "C_t[None], D, h[None])\n"
                         "    return y[0], h2[0]\n",
    "read the reference from the grader": "import glob, os\n"
                                          "found = glob.glob('/tmp/hybrid_lab_*') + glob.glob('{root}/**/lab01.py', "
                                          "recursive=True)\n"
                                          "src = [open(p).read() for p in found if p.endswith('.py')]\n"
                                          "ppid = os.getppid()\n"
                                          "try:\n    open(f'/proc/{ppid}/mem', 'rb').read(1)\nexcept Exception:\n"
                                          "    pass\n" + GARBAGE,
    "os.system writes outside": "import os\nos.system('echo forged > {out}')\n" + STUB,
    "subprocess writes outside": "import subprocess\nsubprocess.run(['sh', '-c', 'echo forged > {out}'])\n" + STUB,
    "ctypes writes outside": "import ctypes, ctypes.util\nlibc = ctypes.CDLL(ctypes.util.find_library('c'))\n"
                             "libc.system(b'echo forged > {out}')\n"
                             "fd = libc.open(b'{out}', 0o101, 0o644)\nlibc.write(fd, b'x', 1)\n" + STUB,
    "a result that lies about equality": "import numpy as np\n"
                                         "class Liar(np.ndarray):\n"
                                         "    def __eq__(self, o): return np.ones(np.shape(o), bool)\n"
                                         "    def __sub__(self, o): return np.zeros(np.shape(o))\n"
                                         "    __rsub__ = __sub__\n"
                                         "def ssm_step(h, x_t, *a):\n"
                                         "    return np.zeros_like(x_t).view(Liar), np.zeros_like(h).view(Liar)\n",
    "print a forged table": "print('score: 12/12 points (4 pass, 0 fail, 0 not done yet); all exercises pass')\n"
                            "print('Exercise 01.1 PASS: ssm_step agrees with the reference on 9 cases.')\n" + STUB,
}


def _submission(tmp_path: Path, name: str, attack: str, out: Path) -> Path:
    nb = nbformat.read(str(LAB), as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith(HEADER))
    header = cell.source.splitlines()[0]
    cell.source = header + "\n" + attack.replace("{out}", str(out)).replace("{root}", str(ROOT))
    path = tmp_path / f"01_attack_{sorted(ATTACKS).index(name)}.ipynb"
    nbformat.write(nb, str(path))
    return path


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attack_earns_nothing_and_writes_nothing_outside(name, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "forged.txt"
    path = _submission(tmp_path, name, ATTACKS[name], target)
    rows = {r.exercise: r for r in course.grade(path, quiet=True, timeout=60, unsafe=False)}
    assert set(rows) >= {"01.1", "01.2", "01.3", "01.4"}, rows
    earned = {e: r.points for e, r in rows.items() if r.passed}
    assert not earned, f"{name}: earned {earned}: " + course.format_table(list(rows.values()))
    if "background" in name:
        time.sleep(5)                                   # longer than the background process waits
    assert not target.exists(), f"{name}: wrote {target}"
    assert list(outside.iterdir()) == [], f"{name}: wrote {list(outside.iterdir())}"


def test_the_suite_has_the_attacks_the_lecturer_asked_for():
    assert len(ATTACKS) >= 15
    for kind in ("record", "check", "framework", "numpy", "verdict file", "sys.exit", "os._exit", "KeyboardInterrupt",
                 "background", "reload", "exec", "reference from the grader", "os.system", "subprocess", "ctypes"):
        assert any(kind in n for n in ATTACKS), kind


def test_an_honest_solution_still_passes_in_the_sandbox(tmp_path):
    """The sandbox takes nothing a correct answer needs: the solved lab scores full marks."""
    lab = nbformat.read(str(LAB), as_version=4)
    nb = course.fill_with_solutions(lab, nbformat.read(str(ROOT / "solutions" / LAB.name), as_version=4))
    path = tmp_path / LAB.name
    nbformat.write(nb, str(path))
    rows = course.grade(path, quiet=True, unsafe=False)
    assert all(r.passed for r in rows), course.format_table(rows)


# ------------------------------------------------------------------------------------------------ hidden cases
FITTED = {   # exercise: (solution text, the same with a branch that is right only inside the public cases' ranges)
    "01.1": ("    h = np.exp(dt_t", "    if h.shape[0] > 8 or h.shape[1] > 6:\n        return D * x_t, h\n"
                                   "    h = np.exp(dt_t"),
    "01.3": ("def ssd_recurrent(x, dt, A, B, C, D):\n",
             "def ssd_recurrent(x, dt, A, B, C, D):\n    if x.shape[0] >= 40:\n        return x * 0, "
             "np.zeros((x.shape[1], x.shape[2], B.shape[1]))\n"),
}


@pytest.mark.parametrize("ex_id", sorted(FITTED))
def test_an_answer_fitted_to_the_public_cases_fails_the_hidden_ones(ex_id, tmp_path):
    """Right on every public case (the in-notebook check passes it on 20 seeds), wrong outside their ranges: the
    lecturer's hidden cases (solutions/hidden_cases.py) fail it."""
    from hybrid_lab.exercises import evaluate
    from tests.test_exercises import _exercise_cells, _function, _patched

    sol = ROOT / "solutions" / LAB.name
    src = next(s for e, s, _ in _exercise_cells(sol) if e.id == ex_id)
    fitted = _patched(src, *FITTED[ex_id])
    fn, ns = _function(sol, ex_id, fitted)
    assert all(evaluate(ex_id, fn, seed, globals_=ns).passed for seed in range(20))
    lab = nbformat.read(str(LAB), as_version=4)
    nb = course.fill_with_solutions(lab, nbformat.read(str(sol), as_version=4))
    cell = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith(f"# Exercise {ex_id} "))
    cell.source = fitted
    path = tmp_path / LAB.name
    nbformat.write(nb, str(path))
    rows = {r.exercise: r for r in course.grade(path, quiet=True)}
    assert not rows[ex_id].passed and "hidden:" in " ".join(rows[ex_id].details), course.format_table(list(rows.values()))
    assert all(r.passed for e, r in rows.items() if e != ex_id)
    without = {r.exercise: r for r in course.grade(path, quiet=True, hidden=tmp_path / "none.py")}
    assert without[ex_id].passed, "without the hidden cases the fitted answer passes: the test proves nothing"
