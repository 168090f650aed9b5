"""Exercises of notebook 00 (the three costs of attention): the KV bytes one token leaves behind, and the context
length at which prefill turns quadratic (lecture 10 §1). Two warm-ups: a formula the student derives from what
an attention layer stores, and one from the two terms of the prefill FLOPs."""
from __future__ import annotations

import math

import numpy as np

from hybrid_lab.costs import ledger
from hybrid_lab.costs.shape7b import HybridLayout
from hybrid_lab.exercises.framework import Case, Exercise, compare_values, register


# ------------------------------------------------------------------------------------------ 00.1 KV bytes per token
def kv_bytes_per_token_reference(n_attn, n_heads, n_kv_heads, d_head, bytes_per_elem):
    """Bytes of K and V one token leaves in all attention layers (n_heads query heads share n_kv_heads KV heads)."""
    m = HybridLayout(n_attn=n_attn, n_ssm=0 if n_attn else 1, n_mlp=0, d_model=n_heads * d_head, n_heads=n_heads,
                     n_kv_heads=n_kv_heads, dtype_bytes=bytes_per_elem, ssm_head_dim=1)
    return ledger.kv_bytes_per_token(m)


def kv_case(rng, name, n_attn=None, n_heads=None, n_kv_heads=None, d_head=None, b=None):
    """One 00.1 case; what is not given is drawn from the public ranges (GQA groups of 2, 4 or 8 query heads; given
    n_heads alone: MHA)."""
    n_attn = int(rng.integers(1, 65)) if n_attn is None else n_attn
    if n_heads is None:                                        # GQA: at least 2 query heads per KV head
        n_kv_heads = int(rng.choice([1, 2, 4, 8])) if n_kv_heads is None else n_kv_heads
        n_heads = n_kv_heads * int(rng.choice([2, 4, 8]))
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    d_head = int(rng.choice([32, 64, 96, 128, 256])) if d_head is None else d_head
    b = int(rng.choice([1, 2, 4])) if b is None else b
    return Case(name, (n_attn, n_heads, n_kv_heads, d_head, b),
                note=f"n_attn={n_attn}, n_heads={n_heads}, n_kv_heads={n_kv_heads}, d_head={d_head}, "
                     f"bytes_per_elem={b}")


def _kv_cases(rng):
    return ([kv_case(rng, "random GQA") for _ in range(4)]
            + [kv_case(rng, "MHA (n_kv_heads = n_heads)", n_heads=int(rng.choice([8, 16, 32]))),
               kv_case(rng, "MQA (one KV head)", n_kv_heads=1),
               kv_case(rng, "no attention layers (pure SSM)", n_attn=0),
               kv_case(rng, "FP8 (1 byte)", b=1),
               kv_case(rng, "Transformer 7B", 32, 32, 32, 128, 2)])


def _compare_bytes(got, want, case):
    """The default comparison below 2^63; from there on (where it holds no integer) the value exactly, as an int
    or as a float (a float rounds there: the exercise asks for an int)."""
    if abs(want) < 2 ** 63:
        return compare_values(got, want)
    if isinstance(got, (int, np.integer)) and not isinstance(got, (bool, np.bool_)):
        ok = int(got) == want
    elif isinstance(got, (float, np.floating)):
        ok = float(got) == want                         # Python compares an int and a float exactly
    else:
        return f"the result is {got!r}, expected an int"
    return None if ok else f"the result is wrong: got {got!r}, expected {want} (exactly)"


register(Exercise("00.1", "kv_bytes_per_token", kv_bytes_per_token_reference, _kv_cases, compare=_compare_bytes,
                  forbidden=("hybrid_lab.costs.ledger:kv_bytes_per_token",
                             "hybrid_lab.costs.shape7b:HybridLayout.kv_bytes_per_token")))


# ------------------------------------------------------------------------------------------ 00.2 quadratic crossover
def quadratic_crossover_reference(params, n_attn, d_model):
    """L* where 2·n_attn·d_model·L² (attention) = 2·P·L (weights): P / (n_attn · d_model); inf without attention
    (a pure SSM's prefill never turns quadratic). The library has no such function: the formula follows from
    ``HybridLayout.prefill_flops``."""
    if n_attn == 0:
        return math.inf
    return params / (n_attn * d_model)


def cross_case(rng, name, params=None, n_attn=None, d_model=None):
    """One 00.2 case; what is not given is drawn from the public ranges."""
    params = int(rng.integers(10 ** 8, 10 ** 11)) if params is None else params
    n_attn = int(rng.integers(1, 97)) if n_attn is None else n_attn
    d_model = int(rng.choice([1024, 2048, 3072, 4096, 5120, 8192])) if d_model is None else d_model
    return Case(name, (params, n_attn, d_model), note=f"params={params:,}, n_attn={n_attn}, d_model={d_model}")


def _cross_cases(rng):
    return ([cross_case(rng, "random") for _ in range(4)]
            + [cross_case(rng, "one attention layer", n_attn=1),
               cross_case(rng, "no attention layers (pure SSM)", n_attn=0),
               cross_case(rng, "hybrid 7B", ledger.HYBRID_7B.params, ledger.HYBRID_7B.n_attn,
                          ledger.HYBRID_7B.d_model)])


def _compare_crossover(got, want, case):
    """The default comparison, except that an infinite expected value needs an infinite result (the default's
    relative tolerance, rtol·|want|, is infinite there and would accept any number)."""
    if isinstance(want, float) and math.isinf(want):
        try:
            ok = math.isinf(float(got)) and float(got) > 0
        except (TypeError, ValueError):
            ok = False
        return None if ok else f"the result is {got!r}, expected inf"
    return compare_values(got, want)


register(Exercise("00.2", "quadratic_crossover", quadratic_crossover_reference, _cross_cases,
                  compare=_compare_crossover))
