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

Shapes: Bt batch, L length, Dm channels, N state size, H heads, P head dim.
"""
from __future__ import annotations

import numpy as np

from hybrid_lab.core.blocks import softplus
from hybrid_lab.ops.registry import swappable


# ----------------------------------------------------------------------------------------------- validation helpers
def _arr(name, a, ndim=None, shape=None):
    a = np.asarray(a)
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D {shape or ''}, got shape {a.shape}")
    if a.dtype.kind not in "fiu":
        raise ValueError(f"{name} must be a real numeric array, got dtype {a.dtype}")
    if a.dtype.kind == "f" and np.isnan(a).any():
        raise ValueError(f"{name} contains NaN")
    return a


def _chunk(chunk_size):
    if not isinstance(chunk_size, (int, np.integer)) or isinstance(chunk_size, bool) or chunk_size <= 0:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    return int(chunk_size)


def _ftype(*arrays):
    return np.result_type(np.float32, *[a.dtype for a in arrays if a is not None])


def _check_mamba1(x, dt, A, B, C, D, h0):
    x = _arr("x", x, 3, "(Bt, L, Dm)")
    Bt, L, Dm = x.shape
    dt = _arr("dt", dt, 3)
    if dt.shape != x.shape:
        raise ValueError(f"dt must have the shape of x {x.shape}, got {dt.shape}")
    if (dt < 0).any():
        raise ValueError("dt must be >= 0 (pass softplus(x W_Δ + b))")
    A = _arr("A", A, 2, "(Dm, N)")
    if A.shape[0] != Dm:
        raise ValueError(f"A must have shape (Dm={Dm}, N), got {A.shape}")
    N = A.shape[1]
    B = _arr("B", B, 3)
    C = _arr("C", C, 3)
    if B.shape != (Bt, L, N) or C.shape != (Bt, L, N):
        raise ValueError(f"B and C must have shape (Bt={Bt}, L={L}, N={N}), got B{B.shape} C{C.shape}")
    if D is not None:
        D = _arr("D", D, 1)
        if D.shape != (Dm,):
            raise ValueError(f"D must have shape (Dm={Dm},), got {D.shape}")
    if h0 is not None:
        h0 = _arr("h0", h0, 3)
        if h0.shape != (Bt, Dm, N):
            raise ValueError(f"h0 must have shape (Bt={Bt}, Dm={Dm}, N={N}), got {h0.shape}")
    return x, dt, A, B, C, D, h0


# ----------------------------------------------------------------------------------------------- Mamba-1
def init_ssm(d_model: int, d_state: int, seed: int = 0, dtype="float64") -> dict:
    """Parameters of one selective SSM mixer acting on ``d_model`` channels with an ``N = d_state`` state per channel.

    A uses the S4D-real initialization ``A[d, n] = -(n + 1)`` (every channel gets decay rates 1..N); ``b`` is set so
    that Δ starts in [1e-3, 1e-1] as in Mamba.
    """
    if d_model <= 0 or d_state <= 0:
        raise ValueError(f"d_model and d_state must be positive, got {d_model}, {d_state}")
    rng = np.random.default_rng(seed)
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
    x = np.asarray(x)
    dt = softplus(x @ p["W_delta"] + p["b_delta"])
    return dt, x @ p["W_B"], x @ p["W_C"]


@swappable("selective_scan_step")
def selective_scan_step(x, dt, A, B, C, D, h):
    """One decode step. x, dt: (Bt, Dm); A: (Dm, N); B, C: (Bt, N); D: (Dm,) or None; h: (Bt, Dm, N).

    Returns (y: (Bt, Dm), h_new: (Bt, Dm, N)).
    """
    x, dt, A, B, C, D, h = _check_mamba1(
        np.asarray(x)[:, None], np.asarray(dt)[:, None], A, np.asarray(B)[:, None], np.asarray(C)[:, None], D,
        np.asarray(h))
    x, dt, B, C = x[:, 0], dt[:, 0], B[:, 0], C[:, 0]
    h = np.exp(dt[:, :, None] * A) * h + (dt * x)[:, :, None] * B[:, None, :]
    y = np.einsum("bdn,bn->bd", h, C)
    if D is not None:
        y = y + D * x
    return y, h


def ssm_scan(x, dt, A, B, C, D=None, h0=None, return_states=False):
    """Reference recurrence, token by token (float64 recommended). Shapes as ``selective_scan``.

    Returns (y (Bt, L, Dm), h_last (Bt, Dm, N)) and, with ``return_states``, all states (Bt, L, Dm, N).
    """
    x, dt, A, B, C, D, h0 = _check_mamba1(x, dt, A, B, C, D, h0)
    Bt, L, Dm = x.shape
    ft = _ftype(x, dt, A, B, C)
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
    """Chunked-parallel scan: same result as ``ssm_scan`` (to ~1e-12 in float64).

    Inside a chunk of length Q, with ``c_t = Σ_{r ≤ t} Δ_r A`` (running sum from the chunk start)::

        h_t = exp(c_t) ⊙ h_start + Σ_{s ≤ t} exp(c_t - c_s) ⊙ (Δ_s x_s) ⊗ B_s

    The exponent ``c_t - c_s`` is clamped to ≤ 0 before ``exp`` so masked entries (s > t) cannot overflow when Δ is large.
    A length that is not a multiple of ``chunk_size`` ends with a shorter chunk.
    With ``return_boundaries`` also returns {position: state (Bt, Dm, N)} at every chunk end (the free snapshots).
    """
    x, dt, A, B, C, D, h0 = _check_mamba1(x, dt, A, B, C, D, h0)
    Q = _chunk(chunk_size)
    Bt, L, Dm = x.shape
    N = A.shape[1]
    ft = _ftype(x, dt, A, B, C)
    h = np.zeros((Bt, Dm, N), ft) if h0 is None else h0.astype(ft)
    y = np.empty((Bt, L, Dm), ft)
    bounds = {}
    for s0 in range(0, L, Q):
        s1 = min(s0 + Q, L)
        a = dt[:, s0:s1, :, None] * A                          # (Bt, q, Dm, N) log-decay per step
        c = np.cumsum(a, axis=1)                               # running sum inside the chunk
        u = (dt[:, s0:s1] * x[:, s0:s1])[..., None] * B[:, s0:s1, None, :]   # (Bt, q, Dm, N) inputs
        diff = c[:, :, None] - c[:, None, :]                   # (Bt, t, s, Dm, N): c_t - c_s
        q = s1 - s0
        causal = np.tri(q, dtype=bool)[None, :, :, None, None]
        w = np.where(causal, np.exp(np.minimum(diff, 0.0)), 0.0)
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
    return ssm_chunked(x, dt, A, B, C, D, h0, chunk_size)


# ----------------------------------------------------------------------------------------------- Mamba-2 (SSD)
def _check_mamba2(x, dt, A, B, C, D, h0):
    x = _arr("x", x, 4, "(Bt, L, H, P)")
    Bt, L, H, P = x.shape
    dt = _arr("dt", dt, 3)
    if dt.shape != (Bt, L, H):
        raise ValueError(f"dt must have shape (Bt={Bt}, L={L}, H={H}), got {dt.shape}")
    if (dt < 0).any():
        raise ValueError("dt must be >= 0")
    A = _arr("A", A, 1)
    if A.shape != (H,):
        raise ValueError(f"A must have shape (H={H},) (one scalar decay per head), got {A.shape}")
    B = _arr("B", B, 3)
    C = _arr("C", C, 3)
    if B.shape[:2] != (Bt, L) or C.shape != B.shape:
        raise ValueError(f"B and C must have shape (Bt={Bt}, L={L}, N), got B{B.shape} C{C.shape}")
    N = B.shape[2]
    if D is not None:
        D = _arr("D", D, 1)
        if D.shape != (H,):
            raise ValueError(f"D must have shape (H={H},), got {D.shape}")
    if h0 is not None:
        h0 = _arr("h0", h0, 4)
        if h0.shape != (Bt, H, P, N):
            raise ValueError(f"h0 must have shape (Bt={Bt}, H={H}, P={P}, N={N}), got {h0.shape}")
    return x, dt, A, B, C, D, h0


def ssd_scan(x, dt, A, B, C, D=None, h0=None):
    """Mamba-2 reference recurrence: h_t = exp(Δ_t A_h) h_{t-1} + Δ_t x_t ⊗ B_t; y_t = h_t C_t + D_h x_t.

    x: (Bt, L, H, P); dt: (Bt, L, H); A: (H,); B, C: (Bt, L, N); h: (Bt, H, P, N).
    """
    x, dt, A, B, C, D, h0 = _check_mamba2(x, dt, A, B, C, D, h0)
    Bt, L, H, P = x.shape
    ft = _ftype(x, dt, A, B, C)
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

    Shapes as ``ssd_scan``. Returns (y: (Bt, L, H, P), h_last: (Bt, H, P, N)).
    """
    x, dt, A, B, C, D, h0 = _check_mamba2(x, dt, A, B, C, D, h0)
    Q = _chunk(chunk_size)
    Bt, L, H, P = x.shape
    N = B.shape[2]
    ft = _ftype(x, dt, A, B, C)
    h = np.zeros((Bt, H, P, N), ft) if h0 is None else h0.astype(ft)
    y = np.empty(x.shape, ft)
    for s0 in range(0, L, Q):
        s1 = min(s0 + Q, L)
        q = s1 - s0
        c = np.cumsum(dt[:, s0:s1] * A, axis=1)                     # (Bt, q, H)
        diff = c[:, :, None, :] - c[:, None, :, :]                  # (Bt, t, s, H)
        Lmask = np.where(np.tri(q, dtype=bool)[None, :, :, None], np.exp(np.minimum(diff, 0.0)), 0.0)
        G = np.einsum("btn,bsn->bts", C[:, s0:s1], B[:, s0:s1])     # (Bt, t, s)
        u = dt[:, s0:s1, :, None] * x[:, s0:s1]                     # (Bt, q, H, P)
        y_intra = np.einsum("bts,btsh,bshp->bthp", G, Lmask, u)
        y_inter = np.exp(c)[..., None] * np.einsum("btn,bhpn->bthp", C[:, s0:s1], h)
        y[:, s0:s1] = y_intra + y_inter
        tail = np.exp(np.minimum(c[:, -1:, :] - c, 0.0))            # (Bt, q, H): exp(c_Q - c_s)
        h = np.exp(c[:, -1])[:, :, None, None] * h + np.einsum("bsh,bshp,bsn->bhpn", tail, u, B[:, s0:s1])
    if D is not None:
        y = y + D[:, None] * x
    return y, h


# ----------------------------------------------------------------------------------------------- sizes and intuition
def ssm_state_bytes(d_inner: int, d_state: int, n_layers: int = 1, bytes_per_elem: int = 4) -> int:
    """Bytes of the recurrent state: n_layers · d_inner · d_state elements, independent of sequence length."""
    for name, v in (("d_inner", d_inner), ("d_state", d_state), ("n_layers", n_layers), ("bytes_per_elem", bytes_per_elem)):
        if v < 0:
            raise ValueError(f"{name} must be >= 0, got {v}")
    return int(n_layers * d_inner * d_state * bytes_per_elem)


def survival(dt, A, length: int, token: int = 0):
    """How much of token ``token``'s contribution is still in the state after each later step.

    With constant Δ and decay rate A (< 0) the factor after t steps is exp(Δ·A·(t - token)); ``dt`` may also be an
    array of per-step Δ (length ``length``) to show selectivity: Δ ≈ 0 on a step means "skip this token".
    Returns (length,) with zeros before ``token``.
    """
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length}")
    if not 0 <= token < max(length, 1):
        raise ValueError(f"token must lie in [0, length={length}), got {token}")
    if np.isnan(A) or A > 0:
        raise ValueError(f"A must be <= 0 (a decay rate), got {A}")
    dts = np.broadcast_to(np.asarray(dt, dtype=np.float64), (length,))
    if (dts < 0).any() or np.isnan(dts).any():
        raise ValueError("dt must be >= 0 and not NaN")
    logf = np.concatenate([[0.0], np.cumsum(dts[token + 1:] * A)])
    out = np.zeros(length)
    out[token:] = np.exp(logf)
    return out
