"""P and D workers: weight split, in-process hand-off, and real 2-process runs on torch.distributed (gloo)."""
import subprocess
import sys
import time

import numpy as np
import pytest

from hybrid_lab.models.hysparse2 import HySparse2, HySparse2Config
from hybrid_lab.serving.pd_bundle import BundleError, PDBundle, bundle_bytes, encode_header, payload_digest

torch = pytest.importorskip("torch")
from hybrid_lab.serving.pd_workers import DWorker, PWorker, TransferTimeout, reference_tokens, run_pd  # noqa: E402
from hybrid_lab.serving import pd_workers  # noqa: E402

CFG = HySparse2Config(self_swa_before=2, self_swa_after=2, cross_layers=8, group_size=4, d_model=16, window=2,
                      topk=4, swa_window=3)
FULL = HySparse2.init_weights(CFG)
PROMPTS = [np.random.default_rng(i).integers(0, CFG.vocab, n) for i, n in enumerate((13, 21, 6, 17))]


def test_p_worker_holds_only_self_and_bridges():
    p = PWorker(CFG, FULL)
    assert p.model.weights and not any(n.startswith("cross.") or n == "lm_head" for n in p.model.weights)
    assert any(n.startswith("bridge.") for n in p.model.weights)
    cache = p.model.prefill_self(PROMPTS[0])
    with pytest.raises(ValueError, match="not held"):
        p.model.first_token(cache)                      # P cannot run the Cross-decoder
    with pytest.raises(ValueError, match="lacks"):
        PWorker(CFG, {n: w for n, w in FULL.items() if not n.startswith("bridge.")})


def test_in_process_handoff_equals_single_process():
    p, d = PWorker(CFG, FULL), DWorker(CFG, FULL)
    ref = reference_tokens(CFG, PROMPTS, 5)
    for req, prompt in enumerate(PROMPTS):
        b = p.bundle(prompt, chunk_size=5, request=req)
        arrays = b.to_arrays()
        d.accept(b.header)
        d.install(PDBundle.from_arrays(b.header, arrays, CFG, d.digest, payload_digest(arrays)))
        assert d.generate(req, 5) == ref[req]
    assert sorted(d.installed) == [0, 1, 2, 3]


def test_d_refuses_bundle_from_another_model():
    other = HySparse2Config(**{**CFG.__dict__, "seed": 7})
    p, d = PWorker(other, HySparse2.init_weights(other)), DWorker(CFG, FULL)
    b = p.bundle(PROMPTS[0])
    with pytest.raises(BundleError, match="config_hash"):
        d.accept(b.header)
    same_cfg_other_weights = PWorker(CFG, {**FULL, "embed": FULL["embed"] * 2})
    with pytest.raises(BundleError, match="weights_hash"):
        d.accept(same_cfg_other_weights.bundle(PROMPTS[0]).header)
    assert d.installed == {}


@pytest.mark.parametrize("kw, match", [
    (dict(backend="mpi"), "backend"),
    (dict(prompts=[np.array([CFG.vocab])]), "prompts\\[0\\]"),
    (dict(prompts=[np.array([1.0, 2.0])]), "prompts\\[0\\]"),
    (dict(prompts=[]), "prompts"),
    (dict(faults={0: "explode"}), "faults"),
    (dict(faults={0: "die_after_chunk"}), "chunk index"),                 # the chunk index is required
    (dict(faults={0: "tamper_dtype:1"}), "faults"),
    (dict(faults={9: "tamper_dtype"}), "request index"),
    (dict(n_new=0), "n_new"),
    (dict(n_new=2.0), "n_new"),
    (dict(chunk_size=0), "chunk_size"),
    (dict(timeout_s=np.nan), "timeout_s"),
    (dict(max_len=0), "max_len"),
    (dict(cfg={"vocab": 64}), "cfg"),
])
def test_run_pd_validates_arguments(kw, match):
    args = {**dict(prompts=PROMPTS, n_new=3, cfg=CFG), **kw}
    with pytest.raises(ValueError, match=match):
        run_pd(**args)


@pytest.mark.parametrize("call, match", [
    (lambda p, d: list(p.prefill_chunks(PROMPTS[0], 0)), "chunk_size"),
    (lambda p, d: list(p.prefill_chunks(np.array([CFG.vocab]), 4)), "tokens"),
    (lambda p, d: d.first(5), "installed"),
    (lambda p, d: d.generate(5, 3), "installed"),
    (lambda p, d: d.install("bundle"), "PDBundle"),
    (lambda p, d: DWorker(CFG, FULL, max_len=0), "max_len"),
    (lambda p, d: PWorker(CFG, [1, 2]), "weights"),
    (lambda p, d: reference_tokens(CFG, PROMPTS, 0), "n_new"),
    (lambda p, d: reference_tokens("cfg", PROMPTS, 2), "cfg"),
])
def test_worker_bad_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call(PWorker(CFG, FULL), DWorker(CFG, FULL))


def test_d_worker_decode_checks_token_and_count():
    p, d = PWorker(CFG, FULL), DWorker(CFG, FULL)
    d.install(p.bundle(PROMPTS[0], chunk_size=4, request=0))
    with pytest.raises(ValueError, match="token"):
        d.decode(0, CFG.vocab, 2)
    with pytest.raises(ValueError, match="n must be"):
        d.decode(0, 1, -1)
    assert d.decode(0, 1, 0) == [] and d.installed[0].pos == len(PROMPTS[0])     # n = 0: nothing decoded


def _wire_bytes(header_req, L, chunk):
    """What P sends for one accepted request: length + header + payload + 32-byte trailer."""
    from hybrid_lab.serving.pd_bundle import make_header
    p = PWorker(CFG, FULL)
    h = make_header(CFG, p.digest, L, chunk, header_req)
    return 8 + encode_header(h).size + bundle_bytes(CFG, L)["total"] + 32


def test_two_processes_gloo_tokens_refusals_bytes():
    t0 = time.time()
    faults = {1: "tamper_dtype", 3: "corrupt_payload"}
    r = run_pd(PROMPTS, 6, CFG, chunk_size=4, timeout_s=10, faults=faults)
    P, D = r["P"], r["D"]
    assert P["error"] is None and D["error"] is None, (P["error"], D["error"])
    ref = reference_tokens(CFG, PROMPTS, 6)
    assert D["tokens"] == {0: ref[0], 2: ref[2]}         # token for token, for every accepted prompt
    assert set(D["refused"]) == {1, 3}
    assert "'dtype'" in D["refused"][1] and "SHA-256" in D["refused"][3]
    assert D["installed"] == [0, 2]                       # refused bundles installed nothing
    assert P["refused_by_d"] == [1]                       # header refusal: P sent no payload
    for req in (0, 2):
        assert P["bytes"][req] == D["bytes"][req] == _wire_bytes(req, len(PROMPTS[req]), 4)
    assert P["bytes"][1] < 1000
    assert all(not n.startswith("cross.") for n in P["held_weights"])
    assert time.time() - t0 < 45


def test_p_dies_mid_transfer_d_times_out():
    t0 = time.time()
    r = run_pd(PROMPTS[:2], 3, CFG, chunk_size=4, timeout_s=3, faults={1: "die_after_chunk:1"})
    D = r["D"]
    assert D["error"] is not None and D["error"].startswith("TransferTimeout")
    assert "request 1" in D["error"] and "2 of 6 KV chunks" in D["error"]
    assert D["tokens"] == {0: reference_tokens(CFG, PROMPTS[:1], 3)[0]}
    assert D["installed"] == [0]
    assert time.time() - t0 < 30


def test_p_stalls_mid_transfer_d_times_out():
    t0 = time.time()
    r = run_pd(PROMPTS[:1], 3, CFG, chunk_size=4, timeout_s=2, faults={0: "stall_after_chunk:0"})
    assert r["D"]["error"].startswith("TransferTimeout") and "Timed out" in r["D"]["error"]
    assert r["D"]["installed"] == []
    assert r["P"]["error"] is not None                    # the stalled P was ended, not left behind
    assert time.time() - t0 < 30


def test_transfer_timeout_is_a_timeout_error():
    assert issubclass(TransferTimeout, TimeoutError)


def test_needs_torch_says_why_it_is_missing_on_each_platform():
    intel = pd_workers.torch_missing_reason("darwin", "x86_64")
    assert intel.startswith("needs torch, which has no wheels for Intel Macs") and "Apple-silicon Mac" in intel
    for system, machine in (("darwin", "arm64"), ("linux", "x86_64"), ("linux", "aarch64"), ("win32", "AMD64")):
        other = pd_workers.torch_missing_reason(system, machine)      # torch installs there: no extra
        assert other.startswith("needs torch, which is not installed here") and "gpu extra" in other, system
    assert pd_workers.HAS_TORCH and pd_workers.NEEDS_TORCH == pd_workers.torch_missing_reason()


def test_rendezvous_on_windows_uses_the_tcpstore_without_libuv(tmp_path):
    """Windows builds of torch have no libuv TCPStore (torch 2.4-2.6 asked for it there by default and failed):
    the URL says use_libuv=0 on Windows only. That store works: a one-rank gloo group with the Windows URL, here."""
    port = pd_workers.free_port()
    assert pd_workers._init_method(port, "linux") == pd_workers._init_method(port, "darwin") == \
        f"tcp://127.0.0.1:{port}"
    url = pd_workers._init_method(port, "win32")
    assert url == f"tcp://127.0.0.1:{port}?use_libuv=0"
    script = ("import datetime, torch, torch.distributed as dist\n"
              f"dist.init_process_group('gloo', init_method={url!r}, rank=0, world_size=1, "
              "timeout=datetime.timedelta(seconds=20))\n"
              "t = torch.ones(3); dist.all_reduce(t); dist.destroy_process_group(); print('ok', t.tolist())")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.stdout.strip() == "ok [1.0, 1.0, 1.0]", r.stdout + r.stderr[-2000:]


def test_run_pd_without_torch_raises_torch_missing(monkeypatch):
    """Where torch is missing (notebook 07 on an Intel Mac, tests/test_no_triton.py) run_pd says so at once."""
    monkeypatch.setattr(pd_workers, "HAS_TORCH", False)
    with pytest.raises(pd_workers.TorchMissing, match="the two-process hand-off needs torch"):
        run_pd(PROMPTS[:1], 2, CFG)
    with pytest.raises(ValueError, match="n_new"):                       # the arguments are checked first
        run_pd(PROMPTS[:1], 0, CFG)
    assert issubclass(pd_workers.TorchMissing, ImportError)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_two_processes_nccl():
    r = run_pd(PROMPTS[:3], 6, CFG, backend="nccl", chunk_size=4, timeout_s=20)
    assert r["P"]["error"] is None and r["D"]["error"] is None, (r["P"]["error"], r["D"]["error"])
    assert r["D"]["tokens"] == dict(enumerate(reference_tokens(CFG, PROMPTS[:3], 6)))
