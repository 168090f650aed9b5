"""Google Colab: a setup cell in every notebook, inert elsewhere, and "Open in Colab" links.

Colab opens a notebook straight from GitHub, without the rest of the repository and without the package. The first
code cell of every notebook is the setup cell (:func:`setup_cell_source`). Where ``google.colab`` is not imported
(a laptop, a hub, the grader, nbval) it does nothing. On Colab it:

- clones the course's repository into ``/content/hybrid-lab``;
- pip-installs it with the lab and gpu extras, pinning Colab's own torch (``torch==<its version>`` in the same
  command), so pip keeps Colab's CUDA build instead of downloading several GB of another;
- puts the checkout on ``sys.path`` (an editable install is seen only after a runtime restart), changes into
  ``labs/``, and picks the Triton backend when Colab gave a GPU.

Which repository: ``[tool.hybrid-lab]`` in pyproject.toml, ``repo = "https://github.com/ORG/hybrid-lab"`` and
``branch = "main"``. ``hybrid-lab build`` writes them into the labs' setup cell and an "Open in Colab" link under
each lab's title; ``hybrid-lab colab-links`` prints the links. The solutions keep an empty ``REPO``: with none
configured, the cell on Colab stops with a message instead of guessing a URL.
"""
from __future__ import annotations

import re
import urllib.parse
from pathlib import Path

MARK = "# Colab setup"                       # the setup cell's first line: how build and the tests find it
CLONE = "/content/hybrid-lab"

_SECTION = re.compile(r"^\[tool\.hybrid-lab\]\s*$(?P<body>.*?)(?=^\[|\Z)", re.M | re.S)


def setup_cell_source(repo: str = "", branch: str = "main") -> str:
    """The setup cell's code for ``repo`` (an https GitHub URL, or "" where none is configured) at ``branch``."""
    repo = "" if repo == "" else github_repo(repo)[0]
    branch = _branch(branch)
    return f'''{MARK}: on Google Colab this installs the lab, keeping Colab's torch; elsewhere: nothing.
import os, sys
if "google.colab" in sys.modules:
    import subprocess, torch
    # the course's repository: written by hybrid-lab build from [tool.hybrid-lab] in pyproject.toml
    REPO, BRANCH, CLONE = {repo!r}, {branch!r}, {CLONE!r}
    if not REPO:
        raise RuntimeError("this copy names no repository to install from: use your course's Colab link")
    if not os.path.isdir(CLONE):
        subprocess.run(["git", "clone", "-q", "--depth", "1", "--branch", BRANCH, REPO, CLONE], check=True)
    pin = f"torch=={{torch.__version__}}"          # keep Colab's own CUDA build
    pip = [sys.executable, "-m", "pip", "install", "-q", "-e", CLONE + "[lab,gpu]", pin]
    subprocess.run(pip, check=True)
    sys.path.insert(0, CLONE)                     # an editable install is seen only after a restart
    os.chdir(CLONE + "/labs")
    gpu = torch.cuda.is_available()
    if gpu:
        os.environ["HYBRID_LAB_BACKEND"] = "triton"
    print("Colab: hybrid-lab installed;", "Triton backend (GPU)" if gpu else "numpy backend")'''


def is_setup_cell(source: str) -> bool:
    return source.startswith(MARK)


def _branch(branch) -> str:
    if not isinstance(branch, str) or not re.fullmatch(r"[A-Za-z0-9._/-]+", branch) or ".." in branch:
        raise ValueError(f"branch must be a git branch name such as main, got {branch!r}")
    return branch


def github_repo(repo) -> tuple[str, str]:
    """(the clone URL, "ORG/NAME") of an https GitHub repository URL (Colab opens notebooks from GitHub only)."""
    if not isinstance(repo, str):
        raise ValueError(f"repo must be an https://github.com/ORG/NAME URL, got {repo!r}")
    parts = urllib.parse.urlsplit(repo.strip())
    path = parts.path.strip("/").removesuffix(".git")
    if (parts.scheme != "https" or parts.netloc != "github.com" or parts.query or parts.fragment
            or not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", path)):
        raise ValueError(f"repo must be an https://github.com/ORG/NAME URL (Colab opens notebooks from GitHub), "
                         f"got {repo!r}")
    return f"https://github.com/{path}", path


def colab_link(repo: str, branch: str, notebook: str) -> str:
    """Colab's URL that opens ``notebook`` (a path in the repository, e.g. labs/01_selective_ssm.ipynb)."""
    _, path = github_repo(repo)
    if not isinstance(notebook, str) or not re.fullmatch(r"[A-Za-z0-9_./-]+\.ipynb", notebook) or ".." in notebook:
        raise ValueError(f"notebook must be a notebook path in the repository, got {notebook!r}")
    return f"https://colab.research.google.com/github/{path}/blob/{_branch(branch)}/{notebook}"


def course_repo(pyproject) -> tuple[str, str]:
    """(repo, branch) from ``[tool.hybrid-lab]`` of the pyproject.toml at ``pyproject``; ("", "main") where none is
    set. Read with a pattern, not a TOML parser: Python 3.10 has no tomllib, and the section holds two strings."""
    pyproject = Path(pyproject)
    if not pyproject.is_file():          # an installed package, or a folder of notebooks without the project file
        return "", "main"
    m = _SECTION.search(pyproject.read_text())
    if not m:
        return "", "main"
    vals = dict(re.findall(r'^\s*(repo|branch)\s*=\s*"([^"]*)"\s*(?:#.*)?$', m["body"], re.M))
    repo, branch = vals.get("repo", ""), vals.get("branch", "main")
    if repo:
        github_repo(repo)
    return repo, _branch(branch)


def colab_links(root, repo: str | None = None, branch: str | None = None) -> list[tuple[str, str]]:
    """(lab file name, Colab link) for every lab in ``root``/labs, for ``repo`` / ``branch`` (default: those of
    ``root``/pyproject.toml)."""
    root = Path(root)
    conf_repo, conf_branch = course_repo(root / "pyproject.toml")
    repo, branch = repo or conf_repo, branch or conf_branch
    if not repo:
        raise ValueError("repo: no repository given and none in [tool.hybrid-lab] of pyproject.toml; pass --repo "
                         "https://github.com/ORG/hybrid-lab")
    labs = sorted((root / "labs").glob("[0-9][0-9]_*.ipynb"))
    return [(p.name, colab_link(repo, branch, f"labs/{p.name}")) for p in labs]
