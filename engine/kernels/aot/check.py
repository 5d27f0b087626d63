"""The ahead-of-time check: capture every launch of every scenario for every card, compile each distinct kernel
once, and judge it against the card.

A kernel fails when it does not compile, when it needs more shared memory per block than the card allows
(`engine.kernels.arch.shared_memory_per_block`), or when it spills registers and some decode step launches it
(decode is latency-bound: a spill there is paid on every token). Prefill spills are reported, not failed. The
check also fails when a kernel the engine's code launches (`coverage.launch_sites`) was reached by no scenario.

Both phases run in worker processes (`spawn`: each imports the engine afresh, so Triton is never forked
mid-compile). Stats are looked up by `cache_key` in the `Store` (committed seeds and the local cache) before
anything is compiled.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass

from engine.kernels.aot.capture import KernelSpec, Occurrence, capture, scenario
from engine.kernels.aot.compile import KernelStats, cache_key, compile_spec
from engine.kernels.aot.coverage import launch_sites
from engine.kernels.aot.scenarios import FORMATS, op_scenarios, scenarios, triton_kernels
from engine.kernels.aot.store import Store
from engine.kernels.arch import shared_memory_per_block
from engine.quant.formats import GGMLType

ARCHS = (90, 89, 86, 120)


@dataclass
class Row:
    spec: KernelSpec
    stats: KernelStats
    occurrences: list[Occurrence]

    @property
    def decode(self) -> bool:
        return any(o.path == "decode" for o in self.occurrences)

    def problems(self) -> list[str]:
        limit = shared_memory_per_block(self.spec.arch)
        if self.stats.error:
            return [f"does not compile: {self.stats.error}"]
        found = []
        if self.stats.shared > limit:
            found.append(
                f"needs {self.stats.shared:,} B of shared memory, sm_{self.spec.arch} allows {limit:,}"
            )
        if self.decode and self.stats.spills:
            found.append(
                f"spills on the decode path ({self.stats.spill_stores} B stored, {self.stats.spill_loads} B loaded)"
            )
        return found


@dataclass
class CheckResult:
    rows: list[Row]
    uncovered: list[tuple[str, str]]
    compiled: int  # kernels compiled in this run (the rest came from the store)
    stats: dict[str, KernelStats]  # by cache key: what a seed of this run holds

    @property
    def failures(self) -> list[str]:
        found = [
            f"{label(r.spec)} sm_{r.spec.arch} [{shape(r.spec)}]: {p}"
            for r in self.rows
            for p in r.problems()
        ]
        found += [f"{m}.{n} is launched by the engine's code but by no scenario" for m, n in self.uncovered]
        if not self.rows:
            found.append("no kernel was launched by the chosen scenarios")
        return found


def label(spec: KernelSpec) -> str:
    """The kernel's module under engine.kernels, less a trailing `triton`, and its name: `quant_moe._gate_up_kernel`
    (quant_moe/triton.py), `quant_moe.pairs._gate_up_kernel` (quant_moe/pairs.py)."""
    parts = spec.module.removeprefix("engine.kernels.").split(".")
    if parts[-1] == "triton":
        parts.pop()
    return ".".join([*parts, spec.name])


def shape(spec: KernelSpec) -> str:
    """The compile-time constants (GGML type numbers by name), then the pointers that are not 16-byte aligned."""
    parts = []
    for name, value in spec.constants().items():
        if name.endswith("KIND") and isinstance(value, int):
            value = GGMLType(value).name
        parts.append(f"{name}={value}")
    aligned = {path[0] for path, attrs in spec.attrs if any(a[0] == "tt.divisibility" for a in attrs)}
    unaligned = [n for i, (n, t) in enumerate(spec.signature) if t.startswith("*") and i not in aligned]
    if unaligned:
        parts.append(f"unaligned: {','.join(unaligned)}")
    return " ".join(parts)


def _capture_task(fmt: str, arch: int, only: str) -> dict[KernelSpec, list[Occurrence]]:
    with triton_kernels(), capture(arch) as recording:
        steps = scenarios(fmt) if fmt != "ops" else op_scenarios()
        for step in steps:
            if only in step.label:
                with scenario(recording, f"{fmt} {step.label}", step.path):
                    step.run()
    return recording.launches


def run_check(
    archs: Iterable[int] = ARCHS,
    formats: Iterable[str] = FORMATS,
    jobs: int = 2,
    store: Store | None = None,
    progress: Callable[[str], None] = lambda line: None,
    scenarios_with: str = "",
    kernels: Iterable[str] = (),
) -> CheckResult:
    """Capture, compile what the store lacks (the results go into it), judge. `scenarios_with`: only the steps
    whose label holds it; `kernels`: only these (`package.kernel`, see `label`). Launch-site coverage is judged
    on the whole matrix only."""
    store = store or Store(None)
    formats, kernels = list(formats), set(kernels)
    whole = set(FORMATS) <= set(formats) and not scenarios_with and not kernels
    tasks = [(fmt, arch, scenarios_with) for arch in archs for fmt in (*formats, "ops")]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        launches: dict[KernelSpec, list[Occurrence]] = {}
        for found in pool.map(_capture_task, *zip(*tasks, strict=True)):
            for spec, occurrences in found.items():
                if not kernels or label(spec) in kernels:
                    launches.setdefault(spec, []).extend(occurrences)
        specs = list(launches)
        keys = {spec: cache_key(spec) for spec in specs}
        missing = [s for s in specs if store.get(keys[s]) is None]
        progress(f"{len(specs)} distinct kernels, {len(missing)} to compile")
        futures = {pool.submit(compile_spec, spec): spec for spec in missing}
        for done, future in enumerate(as_completed(futures), 1):
            spec = futures[future]
            store.put(keys[spec], future.result())
            progress(f"[{done}/{len(missing)}] {label(spec)} sm_{spec.arch}")
    store.flush()
    rows = [Row(s, store.get(keys[s]), launches[s]) for s in specs]
    rows.sort(key=lambda r: (-r.spec.arch, label(r.spec), shape(r.spec)))
    seen = {(s.module, s.name) for s in specs}
    uncovered = sorted(launch_sites() - seen) if whole else []
    return CheckResult(rows, uncovered, len(missing), {keys[s]: store.get(keys[s]) for s in specs})
