"""Progress bars for loops that take more than a few seconds (training, sweeps, replays)."""
from __future__ import annotations

import os


def progress(iterable=None, total=None, desc=None, **kwargs):
    """A ``tqdm.auto`` bar (a widget in JupyterLab, text elsewhere).

    ``HYBRID_LAB_PROGRESS=0`` turns bars off (the returned object still iterates and supports ``update``).
    The bar's text never carries a number that nbval compares: the sanitize file masks tqdm lines.
    """
    from tqdm.auto import tqdm

    disable = os.environ.get("HYBRID_LAB_PROGRESS", "1") == "0"
    return tqdm(iterable, total=total, desc=desc, disable=disable, mininterval=0.5, **kwargs)
