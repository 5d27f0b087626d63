"""How a kernel op picks its implementation: the Triton kernel or the plain-torch reference.

An op is its reference function, decorated: `rms_norm = kernel("engine.kernels.rms_norm.triton")(reference.rms_norm)`
keeps the reference's name, signature and docstring, and sends each call to the same-named function of the Triton
module when `use_triton` says so. `AW_KERNELS=torch|triton` forces one. Otherwise CUDA tensors use Triton, and CPU
tensors use Triton only under `TRITON_INTERPRET=1` (the interpreter is how the Triton kernels are tested on a
GPU-less machine). Switches are read at call time (`engine/settings.py`).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from engine import settings

F = TypeVar("F", bound=Callable[..., Any])


def use_triton(*args: object) -> bool:
    forced = settings.forced_kernels()
    if forced:
        return forced == "triton"
    # Called once per op per layer on every step: a plain loop, no sets or device objects.
    for arg in args:
        if isinstance(arg, torch.Tensor) and arg.is_cuda:
            return True
    return settings.triton_interpret()


def kernel(
    triton_module: str,
    *,
    name: str | None = None,
    cpu_fast_path: tuple[Callable[..., bool], Callable[..., Any]] | None = None,
) -> Callable[[F], F]:
    """Make an op of a reference function. `name`: the Triton module's function, when it differs from the
    reference's. `cpu_fast_path`: (applies(*args), implementation) tried before the reference off the Triton path.
    The module is looked up on every call (a dict hit), so a test that reloads it under the interpreter is seen."""

    def wrap(reference: F) -> F:
        attr = name or reference.__name__

        @functools.wraps(reference)
        def op(*args: Any, **kwargs: Any) -> Any:
            if use_triton(*args):
                return getattr(importlib.import_module(triton_module), attr)(*args, **kwargs)
            if cpu_fast_path is not None and cpu_fast_path[0](*args, **kwargs):
                return cpu_fast_path[1](*args, **kwargs)
            return reference(*args, **kwargs)

        op.reference = reference  # type: ignore[attr-defined]
        return op  # type: ignore[return-value]

    return wrap
