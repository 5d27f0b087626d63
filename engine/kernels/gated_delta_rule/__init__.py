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


__all__ = ["chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule"]
