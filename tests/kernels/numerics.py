"""Error measures for kernel tests, as flash-linear-attention's tests use them."""

from __future__ import annotations

import torch


def relative_rms_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """RMS(actual - expected) / RMS(expected), in fp64; NaN anywhere gives inf."""
    a, e = actual.double(), expected.double()
    if not torch.isfinite(a).all():
        return float("inf")
    return ((a - e).pow(2).mean().sqrt() / e.pow(2).mean().sqrt().clamp_min(1e-30)).item()


def assert_close(actual: torch.Tensor, expected: torch.Tensor, ratio: float, what: str = "") -> None:
    """Pass if every element is within 1e-6, else if the relative RMS error is below `ratio` (fla's rule)."""
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    if torch.isfinite(actual).all() and (actual.double() - expected.double()).abs().max().item() <= 1e-6:
        return
    err = relative_rms_error(actual, expected)
    assert err < ratio, f"{what}: relative RMS error {err:.3e} >= {ratio:.1e}"
