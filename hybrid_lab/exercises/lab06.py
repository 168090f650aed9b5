"""Exercises of notebook 06 (HySparse2): the SA selection of one query (forced window ∪ top-k), HySparse2's decode
step written from its per-layer building blocks (which cache each layer reads and appends to, where the selection
is computed and where it is reused, the SWA window eviction), and the size of the three caches from the config.

Shapes are for one sequence (no batch axis), as the notebook states them."""
from __future__ import annotations

import numpy as np

from hybrid_lab.exercises.framework import Case, Exercise, compare_values, register
from hybrid_lab.models.hysparse2 import HySparse2, HySparse2Cache, HySparse2Config
from hybrid_lab.ops.fa_decode import forced_window_select

SELECTION = ("hybrid_lab.ops.fa_decode:forced_window_select", "hybrid_lab.ops.fa_decode:with_forced_window",
             "hybrid_lab.ops.fa_decode:fa_decode_topk", "hybrid_lab.ops.fa_decode:_outside_window",
             "hybrid_lab.ops.fa_decode:_join_window", "hybrid_lab.ops.sparse_attention:topk_indices")


# ------------------------------------------------------------------------------------------ 06.1 one query's selection
def forced_window_one_reference(score_row, t, window, topk):
    """score_row: (S,) the FA's scores of query t; t in [0, S). Returns (window + topk,) int: the forced window
    t - window + 1 .. t (-1 where < 0), then the top-``topk`` positions s <= t - window by score (ties -> smaller
    s), -1 padded."""
    return forced_window_select(np.asarray(score_row, float)[None, None, :], np.array([t]), window, topk)[0, 0]


def _select_cases(rng):
    def case(name, S=None, t=None, window=None, topk=None, scores=None):
        S = int(rng.integers(8, 41)) if S is None else S
        t = int(rng.integers(0, S)) if t is None else t
        window = int(rng.integers(1, 7)) if window is None else window
        topk = int(rng.integers(1, 9)) if topk is None else topk
        row = rng.permutation(S) / S + rng.uniform(0, 0.5 / S, S) if scores is None else scores(S, t, window)
        return Case(name, (row, t, window, topk), note=f"S={S}, t={t}, window={window}, topk={topk}")

    def late_high(S, t, window):                         # positions the query may not take score highest
        row = rng.uniform(0.0, 1.0, S)
        row[max(t - window + 1, 0):] += 10.0
        return row

    def ties(S, t, window):
        return rng.integers(0, 3, S) / 4.0
    return ([case("random") for _ in range(4)]
            + [case("t < window (forced positions < 0 are -1)", t=int(rng.integers(0, 3)), window=5),
               case("t = 0", t=0),
               case("topk > candidates (-1 padded)", S=20, t=int(rng.integers(6, 9)), window=4, topk=12),
               case("ties (smaller position first)", S=30, t=int(rng.integers(24, 30)), window=3, topk=6,
                    scores=ties),
               case("window = 1", window=1),
               case("the window and the future score highest (never top-k)", S=32, t=int(rng.integers(15, 25)),
                    topk=5, scores=late_high)])


register(Exercise("06.1", "forced_window_one", forced_window_one_reference, _select_cases,
                  axes={"result": ("slot",)}, forbidden=SELECTION))


# ------------------------------------------------------------------------------------------ 06.2 the decode step
def decode_step_reference(model, token, cache):
    """model: a HySparse2; token: int; cache: its HySparse2Cache after a prefill (or earlier steps).
    Returns (logits (vocab,), the cache with the new position appended)."""
    return model.decode_step(token, cache)


DECODE_FORBIDDEN = tuple(f"hybrid_lab.models.hysparse2:HySparse2.{m}" for m in
                         ("decode_step", "_run_self", "_run_cross", "first_token", "prefill", "prefill_self",
                          "generate")) + ("hybrid_lab.models.hysparse2:WindowKVCache.append",
                                          "hybrid_lab.serving.pd_workers:DWorker.decode",
                                          "hybrid_lab.serving.pd_workers:DWorker.generate")


def decode_case(rng, name, L=None, steps=None, paper=False, **kw):
    """A 06.2 Case (model, cache, tokens: list of ``steps`` ints).

    A small HySparse2 (random layout unless given; ``paper``: the paper's 49-layer layout), prefilled on a random
    prompt of L tokens; the case decodes ``steps`` random tokens from its cache."""
    groups = kw.pop("groups", int(rng.integers(1, 3)))
    gsize = kw.pop("group_size", int(rng.integers(2, 4)))
    sources = ("self_fa_input",) + tuple(str(s) for s in rng.choice(["self_fa_input", "boundary"], groups - 1))
    c = dict(vocab=32, d_model=16, d_ff=24, n_heads_q=4, n_heads_kv=int(rng.choice([1, 2])), d_qk=8,
             d_v=int(rng.choice([4, 8])), self_swa_before=int(rng.integers(1, 3)),
             self_swa_after=int(rng.integers(1, 3)), cross_layers=groups * gsize, group_size=gsize,
             window=int(rng.integers(2, 5)), topk=int(rng.integers(2, 6)), swa_window=int(rng.integers(2, 6)),
             bridge_sources=sources, seed=int(rng.integers(0, 10 ** 6)))
    c.update(kw)
    cfg = HySparse2Config(seed=c["seed"]) if paper else HySparse2Config(**c)
    L = int(rng.integers(6, 31)) if L is None else L
    steps = int(rng.integers(3, 6)) if steps is None else steps
    model = HySparse2(cfg)
    tokens = rng.integers(0, cfg.vocab, L + steps)
    _, cache = model.prefill(tokens[:L])
    note = (f"prompt of {L} tokens, {steps} steps; {cfg.self_swa_before} SWA + FA + {cfg.self_swa_after} SWA, "
            f"{cfg.n_groups} group(s) of FA + {cfg.group_size - 1} SA, Hkv={cfg.n_heads_kv}, "
            f"swa_window={cfg.swa_window}, window={cfg.window}, topk={cfg.topk}, sources={list(cfg.sources)}")
    return Case(name, (model, cache, [int(x) for x in tokens[L:]]), note=note)


def _decode_cases(rng):
    return ([decode_case(rng, "random") for _ in range(3)]
            + [decode_case(rng, "prompt shorter than the SWA window, decoded until it wraps", L=2, steps=5,
                           swa_window=5, window=2),
               decode_case(rng, "one-token prompt (forced window reaches t < 0)", L=1, steps=3, window=4),
               decode_case(rng, "topk >= visible tokens (-1 padded)", L=4, steps=3, window=2, topk=12),
               decode_case(rng, "SWA window != forced window", L=20, steps=3, swa_window=3, window=6, topk=4),
               decode_case(rng, "2 KV heads, one group bridged from the boundary", L=18, steps=3, n_heads_kv=2,
                           groups=2, bridge_sources=("self_fa_input", "boundary")),
               decode_case(rng, "the paper layout (49 layers)", L=int(rng.integers(30, 49)), steps=3, paper=True)])


def _snapshot(cache):
    if not isinstance(cache, HySparse2Cache):
        return type(cache).__name__
    return {k: np.array(v, copy=True) for k, v in cache.to_arrays().items()}


def _run_decode(fn, case):
    """Decode the case's tokens one by one, each step from the cache the previous step returned.
    Returns [(logits, {cache array name: array}) per step]; a step that returns something else ends the list
    with (None, the type's name)."""
    model, cache, tokens = case.args
    out = []
    for tok in tokens:
        res = fn(model, tok, cache)
        if not isinstance(res, (tuple, list)) or len(res) != 2:
            out.append((None, type(res).__name__))
            break
        logits, cache = res
        out.append((np.array(logits, copy=True), _snapshot(cache)))
        if not isinstance(cache, HySparse2Cache):
            break
    return out


def _part(problem: str) -> str:
    """'cache 'x' wrong at ...' -> 'cache 'x''."""
    for cut in (" wrong", " has shape", " is ", " missing"):
        problem = problem.split(cut)[0]
    return problem


def _layer_order(key: str, cfg) -> tuple:
    """Sort key of a cache array name in the order a decode step writes it: pos, the self layers in depth order
    (window i of the i-th SWA layer, the FA at its place), the boundary state, the cross KVs."""
    parts = key.split(".")
    if parts[0] == "self_swa" and parts[1].isdigit():
        i = int(parts[1])
        return (1, i if i < cfg.self_swa_before else i + 1, key)
    if parts[0] == "self_fa":
        return (1, cfg.self_swa_before, key)
    return ({"pos": 0, "self_swa": 0, "boundary": 2, "cross": 3}.get(parts[0], 4), 0, key)


def _compare_decode(got, want, case):
    for step, ((wl, wc), g) in enumerate(zip(want, got + [None] * (len(want) - len(got)))):
        if g is None:
            return f"step {step}: no result"
        gl, gc = g
        if gl is None:
            return f"step {step}: decode_step returned {gc}, expected a tuple (logits, cache)"
        if not isinstance(gc, dict):
            return f"step {step}: the cache returned is a {gc}, expected the HySparse2Cache"
        probs = []
        for key in sorted(wc, key=lambda k: _layer_order(k, case.args[0].cfg)):      # the first wrong = the earliest
            w = wc[key]
            if key not in gc:
                probs.append(f"cache {key!r} missing")
                continue
            axes = ("slot",) if key.endswith(".pos") else ("s", "head", "d")
            p = compare_values(gc[key], w, f"cache {key!r}", axes if np.ndim(w) else ())
            if p:
                probs.append(p)
        p = compare_values(gl, wl, "logits", ("vocab",))
        if p:
            probs.append(p)
        if probs:
            more = (f"; also wrong: {', '.join(_part(q) for q in probs[1:7])}"
                    + (f" and {len(probs) - 7} more" if len(probs) > 7 else "")) if len(probs) > 1 else ""
            return f"step {step} (new token at position {int(wc['pos']) - 1}): {probs[0]}{more}"
    return None


# mutates: the exercise says "updating ``cache`` in place and returning it is fine" (the case's arguments are
# (model, cache, tokens): _run_decode feeds the tokens one by one)
register(Exercise("06.2", "decode_step", decode_step_reference, _decode_cases, run=_run_decode,
                  compare=_compare_decode, forbidden=DECODE_FORBIDDEN, mutates=("cache",),
                  inputs=("model", "cache", "tokens"),
                  preamble="import numpy as np\nfrom hybrid_lab.ops.fa_decode import fa_attention\n"
                           "from hybrid_lab.ops.sparse_attention import sparse_attention"))


# ------------------------------------------------------------------------------------------ 06.3 the three caches' size
def kv_bytes_reference(cfg, L, bytes_per_elem):
    """Bytes of a HySparse2 request's caches after L positions: {'self_fa', 'self_swa', 'cross', 'total'}.

    One self FA KV of L entries, one rolling window of min(L, swa_window) entries per self SWA layer, one bridged
    KV of L entries per cross group (SA layers hold none); an entry = Hkv (d_qk + d_v) elements."""
    per = cfg.n_heads_kv * (cfg.d_qk + cfg.d_v) * bytes_per_elem
    out = {"self_fa": L * per, "self_swa": (cfg.n_self - 1) * min(L, cfg.swa_window) * per,
           "cross": cfg.n_groups * L * per}
    out["total"] = sum(out.values())
    return out


PAPER_CFG = dict(n_heads_q=64, n_heads_kv=1, d_qk=256, d_v=256, swa_window=128, window=128, topk=1024)


def _kv_cases(rng):
    def case(name, L=None, b=None, **kw):
        groups, gsize = kw.pop("groups", int(rng.integers(1, 5))), kw.pop("group_size", int(rng.integers(2, 7)))
        hkv = kw.pop("n_heads_kv", int(rng.choice([1, 2, 4])))
        c = dict(n_heads_q=4 * hkv, n_heads_kv=hkv, d_qk=int(rng.choice([8, 16, 32])), d_v=int(rng.choice([8, 16])),
                 self_swa_before=int(rng.integers(0, 13)), self_swa_after=int(rng.integers(0, 13)),
                 cross_layers=groups * gsize, group_size=gsize, swa_window=int(rng.integers(2, 129)),
                 window=int(rng.integers(2, 129)))
        c.update(kw)
        cfg = HySparse2Config(**c)
        L = int(rng.integers(1, 400)) if L is None else L
        b = int(rng.choice([1, 2, 4, 8])) if b is None else b
        note = (f"L={L}, bytes_per_elem={b}, {cfg.self_swa_before} SWA + FA + {cfg.self_swa_after} SWA, "
                f"{cfg.n_groups} groups of {cfg.group_size}, Hkv={cfg.n_heads_kv}, d_qk={cfg.d_qk}, d_v={cfg.d_v}, "
                f"swa_window={cfg.swa_window}, window={cfg.window}")
        return Case(name, (cfg, L, b), note=note)
    return ([case("random") for _ in range(4)]
            + [case("L < SWA window", L=int(rng.integers(1, 6)), swa_window=16, window=4),
               case("L = 0 (nothing cached yet)", L=0),
               case("no SWA after the FA", self_swa_after=0, L=int(rng.integers(200, 400)), swa_window=64),
               case("groups of one FA (group_size = 1)", groups=3, group_size=1),
               case("SWA window != forced window", swa_window=8, window=32, L=int(rng.integers(40, 400)),
                    self_swa_before=2, self_swa_after=2),
               case("the paper configuration at 1M tokens, FP8", L=2 ** 20, b=1, groups=4, group_size=6,
                    self_swa_before=12, self_swa_after=12, **PAPER_CFG)])


def _compare_kv(got, want, case):
    if not isinstance(got, dict):
        return f"kv_bytes returned {type(got).__name__}, expected a dict {{'self_fa', 'self_swa', 'cross', 'total'}}"
    probs = []
    for key in want:
        if key not in got:
            probs.append(f"key {key!r} missing")
            continue
        p = compare_values(got[key], want[key], key)
        if p:
            probs.append(p)
    if not probs:
        return None
    right = [k for k in want if k in got and compare_values(got[k], want[k], k) is None]
    return "; ".join(probs) + (f"; {', '.join(right)} right" if right else "")


register(Exercise("06.3", "kv_bytes", kv_bytes_reference, _kv_cases, compare=_compare_kv,
                  forbidden=("hybrid_lab.costs.hysparse_ledger:kv_bytes", "hybrid_lab.costs.hysparse_ledger:kv_gb",
                             "hybrid_lab.serving.pd_bundle:bundle_bytes")))
