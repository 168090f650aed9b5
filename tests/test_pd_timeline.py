"""The P/D timing DAG: critical path, bounds, chunking, plots and widget."""
from dataclasses import replace

import matplotlib.figure
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hybrid_lab.serving.pd_timeline import (RESOURCES, PDTiming, TaskDAG, build_pd_dag, critical_path, paper_bytes,
                                    pd_overlap, plot_events, plot_timeline, schedule, timeline_summary,
                                    timeline_widget)


def test_critical_path_diamond():
    d = {"a": 2.0, "b": 3.0, "c": 5.0, "d": 1.0}
    preds = {"b": ["a"], "c": ["a"], "d": ["b", "c"]}
    length, path, start, finish = critical_path(d, preds, ["a", "b", "c", "d"])
    assert length == 8.0 and path == ["a", "c", "d"]
    assert start["d"] == 7.0 and finish["b"] == 5.0
    # not the sum (11), not the max (5)
    assert length not in (sum(d.values()), max(d.values()))


def test_release_and_resource_edges():
    dag = TaskDAG()
    dag.add("x", 1.0, "R")
    dag.add("y", 2.0, "R", release=5.0)                   # waits for its release, and for x (same resource)
    dag.add("z", 4.0, "S")
    length, path, start, _ = critical_path(dag.durations(), dag.preds(), dag.order, dag.releases())
    assert start["y"] == 5.0 and length == 7.0 and path == ["y"]
    assert dag.preds()["y"] == ["x"]
    with pytest.raises(ValueError, match="unknown"):
        dag.add("w", 1.0, after=["nope"])
    with pytest.raises(ValueError, match="already"):
        dag.add("x", 1.0)
    with pytest.raises(ValueError, match="duration"):
        dag.add("v", -1.0)
    with pytest.raises(ValueError, match="topological"):
        critical_path({"a": 1, "b": 1}, {"a": ["b"]}, ["a", "b"])


def test_defaults_are_the_paper_bytes():
    pb = paper_bytes()
    # 5 global KVs (self FA + 4 cross) x (256 + 256) x 1 KV head, FP8; 24 SWA windows of 128 entries + boundary
    assert pb["per_token"] == 2560 and pb["fixed"] == 24 * 128 * 512 + 2048 * 2
    t = PDTiming()
    assert (t.bytes_per_token, t.fixed_bytes) == (pb["per_token"], pb["fixed"])


def test_pd_schedule_bounds_and_path_is_a_chain():
    s = schedule(PDTiming())
    assert s["max_busy"] < s["makespan"] < s["sum"]
    dag = s["dag"]
    path = s["path"]
    for a, b in zip(path, path[1:]):
        assert a in dag.tasks[b]["preds"]
        assert np.isclose(s["finish"][a], s["start"][b])
    assert np.isclose(s["finish"][path[-1]], s["makespan"])
    assert path[-1] == "r2.decode"
    assert len(s["ttft"]) == 3 and s["ttft"][0] > 0


def test_p_prefills_next_request_while_d_decodes():
    s = schedule(PDTiming(n_requests=2))
    assert s["start"]["r1.build0"] < s["finish"]["r0.decode"]
    assert s["start"]["r1.build0"] >= s["finish"]["r0.build7"]        # P is one resource


def test_chunking_hides_a_slow_transfer():
    slow = PDTiming(n_requests=1, bandwidth_gbs=0.5)
    whole = schedule(replace(slow, chunk=slow.prompt_len))["ttft"][0]
    chunked = schedule(slow)["ttft"][0]
    assert chunked < whole
    # one chunk: build, then the whole transfer, then install: nothing overlaps within the request
    t = replace(slow, chunk=slow.prompt_len)
    L = t.prompt_len
    serial = (L * t.p_us_per_token * 1e-3 + (L * t.bytes_per_token + t.fixed_bytes) / (t.bandwidth_gbs * 1e6)
              + t.fixed_bytes / (t.install_gbs * 1e6) + t.first_ms)
    assert np.isclose(whole, serial)


@settings(max_examples=25, deadline=None)
@given(L=st.integers(1, 5000), chunk=st.integers(1, 5000), bw=st.floats(0.01, 100), n=st.integers(1, 4),
       gap=st.floats(0, 500))
def test_property_critical_path_between_max_and_sum(L, chunk, bw, n, gap):
    t = PDTiming(prompt_len=L, chunk=chunk, bandwidth_gbs=bw, n_requests=n, arrival_gap_ms=gap)
    s = schedule(t)
    assert s["max_busy"] - 1e-9 <= s["makespan"] <= s["sum"] + (n - 1) * gap + 1e-9
    assert len(build_pd_dag(t).tasks) == n * (3 * -(-L // chunk) + 4)


@pytest.mark.parametrize("field,value", [("prompt_len", 0), ("chunk", 1.5), ("bandwidth_gbs", 0.0),
                                         ("decode_ms", -1.0), ("n_requests", True)])
def test_timing_validation(field, value):
    with pytest.raises(ValueError, match=field):
        PDTiming(**{field: value})


def test_plots_summary_widget():
    fig = plot_timeline(PDTiming(n_requests=2))
    assert isinstance(fig, matplotlib.figure.Figure)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == list(RESOURCES)
    assert len(fig.axes[0].patches) == len(build_pd_dag(PDTiming(n_requests=2)).tasks)
    text = timeline_summary(PDTiming())
    assert "critical path" in text and "r0.build0..7" in text and " ms" not in text
    w = timeline_widget()
    assert len(w.children) >= 5
    ev = {"P": {"events": [(0, "prefill chunk 0", 1.0, 1.1)]}, "D": {"events": [(0, "receive", 1.05, 1.2)]}}
    assert isinstance(plot_events(ev), matplotlib.figure.Figure)
    with pytest.raises(ValueError, match="no events"):
        plot_events({"P": {}, "D": {}})
    import matplotlib.pyplot as plt
    plt.close("all")


def test_pd_overlap_from_events():
    rep = {"P": {"events": [(0, "prefill chunk 0", 0.0, 1.0), (1, "prefill chunk 0", 1.0, 3.0),
                            (2, "prefill chunk 0", 3.0, 3.5)]},
           "D": {"events": [(0, "receive", 0.5, 1.0), (0, "install", 1.0, 1.1), (0, "first token + decode", 1.1, 2.5),
                            (1, "first token + decode", 3.0, 4.0)]}}
    ov = pd_overlap(rep)
    assert ov[0] == pytest.approx(1.5)      # P on request 1 during [1.0, 2.5]
    assert ov[1] == pytest.approx(0.5)      # P on request 2 during [3.0, 3.5]
