"""Gated delta rule in Triton: the chunked form (prefill) and the token recurrence (decode).

Per value head, state S [K, V] fp32 and log-decay g <= 0:  S <- exp(g_t) S;  S <- S + k_t (beta_t (v_t - S^T k_t))^T;
o_t = S^T (scale q_t).  Value head h reads key head h // (HV // H).

Chunked form (chunk C = 64), two passes. Within a chunk, with G the chunk-local cumulative log-decay and S0 the
state entering it, the corrected values u_t = beta_t (v_t - k_t^T S_{t-1} exp(g_t)) satisfy the unit
lower-triangular system
    (I + A) u = beta V - (beta K exp(G)) S0,    A[t, s] = beta_t (k_t . k_s) exp(G_t - G_s)  for s < t,
so with T = (I + A)^-1 (the UT transform): W = T (beta K exp(G)), U = T (beta V), u = U - W S0 (the WY form).
Then  O = (Q exp(G)) S0 + (tril(Q K^T * exp(G_t - G_s))) u  and  S1 = exp(G_C) S0 + (K exp(G_C - G))^T u.
Pass 1 (`_chunk_wy_kernel`, every chunk and value head in parallel) finds T blockwise over 16-row slices and
writes W and U; pass 2 (`_chunk_state_output_kernel`, one program per sequence, value head and V block) walks the
chunks in order for the state and the outputs. (One sequential pass doing both, repeating a 64-step
substitution per chunk and per V block, took 10 ms per 8k-token layer on an H200: bench/results.)
Everything is fp32; the matrix products use tf32 on a GPU (`AW_GDN_DOT_PRECISION=ieee` forces full fp32) and
exact fp32 in the interpreter.
Variable-length batches: each program reads its sequence's bounds from cu_seqlens, and the last partial chunk is
masked (zero k, v, beta and g rows are inert: they add nothing and do not decay the state).

Recurrent form (decode): one program per (sequence, value head, V block) holding its [K, BV] state slice in
registers across the sequence's tokens; gates, the q/k l2norm and the in-place state write-back are fused, and
one launch covers every sequence in the batch.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine import settings
from engine.kernels.strides import unit_stride_rows

CHUNK_SIZE = 64
_DOT_PRECISION = settings.gdn_dot_precision()  # a kernel constant: fixed when the module loads


@triton.jit
def _load_qk_rows(ptr, rows, row_ok, head, n_heads, kk, k_ok, DIM: tl.constexpr, USE_L2NORM: tl.constexpr):
    x = tl.load(
        ptr + (rows.to(tl.int64)[:, None] * n_heads + head) * DIM + kk[None, :],
        mask=row_ok[:, None] & k_ok[None, :],
        other=0.0,
    ).to(tl.float32)
    if USE_L2NORM:
        x = x * tl.math.rsqrt(tl.sum(x * x, axis=1) + 1e-6)[:, None]
    return x


@triton.jit
def _slice_gates(g_ptr, beta_ptr, first_row, eos, hv, HV: tl.constexpr):
    """Log-decays and betas of rows first_row .. first_row + 15 of a chunk (zeros past the sequence end)."""
    rows = first_row + tl.arange(0, 16)
    row_ok = rows < eos
    g = tl.load(g_ptr + rows.to(tl.int64) * HV + hv, mask=row_ok, other=0.0).to(tl.float32)
    beta = tl.load(beta_ptr + rows.to(tl.int64) * HV + hv, mask=row_ok, other=0.0).to(tl.float32)
    return g, beta


@triton.jit
def _slice_keys(
    k_ptr, first_row, eos, hk, H: tl.constexpr, K: tl.constexpr, BK: tl.constexpr, USE_L2NORM: tl.constexpr
):
    """The l2-normed keys of rows first_row .. first_row + 15 (zeros past the sequence end)."""
    rows = first_row + tl.arange(0, 16)
    kk = tl.arange(0, BK)
    return _load_qk_rows(k_ptr, rows, rows < eos, hk, H, kk, kk < K, K, USE_L2NORM)


@triton.jit
def _slice_values(v_ptr, first_row, eos, hv, HV: tl.constexpr, V: tl.constexpr, BV: tl.constexpr):
    rows = first_row + tl.arange(0, 16)
    vv = tl.arange(0, BV)
    return tl.load(
        v_ptr + (rows.to(tl.int64)[:, None] * HV + hv) * V + vv[None, :],
        mask=(rows < eos)[:, None] & (vv < V)[None, :],
        other=0.0,
    ).to(tl.float32)


@triton.jit
def _wy_terms(
    t, k_ptr, v_ptr, first_row, eos, hk, hv, beta, gam,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    USE_L2NORM: tl.constexpr, P: tl.constexpr,
):  # fmt: skip
    """T_ij (beta K exp(G))_j and T_ij (beta V)_j for slice j (rows first_row ..): its keys and values are read
    again here rather than kept from the first pass, so only one slice's are live at a time (kept, all four
    slices' keys, values and products spill hundreds of bytes per thread)."""
    k = _slice_keys(k_ptr, first_row, eos, hk, H, K, BK, USE_L2NORM)
    v = _slice_values(v_ptr, first_row, eos, hv, HV, V, BV)
    kg = k * (beta * tl.exp(gam))[:, None]
    return tl.dot(t, kg, input_precision=P), tl.dot(t, v * beta[:, None], input_precision=P)


@triton.jit
def _dot(a, b, PRECISION: tl.constexpr):
    return tl.dot(a, b, input_precision=PRECISION)


@triton.jit
def _block_a(kb_i, k_j, gam_i, gam_j, DOT_PRECISION: tl.constexpr):
    """A[t, s] = beta_t (k_t . k_s) exp(G_t - G_s) for rows t of slice i and columns s of an earlier slice j."""
    decay = tl.exp(gam_i[:, None] - gam_j[None, :])  # <= 1: G only falls along the chunk
    return tl.dot(kb_i, tl.trans(k_j), input_precision=DOT_PRECISION) * decay


@triton.jit
def _diag_inverse(kb, k, gam, BC: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """(I + A_ii)^-1 for a diagonal 16 x 16 block, by forward substitution: row r is e_r - sum_{j<r} A[r, j] T[j]."""
    ri = tl.arange(0, BC)
    lower = ri[:, None] > ri[None, :]
    decay = tl.exp(tl.where(lower, gam[:, None] - gam[None, :], 0.0))
    a = tl.where(lower, tl.dot(kb, tl.trans(k), input_precision=DOT_PRECISION) * decay, 0.0)
    t = tl.where(ri[:, None] == ri[None, :], 1.0, 0.0)
    for r in range(1, BC):
        a_row = tl.sum(tl.where(ri[:, None] == r, a, 0.0), axis=0)
        t = tl.where(ri[:, None] == r, t - tl.sum(a_row[:, None] * t, axis=0)[None, :], t)
    return t


@triton.jit
def _chunk_wy_kernel(
    k_ptr,
    v_ptr,
    g_ptr,
    beta_ptr,
    w_ptr,
    u_ptr,
    chunk_rows_ptr,
    H: tl.constexpr,
    HV: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    BC: tl.constexpr,
    USE_L2NORM: tl.constexpr,
    P: tl.constexpr,
):
    """One program per (chunk, value head), all in parallel: W = T (beta K exp(G)) and U = T (beta V) with
    T = (I + A)^-1, found blockwise over four 16-row slices (diagonal blocks by substitution, the rest by products:
    T_ij = -T_ii sum_{j <= m < i} A_im T_mj). Keys are read slice by slice where a block needs them (A_ij needs
    slices i and j), so at most two slices' keys are live."""
    i_c = tl.program_id(0)
    hv = tl.program_id(1)
    hk = hv // (HV // H)
    t0 = tl.load(chunk_rows_ptr + 2 * i_c).to(tl.int32)
    eos = tl.load(chunk_rows_ptr + 2 * i_c + 1).to(tl.int32)
    # fmt: off
    s0, s1, s2, s3 = t0, t0 + BC, t0 + 2 * BC, t0 + 3 * BC
    g0, b0 = _slice_gates(g_ptr, beta_ptr, s0, eos, hv, HV)
    g1, b1 = _slice_gates(g_ptr, beta_ptr, s1, eos, hv, HV)
    g2, b2 = _slice_gates(g_ptr, beta_ptr, s2, eos, hv, HV)
    g3, b3 = _slice_gates(g_ptr, beta_ptr, s3, eos, hv, HV)
    # Chunk-local cumulative log-decay G, slice by slice.
    gam0 = tl.cumsum(g0, axis=0)
    gam1 = tl.cumsum(g1, axis=0) + tl.sum(g0, axis=0)
    gam2 = tl.cumsum(g2, axis=0) + tl.sum(g0, axis=0) + tl.sum(g1, axis=0)
    gam3 = tl.cumsum(g3, axis=0) + tl.sum(g0, axis=0) + tl.sum(g1, axis=0) + tl.sum(g2, axis=0)

    k0 = _slice_keys(k_ptr, s0, eos, hk, H, K, BK, USE_L2NORM)
    t00 = _diag_inverse(k0 * b0[:, None], k0, gam0, BC, P)
    k1 = _slice_keys(k_ptr, s1, eos, hk, H, K, BK, USE_L2NORM)
    kb1 = k1 * b1[:, None]
    t11, a10 = _diag_inverse(kb1, k1, gam1, BC, P), _block_a(kb1, k0, gam1, gam0, P)
    k2 = _slice_keys(k_ptr, s2, eos, hk, H, K, BK, USE_L2NORM)
    kb2 = k2 * b2[:, None]
    t22, a21 = _diag_inverse(kb2, k2, gam2, BC, P), _block_a(kb2, k1, gam2, gam1, P)
    a20 = _block_a(kb2, k0, gam2, gam0, P)
    k3 = _slice_keys(k_ptr, s3, eos, hk, H, K, BK, USE_L2NORM)
    kb3 = k3 * b3[:, None]
    t33, a32 = _diag_inverse(kb3, k3, gam3, BC, P), _block_a(kb3, k2, gam3, gam2, P)
    a31 = _block_a(kb3, k1, gam3, gam1, P)
    a30 = _block_a(kb3, k0, gam3, gam0, P)
    t10 = -_dot(t11, _dot(a10, t00, P), P)
    t21 = -_dot(t22, _dot(a21, t11, P), P)
    t20 = -_dot(t22, _dot(a20, t00, P) + _dot(a21, t10, P), P)
    t32 = -_dot(t33, _dot(a32, t22, P), P)
    t31 = -_dot(t33, _dot(a31, t11, P) + _dot(a32, t21, P), P)
    t30 = -_dot(t33, _dot(a30, t00, P) + _dot(a31, t10, P) + _dot(a32, t20, P), P)

    # Row slice i of W and U is sum_{j <= i} T_ij (beta K exp(G))_j and sum_{j <= i} T_ij (beta V)_j; each is
    # stored as soon as it is complete.
    kk = tl.arange(0, BK)
    k_ok = kk < K
    vv = tl.arange(0, BV)
    v_ok = vv < V
    rc = tl.arange(0, BC)
    w, u = _wy_terms(t00, k_ptr, v_ptr, s0, eos, hk, hv, b0, gam0, H, HV, K, V, BK, BV, USE_L2NORM, P)
    _store_rows(w_ptr, w, s0 + rc, eos, hv, HV, kk, k_ok, K)
    _store_rows(u_ptr, u, s0 + rc, eos, hv, HV, vv, v_ok, V)
    w, u = _wy_terms(t10, k_ptr, v_ptr, s0, eos, hk, hv, b0, gam0, H, HV, K, V, BK, BV, USE_L2NORM, P)
    w1, u1 = _wy_terms(t11, k_ptr, v_ptr, s1, eos, hk, hv, b1, gam1, H, HV, K, V, BK, BV, USE_L2NORM, P)
    _store_rows(w_ptr, w + w1, s1 + rc, eos, hv, HV, kk, k_ok, K)
    _store_rows(u_ptr, u + u1, s1 + rc, eos, hv, HV, vv, v_ok, V)
    w, u = _wy_terms(t20, k_ptr, v_ptr, s0, eos, hk, hv, b0, gam0, H, HV, K, V, BK, BV, USE_L2NORM, P)
    w1, u1 = _wy_terms(t21, k_ptr, v_ptr, s1, eos, hk, hv, b1, gam1, H, HV, K, V, BK, BV, USE_L2NORM, P)
    w, u = w + w1, u + u1
    w1, u1 = _wy_terms(t22, k_ptr, v_ptr, s2, eos, hk, hv, b2, gam2, H, HV, K, V, BK, BV, USE_L2NORM, P)
    _store_rows(w_ptr, w + w1, s2 + rc, eos, hv, HV, kk, k_ok, K)
    _store_rows(u_ptr, u + u1, s2 + rc, eos, hv, HV, vv, v_ok, V)
    w, u = _wy_terms(t30, k_ptr, v_ptr, s0, eos, hk, hv, b0, gam0, H, HV, K, V, BK, BV, USE_L2NORM, P)
    w1, u1 = _wy_terms(t31, k_ptr, v_ptr, s1, eos, hk, hv, b1, gam1, H, HV, K, V, BK, BV, USE_L2NORM, P)
    w, u = w + w1, u + u1
    w1, u1 = _wy_terms(t32, k_ptr, v_ptr, s2, eos, hk, hv, b2, gam2, H, HV, K, V, BK, BV, USE_L2NORM, P)
    w, u = w + w1, u + u1
    w1, u1 = _wy_terms(t33, k_ptr, v_ptr, s3, eos, hk, hv, b3, gam3, H, HV, K, V, BK, BV, USE_L2NORM, P)
    _store_rows(w_ptr, w + w1, s3 + rc, eos, hv, HV, kk, k_ok, K)
    _store_rows(u_ptr, u + u1, s3 + rc, eos, hv, HV, vv, v_ok, V)
    # fmt: on


@triton.jit
def _store_rows(ptr, x, rows, eos, head, n_heads, cols, col_ok, DIM: tl.constexpr):
    tl.store(
        ptr + (rows.to(tl.int64)[:, None] * n_heads + head) * DIM + cols[None, :],
        x,
        mask=(rows < eos)[:, None] & col_ok[None, :],
    )


@triton.jit
def _load_qk_halves(ptr, rows, row_ok, head, n_heads, kk, DIM: tl.constexpr, USE_L2NORM: tl.constexpr):
    """Columns kk and BK2 + kk of rows `rows` of a [T, n_heads, DIM] q or k, l2-normed over the whole row. Offsets
    are int32 (T * n_heads * DIM stays below 2^31 up to the model's 262,144 positions): int64 [T, BK2] address
    tensors cost twice the registers."""
    base = ptr + (rows[:, None] * n_heads + head) * DIM + kk[None, :]
    lo = tl.load(base, mask=row_ok[:, None] & (kk < DIM)[None, :], other=0.0).to(tl.float32)
    hi = tl.load(base + kk.shape[0], mask=row_ok[:, None] & (kk + kk.shape[0] < DIM)[None, :], other=0.0)
    hi = hi.to(tl.float32)
    if USE_L2NORM:
        inv = tl.math.rsqrt(tl.sum(lo * lo, axis=1) + tl.sum(hi * hi, axis=1) + 1e-6)[:, None]
        lo, hi = lo * inv, hi * inv
    return lo, hi


@triton.jit
def _chunk_state_output_kernel(
    q_ptr,
    k_ptr,
    g_ptr,
    w_ptr,
    u_ptr,
    o_ptr,
    h0_ptr,
    ht_ptr,
    cu_seqlens_ptr,
    scale,
    H: tl.constexpr,
    HV: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BT: tl.constexpr,
    BK2: tl.constexpr,
    BV: tl.constexpr,
    USE_L2NORM: tl.constexpr,
    HAS_H0: tl.constexpr,
    STORE_HT: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """One program per (sequence, value head, V block), walking its chunks in order: the state recurrence and
    the outputs, with W and U from `_chunk_wy_kernel`. The K axis is held as two halves of BK2 (`lo`, `hi`): each
    product's fp32 operands are [BT, BK2] tiles, half the shared memory of whole-K tiles (a [64, 128] fp32 tile
    is 32 KB; with q, k and w staged at once, whole-K tiles overflow a consumer card's 99 KB)."""
    i_v = tl.program_id(0)
    i_nh = tl.program_id(1)
    n = i_nh // HV
    hv = i_nh % HV
    hk = hv // (HV // H)
    bos = tl.load(cu_seqlens_ptr + n).to(tl.int32)
    eos = tl.load(cu_seqlens_ptr + n + 1).to(tl.int32)

    kk = tl.arange(0, BK2)
    vv = i_v * BV + tl.arange(0, BV)
    v_ok = vv < V
    ri = tl.arange(0, BT)
    lower_eq = ri[:, None] >= ri[None, :]

    state_off = (n.to(tl.int64) * HV + hv) * K * V + kk[:, None] * V + vv[None, :]
    lo_mask = (kk < K)[:, None] & v_ok[None, :]
    hi_mask = (kk + BK2 < K)[:, None] & v_ok[None, :]
    if HAS_H0:
        s_lo = tl.load(h0_ptr + state_off, mask=lo_mask, other=0.0).to(tl.float32)
        s_hi = tl.load(h0_ptr + state_off + BK2 * V, mask=hi_mask, other=0.0).to(tl.float32)
    else:
        s_lo = tl.zeros([BK2, BV], dtype=tl.float32)
        s_hi = tl.zeros([BK2, BV], dtype=tl.float32)

    for t0 in range(bos, eos, BT):
        rows = t0 + ri
        row_ok = rows < eos
        g = tl.load(g_ptr + rows.to(tl.int64) * HV + hv, mask=row_ok, other=0.0).to(tl.float32)
        gam = tl.cumsum(g, axis=0)  # rows past the end add 0: they carry G of the last row
        gam_last = tl.sum(tl.where(ri == BT - 1, gam, 0.0), axis=0)

        # corrected values u = U - W S0
        w_rows = w_ptr + (rows[:, None] * HV + hv) * K + kk[None, :]
        w_lo = tl.load(w_rows, mask=row_ok[:, None] & (kk < K)[None, :], other=0.0)
        w_hi = tl.load(w_rows + BK2, mask=row_ok[:, None] & (kk + BK2 < K)[None, :], other=0.0)
        vh_off = (rows[:, None] * HV + hv) * V + vv[None, :]
        vh_mask = row_ok[:, None] & v_ok[None, :]
        ws = tl.dot(
            w_hi, s_hi, tl.dot(w_lo, s_lo, input_precision=DOT_PRECISION), input_precision=DOT_PRECISION
        )
        u = tl.load(u_ptr + vh_off, mask=vh_mask, other=0.0) - ws

        # O = (Q exp(G)) S0 + (tril(Q K^T * exp(G_t - G_s))) u
        q_lo, q_hi = _load_qk_halves(q_ptr, rows, row_ok, hk, H, kk, K, USE_L2NORM)
        k_lo, k_hi = _load_qk_halves(k_ptr, rows, row_ok, hk, H, kk, K, USE_L2NORM)
        q_lo, q_hi = q_lo * scale, q_hi * scale
        qk = tl.dot(q_lo, tl.trans(k_lo), input_precision=DOT_PRECISION)
        qk = tl.dot(q_hi, tl.trans(k_hi), qk, input_precision=DOT_PRECISION)
        # exp(G_t - G_s) on and below the diagonal; the argument is masked first so the upper half cannot overflow.
        decay = tl.where(lower_eq, tl.exp(tl.where(lower_eq, gam[:, None] - gam[None, :], 0.0)), 0.0)
        o = tl.dot(qk * decay, u, input_precision=DOT_PRECISION)
        q_decay = tl.exp(gam)[:, None]
        o = tl.dot(q_lo * q_decay, s_lo, o, input_precision=DOT_PRECISION)
        o = tl.dot(q_hi * q_decay, s_hi, o, input_precision=DOT_PRECISION)
        tl.store(o_ptr + vh_off, o.to(o_ptr.dtype.element_ty), mask=vh_mask)

        # S1 = exp(G_C) S0 + (K exp(G_C - G))^T u
        to_end = tl.exp(gam_last - gam)[:, None]
        s_lo = tl.dot(tl.trans(k_lo * to_end), u, s_lo * tl.exp(gam_last), input_precision=DOT_PRECISION)
        s_hi = tl.dot(tl.trans(k_hi * to_end), u, s_hi * tl.exp(gam_last), input_precision=DOT_PRECISION)

    if STORE_HT:
        tl.store(ht_ptr + state_off, s_lo, mask=lo_mask)
        tl.store(ht_ptr + state_off + BK2 * V, s_hi, mask=hi_mask)


@triton.jit
def _token_step(
    q_row, k_row, v_row, o_row, kk, k_ok, vv, v_ok, state, g, beta, scale, USE_L2NORM: tl.constexpr,
):  # fmt: skip
    """One token, one value head, its q/k/v/o rows given: decay and delta-update the [K, BV] state slice, store the
    output, return the state."""
    q = tl.load(q_row + kk, mask=k_ok, other=0.0).to(tl.float32)
    k = tl.load(k_row + kk, mask=k_ok, other=0.0).to(tl.float32)
    if USE_L2NORM:
        q = q * tl.math.rsqrt(tl.sum(q * q, axis=0) + 1e-6)
        k = k * tl.math.rsqrt(tl.sum(k * k, axis=0) + 1e-6)
    v = tl.load(v_row + vv, mask=v_ok, other=0.0).to(tl.float32)
    state = state * tl.exp(g)
    delta = beta * (v - tl.sum(k[:, None] * state, axis=0))
    state = state + k[:, None] * delta[None, :]
    o = tl.sum((q * scale)[:, None] * state, axis=0)
    tl.store(o_row + vv, o.to(o_row.dtype.element_ty), mask=v_ok)
    return state


@triton.jit
def _recurrent_gated_delta_rule_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    g_ptr,
    beta_ptr,
    o_ptr,
    h0_ptr,
    ht_ptr,
    cu_seqlens_ptr,
    scale,
    H: tl.constexpr,
    HV: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    USE_L2NORM: tl.constexpr,
    HAS_H0: tl.constexpr,
    STORE_HT: tl.constexpr,
):
    i_v = tl.program_id(0)
    i_nh = tl.program_id(1)
    n = i_nh // HV
    hv = i_nh % HV
    hk = hv // (HV // H)
    bos = tl.load(cu_seqlens_ptr + n).to(tl.int64)
    eos = tl.load(cu_seqlens_ptr + n + 1).to(tl.int64)

    kk = tl.arange(0, BK)
    k_ok = kk < K
    vv = i_v * BV + tl.arange(0, BV)
    v_ok = vv < V
    state_off = (n.to(tl.int64) * HV + hv) * K * V + kk[:, None] * V + vv[None, :]
    state_mask = k_ok[:, None] & v_ok[None, :]
    if HAS_H0:
        state = tl.load(h0_ptr + state_off, mask=state_mask, other=0.0).to(tl.float32)
    else:
        state = tl.zeros([BK, BV], dtype=tl.float32)

    for t in range(bos, eos):
        g = tl.load(g_ptr + t * HV + hv).to(tl.float32)
        beta = tl.load(beta_ptr + t * HV + hv).to(tl.float32)
        qk_row = (t * H + hk) * K
        vo_row = (t * HV + hv) * V
        state = _token_step(
            q_ptr + qk_row, k_ptr + qk_row, v_ptr + vo_row, o_ptr + vo_row,
            kk, k_ok, vv, v_ok, state, g, beta, scale, USE_L2NORM,
        )  # fmt: skip

    if STORE_HT:
        tl.store(ht_ptr + state_off, state, mask=state_mask)


@triton.jit
def _gated_decode_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    a_ptr,
    b_ptr,
    a_log_ptr,
    dt_bias_ptr,
    o_ptr,
    state_ptr,
    slot_ptr,
    scale,
    stride_q_t,
    stride_q_h,
    stride_k_t,
    stride_k_h,
    stride_v_t,
    stride_v_h,
    stride_a_t,
    stride_b_t,
    H: tl.constexpr,
    HV: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    USE_L2NORM: tl.constexpr,
    HAS_SLOTS: tl.constexpr,
):
    """One token of sequence n, value head hv, V block i_v: gates, l2norm, state update in place, output. q, k,
    v, a and b are read through their strides: the layer passes views of its projection and conv outputs."""
    i_v = tl.program_id(0)
    i_nh = tl.program_id(1)
    n = (i_nh // HV).to(tl.int64)
    hv = i_nh % HV
    hk = hv // (HV // H)
    row = n
    if HAS_SLOTS:
        row = tl.load(slot_ptr + n).to(tl.int64)
    kk = tl.arange(0, BK)
    k_ok = kk < K
    vv = i_v * BV + tl.arange(0, BV)
    v_ok = vv < V
    state_off = (row * HV + hv) * K * V + kk[:, None] * V + vv[None, :]
    state_mask = k_ok[:, None] & v_ok[None, :]
    state = tl.load(state_ptr + state_off, mask=state_mask, other=0.0)

    # Gates as `gates.deltanet_gates`: beta rounded to the model dtype, g in fp32 (softplus threshold 20).
    b = tl.load(b_ptr + n * stride_b_t + hv)
    beta = tl.sigmoid(b.to(tl.float32)).to(b.dtype).to(tl.float32)
    x = tl.load(a_ptr + n * stride_a_t + hv).to(tl.float32) + tl.load(dt_bias_ptr + hv).to(tl.float32)
    softplus = tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(tl.minimum(x, 20.0))))
    g = -tl.exp(tl.load(a_log_ptr + hv).to(tl.float32)) * softplus
    state = _token_step(
        q_ptr + n * stride_q_t + hk * stride_q_h, k_ptr + n * stride_k_t + hk * stride_k_h,
        v_ptr + n * stride_v_t + hv * stride_v_h, o_ptr + (n * HV + hv) * V,
        kk, k_ok, vv, v_ok, state, g, beta, scale, USE_L2NORM,
    )  # fmt: skip
    tl.store(state_ptr + state_off, state, mask=state_mask)


def gated_delta_rule_decode(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    state: torch.Tensor,
    slot_ids: torch.Tensor | None = None,
    scale: float | None = None,
    use_qk_l2norm_in_kernel: bool = True,
) -> torch.Tensor:
    """Same contract as `reference.gated_delta_rule_decode`, one launch (state: contiguous fp32, in place)."""
    if state.dtype != torch.float32 or not state.is_contiguous():
        raise ValueError("the decode state must be a contiguous fp32 tensor: it is updated in place")
    batch, heads_k, dim_k = q.shape
    heads_v, dim_v = v.shape[1], v.shape[2]
    if heads_v % heads_k:
        raise ValueError(f"value heads ({heads_v}) must be a multiple of key heads ({heads_k})")
    q, k, v, a, b = (unit_stride_rows(t) for t in (q, k, v, a, b))
    o = torch.empty(batch, heads_v, dim_v, dtype=v.dtype, device=v.device)
    if batch:
        block_v = min(triton.next_power_of_2(dim_v), 32)
        _gated_decode_kernel[(triton.cdiv(dim_v, block_v), batch * heads_v)](
            q, k, v, a, b, A_log, dt_bias, o, state, q if slot_ids is None else slot_ids.contiguous(),
            dim_k**-0.5 if scale is None else scale, *q.stride()[:2], *k.stride()[:2], *v.stride()[:2],
            a.stride(0), b.stride(0), H=heads_k, HV=heads_v, K=dim_k, V=dim_v, BK=triton.next_power_of_2(dim_k),
            BV=block_v, USE_L2NORM=use_qk_l2norm_in_kernel, HAS_SLOTS=slot_ids is not None, num_warps=4, num_stages=1,
        )  # fmt: skip
    return o


def _sequences(
    q: torch.Tensor, cu_seqlens: torch.Tensor | None, initial_state: torch.Tensor | None
) -> tuple[torch.Tensor, int]:
    batch, length = q.shape[:2]
    if cu_seqlens is None:
        cu_seqlens = torch.arange(0, batch + 1, device=q.device, dtype=torch.int32) * length
    elif batch != 1:
        raise ValueError("cu_seqlens needs packed input with batch size 1")
    n_seqs = cu_seqlens.numel() - 1
    if initial_state is not None and initial_state.shape[0] != n_seqs:
        raise ValueError(f"initial_state has {initial_state.shape[0]} sequences, expected {n_seqs}")
    return cu_seqlens, n_seqs


def _chunk_rows(cu_seqlens: torch.Tensor) -> torch.Tensor:
    """[chunks, 2] int32 (first row, sequence end) of every 64-row chunk of every sequence, for the parallel pass.
    Reads the sequence bounds on the host: prefill is never captured in a CUDA graph."""
    bounds = cu_seqlens.tolist()
    rows = [
        (start, end)
        for bos, end in zip(bounds[:-1], bounds[1:], strict=True)
        for start in range(bos, end, CHUNK_SIZE)
    ]
    return torch.tensor(rows, dtype=torch.int32).reshape(-1, 2).to(cu_seqlens.device)


def _check_heads(q: torch.Tensor, v: torch.Tensor) -> None:
    if v.shape[2] % q.shape[2]:
        raise ValueError(f"value heads ({v.shape[2]}) must be a multiple of key heads ({q.shape[2]})")


def chunk_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """q, k [B, T, H, K]; v [B, T, HV, V]; g, beta [B, T, HV]; initial_state [N, HV, K, V] fp32.

    Returns o [B, T, HV, V] in v.dtype and the final state [N, HV, K, V] fp32 (None unless requested).
    """
    _check_heads(q, v)
    cu_seqlens, n_seqs = _sequences(q, cu_seqlens, initial_state)
    heads_k, dim_k = q.shape[2], q.shape[3]
    heads_v, dim_v = v.shape[2], v.shape[3]
    o = torch.empty_like(v)
    final = torch.empty(n_seqs, heads_v, dim_k, dim_v, dtype=torch.float32, device=q.device)
    h0 = initial_state.float().contiguous() if initial_state is not None else final
    block_k = max(triton.next_power_of_2(dim_k), 16)
    block_v = min(max(triton.next_power_of_2(dim_v), 16), 32)
    if n_seqs and q.shape[1]:
        q, k, v, beta = q.contiguous(), k.contiguous(), v.contiguous(), beta.contiguous()
        g = g.float().contiguous()
        chunk_rows = _chunk_rows(cu_seqlens)
        # W [T, HV, K] and U [T, HV, V] in fp32: written once in parallel, read once by the sequential pass.
        w = torch.empty(*q.shape[:2], heads_v, dim_k, dtype=torch.float32, device=q.device)
        u = torch.empty(*v.shape, dtype=torch.float32, device=q.device)
        _chunk_wy_kernel[(chunk_rows.shape[0], heads_v)](
            k, v, g, beta, w, u, chunk_rows,
            H=heads_k, HV=heads_v, K=dim_k, V=dim_v, BK=block_k, BV=max(triton.next_power_of_2(dim_v), 16),
            BC=16, USE_L2NORM=use_qk_l2norm_in_kernel, P=_DOT_PRECISION, num_warps=8, num_stages=1,
        )  # fmt: skip
        grid = (triton.cdiv(dim_v, block_v), n_seqs * heads_v)
        _chunk_state_output_kernel[grid](
            q, k, g, w, u, o, h0, final, cu_seqlens, dim_k**-0.5 if scale is None else scale,
            H=heads_k, HV=heads_v, K=dim_k, V=dim_v, BT=CHUNK_SIZE, BK2=max(block_k, 32) // 2, BV=block_v,
            USE_L2NORM=use_qk_l2norm_in_kernel, HAS_H0=initial_state is not None, STORE_HT=output_final_state,
            DOT_PRECISION=_DOT_PRECISION, num_warps=8, num_stages=1,
        )  # fmt: skip
    elif output_final_state:
        final.copy_(h0) if initial_state is not None else final.zero_()
    return o, final if output_final_state else None


def fused_recurrent_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    inplace_final_state: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Same arguments and results as `chunk_gated_delta_rule`, computed token by token.

    `inplace_final_state=True` writes the final state into `initial_state` (which must then be a contiguous fp32
    tensor) and returns it as the final state: the decode cache path, with no extra copy.
    """
    _check_heads(q, v)
    cu_seqlens, n_seqs = _sequences(q, cu_seqlens, initial_state)
    heads_k, dim_k = q.shape[2], q.shape[3]
    heads_v, dim_v = v.shape[2], v.shape[3]
    if inplace_final_state:
        if initial_state is None:
            raise ValueError("inplace_final_state needs an initial_state to write into")
        if initial_state.dtype != torch.float32 or not initial_state.is_contiguous():
            raise ValueError("inplace_final_state needs a contiguous fp32 initial_state")
        h0 = final = initial_state
    else:
        final = torch.empty(n_seqs, heads_v, dim_k, dim_v, dtype=torch.float32, device=q.device)
        h0 = initial_state.float().contiguous() if initial_state is not None else final
    store = output_final_state or inplace_final_state
    o = torch.empty_like(v)
    block_k = triton.next_power_of_2(dim_k)
    block_v = min(triton.next_power_of_2(dim_v), 32)
    if n_seqs and q.shape[1]:
        grid = (triton.cdiv(dim_v, block_v), n_seqs * heads_v)
        _recurrent_gated_delta_rule_kernel[grid](
            q.contiguous(), k.contiguous(), v.contiguous(), g.float().contiguous(), beta.contiguous(), o, h0, final,
            cu_seqlens, dim_k**-0.5 if scale is None else scale,
            H=heads_k, HV=heads_v, K=dim_k, V=dim_v, BK=block_k, BV=block_v,
            USE_L2NORM=use_qk_l2norm_in_kernel, HAS_H0=initial_state is not None, STORE_HT=store,
            num_warps=4, num_stages=1,
        )  # fmt: skip
    elif store and not inplace_final_state:
        final.copy_(h0) if initial_state is not None else final.zero_()
    return o, final if store else None
