"""Links that open a lab on a JupyterHub: nbgitpuller clones (or updates) the lab's repository into the student's
home and opens the notebook in JupyterLab.

    hybrid-lab hub-links --hub https://hub.example.edu --repo https://github.com/ORG/hybrid-lab --branch main [--lab 01]

prints one link per lab, of nbgitpuller's form

    HUB/hub/user-redirect/git-pull?repo=REPO&branch=BRANCH&urlpath=lab/tree/CLONE/labs/NN_name.ipynb

with every value URL-encoded. CLONE is the folder nbgitpuller clones into: the last part of the repository's URL,
as nbgitpuller names it, unless ``target_dir`` is given (then it is passed as ``targetpath``, so the clone and the
path opened always agree). ``user-redirect`` sends each student to their own server. The user image needs
nbgitpuller and the lab's packages: docs/hub/requirements.txt.
"""
from __future__ import annotations

import re
import urllib.parse
from pathlib import Path

from hybrid_lab.course.pipeline import repo_root

# one folder name: no separators, not "." or "..", nothing a shell or URL would read differently
_DIR = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def _http_url(value, name: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be an http(s) URL (a string), got {value!r}")
    parts = urllib.parse.urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{name} must be an http(s) URL such as https://hub.example.edu, got {value!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"{name} must be a plain URL without ?query or #fragment, got {value!r}")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def clone_dir(repo: str) -> str:
    """The folder nbgitpuller clones ``repo`` into when no targetpath is given: the URL's last part (``.git`` kept,
    as nbgitpuller keeps it)."""
    repo = _http_url(repo, "repo")
    name = urllib.parse.urlsplit(repo).path.rsplit("/", 1)[-1]
    if not _DIR.fullmatch(name):
        raise ValueError(f"repo must end in the repository's name (https://github.com/ORG/hybrid-lab), got {repo!r}")
    return name


def nbgitpuller_link(hub: str, repo: str, branch: str, notebook: str, target_dir: str | None = None) -> str:
    """The nbgitpuller link that clones ``repo`` at ``branch`` and opens ``notebook`` (a path inside the repository,
    e.g. ``labs/00_three_costs.ipynb``) in JupyterLab on ``hub``."""
    hub = _http_url(hub, "hub")
    repo = _http_url(repo, "repo")
    if not isinstance(branch, str) or not branch.strip() or re.search(r"\s|\.\.|^-|^/|/$", branch):
        raise ValueError(f"branch must be a git branch name such as main, got {branch!r}")
    if (not isinstance(notebook, str) or not notebook.endswith(".ipynb") or notebook.startswith("/")
            or ".." in notebook.split("/")):
        raise ValueError(f"notebook must be a .ipynb path inside the repository (labs/00_three_costs.ipynb), "
                         f"got {notebook!r}")
    if target_dir is not None and (not isinstance(target_dir, str) or not _DIR.fullmatch(target_dir)):
        raise ValueError(f"target_dir must be one folder name (letters, digits, _ . -), got {target_dir!r}")
    folder = target_dir if target_dir is not None else clone_dir(repo)
    query = [("repo", repo), ("branch", branch), ("urlpath", f"lab/tree/{folder}/{notebook}")]
    if target_dir is not None:
        query.append(("targetpath", target_dir))
    # quote with safe="": every '/', ':' and '&' inside a value is encoded, as nbgitpuller's own link generator does
    return f"{hub}/hub/user-redirect/git-pull?" + urllib.parse.urlencode(query, quote_via=urllib.parse.quote,
                                                                           safe="")


def lab_notebooks(labs_dir=None) -> list[Path]:
    """The labs (``labs/NN_name.ipynb``), in number order."""
    folder = Path(labs_dir) if labs_dir is not None else repo_root() / "labs"
    found = sorted(folder.glob("[0-9][0-9]_*.ipynb"))
    if not found:
        raise ValueError(f"labs_dir must hold the labs (NN_name.ipynb), found none in {str(folder)!r}")
    return found


def hub_links(hub: str, repo: str, branch: str = "main", lab: str | None = None, target_dir: str | None = None,
              labs_dir=None) -> list[tuple[str, str]]:
    """``(notebook name, link)`` for every lab, or for the one ``lab`` names (``"01"``, ``"1"`` or
    ``"01_selective_ssm"``)."""
    notebooks = lab_notebooks(labs_dir)
    if lab is not None:
        if isinstance(lab, bool) or not isinstance(lab, (str, int)):
            raise ValueError(f"lab must be a lab number such as 01, got {lab!r}")
        key = str(lab).strip().removesuffix(".ipynb")
        if re.fullmatch(r"\d{1,2}", key):
            chosen = [p for p in notebooks if p.name[:2] == f"{int(key):02d}"]
        else:
            chosen = [p for p in notebooks if p.stem == key]
        if not chosen:
            raise ValueError(f"lab must be one of {', '.join(p.name[:2] for p in notebooks)}, got {lab!r}")
        notebooks = chosen
    return [(p.name, nbgitpuller_link(hub, repo, branch, f"labs/{p.name}", target_dir)) for p in notebooks]
