"""Exercises of notebook 08 (SparDA): InfLLM-V2's compressed keys, the rest-bucket KL of one row and its gradient,
and one training step of a Forecast head (logits, rest-bucket KL over the candidates, the gradient back to the
projection, clipping and Adam), all as the library defines them (``hybrid_lab.models.infllm``,
``hybrid_lab.models.forecast``, ``hybrid_lab.core.optim``)."""
from __future__ import annotations

import numpy as np

from hybrid_lab.core.optim import Adam
from hybrid_lab.exercises.framework import Case, Exercise, register
from hybrid_lab.models import forecast as fc
from hybrid_lab.models import infllm
from hybrid_lab.ops.sparse_attention import topk_indices

KL_PARTS = ("hybrid_lab.models.forecast:rest_bucket_kl", "hybrid_lab.models.forecast:rest_bucket_partition",
            "hybrid_lab.models.forecast:teacher_topk", "hybrid_lab.models.forecast:forecast_loss_and_grad",
            "hybrid_lab.ops.sparse_attention:topk_indices")
TRAINING = KL_PARTS + ("hybrid_lab.models.forecast:forecast_logits", "hybrid_lab.models.forecast:train_step",
                       "hybrid_lab.models.forecast:train_forecast", "hybrid_lab.core.optim:Adam.step",
                       "hybrid_lab.core.optim:clip_grad_norm")


# ------------------------------------------------------------------------------------------ 08.1 compressed keys
def compress_keys_reference(k, window=32, stride=16):
    """k: (B, S, Hkv, d) -> (B, Nc, Hkv, d), Nc = (S - window) // stride + 1 full windows (0 if S < window)."""
    return infllm.compress_keys(k, window, stride)


def _compress_cases(rng):
    def case(name, window, stride, S):
        B, H, d = int(rng.integers(1, 3)), int(rng.integers(1, 3)), int(rng.integers(1, 5))
        return Case(name, (rng.normal(size=(B, S, H, d)), window, stride),
                    note=f"B={B}, S={S}, Hkv={H}, d={d}, window={window}, stride={stride}")

    def ragged(window, stride):          # S leaves 1 .. stride-1 trailing tokens without a full window
        return window + stride * int(rng.integers(0, 8)) + int(rng.integers(1, stride))
    out = []
    for _ in range(3):
        w = int(rng.integers(3, 41))
        s = int(rng.integers(2, w + 1))
        out.append(case("ragged S (trailing tokens without a full window)", w, s, ragged(w, s)))
    w = int(rng.integers(2, 41))
    return out + [case("(32, 16) grid, ragged S", 32, 16, ragged(32, 16) + 16 * int(rng.integers(0, 30))),
                  case("S < window (no full window)", 32, 16, int(rng.integers(1, 32))),
                  case("S = window (one window)", w, int(rng.integers(1, w + 1)), w),
                  case("stride = window (no overlap)", w, w, ragged(w, w) if w > 1 else 3 * w),
                  case("(2, 1): the fine teacher's grid", 2, 1, int(rng.integers(2, 60)))]


register(Exercise("08.1", "compress_keys", compress_keys_reference, _compress_cases,
                  axes={"result": ("b", "j", "g", "dim")},
                  forbidden=("hybrid_lab.models.infllm:compress_keys",)))


# ------------------------------------------------------------------------------------------ 08.2 rest-bucket KL
def _kl_reference():
    # the library functions are bound here, in a closure: while exercise 08.3's check switches the library off,
    # this reference still works (it stands in for a student's rest_bucket_kl that did not pass 08.2)
    kl, topk = fc.rest_bucket_kl, topk_indices

    def rest_bucket_kl_reference(teacher, logits, k):
        """teacher: (N,) scores >= 0, not all 0; logits: (N,); k >= 1 (k >= N: every position in the top-k, the
        rest bucket empty). Returns (loss, dloss/dlogits (N,)); teacher top-k ties go to the smaller index."""
        teacher = np.asarray(teacher, dtype=np.float64)
        k = min(int(k), teacher.shape[-1])
        return kl(teacher, logits, k, sel=topk(teacher, k))
    return rest_bucket_kl_reference


rest_bucket_kl_reference = _kl_reference()


def _kl_cases(rng):
    def case(name, teacher, k, logits=None):
        logits = rng.normal(size=len(teacher)) if logits is None else logits
        return Case(name, (np.asarray(teacher, float), np.asarray(logits, float), int(k)),
                    note=f"N={len(teacher)}, k={k}, teacher={np.round(teacher, 3)}")

    def n():
        return int(rng.integers(4, 16))
    out = []
    for _ in range(4):
        N = n()
        out.append(case("random", rng.random(N) ** 2 + 1e-3, int(rng.integers(1, N))))
    N = n()
    out.append(case("unnormalized teacher (a sum of G = 3 softmaxes)", 3 * rng.dirichlet(np.ones(N)),
                    int(rng.integers(1, N))))
    N = n()
    out.append(case("k >= N (no rest bucket)", rng.random(N) + 0.1, N + int(rng.integers(0, 3))))
    N = n()
    t = np.ones(N)                                        # one 3, at least two 2s, the rest 1s; k = 2: the second
    pos = rng.permutation(N)                              # slot is a tie between the 2s
    t[pos[0]], t[pos[1:int(rng.integers(3, N))]] = 3.0, 2.0
    out.append(case("ties at the k-th place (ties to the smaller index)", t, 2))
    N, k = n(), int(rng.integers(1, 4))
    t = np.zeros(N)
    t[rng.permutation(N)[:k]] = rng.random(k) + 0.1
    out.append(case("zero-mass rest bucket (k non-zero teacher scores)", t, k))
    out.append(case("the notes' worked example", [0.4, 0.3, 0.2, 0.1], 2, np.log([0.35, 0.25, 0.15, 0.25])))
    return out


register(Exercise("08.2", "rest_bucket_kl", rest_bucket_kl_reference, _kl_cases, outputs=("loss", "grad"),
                  axes={"grad": ("c",)}, forbidden=KL_PARTS))


# ------------------------------------------------------------------------------------------ 08.3 one training step
def forecast_train_step_reference(W, x, kc, teacher, mask, k, m, v, t, lr=0.05, max_norm=0.5, betas=(0.9, 0.95),
                                  eps=1e-6):
    """One step of ``fc.train_forecast`` for one Forecast head (``fc.train_step`` on a one-layer setup), Adam's state
    (m, v after t steps) given. Returns (loss, grad, W_new, m_new, v_new); grad before clipping."""
    x, kc, teacher = (np.asarray(a, dtype=np.float64) for a in (x, kc, teacher))
    mask = np.asarray(mask, dtype=bool)
    sel = fc.teacher_topk(teacher, k, mask[None, :, None, :])
    setup = fc.TrainSetup([x], [kc], [teacher], mask, [sel], np.arange(x.shape[1]), int(k))
    params = {"W0": np.array(W, dtype=np.float64)}
    opt = Adam(params, lr=lr, betas=betas, eps=eps)
    opt.m["W0"] = np.array(m, dtype=np.float64) * np.ones_like(params["W0"])
    opt.v["W0"] = np.array(v, dtype=np.float64) * np.ones_like(params["W0"])
    opt.t = int(t)
    loss, grads = fc.train_step(params, setup, opt, max_norm)
    return loss, grads["W0"], params["W0"], opt.m["W0"], opt.v["W0"]


def grad_norm(W, x, kc, teacher, mask, k):
    """The norm of the reference's gradient (before clipping) at W, for a max_norm relative to it."""
    return float(np.linalg.norm(forecast_train_step_reference(W, x, kc, teacher, mask, k, np.zeros_like(W),
                                                              np.zeros_like(W), 0)[1]))


def step_case(rng, name, B, T, H, D, d, Nc, k=None, teacher=None, mask=None, empty_row=False, first=False, t=None,
              clip=True):
    """One 08.3 case of the given sizes. k: an int, a function of the mask, or None (drawn from 1 .. Nc - 1);
    teacher: an array, a function (B, T, H, Nc, mask, k) -> array, or None (random scores > 0); mask: (T, Nc), or
    None (a contiguous run of >= 2 candidates per query, as ``candidate_mask``); empty_row: one query loses its
    candidates; first: Adam's first step (m = v = 0, t = 0), else t (None: drawn from 1 .. 39); clip: max_norm below
    the gradient's norm (clipping happens) or above it."""
    x = rng.normal(size=(B, T, D))
    kc = rng.normal(size=(B, Nc, H, d))
    W = 0.3 * rng.normal(size=(D, H, d))
    if mask is None:
        lo = rng.integers(0, 3, T)                        # candidates: a contiguous run per query, as candidate_mask
        hi = rng.integers(lo + 2, Nc + 1)                 # at least two candidates (one alone has no gradient)
        pos = np.arange(Nc)
        mask = (pos[None, :] >= lo[:, None]) & (pos[None, :] < hi[:, None])
    if empty_row:
        mask = mask.copy()
        mask[int(rng.integers(0, T))] = False
    k = int(rng.integers(1, Nc)) if k is None else int(k(mask) if callable(k) else k)
    if teacher is None:
        teacher = rng.random((B, T, H, Nc)) ** 2 + 1e-3
    elif callable(teacher):
        teacher = teacher(B, T, H, Nc, mask, k)
    if first:
        m, v, t = np.zeros_like(W), np.zeros_like(W), 0
    else:
        v = (0.1 * rng.normal(size=W.shape)) ** 2 + 1e-4
        m = 0.5 * np.sqrt(v) * rng.normal(size=W.shape)
        t = int(rng.integers(1, 40)) if t is None else int(t)
    g = max(grad_norm(W, x, kc, teacher, mask, k), 1e-3)
    max_norm = g * (rng.uniform(0.2, 0.8) if clip else rng.uniform(1.5, 3.0))
    lr = float(rng.uniform(0.01, 0.1))
    return Case(name, (W, x, kc, teacher, mask, k, m, v, t, lr, max_norm),
                note=f"B={B}, T={T}, Hkv={H}, D={D}, d={d}, Nc={Nc}, k={k}, t={t}, lr={lr:.3f}, "
                     f"max_norm={max_norm:.3g} (gradient norm {g:.3g})")


def _step_cases(rng):
    def case(name, teacher_fn=None, k=None, empty_row=False, first=False, clip=True, small=False):
        B, T, H = (1, 1, 1) if small else (int(rng.integers(1, 3)), int(rng.integers(2, 6)), int(rng.integers(1, 4)))
        D, d, Nc = int(rng.integers(2, 7)), int(rng.integers(2, 7)), int(rng.integers(5, 13))
        return step_case(rng, name, B, T, H, D, d, Nc, k=k, teacher=teacher_fn, empty_row=empty_row, first=first,
                         clip=clip)

    def ties(B, T, H, Nc, mask, k):                       # per row: one 3, then 2s tied for the second slot
        out = np.ones((B, T, H, Nc))
        for idx in np.ndindex(B, T, H):
            c = rng.permutation(np.flatnonzero(mask[idx[1]]))
            if len(c) >= 3:
                out[idx][c[0]], out[idx][c[1:int(rng.integers(3, len(c) + 1))]] = 3.0, 2.0
        return out

    def zero_rest(B, T, H, Nc, mask, k):                  # exactly k non-zero scores among each row's candidates
        out = np.zeros((B, T, H, Nc))
        for idx in np.ndindex(B, T, H):
            c = rng.permutation(np.flatnonzero(mask[idx[1]]))[:k]
            out[idx][c] = rng.random(len(c)) + 0.1
        return out

    return ([case("random") for _ in range(3)]
            + [case("no clipping (gradient norm < max_norm)", clip=False),
               case("first step (t = 0, m = v = 0)", first=True),
               case("a query without candidates", empty_row=True),
               case("k >= candidates (no rest bucket)", k=lambda mask: mask.shape[1]),
               case("ties in the teacher (ties to the smaller position)", ties, k=lambda mask: 2),
               case("zero-mass rest bucket", zero_rest, k=lambda mask: int(rng.integers(1, 3))),
               case("B = T = Hkv = 1", small=True)])


register(Exercise("08.3", "forecast_train_step", forecast_train_step_reference, _step_cases,
                  outputs=("loss", "grad", "W_new", "m_new", "v_new"),
                  axes={name: ("D", "g", "dim") for name in ("grad", "W_new", "m_new", "v_new")},
                  forbidden=TRAINING,
                  preamble="import numpy as np\nfrom hybrid_lab.exercises.lab08 import rest_bucket_kl_reference as "
                           "rest_bucket_kl"))
