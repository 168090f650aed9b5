"""The ``hybrid-lab`` command: each subcommand does what the README promises (plumbing only; the grader itself is
tested in test_course.py, the lab in a browser in e2e/)."""
import json
import os
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
SUBCOMMANDS = ("open", "grade", "build", "check", "execute", "bench")


@pytest.fixture
def calls(monkeypatch):
    """Record the commands cli would run instead of running them."""
    seen = []

    def fake_call(cmd, **kwargs):
        seen.append((list(cmd), kwargs))
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
    (cmd, _), = calls
    assert cmd[:4] == [sys.executable, "-m", "jupyter", "lab"]
    assert f"--ServerApp.root_dir={ROOT / 'labs'}" in cmd
    assert ("--allow-root" in cmd) == (euid == 0)


def test_open_solutions_folder(calls):
    cli.main(["open", "--solutions"])
    assert f"--ServerApp.root_dir={ROOT / 'solutions'}" in calls[0][0]


def test_open_passes_extra_arguments_to_jupyter_lab(calls):
    # the README's own example
    cli.main(["open", "--port", "8890", "--no-browser"])
    assert calls[0][0][-3:] == ["--port", "8890", "--no-browser"]


def test_unknown_arguments_still_rejected_elsewhere():
    with pytest.raises(SystemExit):
        cli.main(["grade", "labs/01_x.ipynb", "--bad"])


def test_open_returns_jupyters_exit_code(monkeypatch):
    monkeypatch.setattr(cli.subprocess, "call", lambda cmd, **kw: 3)
    assert cli.main(["open"]) == 3


@pytest.mark.parametrize("argv, expected", [
    (["grade", "labs/01_x.ipynb"], ["grade", "labs/01_x.ipynb"]),
    (["grade", "-x", "labs/01_x.ipynb"], ["grade", "labs/01_x.ipynb", "-x"]),
    (["build"], ["build"]),
    (["build", "solutions/01_x.ipynb"], ["build", "solutions/01_x.ipynb"]),
    (["check"], ["check"]),
    (["execute", "a.ipynb", "b.ipynb"], ["execute", "a.ipynb", "b.ipynb"]),
])
def test_course_subcommands_delegate(monkeypatch, argv, expected):
    seen = []
    monkeypatch.setattr(cli.course, "main", lambda a: seen.append(a) or 7)
    assert cli.main(argv) == 7  # the exit code is the course tool's (grade: 1 when an exercise fails)
    assert seen == [expected]


def test_unknown_subcommand_exits_2(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["frobnicate"])
    assert e.value.code == 2


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
    assert "no benchmark matched" in capsys.readouterr().err


def test_bench_fails_when_a_script_fails(tmp_path, monkeypatch, capsys):
    _fake_repo(tmp_path, monkeypatch, ["bench_a", "bench_b"])
    monkeypatch.setattr(cli.subprocess, "call", lambda cmd, **kw: 1 if cmd[-1].endswith("bench_a.py") else 0)
    assert cli.main(["bench"]) != 0


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_open_really_serves_the_lab(tmp_path):
    """`hybrid-lab open --solutions` brings up JupyterLab (as root too: --allow-root) serving solutions/."""
    exe = Path(sys.executable).with_name("hybrid-lab")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "JUPYTER_PATH"}
    for k in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "JUPYTERLAB_SETTINGS_DIR",
              "JUPYTERLAB_WORKSPACES_DIR"):
        env[k] = str(tmp_path / k.lower())
        Path(env[k]).mkdir()
    # settings through a config file, not arguments: the command is tested exactly as a student types it
    (tmp_path / "jupyter_config_dir" / "jupyter_server_config.json").write_text(json.dumps({
        "ServerApp": {"port": port, "port_retries": 0, "open_browser": False, "ip": "127.0.0.1"},
        "IdentityProvider": {"token": ""}, "LabApp": {"news_url": None}}))
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
