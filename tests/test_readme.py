"""The README's two set-up commands are the ones CI runs and the ones the docs promise; its Layout section names
every module of the package."""
import re

from hybrid_lab.course.pipeline import repo_root

ROOT = repo_root()


def readme_commands():
    text = (ROOT / "README.md").read_text()
    section = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", section, re.S)


def test_two_commands():
    cmds = readme_commands()
    assert len(cmds) == 2, cmds
    assert "hybrid-lab open" in cmds[0] and "pytest --nbval" in cmds[1]


def test_ci_runs_the_readme_test_command():
    ci = [ln for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert ci[-1].strip() == readme_commands()[1].strip()


def test_every_notebook_is_in_the_table():
    text = (ROOT / "README.md").read_text()
    for p in sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb")):
        assert f"labs/{p.name}" in text, p.name


def test_layout_names_every_module():
    """README "Layout": a table module -> notebook(s) -> paper section; a module missing from it is invisible."""
    text = (ROOT / "README.md").read_text()
    assert "\n## Layout" in text, "README has no Layout section"
    layout = text.split("\n## Layout", 1)[1].split("\n## ", 1)[0]
    missing = []
    # the exercise modules are one row, a range: `exercises/lab00` ... `exercises/labNN` names lab00 to labNN
    span = re.search(r"`exercises/lab00` \.\.\. `exercises/lab(\d\d)`", layout)
    for p in sorted((ROOT / "hybrid_lab").glob("*/*.py")):
        if p.name.startswith("_"):
            continue
        layer, mod = p.parent.name, p.stem
        if f"{layer}/{mod}" not in layout and f"{layer}.{mod}" not in layout and not (
                layer == "exercises" and re.fullmatch(r"lab\d\d", mod) and span and int(mod[3:]) <= int(span[1])):
            missing.append(f"{layer}/{mod}.py")
    assert not missing, f"modules missing from the README Layout table: {missing}"


def test_docs_name_only_files_that_exist():
    """Every file path the README and docs/*.md name in backticks or links exists (templates like NN_name aside)."""
    missing = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text()
        for path in re.findall(r"[`(]([\w./-]+\.(?:py|md|cfg|ipynb|json|toml|png))[`)]", text):
            if re.search(r"NN|\bX\b|^\.\./|^https?:", path) or path.startswith(("../", "http")):
                continue
            here = [ROOT / path, ROOT / "hybrid_lab" / path, ROOT / "labs" / path, doc.parent / path]
            if not any(p.exists() for p in here):
                missing.append(f"{doc.name}: {path}")
    assert not missing, f"docs name files that do not exist: {missing}"


def _run_all_rows(text: str) -> dict:
    """{notebook number: (seconds, MB)} of a "Run All (measured) | peak memory (measured)" table in ``text``."""
    rows = {}
    for m in re.finditer(r"^\| \d+ \| \[?(\d\d) [^|]*\| ([\d.]+) s \| (\d+) MB \|", text, re.M):
        rows[m.group(1)] = (float(m.group(2)), int(m.group(3)))
    return rows


def test_run_all_tables_are_the_benchmarks_numbers():
    """The README's and notebook 00's Run All columns are benchmarks/results/run_all.json
    (``python benchmarks/bench_run_all.py``), every lab in both, each within the 60 s / 2 GB targets."""
    import json

    import nbformat

    bench = json.loads((ROOT / "benchmarks" / "results" / "run_all.json").read_text())["notebooks"]
    want = {k[:2]: (v["seconds"], round(v["peak_rss_mb"])) for k, v in bench.items()}
    labs = {p.name[:2] for p in (ROOT / "labs").glob("[0-9][0-9]_*.ipynb")}
    assert set(want) == labs, "run benchmarks/bench_run_all.py: run_all.json must time every lab"
    nb00 = nbformat.read(str(ROOT / "solutions" / "00_three_costs.ipynb"), as_version=4)
    for where, text in (("README.md", (ROOT / "README.md").read_text()),
                        ("notebook 00", "\n".join(c.source for c in nb00.cells if c.cell_type == "markdown"))):
        assert _run_all_rows(text) == want, f"{where}'s Run All table differs from run_all.json"
    assert all(s < 60 and mb < 2048 for s, mb in want.values()), want
