"""gpu_check part, after the smoke test: fill the Triton cache from the ahead-of-time compile
(`python -m engine.kernels.aot`, engine/kernels/aot/) for this device's arch and Triton, on all its CPU cores, so
the parts after it find most kernels compiled instead of compiling them one by one on first launch. Its row says
how many kernels it added; each later part's "(triton cache)" row says how many it still compiled itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import torch
from gpu_check_setup import Context, triton_cache_entries

# What the decode, loop and profile parts run; the per-type kernel parts compile their own.
FORMATS = ("bf16", "Q4_K_M")


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
    log = ctx.out_dir / "gpu_check_aot.log"
    with log.open("w") as out:
        # A session of its own: on a timeout its compile workers go with it.
        aot = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = aot.wait(timeout=max(5.0, ctx.remaining() - 5))
        except subprocess.TimeoutExpired:
            os.killpg(aot.pid, signal.SIGKILL)
            aot.wait()
            code = None
    added = (triton_cache_entries() or 0) - before
    seconds = time.perf_counter() - start
    lines = log.read_text(errors="replace").strip().splitlines()
    print("\n".join(lines[-40:]), flush=True)
    if code is None:  # not a failure: what was compiled stays cached, the rest compiles on first launch
        note = f"sm_{arch}: stopped at the part's budget with {added} cache entries added (the rest compile on use)"
        ctx.rows.info("Triton cache from the AOT compile", note, seconds, "s")
        return
    # Exit 1 also means a kernel that does not fit some card; on this card what matters is what was compiled.
    last = lines[-1] if lines else ""
    ctx.rows.check(
        "Triton cache from the AOT compile",
        added > 0,
        f"sm_{arch}, {', '.join(FORMATS)}, {jobs} jobs: {added} cache entries added (aot exit {code}: {last[:200]})",
        seconds,
        "s",
    )
