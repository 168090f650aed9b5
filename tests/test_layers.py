"""The architecture, checked from the source: the import graph of ``hybrid_lab/`` and ``gpu_track/`` read with ``ast``.

Every import counts, wherever it is written (module top, inside a function, ``importlib.import_module("...")``
with a constant name): a function-local import does not hide a cycle or a layer violation.

    layers      core < ops < costs < models < serving < trained < widgets < exercises: a module imports its own
                layer or lower (trained/: tasks, torch twins and training of the small models; torch only there)
    course      course/ (the notebook pipeline and CLI) imports only core and itself, plus the CLI commands' entry
                points in ``SIDECAR_LAZY`` (``hybrid-lab train`` runs trained.train; ``grade`` the exercises'
                verdicts), imported inside the command's handler only; no layer imports course/
    gpu_track   imports from hybrid_lab only ``hybrid_lab.ops.contracts`` (the swappable ops' checks)
    no cycles, and no ``_private`` name (or private module) of another module used across modules

Each failure message lists the offending edges as ``importer:line -> target``.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from hybrid_lab.course.pipeline import repo_root

ROOT = repo_root()
PACKAGES = ("hybrid_lab", "gpu_track")
LAYERS = ("core", "ops", "costs", "models", "serving", "trained", "widgets", "exercises")
SIDECAR = "course"                     # tooling: its own island on top of core
# modules a course/ CLI command runs, imported inside its handler (so `hybrid-lab open` etc. never load them, nor
# what they load): the only way course/ reaches above core
SIDECAR_LAZY = {"hybrid_lab.course.cli": {"hybrid_lab.trained.train"},
                # `hybrid-lab grade` decides each verdict itself: the exercises' cases, references and comparison
                "hybrid_lab.course.pipeline": {"hybrid_lab.exercises.verdicts", "hybrid_lab.exercises.framework"},
                # `grade --similarity` compares with the library code each exercise's spec names
                "hybrid_lab.course.similarity": {"hybrid_lab.exercises.framework"}}
FACADE_LAYER = "ops"                   # hybrid_lab/__init__.py re-exports the backend switch (ops/registry)
GPU_MAY_IMPORT = {"hybrid_lab.ops.contracts"}


@dataclass(frozen=True)
class Edge:
    src: str            # importing module
    dst: str            # imported project module (a submodule when ``from pkg import submodule``)
    line: int
    names: tuple = ()   # names taken with ``from dst import ...`` (empty for ``import dst``)

    def __str__(self):
        what = f" ({', '.join(self.names)})" if self.names else ""
        return f"{self.src}:{self.line} -> {self.dst}{what}"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def project_modules(root: Path = ROOT) -> dict:
    """{dotted name: path} of every .py file of the project packages (package ``__init__`` under the package name)."""
    mods = {}
    for pkg in PACKAGES:
        for p in sorted((root / pkg).rglob("*.py")):
            if "__pycache__" not in p.parts:
                mods[module_name(p, root)] = p
    return mods


def _resolve(name: str, mods) -> str | None:
    """The longest prefix of a dotted name that is a project module (None for third-party / stdlib)."""
    if name.split(".")[0] not in PACKAGES:
        return None
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        cand = ".".join(parts[:i])
        if cand in mods:
            return cand
    return name  # a project module that does not exist: keep the edge, the import itself is broken


def imports_of(src: str, source: str, mods, is_package: bool = False) -> tuple[list, list]:
    """Edges from module ``src`` (its text ``source``) to project modules, and ``(line, dotted)`` for every
    attribute access ``module._name`` through a name bound to a project module."""
    tree = ast.parse(source)
    package = src if is_package else src.rpartition(".")[0]
    edges, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                dst = _resolve(a.name, mods)
                if dst:
                    edges.append(Edge(src, dst, node.lineno))
                    if a.asname:
                        aliases[a.asname] = dst
                    else:
                        top = a.name.split(".")[0]
                        aliases[top] = _resolve(top, mods)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[:len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module
            if base.split(".")[0] not in PACKAGES:
                continue
            names_from_base = []
            for a in node.names:
                sub = f"{base}.{a.name}"
                if sub in mods:                       # ``from pkg import submodule``
                    edges.append(Edge(src, sub, node.lineno, (a.name,)))
                    aliases[a.asname or a.name] = sub
                else:
                    names_from_base.append(a.name)
            if names_from_base:
                edges.append(Edge(src, _resolve(base, mods), node.lineno, tuple(names_from_base)))
        elif isinstance(node, ast.Call):             # importlib.import_module("pkg.mod") / __import__("pkg.mod")
            f = node.func
            fname = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            if fname in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str):
                dst = _resolve(node.args[0].value, mods)
                if dst:
                    edges.append(Edge(src, dst, node.lineno))
    private_attrs = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            chain, v = [], node.value
            while isinstance(v, ast.Attribute):
                chain.append(v.attr)
                v = v.value
            if isinstance(v, ast.Name) and aliases.get(v.id):
                target = ".".join([aliases[v.id], *reversed(chain)])
                target = _resolve(target, mods) or target
                private_attrs.append((node.lineno, f"{target}.{node.attr}"))
    return edges, private_attrs


def import_graph(root: Path = ROOT):
    mods = project_modules(root)
    edges, private_attrs = [], []
    for name, path in mods.items():
        e, p = imports_of(name, path.read_text(), mods, is_package=path.name == "__init__.py")
        edges += e
        private_attrs += [(name, line, dotted) for line, dotted in p]
    return mods, edges, private_attrs


def layer_of(mod: str) -> str | None:
    """The layer of a hybrid_lab module (``FACADE_LAYER`` for the package itself), None outside hybrid_lab."""
    parts = mod.split(".")
    if parts[0] != "hybrid_lab":
        return None
    if len(parts) == 1:
        return FACADE_LAYER
    return parts[1]


def _fmt(edges) -> str:
    return "\n  " + "\n  ".join(str(e) for e in sorted(edges, key=lambda e: (e.src, e.line, e.dst)))


# ------------------------------------------------------------------------------------------------ checks
def cycles(edges) -> list[list[str]]:
    """Strongly connected components with more than one module (or a module importing itself), Tarjan."""
    graph = {}
    for e in edges:
        graph.setdefault(e.src, set()).add(e.dst)
        graph.setdefault(e.dst, set())
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph[v]:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def private_imports(edges, private_attrs, mods) -> list[str]:
    """``from X import _name`` / ``X._name`` across modules, and private modules used outside their package."""
    bad = []

    def private_module_ok(src, dst):
        # a module whose dotted path has a ``_part`` is private to the package holding that part
        parts = dst.split(".")
        for i, p in enumerate(parts):
            if p.startswith("_") and not p.startswith("__"):
                owner = ".".join(parts[:i])
                if not (src == owner or src.startswith(owner + ".")):
                    return False
        return True

    for e in edges:
        if not private_module_ok(e.src, e.dst):
            bad.append(f"{e} (private module)")
        if e.src == e.dst:
            continue
        priv = [n for n in e.names if n.startswith("_") and not n.startswith("__") and f"{e.dst}.{n}" not in mods]
        if priv:
            bad.append(f"{e.src}:{e.line} -> {e.dst} ({', '.join(priv)})")
    for src, line, dotted in private_attrs:
        owner, _, name = dotted.rpartition(".")
        if owner != src and dotted not in mods:
            bad.append(f"{src}:{line} -> {owner} (.{name})")
    return sorted(set(bad))


def layer_violations(edges) -> list[Edge]:
    bad = []
    for e in edges:
        s, d = layer_of(e.src), layer_of(e.dst)
        if s is None:
            continue                                  # gpu_track: see test_gpu_track_imports_only_the_contracts
        if d is None:                                 # hybrid_lab -> gpu_track: only the backend switch loads it
            if e.src != "hybrid_lab.ops.registry":
                bad.append(e)
            continue
        if s == SIDECAR or d == SIDECAR:
            if not (s == SIDECAR and (d in (SIDECAR, "core") or e.dst in SIDECAR_LAZY.get(e.src, ()))):
                bad.append(e)
            continue
        if s not in LAYERS or d not in LAYERS or LAYERS.index(d) > LAYERS.index(s):
            bad.append(e)
    return bad


# ------------------------------------------------------------------------------------------------- tests
MODS, EDGES, PRIVATE_ATTRS = import_graph()


def test_the_walker_sees_every_kind_of_import():
    """The checks below are only as good as the walker: it must see local, relative and importlib imports."""
    mods = {"hybrid_lab": None, "hybrid_lab.core": None, "hybrid_lab.core.a": None, "hybrid_lab.core.b": None,
            "hybrid_lab.ops": None, "hybrid_lab.ops.c": None}
    src = (
        "import numpy as np\n"
        "from . import b\n"
        "from .b import _helper, public\n"
        "def f():\n"
        "    from hybrid_lab.ops.c import thing\n"
        "    import hybrid_lab.ops.c as cc\n"
        "    return cc._secret\n"
        "def g():\n"
        "    import importlib\n"
        "    return importlib.import_module('hybrid_lab.ops.c')\n"
    )
    edges, priv = imports_of("hybrid_lab.core.a", src, mods)
    got = sorted((e.dst, e.line, e.names) for e in edges)
    assert got == [("hybrid_lab.core.b", 2, ("b",)), ("hybrid_lab.core.b", 3, ("_helper", "public")),
                   ("hybrid_lab.ops.c", 5, ("thing",)), ("hybrid_lab.ops.c", 6, ()), ("hybrid_lab.ops.c", 10, ())]
    assert priv == [(7, "hybrid_lab.ops.c._secret")]
    assert len(layer_violations(edges)) == 3                      # core -> ops, three times
    assert private_imports(edges, [("hybrid_lab.core.a", 7, "hybrid_lab.ops.c._secret")], mods) == [
        "hybrid_lab.core.a:3 -> hybrid_lab.core.b (_helper)", "hybrid_lab.core.a:7 -> hybrid_lab.ops.c (._secret)"]
    loop = [Edge("a", "b", 1), Edge("b", "c", 1), Edge("c", "a", 1), Edge("c", "d", 1)]
    assert cycles(loop) == [["a", "b", "c"]] and cycles(loop[:2]) == []
    assert shortest_cycle(["a", "b", "c"], loop) == ["a", "b", "c", "a"]


def test_graph_is_not_empty():
    assert {"hybrid_lab.core.checks", "hybrid_lab.ops.registry", "gpu_track.numpy_api"} <= set(MODS)
    assert len(EDGES) > 50, "the walker found almost no imports: the project layout changed under this test"


def shortest_cycle(comp, edges) -> list[str]:
    """One shortest cycle through the first module of a strongly connected component (breadth-first)."""
    succ = {}
    for e in edges:
        if e.src in comp and e.dst in comp:
            succ.setdefault(e.src, set()).add(e.dst)
    start = comp[0]
    prev, frontier = {}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(succ.get(v, ())):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [start] + path[::-1][1:] + [start] if len(path) > 1 else [start, start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp


def test_no_import_cycle():
    found = cycles(EDGES)
    msgs = []
    for comp in found:
        inside = [e for e in EDGES if e.src in comp and e.dst in comp]
        msgs.append(f"cycle {' -> '.join(shortest_cycle(comp, EDGES))} (all edges among {comp}):{_fmt(inside)}")
    assert not found, "\n".join(msgs)


def test_no_private_name_imported_across_modules():
    bad = private_imports(EDGES, PRIVATE_ATTRS, MODS)
    assert not bad, ("private names used across modules (make them public, or move them to core):\n  "
                     + "\n  ".join(bad))


def test_layer_order():
    bad = layer_violations(EDGES)
    assert not bad, (f"imports against the layer order {' < '.join(LAYERS)} (course/: core only; hybrid_lab -> "
                     f"gpu_track only through ops.registry):{_fmt(bad)}")


def module_level_import_lines(source: str) -> set:
    """Lines of the imports that run when the module is imported: every import statement (or call, such as
    ``importlib.import_module``) that is not inside a function body."""
    tree = ast.parse(source)
    kinds = (ast.Import, ast.ImportFrom, ast.Call)
    in_functions = {n.lineno for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                    for n in ast.walk(f) if isinstance(n, kinds)}
    return {n.lineno for n in ast.walk(tree) if isinstance(n, kinds)} - in_functions


def test_module_level_import_lines():
    src = ("import os\ndef f():\n    import json\n    from a import b\nclass C:\n    import re\n"
           "    def g(self):\n        return importlib.import_module('x')\nm = importlib.import_module('y')\n")
    assert module_level_import_lines(src) == {1, 6, 9}


def test_course_imports_its_commands_lazily():
    """course/ may reach a SIDECAR_LAZY module only from inside a function (the command's handler)."""
    bad, stale = [], []
    for src, allowed in SIDECAR_LAZY.items():
        top = module_level_import_lines(MODS[src].read_text())
        bad += [e for e in EDGES if e.src == src and e.dst in allowed and e.line in top]
        stale += [f"{src} -> {d}" for d in allowed if not any(e.src == src and e.dst == d for e in EDGES)]
    assert not stale, f"SIDECAR_LAZY allows imports that no longer exist (remove them): {stale}"
    assert not bad, f"course/ imports a command's module at module level (import it inside the handler):{_fmt(bad)}"


def test_gpu_track_imports_only_the_contracts():
    bad = [e for e in EDGES if e.src.startswith("gpu_track") and e.dst.split(".")[0] == "hybrid_lab"
           and e.dst not in GPU_MAY_IMPORT]
    assert not bad, f"gpu_track may import from hybrid_lab only {sorted(GPU_MAY_IMPORT)}:{_fmt(bad)}"


def test_package_layout():
    top = sorted(p.name for p in (ROOT / "hybrid_lab").glob("*.py") if p.name != "__init__.py")
    assert not top, f"modules directly in hybrid_lab/ (move them into a layer): {top}"
    subs = sorted(p.name for p in (ROOT / "hybrid_lab").iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert set(subs) == set(LAYERS) | {SIDECAR}, f"hybrid_lab/ subpackages {subs}, expected {sorted(LAYERS)} + course"
    stray = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "hybrid_lab").rglob("*.py")
                   if "__pycache__" not in p.parts and not (p.parent / "__init__.py").exists())
    assert not stray, f"modules in folders without __init__.py (invisible to the layer check): {stray}"


def test_tests_import_project_code_plainly_and_seed_explicitly():
    """A broken import of project code must fail, not skip; a random test's seed must not come from ``hash()``
    (randomised per process, so a failing case would not come back)."""
    bad = []
    for p in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            fname = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            arg = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None
            if fname == "importorskip" and isinstance(arg, str) and arg.split(".")[0] in PACKAGES:
                bad.append(f"{p.relative_to(ROOT)}:{node.lineno} importorskip({arg!r})")
            if isinstance(f, ast.Name) and f.id == "hash":
                bad.append(f"{p.relative_to(ROOT)}:{node.lineno} hash(...)")
    assert not bad, "tests must import project code plainly and seed with explicit integers:\n  " + "\n  ".join(bad)


# "issue N" but not "issues N-M (instructions) per element": a number followed by a dash or a digit is a range
_ISSUE_NUMBER = r"\b[Ii]ssues?\s+#?\d+(?![\d\-–])"


def test_no_issue_numbers_in_code():
    """Code, tests and notebooks say what a thing is or why, never which tracker issue asked for it: the issues are
    not shipped with the course, so "(issue N)" explains nothing to a reader."""
    import re

    hits = []
    for top in ("hybrid_lab", "gpu_track", "benchmarks", "tests", "solutions", "labs"):
        for p in sorted((ROOT / top).rglob("*")):
            if p.suffix not in (".py", ".ipynb") or ".ipynb_checkpoints" in p.parts:
                continue
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
                if re.search(_ISSUE_NUMBER, line):
                    hits.append(f"{p.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    assert not hits, "issue numbers in code (say what it is instead):\n  " + "\n  ".join(hits)


def test_the_issue_number_rule_catches_what_it_should():
    import re

    tracker = "issue " + "17"                     # spelled apart, so this file passes its own rule
    assert re.search(_ISSUE_NUMBER, f"a bug ({tracker}, round 1)") and re.search(_ISSUE_NUMBER, f"{tracker.title()}: x")
    assert not re.search(_ISSUE_NUMBER, "the scan " + "issues 12-21 per element")
