"""Gated delta rule (Gated DeltaNet's linear-attention recurrence) in plain torch, fp32 throughout.

Per value head, with state S [K, V] and a log-space decay g <= 0:
    S <- exp(g_t) * S
    S <- S + k_t (beta_t * (v_t - S^T k_t))^T
    o_t = S^T (scale * q_t)
Value head h reads key head h // (HV // H) (grouped value attention).

Two forms of the same function:
* `recurrent_gated_delta_rule`: the token loop (decode path, and the ground truth in tests);
* `chunk_gated_delta_rule`: chunks of 64 tokens. Inside a chunk the delta-rule corrections form a unit
  lower-triangular system (I + A) u = rhs, solved once per chunk (the WY / UT transform); the state then only
  advances chunk by chunk.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.kernels.gated_delta_rule.gates import deltanet_gates

CHUNK_SIZE = 64


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def _prepare(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None,
    use_qk_l2norm_in_kernel: bool,
) -> tuple[torch.Tensor, ...]:
    """fp32, optional l2norm, q scaled, key heads repeated to value heads; all as [B, HV, T, D]."""
    head_k, head_v = q.shape[2], v.shape[2]
    if head_v % head_k:
        raise ValueError(f"value heads ({head_v}) must be a multiple of key heads ({head_k})")
    q, k, v = q.float(), k.float(), v.float()
    if use_qk_l2norm_in_kernel:
        q, k = l2norm(q), l2norm(k)
    q = q * (q.shape[-1] ** -0.5 if scale is None else scale)
    group = head_v // head_k
    if group > 1:
        q, k = q.repeat_interleave(group, dim=2), k.repeat_interleave(group, dim=2)
    return (
        q.transpose(1, 2),
        k.transpose(1, 2),
        v.transpose(1, 2),
        g.float().transpose(1, 2),
        beta.float().transpose(1, 2),
    )


def _split_packed(
    tensors: tuple[torch.Tensor, ...], cu_seqlens: torch.Tensor
) -> list[tuple[torch.Tensor, ...]]:
    if tensors[0].shape[0] != 1:
        raise ValueError("cu_seqlens needs packed input with batch size 1")
    bounds = cu_seqlens.tolist()
    return [tuple(t[:, bounds[i] : bounds[i + 1]] for t in tensors) for i in range(len(bounds) - 1)]


def _run_packed(
    core,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None,
    initial_state: torch.Tensor | None,
    output_final_state: bool,
    use_qk_l2norm_in_kernel: bool,
    cu_seqlens: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run `core` on each packed sequence separately; outputs are concatenated back along time."""
    outs, states = [], []
    for i, (qi, ki, vi, gi, bi) in enumerate(_split_packed((q, k, v, g, beta), cu_seqlens)):
        h0 = None if initial_state is None else initial_state[i : i + 1]
        o, s = core(qi, ki, vi, gi, bi, scale, h0, output_final_state, use_qk_l2norm_in_kernel)
        outs.append(o)
        states.append(s)
    final = torch.cat(states, dim=0) if output_final_state else None
    return torch.cat(outs, dim=1), final


def recurrent_gated_delta_rule(
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
    """The token-by-token recurrence. Shapes as in `chunk_gated_delta_rule`.

    `inplace_final_state=True` writes the final state into `initial_state` and returns it (the decode cache path).
    """
    if _is_decode_step(q, initial_state, cu_seqlens):
        state = initial_state if inplace_final_state else initial_state.clone()
        o = _decode_step(q, k, v, g, beta, scale, state, use_qk_l2norm_in_kernel)
        return o, state if (inplace_final_state or output_final_state) else None
    if cu_seqlens is not None:
        o, final = _run_packed(
            _recurrent_batch,
            q,
            k,
            v,
            g,
            beta,
            scale,
            initial_state,
            output_final_state or inplace_final_state,
            use_qk_l2norm_in_kernel,
            cu_seqlens,
        )
    else:
        o, final = _recurrent_batch(
            q,
            k,
            v,
            g,
            beta,
            scale,
            initial_state,
            output_final_state or inplace_final_state,
            use_qk_l2norm_in_kernel,
        )
    if inplace_final_state:
        if initial_state is None:
            raise ValueError("inplace_final_state needs an initial_state to write into")
        initial_state.copy_(final)
        return o, initial_state
    return o, final if output_final_state else None


def _is_decode_step(q: torch.Tensor, state: torch.Tensor | None, cu_seqlens: torch.Tensor | None) -> bool:
    return (
        cu_seqlens is None
        and q.shape[1] == 1
        and state is not None
        and state.dtype == torch.float32
        and state.is_contiguous()
    )


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
    """One decode token per sequence, gates included: q, k [B, H, K]; v [B, HV, V]; a, b [B, HV] (the layer's
    projections); state fp32 [B, HV, K, V] updated in place, or with `slot_ids` [B] the per-slot cache
    [S, HV, K, V] updated at those rows. Returns o [B, HV, V] in v.dtype."""
    beta, g = deltanet_gates(a, b, A_log, dt_bias)
    rows = state if slot_ids is None else state.index_select(0, slot_ids)
    o = _decode_step(
        q[:, None], k[:, None], v[:, None], g[:, None], beta[:, None], scale, rows, use_qk_l2norm_in_kernel
    )
    if slot_ids is not None:
        state.index_copy_(0, slot_ids, rows)
    return o[:, 0]


def _decode_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None,
    state: torch.Tensor,
    use_qk_l2norm_in_kernel: bool,
) -> torch.Tensor:
    """One token of every sequence, `state` [B, HV, K, V] updated in place: the token loop's body for T == 1
    with the value heads of one key head viewed as a group (no repeated keys, no state copies), a handful of ops
    per layer for the whole batch."""
    batch, _, heads_k, dim_k = k.shape
    heads_v, dim_v = v.shape[2], v.shape[3]
    group = heads_v // heads_k
    if heads_v % heads_k:
        raise ValueError(f"value heads ({heads_v}) must be a multiple of key heads ({heads_k})")
    q, k = q[:, 0].float(), k[:, 0].float()  # [B, H, K]
    if use_qk_l2norm_in_kernel:
        q, k = l2norm(q), l2norm(k)
    q = q * (dim_k**-0.5 if scale is None else scale)
    grouped = state.view(batch, heads_k, group, dim_k, dim_v)
    grouped.mul_(g[:, 0].float().exp().view(batch, heads_k, group, 1, 1))
    predicted = k.view(batch, heads_k, 1, 1, dim_k) @ grouped  # [B, H, G, 1, V]
    v_t = v[:, 0].float().view(batch, heads_k, group, 1, dim_v)
    delta = beta[:, 0].float().view(batch, heads_k, group, 1, 1) * (v_t - predicted)
    grouped.add_(k.view(batch, heads_k, 1, dim_k, 1) * delta)
    out = q.view(batch, heads_k, 1, 1, dim_k) @ grouped  # [B, H, G, 1, V]
    return out.view(batch, 1, heads_v, dim_v).to(v.dtype)


def _recurrent_batch(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None,
    initial_state: torch.Tensor | None,
    output_final_state: bool,
    use_qk_l2norm_in_kernel: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    out_dtype = v.dtype
    q, k, v, g, beta = _prepare(q, k, v, g, beta, scale, use_qk_l2norm_in_kernel)
    batch, heads, length, dim_k = k.shape
    dim_v = v.shape[-1]
    state = (
        q.new_zeros(batch, heads, dim_k, dim_v) if initial_state is None else initial_state.float().clone()
    )
    out = q.new_empty(batch, heads, length, dim_v)
    decay = g.exp()
    for t in range(length):
        state = state * decay[:, :, t, None, None]
        k_t = k[:, :, t]
        predicted = torch.einsum("bhk,bhkv->bhv", k_t, state)
        delta = beta[:, :, t, None] * (v[:, :, t] - predicted)
        state = state + k_t.unsqueeze(-1) * delta.unsqueeze(-2)
        out[:, :, t] = torch.einsum("bhk,bhkv->bhv", q[:, :, t], state)
    return out.transpose(1, 2).to(out_dtype), state if output_final_state else None


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
    With cu_seqlens [N + 1] the N sequences are packed along T (B == 1) and run independently.
    """
    if cu_seqlens is not None:
        return _run_packed(
            _chunk_batch,
            q,
            k,
            v,
            g,
            beta,
            scale,
            initial_state,
            output_final_state,
            use_qk_l2norm_in_kernel,
            cu_seqlens,
        )
    return _chunk_batch(q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel)


def _chunk_batch(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None,
    initial_state: torch.Tensor | None,
    output_final_state: bool,
    use_qk_l2norm_in_kernel: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    out_dtype = v.dtype
    q, k, v, g, beta = _prepare(q, k, v, g, beta, scale, use_qk_l2norm_in_kernel)
    batch, heads, length, dim_k = k.shape
    dim_v = v.shape[-1]
    if length == 0:  # an empty packed sequence: no output, the state passes through unchanged
        state = q.new_zeros(batch, heads, dim_k, dim_v) if initial_state is None else initial_state.float()
        return v.transpose(1, 2).to(out_dtype), state.clone() if output_final_state else None
    size = CHUNK_SIZE
    pad = (-length) % size
    if pad:
        # Zero keys, values, beta and log-decay leave the state untouched, so padding is inert.
        q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
        g, beta = F.pad(g, (0, pad)), F.pad(beta, (0, pad))
    chunks = (length + pad) // size
    q, k, v = (t.reshape(batch, heads, chunks, size, -1) for t in (q, k, v))
    g, beta = g.reshape(batch, heads, chunks, size), beta.reshape(batch, heads, chunks, size)

    cum = g.cumsum(-1)  # G_t: log decay from the chunk start through token t
    lower = torch.tril(torch.ones(size, size, dtype=torch.bool, device=q.device), diagonal=-1)
    lower_or_diag = torch.tril(torch.ones(size, size, dtype=torch.bool, device=q.device))
    # decay[t, s] = exp(G_t - G_s) for s <= t; masked before exp so the upper triangle cannot overflow.
    gap = cum.unsqueeze(-1) - cum.unsqueeze(-2)
    decay = torch.where(lower_or_diag, gap, torch.full_like(gap, float("-inf"))).exp()

    # Within a chunk, u_t = beta_t (v_t - exp(G_t) k_t^T S_0 - sum_{s<t} exp(G_t - G_s) (k_t . k_s) u_s),
    # i.e. (I + A) u = beta v - beta exp(G) K S_0 with A strictly lower triangular.
    k_beta = k * beta.unsqueeze(-1)
    a = (k_beta @ k.transpose(-1, -2)) * decay * lower
    eye = torch.eye(size, dtype=q.dtype, device=q.device)
    system = eye + a
    u_base = torch.linalg.solve_triangular(system, v * beta.unsqueeze(-1), upper=False, unitriangular=True)
    w = torch.linalg.solve_triangular(
        system, k_beta * cum.exp().unsqueeze(-1), upper=False, unitriangular=True
    )  # u = u_base - w S_0

    attn = (q @ k.transpose(-1, -2)) * decay  # [.., t, s] = exp(G_t - G_s) q_t . k_s, s <= t
    q_decayed = q * cum.exp().unsqueeze(-1)
    k_to_end = k * (cum[..., -1:] - cum).exp().unsqueeze(-1)  # exp(G_last - G_s) k_s
    chunk_decay = cum[..., -1].exp()

    state = (
        q.new_zeros(batch, heads, dim_k, dim_v) if initial_state is None else initial_state.float().clone()
    )
    out = torch.empty_like(v)
    for c in range(chunks):
        u = u_base[:, :, c] - w[:, :, c] @ state
        out[:, :, c] = q_decayed[:, :, c] @ state + attn[:, :, c] @ u
        state = state * chunk_decay[:, :, c, None, None] + k_to_end[:, :, c].transpose(-1, -2) @ u
    out = out.reshape(batch, heads, chunks * size, dim_v)[:, :, :length]
    return out.transpose(1, 2).to(out_dtype), state if output_final_state else None
