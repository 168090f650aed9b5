"""The Colab setup cell: inert outside Colab; on Colab (simulated: a ``google.colab`` module, a stand-in torch, the
commands recorded instead of run) it clones the course's repository, installs it keeping Colab's torch, and picks
the Triton backend when there is a GPU. Every notebook starts with it; "Open in Colab" links; the configuration."""
import os
import subprocess
import sys
import types
import urllib.parse

import pytest

from hybrid_lab.course import cli, colab
from hybrid_lab.course import pipeline as course

REPO = "https://github.com/example-org/hybrid-lab"


def _run_cell(monkeypatch, source, colab_present=True, cuda=False, cloned=False):
    """Execute the cell's code as a kernel would, with Colab's environment simulated; returns what it did."""
    done = {"run": [], "chdir": [], "print": []}
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: done["run"].append((list(cmd), kw)))
    monkeypatch.setattr(os, "chdir", lambda d: done["chdir"].append(d))
    monkeypatch.setattr(os.path, "isdir", lambda d: cloned if d == colab.CLONE else os.path.exists(d))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("HYBRID_LAB_BACKEND", "")        # recorded, so the cell's "triton" is undone afterwards
    monkeypatch.delenv("HYBRID_LAB_BACKEND")
    torch = types.SimpleNamespace(__version__="2.99.0+cu999", cuda=types.SimpleNamespace(is_available=lambda: cuda))
    monkeypatch.setitem(sys.modules, "torch", torch)
    if colab_present:
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    exec(compile(source, "<setup cell>", "exec"), {"print": lambda *a: done["print"].append(" ".join(map(str, a)))})
    done["backend"] = os.environ.get("HYBRID_LAB_BACKEND")
    done["path0"] = sys.path[0]
    return done


def test_outside_colab_the_cell_does_nothing(monkeypatch):
    done = _run_cell(monkeypatch, colab.setup_cell_source(REPO), colab_present=False, cuda=True)
    assert done["run"] == [] and done["chdir"] == [] and done["backend"] is None and done["print"] == []


@pytest.mark.parametrize("cuda", [False, True])
def test_on_colab_it_installs_the_lab_keeping_colabs_torch(monkeypatch, cuda):
    done = _run_cell(monkeypatch, colab.setup_cell_source(REPO, "main"), cuda=cuda)
    (clone, _), (pip, kw) = done["run"]
    assert clone == ["git", "clone", "-q", "--depth", "1", "--branch", "main", REPO, colab.CLONE]
    assert pip[:6] == [sys.executable, "-m", "pip", "install", "-q", "-e"] and pip[6] == colab.CLONE + "[lab,gpu]"
    assert pip[7:] == ["torch==2.99.0+cu999"]                       # Colab's own build, not a download of another
    assert kw == {"check": True}
    assert done["chdir"] == [colab.CLONE + "/labs"] and done["path0"] == colab.CLONE
    assert done["backend"] == ("triton" if cuda else None)
    assert done["print"] == ["Colab: hybrid-lab installed; " + ("Triton backend (GPU)" if cuda else "numpy backend")]


def test_on_colab_a_second_run_does_not_clone_again(monkeypatch):
    done = _run_cell(monkeypatch, colab.setup_cell_source(REPO), cloned=True)
    assert [cmd[:4] for cmd, _ in done["run"]] == [[sys.executable, "-m", "pip", "install"]]


def test_on_colab_without_a_configured_repository_it_says_so(monkeypatch):
    with pytest.raises(RuntimeError, match="names no repository"):
        _run_cell(monkeypatch, colab.setup_cell_source(""))


def test_every_notebook_starts_with_the_setup_cell():
    repo, branch = colab.course_repo(course.repo_root() / "pyproject.toml")
    root = course.repo_root()
    for folder in ("solutions", "labs"):
        for p in sorted((root / folder).glob("[0-9][0-9]_*.ipynb")):
            code = [c for c in course.read_notebook(p).cells if c.cell_type == "code"]
            assert colab.is_setup_cell(course.cell_source(code[0])), f"{folder}/{p.name}: no Colab setup cell first"
            if folder == "labs":
                assert course.cell_source(code[0]) == colab.setup_cell_source(repo, branch), p.name
            assert not code[0].outputs, f"{folder}/{p.name}: the setup cell printed something outside Colab"


def test_build_writes_the_configured_repository_into_the_labs(monkeypatch):
    monkeypatch.setattr(colab, "course_repo", lambda pyproject: (REPO, "fall-2027"))
    sol = sorted((course.repo_root() / "solutions").glob("00_*.ipynb"))[0]
    lab = course.make_lab(course.read_notebook(sol))
    src = next(course.cell_source(c) for c in lab.cells if c.cell_type == "code")
    assert f"REPO, BRANCH, CLONE = {REPO!r}, 'fall-2027', " in src


def test_course_repo_reads_pyproject(tmp_path):
    p = tmp_path / "pyproject.toml"
    p.write_text('[project]\nname = "x"\n\n[tool.hybrid-lab]\n# comment\nrepo = "%s"  # ours\nbranch = "dev"\n\n'
                 '[tool.other]\nrepo = "https://github.com/not/this"\n' % REPO)
    assert colab.course_repo(p) == (REPO, "dev")
    p.write_text('[project]\nname = "x"\n')
    assert colab.course_repo(p) == ("", "main")
    assert colab.course_repo(tmp_path / "missing.toml") == ("", "main")
    p.write_text('[tool.hybrid-lab]\nrepo = "https://gitlab.com/a/b"\n')
    with pytest.raises(ValueError, match="repo must be an https://github.com/ORG/NAME URL"):
        colab.course_repo(p)


def test_colab_links_open_each_lab_from_github():
    links = colab.colab_links(course.repo_root(), REPO + ".git", "main")
    labs = sorted(p.name for p in (course.repo_root() / "labs").glob("[0-9][0-9]_*.ipynb"))
    assert [n for n, _ in links] == labs
    u = urllib.parse.urlsplit(links[1][1])
    assert (u.scheme, u.netloc) == ("https", "colab.research.google.com")
    assert u.path == f"/github/example-org/hybrid-lab/blob/main/labs/{labs[1]}"


@pytest.mark.parametrize("bad", ["http://github.com/a/b", "https://github.com/a", "https://example.com/a/b",
                                 "https://github.com/a/b?x=1", None, 3])
def test_bad_repositories_are_refused(bad):
    with pytest.raises(ValueError, match="repo must be"):
        colab.github_repo(bad)
    with pytest.raises(ValueError, match="branch must be"):
        colab.colab_link(REPO, "a b", "labs/00_three_costs.ipynb")


def test_cli_colab_links(capsys):
    assert cli.main(["colab-links", "--repo", REPO]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(list((course.repo_root() / "labs").glob("[0-9][0-9]_*.ipynb")))
    assert out[0].startswith("00_") and "colab.research.google.com/github/example-org/hybrid-lab/blob/main/" in out[0]
    assert cli.main(["colab-links", "--repo", "https://gitlab.com/a/b"]) == 2
    assert "--repo must be" in capsys.readouterr().err
