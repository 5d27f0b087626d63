"""The ahead-of-time check's table (markdown): a summary per card, the failures, and one row per distinct compiled
kernel."""

from __future__ import annotations

from collections import defaultdict

import triton

from engine.kernels.aot.check import CheckResult, Row, label, shape
from engine.kernels.aot.compile import LOAD_WIDTHS
from engine.kernels.arch import shared_memory_per_block

_HEADER = (
    "| kernel | shape (constexprs) | first launched by (grid) | launches | path | warps | stages | shared B | regs "
    "| spills st/ld B | " + " | ".join(f"ld.global {w}" for w in LOAD_WIDTHS) + " | status |"
)


def _row(row: Row) -> str:
    spec, stats = row.spec, row.stats
    first = row.occurrences[0]
    paths = "+".join(sorted({o.path for o in row.occurrences}))
    status = "; ".join(row.problems()) or "ok"
    loads = " | ".join(str(stats.loads.get(w, 0)) for w in LOAD_WIDTHS)
    return (
        f"| {label(spec)} | {shape(spec)} | {first.scenario} {first.grid} | {len(row.occurrences)} | {paths} "
        f"| {spec.option('num_warps')} | {spec.option('num_stages')} | {stats.shared:,} | {stats.registers} "
        f"| {stats.spill_stores}/{stats.spill_loads} | {loads} | {status} |"
    )


def summary_lines(result: CheckResult) -> list[str]:
    by_arch: dict[int, list[Row]] = defaultdict(list)
    for row in result.rows:
        by_arch[row.spec.arch].append(row)
    lines = [
        f"triton {triton.__version__}; {len(result.rows)} distinct kernels compiled ({result.compiled} in this run, "
        "the rest from the cache)",
        "",
        "| arch | shared limit B | kernels | distinct functions | max shared B (kernel) | decode spills | prefill spills "
        "| failures |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for arch, rows in sorted(by_arch.items(), reverse=True):
        ok = [r for r in rows if not r.stats.error]
        top = max(ok, key=lambda r: r.stats.shared, default=None)
        most = f"{top.stats.shared:,} ({label(top.spec)})" if top else "-"
        decode = sum(1 for r in ok if r.decode and r.stats.spills)
        prefill = sorted(
            {f"{label(r.spec)} {r.stats.spill_stores}/{r.stats.spill_loads}" for r in ok if r.stats.spills}
            - {f"{label(r.spec)} {r.stats.spill_stores}/{r.stats.spill_loads}" for r in ok if r.decode}
        )
        failed = sum(1 for r in rows if r.problems())
        lines.append(
            f"| sm_{arch} | {shared_memory_per_block(arch):,} | {len(rows)} | {len({label(r.spec) for r in rows})} "
            f"| {most} | {decode} | {', '.join(prefill) or 'none'} | {failed} |"
        )
    return lines


def markdown(result: CheckResult) -> str:
    lines = ["# Ahead-of-time compile check (`python -m engine.kernels.aot`)", "", *summary_lines(result), ""]
    failures = result.failures
    lines += ["## Failures", ""] + ([f"- {f}" for f in failures] or ["none"]) + [""]
    lines += ["## Kernels", "", _HEADER, "|" + " --- |" * (_HEADER.count("|") - 1)]
    lines += [_row(r) for r in result.rows]
    return "\n".join(lines) + "\n"
