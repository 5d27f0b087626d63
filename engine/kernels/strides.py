"""What a kernel that reads its inputs through their strides still needs from them.

The decode layers hand kernels views of a fused projection's output (`split` along the last dim): rows are not
contiguous, but each row is. Kernels take the row (and head) strides instead of a `.contiguous()` copy, one
launch fewer per view per layer; only a view whose last dim is itself strided is copied.
"""

from __future__ import annotations

import torch


def unit_stride_rows(x: torch.Tensor) -> torch.Tensor:
    """`x` itself when its last dim is contiguous (stride 1, or a single element), else a contiguous copy."""
    if x.shape[-1] <= 1 or x.stride(-1) == 1:
        return x
    return x.contiguous()
