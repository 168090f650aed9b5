"""A lab opens in JupyterLab unmodified: no "unsaved changes" mark before the student edits anything.

For every lab in labs/ (``HYBRID_LAB_E2E_OPEN=01,03`` keeps the labs whose names start so): open it in JupyterLab in
headless Chromium, wait until the notebook is rendered (widget outputs included) and its kernel is idle, without
running a cell; the document must not be dirty (neither the model's ``dirty`` flag nor the tab's ``jp-mod-dirty``
class). Then save it at once (Ctrl+S, as a student would): the file on disk must stay byte-identical to what
``hybrid-lab build`` wrote, so JupyterLab's own serialisation of the notebook agrees with the pipeline's.

The JupyterLab server and the browser are the fixtures of test_browser_e2e.py (a throwaway server over a copy of the
notebooks; skipped, or chromium installed in CI, exactly as there).
"""
from __future__ import annotations

import difflib
import os

import pytest

from tests.e2e.test_browser_e2e import JS_CLOSE, JS_KERNEL_IDLE, JS_OPEN, NB_DIR, jupyterlab, page  # noqa: F401

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("HYBRID_LAB_E2E", "1") == "0", reason="HYBRID_LAB_E2E=0"),
]

_keep = [s.strip() for s in os.environ.get("HYBRID_LAB_E2E_OPEN", "").split(",") if s.strip()]
LABS = [p for p in sorted((NB_DIR / "labs").glob("[0-9][0-9]_*.ipynb"))
        if not _keep or any(p.name.startswith(k) for k in _keep)]

# dirty as JupyterLab sees it: the document model's flag, and the mark on the notebook's tab
JS_DIRTY = """() => {
    const w = window.__nb;
    const tab = document.querySelector(`.lm-TabBar-tab[data-id="${w.id}"]`);
    return {model: w.context.model.dirty, title: w.title.className.includes('jp-mod-dirty'),
            tab: !!tab && tab.classList.contains('jp-mod-dirty')};
}"""

# the notebook is on screen: a widget per cell, each one attached and rendered (Cell.ready)
JS_RENDERED = """async () => {
    const nb = window.__nb.content;
    await Promise.all(nb.widgets.map(c => c.ready));
    return nb.widgets.length > 0 && nb.widgets.length === nb.model.cells.length && nb.widgets.every(c => c.isAttached);
}"""

SETTLE_S = 2.0  # after rendering, the widget manager and output renderers answer asynchronously: let them


def _diff(before: str, after: str, name: str) -> str:
    lines = difflib.unified_diff(before.splitlines(), after.splitlines(), f"built/{name}", f"saved/{name}",
                                 lineterm="", n=2)
    shown = "\n".join(list(lines)[:60])
    return shown or f"(same lines; the file ends {before[-20:]!r} when built, {after[-20:]!r} when saved)"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("lab", LABS, ids=[p.stem for p in LABS])
def test_lab_opens_unmodified_and_saves_identical(page, jupyterlab, lab):  # noqa: F811
    on_disk = jupyterlab.root / "labs" / lab.name
    built = (NB_DIR / "labs" / lab.name).read_text()
    assert on_disk.read_text() == built, "the server's copy is not the built lab"
    page.page_errors.clear()
    page.evaluate(JS_OPEN, f"labs/{lab.name}")
    try:
        page.wait_for_function(JS_KERNEL_IDLE, timeout=120_000, polling=200)
        assert page.evaluate(JS_RENDERED), f"{lab.name}: the notebook's cells did not all render"
        page.wait_for_timeout(SETTLE_S * 1000)
        dirty = page.evaluate(JS_DIRTY)
        # save now, as a student would (the notebook has the focus); the server writes the file in place, the final
        # newline last: read it only once JupyterLab has the server's answer (saveState 'completed')
        page.evaluate("""() => { window.__saved = false; window.__nb.context.saveState.connect(
            (_, state) => { if (state === 'completed') window.__saved = true; }); }""")
        mtime = on_disk.stat().st_mtime_ns
        page.locator(".jp-Notebook").first.click(position={"x": 5, "y": 5})
        page.keyboard.press("Control+s")
        page.wait_for_function("window.__saved === true", timeout=30_000, polling=100)
        assert on_disk.stat().st_mtime_ns != mtime, f"{lab.name}: Ctrl+S did not write the notebook"
        saved = on_disk.read_text()
        assert not any(dirty.values()), (f"{lab.name}: dirty right after opening ({dirty}); saving it changes:\n"
                                         f"{_diff(built, saved, lab.name) or '(nothing on disk)'}")
        assert saved == built, f"{lab.name}: saving right after opening changes the file:\n" \
                               f"{_diff(built, saved, lab.name)}"
        assert not page.page_errors, f"{lab.name}: browser errors: {page.page_errors[:3]}"
    finally:
        page.evaluate(JS_CLOSE)
