"""Plots and the timeline explorer of notebook 07 (P/D disaggregation).

Every figure is drawn from data a function of :mod:`hybrid_lab.serving.pd_timeline` returns (:func:`schedule`,
:func:`events`), so tests compare the drawn bars with those numbers.
"""
from __future__ import annotations

from matplotlib.patches import Patch

from hybrid_lab.serving.pd_timeline import RESOURCES, PDTiming, events, schedule, timeline_summary
from hybrid_lab.widgets.static import with_picture

__all__ = ["plot_timeline", "timeline_widget", "plot_events", "COLORS"]

COLORS = ("#3182bd", "#e6550d", "#31a354", "#756bb1", "#636363", "#d6616b")   # one per request, cycled


def _plt():
    import matplotlib.pyplot as plt  # the backend is the caller's choice (inline in Jupyter, Agg headless)

    return plt


def plot_timeline(t: PDTiming):
    """Gantt chart of :func:`~hybrid_lab.serving.pd_timeline.schedule`: one row per resource, one colour per
    request, the critical path outlined in black. One bar per task, in the DAG's order: row = its resource, left =
    its start, width = its duration (ms). Returns a Figure."""
    if not isinstance(t, PDTiming):
        raise ValueError(f"t must be a PDTiming, got {type(t).__name__}")
    plt = _plt()
    s = schedule(t)
    on_path = set(s["path"])
    fig, ax = plt.subplots(figsize=(9, 3.2))
    for name, task in s["dag"].tasks.items():
        y = RESOURCES.index(task["resource"])
        crit = name in on_path
        ax.barh(y, task["duration"], left=s["start"][name], height=0.6, color=COLORS[task["request"] % 6],
                alpha=0.9 if task["kind"] != "decode" else 0.5, edgecolor="k" if crit else "none",
                linewidth=1.5 if crit else 0)
    ax.set_yticks(range(len(RESOURCES)))
    ax.set_yticklabels(RESOURCES)
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.set_title(f"critical path {s['makespan']:.0f} ms vs sum {s['sum']:.0f} ms vs busiest resource "
                 f"{s['max_busy']:.0f} ms", fontsize=10)
    ax.legend(handles=[Patch(color=COLORS[r % 6], label=f"request {r}") for r in range(min(t.n_requests, 6))]
              + [Patch(facecolor="white", edgecolor="k", label="critical path")], fontsize=7, loc="upper left",
              bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


@with_picture
def timeline_widget(**base):
    """ipywidgets explorer: prompt length, bandwidth, chunk size, number of requests -> :func:`plot_timeline`
    and :func:`~hybrid_lab.serving.pd_timeline.timeline_summary`. ``base``: other :class:`PDTiming` fields."""
    import ipywidgets as W
    from IPython.display import display

    PDTiming(**base)                                  # refuse a bad field now, not on the first slider move

    def show(log2_prompt, bandwidth_gbs, log2_chunk, n_requests):
        plt = _plt()
        L = 2 ** log2_prompt
        t = PDTiming(**{**base, "prompt_len": L, "chunk": min(2 ** log2_chunk, L), "bandwidth_gbs": bandwidth_gbs,
                        "n_requests": n_requests})
        fig = plot_timeline(t)
        display(fig)
        plt.close(fig)
        print(timeline_summary(t))

    return W.interactive(
        show,
        log2_prompt=W.IntSlider(value=15, min=10, max=20, description="log2 L"),
        bandwidth_gbs=W.FloatLogSlider(value=25.0, base=10, min=-1, max=2.5, description="GB/s"),
        log2_chunk=W.IntSlider(value=12, min=8, max=20, description="log2 chunk"),
        n_requests=W.IntSlider(value=3, min=1, max=6, description="requests"))


def plot_events(reports: dict):
    """Measured timeline of a live :func:`~hybrid_lab.serving.pd_workers.run_pd`: P's and D's logged events
    (milliseconds from the first event), one colour per request; D's "receive" events are thin bars above its
    install/decode bars. One bar per event, P's first. Returns a Figure."""
    rows = [("P", "P (prefill + send)"), ("D", "D (receive / decode)")]
    evs = {role: events(reports, role) for role, _ in rows}
    if not any(evs.values()):
        raise ValueError("reports hold no events: pass the dict returned by run_pd for a run without errors")
    plt = _plt()
    t0 = min(e[2] for role_evs in evs.values() for e in role_evs)
    fig, ax = plt.subplots(figsize=(9, 2.4))
    for y, (role, _) in enumerate(rows):
        for req, what, a, b in evs[role]:
            y_off = 0.18 if what == "receive" else 0.0
            ax.barh(y + y_off, (b - a) * 1e3, left=(a - t0) * 1e3, height=0.35 if y_off else 0.6,
                    color=COLORS[req % 6], alpha=0.5 if what == "receive" else 0.9)
    reqs = sorted({e[0] for role_evs in evs.values() for e in role_evs})
    ax.legend(handles=[Patch(color=COLORS[r % 6], label=f"request {r}") for r in reqs], fontsize=7,
              loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r[1] for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("wall time (ms); D: thin = receiving, thick = install + decode")
    fig.tight_layout()
    return fig
