"""A static picture for every explorer, shown until the kernel runs.

A notebook opened fresh in JupyterLab is *untrusted*: its stored widget outputs cannot render (the widget renderer is
not "safe", and the widget models live only in a running kernel), so JupyterLab falls back to the output's
``text/plain``: ``interactive(children=(FloatSlider(...``. :func:`with_picture` records the explorer's first
picture while it is built and adds it to the widget's output as ``image/png``: before the cell runs, JupyterLab shows
that picture (the richest *safe* type); once it runs, the live widget (the widget renderer ranks first).
"""
from __future__ import annotations

import functools
from contextlib import contextmanager

PLACEHOLDER = "(an interactive explorer: run this cell to move its controls)"


@contextmanager
def recording_displays():
    """Inside the block, every display the kernel publishes (a figure, a text) is also appended to the yielded list
    (as its data dict), and still shown as usual. Outside IPython: nothing is recorded."""
    try:
        from IPython import get_ipython
        ip = get_ipython()
    except ImportError:
        ip = None
    rec: list = []
    if ip is None or getattr(ip, "display_pub", None) is None:
        yield rec
        return
    pub = ip.display_pub
    orig = pub.publish

    def publish(data, *args, **kwargs):
        rec.append(data)
        return orig(data, *args, **kwargs)

    pub.publish = publish
    try:
        yield rec
    finally:
        pub.publish = orig


def first_png(widget, recorded=()) -> str | None:
    """The first PNG (base64) among the recorded displays, else in an Output widget inside ``widget``."""
    for data in recorded:
        if isinstance(data, dict) and data.get("image/png"):
            return data["image/png"]
    stack = [widget]
    while stack:
        w = stack.pop(0)
        for o in getattr(w, "outputs", ()) or ():
            png = (o.get("data") or {}).get("image/png") if isinstance(o, dict) else None
            if png:
                return png
        stack.extend(getattr(w, "children", ()) or ())
    return None


def add_picture(widget, png: str | None):
    """``widget`` whose display also carries ``png`` (and a plain-text line saying to run the cell)."""
    if png is None:
        return widget
    base = widget._repr_mimebundle_

    def bundle(**kwargs):
        data = base(**kwargs)
        if isinstance(data, tuple):                       # (data, metadata)
            data = data[0]
        data = dict(data or {})
        data["image/png"] = png
        data["text/plain"] = PLACEHOLDER
        return data

    widget._repr_mimebundle_ = bundle
    widget.static_png = png
    return widget


def with_picture(make):
    """Decorator for an explorer factory: the widget it returns shows its first picture before the kernel runs."""
    @functools.wraps(make)
    def wrapper(*args, **kwargs):
        with recording_displays() as rec:
            widget = make(*args, **kwargs)
        return add_picture(widget, first_png(widget, rec))
    return wrapper
