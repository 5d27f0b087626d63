"""Depthwise causal conv1d + SiLU over time, with a rolling state of the last W pre-conv inputs per sequence."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def causal_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    conv_state: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """x [B, T, D], weight [D, W], conv_state [N, D, W] -> (y [B, T, D], new_conv_state [N, D, W]).

    y[t, c] = silu(sum_j weight[c, j] * x[t - W + 1 + j, c]) with zero left padding, or the previous inputs taken
    from conv_state. With cu_seqlens (B == 1) the N packed sequences are convolved independently.
    """
    if cu_seqlens is None:
        return _conv_batch(x, weight, conv_state)
    if x.shape[0] != 1:
        raise ValueError("cu_seqlens needs packed input with batch size 1")
    bounds = cu_seqlens.tolist()
    ys, states = [], []
    for i in range(len(bounds) - 1):
        seq = x[:, bounds[i] : bounds[i + 1]]
        state = None if conv_state is None else conv_state[i : i + 1]
        y, new_state = _conv_batch(seq, weight, state)
        ys.append(y)
        states.append(new_state)
    return torch.cat(ys, dim=1), torch.cat(states, dim=0)


def _conv_batch(
    x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    batch, length, dim = x.shape
    width = weight.shape[1]
    xt = x.transpose(1, 2)  # [B, D, T]
    if conv_state is None:
        history = xt.new_zeros(batch, dim, width)
    else:
        history = conv_state.to(x.dtype)
    full = torch.cat([history, xt], dim=-1)  # [B, D, W + T]
    if length == 0:  # an empty packed sequence: no output, the state passes through unchanged
        return x.new_empty(batch, 0, dim), full[..., -width:].contiguous()
    # Only the last W - 1 history columns reach the first output; the conv without padding over
    # history[1:] + x yields exactly T outputs.
    y = F.conv1d(full[..., 1:], weight.unsqueeze(1).to(x.dtype), groups=dim)
    y = F.silu(y).transpose(1, 2).to(x.dtype)
    new_state = full[..., -width:].contiguous()
    return y, new_state


def causal_conv1d_update(
    x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor, slot_ids: torch.Tensor | None = None
) -> torch.Tensor:
    """One decode step. x [B, D]; conv_state [B, D, W] is shifted left and x appended, in place.
    With `slot_ids` [B], conv_state is the per-slot cache [S, D, W] and row b of the batch is slot slot_ids[b]."""
    if slot_ids is not None:
        rows = conv_state.index_select(0, slot_ids)
        y = causal_conv1d_update(x, weight, rows)
        conv_state.index_copy_(0, slot_ids, rows)
        return y
    window = torch.cat([conv_state[..., 1:], x.unsqueeze(-1).to(conv_state.dtype)], dim=-1)
    conv_state.copy_(window)
    y = (window.to(x.dtype) * weight.to(x.dtype)).sum(-1)
    return F.silu(y).to(x.dtype)
