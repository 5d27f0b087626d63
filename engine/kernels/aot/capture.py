"""Record the Triton launches the engine's own code makes, without a GPU and without launching anything.

Inside `capture(arch)`, `JITFunction.run` (what `kernel[grid](*args)` calls) is replaced: instead of compiling for
the current device and launching, it binds the arguments exactly as Triton's runtime does for a launch, but with
the backend of `GPUTarget("cuda", arch, 32)`, and records what `triton.compile` would be given: the signature
(argument types), the compile-time constants, the alignment attributes of pointers and integers (a tensor's
alignment is its data pointer's; a meta tensor's is its storage offset's, as if the allocation were aligned, which
the caching allocator's are) and the options (warps, stages, ...). Launches that compile to the same thing are one
`KernelSpec`; each keeps the places (`Occurrence`) it was launched from. `target_arch(arch)` is set too, so
wrappers pick the launch configuration of that card.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.compiler import make_backend
from triton.runtime.jit import JITFunction, create_function_from_signature

from engine.kernels.arch import target_arch


@dataclass(frozen=True)
class KernelSpec:
    """Everything `triton.compile` needs for one kernel on one card; hashable (the dedupe key) and picklable
    (compiled in worker processes, which import the kernel again by module and name)."""

    module: str
    name: str
    arch: int
    signature: tuple[tuple[str, str], ...]
    constexprs: tuple[tuple[tuple[int, ...], Any], ...]
    attrs: tuple[tuple[tuple[int, ...], tuple[tuple[str, Any], ...]], ...]
    options: tuple[tuple[str, Any], ...]

    @property
    def kernel(self) -> str:
        return self.name

    def option(self, name: str) -> Any:
        return dict(self.options)[name]

    def constants(self) -> dict[str, Any]:
        """The constexpr arguments by name (what the table shows as the shape of the compiled kernel)."""
        names = [n for n, _ in self.signature]
        return {names[path[0]]: value for path, value in self.constexprs if len(path) == 1}


@dataclass(frozen=True)
class Occurrence:
    """Where a kernel was launched: the scenario (e.g. `Q4_K decode b8`), its path and the launch grid."""

    scenario: str
    path: str  # "decode" or "prefill"
    grid: tuple[int, ...]


@dataclass
class Recording:
    arch: int
    launches: dict[KernelSpec, list[Occurrence]] = field(default_factory=dict)
    scenario: str = ""
    path: str = ""

    def add(self, spec: KernelSpec, grid: tuple[int, ...]) -> None:
        self.launches.setdefault(spec, []).append(Occurrence(self.scenario, self.path, grid))


_active: list[Recording] = []
_launching_run = JITFunction.run
_binders: dict[tuple[int, int], tuple[Any, Any]] = {}
_specs: dict[tuple[int, int, str, str], KernelSpec] = {}


def _binder(fn: JITFunction, arch: int) -> tuple[Any, Any]:
    """(backend, binder) of `fn` for `arch`: what `JITFunction.create_binder` builds for the current device."""
    key = (id(fn), arch)
    if key not in _binders:
        backend = make_backend(GPUTarget("cuda", arch, 32))
        _binders[key] = backend, create_function_from_signature(fn.signature, fn.params, backend)
    return _binders[key]


def _run_kwargs(fn: JITFunction, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The options `JITFunction.run` adds before binding (those this Triton has)."""
    kwargs = dict(kwargs)
    kwargs["debug"] = kwargs.get("debug", fn.debug) or knobs.runtime.debug
    for name in ("instrumentation_mode", "fpsan_homomorphic_casts"):
        if hasattr(knobs.compilation, name):
            kwargs[name] = getattr(knobs.compilation, name)
    return kwargs


def _freeze(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def spec_of(
    fn: JITFunction, arch: int, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[KernelSpec, Any]:
    """The KernelSpec of launching `fn` with these arguments on `arch`, and the bound arguments (for the grid)."""
    backend, binder = _binder(fn, arch)
    kwargs = _run_kwargs(fn, kwargs)
    bound_args, specialization, options = binder(*args, **kwargs)
    # What the runtime keys its compiled kernels by (`compute_cache_key`): equal keys compile to one kernel.
    key = (id(fn), arch, str(specialization), str(options))
    spec = _specs.get(key)
    if spec is None:
        packed = fn._pack_args(backend, kwargs, bound_args, specialization, options)
        spec = _specs[key] = _spec(fn, arch, *packed)
    return spec, bound_args


def _spec(
    fn: JITFunction, arch: int, options: Any, signature: dict, constexprs: dict, attrs: dict
) -> KernelSpec:
    return KernelSpec(
        module=fn.module,
        name=fn.fn.__qualname__,
        arch=arch,
        signature=tuple(signature.items()),
        constexprs=tuple(sorted((path, _freeze(v)) for path, v in constexprs.items())),
        attrs=tuple(sorted((path, _freeze(v)) for path, v in attrs.items())),
        options=tuple(sorted((k, _freeze(v)) for k, v in options.__dict__.items())),
    )


def _as_device_tensor(arg: Any) -> Any:
    """A host tensor (batch metadata with real values) as the meta tensor of its shape, strides and storage
    offset: on a GPU it is a device tensor, whose allocation is aligned (a host one's alignment is malloc's)."""
    if not isinstance(arg, torch.Tensor) or arg.device.type == "meta":
        return arg
    storage = torch.empty(
        arg.untyped_storage().nbytes() // arg.element_size(), dtype=arg.dtype, device="meta"
    )
    return storage.as_strided(arg.shape, arg.stride(), arg.storage_offset())


def _recording_run(self: JITFunction, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> None:
    recording = _active[-1]
    args = tuple(_as_device_tensor(a) for a in args)
    kwargs = {k: _as_device_tensor(v) for k, v in kwargs.items()}
    spec, bound_args = spec_of(self, recording.arch, args, kwargs)
    grid = grid(bound_args) if callable(grid) else grid
    recording.add(spec, tuple(int(g) for g in grid))


@contextmanager
def capture(arch: int) -> Iterator[Recording]:
    """Record (and do not launch) every Triton launch inside the block, configured and bound for `arch`."""
    recording = Recording(arch)
    _active.append(recording)
    JITFunction.run = _recording_run  # type: ignore[method-assign]
    try:
        with target_arch(arch):
            yield recording
    finally:
        _active.pop()
        if not _active:
            JITFunction.run = _launching_run  # type: ignore[method-assign]


@contextmanager
def scenario(recording: Recording, label: str, path: str) -> Iterator[None]:
    """Label the launches made inside the block."""
    recording.scenario, recording.path = label, path
    try:
        yield
    finally:
        recording.scenario, recording.path = "", ""
