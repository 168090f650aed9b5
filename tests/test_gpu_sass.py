"""gpu_track.sass: the scan's instruction mix, compiled for sm_90 ahead of time (no GPU needed), and the stored
table (gpu_track/results/sass_scan.json) that notebook 09 prints. Skipped where this Triton cannot compile for sm_90."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STORED = os.path.join(ROOT, "gpu_track", "results", "sass_scan.json")


@pytest.fixture(scope="module")
def fresh():
    env = dict(os.environ, TRITON_INTERPRET="0", TRITON_DEFAULT_FP_FUSION="1")
    p = subprocess.run([sys.executable, "-m", "gpu_track.sass", "--json"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=600)
    if p.returncode != 0 and "cannot compile for sm_90" in p.stdout:
        pytest.skip(p.stdout.strip())
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


def test_every_bench_config_does_one_exp_per_element_and_spills_nothing(fresh):
    """One MUFU (the exp2 of Δ·A) per (t, d, n) element: the layout computes no exp twice; no config the bench may
    pick spills registers; and every one issues fewer instructions per element than the old layout's 26."""
    from gpu_track import bench
    rows = fresh["selective_scan"]
    assert [r["config"] for r in rows] == [list(c[1:]) for c in bench.SCAN_CANDIDATES if c[0] == "chunked"]
    for r in rows:
        assert r["mix_per_element"].get("MUFU") == 1.0, r
        assert not r["spills"], r
        assert r["per_element"] < 22, r


def test_stored_table_is_what_this_compiler_gives(fresh):
    stored = json.load(open(STORED))
    if stored["triton"] != fresh["triton"]:
        pytest.skip(f"stored with Triton {stored['triton']}, this is {fresh['triton']}")
    assert [(r["config"], r["per_element"], r["registers"]) for r in stored["selective_scan"]] == \
        [(r["config"], r["per_element"], r["registers"]) for r in fresh["selective_scan"]]


# A two-loop function as cuobjdump prints it: an outer loop (0x10-0x70) around an inner one (0x20-0x50) holding
# two exps; the inner loop is one thread's 2 items of one state.
_SASS = """
        Function : _Z6kernelI6traitsILi2EEEv6Params
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   LDG.E R2, desc[UR4][R2.64] ;
        /*0020*/                   FMUL R3, R2, R4 ;
        /*0030*/                   MUFU.EX2 R5, R3 ;
        /*0040*/                   MUFU.EX2 R6, R3 ;
        /*0050*/              @P0  BRA 0x20 ;
        /*0060*/                   STG.E desc[UR4][R8.64], R5 ;
        /*0070*/              @!P1 BRA 0x10 ;
        /*0080*/                   EXIT ;
        Function : _Z5otherv
        /*0000*/                   EXIT ;
"""


def test_loops_are_read_from_backward_branches_and_divided_per_element():
    from gpu_track import sass
    loops = sass.sass_loops(sass.mamba_function_sass(_SASS, "traitsILi2E"))
    assert [(lp["start"], lp["end"], lp["count"]) for lp in loops] == [(0x10, 0x70, 7), (0x20, 0x50, 4)]
    assert loops[1]["ops"] == {"FMUL": 1, "MUFU": 2, "BRA": 1}
    mix = sass.loop_mix(sass.mamba_function_sass(_SASS, "traitsILi2E"), items=2, states=3)
    # the state loop, 4 instructions for 2 items; the chunk loop's 3 others shared by 2 items x 3 states
    assert (mix["state_loop"], mix["chunk_loop"], mix["per_element"]) == (4, 7, round(4 / 2 + 3 / 6, 2))
    with pytest.raises(ValueError, match="exactly one function"):
        sass.mamba_function_sass(_SASS, "nothing")
    with pytest.raises(ValueError, match="no loop with 4 exps"):
        sass.loop_mix(sass.mamba_function_sass(_SASS, "traitsILi2E"), items=4, states=1)


def test_mambas_cuda_scan_counted_like_ours_where_nvcc_and_its_source_are_here():
    """Compiled with nvcc for sm_90 (no GPU), its state loop does one exp per element and it issues more
    instructions per element than any config of ours the bench may pick at batch 1 (the stored table says which)."""
    import shutil

    from gpu_track import peers, sass
    try:
        peers.mamba_source()
    except ImportError as e:
        pytest.skip(str(e))
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc")
    got = sass.mamba_scan_mix()
    assert got["mix_per_element"]["MUFU"] == 1.0 and got["warps_per_block"] == 4, got
    stored = json.load(open(STORED)).get("mamba_selective_scan_cuda")
    assert stored is not None and stored["per_element"] == got["per_element"], (stored, got)


def test_stored_peer_row_issues_more_per_element_than_our_batch1_picks():
    stored = json.load(open(STORED))
    peer = stored["mamba_selective_scan_cuda"]
    ours = {tuple(r["config"]): r["per_element"] for r in stored["selective_scan"]}
    assert peer["per_element"] > max(ours[(ch, 4, 4, 1)] for ch in (16, 32)), (peer, ours)


SSD_STORED = os.path.join(ROOT, "gpu_track", "results", "sass_ssd.json")


def test_stored_ssd_table_covers_every_bench_config_and_matches_this_compiler_at_the_pick():
    """sass_ssd.json (``python -m gpu_track.targets --sass-ssd``) has a row per SSD bench candidate; at the config the stored
    bench rows picked, a fresh sm_90 compile gives the stored counts (same Triton), and the chunk-state kernel with
    8 warps spills nothing (int32 in-tile offsets: with 2-D int64 offsets it spilled)."""
    from gpu_track import bench
    stored = json.load(open(SSD_STORED))
    keys = [bench.ssd_config_json(c) for c in bench.SSD_CANDIDATES]
    assert [r["config"] for r in stored["ssd_chunked"]] == keys
    by = {json.dumps(r["config"]): r["kernels"] for r in stored["ssd_chunked"]}
    eight = [c for c in bench.SSD_CANDIDATES if c[4] and c[2] == 8]
    assert all(by[json.dumps(keys[bench.SSD_CANDIDATES.index(c)])][0]["local_loads"] == 0 for c in eight)
    pick = (128, 64, 4, 1, True, 128, "torch.bfloat16", 1024, 8, 8)           # the stored rows' pick, as stored
    code = ("import json, sys; from gpu_track import bench, sass, targets; import triton; c = next(c for c in "
            "bench.SSD_CANDIDATES if bench.ssd_config_json(c) == json.loads(sys.argv[1])); "
            "print(json.dumps({'triton': triton.__version__, 'ok': sass.available(), "
            "'rows': targets.ssd_mix(c) if sass.available() else None}))")
    env = dict(os.environ, TRITON_INTERPRET="0", TRITON_DEFAULT_FP_FUSION="1")
    p = subprocess.run([sys.executable, "-c", code, json.dumps(list(pick))], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    if not got["ok"]:
        pytest.skip("this Triton cannot compile for sm_90 here")
    if got["triton"] != stored["triton"]:
        pytest.skip(f"stored with Triton {stored['triton']}, this is {got['triton']}")
    assert got["rows"] == by[json.dumps(list(pick))]
