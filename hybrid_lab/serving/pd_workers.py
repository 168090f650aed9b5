"""Prefill/decode disaggregation of HySparse2 as two real processes on ``torch.distributed`` (notebook 07).

PD splits a request by PHASE, not by depth (not a layer pipeline): P prefills the prompt and hands the state over
once; D generates every answer token with the full model. HySparse2 makes P cheap: it needs only the Self-decoder
and the bridging projections (HySparse2 §3, inference deployment), because the prompt never runs through the
Cross-decoder (exact early exit).

    P (rank 0: embed + self.* + bridge.*)                 D (rank 1: full model)
    header ───────────────────────────────────────────▶  verify (hash, dtype, length)  ─┐ receiver thread
           ◀─────────────────────────────────────── ack  (refuse: nothing allocated)   │
    for chunk c: prefill_self(chunk) ─ isend rows ────▶  staging buffers               │
    SWA windows, boundary, SHA-256 trailer ───────────▶  verify payload, queue bundle ─┘
    next request's header (P does not wait for D) ...    main thread: install, Cross at the last prompt
                                                          position (token 1), decode steps (Self + Cross)

Transport: gloo on CPU (what CI runs), NCCL when two GPUs are present; point-to-point sends of plain tensors.
Every receive waits at most ``timeout_s``: a P that dies or stalls mid-transfer makes D raise
:class:`TransferTimeout` instead of hanging. torch is imported only inside the functions that need it: the
workers, the bundle and :func:`reference_tokens` are numpy. Where torch is not installed (Intel Macs: torch >= 2.3
has no macOS x86-64 wheels, so the install leaves it out) ``HAS_TORCH`` is False, :func:`run_pd` raises
:class:`TorchMissing`, and notebook 07 prints ``NEEDS_TORCH`` in place of the live run and goes on.
"""
from __future__ import annotations

import datetime
import hashlib
import importlib.util
import multiprocessing as mp
import os
import platform
import queue
import socket
import sys
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from hybrid_lab.core import checks
from hybrid_lab.models.hysparse2 import HySparse2, HySparse2Config
from hybrid_lab.serving.pd_bundle import (BundleError, PDBundle, decode_header, encode_header, make_header,
                                          p_weight_names, verify_header, weights_hash, wire_plan)

__all__ = ["TransferTimeout", "PWorker", "DWorker", "free_port", "run_pd", "reference_tokens", "FAULTS",
           "HAS_TORCH", "NEEDS_TORCH", "TorchMissing", "torch_missing_reason"]

FAULTS = ("die_after_chunk", "stall_after_chunk", "tamper_dtype", "tamper_length", "corrupt_payload")
_STOP = 0          # a header length of 0 tells D there are no more requests


class TransferTimeout(TimeoutError):
    """D gave up on a transfer: P died (connection lost) or sent nothing for ``timeout_s`` seconds."""


# ------------------------------------------------------------------------------------------ torch, if installed
class TorchMissing(ImportError):
    """:func:`run_pd` was called where torch is not installed."""


def _torch_found() -> bool:
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):      # a finder that refuses it, or a broken entry in sys.modules
        return False


def torch_missing_reason(system: str | None = None, machine: str | None = None) -> str:
    """Why torch is missing on this platform (default: here), as a predicate: "needs torch, which ...".

    An Intel Mac (``darwin``, x86-64) gets no torch from the install: torch >= 2.3 has no wheels there. Elsewhere
    (Linux, Windows, Apple-silicon Macs) torch installs; if it is missing, the lab was installed without its extra.
    """
    system = sys.platform if system is None else system
    machine = (platform.machine() if machine is None else machine).lower()
    if system == "darwin" and machine in ("x86_64", "amd64", "i386"):
        return ("needs torch, which has no wheels for Intel Macs (none since torch 2.3, so the install leaves it "
                "out): run this part on Linux, Windows, an Apple-silicon Mac, Colab, or the course hub")
    return ("needs torch, which is not installed here: install the lab with its gpu extra "
            "(pip install -e \".[lab,gpu]\", see the README), or run this part on Colab or the course hub")


HAS_TORCH = _torch_found()
NEEDS_TORCH = torch_missing_reason()


# ------------------------------------------------------------------------------------------------ the workers
class PWorker:
    """The prefill role: holds ONLY the embedding, the Self-decoder and the bridging projections.

    ``weights`` may be a full checkpoint: everything else is dropped here, and the worker asserts it holds exactly
    :func:`~hybrid_lab.serving.pd_bundle.p_weight_names` (no cross-decoder queries/MLPs, no LM head).
    """

    def __init__(self, cfg, weights: dict):
        names = p_weight_names(cfg)
        if not isinstance(weights, dict):
            raise ValueError(f"weights must be a dict of named arrays, got {type(weights).__name__}")
        missing = [n for n in names if n not in weights]
        if missing:
            raise ValueError(f"weights lacks {len(missing)} Self-decoder/bridge arrays, first {missing[0]!r}")
        self.cfg = cfg
        self.model = HySparse2(cfg, weights={n: weights[n] for n in names})
        held = set(self.model.weights)
        assert held == set(names) and not any(n.startswith("cross.") or n == "lm_head" for n in held), \
            "a P worker must hold only the Self-decoder and the bridging projections"
        self.digest = weights_hash(self.model.weights, names)

    def prefill_chunks(self, tokens, chunk_size: int):
        """Yield (c0, c1, cache) after each chunk of the prompt: Self-decoder + bridges on positions [c0, c1).

        Chunked prefill is exact: each chunk continues the caches (causal FA over all earlier rows, SWA windows).
        tokens: (L,) ids in [0, vocab), L >= 1; chunk_size >= 1.
        """
        tokens = checks.tokens("tokens", tokens, self.cfg.vocab)
        chunk_size = checks.pos_int("chunk_size", chunk_size)
        cache = None
        for c0 in range(0, len(tokens), chunk_size):
            c1 = min(c0 + chunk_size, len(tokens))
            cache = self.model.prefill_self(tokens[c0:c1], cache)
            yield c0, c1, cache

    def bundle(self, tokens, chunk_size: int = 16, request: int = 0) -> PDBundle:
        """Whole-prompt bundle (no streaming): what P would hand over."""
        *_, (_, _, cache) = self.prefill_chunks(tokens, chunk_size)
        return PDBundle.from_cache(cache, self.cfg, self.digest, chunk_size, request)


class DWorker:
    """The decode role: the full model, a table of installed requests, greedy generation from a bundle."""

    def __init__(self, cfg, weights: dict, max_len: int | None = None):
        self.cfg = cfg
        self.model = HySparse2(cfg, weights=weights)
        self.digest = weights_hash(self.model.weights, p_weight_names(cfg))
        self.max_len = None if max_len is None else checks.pos_int("max_len", max_len)
        self.installed: dict = {}        # request id -> HySparse2Cache (only verified bundles ever land here)

    def accept(self, header: dict) -> None:
        """Check a header against this model before allocating anything (raises BundleError)."""
        verify_header(header, self.cfg, self.digest, self.max_len)

    def install(self, bundle: PDBundle) -> int:
        """Put a verified bundle's state in the request table. Returns the request id."""
        if not isinstance(bundle, PDBundle):
            raise ValueError(f"bundle must be a PDBundle, got {type(bundle).__name__}")
        req = bundle.header["request"]
        self.installed[req] = bundle.to_cache(self.cfg)
        return req

    def _installed(self, req):
        if req not in self.installed:
            raise ValueError(f"req must be an installed request id {sorted(self.installed)}, got {req!r}")
        return self.installed[req]

    def first(self, req: int) -> int:
        """Token 1 (greedy): the Cross-decoder at the last prompt position only; P already ran its Self."""
        return int(np.argmax(self.model.first_token(self._installed(req))))

    def decode(self, req: int, token: int, n: int) -> list:
        """n >= 0 greedy decode steps from ``token`` (each: Self on a new position, appends, Cross)."""
        cache, out = self._installed(req), []
        token = checks.int_in("token", token, 0, self.cfg.vocab)
        n = checks.nonneg_int("n", n)
        for _ in range(n):
            logits, cache = self.model.decode_step(token, cache)
            token = int(np.argmax(logits))
            out.append(token)
        self.installed[req] = cache
        return out

    def generate(self, req: int, n_new: int) -> list:
        """First token, then ``n_new - 1`` decode steps (n_new >= 1)."""
        n_new = checks.pos_int("n_new", n_new)
        tokens = [self.first(req)]
        return tokens + self.decode(req, tokens[0], n_new - 1)


def reference_tokens(cfg, prompts, n_new: int) -> list:
    """Single-process greedy generation (one full model, prefill with early exit, decode) for each prompt.

    prompts: 1-D arrays of ids in [0, vocab); n_new >= 1.
    """
    if not isinstance(cfg, HySparse2Config):
        raise ValueError(f"cfg must be a HySparse2Config, got {type(cfg).__name__}")
    n_new = checks.pos_int("n_new", n_new)
    if not isinstance(prompts, (list, tuple)):
        raise ValueError(f"prompts must be a list of 1-D token arrays, got {type(prompts).__name__}")
    prompts = [checks.tokens(f"prompts[{i}]", p, cfg.vocab) for i, p in enumerate(prompts)]
    model = HySparse2(cfg)
    return [[int(t) for t in model.generate(p, n_new)[0]] for p in prompts]


# ---------------------------------------------------------------------------------------------- the transport
def free_port() -> int:
    """A free localhost TCP port (bind to port 0), so parallel runs don't collide."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_TORCH_DTYPES = ("float64", "float32", "int64", "uint8")


class _Link:
    """numpy arrays over torch.distributed point-to-point ops with a deadline on every receive."""

    def __init__(self, peer: int, device, timeout_s: float):
        import torch
        import torch.distributed as dist
        self.torch, self.dist, self.peer, self.device = torch, dist, peer, device
        self.timeout = datetime.timedelta(seconds=timeout_s)
        self.pending = []        # (work, tensor) of isends not yet completed: keep the tensors alive
        self.sent = 0            # bytes sent / received so far (the workers reset them per request)
        self.received = 0

    def _tensor(self, a):
        t = self.torch.from_numpy(np.array(a, copy=True, order="C"))
        return t.to(self.device) if self.device.type != "cpu" else t

    def isend(self, a) -> None:
        t = self._tensor(a)
        self.pending.append((self.dist.isend(t, self.peer), t))
        self.sent += t.numel() * t.element_size()

    def flush(self) -> None:
        for w, _ in self.pending:
            w.wait()
        self.pending = []

    def recv(self, shape, dtype) -> np.ndarray:
        """Receive one array; raises TransferTimeout after ``timeout_s`` or if the peer's connection breaks."""
        if dtype not in _TORCH_DTYPES:
            raise ValueError(f"dtype must be one of {_TORCH_DTYPES}, got {dtype!r}")
        t = self.torch.empty(tuple(shape), dtype=getattr(self.torch, dtype), device=self.device)
        try:
            work = self.dist.irecv(t, self.peer)
            if not work.wait(timeout=self.timeout):
                raise RuntimeError("wait returned False")
        except RuntimeError as e:      # gloo: "Timed out waiting ..." or "Connection reset/closed by peer"
            raise TransferTimeout(str(e).splitlines()[0][:200]) from None
        self.received += t.numel() * t.element_size()
        return t.cpu().numpy()

    def send_header(self, header: dict | None) -> None:
        buf = np.zeros(0, np.uint8) if header is None else encode_header(header)
        self.isend(np.array([buf.size], np.int64))
        if buf.size:
            self.isend(buf)

    def recv_header(self) -> dict | None:
        n = int(self.recv((1,), "int64")[0])
        return None if n == _STOP else decode_header(self.recv((n,), "uint8"))


@dataclass
class _Log:
    """Per-process event log: (request, what, t_start, t_end) with wall-clock seconds (one host, one clock)."""
    events: list = field(default_factory=list)

    def add(self, req, what, t0):
        self.events.append((int(req), what, t0, time.time()))


# ----------------------------------------------------------------------------------------- the two processes
def _init_method(port: int, system: str | None = None) -> str:
    """The rendezvous: TCP on 127.0.0.1. On Windows (``system`` default: this one) the TCPStore without libuv,
    which torch's Windows builds lack: torch 2.4-2.6 asked for libuv by default there and failed
    (pytorch/pytorch#139990); later versions default to this."""
    url = f"tcp://127.0.0.1:{port}"
    return url + "?use_libuv=0" if (sys.platform if system is None else system) == "win32" else url


def _init(rank, port, backend, timeout_s):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)              # two workers share the host's cores
    dist.init_process_group(backend, init_method=_init_method(port), rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=max(timeout_s, 5.0)))
    if backend == "nccl":
        torch.cuda.set_device(rank)
        return torch.device("cuda", rank)
    return torch.device("cpu")


def _p_main(port, spec, out):
    """Rank 0: prefill every prompt, stream each bundle, never wait for D's decoding."""
    import torch.distributed as dist
    report = {"role": "P", "bytes": {}, "refused_by_d": [], "events": [], "error": None}
    try:
        device = _init(0, port, spec["backend"], spec["timeout_s"])
        cfg = spec["p_cfg"]
        worker = PWorker(cfg, HySparse2.init_weights(cfg))          # drops the cross weights, asserts it
        report["held_weights"] = sorted(worker.model.weights)
        link, log = _Link(1, device, spec["timeout_s"]), _Log()
        C = spec["chunk_size"]
        for req, prompt in enumerate(spec["prompts"]):
            fault = spec["faults"].get(req, "")
            link.sent = 0
            t0 = time.time()
            header = make_header(cfg, worker.digest, len(prompt), C, req)
            if fault == "tamper_dtype":
                header["dtype"] = "float16"
            if fault == "tamper_length":
                header["n_chunks"] += 1
            link.send_header(header)
            if int(link.recv((1,), "int64")[0]) != 0:                 # D refused the header: send nothing more
                report["refused_by_d"].append(req)
                report["bytes"][req] = link.sent
                log.add(req, "header refused", t0)
                continue
            log.add(req, "header + ack", t0)
            t0 = time.time()
            digest = hashlib.sha256()
            for c, (c0, c1, cache) in enumerate(worker.prefill_chunks(prompt, C)):
                log.add(req, f"prefill chunk {c}", t0)
                t0 = time.time()
                rows = [cache.self_fa.k[c0:c1], cache.self_fa.v[c0:c1]]
                for kv in cache.cross:
                    rows += [kv.k[c0:c1], kv.v[c0:c1]]
                for i, a in enumerate(rows):
                    a = np.ascontiguousarray(a)
                    digest.update(a.tobytes())
                    if fault == "corrupt_payload" and c == 0 and i == 0:
                        a = a.copy()
                        a.flat[0] += 1.0                    # changed in transit, after P hashed it: D must notice
                    link.isend(a)
                if fault.startswith(("die_after_chunk", "stall_after_chunk")) and c == int(fault.split(":")[1]):
                    link.flush()
                    if fault.startswith("die"):
                        os._exit(17)                                  # no goodbye, no destroy: a crashed P
                    time.sleep(spec["timeout_s"] * 3)                  # alive but silent
                t0 = time.time()
            tail = []
            for w in cache.self_swa:
                tail += [w.k, w.v, w.pos.astype(np.int64)]
            tail.append(cache.boundary)
            for a in tail:
                digest.update(np.ascontiguousarray(a).tobytes())
                link.isend(a)
            trailer = np.frombuffer(digest.digest(), np.uint8).copy()
            link.isend(trailer)
            link.flush()
            report["bytes"][req] = link.sent
            log.add(req, "send tail", t0)
        link.send_header(None)
        link.flush()
        report["events"] = log.events
        dist.destroy_process_group()
    except Exception as e:  # reported to the launcher, never swallowed
        report["error"] = f"{type(e).__name__}: {e}"
    _finish(report, out)


def _d_receiver(link, worker, ready, log):
    """D's receiver thread: headers, verification, staged payloads, trailers. Never touches worker.installed."""
    try:
        while True:
            link.received = 0
            header = link.recv_header()
            if header is None:
                ready.put(("stop", None, None))
                return
            t0 = time.time()
            req = header.get("request", -1)
            try:
                worker.accept(header)
            except BundleError as e:
                link.isend(np.array([1], np.int64))
                link.flush()
                ready.put(("refused", req, str(e)))
                continue
            link.isend(np.array([0], np.int64))
            plan, got = wire_plan(header), []
            try:
                for name, shape, dt in plan:
                    got.append(link.recv(shape, dt))
                trailer = link.recv((32,), "uint8")
            except TransferTimeout as e:
                n_chunk = 2 + 2 * header["n_groups"]
                raise TransferTimeout(
                    f"request {req}: P stopped mid-transfer after {len(got)} of {len(plan)} arrays "
                    f"({min(len(got) // n_chunk, header['n_chunks'])} of {header['n_chunks']} KV chunks); "
                    f"waited at most {link.timeout.total_seconds():g} s per message ({e})") from None
            link.flush()
            log.add(req, "receive", t0)
            try:
                bundle = PDBundle.from_arrays(header, got, worker.cfg, worker.digest, trailer, worker.max_len)
            except BundleError as e:
                ready.put(("refused", req, str(e)))
                continue
            ready.put(("bundle", req, (bundle, link.received)))
    except Exception as e:
        ready.put(("error", None, e))


def _d_main(port, spec, out):
    """Rank 1: receive bundles in a thread; install, first token, decode in the main thread."""
    import torch.distributed as dist
    report = {"role": "D", "tokens": {}, "refused": {}, "bytes": {}, "installed": [], "events": [], "error": None}
    try:
        device = _init(1, port, spec["backend"], spec["timeout_s"])
        cfg = spec["cfg"]
        worker = DWorker(cfg, HySparse2.init_weights(cfg), spec.get("max_len"))
        link, log, ready = _Link(0, device, spec["timeout_s"]), _Log(), queue.Queue()
        rx = threading.Thread(target=_d_receiver, args=(link, worker, ready, log), daemon=True)
        rx.start()
        while True:
            kind, req, item = ready.get()
            if kind == "stop":
                break
            if kind == "error":
                raise item
            if kind == "refused":
                report["refused"][req] = item
                continue
            bundle, nbytes = item
            report["bytes"][req] = nbytes
            t0 = time.time()
            worker.install(bundle)
            log.add(req, "install", t0)
            t0 = time.time()
            tokens = [worker.first(req)]
            log.add(req, "first token", t0)
            t0 = time.time()
            report["tokens"][req] = tokens + worker.decode(req, tokens[0], spec["n_new"] - 1)
            log.add(req, "decode", t0)
        rx.join()
        report["installed"] = sorted(worker.installed)
        report["events"] = log.events
        dist.destroy_process_group()
    except TransferTimeout as e:
        report["error"] = f"TransferTimeout: {e}"
        report["installed"] = sorted(worker.installed) if "worker" in locals() else []
    except Exception as e:
        report["error"] = f"{type(e).__name__}: {e}"
    _finish(report, out)


def _entry(rank, port, spec, out):
    (_p_main if rank == 0 else _d_main)(port, spec, out)


def _finish(report, out):
    """Hand the report to the launcher. After an error the process group may hold a posted receive that its
    teardown would wait on: flush the queue, then leave without running that teardown."""
    report["t_report"] = time.time()
    out.put(report)
    if report["error"]:
        out.close()
        out.join_thread()
        os._exit(1)


def run_pd(prompts, n_new: int, cfg=None, backend: str = "gloo", chunk_size: int = 8, timeout_s: float = 10.0,
           faults: dict | None = None, p_cfg=None, max_len: int | None = None) -> dict:
    """Spawn P (rank 0) and D (rank 1), serve ``prompts`` (list of 1-D int arrays), return both reports.

    faults: {request index: one of FAULTS}; ``"die_after_chunk:1"`` / ``"stall_after_chunk:1"`` take a chunk index.
    p_cfg: a different config for P (e.g. another seed: D must refuse its bundles). Returns
    {'P': report, 'D': report} (tokens / refused / bytes / installed / events / error per role). Both processes
    are always joined or killed before returning. Raises :class:`TorchMissing` where torch is not installed
    (``HAS_TORCH`` False), after checking the arguments.
    """
    cfg = HySparse2Config() if cfg is None else cfg
    for name, c in (("cfg", cfg), ("p_cfg", p_cfg if p_cfg is not None else cfg)):
        if not isinstance(c, HySparse2Config):
            raise ValueError(f"{name} must be a HySparse2Config, got {type(c).__name__}")
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be 'gloo' or 'nccl', got {backend!r}")
    n_new, chunk_size = checks.pos_int("n_new", n_new), checks.pos_int("chunk_size", chunk_size)
    timeout_s = checks.positive_number("timeout_s", timeout_s)
    max_len = None if max_len is None else checks.pos_int("max_len", max_len)
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise ValueError("prompts must be a non-empty list of 1-D integer arrays")
    prompts = [checks.tokens(f"prompts[{i}]", p, cfg.vocab) for i, p in enumerate(prompts)]
    faults = dict(faults or {})
    for req, f in faults.items():
        checks.int_in("faults key (a request index)", req, 0, len(prompts))
        kind, _, chunk = f.partition(":") if isinstance(f, str) else (None, "", "")
        with_chunk = kind in ("die_after_chunk", "stall_after_chunk")
        if kind not in FAULTS or with_chunk != chunk.isdigit() or (not with_chunk and chunk):
            raise ValueError(f"faults[{req}] must be one of {FAULTS} ('die_after_chunk:<chunk index>', "
                             f"'stall_after_chunk:<chunk index>'), got {f!r}")
    if not HAS_TORCH:
        raise TorchMissing(f"run_pd: the two-process hand-off {NEEDS_TORCH}")
    spec = {"backend": backend, "prompts": prompts, "n_new": n_new, "cfg": cfg, "p_cfg": p_cfg or cfg,
            "chunk_size": chunk_size, "timeout_s": float(timeout_s), "faults": faults, "max_len": max_len}
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_entry, args=(r, port, spec, out), daemon=True) for r in range(2)]
    for p in procs:
        p.start()
    reports, d_done = {}, None
    deadline = time.time() + 60 + 4 * timeout_s
    try:
        while time.time() < deadline:
            try:
                rep = out.get(timeout=0.1)
                reports[rep["role"]] = rep
            except queue.Empty:
                pass
            if "P" in reports and "D" in reports:
                break
            if "D" in reports or not procs[1].is_alive():    # D is the consumer: once it is done, P gets 2 s
                d_done = d_done or time.time()
                if time.time() - d_done > 1 or not procs[0].is_alive():
                    break
    finally:
        killed = []
        for role, p in zip(("P", "D"), procs):
            p.join(timeout=1)
            if p.is_alive():       # a stalled P, or a D stuck in the transport's teardown: end it, no orphans
                p.kill()
                p.join()
                killed.append(role)
    for role in ("P", "D"):
        reports.setdefault(role, {"role": role, "error": "killed by the launcher (stalled)" if role in killed
                                  else "process exited without a report"})
    return reports
