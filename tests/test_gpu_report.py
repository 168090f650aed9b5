"""gpu_track.report: the stored H200 results, the targets check, rooflines and the explorer (no GPU needed)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from gpu_track import report


def _fake(rows=None):
    return {"machine": "X", "date": "d", "copy_GBps": 1000.0, "bf16_TFLOPs": 100.0, "rows": rows or [
        {"kernel": "sparse_attention", "phase": "decode", "shape": {"B": 64, "S": 32768}, "ms": 1.0,
         "bytes": 8e8, "flops": 1.6e9, "frac_bw": 0.8, "peers": {"p": 2.0}},
        {"kernel": "ssd_chunked", "phase": "prefill", "shape": {"Bt": 1}, "ms": 1.0, "bytes": 1e6, "flops": 1e9,
         "frac_bw": 0.001, "peers": {"fla chunk_simple_gla": 0.5}},
    ]}


def test_stored_results_load_and_have_every_kernel():
    res = report.load_results()
    assert res["copy_GBps"] > 1000 and res["bf16_TFLOPs"] > 100
    # every kernel, plus the unfused selective scan of Lecture 10 §2.3 (the fused scan's comparison row)
    assert {r["kernel"] for r in res["rows"]} == set(report.KERNELS) | {"selective_scan_unfused"}
    for r in res["rows"]:   # frac_bw is what the issue defines: bytes / ms / copy_GBps
        assert r["frac_bw"] == pytest.approx(r["bytes"] / (r["ms"] * 1e-3) / 1e9 / res["copy_GBps"], rel=1e-2)


def test_check_targets_counts_wins_and_thresholds():
    t = {x["kernel"]: x for x in report.check_targets(_fake())}
    assert t["sparse_attention"]["met"] is True                 # 0.8 >= 0.8
    assert t["ssd_chunked"]["met"] is False and "0/1" in t["ssd_chunked"]["measured"]   # 0.5x < 1.5x
    fast = _fake()
    fast["rows"][1]["peers"] = {"mamba x": 1.6, "fla chunk_simple_gla": 1.5}          # fastest peer 1.5 ms: 1.5x
    fast["rows"].append({"kernel": "selective_scan", "phase": "prefill", "shape": {"Bt": 1}, "ms": 2.0, "bytes": 1,
                         "flops": 1, "frac_bw": 0.1, "frac_of_bound": 0.49, "peers": {}})
    t = {x["kernel"]: x for x in report.check_targets(fast)}
    assert t["ssd_chunked"]["met"] is True and "1/1" in t["ssd_chunked"]["measured"]
    assert t["selective_scan"]["met"] is False and t["selective_scan"]["measured"].startswith("0.49")
    rows = report.check_targets(_fake())
    bsd = next(x for x in rows if x["kernel"] == "block_sparse_attention" and x["phase"] == "decode")
    assert bsd["measured"] == "no rows" and not bsd["met"]
    assert t["lightning_indexer"]["measured"] == "no rows" and not t["lightning_indexer"]["met"]


def test_roofline_numbers():
    res = _fake()
    ai, tf, ph = report.roofline_points(res, "sparse_attention")
    assert ai.tolist() == [2.0] and tf.tolist() == pytest.approx([1.6]) and ph == ["decode"]
    assert report.roof(res, [1.0, 1e6]).tolist() == [1.0, 100.0]       # bandwidth slope, then the flat peak
    assert "0.80 of roof" in report.roofline_summary(res, "sparse_attention")
    assert report.predict_decode_ms(4.275e9, 4275.0) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="copy_GBps"):
        report.predict_decode_ms(1.0, 0.0)
    with pytest.raises(ValueError, match="kernel"):
        report.roofline_points(res, "nope")


def test_plot_roofline_draws_the_roof_and_the_measured_rows():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    res = report.load_results()
    fig = report.plot_roofline(res, "fa_decode_topk")
    ax = fig.axes[0]
    roof_line, *points = ax.lines
    xs = np.asarray(roof_line.get_xdata())
    assert np.allclose(roof_line.get_ydata(), report.roof(res, xs))                   # the roof is the roofline
    assert xs.min() == pytest.approx(0.1) and xs.max() == pytest.approx(1e4)
    ai, tf, phase = report.roofline_points(res, "fa_decode_topk")
    drawn = {ln.get_label(): (np.asarray(ln.get_xdata()), np.asarray(ln.get_ydata())) for ln in points}
    for ph in sorted(set(phase)):                                                    # one marker series per phase
        sel = [i for i, p in enumerate(phase) if p == ph]
        x, y = drawn[f"fa_decode_topk {ph} (measured)"]
        assert np.allclose(x, ai[sel]) and np.allclose(y, tf[sel])
    assert len(points) == len(set(phase)) and ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert res["machine"] in ax.get_title()
    plt.close(fig)


def test_roofline_explorer_offers_every_kernel_and_shows_its_summary(capsys):
    import matplotlib
    matplotlib.use("Agg")
    import ipywidgets
    res = _fake()
    w = report.roofline_explorer(res)
    assert isinstance(w, ipywidgets.Widget)
    assert list(w.children[0].options) == list(report.KERNELS) and w.children[0].value == report.KERNELS[0]
    capsys.readouterr()
    w.f("ssd_chunked")                                    # what picking a kernel in the dropdown runs
    assert report.roofline_summary(res, "ssd_chunked") in capsys.readouterr().out


def test_table_and_bad_file(tmp_path):
    lines = report.results_table(_fake())
    assert len(lines) == 3 and "p (2.000)" in lines[1]
    bad = tmp_path / "r.json"
    bad.write_text(json.dumps({"machine": "x"}))
    with pytest.raises(ValueError, match="copy_GBps|date"):
        report.load_results(bad)
    with pytest.raises(ValueError, match="no benchmark results"):
        report.load_results(tmp_path / "missing.json")
    assert report.shape_str({"B": 64, "S": 131072, "dtype": "bf16"}) == "B=64 S=128K"
    assert np.isfinite(report.roof(_fake(), 3.0))


def test_scan_limits_computes_the_issue_time_and_reads_the_profile():
    """n elements x instructions per element / (4 x 32 lanes x SMs x 1.98 GHz) is the time at the full issue rate."""
    row = {"kernel": "selective_scan", "phase": "prefill", "shape": {"Bt": 1, "L": 1024, "Dm": 64, "N": 16},
           "ms": 2.0, "bytes": 1, "flops": 1, "frac_bw": 0.1, "frac_of_bound": 0.25, "bound_ms": 0.5, "peers": {},
           "config": {"variant": "chunked", "chunk": 16, "block_d": 8, "lanes_d": 8, "num_warps": 1}}
    res = _fake([row])
    res["sms"] = 2
    sass = {"selective_scan": [{"config": [16, 8, 8, 1], "per_element": 10.0}]}
    lines = report.scan_limits(res, sass)
    issue_ms = 1024 * 64 * 16 * 10.0 / (4 * 32 * 2 * 1.98e9) * 1e3
    assert f"{issue_ms:.3f} ms at the full issue rate" in lines[0] and "(0.25 of it)" in lines[0]
    assert lines[-1] == "profile: not in this JSON"
    res["profile"] = {"cases": {"selective_scan_prefill": {"0:_scan_kernel": {
        "active_warps_per_scheduler": 1.5, "eligible_warps_per_scheduler": 0.25, "issue_slots_busy_pct": 30.0,
        "dram_pct_of_peak": 5.0, "achieved_occupancy_pct": 9.0}}}}
    assert "1.50 warps per scheduler (0.25 ready to issue), issue slots busy 30%" in report.scan_limits(res, sass)[-1]
    assert report.scan_limits(_fake(), sass) == []
    sass["mamba_selective_scan_cuda"] = {"per_element": 22.03, "registers": 128, "warps_per_block": 4}
    assert report.scan_limits(res, sass)[-1].startswith("mamba's CUDA scan, compiled the same way (nvcc): 22.0 "
                                                        "instructions per element, 128 registers, 4 warps")
    assert report.scan_limits(_fake(), sass) == []


def test_ssd_limits_counts_the_three_launch_bytes_and_shares_the_profiled_time():
    row = {"kernel": "ssd_chunked", "phase": "prefill", "shape": {"Bt": 1, "L": 100, "H": 2, "P": 5, "N": 3},
           "ms": 2.0, "bytes": 1000.0, "flops": 1, "frac_bw": 0.1, "states_bytes": 500.0,
           "peers": {"fla chunk_simple_gla": 3.0, "mamba x": 4.0}}
    res = _fake([row])
    res["profile"] = {"cases": {"ssd_two_pass_b4": {"0:_a": {"time_ns": 300.0}, "1:_b": {"time_ns": 100.0}}}}
    lines = report.ssd_limits(res)
    floor_ms = (1000.0 + 1 * 100 * 2 * 5 * 2 + 500.0) / (1000.0 * 1e9) * 1e3
    assert "1.50x the fastest peer (fla chunk_simple_gla)" in lines[0] and "asks 2.000 ms" in lines[0]
    assert f"take {floor_ms:.3f} ms" in lines[0]
    assert lines[1].startswith("  _a: 75% of the time") and lines[2].startswith("  _b: 25% of the time")


def test_stored_results_explain_every_missed_target():
    """Each missed target comes with its measured bound and what limits it (profile, instruction count)."""
    res, sass = report.load_results(), report.load_sass()
    missed = {t["kernel"] for t in report.check_targets(res) if not t["met"]}
    if "selective_scan" in missed:
        lines = report.scan_limits(res, sass)
        assert any("instructions per element" in x for x in lines)
        assert any("warps per scheduler" in x for x in lines) and lines[-1].startswith("mamba's CUDA scan")
    if "ssd_chunked" in missed:
        lines = report.ssd_limits(res)
        assert any("_ssd_out_kernel" in x and "spill" in x for x in lines)


def test_ssd_sass_lines_read_the_picked_config_from_the_table():
    cfg = dict(zip(report.SSD_CONFIG_ORDER, (128, 64, 4, 1, True, 128, "torch.bfloat16", 1024, 8, 8)))
    row = {"kernel": "ssd_chunked", "phase": "prefill", "shape": {"Bt": 1, "L": 100, "H": 2, "P": 5, "N": 3},
           "ms": 2.0, "bytes": 1.0, "flops": 1, "frac_bw": 0.1, "config": cfg}
    kern = {"kernel": "ssd_out_kernel", "registers": 255, "instructions": 9224, "local_loads": 851,
            "local_stores": 1, "exps": 1, "shared": 1}
    table = {"triton": "3.9.0", "ssd_chunked": [{"config": [128, 64, 8, 1, True, 128, "torch.bfloat16", 1024, 8, 8],
                                                 "kernels": [dict(kern, instructions=1)]},
                                                {"config": list(cfg.values()), "kernels": [kern]}]}
    lines = report.ssd_sass_lines(_fake([row]), table)
    assert lines[0].startswith("the picked config compiled for sm_90 now (Triton 3.9.0")
    assert lines[1] == "  ssd_out_kernel: 255 registers, 9,224 instructions, 851 local-memory loads (spills)"
    assert report.ssd_sass_lines(_fake([dict(row, config=dict(cfg, chunk=64))]), table) == []
    assert report.ssd_sass_lines(_fake([]), table) == []


def test_ssd_config_order_is_the_benchs():
    from gpu_track import bench
    assert report.SSD_CONFIG_ORDER == bench.SSD_CONFIG_KEYS


def test_ssd_chained_lines_compare_the_fastest_of_each_form_in_one_run():
    probe = {"gpu": "G", "date": "d", "ragged_max_rel": 1e-7, "ragged_max_rel_bf16": 2e-3,
             "repeat_bitwise_equal_20": True,
             "rows": [{"Bt": 2, "L": 8192, "ms": {
                 "chunk=64,num_warps=4,chained=True,heads_per_program=4": 1.0,
                 "chunk=128,num_warps=8,chained=True,heads_per_program=1": 1.2,
                 "chunk=64,num_warps=4,two_pass=True,heads_per_program=8": 1.5,
                 "mamba cs128": 3.0, "mamba cs256": 2.0}},
                 {"Bt": 1, "L": 4096, "ms": {"mamba cs256": 1.0}}]}      # no form of ours timed: skipped
    lines = report.ssd_chained_lines(probe)
    assert lines[0].startswith("one launch") and "G, d" in lines[0]
    assert lines[1] == ("  Bt=2 L=8K: chained 1.000 ms (chunk 64, 4 head(s) a program), two-pass 1.500 ms, "
                        "mamba cs256 2.000 ms: chained 2.00x mamba, 1.50x the two-pass form")
    assert len(lines) == 3 and lines[2].startswith("  checks: ragged") and "True" in lines[2]
    assert report.ssd_chained_lines({"rows": []}) == []
    stored = report.ssd_chained_lines()        # the stored H200 probe: five shapes, its checks
    assert len(stored) == 7 and "H200" in stored[0]
