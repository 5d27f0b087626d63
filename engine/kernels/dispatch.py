"""Pick the implementation of a kernel op: the Triton kernel or the plain-torch reference.

`AW_KERNELS=torch|triton` forces one. Otherwise CUDA tensors use Triton, and CPU tensors use Triton only under
`TRITON_INTERPRET=1` (the interpreter is how the Triton kernels are tested on a GPU-less machine).
"""

from __future__ import annotations

import os

import torch

_FORCE_VALUES = ("torch", "triton")


def use_triton(*tensors: torch.Tensor | None) -> bool:
    forced = os.environ.get("AW_KERNELS", "").strip().lower()
    if forced:
        if forced not in _FORCE_VALUES:
            raise ValueError(f"AW_KERNELS must be one of {_FORCE_VALUES}, got {forced!r}")
        return forced == "triton"
    # Called once per op per layer on every step: a plain loop, no sets or device objects.
    for tensor in tensors:
        if tensor is not None and tensor.is_cuda:
            return True
    return os.environ.get("TRITON_INTERPRET", "") == "1"
