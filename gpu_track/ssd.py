"""Mamba-2 SSD chunked scan: scalar decay per head, so the intra-chunk step is a masked matmul on tensor cores.

One program owns (sequence b, head h, BLOCK_P of the head's P channels) and carries the (BLOCK_P, N) state across
chunks of Q steps. Per chunk, with c = cumsum(Δ·A_h) inside the chunk:

    y      = ((C Bᵀ) ⊙ L) (Δ x)  +  exp(c) ⊙ (C hᵀ)        L[t, s] = exp(c_t - c_s) for s ≤ t, else 0
    h_next = exp(c_Q) h  +  (Δ x ⊙ exp(c_Q - c))ᵀ B

Three tl.dot's per chunk (Q×N·N×Q, Q×Q·Q×P, P×Q·Q×N and one Q×N·N×P): tensor-core work, the exp and the
causal mask are the "intra-chunk decay step". The exponents c_t - c_s are segment sums Σ_{s<r≤t} Δ_r·A_h
(``_segment_sums``), not differences of c, which cancel when one Δ is huge; a masked entry's exponent is 0 or a
sum of non-positive terms, so nothing overflows. The chunk-state kernel needs only the exponents to the chunk's
end, Σ_{s<r<Q} Δ_r·A_h: a reverse running sum of Δ·A shifted by one step (``_tail_sums``), O(Q) work, as exact.

``two_pass=True`` is the parallel form (as in Mamba-2's own kernels): every chunk's own end state S_j from a zero
start (all chunks at once), then the only sequential part, h_end_j = exp(c_Q,j) h_end_{j-1} + S_j, elementwise over
the P·N state entries with a prefix scan over tiles of chunks (thousands of programs), then every chunk's output
from the previous chunk's end state (all chunks at once). ``chained=True`` is one launch (``_ssd_chained_kernel``):
each (chunk, head) program computes its intra-chunk output and its own chunk state, then takes the previous
chunk's end state from a small ring in L2, guarded by a flag, and passes its own on; the chunk states never go
to HBM and the carried state stays in fp32. It is correct and bit-reproducible (benchmarks/ssd_chained_probe.py)
but not faster than the two-pass form on an H200 (``gpu_track/results/ssd_chained_h200.json``): it is bound by
latency and issue, not bytes, so the bench does not offer it. Offsets are int64 (sizes checked before launch), and
every dot tile is >= ``common.DOT_MIN`` natively: the old two-pass kernels used 32-wide tiles, which Triton 3.6
miscompiles on Hopper in kernels with several dots (out-of-bounds shared-memory reads).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpu_track.common import (DOT_MIN, TILE_MAX, acc_dtype, acc_torch_dtype, alloc, check, check_grid,
                              check_index_space, check_int, check_tensor, check_tile, dot_precision, pow2, scan_combine, on_tensor_cores)


@triton.jit
def _segment_sums(a, ar):
    """(Q, Q) seg[t, s] = Σ_{s < r <= t} a_r (0 for s >= t) of the log-decays a (Q,): the exponent of the decay
    from step s to step t, summed directly. As c_t - c_s of the running sum it cancels once one step's Δ·A is huge
    (a spike of 1e12 cost 1e-4 relative error); every a <= 0, so a sum of same-signed terms stays accurate."""
    return tl.cumsum(tl.where(ar[:, None] > ar[None, :], a[:, None], 0.0), 0)


@triton.jit
def _tail_sums(a_next):
    """(Q,) Σ_{s < r < Q} a_r, the exponent of the decay from step s to the chunk's end, from the chunk's log-decays
    shifted by one step (a_next[s] = a_{s+1}, 0 for the last step): a reverse running sum of same-signed terms, so
    exact like ``_segment_sums`` at O(Q) work instead of its (Q, Q) tile (the chunk-state kernel needs only this)."""
    return tl.cumsum(a_next, 0, reverse=True)


@triton.jit
def _last_row(seg, ar, Q: tl.constexpr):
    """seg[Q - 1, :]: Σ_{s < r < Q} a_r, the exponent of the decay from step s to the chunk's end."""
    return tl.sum(tl.where((ar == Q - 1)[:, None], seg, 0.0), 0)


@triton.jit
def _ssd_kernel(x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, h0_ptr, y_ptr, h_last_ptr, L, H, P, N,
                HAS_D: tl.constexpr, HAS_H0: tl.constexpr, Q: tl.constexpr,
                BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, ACC_DTYPE: tl.constexpr,
                DOT_PRECISION: tl.constexpr):
    b = tl.program_id(0)
    head = tl.program_id(1)
    offs_p = tl.program_id(2) * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_n = tl.arange(0, BLOCK_N)
    mask_p, mask_n = offs_p < P, offs_n < N
    a_h = tl.load(A_ptr + head).to(ACC_DTYPE)
    hrow = ((b * H + head).to(tl.int64) * P + offs_p)[:, None] * N + offs_n[None, :]
    if HAS_H0:
        h = tl.load(h0_ptr + hrow, mask=mask_p[:, None] & mask_n[None, :], other=0.0).to(ACC_DTYPE)
    else:
        h = tl.zeros([BLOCK_P, BLOCK_N], ACC_DTYPE)
    if HAS_D:
        d_h = tl.load(D_ptr + head).to(ACC_DTYPE)
    ar = tl.arange(0, Q)
    causal = ar[:, None] >= ar[None, :]
    for t0 in range(0, L, Q):
        offs_t = t0 + ar
        mask_t = offs_t < L
        row = b.to(tl.int64) * L + offs_t
        mask_tn = mask_t[:, None] & mask_n[None, :]
        dt = tl.load(dt_ptr + row * H + head, mask=mask_t, other=0.0).to(ACC_DTYPE)   # 0 past L: no decay, no input
        c = tl.cumsum(dt * a_h, 0)                                                   # (Q,) log-decay from chunk start
        c_last = tl.sum(tl.where(ar == Q - 1, c, 0.0), 0)
        seg = _segment_sums(dt * a_h, ar)                                            # (Q, Q) c_t - c_s, no cancelling
        xm = (row * H + head)[:, None] * P + offs_p[None, :]
        x = tl.load(x_ptr + xm, mask=mask_t[:, None] & mask_p[None, :], other=0.0)   # (Q, BP)
        B_tile = tl.load(B_ptr + row[:, None] * N + offs_n[None, :], mask=mask_tn, other=0.0)
        C_tile = tl.load(C_ptr + row[:, None] * N + offs_n[None, :], mask=mask_tn, other=0.0)
        u = x.to(ACC_DTYPE) * dt[:, None]                                            # Δ x
        cb = tl.dot(C_tile, tl.trans(B_tile), input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE)   # (Q, Q) = C Bᵀ
        decay = tl.where(causal, tl.exp(seg), 0.0)
        y = tl.dot((cb * decay).to(x.dtype), u.to(x.dtype), input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE)
        y += tl.exp(c)[:, None] * tl.dot(C_tile.to(ACC_DTYPE), tl.trans(h), input_precision=DOT_PRECISION,
                                         out_dtype=ACC_DTYPE)
        if HAS_D:
            y += d_h * x.to(ACC_DTYPE)
        tl.store(y_ptr + xm, y.to(y_ptr.dtype.element_ty), mask=mask_t[:, None] & mask_p[None, :])
        w = u * tl.exp(_last_row(seg, ar, Q))[:, None]                               # (Q, BP)
        h = tl.exp(c_last) * h + tl.dot(tl.trans(w.to(x.dtype)), B_tile, input_precision=DOT_PRECISION,
                                        out_dtype=ACC_DTYPE)
    tl.store(h_last_ptr + hrow, h.to(h_last_ptr.dtype.element_ty), mask=mask_p[:, None] & mask_n[None, :])


@triton.jit
def _group_dt(g, hh, HEADS: tl.constexpr, H, dt_ptr, row, mask_t, ar, offs_p, ACC_DTYPE: tl.constexpr):
    """Head hh of group g: its index clamped into range, its (Q,) and (BLOCK_P,) masks (False past H) and its Δ
    over the chunk (0 past L or past H). Returns (hc, okq, okp, dt)."""
    head = g * HEADS + hh
    hc = tl.minimum(head, H - 1)
    okq = (ar * 0 + head) < H
    okp = (offs_p * 0 + head) < H
    return hc, okq, okp, tl.load(dt_ptr + row * H + hc, mask=mask_t & okq, other=0.0).to(ACC_DTYPE)


@triton.jit
def _group_head(g, hh, HEADS: tl.constexpr, H, A_ptr, dt_ptr, row, mask_t, ar, offs_p, ACC_DTYPE: tl.constexpr):
    """Head hh of group g, for kernel 3 (the last group may be partial): ``_group_dt`` (its index clamped into range:
    the addresses stay valid; masks False past H, vectors: the interpreter wants no scalar masks; Δ, 0 past L or
    past H: no decay, no input), c = cumsum(Δ·A_h) and the segment sums of Δ·A_h (``_segment_sums``).
    Returns (hc, okq, okp, dt, c, seg)."""
    hc, okq, okp, dt = _group_dt(g, hh, HEADS, H, dt_ptr, row, mask_t, ar, offs_p, ACC_DTYPE)
    a_h = tl.load(A_ptr + hc).to(ACC_DTYPE)
    return hc, okq, okp, dt, tl.cumsum(dt * a_h, 0), _segment_sums(dt * a_h, ar)


@triton.jit
def _ssd_chunk_state_kernel(x_ptr, dt_ptr, A_ptr, B_ptr, states_ptr, decay_ptr, L, H, P, N, n_chunks,
                            Q: tl.constexpr, HEADS: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr,
                            ACC_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """Parallel form, kernel 1 of 3: every (sequence·chunk·group of HEADS heads, P block, N block) at once. The
    state each head's chunk alone leaves, from a zero start: S_j = Σ_t (Δx_t exp(c_Q - c_t))ᵀ B_t (one Q-deep dot),
    stored in the chunk's slot of ``states`` (Bt·H, n_chunks, P, N); and the chunk's decay exp(c_Q) in ``decay``
    (Bt·H, n_chunks). B is shared by every head: it is loaded once per program and reused for HEADS heads, whose
    x and Δ loads the loop pipelines. x is loaded already transposed (BLOCK_P, Q) (no tl.trans in the kernel)."""
    n_groups = tl.cdiv(H, HEADS)
    pid = tl.program_id(0)                                  # (b·n_chunks + j)·n_groups + g: a chunk's heads adjacent
    g = pid % n_groups
    bj = pid // n_groups
    j = bj % n_chunks
    b = bj // n_chunks
    offs_p = tl.program_id(1) * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_n = tl.program_id(2) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_p, mask_n = offs_p < P, offs_n < N
    ar = tl.arange(0, Q)
    offs_t = j * Q + ar
    mask_t = offs_t < L
    row = b.to(tl.int64) * L + offs_t
    tok0 = b.to(tl.int64) * L + j * Q                    # int64 tile bases, int32 offsets in them (as kernel 3)
    B_tile = tl.load(B_ptr + tok0 * N + (ar[:, None] * N + offs_n[None, :]), mask=mask_t[:, None] & mask_n[None, :],
                     other=0.0)
    for hh in range(HEADS):
        hc, okq, okp, dt = _group_dt(g, hh, HEADS, H, dt_ptr, row, mask_t, ar, offs_p, ACC_DTYPE)
        a_h = tl.load(A_ptr + hc).to(ACC_DTYPE)
        # Δ one step later (0 for the chunk's last step and past L): the decay to the chunk's end is a tail sum
        # (the inclusive reverse sum minus Δ_s·A would cancel when that one step is huge)
        dt_next = tl.load(dt_ptr + (row + 1) * H + hc, mask=(ar < Q - 1) & (offs_t + 1 < L) & okq,
                          other=0.0).to(ACC_DTYPE)
        c_last = tl.sum(dt * a_h, 0)
        x_t = tl.load(x_ptr + (tok0 * H + hc) * P + (ar[None, :] * (H * P) + offs_p[:, None]),
                      mask=(mask_p & okp)[:, None] & mask_t[None, :], other=0.0)              # (BP, Q) = xᵀ
        w_t = (x_t.to(ACC_DTYPE) * (dt * tl.exp(_tail_sums(dt_next * a_h)))[None, :]).to(x_t.dtype)
        s = tl.dot(w_t, B_tile, input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE)     # (BP, BN)
        slot = (b.to(tl.int64) * H + hc) * n_chunks + j
        srow = offs_p[:, None] * N + offs_n[None, :]
        tl.store(states_ptr + slot * P * N + srow, s.to(states_ptr.dtype.element_ty),
                 mask=(mask_p & okp)[:, None] & mask_n[None, :])
        if (tl.program_id(1) == 0) & (tl.program_id(2) == 0):
            tl.store(decay_ptr + slot + ar * 0, tl.exp(c_last) + tl.zeros([Q], ACC_DTYPE), mask=(ar == 0) & okq)


@triton.jit
def _ssd_state_pass_kernel(states_ptr, decay_ptr, h0_ptr, h_last_ptr, PN, n_chunks, HAS_H0: tl.constexpr,
                           BLOCK: tl.constexpr, KC: tl.constexpr, ACC_DTYPE: tl.constexpr):
    """Parallel form, kernel 2 of 3: the only sequential part, an elementwise recurrence over the chunks,
    h_end_j = decay_j · h_end_{j-1} + S_j, for BLOCK of the head's P·N state entries per program (Bt·H·P·N/BLOCK
    programs: thousands, where a per-(sequence, head) walk would have Bt·H). KC chunks are loaded at once and solved
    with a prefix scan (a load latency per KC chunks, not per chunk). Overwrites each S_j with h_end_j in place."""
    bh = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < PN
    if HAS_H0:
        h = tl.load(h0_ptr + bh.to(tl.int64) * PN + offs, mask=mask, other=0.0).to(ACC_DTYPE)
    else:
        h = tl.zeros([BLOCK], ACC_DTYPE)
    kc = tl.arange(0, KC)
    for j0 in range(0, n_chunks, KC):
        jj = j0 + kc
        mask_j = jj < n_chunks
        ptrs = states_ptr + (bh.to(tl.int64) * n_chunks + jj)[:, None] * PN + offs[None, :]
        m2 = mask_j[:, None] & mask[None, :]
        s = tl.load(ptrs, mask=m2, other=0.0).to(ACC_DTYPE)                             # (KC, BLOCK)
        d = tl.load(decay_ptr + bh.to(tl.int64) * n_chunks + jj, mask=mask_j, other=1.0).to(ACC_DTYPE)
        a_cum, u_cum = tl.associative_scan((tl.broadcast_to(d[:, None], (KC, BLOCK)), s), 0, scan_combine)
        hs = a_cum * h[None, :] + u_cum                                                 # the end state of each chunk
        tl.store(ptrs, hs.to(states_ptr.dtype.element_ty), mask=m2)
        h = tl.sum(tl.where((kc == KC - 1)[:, None], hs, 0.0), 0)                      # padded chunks: d=1, S=0
    tl.store(h_last_ptr + bh.to(tl.int64) * PN + offs, h.to(h_last_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _ssd_out_kernel(x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, states_ptr, h0_ptr, y_ptr, L, H, P, N, n_chunks,
                    HAS_D: tl.constexpr, HAS_H0: tl.constexpr, Q: tl.constexpr, HEADS: tl.constexpr,
                    BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, ACC_DTYPE: tl.constexpr,
                    DOT_PRECISION: tl.constexpr):
    """Parallel form, kernel 3 of 3: every (sequence·chunk·group of HEADS heads, P block) in parallel, from the
    state the previous chunk ended with (slot j-1 of ``states``; h0 or zero for the first chunk):
        y = ((C Bᵀ) ⊙ L) (Δ x) + exp(c) ⊙ (C h_startᵀ) + D x.
    B and C are shared by every head, so C Bᵀ (the largest dot, Q·Q·N) is computed once per program and reused for
    HEADS heads; the loop over heads pipelines their x and state loads. Bᵀ and h_startᵀ are loaded already
    transposed; every dot operand is in x's dtype (no tf32, no tl.trans)."""
    n_groups = tl.cdiv(H, HEADS)
    pid = tl.program_id(0)                                  # (b·n_chunks + j)·n_groups + g, as kernel 1
    g = pid % n_groups
    bj = pid // n_groups
    j = bj % n_chunks
    b = bj // n_chunks
    offs_p = tl.program_id(1) * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_n = tl.arange(0, BLOCK_N)
    mask_p, mask_n = offs_p < P, offs_n < N
    ar = tl.arange(0, Q)
    offs_t = j * Q + ar
    mask_t = offs_t < L
    row = b.to(tl.int64) * L + offs_t
    # a scalar int64 base per tile and int32 offsets inside it (the wrapper bounds Q·H·P and Q·N): 2-D int64
    # offsets are loop-invariant, so they stay live across the head loop and spill (static count at chunk 128, 4
    # warps, Triton 3.9: 13,680 instructions, 1,451 local loads with them; 9,224 and 851 without; 3.6 alike)
    tok0 = b.to(tl.int64) * L + j * Q
    C_tile = tl.load(C_ptr + tok0 * N + (ar[:, None] * N + offs_n[None, :]), mask=mask_t[:, None] & mask_n[None, :],
                     other=0.0)
    B_t = tl.load(B_ptr + tok0 * N + (ar[None, :] * N + offs_n[:, None]), mask=mask_n[:, None] & mask_t[None, :],
                  other=0.0)
    # (Q, Q) = C Bᵀ, kept for all HEADS heads in x's dtype (its product with the decay is rounded to that dtype for
    # the next dot anyway)
    cb = tl.dot(C_tile, B_t, input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE).to(x_ptr.dtype.element_ty)
    mask_np = mask_n[:, None] & mask_p[None, :]
    jv = tl.zeros([BLOCK_P], tl.int32) + j                                          # j as a vector, for the masks
    for hh in range(HEADS):
        hc, okq, okp, dt, c, seg = _group_head(g, hh, HEADS, H, A_ptr, dt_ptr, row, mask_t, ar, offs_p, ACC_DTYPE)
        xm = ar[:, None] * (H * P) + offs_p[None, :]
        xb = (tok0 * H + hc) * P
        x = tl.load(x_ptr + xb + xm, mask=mask_t[:, None] & (mask_p & okp)[None, :], other=0.0)  # (Q, BP)
        u = x.to(ACC_DTYPE) * dt[:, None]
        bh = b.to(tl.int64) * H + hc
        prev = bh * n_chunks + tl.maximum(j - 1, 0)                                 # slot j-1 (address kept in range)
        h_t = tl.load(states_ptr + prev * P * N + (offs_p[None, :] * N + offs_n[:, None]),
                      mask=mask_np & ((jv > 0) & okp)[None, :], other=0.0).to(x.dtype)           # (BN, BP) = h_startᵀ
        if HAS_H0:
            h0_t = tl.load(h0_ptr + (bh * P + offs_p)[None, :] * N + offs_n[:, None],
                           mask=mask_np & ((jv == 0) & okp)[None, :], other=0.0)
            h_t += h0_t.to(x.dtype)
        # the carried-state term first, then the intra-chunk dot accumulates onto it (one accumulator live)
        y = tl.exp(c)[:, None] * tl.dot(C_tile, h_t, input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE)
        decay = tl.where(ar[:, None] >= ar[None, :], tl.exp(seg), 0.0)              # (the causal mask not hoisted)
        y = tl.dot((cb.to(ACC_DTYPE) * decay).to(x.dtype), u.to(x.dtype), y, input_precision=DOT_PRECISION,
                   out_dtype=ACC_DTYPE)
        if HAS_D:
            y += tl.load(D_ptr + hc).to(ACC_DTYPE) * x.to(ACC_DTYPE)
        tl.store(y_ptr + xb + xm, y.to(y_ptr.dtype.element_ty), mask=mask_t[:, None] & (mask_p & okp)[None, :])


@triton.jit
def _ssd_chained_kernel(x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, h0_ptr, y_ptr, h_last_ptr, ring_ptr, sync_ptr,
                        L, H, P, N, n_chunks, n_pb, HAS_D: tl.constexpr, HAS_H0: tl.constexpr, Q: tl.constexpr,
                        HEADS: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, ACC_DTYPE: tl.constexpr,
                        DOT_PRECISION: tl.constexpr):
    """The chained form, one launch: every (sequence, chunk, group of HEADS heads, P block) is a program, and a
    chunk hands each head's end state to the next chunk through L2, where the two-pass form writes every chunk's
    state to HBM and reads it back twice.

    Per head, a program first does what needs no carried state (the intra-chunk output ((C Bᵀ) ⊙ L)(Δx) and its own
    chunk state S_j from a zero start), then waits for chunk j-1 of that head's (sequence, head, P block) chain,
    forms h_end_j = exp(c_Q) h_end_{j-1} + S_j, passes it on, and adds exp(c) ⊙ (C h_end_{j-1}ᵀ) to its output:
    only the hand-off is sequential. B, C and C Bᵀ are shared by the group's heads (loaded and computed once).
    Programs take their tile from a ticket counter (``sync[0]``), not from their program id: tickets go out in the
    order programs start, and a program waits only for smaller tickets, so whatever order the GPU schedules programs
    in, the one it waits for is already running (no deadlock). The hand-off goes through a ring of two (N, P) slots
    per chain (``ring``; chunk j writes slot j mod 2 only after chunk j-1, which read that slot's last value, has
    raised its flag); each chain's flag ``sync[1 + chain]`` counts the chunks whose end state is in place
    (release / acquire at GPU scope). The ring is in the accumulator's dtype: the carried state is never rounded
    to bf16. States are held transposed (N, P), so every dot takes its operands as loaded (no tl.trans)."""
    n_groups = tl.cdiv(H, HEADS)
    t = tl.atomic_add(sync_ptr, 1, sem="relaxed")          # ((b·n_chunks + j)·n_groups + g)·n_pb + pb
    pb = t % n_pb
    r = t // n_pb
    g = r % n_groups
    r = r // n_groups
    j = r % n_chunks
    b = r // n_chunks
    offs_p = pb * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_n = tl.arange(0, BLOCK_N)
    mask_p, mask_n = offs_p < P, offs_n < N
    ar = tl.arange(0, Q)
    offs_t = j * Q + ar
    mask_t = offs_t < L
    row = b.to(tl.int64) * L + offs_t
    tok0 = b.to(tl.int64) * L + j * Q                      # int64 tile bases, int32 offsets in them (as kernel 3)
    C_tile = tl.load(C_ptr + tok0 * N + (ar[:, None] * N + offs_n[None, :]), mask=mask_t[:, None] & mask_n[None, :],
                     other=0.0)                                                     # (Q, BN)
    B_t = tl.load(B_ptr + tok0 * N + (ar[None, :] * N + offs_n[:, None]), mask=mask_n[:, None] & mask_t[None, :],
                  other=0.0)                                                        # (BN, Q) = Bᵀ
    cb = tl.dot(C_tile, B_t, input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE).to(x_ptr.dtype.element_ty)
    causal = ar[:, None] >= ar[None, :]
    ring_n = offs_n[:, None] * BLOCK_P + (offs_p - pb * BLOCK_P)[None, :]          # a slot is (BN, BP), dense
    mask_np = mask_n[:, None] & mask_p[None, :]
    for hh in range(HEADS):
        head = g * HEADS + hh
        if head < H:                                        # the last group may be partial
            chain = (b * H + head) * n_pb + pb
            a_h = tl.load(A_ptr + head).to(ACC_DTYPE)
            dt = tl.load(dt_ptr + row * H + head, mask=mask_t, other=0.0).to(ACC_DTYPE)          # 0 past L
            dt_next = tl.load(dt_ptr + (row + 1) * H + head, mask=(ar < Q - 1) & (offs_t + 1 < L),
                              other=0.0).to(ACC_DTYPE)
            a = dt * a_h
            xm = ar[:, None] * (H * P) + offs_p[None, :]
            xb = (tok0 * H + head) * P
            mask_x = mask_t[:, None] & mask_p[None, :]
            x = tl.load(x_ptr + xb + xm, mask=mask_x, other=0.0)                   # (Q, BP)
            # this chunk's own end state from a zero start, Sᵀ = Bᵀ (Δx ⊙ exp(decay to the chunk's end)): (BN, BP)
            w = x.to(ACC_DTYPE) * (dt * tl.exp(_tail_sums(dt_next * a_h)))[:, None]
            s_t = tl.dot(B_t, w.to(x.dtype), input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE)
            # the intra-chunk output, while the previous chunk may still be at work
            decay = tl.where(causal, tl.exp(_segment_sums(a, ar)), 0.0)
            u = (x.to(ACC_DTYPE) * dt[:, None]).to(x.dtype)
            y = tl.dot((cb.to(ACC_DTYPE) * decay).to(x.dtype), u, input_precision=DOT_PRECISION,
                       out_dtype=ACC_DTYPE)
            # the hand-off: chunk j-1's end state (h0 or zero before the first chunk)
            flag = sync_ptr + 1 + chain
            bh = b.to(tl.int64) * H + head
            if j > 0:
                seen = tl.atomic_add(flag, 0, sem="acquire")
                while seen < j:
                    seen = tl.atomic_add(flag, 0, sem="acquire")
                h_t = tl.load(ring_ptr + (chain.to(tl.int64) * 2 + (j - 1) % 2) * (BLOCK_N * BLOCK_P) + ring_n,
                              cache_modifier=".cg")
            elif HAS_H0:
                h_t = tl.load(h0_ptr + (bh * P + offs_p)[None, :] * N + offs_n[:, None], mask=mask_np,
                              other=0.0).to(ACC_DTYPE)
            else:
                h_t = tl.zeros([BLOCK_N, BLOCK_P], ACC_DTYPE)
            h_end = tl.exp(tl.sum(a, 0)) * h_t + s_t
            if j < n_chunks - 1:
                tl.store(ring_ptr + (chain.to(tl.int64) * 2 + j % 2) * (BLOCK_N * BLOCK_P) + ring_n, h_end)
                tl.debug_barrier()                          # every thread's part stored before the flag says so
                tl.atomic_xchg(flag, j + 1, sem="release")
            else:
                tl.store(h_last_ptr + (bh * P + offs_p)[None, :] * N + offs_n[:, None],
                         h_end.to(h_last_ptr.dtype.element_ty), mask=mask_np)
            # the carried state's part, after the hand-off (off the chain's critical path)
            y += tl.exp(tl.cumsum(a, 0))[:, None] * tl.dot(C_tile, h_t.to(x.dtype), input_precision=DOT_PRECISION,
                                                           out_dtype=ACC_DTYPE)
            if HAS_D:
                y += tl.load(D_ptr + head).to(ACC_DTYPE) * x.to(ACC_DTYPE)
            tl.store(y_ptr + xb + xm, y.to(y_ptr.dtype.element_ty), mask=mask_x)


# public: gpu_track.targets compiles them ahead of time for each student GPU
KERNELS = {"single": _ssd_kernel, "chunk_state": _ssd_chunk_state_kernel, "state_pass": _ssd_state_pass_kernel,
           "out": _ssd_out_kernel, "chained": _ssd_chained_kernel}


def check_ssd_args(x, dt, A, B, C, D, h0, chunk, block_p, two_pass, block_n_states, pass_block=512, pass_chunks=8,
                   heads_per_program=8, chained=False):
    """The torch wrapper's contract (shapes, dtypes, devices, launch limits); ValueError naming the argument."""
    check_tensor("x", x, (None,) * 4, doc="(Bt, L, H, P)")
    Bt, L, H, P = x.shape
    check_tensor("dt", dt, (Bt, L, H), like=x, doc=f"(Bt={Bt}, L={L}, H={H})")
    check_tensor("A", A, (H,), like=x, doc=f"(H={H},)")
    check_tensor("B", B, (Bt, L, None), like=x, doc=f"(Bt={Bt}, L={L}, N)")
    N = B.shape[2]
    check_tensor("C", C, (Bt, L, N), like=x, doc=f"(Bt={Bt}, L={L}, N={N} as B)")
    if D is not None:
        check_tensor("D", D, (H,), like=x, doc=f"(H={H},)")
    if h0 is not None:
        check_tensor("h0", h0, (Bt, H, P, N), like=x, doc=f"(Bt={Bt}, H={H}, P={P}, N={N})")
    check_int("chunk", chunk)
    check(int(chunk) <= TILE_MAX, f"chunk must be <= {TILE_MAX} (Triton's largest block), got {chunk}")
    check_tile("block_p", block_p)
    check_index_space("L", L + pow2(chunk), "one sequence's time axis")       # offs_t = j·Q + arange(Q) is int32
    check(isinstance(chained, bool), f"chained must be a bool, got {chained!r}")
    check(not (chained and two_pass), "chained and two_pass are two forms: ask for one, got both True")
    if chained:
        q = max(DOT_MIN, pow2(chunk))
        check_index_space("x", q * H * P, "one chunk's rows of x (Q·H·P)")
        check_index_space("B", q * N, "one chunk's rows of B and C (Q·N)")
        n_chunks = triton.cdiv(L, q)
        check_int("heads_per_program", heads_per_program, 1)
        n_groups = triton.cdiv(H, min(heads_per_program, H)) if H else 0
        check_grid("x", (Bt * n_chunks * n_groups * triton.cdiv(P, max(DOT_MIN, min(block_p, pow2(P)))), 1, 1))
    if two_pass:
        check_tile("block_n_states", block_n_states)
        check_tile("pass_block", pass_block)
        check_tile("pass_chunks", pass_chunks, lo=1)
        check_int("heads_per_program", heads_per_program, 1)
        check_index_space("h0", P * N, "one head's state (P·N)")             # the pass kernel's offsets are int32
        q = max(DOT_MIN, pow2(chunk))                                         # the output kernel's in-tile offsets
        check_index_space("x", q * H * P, "one chunk's rows of x (Q·H·P)")
        check_index_space("B", q * N, "one chunk's rows of B and C (Q·N)")
        n_chunks = triton.cdiv(L, max(DOT_MIN, pow2(chunk)))
        n_groups = triton.cdiv(H, min(heads_per_program, H)) if H else 0
        check_grid("x", (Bt * n_chunks * n_groups, triton.cdiv(P, block_p), triton.cdiv(N, block_n_states)))
        check_grid("x", (Bt * H, triton.cdiv(P * N, pass_block), 1))
    else:
        check_grid("x", (Bt, H, triton.cdiv(P, block_p)))


@on_tensor_cores("x", "dt", "B", "C")
def ssd_chunked(x, dt, A, B, C, D=None, h0=None, chunk: int = 64, block_p: int = 64, num_warps: int = 4,
                out_dtype=None, num_stages: int = 2, two_pass: bool = False, block_n_states: int = 64,
                states_dtype=None, pass_block: int = 512, pass_chunks: int = 8, heads_per_program: int = 8,
                chained: bool = False):
    """x: (Bt, L, H, P); dt: (Bt, L, H); A: (H,); B, C: (Bt, L, N); D: (H,); h0: (Bt, H, P, N).

    Returns (y: (Bt, L, H, P), h_last: (Bt, H, P, N) float32/float64). y is float32 (float64 when x, B or C is
    float64) unless ``out_dtype`` is given (the benchmark writes bf16 like its peers). Precision: the dots take x,
    B and C in the widest of their dtypes (a float64 B is never rounded to a float16 x) and accumulate in float32,
    float64 when that dtype is float64 (Δ, A, D and h0 are read in the accumulator's dtype).

    ``two_pass=False``: one program per (sequence, head, P block) walks the chunks in order (Bt·H·P/block_p
    programs). ``two_pass=True``: the parallel form, three launches: (1) every chunk's own state from a zero start,
    all chunks at once; (2) the inter-chunk recurrence h_end_j = decay_j h_end_{j-1} + S_j, elementwise over the
    P·N state entries (``pass_block`` entries per program, ``pass_chunks`` chunks per prefix-scan step);
    (3) every chunk's output from the previous chunk's end state, all chunks at once. It writes and reads the
    chunk states (Bt·H·n_chunks·P·N in ``states_dtype``; default the accumulator's dtype; bf16 halves their
    bytes, as fla does) and needs no program to walk the sequence with tensor-core work: the better choice when
    Bt·H is small against the GPU's SM count. Kernels (1) and (3) give each program ``heads_per_program`` heads of
    one chunk: B and C are shared by all heads, so their tiles (and C Bᵀ in (3)) are loaded/computed once per
    program instead of once per head.

    ``chained=True``: one launch, one program per (sequence, chunk, ``heads_per_program`` heads, P block); a
    chunk's end state reaches the next chunk through L2 (a ring of two fp32 slots per (sequence, head, P block)
    and a flag), programs taking tiles from a ticket counter so that the one waited for has always started. Not
    with ``two_pass``. Measured on an H200 against the two-pass form: module docstring.

    Natively, every dot dimension (chunk, block_p, N blocks) is at least ``common.DOT_MIN`` = 64 (smaller tiles are
    raised to it): Triton 3.6 on Hopper miscompiles 16/32-wide tiles in kernels with several dots.
    """
    check_ssd_args(x, dt, A, B, C, D, h0, chunk, block_p, two_pass, block_n_states, pass_block, pass_chunks,
                   heads_per_program, chained)
    chunk, block_p, block_n_states = int(chunk), int(block_p), int(block_n_states)
    pass_block, pass_chunks, heads_per_program = int(pass_block), int(pass_chunks), int(heads_per_program)
    Bt, L, H, P = x.shape
    N = B.shape[2]
    op = torch.promote_types(torch.promote_types(x.dtype, B.dtype), C.dtype)   # the dots take one operand type
    acc = acc_torch_dtype(op)
    y = alloc((Bt, L, H, P), out_dtype or acc, x.device)
    h_last = alloc((Bt, H, P, N), acc, x.device)
    if Bt * H * P == 0:
        return y, h_last
    x, B, C = x.to(op).contiguous(), B.to(op).contiguous(), C.to(op).contiguous()
    dt, A = dt.contiguous(), A.contiguous()
    block_p = max(DOT_MIN, min(block_p, pow2(P)))
    Q = max(DOT_MIN, pow2(chunk))
    meta = dict(Q=Q, ACC_DTYPE=acc_dtype(acc), DOT_PRECISION=dot_precision(op), num_warps=num_warps,
                num_stages=num_stages)
    dummy = h_last
    if chained:
        n_chunks, n_pb, bn = triton.cdiv(L, Q), triton.cdiv(P, block_p), pow2(N, DOT_MIN)
        hg = min(heads_per_program, H)
        ring = alloc((Bt * H * n_pb, 2, bn, block_p), acc, x.device)
        sync = torch.zeros(1 + Bt * H * n_pb, dtype=torch.int32, device=x.device)   # ticket, then one flag a chain
        _ssd_chained_kernel[(Bt * n_chunks * triton.cdiv(H, hg) * n_pb,)](
            x, dt, A, B, C, D.contiguous() if D is not None else dummy, h0.contiguous() if h0 is not None else dummy,
            y, h_last, ring, sync, L, H, P, N, n_chunks, n_pb, HAS_D=D is not None, HAS_H0=h0 is not None,
            HEADS=hg, BLOCK_P=block_p, BLOCK_N=bn, **meta)
        return y, h_last
    if two_pass:
        n_chunks = triton.cdiv(L, Q)
        states = alloc((Bt * H, n_chunks, P, N), states_dtype or acc, x.device)
        decay = alloc((Bt * H, n_chunks), acc, x.device)
        bn = max(DOT_MIN, min(block_n_states, pow2(N)))
        hg = min(heads_per_program, H)
        n_groups = triton.cdiv(H, hg)
        _ssd_chunk_state_kernel[(Bt * n_chunks * n_groups, triton.cdiv(P, block_p), triton.cdiv(N, bn))](
            x, dt, A, B, states, decay, L, H, P, N, n_chunks, HEADS=hg, BLOCK_P=block_p, BLOCK_N=bn, **meta)
        _ssd_state_pass_kernel[(Bt * H, triton.cdiv(P * N, pass_block))](
            states, decay, h0.contiguous() if h0 is not None else dummy, h_last, P * N, n_chunks,
            HAS_H0=h0 is not None, BLOCK=pass_block, KC=pass_chunks, ACC_DTYPE=meta["ACC_DTYPE"], num_warps=4)
        _ssd_out_kernel[(Bt * n_chunks * n_groups, triton.cdiv(P, block_p))](
            x, dt, A, B, C, D.contiguous() if D is not None else dummy, states,
            h0.contiguous() if h0 is not None else dummy, y, L, H, P, N, n_chunks, HAS_D=D is not None,
            HAS_H0=h0 is not None, HEADS=hg, BLOCK_P=block_p, BLOCK_N=pow2(N, DOT_MIN), **meta)
        return y, h_last
    _ssd_kernel[(Bt, H, triton.cdiv(P, block_p))](
        x, dt, A, B, C, D.contiguous() if D is not None else dummy, h0.contiguous() if h0 is not None else dummy,
        y, h_last, L, H, P, N, HAS_D=D is not None, HAS_H0=h0 is not None, BLOCK_P=block_p,
        BLOCK_N=pow2(N, DOT_MIN), **meta)
    return y, h_last
