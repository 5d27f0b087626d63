"""gpu_check part, first and about 10 seconds: can this device run anything? One Triton kernel (the engine's RMS norm)
compiled and run against its reference, one CUDA graph captured and replayed, and what the image has (versions,
xgrammar)."""

from __future__ import annotations

import importlib.util
import time

import torch
from gpu_check_setup import Context


def smoke(ctx: Context) -> None:
    import triton

    dev = ctx.device
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU (dry run, Triton interpreter)"
    xgrammar = "installed" if importlib.util.find_spec("xgrammar") else "NOT installed: structured rows skip"
    ctx.rows.info(
        "device", f"{name}; torch {torch.__version__}, triton {triton.__version__}; xgrammar {xgrammar}"
    )
    with ctx.rows.section("Triton kernel compiled and run"):
        from engine.kernels.rms_norm import reference
        from engine.kernels.rms_norm import triton as kernel

        start = time.perf_counter()
        x = torch.randn(4, 256, device=dev, dtype=ctx.dtype)
        weight = 0.1 * torch.randn(256, device=dev, dtype=ctx.dtype)
        got = kernel.rms_norm(x, weight, 1e-6)
        ctx.sync()
        error = (
            (got.float() - reference.rms_norm(x, weight, 1e-6).float()).norm() / got.float().norm()
        ).item()
        ctx.rows.check(
            "Triton kernel compiled and run",
            error < 1e-2,
            f"rms_norm [4 x 256] rel RMS err {error:.1e} (first call: compile + run)",
            time.perf_counter() - start,
            "s",
        )
    with ctx.rows.section("CUDA graph captured and replayed"):
        if dev.type != "cuda":
            ctx.rows.skip(
                "CUDA graph captured and replayed", "dry run: no CUDA (graph runners are passthroughs)"
            )
            return
        start = time.perf_counter()
        static = torch.zeros(1024, device=dev)
        side = torch.cuda.Stream(dev)
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):  # warm-up off the capture stream, as the engine's runner does
            out = static * 2 + 1
        torch.cuda.current_stream(dev).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = static * 2 + 1
        fresh = torch.randn(1024, device=dev)
        static.copy_(fresh)
        graph.replay()
        ctx.sync()
        ok = bool(torch.equal(out, fresh * 2 + 1))
        ctx.rows.check(
            "CUDA graph captured and replayed",
            ok,
            "x * 2 + 1 on new inputs",
            time.perf_counter() - start,
            "s",
        )
