"""benchmarks/merge_bench.py, how one bench run enters the stored GPU results: its (kernel, phase) rows replace the
stored ones and name their run, other rows stay; config and checks keys are replaced, errors appended; a run from
another machine or with no rows is refused."""
import json

import pytest

from bench_scripts import load


def _mod():
    return load("merge_bench")


def _row(kernel, phase, ms, run=None):
    r = {"kernel": kernel, "phase": phase, "shape": {"L": 8}, "ms": ms}
    return r if run is None else dict(r, run=run)


STORED = {"machine": "NVIDIA H200", "date": "old", "copy_GBps": 4200.0, "bf16_TFLOPs": 700.0,
          "rows": [_row("ssd_chunked", "prefill", 1.0, "a.json"), _row("selective_scan", "decode", 2.0, "a.json"),
                   _row("selective_scan", "prefill", 3.0, "a.json")],
          "config": {"ssd": 1, "scan": 2}, "checks": {"x": 1.0}, "errors": [{"section": "s", "error": "e", "file": "a"}],
          "runs": [{"file": "a.json"}]}
RUN = {"machine": "NVIDIA H200", "date": "new", "command": "python -m gpu_track.bench --only selective_scan",
       "copy_GBps": 4250.0, "bf16_TFLOPs": 710.0, "rows": [_row("selective_scan", "prefill", 2.5)],
       "config": {"scan": 3}, "checks": {"y": 2.0}, "errors": [{"section": "t", "error": "f"}], "mamba_ssm": "2.3.2"}


def test_rows_of_the_run_replace_only_their_kernel_and_phase():
    out = _mod().merge(STORED, RUN, "b.json")
    got = {(r["kernel"], r["phase"]): (r["ms"], r["run"]) for r in out["rows"]}
    assert got == {("ssd_chunked", "prefill"): (1.0, "a.json"), ("selective_scan", "decode"): (2.0, "a.json"),
                   ("selective_scan", "prefill"): (2.5, "b.json")}
    assert out["config"] == {"ssd": 1, "scan": 3} and out["checks"] == {"x": 1.0, "y": 2.0}
    assert out["errors"][-1] == {"section": "t", "error": "f", "file": "b.json"} and len(out["errors"]) == 2
    assert out["runs"][-1]["file"] == "b.json" and out["runs"][-1]["pairs"] == ["selective_scan prefill"]
    assert out["date"] == "new" and out["copy_GBps"] == 4250.0 and out["mamba_ssm"] == "2.3.2"
    assert STORED["rows"][2]["ms"] == 3.0          # the stored object is not changed in place


def test_a_run_from_another_machine_or_without_rows_is_refused():
    m = _mod()
    with pytest.raises(ValueError, match="NVIDIA A100"):
        m.merge(STORED, dict(RUN, machine="NVIDIA A100"), "b.json")
    with pytest.raises(ValueError, match="no rows"):
        m.merge(STORED, dict(RUN, rows=[]), "b.json")


def test_the_command_line_writes_the_merged_file(tmp_path):
    into, run = tmp_path / "h200.json", tmp_path / "run.json"
    into.write_text(json.dumps(STORED))
    run.write_text(json.dumps(RUN))
    _mod().main([str(run), "--into", str(into), "--name", "bench_new.json"])
    out = json.loads(into.read_text())
    assert [r["run"] for r in out["rows"] if r["phase"] == "prefill" and r["kernel"] == "selective_scan"] == [
        "bench_new.json"]
