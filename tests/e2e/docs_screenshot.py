"""Regenerate docs/screenshot.png (the README's picture of the lab) with the browser test's machinery.

    .venv/bin/python tests/e2e/docs_screenshot.py [NN_name]     # default 03_marconi

Opens labs/NN_name.ipynb in a throwaway JupyterLab, runs its cells one by one as a student would (stubs fail, the rest
runs), scrolls to the explorer widget and saves a 128-colour PNG (< 300 KB) to docs/screenshot.png.
"""
from __future__ import annotations

import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("e2e", HERE / "test_browser_e2e.py")
e2e = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(e2e)


def main(name: str = "03_marconi") -> Path:
    from PIL import Image
    from playwright.sync_api import sync_playwright

    base = Path(tempfile.mkdtemp(prefix="hybrid_lab_docshot_"))
    server = e2e.JupyterLab(base)
    (server.root / "labs").mkdir()
    for p in sorted((e2e.ROOT / "labs").glob("*.ipynb")):
        shutil.copy(p, server.root / "labs" / p.name)
    server.start()
    raw = base / "shot.png"
    try:
        with sync_playwright() as pw:
            ctx = pw.chromium.launch_persistent_context(str(base / "profile"), executable_path=e2e.CHROMIUM,
                                                        headless=True, args=e2e.CHROMIUM_ARGS, viewport=e2e.VIEWPORT)
            page = ctx.pages[0] if ctx.pages else ctx.new_page()
            page.set_default_timeout(e2e.UI_TIMEOUT_MS)
            page.goto(f"{server.url}/lab", wait_until="domcontentloaded")
            page.wait_for_function("window.jupyterapp && window.jupyterapp.started !== undefined", timeout=120_000)
            page.evaluate("async () => { await window.jupyterapp.started; await window.jupyterapp.restored; }")
            page.evaluate("() => window.jupyterapp.commands.execute('filebrowser:go-to-path', {path: '/labs/'})")
            e2e._open(page, f"labs/{name}.ipynb")
            n = page.evaluate("() => window.__nb.content.widgets.length")
            for j in range(n):
                page.evaluate("""async (j) => { const nb = window.__nb.content; nb.activeCellIndex = j;
                    nb.deselectAll(); await window.jupyterapp.commands.execute('notebook:run-cell'); }""", j)
            e2e._wait_idle(page)
            i, _ = page.evaluate(e2e.JS_EXPLORER_CELL)
            if i < 0:
                raise SystemExit(f"{name}: no explorer widget rendered")
            e2e._wait_settled(page, i)
            # a wider file browser, so the notebook names show whole
            h = page.locator("#jp-main-split-panel > .lm-SplitPanel-handle:visible").first.bounding_box()
            page.mouse.move(h["x"] + h["width"] / 2, 400)
            page.mouse.down()
            page.mouse.move(h["x"] + 80, 400, steps=5)
            page.mouse.up()
            page.evaluate("(i) => window.__nb.content.widgets[i].node.scrollIntoView({block: 'start'})", i)
            page.wait_for_timeout(500)  # the scroll settles
            page.screenshot(path=str(raw))
            ctx.close()
    finally:
        server.stop()
    out = e2e.ROOT / "docs" / "screenshot.png"
    img = Image.open(raw).convert("RGB").quantize(colors=128, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    img.save(out, optimize=True)
    size = out.stat().st_size
    print(f"wrote {out.relative_to(e2e.ROOT)} ({size / 1024:.0f} KB)")
    if size > 300 * 1024:
        raise SystemExit("docs/screenshot.png is over 300 KB")
    shutil.rmtree(base, ignore_errors=True)
    return out


if __name__ == "__main__":
    main(*sys.argv[1:2])
