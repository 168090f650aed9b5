"""The SparDA offload simulator: layer times, the paper's directions, block residency, bad input."""
import numpy as np
import pytest

from hybrid_lab.serving import offload_sim as sim
from hypothesis import given, settings, strategies as st

from hybrid_lab.serving.offload_sim import (A100, H100, MINICPM_8B, Hardware, LayerTimes, ModelSpec, batch_sweep,
                                            cta_sweep, gpu_bytes, heuristic_ctas, layer_times, layer_timeline,
                                            max_batch, new_blocks, overlapped_layer_time, replay_trace,
                                            serial_layer_time, step_time, synthetic_trace, throughput, with_)

M = MINICPM_8B
CTX = 131072


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 256), context=st.integers(64, 262144), ctas=st.integers(1, 100),
       churn=st.floats(0, 1), a100=st.booleans())
def test_overlap_never_loses_without_contention(batch, context, ctas, churn, a100):
    hw = A100 if a100 else H100
    t = layer_times(hw, M, batch, context, ctas, churn)
    assert t.forecast_sel <= t.sel                   # one head per group, no softmax
    assert t.compute_shared >= t.compute             # copy CTAs take SMs from compute
    assert t.transfer >= t.transfer_serial           # fewer CTAs copy more slowly
    # the same work, overlapped, with the copy at the serial speed and no contention or sync: never slower
    ideal = LayerTimes(t.sel, t.forecast_sel, t.transfer_serial, t.transfer_serial, t.compute, t.compute, 0.0,
                       t.new_blocks)
    assert overlapped_layer_time(ideal) <= serial_layer_time(t) + 1e-15
    assert overlapped_layer_time(t) == pytest.approx(t.forecast_sel + max(t.transfer, t.compute_shared) + t.sync)


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(8, 256), context=st.integers(32768, 262144), a100=st.booleans())
def test_overlap_wins_from_batch_8_with_a_good_cta_count(batch, context, a100):
    hw = A100 if a100 else H100
    serial = serial_layer_time(layer_times(hw, M, batch, context))
    best = min(overlapped_layer_time(layer_times(hw, M, batch, context, c)) for c in (8, 16, 32, 64))
    assert best <= serial


def test_too_few_copy_ctas_can_lose_to_serial():
    # A100 at batch 56 with the heuristic's 16 CTAs: the copy runs at a fraction of the link and exceeds compute
    t = layer_times(A100, M, 56, 131072)
    assert heuristic_ctas(A100, 56) == 16 and t.transfer > t.compute_shared
    assert overlapped_layer_time(t) > serial_layer_time(t)


def test_only_new_blocks_move():
    np.testing.assert_array_equal(new_blocks([3, 5, 9, -1], [5, 1]), [3, 9])
    trace = [np.array([1, 2, 3]), np.array([2, 3, 4]), np.array([2, 3, 4]), np.array([7, 8, 9])]
    np.testing.assert_array_equal(replay_trace(trace), [3, 1, 0, 3])
    np.testing.assert_array_equal(replay_trace(trace, always_resident=[1, 7]), [2, 1, 0, 2])
    tr = synthetic_trace(200, 40, 6, churn=0.25, seed=0)
    copied = replay_trace(tr)
    assert copied[0] == 40 and (copied[1:] == 10).all()
    # the simulator moves churn x top-k blocks per sequence, and nothing when nothing changes
    t0 = layer_times(H100, M, 8, CTX, 16, churn=0.0)
    t1 = layer_times(H100, M, 8, CTX, 16, churn=0.2)
    assert t1.new_blocks == pytest.approx(0.2 * M.topk)
    assert t0.transfer == pytest.approx(H100.launch_s) and t1.transfer > 10 * t0.transfer


def test_paper_directions_are_reproduced():
    # same-batch, both offloaded: SparDA beats Sparse once there is traffic to hide
    for b in (8, 16, 64):
        assert throughput(H100, M, b, CTX, "SparDA") > 1.1 * throughput(H100, M, b, CTX, "Sparse")
    # capacity: offloading lets a much larger batch run; the best feasible batches differ a lot
    assert max_batch(H100, M, CTX, "SparDA") > 4 * max_batch(H100, M, CTX, "Sparse†")
    best = lambda meth: max(batch_sweep(H100, M, CTX, methods=(meth,))[meth])  # noqa: E731
    assert best("SparDA") > 2 * best("Sparse†")
    # small batch: the async pipeline costs a little (no-prefetch is as fast or faster) ...
    assert throughput(H100, M, 4, CTX, "SparDA (no prefetch)") >= throughput(H100, M, 4, CTX, "SparDA")
    # ... and with KV comfortably on the GPU, the resident path wins
    assert throughput(H100, M, 16, 32768, "Sparse†") > throughput(H100, M, 16, 32768, "SparDA")
    # CTA trade-off: the best CTA count grows with the batch
    ctas = (8, 16, 32, 64)
    grid = cta_sweep(H100, M, 32768, batches=(16, 64), ctas=ctas)
    assert ctas[int(np.argmax(grid[0]))] < ctas[int(np.argmax(grid[1]))]
    assert grid[0, ctas.index(16)] > grid[0, ctas.index(64)] and grid[1, ctas.index(64)] > grid[1, ctas.index(16)]


def test_presets_capacity_and_forecast_size():
    assert M.forecast_params == 33_554_432                        # reported: 33.5M extra parameters
    assert 7.5e9 < M.n_layers * M.layer_params < 8.5e9
    assert heuristic_ctas(H100, 16) == 16 and heuristic_ctas(H100, 32) == 32 and heuristic_ctas(A100, 32) == 16
    assert throughput(H100, M, 10_000, CTX, "Sparse†") == 0.0    # OOM
    assert H100.copy_bw(8) < H100.copy_bw(32) < H100.pcie_bw
    assert step_time(A100, M, 8, CTX, "SparDA") > step_time(H100, M, 8, CTX, "SparDA")
    faster_link = with_(H100, pcie_bw=120e9)
    assert throughput(faster_link, M, 64, CTX, "Sparse") > throughput(H100, M, 64, CTX, "Sparse")


T0 = LayerTimes(1e-5, 5e-6, 2e-5, 1e-5, 3e-5, 4e-5, 1e-5, 3)


@pytest.mark.parametrize("call, match", [
    (lambda: layer_times(H100, M, 8, CTX, ctas=132), "ctas"),
    (lambda: layer_times(H100, M, 8, CTX, ctas=16.0), "ctas"),
    (lambda: layer_times(H100, M, 0, CTX), "batch"),
    (lambda: layer_times(H100, M, 8, 2.5), "context"),
    (lambda: layer_times(H100, M, 8, CTX, churn=1.5), "churn"),
    (lambda: layer_times(H100, M, 8, CTX, churn=np.nan), "churn"),
    (lambda: layer_times("H100", M, 8, CTX), "hw"),
    (lambda: layer_times(H100, {"n_layers": 32}, 8, CTX), "ModelSpec"),
    (lambda: step_time(H100, M, 8, CTX, "Dense"), "method"),
    (lambda: step_time(H100, M, 8, CTX, "SparDA", overlapped_fn=3), "overlapped_fn"),
    (lambda: step_time(H100, M, 8, CTX, "SparDA", overlapped_fn=lambda t: float("nan")), "overlapped_fn"),
    (lambda: throughput(H100, M, -1, CTX, "SparDA"), "batch"),
    (lambda: gpu_bytes(M, 8, 0, "SparDA"), "context"),
    (lambda: max_batch(H100, M, CTX, "Sparse+"), "method"),
    (lambda: heuristic_ctas(H100, 0), "batch"),
    (lambda: Hardware("x", hbm_bw=1e12, pcie_bw=0, flops=1e12, n_sms=10, hbm_bytes=1e9), "pcie_bw"),
    (lambda: Hardware("x", hbm_bw=1e12, pcie_bw=1e9, flops=1e12, n_sms=1, hbm_bytes=1e9), "n_sms"),
    (lambda: with_(H100, efficiency=np.nan), "efficiency"),
    (lambda: with_(H100, efficiency=1.5), "efficiency"),
    (lambda: with_(H100, launch_s=-1e-6), "launch_s"),
    (lambda: with_(H100, pcie_gbps=25), "not a Hardware field"),
    (lambda: ModelSpec(n_kv_heads=3), "multiple"),
    (lambda: ModelSpec(block=0), "block"),
    (lambda: ModelSpec(churn=-0.1), "churn"),
    (lambda: ModelSpec(window=8, stride=16), "stride"),
    (lambda: ModelSpec(topk=0), "topk"),                      # a block budget without dynamic blocks
    (lambda: ModelSpec(n_local=0), "n_local"),                # the query's own block is always local
    (lambda: Hardware("x", hbm_bw=1e12, pcie_bw=1e9, flops=1e12, n_sms=10, hbm_bytes=1e9, cta_half=0), "cta_half"),
    (lambda: LayerTimes(np.nan, 0, 0, 0, 0, 0, 0, 0), "sel"),
    (lambda: LayerTimes(0, 0, -1e-6, 0, 0, 0, 0, 0), "transfer"),
    (lambda: serial_layer_time((1e-5, 5e-6)), "LayerTimes"),
    (lambda: overlapped_layer_time(None), "LayerTimes"),
    (lambda: batch_sweep(H100, M, CTX, batches=(4, 8.5)), "batches"),
    (lambda: batch_sweep(H100, M, CTX, batches=()), "non-empty"),
    (lambda: batch_sweep(H100, M, CTX, methods=("SparDA", "Dense")), "method"),
    (lambda: cta_sweep(H100, M, CTX, ctas=(8, 0)), "ctas"),
    (lambda: cta_sweep(H100, M, CTX, ctas=(8, 200)), "ctas"),
    (lambda: new_blocks([1.5], [1]), "selected"),
    (lambda: new_blocks([1], [-2]), "resident"),
    (lambda: replay_trace([np.array([1, 2]), np.array([0.5])]), "trace\\[1\\]"),
    (lambda: replay_trace(5), "trace"),
    (lambda: replay_trace([np.array([1])], always_resident=[-1]), "always_resident"),
    (lambda: synthetic_trace(10, 11, 3, 0.1), "topk"),
    (lambda: synthetic_trace(10, 8, 3, 0.5), "unselected"),         # 4 new blocks per step, only 2 unselected
    (lambda: synthetic_trace(10, 4, 0, 0.5), "steps"),
    (lambda: synthetic_trace(10, 4, 3, 2.0), "churn"),
    (lambda: layer_timeline(H100, M, 16, CTX, n_layers=0), "n_layers"),
])
def test_bad_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_synthetic_trace_keeps_topk_blocks():
    """The check above exists because a too-small pool used to shrink the selection below topk silently."""
    tr = synthetic_trace(10, 5, 4, 1.0, seed=3)
    assert all(len(np.unique(t)) == 5 for t in tr)
    assert all(not set(a) & set(b) for a, b in zip(tr, tr[1:]))     # churn 1: every block replaced


def test_layer_timeline_totals():
    segs, tot = layer_timeline(H100, M, 16, CTX, 16, n_layers=2)
    serial_end = max(e for lane, s, e, _ in segs if lane == "serial: GPU")
    assert serial_end == pytest.approx(tot["serial"])
    t = layer_times(H100, M, 16, CTX, 16)
    assert tot["serial"] == pytest.approx(2 * serial_layer_time(t))
    assert tot["overlapped"] == pytest.approx(2 * overlapped_layer_time(t))


def test_calibrate_selector_reproduces_the_two_fitted_numbers_and_predicts_others():
    m = sim.MINICPM_8B
    cal = sim.calibrate_selector(sim.H100, m, 4, 131072, 167.8, 247.3)
    assert sim.throughput(cal, m, 4, 131072, "Sparse") == pytest.approx(167.8, rel=1e-9)
    assert sim.throughput(cal, m, 4, 131072, "SparDA (no prefetch)") == pytest.approx(247.3, rel=1e-9)
    assert cal.sel_latency_s > 2 * cal.fsel_latency_s > 0          # Fig. 3: Forecast selection > 2x cheaper
    # unfitted numbers move toward the paper: Sparse† at batch 4 (reported 189.5), SparDA/Sparse at batch 8 (1.69)
    assert abs(sim.throughput(cal, m, 4, 131072, "Sparse†") - 189.5) < 20
    r8 = sim.throughput(cal, m, 8, 131072, "SparDA") / sim.throughput(cal, m, 8, 131072, "Sparse")
    r8_roof = sim.throughput(sim.H100, m, 8, 131072, "SparDA") / sim.throughput(sim.H100, m, 8, 131072, "Sparse")
    assert r8_roof < 1.2 and r8 > 1.4
    # a zero latency is the roofline: the default presets are unchanged
    assert sim.layer_times(sim.H100, m, 8, 131072).sel < sim.layer_times(cal, m, 8, 131072).sel
    with pytest.raises(ValueError, match="sparse_tps"):
        sim.calibrate_selector(sim.H100, m, 4, 131072, 1e6, 247.3)      # faster than the roofline: nothing to add
    with pytest.raises(ValueError, match="no_prefetch_tps"):
        sim.calibrate_selector(sim.H100, m, 4, 131072, 167.8, -1.0)
    with pytest.raises(ValueError, match="sel_latency_s"):
        sim.with_(sim.H100, sel_latency_s=-1e-6)


def test_reserve_bounds_show_the_paper_oom_needs_more_than_kv():
    m, hw = sim.MINICPM_8B, sim.H100
    lo, hi = sim.reserve_bounds(hw, m, [(131072, "Sparse†", 4, True), (131072, "Sparse†", 8, False)])
    assert 0 < lo < hi                                   # alone, the Sparse† facts allow a reserve in (28.2, 45.9) GB
    assert lo == pytest.approx(hw.hbm_bytes - m.weight_bytes - 8 * (m.n_layers * 131072 * m.kv_token_layer
                                                                      + m.n_layers * 8191 * 2 * 128 * 2))
    lo2, hi2 = sim.reserve_bounds(hw, m, [(131072, "Sparse†", 8, False), (98304, "Sparse", 128, True)])
    assert lo2 > hi2                                     # with Sparse at 96K batch 128 running: contradictory
    assert sim.reserve_bounds(hw, m, []) == (0.0, hw.hbm_bytes)
    with pytest.raises(ValueError, match="facts"):
        sim.reserve_bounds(hw, m, [(131072, "Sparse†", 8)])
    with pytest.raises(ValueError, match="method"):
        sim.reserve_bounds(hw, m, [(131072, "Dense", 8, True)])


def test_accuracy_text_prints_the_reported_tables_and_the_differences():
    t = sim.accuracy_text()
    assert "61.7" in t and "51.7" in t and "+4.3" in t and "+1.5" in t
    for rows in sim.PAPER_ACCURACY["table1"].values():      # Avg is the mean of the four families
        for vals in rows.values():
            assert abs(sum(vals[:4]) / 4 - vals[4]) < 0.06


def test_new_blocks_refuses_a_repeated_selection_and_accepts_a_repeated_resident_block():
    # decided: a selection lists a block once, a repeat is a bug upstream and is refused; what
    # is resident is a set, often the union of overlapping caches, so a repeat there means the same as one
    with pytest.raises(ValueError, match="selected must not repeat a block id.*got 5 twice"):
        sim.new_blocks([0, 5, 5], [1])
    np.testing.assert_array_equal(sim.new_blocks([0, 5, -1, -1], [1, 1, 5, 5]), [0])      # -1 slots may repeat
    with pytest.raises(ValueError, match=r"trace\[1\] must not repeat a block id.*got 2 twice"):
        sim.replay_trace([np.array([1, 2]), np.array([2, 2])])
    # always_resident overlapping a step's selection (the previous step's blocks + the resident ones) is fine
    np.testing.assert_array_equal(sim.replay_trace([np.array([0, 1]), np.array([0, 2])], always_resident=[0, 0]),
                                  [1, 1])


@pytest.mark.parametrize("call, name", [
    (lambda: sim.synthetic_trace(2 ** 62, 4, 3, 0.25), "n_candidates"),
    (lambda: sim.synthetic_trace(100, 4, 2 ** 62, 0.25), "steps"),
    (lambda: sim.layer_timeline(sim.H100, sim.MINICPM_8B, 8, 32768, n_layers=2 ** 62), "n_layers"),
])
def test_huge_sizes_are_refused_by_name(call, name):
    with pytest.raises(ValueError, match=rf"^{name} .*more than {2 ** 40} \(2\*\*40\)"):
        call()
