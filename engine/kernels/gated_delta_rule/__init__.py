"""Gated delta rule: chunked (prefill) and recurrent (decode) forms, Triton on GPU, torch reference elsewhere."""

from __future__ import annotations

import torch

from engine.kernels.dispatch import use_triton
from engine.kernels.gated_delta_rule import reference


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
    impl = reference
    if use_triton(q, k, v):
        from engine.kernels.gated_delta_rule import triton as impl
    return impl.chunk_gated_delta_rule(
        q,
        k,
        v,
        g,
        beta,
        scale=scale,
        initial_state=initial_state,
        output_final_state=output_final_state,
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        cu_seqlens=cu_seqlens,
    )


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
    if use_triton(q, k, v):
        from engine.kernels.gated_delta_rule import triton as impl

        recurrent = impl.fused_recurrent_gated_delta_rule
    else:
        recurrent = reference.recurrent_gated_delta_rule
    return recurrent(
        q,
        k,
        v,
        g,
        beta,
        scale=scale,
        initial_state=initial_state,
        output_final_state=output_final_state,
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        cu_seqlens=cu_seqlens,
        inplace_final_state=inplace_final_state,
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
    """The decode step with the gates fused in, reading and writing the state cache at `slot_ids` (see
    `reference.gated_delta_rule_decode`): on a GPU one launch instead of seven gate kernels, two state gathers and
    two scatters."""
    impl = reference
    if use_triton(q, k, v):
        from engine.kernels.gated_delta_rule import triton as impl
    return impl.gated_delta_rule_decode(
        q,
        k,
        v,
        a,
        b,
        A_log,
        dt_bias,
        state,
        slot_ids,
        scale=scale,
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
    )


__all__ = ["chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule", "gated_delta_rule_decode"]
