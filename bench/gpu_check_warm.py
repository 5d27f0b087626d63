"""gpu_check part, after the smoke test: fill the Triton cache from the ahead-of-time compile
(`python -m engine.kernels.aot`, engine/kernels/aot/) for this device's arch and Triton, on all its CPU cores, so
the parts after it find most kernels compiled instead of compiling them one by one on first launch. Its row says
how many kernels it added; each later part's "(triton cache)" row says how many it still compiled itself."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import torch
from gpu_check_setup import Context, triton_cache_entries

FORMATS = (
    "bf16",
    "Q4_K_M",
)  # what the decode, loop and profile parts run; the per-type kernels compile there


def warm_triton_cache(ctx: Context) -> None:
    if ctx.dry_run:
        ctx.rows.skip("Triton cache from the AOT compile", "dry run: the interpreter compiles nothing")
        return
    major, minor = torch.cuda.get_device_capability(ctx.device)
    arch = 10 * major + minor
    jobs = os.cpu_count() or 1
    command = [sys.executable, "-m", "engine.kernels.aot", "--arch", str(arch), "--format", *FORMATS]
    command += ["--jobs", str(jobs), "--no-cache", "--quiet"]
    before, start = triton_cache_entries() or 0, time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=max(5.0, ctx.remaining() - 5))
    except subprocess.TimeoutExpired as exc:
        added = (triton_cache_entries() or 0) - before
        ctx.rows.check(
            "Triton cache from the AOT compile", False, f"stopped at the part's budget: {added} kernels added"
        )
        print((exc.stdout or b"")[-2000:], flush=True)
        return
    print(done.stdout[-3000:], done.stderr[-3000:], sep="\n", flush=True)
    added = (triton_cache_entries() or 0) - before
    # Exit 1 also means a kernel that does not fit some card; on this card what matters is what was compiled.
    last = (done.stderr.strip().splitlines() or [""])[-1]
    ctx.rows.check(
        "Triton cache from the AOT compile",
        added > 0,
        f"sm_{arch}, {', '.join(FORMATS)}, {jobs} jobs: {added} cache entries added (aot exit {done.returncode}: {last})",
        time.perf_counter() - start,
        "s",
    )
