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
def _load_sub_chunk(
    k_ptr, v_ptr, g_ptr, beta_ptr, first_row, eos, hk, hv,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    USE_L2NORM: tl.constexpr,
):  # fmt: skip
    """Rows first_row .. first_row + 15 of a chunk: l2-normed keys, values, log-decays and betas (zeros past the
    sequence end)."""
    rows = first_row + tl.arange(0, 16)  # BC
    row_ok = rows < eos
    kk = tl.arange(0, BK)
    vv = tl.arange(0, BV)
    k = _load_qk_rows(k_ptr, rows, row_ok, hk, H, kk, kk < K, K, USE_L2NORM)
    v = tl.load(
        v_ptr + (rows.to(tl.int64)[:, None] * HV + hv) * V + vv[None, :],
        mask=row_ok[:, None] & (vv < V)[None, :],
        other=0.0,
    ).to(tl.float32)
    g = tl.load(g_ptr + rows.to(tl.int64) * HV + hv, mask=row_ok, other=0.0).to(tl.float32)
    beta = tl.load(beta_ptr + rows.to(tl.int64) * HV + hv, mask=row_ok, other=0.0).to(tl.float32)
    return k, v, g, beta


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
    T_ij = -T_ii sum_{j <= m < i} A_im T_mj)."""
    i_c = tl.program_id(0)
    hv = tl.program_id(1)
    hk = hv // (HV // H)
    t0 = tl.load(chunk_rows_ptr + 2 * i_c).to(tl.int32)
    eos = tl.load(chunk_rows_ptr + 2 * i_c + 1).to(tl.int32)
    # fmt: off
    k0, v0, g0, b0 = _load_sub_chunk(k_ptr, v_ptr, g_ptr, beta_ptr, t0, eos, hk, hv, H, HV, K, V, BK, BV, USE_L2NORM)
    k1, v1, g1, b1 = _load_sub_chunk(k_ptr, v_ptr, g_ptr, beta_ptr, t0 + BC, eos, hk, hv, H, HV, K, V, BK, BV, USE_L2NORM)
    k2, v2, g2, b2 = _load_sub_chunk(k_ptr, v_ptr, g_ptr, beta_ptr, t0 + 2 * BC, eos, hk, hv, H, HV, K, V, BK, BV, USE_L2NORM)
    k3, v3, g3, b3 = _load_sub_chunk(k_ptr, v_ptr, g_ptr, beta_ptr, t0 + 3 * BC, eos, hk, hv, H, HV, K, V, BK, BV, USE_L2NORM)
    # Chunk-local cumulative log-decay G, slice by slice.
    gam0 = tl.cumsum(g0, axis=0)
    gam1 = tl.cumsum(g1, axis=0) + tl.sum(g0, axis=0)
    gam2 = tl.cumsum(g2, axis=0) + tl.sum(g0, axis=0) + tl.sum(g1, axis=0)
    gam3 = tl.cumsum(g3, axis=0) + tl.sum(g0, axis=0) + tl.sum(g1, axis=0) + tl.sum(g2, axis=0)
    kb0, kb1, kb2, kb3 = k0 * b0[:, None], k1 * b1[:, None], k2 * b2[:, None], k3 * b3[:, None]

    t00, t11 = _diag_inverse(kb0, k0, gam0, BC, P), _diag_inverse(kb1, k1, gam1, BC, P)
    t22, t33 = _diag_inverse(kb2, k2, gam2, BC, P), _diag_inverse(kb3, k3, gam3, BC, P)
    a10, a20, a21 = _block_a(kb1, k0, gam1, gam0, P), _block_a(kb2, k0, gam2, gam0, P), _block_a(kb2, k1, gam2, gam1, P)
    a30, a31, a32 = _block_a(kb3, k0, gam3, gam0, P), _block_a(kb3, k1, gam3, gam1, P), _block_a(kb3, k2, gam3, gam2, P)
    t10 = -_dot(t11, _dot(a10, t00, P), P)
    t21 = -_dot(t22, _dot(a21, t11, P), P)
    t20 = -_dot(t22, _dot(a20, t00, P) + _dot(a21, t10, P), P)
    t32 = -_dot(t33, _dot(a32, t22, P), P)
    t31 = -_dot(t33, _dot(a31, t11, P) + _dot(a32, t21, P), P)
    t30 = -_dot(t33, _dot(a30, t00, P) + _dot(a31, t10, P) + _dot(a32, t20, P), P)

    kg0, kg1 = kb0 * tl.exp(gam0)[:, None], kb1 * tl.exp(gam1)[:, None]
    kg2, kg3 = kb2 * tl.exp(gam2)[:, None], kb3 * tl.exp(gam3)[:, None]
    vb0, vb1, vb2, vb3 = v0 * b0[:, None], v1 * b1[:, None], v2 * b2[:, None], v3 * b3[:, None]
    w0 = _dot(t00, kg0, P)
    w1 = _dot(t10, kg0, P) + _dot(t11, kg1, P)
    w2 = _dot(t20, kg0, P) + _dot(t21, kg1, P) + _dot(t22, kg2, P)
    w3 = _dot(t30, kg0, P) + _dot(t31, kg1, P) + _dot(t32, kg2, P) + _dot(t33, kg3, P)
    u0 = _dot(t00, vb0, P)
    u1 = _dot(t10, vb0, P) + _dot(t11, vb1, P)
    u2 = _dot(t20, vb0, P) + _dot(t21, vb1, P) + _dot(t22, vb2, P)
    u3 = _dot(t30, vb0, P) + _dot(t31, vb1, P) + _dot(t32, vb2, P) + _dot(t33, vb3, P)
    # fmt: on
    kk = tl.arange(0, BK)
    k_ok = kk < K
    vv = tl.arange(0, BV)
    v_ok = vv < V
    rc = tl.arange(0, BC)
    _store_rows(w_ptr, w0, t0 + rc, eos, hv, HV, kk, k_ok, K)
    _store_rows(w_ptr, w1, t0 + BC + rc, eos, hv, HV, kk, k_ok, K)
    _store_rows(w_ptr, w2, t0 + 2 * BC + rc, eos, hv, HV, kk, k_ok, K)
    _store_rows(w_ptr, w3, t0 + 3 * BC + rc, eos, hv, HV, kk, k_ok, K)
    _store_rows(u_ptr, u0, t0 + rc, eos, hv, HV, vv, v_ok, V)
    _store_rows(u_ptr, u1, t0 + BC + rc, eos, hv, HV, vv, v_ok, V)
    _store_rows(u_ptr, u2, t0 + 2 * BC + rc, eos, hv, HV, vv, v_ok, V)
    _store_rows(u_ptr, u3, t0 + 3 * BC + rc, eos, hv, HV, vv, v_ok, V)


@triton.jit
def _store_rows(ptr, x, rows, eos, head, n_heads, cols, col_ok, DIM: tl.constexpr):
    tl.store(
        ptr + (rows.to(tl.int64)[:, None] * n_heads + head) * DIM + cols[None, :],
        x,
        mask=(rows < eos)[:, None] & col_ok[None, :],
    )


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
    BK: tl.constexpr,
    BV: tl.constexpr,
    USE_L2NORM: tl.constexpr,
    HAS_H0: tl.constexpr,
    STORE_HT: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """One program per (sequence, value head, V block), walking its chunks in order: the state recurrence and
    the outputs, with W and U from `_chunk_wy_kernel`."""
    i_v = tl.program_id(0)
    i_nh = tl.program_id(1)
    n = i_nh // HV
    hv = i_nh % HV
    hk = hv // (HV // H)
    bos = tl.load(cu_seqlens_ptr + n).to(tl.int32)
    eos = tl.load(cu_seqlens_ptr + n + 1).to(tl.int32)

    kk = tl.arange(0, BK)
    k_ok = kk < K
    vv = i_v * BV + tl.arange(0, BV)
    v_ok = vv < V
    ri = tl.arange(0, BT)
    lower_eq = ri[:, None] >= ri[None, :]

    state_off = (n.to(tl.int64) * HV + hv) * K * V + kk[:, None] * V + vv[None, :]
    state_mask = k_ok[:, None] & v_ok[None, :]
    if HAS_H0:
        state = tl.load(h0_ptr + state_off, mask=state_mask, other=0.0).to(tl.float32)
    else:
        state = tl.zeros([BK, BV], dtype=tl.float32)

    for t0 in range(bos, eos, BT):
        rows = t0 + ri
        row_ok = rows < eos
        q = _load_qk_rows(q_ptr, rows, row_ok, hk, H, kk, k_ok, K, USE_L2NORM) * scale
        k = _load_qk_rows(k_ptr, rows, row_ok, hk, H, kk, k_ok, K, USE_L2NORM)
        w = tl.load(
            w_ptr + (rows.to(tl.int64)[:, None] * HV + hv) * K + kk[None, :],
            mask=row_ok[:, None] & k_ok[None, :],
            other=0.0,
        )
        vh_off = (rows.to(tl.int64)[:, None] * HV + hv) * V + vv[None, :]
        vh_mask = row_ok[:, None] & v_ok[None, :]
        u = tl.load(u_ptr + vh_off, mask=vh_mask, other=0.0)
        g = tl.load(g_ptr + rows.to(tl.int64) * HV + hv, mask=row_ok, other=0.0).to(tl.float32)

        gam = tl.cumsum(g, axis=0)  # rows past the end add 0: they carry G of the last row
        gam_last = tl.sum(tl.where(ri == BT - 1, gam, 0.0), axis=0)
        # exp(G_t - G_s) on and below the diagonal; the argument is masked first so the upper half cannot overflow.
        decay = tl.where(lower_eq, tl.exp(tl.where(lower_eq, gam[:, None] - gam[None, :], 0.0)), 0.0)

        u = u - tl.dot(w, state, input_precision=DOT_PRECISION)  # corrected values u = U - W S0
        attn = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * decay
        o = tl.dot(q * tl.exp(gam)[:, None], state, input_precision=DOT_PRECISION)
        o = o + tl.dot(attn, u, input_precision=DOT_PRECISION)
        tl.store(o_ptr + vh_off, o.to(o_ptr.dtype.element_ty), mask=vh_mask)

        k_to_end = k * tl.exp(gam_last - gam)[:, None]
        state = state * tl.exp(gam_last) + tl.dot(tl.trans(k_to_end), u, input_precision=DOT_PRECISION)

    if STORE_HT:
        tl.store(ht_ptr + state_off, state, mask=state_mask)


@triton.jit
def _token_step(
    q_ptr, k_ptr, v_ptr, o_ptr, t, hk, hv, kk, k_ok, vv, v_ok, state, g, beta, scale,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, USE_L2NORM: tl.constexpr,
):  # fmt: skip
    """Token t, value head hv: decay and delta-update the [K, BV] state slice, store the output, return the state."""
    q = tl.load(q_ptr + (t * H + hk) * K + kk, mask=k_ok, other=0.0).to(tl.float32)
    k = tl.load(k_ptr + (t * H + hk) * K + kk, mask=k_ok, other=0.0).to(tl.float32)
    if USE_L2NORM:
        q = q * tl.math.rsqrt(tl.sum(q * q, axis=0) + 1e-6)
        k = k * tl.math.rsqrt(tl.sum(k * k, axis=0) + 1e-6)
    v = tl.load(v_ptr + (t * HV + hv) * V + vv, mask=v_ok, other=0.0).to(tl.float32)
    state = state * tl.exp(g)
    delta = beta * (v - tl.sum(k[:, None] * state, axis=0))
    state = state + k[:, None] * delta[None, :]
    o = tl.sum((q * scale)[:, None] * state, axis=0)
    tl.store(o_ptr + (t * HV + hv) * V + vv, o.to(o_ptr.dtype.element_ty), mask=v_ok)
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
        state = _token_step(
            q_ptr,
            k_ptr,
            v_ptr,
            o_ptr,
            t,
            hk,
            hv,
            kk,
            k_ok,
            vv,
            v_ok,
            state,
            g,
            beta,
            scale,
            H,
            HV,
            K,
            V,
            USE_L2NORM,
        )

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
    H: tl.constexpr,
    HV: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    USE_L2NORM: tl.constexpr,
    HAS_SLOTS: tl.constexpr,
):
    """One token of sequence n, value head hv, V block i_v: gates, l2norm, state update in place, output."""
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
    b = tl.load(b_ptr + n * HV + hv)
    beta = tl.sigmoid(b.to(tl.float32)).to(b.dtype).to(tl.float32)
    x = tl.load(a_ptr + n * HV + hv).to(tl.float32) + tl.load(dt_bias_ptr + hv).to(tl.float32)
    softplus = tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(tl.minimum(x, 20.0))))
    g = -tl.exp(tl.load(a_log_ptr + hv).to(tl.float32)) * softplus
    state = _token_step(
        q_ptr,
        k_ptr,
        v_ptr,
        o_ptr,
        n,
        hk,
        hv,
        kk,
        k_ok,
        vv,
        v_ok,
        state,
        g,
        beta,
        scale,
        H,
        HV,
        K,
        V,
        USE_L2NORM,
    )
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
    o = torch.empty_like(v)
    if batch:
        block_v = min(triton.next_power_of_2(dim_v), 32)
        _gated_decode_kernel[(triton.cdiv(dim_v, block_v), batch * heads_v)](
            q.contiguous(), k.contiguous(), v.contiguous(), a.contiguous(), b.contiguous(), A_log, dt_bias, o,
            state, q if slot_ids is None else slot_ids.contiguous(), dim_k**-0.5 if scale is None else scale,
            H=heads_k, HV=heads_v, K=dim_k, V=dim_v, BK=triton.next_power_of_2(dim_k), BV=block_v,
            USE_L2NORM=use_qk_l2norm_in_kernel, HAS_SLOTS=slot_ids is not None, num_warps=4, num_stages=1,
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
            BC=16, USE_L2NORM=use_qk_l2norm_in_kernel, P=_DOT_PRECISION, num_warps=4, num_stages=1,
        )  # fmt: skip
        grid = (triton.cdiv(dim_v, block_v), n_seqs * heads_v)
        _chunk_state_output_kernel[grid](
            q, k, g, w, u, o, h0, final, cu_seqlens, dim_k**-0.5 if scale is None else scale,
            H=heads_k, HV=heads_v, K=dim_k, V=dim_v, BT=CHUNK_SIZE, BK=block_k, BV=block_v,
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
