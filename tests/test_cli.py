"""The ``hybrid-lab`` command: each subcommand does what the README promises (plumbing only; the grader itself is
tested in test_course.py, the lab in a browser in e2e/)."""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from hybrid_lab.course import cli, pipeline as course

ROOT = course.repo_root()
SUBCOMMANDS = ("open", "grade", "build", "check", "execute", "bench", "slides", "export")


@pytest.fixture
def calls(monkeypatch):
    """Record the commands cli would run instead of running them (and, for `open`, the files of the Jupyter config
    dir it passes on JUPYTER_CONFIG_PATH, read while the call runs: the dir is temporary)."""
    seen = []

    def fake_call(cmd, **kwargs):
        env = kwargs.get("env") or {}
        first = env.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep)[0]
        files = {str(f.relative_to(first)): json.loads(f.read_text()) for f in Path(first).rglob("*.json")} \
            if first else {}
        seen.append((list(cmd), kwargs, files))
        return 0

    monkeypatch.setattr(cli.subprocess, "call", fake_call)
    return seen


def test_console_script_is_installed_and_lists_subcommands():
    exe = Path(sys.executable).with_name("hybrid-lab")
    assert exe.exists(), f"{exe}: the console script of pyproject's [project.scripts] is not installed"
    out = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    for name in SUBCOMMANDS:
        assert name in out.stdout, f"`hybrid-lab --help` does not list {name!r}"


@pytest.mark.parametrize("euid", [0, 1000])
def test_open_starts_jupyterlab_on_labs(calls, monkeypatch, euid):
    monkeypatch.setattr(cli.os, "geteuid", lambda: euid, raising=False)
    assert cli.main(["open"]) == 0
    (cmd, _, _), = calls
    assert cmd[:4] == [sys.executable, "-m", "jupyter", "lab"]
    assert f"--ServerApp.root_dir={ROOT / 'labs'}" in cmd
    assert ("--allow-root" in cmd) == (euid == 0)


def test_open_puts_the_venv_on_the_terminals_path_and_turns_the_news_off(calls, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", "/somewhere/else")
    monkeypatch.setenv("SHELL", "/bin/bash")
    cli.main(["open"])
    (_, kwargs, files), = calls
    env = kwargs["env"]
    # the terminal's shell inherits this PATH: `hybrid-lab` (and this python, pip) first
    assert env["PATH"].split(os.pathsep) == [str(Path(sys.executable).parent), "/usr/bin", "/bin"]
    assert env["JUPYTER_CONFIG_PATH"].split(os.pathsep)[1:] == ["/somewhere/else"]
    # JupyterLab 4 asks "Would you like to get notified about official Jupyter news?" while the setting fetchNews is
    # "none"; the plugin that asks (and checks for updates) is disabled for this server
    assert files["labconfig/page_config.json"] == {"disabledExtensions": {cli.NEWS_PLUGIN: True}}
    server = files["jupyter_server_config.json"]
    # a non-login shell: a login shell re-reads /etc/profile, which resets PATH on Debian/Ubuntu
    assert server["ServerApp"]["terminado_settings"] == {"shell_command": ["/bin/bash"]}
    assert server["LabApp"]["news_url"] is None


def test_the_news_plugin_exists_in_the_installed_jupyterlab():
    """NEWS_PLUGIN must name a plugin of the JupyterLab this venv has (a renamed plugin would make the setting a
    no-op): its id and its question are in the built application."""
    import jupyterlab

    static = Path(sys.prefix) / "share" / "jupyter" / "lab" / "static"
    bundles = [p.read_text(errors="ignore") for p in static.glob("*.js")]
    assert bundles, f"no JupyterLab bundle under {static} (jupyterlab {jupyterlab.__version__})"
    assert any(f'id:"{cli.NEWS_PLUGIN}"' in b and "get notified about official Jupyter news" in b for b in bundles)


def test_open_solutions_folder(calls):
    cli.main(["open", "--solutions"])
    assert f"--ServerApp.root_dir={ROOT / 'solutions'}" in calls[0][0]


def test_open_passes_extra_arguments_to_jupyter_lab(calls):
    # the README's own example
    cli.main(["open", "--port", "8890", "--no-browser"])
    assert calls[0][0][-3:] == ["--port", "8890", "--no-browser"]


def test_open_returns_jupyters_exit_code(monkeypatch):
    monkeypatch.setattr(cli.subprocess, "call", lambda cmd, **kw: 3)
    assert cli.main(["open"]) == 3


def _calls(monkeypatch):
    """Replace what the commands call by recorders: [(function name, args, kwargs)]; each returns 7 / [] / rows."""
    seen = []

    def rec(name, ret=None):
        return lambda *a, **kw: seen.append((name, a, kw)) or ret

    monkeypatch.setattr(cli.course, "grade", rec("grade", []))
    monkeypatch.setattr(cli.course, "build", rec("build", []))
    monkeypatch.setattr(cli.course, "execute", rec("execute"))
    monkeypatch.setattr(cli.course, "out_of_sync", rec("out_of_sync", []))
    monkeypatch.setattr(cli.classgrade, "grade_class", rec("grade_class", []))
    monkeypatch.setattr(cli.release, "build_assignments", rec("build_assignments", []))
    monkeypatch.setattr(cli.release, "export_nbgrader", rec("export_nbgrader", []))
    return seen


NO_OPTS = {"unsafe": None, "seed": None, "hidden": None, "require_sandbox": False, "partial": False}


@pytest.mark.parametrize("argv, expected", [
    (["grade", "labs/01_x.ipynb"], ("grade", ("labs/01_x.ipynb",), {"fail_fast": False, "quiet": False,
                                                                    "timeout": 300, "lab": None, **NO_OPTS})),
    (["grade", "-x", "a.ipynb", "--lab", "01", "--timeout", "9"],
     ("grade", ("a.ipynb",), {"fail_fast": True, "quiet": False, "timeout": 9, "lab": "01", **NO_OPTS})),
    (["grade", "a.ipynb", "--unsafe", "--seed", "5", "--cases", "h.py"],
     ("grade", ("a.ipynb",), {"fail_fast": False, "quiet": False, "timeout": 300, "lab": None, "unsafe": True,
                              "seed": 5, "hidden": "h.py", "require_sandbox": False, "partial": False})),
    (["grade", "subs/", "--lab", "01", "--csv", "g.csv", "-j", "2"],
     ("grade_class", (["subs/"], "01"), {"csv_path": "g.csv", "feedback": None, "jobs": 2, "cell_timeout": 120,
                                         "time_limit": 900, "memory_mb": 8192, "unsafe": None, "seed": None,
                                         "hidden": None, "roster": None, "gradebook": None, "exports": None})),
    (["grade", "subs/", "--lab", "01", "--roster", "r.csv", "--gradebook", "gb.csv", "--exports", "lms"],
     ("grade_class", (["subs/"], "01"), {"csv_path": None, "feedback": None, "jobs": None, "cell_timeout": 120,
                                         "time_limit": 900, "memory_mb": 8192, "unsafe": None, "seed": None,
                                         "hidden": None, "roster": "r.csv", "gradebook": "gb.csv",
                                         "exports": "lms"})),
    (["build"], ("build", (None,), {"force": False})),
    (["build", "solutions/01_x.ipynb", "--force"], ("build", (["solutions/01_x.ipynb"],), {"force": True})),
    (["build", "--mode", "assignment", "--out", "d"], ("build_assignments", ("d", None), {})),
    (["export", "nbgrader", "c"], ("export_nbgrader", ("c", None), {})),
    (["check"], ("out_of_sync", (), {})),
    (["execute", "a.ipynb"], ("execute", ("a.ipynb",), {})),
])
def test_commands_call_the_course_functions(monkeypatch, argv, expected):
    seen = _calls(monkeypatch)
    cli.main(argv)
    assert seen == [expected]


# ------------------------------------------------------------------------------------------------ one-line failures
def _hybrid_lab(*args, cwd=ROOT, hide=()):
    """Run the installed command (``hide``: modules made unimportable first, as if not installed)."""
    if hide:
        code = ("import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in hide) +
                "from hybrid_lab.course.cli import main\nsys.exit(main(sys.argv[1:]))")
        cmd = [sys.executable, "-c", code, *args]
    else:
        cmd = [str(Path(sys.executable).with_name("hybrid-lab")), *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)


def _not_a_lab(tmp_path):
    nb = {"cells": [{"cell_type": "code", "source": "print(1)", "metadata": {}, "outputs": [],
                     "execution_count": None}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "01_my_notes.ipynb").write_text(json.dumps(nb))
    return str(tmp_path / "01_my_notes.ipynb")


def _lab_without_header(tmp_path):
    text = (ROOT / "labs" / "01_selective_ssm.ipynb").read_text().replace("# Exercise 01.2 (2 points, medium, ~15 min)", "# mine")
    (tmp_path / "01_selective_ssm.ipynb").write_text(text)
    return str(tmp_path / "01_selective_ssm.ipynb")


def _broken_json(tmp_path):
    (tmp_path / "01_selective_ssm.ipynb").write_text('{"cells": [')
    return str(tmp_path / "01_selective_ssm.ipynb")


# (arguments, or a function of tmp_path returning the notebook to grade), modules to hide, what the line must say
FAILURES = {
    "no command": ([], (), "hybrid-lab open"),
    "unknown command": (["frobnicate"], (), "unknown command 'frobnicate'"),
    "grade without a notebook": (["grade"], (), "which notebook? hybrid-lab grade labs/01_selective_ssm.ipynb"),
    "unknown option": (["grade", "labs/01_selective_ssm.ipynb", "--bad"], (), "`grade` does not take --bad"),
    "missing file": (["grade", "labs/01_selective_sm.ipynb"], (), "no such file"),
    "a folder": (["grade", "labs"], (), "which lab are these submissions of? name it"),
    "not a notebook": (["grade", "README.md"], (), "is not a notebook (.ipynb)"),
    "not a lab's name": (["grade", "docs/notes.ipynb"], (), "no such file"),
    "broken notebook": (_broken_json, (), "is not a readable notebook"),
    "a notebook that is not a lab": (_not_a_lab, (), "is not a lab notebook"),
    "an exercise's first line changed": (_lab_without_header, (), "no cell starts with '# Exercise 01.2 (2 points, medium, ~15 min)"),
    "grading deps missing": (["grade", "labs/01_selective_ssm.ipynb"], ("nbclient",), 'pip install -e ".[lab]"'),
    "jupyterlab missing": (["open"], ("jupyterlab",), 'JupyterLab is not installed in this Python'),
    "execute without a notebook": (["execute"], (), "which notebook?"),
    "execute a missing file": (["execute", "solutions/nope.ipynb"], (), "no such file"),
    "build a missing file": (["build", "solutions/nope.ipynb"], (), "no such file"),
    "no benchmark matched": (["bench", "no-such-bench"], (), "no benchmark matched no-such-bench"),
}


@pytest.mark.parametrize("case", FAILURES, ids=list(FAILURES))
def test_every_failure_is_one_line_with_the_fix(case, tmp_path):
    """A failure of `hybrid-lab` prints one line (what is wrong; the command that fixes it), exits
    non-zero, never shows a traceback."""
    args, hide, says = FAILURES[case]
    if callable(args):
        args = ["grade", args(tmp_path)]
    p = _hybrid_lab(*args, hide=hide)
    lines = (p.stdout + p.stderr).splitlines()
    assert p.returncode != 0, lines
    assert len(lines) == 1 and lines[0].startswith("hybrid-lab: "), lines
    assert "Traceback" not in p.stdout + p.stderr
    assert says in lines[0], lines[0]


def test_missing_deps_line_names_this_pythons_pip():
    p = _hybrid_lab("grade", "labs/01_selective_ssm.ipynb", hide=("nbclient", "ipykernel"))
    assert "nbclient, ipykernel" in p.stderr
    assert f"{Path(sys.executable).relative_to(ROOT)} -m pip install -e" in p.stderr or sys.executable in p.stderr


def test_grading_needs_only_the_lab_extra(tmp_path):
    """The README's open install (`.[lab,gpu]`) is enough to grade: the grader imports neither pytest nor nbval, and
    every package it imports is in the `lab` extra (or required by one that is)."""
    import tomllib
    from importlib.metadata import requires

    lab = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["lab"]
    names = {re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0].lower().replace("-", "_") for r in lab}
    pulled = {re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0].lower().replace("-", "_")
              for n in names for r in (requires(n) or []) if "extra ==" not in r}
    for mod in course.GRADE_DEPS:
        assert mod in names | pulled, f"grading imports {mod}, which the lab extra does not bring"
    p = _hybrid_lab("grade", str(ROOT / "labs" / "00_three_costs.ipynb"), hide=("pytest", "nbval"))
    assert p.returncode == 1 and "not done yet" in p.stdout and "Traceback" not in p.stdout + p.stderr, p.stderr


def _fake_repo(tmp_path, monkeypatch, names):
    (tmp_path / "benchmarks").mkdir()
    for n in names:
        (tmp_path / "benchmarks" / f"{n}.py").write_text("")
    monkeypatch.setattr(cli.course, "repo_root", lambda: tmp_path)


def test_bench_runs_matching_scripts_from_the_repo_root(calls, tmp_path, monkeypatch, capsys):
    _fake_repo(tmp_path, monkeypatch, ["bench_ssm", "bench_dsa", "helper"])
    assert cli.main(["bench"]) == 0
    ran = [Path(c[0][-1]).name for c in calls]
    assert ran == ["bench_dsa.py", "bench_ssm.py"]  # sorted, only bench_*.py
    assert all(c[0][0] == sys.executable and c[1]["cwd"] == tmp_path for c in calls)
    calls.clear()
    assert cli.main(["bench", "ssm"]) == 0
    assert [Path(c[0][-1]).name for c in calls] == ["bench_ssm.py"]


def test_bench_without_match_exits_2(calls, tmp_path, monkeypatch, capsys):
    _fake_repo(tmp_path, monkeypatch, ["bench_ssm"])
    assert cli.main(["bench", "nothing-like-this"]) == 2
    assert not calls
    assert "no benchmark matched nothing-like-this; the benchmarks are: ssm" in capsys.readouterr().err


def test_bench_fails_when_a_script_fails(tmp_path, monkeypatch, capsys):
    _fake_repo(tmp_path, monkeypatch, ["bench_a", "bench_b"])
    monkeypatch.setattr(cli.subprocess, "call", lambda cmd, **kw: 1 if cmd[-1].endswith("bench_a.py") else 0)
    assert cli.main(["bench"]) != 0


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _terminal_says(port: int, command: str) -> str:
    """Open a JupyterLab terminal (REST + websocket, as the browser does), run ``command``, return the one line it
    printed."""
    import websocket  # websocket-client: a dependency of jupyter_server

    req = urllib.request.Request(f"http://127.0.0.1:{port}/api/terminals", data=b"{}", method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        name = json.load(r)["name"]
    ws = websocket.create_connection(f"ws://127.0.0.1:{port}/terminals/websocket/{name}", timeout=30)
    try:
        # the marker is printed as __END__ but typed (and echoed by the terminal) as __"END"__
        ws.send(json.dumps(["stdin", f'{command}; echo __"END"__\r']))
        seen, deadline = "", time.monotonic() + 60
        while time.monotonic() < deadline and not re.search(r"(?m)^__END__", seen.replace("\r", "")):
            kind, *data = json.loads(ws.recv())
            if kind == "stdout":
                seen += data[0]
    finally:
        ws.close()
    lines = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", seen).replace("\r", "").splitlines()  # no colours, no echo marks
    assert "__END__" in lines, f"the terminal did not run {command!r}: {lines[-5:]}"
    return lines[lines.index("__END__") - 1]  # the line the command printed (one)


@pytest.mark.slow
def test_open_really_serves_the_lab(tmp_path):
    """`hybrid-lab open --solutions` brings up JupyterLab (as root too: --allow-root) serving solutions/, with the
    news plugin disabled in the page JupyterLab serves, and a terminal whose shell finds this venv's `hybrid-lab`."""
    exe = Path(sys.executable).with_name("hybrid-lab")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "JUPYTER_PATH"}
    for k in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "JUPYTERLAB_SETTINGS_DIR",
              "JUPYTERLAB_WORKSPACES_DIR"):
        env[k] = str(tmp_path / k.lower())
        Path(env[k]).mkdir()
    # settings through a config file, not arguments: the command is tested exactly as a student types it
    (tmp_path / "jupyter_config_dir" / "jupyter_server_config.json").write_text(json.dumps({
        "ServerApp": {"port": port, "port_retries": 0, "open_browser": False, "ip": "127.0.0.1",
                      "disable_check_xsrf": True},  # the test opens a terminal with a plain POST
        "IdentityProvider": {"token": ""}}))
    cmd = [str(exe), "open", "--solutions"]
    # its own process group: hybrid-lab starts jupyter lab as a child, and both must go at the end
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            text=True, start_new_session=True)
    try:
        deadline, status = time.monotonic() + 90, None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents", timeout=5) as r:
                    status, listing = r.status, json.load(r)
                break
            except (urllib.error.URLError, OSError):
                time.sleep(0.5)
        assert proc.poll() is None, f"hybrid-lab open exited {proc.returncode}:\n{proc.stdout.read()[-3000:]}"
        assert status == 200
        served = {item["name"] for item in listing["content"]}
        assert {p.name for p in (ROOT / "solutions").glob("*.ipynb")} <= served, "--solutions serves solutions/"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/lab", timeout=30) as r:
            page = r.read().decode()
        config = json.loads(re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>',
                                      page, re.S).group(1))
        assert cli.NEWS_PLUGIN in config["disabledExtensions"], "the news question would pop up"
        assert exe.parent == Path(_terminal_says(port, "command -v hybrid-lab").strip()).parent
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        deadline = time.monotonic() + 30  # the jupyter child too (it shuts down on SIGTERM)
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.stdout.close()
