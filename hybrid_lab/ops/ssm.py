"""Selective state-space models (Mamba): one recurrence, two algorithms.

Mamba-1 (the lecture's form, diagonal A per channel)::

    Δ_t = softplus(x_t W_Δ + b),  B_t = x_t W_B,  C_t = x_t W_C
    h_t = exp(Δ_t A) ⊙ h_{t-1} + (Δ_t ⊙ x_t) ⊗ B_t          h: (D, N)
    y_t = h_t · C_t + D ⊙ x_t

* ``ssm_scan``      token by token (how decode runs: O(D·N) work per token on a fixed-size state);
* ``ssm_chunked``   chunked-parallel (how prefill runs, the Mamba-2 "SSD" idea): inside a chunk the state is a
  decay-weighted sum with weights ``exp(c_t - c_s)``, ``c`` the running sum of ``Δ A``; only one state crosses a
  chunk boundary. ``selective_scan`` is the same function under the name of its Triton twin.

Mamba-2 (scalar decay per head, ``ssd_scan`` / ``ssd_chunked``): A is one number per head, so the intra-chunk step
is a masked matrix product ``(C Bᵀ ⊙ L) (Δ x)`` with ``L[t, s] = exp(c_t - c_s)`` for s ≤ t: tensor-core work.

Shapes: Bt batch, L length, Dm channels, N state size, H heads, P head dim. Every entry point checks its arguments
with the contract of its swappable op (``hybrid_lab.ops.contracts``): A <= 0, Δ >= 0, no NaN or inf anywhere (one
inf at step 5 would otherwise leak NaN into steps 0-4 of a chunk through the masked weights).
"""
from __future__ import annotations

import numpy as np

from hybrid_lab.core import checks
from hybrid_lab.core.blocks import softplus
from hybrid_lab.ops.contracts import check_selective_scan, check_ssd_chunked, float_dtype
from hybrid_lab.ops.registry import swappable


# ----------------------------------------------------------------------------------------------- shared
def _segment_sums(a):
    """seg[:, t, s] = Σ_{s < r <= t} a[:, r] (0 for s >= t) for a (Bt, q, ...) of log-decays, summed directly.

    The decay between steps s and t is exp(seg[t, s]). Forming it as c_t - c_s from the running sum c cancels:
    once one step's Δ·A is huge (|c| ~ 1e16), c_t - c_s of the small steps after it is rounded away. Every a <= 0,
    so each segment sum is a sum of same-signed terms: relative error ~ q·eps for any finite Δ·A.
    """
    q = a.shape[1]
    later = np.tri(q, k=-1, dtype=bool).reshape((1, q, q) + (1,) * (a.ndim - 2))     # r > s
    return np.cumsum(np.where(later, a[:, :, None], 0.0), axis=1)


# ----------------------------------------------------------------------------------------------- Mamba-1
def init_ssm(d_model: int, d_state: int, seed: int = 0, dtype="float64") -> dict:
    """Parameters of one selective SSM mixer acting on ``d_model`` channels with an ``N = d_state`` state per channel.

    A uses the S4D-real initialization ``A[d, n] = -(n + 1)`` (every channel gets decay rates 1..N); ``b`` is set so
    that Δ starts in [1e-3, 1e-1] as in Mamba.
    """
    d_model, d_state = checks.pos_int("d_model", d_model), checks.pos_int("d_state", d_state)
    rng = np.random.default_rng(checks.nonneg_int("seed", seed))
    if dtype not in ("float16", "float32", "float64", np.float16, np.float32, np.float64):
        raise ValueError(f"dtype must be 'float16', 'float32' or 'float64', got {dtype!r}")
    dt0 = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), d_model))
    p = {
        "W_delta": rng.normal(0, d_model ** -0.5, (d_model, d_model)),
        "b_delta": dt0 + np.log(-np.expm1(-dt0)),  # inverse softplus
        "W_B": rng.normal(0, d_model ** -0.5, (d_model, d_state)),
        "W_C": rng.normal(0, d_model ** -0.5, (d_model, d_state)),
        "A": -np.tile(np.arange(1, d_state + 1, dtype=np.float64), (d_model, 1)),
        "D": np.ones(d_model),
    }
    return {k: v.astype(dtype) for k, v in p.items()}


def ssm_inputs(p: dict, x):
    """The selective parameters from the input: x: (..., Dm) -> dt (..., Dm), B (..., N), C (..., N)."""
    if not isinstance(p, dict) or not {"W_delta", "b_delta", "W_B", "W_C"} <= p.keys():
        raise ValueError("p must be the parameters of init_ssm (a dict with W_delta, b_delta, W_B, W_C)")
    for k in ("W_delta", "b_delta", "W_B", "W_C"):
        checks.finite_array(f"p[{k!r}]", p[k], 1 if k == "b_delta" else 2)
    Dm = p["W_delta"].shape[0]
    x = checks.finite_array("x", x)
    if x.ndim < 1 or x.shape[-1] != Dm:
        raise ValueError(f"x must have shape (..., Dm={Dm}), got {x.shape}")
    dt = softplus(x @ p["W_delta"] + p["b_delta"])
    return dt, x @ p["W_B"], x @ p["W_C"]


@swappable("selective_scan_step")
def selective_scan_step(x, dt, A, B, C, D, h):
    """One decode step. x, dt: (Bt, Dm); A: (Dm, N); B, C: (Bt, N); D: (Dm,) or None; h: (Bt, Dm, N).

    Returns (y: (Bt, Dm), h_new: (Bt, Dm, N)): y in ``float_dtype`` of all inputs, h_new of all but D.
    """
    y_dt, h_dt = float_dtype(x, dt, A, B, C, D, h), float_dtype(x, dt, A, B, C, h)
    h = np.exp(dt[:, :, None] * A) * h + (dt * x)[:, :, None] * B[:, None, :]
    y = np.einsum("bdn,bn->bd", h, C)
    if D is not None:
        y = y + D * x
    return y.astype(y_dt, copy=False), h.astype(h_dt, copy=False)


def ssm_scan(x, dt, A, B, C, D=None, h0=None, return_states=False):
    """Reference recurrence, token by token (float64 recommended). Shapes as ``selective_scan``.

    Returns (y (Bt, L, Dm), h_last (Bt, Dm, N)) and, with ``return_states``, all states (Bt, L, Dm, N).
    """
    x, dt, A, B, C, D, h0, _ = check_selective_scan(x, dt, A, B, C, D, h0)
    Bt, L, Dm = x.shape
    ft = float_dtype(x, dt, A, B, C)
    h = np.zeros((Bt, Dm, A.shape[1]), ft) if h0 is None else h0.astype(ft)
    ys, hs = np.empty((Bt, L, Dm), ft), []
    for t in range(L):
        h = np.exp(dt[:, t, :, None] * A) * h + (dt[:, t] * x[:, t])[:, :, None] * B[:, t, None, :]
        ys[:, t] = np.einsum("bdn,bn->bd", h, C[:, t])
        if return_states:
            hs.append(h)
    if D is not None:
        ys = ys + D * x
    if return_states:
        return ys, h, np.stack(hs, axis=1) if hs else np.zeros((Bt, 0, Dm, A.shape[1]), ft)
    return ys, h


def ssm_chunked(x, dt, A, B, C, D=None, h0=None, chunk_size=64, return_boundaries=False):
    """Chunked-parallel scan: same result as ``ssm_scan`` (to ~1e-12 in float64, for any finite Δ·A).

    Inside a chunk of length Q, with ``c_t = Σ_{r ≤ t} Δ_r A`` (running sum from the chunk start)::

        h_t = exp(c_t) ⊙ h_start + Σ_{s ≤ t} exp(c_t - c_s) ⊙ (Δ_s x_s) ⊗ B_s

    ``c_t - c_s`` is formed as the segment sum Σ_{s < r ≤ t} Δ_r A, never as a difference of running sums (which
    cancels once one Δ is huge: a spike of 1e16 gave errors of order 1), and masked entries (s > t) are never
    exponentiated, so nothing overflows when Δ is large.
    A length that is not a multiple of ``chunk_size`` ends with a shorter chunk.
    With ``return_boundaries`` also returns {position: state (Bt, Dm, N)} at every chunk end (the free snapshots).
    """
    return _chunked_scan(*check_selective_scan(x, dt, A, B, C, D, h0, chunk_size), return_boundaries)


def _chunked_scan(x, dt, A, B, C, D, h0, Q, return_boundaries=False):
    """``ssm_chunked`` on validated arguments (Q = chunk size)."""
    Bt, L, Dm = x.shape
    N = A.shape[1]
    ft = float_dtype(x, dt, A, B, C)
    h = np.zeros((Bt, Dm, N), ft) if h0 is None else h0.astype(ft)
    y = np.empty((Bt, L, Dm), ft)
    bounds = {}
    for s0 in range(0, L, Q):
        s1 = min(s0 + Q, L)
        a = dt[:, s0:s1, :, None] * A                          # (Bt, q, Dm, N) log-decay per step
        c = np.cumsum(a, axis=1)                               # running sum inside the chunk
        u = (dt[:, s0:s1] * x[:, s0:s1])[..., None] * B[:, s0:s1, None, :]   # (Bt, q, Dm, N) inputs
        q = s1 - s0
        causal = np.tri(q, dtype=bool)[None, :, :, None, None]
        w = np.where(causal, np.exp(_segment_sums(a)), 0.0)       # (Bt, t, s, Dm, N)
        hs = np.einsum("btsdn,bsdn->btdn", w, u) + np.exp(c) * h[:, None]
        y[:, s0:s1] = np.einsum("btdn,btn->btd", hs, C[:, s0:s1])
        h = hs[:, -1]
        if return_boundaries:
            bounds[s1] = h.copy()
    if D is not None:
        y = y + D * x
    return (y, h, bounds) if return_boundaries else (y, h)


@swappable("selective_scan")
def selective_scan(x, dt, A, B, C, D=None, h0=None, chunk_size=64):
    """Mamba-1 selective scan for prefill (chunked). x, dt: (Bt, L, Dm); A: (Dm, N); B, C: (Bt, L, N); D: (Dm,);
    h0: (Bt, Dm, N). Returns (y: (Bt, L, Dm), h_last: (Bt, Dm, N)). Twin of ``gpu_track``'s kernel."""
    return _chunked_scan(x, dt, A, B, C, D, h0, chunk_size)


# ----------------------------------------------------------------------------------------------- Mamba-2 (SSD)
def ssd_scan(x, dt, A, B, C, D=None, h0=None):
    """Mamba-2 reference recurrence: h_t = exp(Δ_t A_h) h_{t-1} + Δ_t x_t ⊗ B_t; y_t = h_t C_t + D_h x_t.

    x: (Bt, L, H, P); dt: (Bt, L, H); A: (H,); B, C: (Bt, L, N); h: (Bt, H, P, N).
    """
    x, dt, A, B, C, D, h0, _ = check_ssd_chunked(x, dt, A, B, C, D, h0)
    Bt, L, H, P = x.shape
    ft = float_dtype(x, dt, A, B, C)
    h = np.zeros((Bt, H, P, B.shape[2]), ft) if h0 is None else h0.astype(ft)
    y = np.empty(x.shape, ft)
    for t in range(L):
        h = np.exp(dt[:, t] * A)[:, :, None, None] * h + (dt[:, t, :, None] * x[:, t])[..., None] * B[:, t, None, None, :]
        y[:, t] = np.einsum("bhpn,bn->bhp", h, C[:, t])
    if D is not None:
        y = y + D[:, None] * x
    return y, h


@swappable("ssd_chunked")
def ssd_chunked(x, dt, A, B, C, D=None, h0=None, chunk_size=64):
    """Mamba-2 SSD chunked scan. Per chunk and head, with ``L[t, s] = exp(c_t - c_s)`` (s ≤ t, else 0)::

        y_intra = ((C Bᵀ) ⊙ L) @ (Δ x)            a masked matmul (tensor cores on a GPU)
        y_inter = exp(c_t) · (C_t · h_start)       the state carried in from earlier chunks
        h_end   = exp(c_Q) h_start + Σ_s exp(c_Q - c_s) Δ_s x_s ⊗ B_s

    Shapes as ``ssd_scan``. Returns (y: (Bt, L, H, P), h_last: (Bt, H, P, N)). ``c_t - c_s`` is a segment sum
    (as in ``ssm_chunked``): the same result as ``ssd_scan`` to ~1e-12 in float64 for any finite Δ·A.
    """
    Q = chunk_size
    Bt, L, H, P = x.shape
    N = B.shape[2]
    ft = float_dtype(x, dt, A, B, C)
    h = np.zeros((Bt, H, P, N), ft) if h0 is None else h0.astype(ft)
    y = np.empty(x.shape, ft)
    for s0 in range(0, L, Q):
        s1 = min(s0 + Q, L)
        q = s1 - s0
        a = dt[:, s0:s1] * A                                        # (Bt, q, H) log-decay per step
        c = np.cumsum(a, axis=1)
        seg = _segment_sums(a)                               # (Bt, t, s, H)
        Lmask = np.where(np.tri(q, dtype=bool)[None, :, :, None], np.exp(seg), 0.0)
        G = np.einsum("btn,bsn->bts", C[:, s0:s1], B[:, s0:s1])     # (Bt, t, s)
        u = dt[:, s0:s1, :, None] * x[:, s0:s1]                     # (Bt, q, H, P)
        y_intra = np.einsum("bts,btsh,bshp->bthp", G, Lmask, u)
        y_inter = np.exp(c)[..., None] * np.einsum("btn,bhpn->bthp", C[:, s0:s1], h)
        y[:, s0:s1] = y_intra + y_inter
        tail = np.exp(seg[:, -1])                                   # (Bt, q, H): exp(c_Q - c_s)
        h = np.exp(c[:, -1])[:, :, None, None] * h + np.einsum("bsh,bshp,bsn->bhpn", tail, u, B[:, s0:s1])
    if D is not None:
        y = y + D[:, None] * x
    return y, h


# ----------------------------------------------------------------------------------------------- sizes and intuition
def survival(dt, A, length: int, token: int = 0):
    """How much of token ``token``'s contribution is still in the state after each later step.

    With constant Δ and decay rate A (<= 0; 0 = no decay) the factor after t steps is exp(Δ·A·(t - token)); ``dt``
    may also be an array of per-step Δ (length ``length``) to show selectivity: Δ ≈ 0 on a step means "skip this
    token".
    Returns (length,) with zeros before ``token``.
    """
    length = checks.nonneg_int("length", length)
    checks.output_size("length", (length,))
    token = checks.int_in("token", token, 0, max(length, 1))
    if checks.finite_number("A", A) > 0:
        raise ValueError(f"A must be <= 0 (a decay rate), got {A}")
    dts = checks.finite_array("dt", dt).astype(np.float64)
    if dts.ndim > 1 or dts.size not in (1, length):
        raise ValueError(f"dt must be a number or a (length={length},) array, got shape {dts.shape}")
    if (dts < 0).any():
        raise ValueError(f"dt must be >= 0 (a step size), got min {dts.min()}")
    dts = np.broadcast_to(dts.reshape(-1), (length,))
    logf = np.concatenate([[0.0], np.cumsum(dts[token + 1:] * A)])
    out = np.zeros(length)
    out[token:] = np.exp(logf)
    return out
