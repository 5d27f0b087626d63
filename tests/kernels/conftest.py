"""Run the Triton kernels on CPU tensors through the Triton interpreter.

Triton reads TRITON_INTERPRET when a kernel is decorated (at module import) and again during launches. So the
kernel modules are imported here with the variable set, and an autouse fixture sets it for each test of this
folder only; in between it is restored, so the rest of the suite still sends CPU tensors to the torch references.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator

import pytest
import torch

from tests.conftest import triton_interpret_env

KERNEL_MODULES = [
    # the packed GEMV first: the MoE and matmul modules after it import its jit helpers
    "engine.kernels.quant_matmul.packed",
    "engine.kernels.quant_matmul.gemv",
    "engine.kernels.quant_moe.pairs",
    "engine.kernels.moe_align.triton",
    "engine.kernels.rms_norm.triton",
    "engine.kernels.gated_rms_norm.triton",
    "engine.kernels.router_topk.triton",
    "engine.kernels.causal_conv1d.triton",
    "engine.kernels.fused_moe.triton",
    "engine.kernels.gated_delta_rule.triton",
    "engine.kernels.qk_norm_rope.triton",
    "engine.kernels.decode_attention.triton",
    # the dequantizer first: the two kernels after it import its jit helpers
    "engine.kernels.dequantize.triton",
    "engine.kernels.quant_matmul.triton",
    "engine.kernels.quant_moe.triton",
]


def _import_interpreted() -> None:
    with triton_interpret_env():
        for name in KERNEL_MODULES:
            # A module imported earlier without the variable holds GPU-compiled kernels: decorate it again.
            importlib.reload(sys.modules[name]) if name in sys.modules else importlib.import_module(name)


_import_interpreted()


@pytest.fixture(autouse=True)
def triton_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.fixture
def poisoned_allocations(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every torch.empty / empty_like during the test comes back full of NaN (or a huge integer), so an output
    element a kernel forgets to write fails the comparison instead of passing on leftover zeros."""
    real_empty, real_empty_like = torch.empty, torch.empty_like

    def poison(t: torch.Tensor) -> torch.Tensor:
        if t.dtype.is_floating_point:
            return t.fill_(float("nan"))
        if t.dtype != torch.bool:
            return t.fill_(torch.iinfo(t.dtype).max)
        return t

    monkeypatch.setattr(torch, "empty", lambda *a, **k: poison(real_empty(*a, **k)))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **k: poison(real_empty_like(*a, **k)))
    yield
