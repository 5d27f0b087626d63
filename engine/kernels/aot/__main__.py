"""`python -m engine.kernels.aot`: compile every Triton kernel the engine launches for the real cards, print the
table, exit 1 on any failure (see `engine/kernels/aot/__init__.py`). After changing a kernel, refresh the
committed seed: `python -m engine.kernels.aot --write-seed bench/results/aot_compile_seed.json`."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from engine.kernels.aot.check import ARCHS, run_check
from engine.kernels.aot.report import markdown, summary_lines
from engine.kernels.aot.scenarios import FORMATS
from engine.kernels.aot.store import Store, write


def _default_cache() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "agentworld-mcp" / "aot-compile.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.kernels.aot", description=__doc__)
    parser.add_argument("--arch", type=int, nargs="+", default=list(ARCHS), help="compute capabilities")
    parser.add_argument("--format", nargs="+", default=list(FORMATS), choices=FORMATS, help="weight formats")
    parser.add_argument(
        "--scenario", default="", help="only the steps whose label holds this, e.g. 'prefill T2048'"
    )
    parser.add_argument("--kernel", nargs="+", default=[], help="only these, e.g. quant_matmul._gemm_kernel")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    parser.add_argument("--cache", type=Path, default=_default_cache(), help="JSON store of compiled stats")
    parser.add_argument("--no-cache", action="store_true", help="read and write no cache (seeds still read)")
    parser.add_argument("--seed", type=Path, action="append", default=[], help="read-only stores, read first")
    parser.add_argument("--write-seed", type=Path, help="write this run's stats (exactly its kernels) here")
    parser.add_argument("--table", type=Path, help="write the markdown table here")
    parser.add_argument("--quiet", action="store_true", help="print the summary and failures, not every row")
    args = parser.parse_args(argv)

    started = time.monotonic()
    store = Store(None if args.no_cache else args.cache, args.seed)
    say = (lambda line: None) if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    result = run_check(args.arch, args.format, args.jobs, store, say, args.scenario, args.kernel)
    if args.write_seed:
        write(args.write_seed, {k: v for k, v in result.stats.items() if not v.error})
    table = markdown(result)
    if args.table:
        args.table.write_text(table)
    print("\n".join(summary_lines(result)) if args.quiet else table)
    for failure in result.failures:
        print(f"FAIL {failure}", file=sys.stderr)
    print(f"{time.monotonic() - started:.0f} s, {len(result.failures)} failures", file=sys.stderr)
    return 1 if result.failures else 0


if __name__ == "__main__":
    sys.exit(main())
