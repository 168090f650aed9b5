"""Running a student's code where it can harm nothing: bubblewrap (Debian's ``bubblewrap``, the ``bwrap`` command).

Every process the grader starts for a submission (the notebook's kernel, the exercise workers) runs as
``bwrap ... python ...`` with:

* no network (its own network namespace), its own process namespace (every process it started dies with it: a
  background process cannot edit files after the grade), ``--die-with-parent``;
* a read-only view of the system (``/usr``, ``/etc``, the Python installation, the venv) and of the folders the
  caller names (the package a worker may import), nothing else of the disk: no home folder, no other
  submission, not the checkout's ``solutions/`` or ``tests/``, not the grader's own files;
* one writable scratch folder (HOME and TMPDIR point there) and a private ``/tmp``;
* CPU-time and address-space limits (``resource.setrlimit``, inherited by everything it starts).

The audit hook of the grader's audit hook (``hybrid_lab.course.pipeline.guard_writes``) stays inside as a second line. Where bubblewrap
is missing (macOS, Windows, a machine without it) :func:`available` says why in one line, and the grader refuses
to grade unless told ``--unsafe`` (the audit hook and a separate process only: a determined student can then write
files and read the library's source).
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["available", "wrap", "limits", "MEMORY_LIMIT", "INSTALL_HINT"]

MEMORY_LIMIT = 8 * 2 ** 30            # address space per sandboxed process (torch and triton map several GB)
INSTALL_HINT = "install bubblewrap (Debian / Ubuntu: sudo apt-get install bubblewrap; Fedora: sudo dnf install " \
               "bubblewrap)"
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")


@functools.lru_cache(maxsize=None)
def available() -> tuple[bool, str]:
    """(True, path of bwrap) when a bubblewrap sandbox starts here, else (False, one line saying why)."""
    if not sys.platform.startswith("linux"):
        return False, f"bubblewrap runs on Linux only (this is {sys.platform})"
    exe = shutil.which("bwrap")
    if exe is None:
        return False, f"bubblewrap (bwrap) is not installed; {INSTALL_HINT}"
    try:
        r = subprocess.run([exe, "--ro-bind", "/", "/", "--dev", "/dev", "--unshare-net", "--unshare-pid",
                            "--die-with-parent", "true"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bubblewrap did not start ({type(exc).__name__}: {exc})"
    if r.returncode != 0:
        why = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1][:160]
        return False, f"bubblewrap cannot make a sandbox here ({why}; user namespaces may be off)"
    return True, exe


def _python_roots() -> list[str]:
    """The folders this Python needs to start: its installation, the venv, and where their files really are."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    roots |= {os.path.realpath(r) for r in list(roots)}
    return sorted(roots)


# bwrap dies of the SIGINT a Jupyter interrupt sends to the kernel's process group (and takes the kernel with it):
# started through this, bwrap ignores SIGINT; the kernel inside installs its own handler and is interrupted
_IGNORE_SIGINT = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); os.execv(sys.argv[1], sys.argv[1:])"


def wrap(argv: list, scratch, readonly=(), env: dict | None = None, unsetenv=(),
         interruptible: bool = False) -> tuple[list, dict]:
    """(command, environment) running ``argv`` inside the sandbox: ``scratch`` writable (and the working folder),
    ``readonly`` folders visible read-only at their own paths, the system and this Python read-only, nothing else;
    ``unsetenv``: variables removed inside (one its launcher sets after this call); ``interruptible``: a SIGINT
    to the process group reaches the program inside, not bwrap (a Jupyter kernel's interrupt). Raises RuntimeError when bubblewrap is not available (ask :func:`available` first)."""
    ok, exe = available()
    if not ok:
        raise RuntimeError(exe)
    scratch = os.path.realpath(scratch)
    cmd = [exe, "--die-with-parent", "--unshare-all", "--cap-drop", "ALL", "--dev", "/dev", "--proc", "/proc",
           "--tmpfs", "/tmp"]
    for d in _SYSTEM:
        if os.path.lexists(d):
            cmd += ["--ro-bind-try" if not os.path.islink(d) else "--symlink",
                    *((d, d) if not os.path.islink(d) else (os.readlink(d), d))]
    for d in _python_roots() + [os.path.realpath(p) for p in readonly]:
        if os.path.exists(d):
            cmd += ["--ro-bind", d, d]
    cmd += ["--bind", scratch, scratch, "--chdir", scratch]
    for var in unsetenv:
        cmd += ["--unsetenv", var]
    env = dict(env if env is not None else os.environ)
    env.update(HOME=scratch, TMPDIR=scratch, MPLCONFIGDIR=str(Path(scratch) / ".matplotlib"),
               TRITON_CACHE_DIR=str(Path(scratch) / ".triton"), XDG_CACHE_HOME=str(Path(scratch) / ".cache"),
               IPYTHONDIR=str(Path(scratch) / ".ipython"), JUPYTER_RUNTIME_DIR=str(Path(scratch) / ".jupyter"))
    cmd = cmd + ["--"] + [str(a) for a in argv]
    if interruptible:
        cmd = [sys.executable, "-c", _IGNORE_SIGINT] + cmd
    return cmd, env


def limits(cpu_seconds: int | None, memory: int | None = MEMORY_LIMIT):
    """A ``preexec_fn`` setting the CPU-time and address-space limits of the process it starts (POSIX)."""
    def apply():
        import resource
        for what, soft in ((resource.RLIMIT_CPU, cpu_seconds), (resource.RLIMIT_AS, memory)):
            if soft:                                    # never above a limit the grader itself runs under
                _, hard = resource.getrlimit(what)
                soft = int(soft) if hard == resource.RLIM_INFINITY else min(int(soft), hard)
                resource.setrlimit(what, (soft, soft if what == resource.RLIMIT_AS else min(soft + 5, hard)
                                          if hard != resource.RLIM_INFINITY else soft + 5))
        os.setpgrp()                      # its own process group: the grader can stop it and all it started
    return apply
