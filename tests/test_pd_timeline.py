"""The P/D timing DAG: critical path, bounds, chunking, the summary, the event log (plots: test_widgets.py)."""
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hybrid_lab.serving.pd_timeline import (PDTiming, TaskDAG, build_pd_dag, critical_path, events, paper_bytes,
                                            path_text, pd_overlap, schedule, timeline_summary)


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
                                         ("bandwidth_gbs", np.inf), ("decode_ms", -1.0), ("first_ms", np.nan),
                                         ("n_requests", True), ("fixed_bytes", "0")])
def test_timing_validation(field, value):
    with pytest.raises(ValueError, match=field):
        PDTiming(**{field: value})


def test_summary_and_path_text():
    text = timeline_summary(PDTiming())
    assert "critical path" in text and "r0.build0..7" in text and " ms" not in text
    s = schedule(PDTiming())
    assert text.endswith(path_text(s["path"]))
    assert f"critical path {s['makespan']:.1f}" in text
    assert path_text(["r0.build0", "r0.build1", "r0.send0", "r1.first"]) == "r0.build0..1 -> r0.send0 -> r1.first"
    assert path_text([]) == ""


@pytest.mark.parametrize("call, match", [
    (lambda: TaskDAG().add("a", np.nan), "duration"),
    (lambda: TaskDAG().add("a", "1.0"), "duration"),
    (lambda: TaskDAG().add("a", 1.0, release=-1.0), "release"),
    (lambda: TaskDAG().add("", 1.0), "name"),
    (lambda: TaskDAG().add("a", 1.0, resource=3), "resource"),
    (lambda: TaskDAG().add("a", 1.0, after="b"), "after"),
    (lambda: critical_path({"a": 1.0}, {}, ["a", "b"]), "order"),
    (lambda: critical_path({"a": 1.0, "b": 1.0}, {}, ["a"]), "order"),
    (lambda: critical_path({"a": 1.0}, {}, ["a", "a"]), "order"),
    (lambda: critical_path({"a": np.inf}, {}, ["a"]), "durations"),
    (lambda: critical_path({"a": 1.0}, {}, ["a"], release={"a": np.nan}), "release"),
    (lambda: paper_bytes(d_model_bytes=0), "d_model_bytes"),
    (lambda: paper_bytes(design="HySparse2"), "design"),
    (lambda: build_pd_dag({"prompt_len": 8}), "PDTiming"),
    (lambda: schedule(None), "PDTiming"),
    (lambda: path_text("r0.build0"), "path"),
    (lambda: path_text([1, 2]), "path"),
    (lambda: events({"P": {"events": [(0, "x", 0.0)]}}, "P"), "events"),
    (lambda: events({"P": {"events": [(-1, "x", 0.0, 1.0)]}}, "P"), "request"),
    (lambda: events({"P": {"events": [(0, "x", 2.0, 1.0)]}}, "P"), "ends before"),
    (lambda: events({"P": {}}, "Q"), "role"),
    (lambda: pd_overlap([1, 2]), "reports"),
])
def test_bad_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_pd_overlap_from_events():
    rep = {"P": {"events": [(0, "prefill chunk 0", 0.0, 1.0), (1, "prefill chunk 0", 1.0, 3.0),
                            (2, "prefill chunk 0", 3.0, 3.5)]},
           "D": {"events": [(0, "receive", 0.5, 1.0), (0, "install", 1.0, 1.1), (0, "first token + decode", 1.1, 2.5),
                            (1, "first token + decode", 3.0, 4.0)]}}
    ov = pd_overlap(rep)
    assert ov[0] == pytest.approx(1.5)      # P on request 1 during [1.0, 2.5]
    assert ov[1] == pytest.approx(0.5)      # P on request 2 during [3.0, 3.5]
