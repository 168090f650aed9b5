"""A timing model of HySparse2's P/D pipeline as a dependency DAG, and its critical path (notebook 07).

The dependency graph of the hand-off (HySparse2 §3, inference deployment) shows where the pipeline may overlap
(source chunk -> its cross KV; KV chunk c on the wire while P builds c + 1; P prefills request B while D decodes A);
these are opportunities derived from the graph, not measurements of the paper. With overlap the time is the
CRITICAL PATH of the dependency DAG: not the sum of the stages (no overlap), not their maximum (ignores order).
Here every stage is a task with a duration on one resource; a resource runs its tasks one at a time in the order
they were added, which becomes an extra edge. Then

    finish(t) = duration(t) + max(release(t), max over predecessors p of finish(p))      (tasks in topological order)

and the critical path is read backwards from the last task through the predecessor that bound each start.

Per request r (prompt of L tokens in chunks of C):  build_c (P) -> send_c (link) -> install_c (D copy engine);
after the last chunk, the SWA windows + boundary state (tail) go the same way; then first token (D: Cross at the
last prompt position) and the decode steps (D). All durations here are ASSUMED, illustrative inputs, not reported
numbers; only the byte counts come from the paper's configuration (Table 1 via ``hysparse_ledger``).
The plots of this model live in :mod:`hybrid_lab.widgets.pd`.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from hybrid_lab.core import checks
from hybrid_lab.costs.hysparse_ledger import HYSPARSE2, AttnDesign

__all__ = ["TaskDAG", "critical_path", "PDTiming", "paper_bytes", "build_pd_dag", "schedule", "timeline_summary",
           "path_text", "events", "pd_overlap", "RESOURCES"]

RESOURCES = ("P compute", "link", "D copy", "D compute")


class TaskDAG:
    """Tasks with durations, data dependencies, optional resources and release times (insertion order must be a
    topological order: a task's dependencies are added before it)."""

    def __init__(self):
        self.tasks: dict = {}
        self._last_on: dict = {}

    def add(self, name: str, duration: float, resource: str | None = None, after=(), release: float = 0.0,
            **info) -> str:
        """Add a task. ``after``: names it depends on; ``resource``: tasks on one resource run one at a time, in
        insertion order (the previous task on it becomes a predecessor). ``info`` is kept for plotting.
        duration and release: finite numbers >= 0."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        if name in self.tasks:
            raise ValueError(f"task {name!r} already exists")
        duration = checks.nonneg_number(f"duration of {name!r}", duration)
        release = checks.nonneg_number(f"release of {name!r}", release)
        if resource is not None and not isinstance(resource, str):
            raise ValueError(f"resource must be a string or None, got {resource!r}")
        if isinstance(after, str):
            raise ValueError(f"after must be a list of task names, got the string {after!r}")
        if not isinstance(after, (list, tuple)) or not all(isinstance(a, str) for a in after):
            raise ValueError(f"after must be a list or tuple of task names, got {after!r}")
        unknown = [a for a in after if a not in self.tasks]
        if unknown:
            raise ValueError(f"task {name!r} depends on unknown task {unknown[0]!r} (add dependencies first)")
        preds = list(after)
        if resource is not None and resource in self._last_on and self._last_on[resource] not in preds:
            preds.append(self._last_on[resource])
        if resource is not None:
            self._last_on[resource] = name
        self.tasks[name] = {"duration": float(duration), "resource": resource, "preds": preds,
                            "release": float(release), **info}
        return name

    @property
    def order(self) -> list:
        return list(self.tasks)

    def durations(self) -> dict:
        return {n: t["duration"] for n, t in self.tasks.items()}

    def preds(self) -> dict:
        return {n: list(t["preds"]) for n, t in self.tasks.items()}

    def releases(self) -> dict:
        return {n: t["release"] for n, t in self.tasks.items()}


def critical_path(durations: dict, preds: dict, order, release: dict | None = None):
    """Longest path through a DAG whose nodes carry durations.

    durations: {task: d >= 0}; preds: {task: [tasks it waits for]}; order: the tasks in a topological order;
    release: {task: earliest start} (default 0). Returns (length, path, start, finish): the makespan, the tasks
    of one critical path in time order, and dicts of earliest start/finish times. Ties in the backward walk go to
    the predecessor listed first. Every duration and release must be a finite number >= 0, and every task in
    ``order`` (once) must have a duration.
    """
    release = release or {}
    order = list(order)
    if len(set(order)) != len(order) or set(order) != set(durations):
        raise ValueError(f"order must list every task of durations once, got {order} for {sorted(durations)}")
    for n in order:
        checks.nonneg_number(f"durations[{n!r}]", durations[n])
        checks.nonneg_number(f"release[{n!r}]", release.get(n, 0.0))
    start, finish, seen = {}, {}, set()
    for n in order:
        for p in preds.get(n, ()):
            if p not in seen:
                raise ValueError(f"order is not topological: {n!r} comes before its predecessor {p!r}")
        start[n] = max([release.get(n, 0.0)] + [finish[p] for p in preds.get(n, ())])
        finish[n] = start[n] + durations[n]
        seen.add(n)
    if not finish:
        return 0.0, [], start, finish
    node = max(order, key=lambda n: (finish[n], -order.index(n)))
    length, path = finish[node], [node]
    while True:
        binding = [p for p in preds.get(node, ()) if np.isclose(finish[p], start[node], rtol=0, atol=1e-9)]
        if not binding:
            break
        node = binding[0]
        path.append(node)
    return length, path[::-1], start, finish


# ------------------------------------------------------------------------------------------------ the PD model
def paper_bytes(design=None, d_model_bytes: int = 2) -> dict:
    """Bytes of HySparse2's hand-off in the paper configuration (FP8 KV, Table 1), per prompt token and fixed.

    per_token: every global KV that grows with L = the self FA + the n_bridge cross KVs, (d_qk + d_v) x Hkv bytes
    each; fixed: the SWA windows (n_swa x window entries) + the boundary state (d_model x ``d_model_bytes``).
    design: an :class:`~hybrid_lab.costs.hysparse_ledger.AttnDesign` (default HySparse2's).
    """
    d = HYSPARSE2 if design is None else design
    if not isinstance(d, AttnDesign):
        raise ValueError(f"design must be an AttnDesign, got {type(d).__name__}")
    d_model_bytes = checks.pos_int("d_model_bytes", d_model_bytes)
    return {"per_token": (1 + d.n_bridge) * d.bytes_per_token,
            "fixed": d.n_swa * d.window * d.bytes_per_token + d.d_model * d_model_bytes,
            "source_hidden_per_token": d.d_model * d_model_bytes}


@dataclass(frozen=True)
class PDTiming:
    """Inputs of the timing model. Bytes default to the paper configuration; every time is an ASSUMED input.

    prompt_len: tokens per prompt; chunk: tokens per KV chunk; bandwidth_gbs: P->D link (GB/s, 1e9 B/s);
    install_gbs: D's copy of a received chunk into its cache pages; p_us_per_token: P's Self-decoder + bridging
    time per prompt token; first_ms: D's Cross at the last prompt position + LM head; decode_ms: one decode step;
    n_new: tokens generated per request; n_requests; arrival_gap_ms: request r arrives at r x gap.
    """
    prompt_len: int = 32768
    chunk: int = 4096
    bandwidth_gbs: float = 25.0
    install_gbs: float = 200.0
    p_us_per_token: float = 10.0
    first_ms: float = 20.0
    decode_ms: float = 20.0
    n_new: int = 16
    n_requests: int = 3
    arrival_gap_ms: float = 0.0
    bytes_per_token: float = 2560.0
    fixed_bytes: float = 1576960.0

    def __post_init__(self):
        for name in ("prompt_len", "chunk", "n_new", "n_requests"):
            checks.pos_int(name, getattr(self, name))
        for name in ("bandwidth_gbs", "install_gbs", "p_us_per_token"):
            checks.positive_number(name, getattr(self, name))
        for name in ("first_ms", "decode_ms", "arrival_gap_ms", "bytes_per_token", "fixed_bytes"):
            checks.nonneg_number(name, getattr(self, name))


def _timing(t) -> PDTiming:
    if not isinstance(t, PDTiming):
        raise ValueError(f"t must be a PDTiming, got {type(t).__name__}")
    return t


def build_pd_dag(t: PDTiming) -> TaskDAG:
    """The DAG of :class:`PDTiming` (times in ms). Task names: ``r{r}.build{c}``, ``r{r}.send{c}``,
    ``r{r}.install{c}``, ``r{r}.send_tail``, ``r{r}.install_tail``, ``r{r}.first``, ``r{r}.decode``."""
    _timing(t)
    dag = TaskDAG()
    ms_per_byte_link = 1e3 / (t.bandwidth_gbs * 1e9)
    ms_per_byte_copy = 1e3 / (t.install_gbs * 1e9)
    for r in range(t.n_requests):
        arrive = r * t.arrival_gap_ms
        prev_build, installs = None, []
        for c, c0 in enumerate(range(0, t.prompt_len, t.chunk)):
            n = min(t.chunk, t.prompt_len - c0)
            b = dag.add(f"r{r}.build{c}", n * t.p_us_per_token * 1e-3, "P compute",
                        after=[prev_build] if prev_build else [], release=arrive, request=r, kind="build")
            s = dag.add(f"r{r}.send{c}", n * t.bytes_per_token * ms_per_byte_link, "link", after=[b], request=r,
                        kind="send")
            installs.append(dag.add(f"r{r}.install{c}", n * t.bytes_per_token * ms_per_byte_copy, "D copy",
                                    after=[s], request=r, kind="install"))
            prev_build = b
        s = dag.add(f"r{r}.send_tail", t.fixed_bytes * ms_per_byte_link, "link", after=[prev_build], request=r,
                    kind="send")
        installs.append(dag.add(f"r{r}.install_tail", t.fixed_bytes * ms_per_byte_copy, "D copy", after=[s],
                                request=r, kind="install"))
        f = dag.add(f"r{r}.first", t.first_ms, "D compute", after=installs, request=r, kind="first")
        dag.add(f"r{r}.decode", (t.n_new - 1) * t.decode_ms, "D compute", after=[f], request=r, kind="decode")
    return dag


def schedule(t: PDTiming) -> dict:
    """Run the model. Returns {'makespan' (critical path, ms), 'path', 'start', 'finish', 'sum' (every task
    back to back: no overlap at all), 'max_busy' (the busiest resource alone: a lower bound), 'busy' per resource,
    'ttft' per request (first token finish - arrival), 'dag'}."""
    dag = build_pd_dag(t)
    length, path, start, finish = critical_path(dag.durations(), dag.preds(), dag.order, dag.releases())
    busy = {res: sum(v["duration"] for v in dag.tasks.values() if v["resource"] == res) for res in RESOURCES}
    ttft = [finish[f"r{r}.first"] - r * t.arrival_gap_ms for r in range(t.n_requests)]
    return {"makespan": length, "path": path, "start": start, "finish": finish,
            "sum": sum(dag.durations().values()), "max_busy": max(busy.values()), "busy": busy, "ttft": ttft,
            "dag": dag}


def path_text(path) -> str:
    """Compress a path of task names (``r{r}.{kind}{c}``): consecutive tasks of one kind and request become
    'r0.build0..7'."""
    if isinstance(path, str) or not all(isinstance(n, str) for n in path):
        raise ValueError(f"path must be a list of task names, got {path!r}")
    out = []
    for n in path:
        head, _, tail = n.partition(".")
        stem = tail.rstrip("0123456789")
        num = tail[len(stem):]
        if out and out[-1][0] == (head, stem) and num:
            out[-1][2] = num
        else:
            out.append([(head, stem), num, None])
    return " -> ".join(f"{h}.{s}{a}" + (f"..{b}" if b else "") for (h, s), a, b in out)


def timeline_summary(t: PDTiming) -> str:
    """One rounded line per quantity: critical path vs sum vs busiest resource, TTFT, and the path itself."""
    s = schedule(t)
    no_chunk = schedule(replace(_timing(t), chunk=t.prompt_len))
    return (f"computed (ms): critical path {s['makespan']:.1f}, sum of all stages {s['sum']:.1f}, busiest "
            f"resource {s['max_busy']:.1f}\n"
            f"computed (ms): TTFT of request 0 {s['ttft'][0]:.1f} (as one chunk of {t.prompt_len} tokens: "
            f"{no_chunk['ttft'][0]:.1f})\n"
            f"critical path: {path_text(s['path'])}")


def events(reports: dict, role: str) -> list:
    """The checked event log of one role ("P" or "D") of a :func:`~hybrid_lab.serving.pd_workers.run_pd` report:
    [(request, what, t_start, t_end)] with finite times, t_end >= t_start (no log: an empty list)."""
    if not isinstance(reports, dict):
        raise ValueError(f"reports must be the dict returned by run_pd, got {type(reports).__name__}")
    if role not in ("P", "D"):
        raise ValueError(f"role must be 'P' or 'D', got {role!r}")
    out = []
    for i, e in enumerate(reports.get(role, {}).get("events", [])):
        if len(e) != 4:
            raise ValueError(f"reports[{role!r}]['events'][{i}] must be (request, what, t_start, t_end), got {e!r}")
        req = checks.nonneg_int(f"reports[{role!r}]['events'][{i}] request", e[0])
        a = checks.finite_number(f"reports[{role!r}]['events'][{i}] t_start", e[2])
        b = checks.finite_number(f"reports[{role!r}]['events'][{i}] t_end", e[3])
        if b < a:
            raise ValueError(f"reports[{role!r}]['events'][{i}] ends before it starts: {e!r}")
        out.append((req, str(e[1]), a, b))
    return out


def pd_overlap(reports: dict) -> dict:
    """Requests in flight at once in a live run: {r: seconds during which P worked on a later request while D was
    installing/decoding request r}, from the logged events of :func:`~hybrid_lab.serving.pd_workers.run_pd`."""
    p_ev, d_ev = events(reports, "P"), [e for e in events(reports, "D") if e[1] != "receive"]
    out = {}
    for r in sorted({e[0] for e in d_ev}):
        spans = [(a, b) for q, _, a, b in d_ev if q == r]
        lo, hi = min(a for a, _ in spans), max(b for _, b in spans)
        out[r] = sum(max(0.0, min(b, hi) - max(a, lo)) for q, _, a, b in p_ev if q > r)
    return out
