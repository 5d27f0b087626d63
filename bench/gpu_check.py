"""One-call GPU check of the engine's Triton kernels and of the whole model at the real 35B-A3B shape.

    python bench/gpu_check.py             # on an H200 (about 5-8 minutes)
    python bench/gpu_check.py --dry-run   # on a CPU: tiny shapes through the Triton interpreter, no timing claims

1. bf16 correctness of every kernel against its torch reference at real sizes (hidden 2048, 256 experts top-8,
   expert intermediate 512, 32 value / 16 key heads of 128, conv dim 8192 width 4). Error = relative RMS.
2. Each kernel's median time against its own floor: max(bytes / copy bandwidth, flops / bf16 matmul rate), both
   ceilings measured first on the device (datasheet: 4.8 TB/s, 989 TFLOP/s). Inputs rotate where they would
   otherwise sit in L2 (expert routings, decode states).
3. The whole model, random bf16 weights built on the GPU (no download): batch-1 decode at 2k and 30k context,
   batch-32 decode at 2k, one 8k-token prefill; decode with CUDA graphs off and on. Printed last as one table
   against the roofline (engine-anchors.md section 4) and the targets.
4. The same model served by the step loop (`LLM.from_model`): 32 concurrent callers (aggregate generated tok/s,
   prefill included), and a 20-call chat session's time to first token per call with the prefix cache.
   The graph-on rows replay the engine's capture-safe decode step (`model.decode_step`: lengths and slots read on
   the device only, padded rows on the cache's scratch slot) through `DecodeGraphRunner`, as `LLM` does on CUDA.
Everything is printed; the last table is also written to $OUT/gpu_check.txt when OUT is set.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

DRY_RUN = "--dry-run" in sys.argv
if DRY_RUN:
    # Must precede the first triton import: kernels are decorated as interpreted functions at import time.
    os.environ["TRITON_INTERPRET"] = "1"
    os.environ["AW_KERNELS"] = "triton"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from engine.kernels.causal_conv1d import reference as conv_ref  # noqa: E402
from engine.kernels.decode_attention import reference as attn_ref  # noqa: E402
from engine.kernels.fused_moe import reference as moe_ref  # noqa: E402
from engine.kernels.gated_delta_rule import reference as gdr_ref  # noqa: E402
from engine.kernels.gated_rms_norm import reference as gated_ref  # noqa: E402
from engine.kernels.qk_norm_rope import reference as rope_ref  # noqa: E402
from engine.kernels.rms_norm import reference as rms_ref  # noqa: E402
from engine.kernels.router_topk import reference as router_ref  # noqa: E402

DATASHEET_BW = 4.8e12
DATASHEET_FLOPS = 989e12
ROOFLINE = {"b1 2k": 790.0, "b1 30k": 720.0, "b32 2k": 3000.0, "prefill 8k": 142_000.0}
TARGET = {"b1 2k": 400.0, "b1 30k": 400.0, "b32 2k": 2000.0, "prefill 8k": 20_000.0, "b32 loop": 2000.0,
          "Q4_K_M b1 2k": 400.0, "Q4_K_M b32 2k": 2000.0}  # fmt: skip
# The Q4_K_M model's decode reads ~1.7 GB per token (weights as stored: 8 of 256 experts + dense + Q6_K head).
ROOFLINE.update({"Q4_K_M b1 2k": 2400.0, "Q4_K_M b32 2k": 9000.0})
GGUF_PEAK_GIB = 24.0  # the 35B-A3B at Q4_K_M with a 32k context must fit a 24 GiB card
SESSION_TTFT_TARGET = 1.2  # call 20's time to first token over call 1's, prefix cache on


@dataclass
class Shapes:
    hidden: int
    experts: int
    top_k: int
    inter: int
    heads_k: int
    heads_v: int
    head_dim: int
    conv_dim: int
    conv_width: int
    prefill: int  # tokens in the kernel-level prefill checks
    moe_tokens: tuple[int, ...]


REAL = Shapes(2048, 256, 8, 512, 16, 32, 128, 8192, 4, 8192, (1, 32, 8192))
TINY = Shapes(64, 8, 2, 32, 2, 4, 32, 96, 4, 80, (1, 5, 40))


@dataclass
class Ceilings:
    bandwidth: float  # bytes/s
    flops: float  # bf16 FLOP/s


class Bench:
    def __init__(self, device: torch.device, dry_run: bool) -> None:
        self.device = device
        self.dry_run = dry_run
        self.rows: list[str] = []
        self.failures: list[str] = []

    @contextmanager
    def section(self, name: str) -> Iterator[None]:
        """Runs one check; an exception is printed and counted as a failure, and the next check still runs."""
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - one broken kernel must not hide the others' figures
            traceback.print_exc()
            line = f"ERROR {name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            print("  " + line, flush=True)
            self.failures.append(line)
            if self.device.type == "cuda":
                torch.cuda.empty_cache()

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def time_ms(self, fn: Callable[[], object], reps: int = 50) -> float:
        """Median milliseconds per call (CUDA events via triton's do_bench on a GPU; a wall clock on a CPU)."""
        if self.device.type == "cuda":
            import triton.testing

            return float(triton.testing.do_bench(fn, warmup=25, rep=max(reps, 25), return_mode="median"))
        start = time.perf_counter()  # CPU dry run: one call, only to exercise the path
        fn()
        return (time.perf_counter() - start) * 1e3

    def check(self, name: str, actual: torch.Tensor, expected: torch.Tensor, bound: float) -> None:
        a, e = actual.double(), expected.double()
        err = (
            float("inf")
            if not torch.isfinite(a).all()
            else ((a - e).norm() / e.norm().clamp_min(1e-30)).item()
        )
        ok = err < bound
        line = f"  {'ok  ' if ok else 'FAIL'} {name:<44} rel RMS err {err:.2e} (bound {bound:.0e})"
        print(line, flush=True)
        if not ok:
            self.failures.append(line.strip())

    def timed(self, name: str, fn: Callable[[], object], nbytes: float, flops: float, ceil: Ceilings) -> None:
        ms = self.time_ms(fn)
        floor_ms = max(nbytes / ceil.bandwidth, flops / ceil.flops) * 1e3
        line = (
            f"  {name:<44} {ms * 1e3:10.1f} us   floor {floor_ms * 1e3:9.1f} us   x{ms / max(floor_ms, 1e-12):6.1f}"
            f"   {nbytes / (ms * 1e-3) / 1e9:8.0f} GB/s  {flops / (ms * 1e-3) / 1e12:7.1f} TFLOP/s"
        )
        print(line, flush=True)
        self.rows.append(line)


def measure_ceilings(bench: Bench) -> Ceilings:
    if bench.device.type != "cuda":
        return Ceilings(DATASHEET_BW, DATASHEET_FLOPS)
    src = torch.randn(2**29 // 2, device=bench.device, dtype=torch.bfloat16)  # 512 MiB, far past L2
    dst = torch.empty_like(src)
    ms = bench.time_ms(lambda: dst.copy_(src))
    bw = 2 * src.numel() * 2 / (ms * 1e-3)
    a = torch.randn(8192, 8192, device=bench.device, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=bench.device, dtype=torch.bfloat16)
    ms = bench.time_ms(lambda: a @ b, reps=20)
    flops = 2 * 8192**3 / (ms * 1e-3)
    print(f"measured ceilings: copy {bw / 1e12:.2f} TB/s, bf16 matmul {flops / 1e12:.0f} TFLOP/s", flush=True)
    return Ceilings(bw, flops)


def kernel_checks(bench: Bench, s: Shapes, ceil: Ceilings) -> None:
    from engine.kernels.causal_conv1d import triton as conv_tri
    from engine.kernels.decode_attention import triton as attn_tri
    from engine.kernels.fused_moe import triton as moe_tri
    from engine.kernels.gated_delta_rule import triton as gdr_tri
    from engine.kernels.gated_rms_norm import triton as gated_tri
    from engine.kernels.qk_norm_rope import triton as rope_tri
    from engine.kernels.rms_norm import triton as rms_tri
    from engine.kernels.router_topk import triton as router_tri

    dev, bf16 = bench.device, torch.bfloat16
    # The interpreter's bf16 stores truncate instead of rounding: looser bounds in a dry run only.
    loose = 4.0 if bench.dry_run else 1.0
    print("\n== kernels: bf16 correctness and time against the floor ==", flush=True)

    for tokens in (1, s.prefill):
        with bench.section(f"rms_norm T={tokens}"):
            x = torch.randn(tokens, s.hidden, device=dev, dtype=bf16)
            res = torch.randn_like(x)
            w = 0.1 * torch.randn(s.hidden, device=dev, dtype=bf16)
            y, h = rms_tri.rms_norm(x, w, 1e-6, residual=res)
            y_ref, h_ref = rms_ref.rms_norm(x, w, 1e-6, residual=res)
            bench.check(f"rms_norm+residual T={tokens}", y, y_ref, 1e-2 * loose)
            bench.check(f"rms_norm residual sum T={tokens}", h, h_ref, 1e-2 * loose)
            bench.timed(
                f"rms_norm+residual T={tokens}",
                partial(rms_tri.rms_norm, x, w, 1e-6, residual=res),
                4 * x.numel() * 2,
                0,
                ceil,
            )

        with bench.section(f"gated_rms_norm T={tokens}"):
            xg = torch.randn(tokens, s.heads_v, s.head_dim, device=dev, dtype=bf16)
            gate = torch.randn_like(xg)
            wg = 1 + 0.1 * torch.randn(s.head_dim, device=dev, dtype=bf16)
            bench.check(
                f"gated_rms_norm T={tokens}",
                gated_tri.gated_rms_norm(xg, gate, wg, 1e-6),
                gated_ref.gated_rms_norm(xg, gate, wg, 1e-6),
                1e-2 * loose,
            )
            bench.timed(
                f"gated_rms_norm T={tokens}",
                partial(gated_tri.gated_rms_norm, xg, gate, wg, 1e-6),
                3 * xg.numel() * 2,
                0,
                ceil,
            )

        with bench.section(f"router_topk T={tokens}"):
            logits = torch.randn(tokens, s.experts, device=dev, dtype=bf16)
            wt, ids = router_tri.router_topk(logits, s.top_k)
            wt_ref, ids_ref = router_ref.router_topk(logits, s.top_k)
            bench.check(
                f"router_topk weights T={tokens}",
                wt.gather(1, ids.argsort(1)),
                wt_ref.gather(1, ids_ref.argsort(1)),
                1e-5,
            )
            same = (ids.sort(1).values == ids_ref.sort(1).values).float().mean().item()
            print(
                f"  {'ok  ' if same > 0.99 else 'FAIL'} router_topk ids T={tokens}: {same:.4f} of picks equal (bf16 ties aside)"
            )
            bench.timed(
                f"router_topk T={tokens}",
                partial(router_tri.router_topk, logits, s.top_k),
                logits.numel() * 2 + tokens * s.top_k * 12,
                0,
                ceil,
            )

        with bench.section(f"qk_norm_rope T={tokens}"):
            # The attention layer's shapes: 16 query heads (a strided view beside their gates), 2 KV heads of 256,
            # rotary on the first 64 dims.
            heads, kv_heads, head_dim, rot = 16, 2, 256, 64
            q = torch.randn(tokens, heads, 2 * head_dim, device=dev, dtype=bf16)[..., :head_dim]
            kh = torch.randn(tokens, kv_heads, head_dim, device=dev, dtype=bf16)
            qw, kw = (0.1 * torch.randn(2, head_dim, device=dev)).to(bf16)
            angles = torch.rand(tokens, rot, device=dev) * 6.28
            cos, sin = angles.cos().to(bf16), angles.sin().to(bf16)
            got = rope_tri.qk_norm_rope(q, kh, qw, kw, cos, sin, 1e-6)
            want = rope_ref.qk_norm_rope(q, kh, qw, kw, cos, sin, 1e-6)
            bench.check(f"qk_norm_rope q T={tokens}", got[0], want[0], 1e-2 * loose)
            bench.check(f"qk_norm_rope k T={tokens}", got[1], want[1], 1e-2 * loose)
            bench.timed(
                f"qk_norm_rope T={tokens}",
                partial(rope_tri.qk_norm_rope, q, kh, qw, kw, cos, sin, 1e-6),
                2 * (q.numel() + kh.numel()) * 2,
                0,
                ceil,
            )

        with bench.section(f"causal_conv1d T={tokens}"):
            xc = torch.randn(1, tokens, s.conv_dim, device=dev, dtype=bf16)
            wc = torch.randn(s.conv_dim, s.conv_width, device=dev, dtype=bf16) / 2
            st = torch.randn(1, s.conv_dim, s.conv_width, device=dev, dtype=bf16)
            yc, nst = conv_tri.causal_conv1d(xc, wc, conv_state=st)
            yc_ref, nst_ref = conv_ref.causal_conv1d(xc, wc, conv_state=st)
            bench.check(f"causal_conv1d T={tokens}", yc, yc_ref, 1e-2 * loose)
            bench.check(f"causal_conv1d new state T={tokens}", nst, nst_ref, 1e-6)
            bench.timed(
                f"causal_conv1d T={tokens}",
                partial(conv_tri.causal_conv1d, xc, wc, conv_state=st),
                2 * xc.numel() * 2,
                0,
                ceil,
            )

    for batch in (1, 32):
        with bench.section(f"causal_conv1d_update B={batch}"):
            xu = torch.randn(batch, s.conv_dim, device=dev, dtype=bf16)
            wc = torch.randn(s.conv_dim, s.conv_width, device=dev, dtype=bf16) / 2
            st = torch.randn(batch, s.conv_dim, s.conv_width, device=dev, dtype=bf16)
            st_ref = st.clone()
            bench.check(
                f"causal_conv1d_update B={batch}",
                conv_tri.causal_conv1d_update(xu, wc, st),
                conv_ref.causal_conv1d_update(xu, wc, st_ref),
                1e-2 * loose,
            )
            bench.check(f"causal_conv1d_update state B={batch}", st, st_ref, 1e-6)
            bench.timed(
                f"causal_conv1d_update B={batch}",
                partial(conv_tri.causal_conv1d_update, xu, wc, st),
                2 * st.numel() * 2 + 2 * xu.numel() * 2,
                0,
                ceil,
            )

    for batch, length in ((1, 30 * s.prefill // 8), (32, s.prefill // 4)):
        with bench.section(f"decode_attention B={batch} L={length}"):
            # The attention layers' cache: 2 KV heads of 256, 16 query heads; every sequence at the cache's end.
            kv_heads, heads, head_dim = 2, 16, 256
            keys = torch.randn(batch + 1, kv_heads, length, head_dim, device=dev, dtype=bf16)
            values = torch.randn_like(keys)
            q = torch.randn(batch, heads, head_dim, device=dev, dtype=bf16)
            slots = torch.arange(batch, device=dev)
            pos = torch.full((batch,), length - 1, device=dev)
            bench.check(
                f"decode_attention B={batch} L={length}",
                attn_tri.decode_attention(q, keys, values, slots, pos),
                attn_ref.decode_attention(q.float(), keys.float(), values.float(), slots, pos).to(bf16),
                1e-2 * loose,
            )
            bench.timed(
                f"decode_attention B={batch} L={length}",
                partial(attn_tri.decode_attention, q, keys, values, slots, pos),
                2 * batch * kv_heads * length * head_dim * 2,
                4 * batch * heads * length * head_dim,
                ceil,
            )

    w_gate_up = torch.randn(s.experts, 2 * s.inter, s.hidden, device=dev, dtype=bf16) / s.hidden**0.5
    w_down = torch.randn(s.experts, s.hidden, s.inter, device=dev, dtype=bf16) / s.inter**0.5
    expert_bytes = 3 * s.inter * s.hidden * 2
    paths = {"pairs": moe_tri.fused_moe_pairs, "grouped": moe_tri.fused_moe_grouped}
    for tokens in s.moe_tokens:
        # Both paths where both are plausible (decode sizes), to settle PAIR_PATH_MAX_PAIRS; prefill: grouped.
        for path_name, path in paths.items():
            if path_name == "pairs" and tokens * s.top_k > 512:
                continue
            with bench.section(f"fused_moe T={tokens} {path_name}"):
                moe_row(bench, s, ceil, tokens, path_name, path, w_gate_up, w_down, expert_bytes, loose)

    hk, hv, d = s.heads_k, s.heads_v, s.head_dim
    for name, cu in (
        ("one sequence", None),
        ("3 packed", [0, min(1000, s.prefill // 4), s.prefill // 2, s.prefill]),
    ):
        with bench.section(f"chunk_gated_delta_rule {name}"):
            tokens = s.prefill
            q = torch.randn(1, tokens, hk, d, device=dev, dtype=bf16)
            k = torch.randn(1, tokens, hk, d, device=dev, dtype=bf16)
            v = torch.randn(1, tokens, hv, d, device=dev, dtype=bf16)
            g = torch.nn.functional.logsigmoid(torch.randn(1, tokens, hv, device=dev)) / 4
            beta = torch.rand(1, tokens, hv, device=dev, dtype=bf16)
            cu_t = None if cu is None else torch.tensor(cu, device=dev, dtype=torch.int32)
            n = 1 if cu is None else len(cu) - 1
            h0 = torch.randn(n, hv, d, d, device=dev) / d
            kwargs = dict(
                initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True, cu_seqlens=cu_t
            )
            o, ht = gdr_tri.chunk_gated_delta_rule(q, k, v, g, beta, **kwargs)
            o_ref, ht_ref = gdr_ref.chunk_gated_delta_rule(
                q.float(), k.float(), v.float(), g, beta.float(), **kwargs
            )
            bench.check(f"chunk_gated_delta_rule T={tokens} {name}", o, o_ref.to(bf16), 5e-3 * loose)
            bench.check(f"chunk_gated_delta_rule state {name}", ht, ht_ref, 5e-3 * loose)
            if cu is None:
                io = 2 * q.numel() * 2 + 2 * v.numel() * 2 + g.numel() * 6
                # Useful work per token and value head: the state read and update (4 K V) and the in-chunk terms.
                flops = 2 * tokens * hv * (4 * d * d + 2 * 64 * d + 64 * d)
                default_precision = gdr_tri._DOT_PRECISION
                for precision in (
                    default_precision,
                    "ieee",
                ):  # tf32 matrix products vs full fp32 (the fallback)
                    gdr_tri._DOT_PRECISION = precision
                    if precision != default_precision:
                        o, _ = gdr_tri.chunk_gated_delta_rule(q, k, v, g, beta, **kwargs)
                        bench.check(
                            f"chunk_gated_delta_rule T={tokens} dots {precision}",
                            o,
                            o_ref.to(bf16),
                            5e-3 * loose,
                        )
                    bench.timed(
                        f"chunk_gated_delta_rule T={tokens} dots {precision}",
                        partial(gdr_tri.chunk_gated_delta_rule, q, k, v, g, beta, **kwargs),
                        io,
                        flops,
                        ceil,
                    )
                gdr_tri._DOT_PRECISION = default_precision

    for batch in (1, 32):
        with bench.section(f"gated_delta_rule_decode B={batch}"):
            # What the decode step runs: gates fused in, the state cache read and written at the batch's slots
            # (a cache of 4 batches' worth of slots, the batch spread over it so states do not all sit in L2).
            q = torch.randn(batch, hk, d, device=dev, dtype=bf16)
            k = torch.randn(batch, hk, d, device=dev, dtype=bf16)
            v = torch.randn(batch, hv, d, device=dev, dtype=bf16)
            a, b = torch.randn(2, batch, hv, device=dev, dtype=bf16)
            A_log, dt_bias = torch.rand(hv, device=dev) * 2.7, torch.randn(hv, device=dev)
            cache = torch.randn(4 * batch, hv, d, d, device=dev) / d
            slot_sets = [torch.randperm(4 * batch, device=dev)[:batch] for _ in range(4)]
            ref_cache = cache.clone()
            args = (q, k, v, a, b, A_log, dt_bias)
            o = gdr_tri.gated_delta_rule_decode(*args, cache, slot_sets[0])
            o_ref = gdr_ref.gated_delta_rule_decode(*args, ref_cache, slot_sets[0])
            bench.check(
                f"gated_delta_rule_decode B={batch}", o, o_ref, 5e-3 * loose
            )  # bf16 outputs: an ulp is 4e-3
            bench.check(f"gated_delta_rule_decode state B={batch}", cache, ref_cache, 2e-3 * loose)
            turn = iter(range(10**9))

            def run_decode(args=args, cache=cache, slot_sets=slot_sets, turn=turn):
                return gdr_tri.gated_delta_rule_decode(*args, cache, slot_sets[next(turn) % len(slot_sets)])

            state_bytes = batch * hv * d * d * 4
            bench.timed(f"gated_delta_rule_decode B={batch}", run_decode, 2 * state_bytes, 0, ceil)


def moe_row(bench, s, ceil, tokens, path_name, path, w_gate_up, w_down, expert_bytes, loose) -> None:
    dev, bf16 = bench.device, torch.bfloat16
    x = torch.randn(tokens, s.hidden, device=dev, dtype=bf16)
    # Several routings, cycled while timing, so that the touched experts are not all sitting in L2.
    routings = [router_ref.router_topk(torch.randn(tokens, s.experts, device=dev), s.top_k) for _ in range(8)]
    routings = [(wt.to(bf16), ids) for wt, ids in routings]
    wt, ids = routings[0]
    bench.check(
        f"fused_moe T={tokens} {path_name}",
        path(x, w_gate_up, w_down, wt, ids),
        moe_ref.fused_moe(x, w_gate_up, w_down, wt, ids),
        1e-2 * loose,
    )
    touched = sum(r[1].unique().numel() for r in routings) / len(routings)
    turn = iter(range(10**9))

    def run_moe() -> torch.Tensor:
        wt, ids = routings[next(turn) % len(routings)]
        return path(x, w_gate_up, w_down, wt, ids)

    bench.timed(
        f"fused_moe T={tokens} {path_name} ({touched:.0f} experts)",
        run_moe,
        touched * expert_bytes + 2 * x.numel() * 2,
        2 * tokens * s.top_k * 3 * s.inter * s.hidden,
        ceil,
    )


def build_random_model(config, device: torch.device, dtype: torch.dtype):
    """The engine's model with random weights made on the device: the loader's path minus the checkpoint,
    projections fused as `build_model` fuses them (the first H200 run, bench/results, measured an unfused model:
    391 GEMM launches per decode step instead of 161)."""
    from engine.loader import FP32_PARAM_SUFFIXES
    from engine.models.qwen3_5_moe import Qwen3_5MoeForCausalLM

    with torch.device("meta"):
        model = Qwen3_5MoeForCausalLM(config)
    model.to(dtype)
    for name, param in model.named_parameters():
        if name.endswith(FP32_PARAM_SUFFIXES):
            param.data = param.data.float()
    model.to_empty(device=device)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("A_log"):
                param.uniform_(0.0, 2.7)  # decay rates exp(A_log) in 1..16, as in the released model
            elif name.endswith("dt_bias"):
                param.uniform_(-1.0, 1.0)
            elif name.endswith("linear_attn.norm.weight"):
                param.normal_(1.0, 0.05)
            elif name.endswith("norm.weight"):
                param.normal_(0.0, 0.05)  # zero-centred norms: the weight is an offset from 1
            else:
                param.normal_(0.0, 0.02)
    model.requires_grad_(False).fuse_weights()
    return model.eval()


def model_checks(
    bench: Bench, config, dtype: torch.dtype, contexts: dict[str, tuple[int, int]], prefill: int
) -> dict[str, dict[str, float]]:
    """Returns {row: {"eager": tok/s, "graph": tok/s}} for the decode rows and {"prefill": {"eager": tok/s}}."""
    from engine.cache import Cache
    from engine.forward_batch import ForwardBatch

    dev = bench.device
    print("\n== whole model, random weights ==", flush=True)
    start = time.perf_counter()
    model = build_random_model(config, dev, dtype)
    bench.sync()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"built {n_params / 1e9:.2f} B params in {time.perf_counter() - start:.1f} s", flush=True)
    results: dict[str, dict[str, float]] = {}
    for row, (batch, context) in contexts.items():
        with bench.section(f"model {row}"):
            results[row] = decode_row(bench, model, config, dtype, batch, context)
            print(
                f"  {row}: " + ", ".join(f"{k} {v:,.0f} tok/s" for k, v in results[row].items()), flush=True
            )
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    row = f"prefill {prefill // 1024}k" if prefill >= 1024 else f"prefill {prefill}"
    with bench.section(f"model {row}"):
        cache = Cache(config, num_slots=1, max_len=prefill + 8, dtype=dtype, device=dev)
        fb = ForwardBatch.build([0], [0], [prefill], dev)
        ids = torch.randint(0, config.vocab_size, (prefill,), device=dev)
        ms = bench.time_ms(lambda: model(ids, fb, cache), reps=5)
        results[row] = {"eager": prefill / (ms * 1e-3)}
        print(f"  prefill {prefill} tokens: {prefill / (ms * 1e-3):,.0f} tok/s ({ms:.1f} ms)", flush=True)
    with bench.section("serving through the step loop"):
        results.update(serving_checks(bench, model, config))
    if dev.type == "cuda":
        with bench.section("profile of one eager b1 decode step"):
            profile_decode_step(model, config, dtype, dev)
    return results


def serving_checks(bench: Bench, model, config) -> dict[str, dict[str, float]]:
    """The step loop over the random model: concurrent callers and a multi-turn session (prefix cache)."""
    import tempfile
    import threading

    from transformers import AutoTokenizer

    from engine import LLM, SamplingParams
    from engine.testing.tiny_checkpoint import build_tokenizer, save_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        save_tokenizer(build_tokenizer(), Path(tmp))
        tokenizer = AutoTokenizer.from_pretrained(tmp)
    callers, new_tokens, prompt_len = (2, 4, 8) if bench.dry_run else (32, 256, 128)
    print(f"\n== serving: {callers} concurrent callers, {prompt_len}-token prompts, {new_tokens} tokens ==")
    llm = LLM.from_model(
        model, config, tokenizer, name="random", max_model_len=8192, max_num_seqs=callers,
        enable_prefix_caching=False,
    )  # fmt: skip
    gen = torch.Generator().manual_seed(1)
    vocab = min(len(tokenizer), config.vocab_size)
    prompts = [torch.randint(0, vocab, (prompt_len,), generator=gen).tolist() for _ in range(callers)]
    params = SamplingParams(temperature=0, max_tokens=new_tokens, ignore_eos=True)

    def run_all() -> float:
        threads = [threading.Thread(target=llm.generate, args=(p, params)) for p in prompts]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.perf_counter() - start

    run_all()  # warm-up: Triton compiles, CUDA graphs captured at the padded sizes the batch passes through
    seconds = min(run_all() for _ in range(2))
    rate = callers * new_tokens / seconds
    print(f"  b{callers} through the loop: {rate:,.0f} tok/s aggregate ({seconds:.2f} s)", flush=True)
    structured = structured_check(bench, llm, prompts[:8], 3 if bench.dry_run else 64)
    llm.shutdown()

    calls = 3 if bench.dry_run else 20
    llm = LLM.from_model(model, config, tokenizer, name="random", max_model_len=16384, max_num_seqs=4)
    words = "tool world model observation action file directory result status error".split()
    system = " ".join(words[i % len(words)] for i in range(12 if bench.dry_run else 700))
    conversation = [{"role": "system", "content": system}]
    session_params = SamplingParams(temperature=0, max_tokens=3 if bench.dry_run else 96, ignore_eos=True)
    ttfts: list[tuple[int, int, float]] = []
    llm.generate([1, 2, 3], SamplingParams(max_tokens=2))
    for k in range(calls):
        conversation.append(
            {"role": "user", "content": f'Action: {{"name": "read", "arguments": {{"n": {k}}}}}'}
        )
        prompt = llm.encode(llm.render_chat(conversation))
        bench.sync()
        start = time.perf_counter()
        first, text, cached = None, "", 0
        for delta in llm.generate_stream(prompt, session_params):
            first = first or time.perf_counter() - start
            text, cached = text + delta.text, delta.num_cached_tokens
        ttfts.append((len(prompt), cached, first))
        conversation.append({"role": "assistant", "content": text.strip() or "(empty)"})
    llm.shutdown()
    for k, (tokens, cached, first) in enumerate(ttfts, 1):
        print(f"  call {k:2d}: prompt {tokens:6d} tokens, cached {cached:6d}, TTFT {first * 1e3:8.1f} ms")
    ratio = ttfts[-1][2] / ttfts[0][2]
    verdict = "meets target" if ratio <= SESSION_TTFT_TARGET else "BELOW target"
    print(f"  call {calls} TTFT / call 1 TTFT = {ratio:.2f} (target <= {SESSION_TTFT_TARGET})  {verdict}")
    return {
        f"b{callers} loop": {"graph": rate},
        f"session {calls} TTFT ratio": {"ratio": ratio, "at_most": SESSION_TTFT_TARGET},
        **structured,
    }


STRUCTURED_TARGET = 0.90  # constrained decode tok/s over free, batch 8 (issue 12: at most 10% slower)


def structured_check(bench: Bench, llm, prompts: list[list[int]], tokens: int) -> dict[str, dict[str, float]]:
    """Batch 8 through the step loop (CUDA graphs) with and without the grammar mask: the rate ratio, and every
    constrained answer the grammar closed must parse and validate (the mask applied after the graph's logits)."""
    import json

    print(f"\n== structured: batch {len(prompts)}, {tokens} tokens, free vs JSON-schema constrained ==")
    try:
        import jsonschema
        import xgrammar  # noqa: F401 -- the engine's grammar backend ([engine] extra)
    except ImportError as exc:
        print(f"  skipped: {exc.name} is not installed here (pip install -e '.[engine]')")
        return {}
    from engine import SamplingParams
    from engine.testing.bounded import SAMPLE_SCHEMA as SCHEMA  # the CPU benchmark's: both measure the same
    from engine.testing.bounded import bounded

    start = time.perf_counter()
    llm.compile_schema(SCHEMA)
    print(f"  grammar compile: {1e3 * (time.perf_counter() - start):.1f} ms (this tokenizer's vocabulary)")

    def run(schema: dict | None, n: int) -> tuple[float, int, list]:
        # ignore_eos keeps free rows going; a constrained row still ends when its grammar closes
        params = SamplingParams(temperature=0, max_tokens=n, ignore_eos=True, json_schema=schema)
        bench.sync()
        start = time.perf_counter()
        outs = llm.generate(prompts, params)
        bench.sync()
        return time.perf_counter() - start, sum(len(o.outputs[0].token_ids) for o in outs), outs

    rates = {}
    for label, schema in (("free", None), ("constrained", SCHEMA)):
        run(schema, 4)  # warm-up
        # decode rate = (generate(n + 1) - generate(1)): the prefill and the first token cancel out
        (long_s, long_n, outs), (short_s, short_n, _) = run(schema, tokens + 1), run(schema, 1)
        rates[label] = (long_n - short_n) / max(long_s - short_s, 1e-9)
    # Validity: a random model ends strings, numbers and arrays only by chance, so the caps of bounded() let every
    # answer close inside the budget; each must parse and validate against the uncapped schema.
    _, _, outs = run(bounded(SCHEMA), 256)
    for out in (o.outputs[0] for o in outs):
        try:
            if out.finish_reason != "stop":
                raise ValueError(f"not closed within 256 tokens: {out.text[:80]!r}")
            if "\ufffd" in out.text:
                raise ValueError(f"invalid UTF-8 bytes in {out.text[:80]!r}")
            jsonschema.validate(json.loads(out.text), SCHEMA)
        except (ValueError, jsonschema.ValidationError) as exc:
            bench.failures.append(f"structured: a constrained answer is not valid JSON for its schema: {exc}")
    bad = sum(f.startswith("structured:") for f in bench.failures)
    print(f"  constrained answers (capped schema, 256-token budget): {len(outs) - bad}/{len(outs)} valid")
    ratio = rates["constrained"] / rates["free"]
    verdict = "meets target" if ratio >= STRUCTURED_TARGET else "BELOW target"
    print(
        f"  free {rates['free']:,.0f} tok/s, constrained {rates['constrained']:,.0f} tok/s: "
        f"ratio {ratio:.2f} (target >= {STRUCTURED_TARGET})  {verdict}",
        flush=True,
    )
    return {f"structured b{len(prompts)} ratio": {"ratio": ratio, "at_least": STRUCTURED_TARGET}}


def decode_row(bench: Bench, model, config, dtype: torch.dtype, batch: int, context: int) -> dict[str, float]:
    """Decode tok/s for `batch` sequences at `context` tokens: eager forward, then the captured static step."""
    from engine.cache import Cache
    from engine.cuda_graphs import DecodeGraphRunner
    from engine.forward_batch import ForwardBatch

    dev = bench.device
    cache = Cache(config, num_slots=batch, max_len=context + 8, dtype=dtype, device=dev)
    # Random KV and states (never zeros: they can run faster than real data).
    for t in (cache.keys, cache.values, cache.conv):
        t.normal_(0.0, 1.0)
    cache.recurrent.normal_(0.0, 0.01)
    fb = ForwardBatch.build(list(range(batch)), [context] * batch, [1] * batch, dev)
    ids = torch.randint(0, config.vocab_size, (batch,), device=dev)
    eager_ms = bench.time_ms(lambda: model(ids, fb, cache), reps=200)
    result = {"eager": batch / (eager_ms * 1e-3)}
    # On a CPU (--dry-run) the runner is a passthrough: this still runs the static step once per rep.
    runner = DecodeGraphRunner(
        lambda i, p, s: model.decode_step(i, p, s, cache), pad_slot_id=cache.pad_slot, batch_sizes=(batch,)
    )
    slots = torch.arange(batch, device=dev)
    positions = torch.full((batch,), context, dtype=torch.long, device=dev)
    runner(ids, positions, slots)  # capture (CUDA)
    graph_ms = bench.time_ms(partial(runner, ids, positions, slots), reps=200 if dev.type == "cuda" else 2)
    result["graph"] = batch / (graph_ms * 1e-3)
    return result


def profile_decode_step(model, config, dtype: torch.dtype, dev: torch.device) -> None:
    """Where one batch-1 decode step at 2k context spends GPU time, eager forward and the static step that the
    CUDA graph replays (its kernels, launched one by one here): the next tuning targets."""
    from torch.profiler import ProfilerActivity, profile

    from engine.cache import Cache
    from engine.forward_batch import ForwardBatch

    cache = Cache(config, num_slots=1, max_len=2048 + 8, dtype=dtype, device=dev)
    fb = ForwardBatch.build([0], [2048], [1], dev)
    ids = torch.randint(0, config.vocab_size, (1,), device=dev)
    positions = torch.full((1,), 2048, dtype=torch.long, device=dev)
    slots = torch.zeros(1, dtype=torch.long, device=dev)
    steps = {
        "eager forward": lambda: model(ids, fb, cache),
        "static decode_step (what the graph replays)": lambda: model.decode_step(
            ids, positions, slots, cache
        ),
    }
    for name, step in steps.items():
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                step()
            torch.cuda.synchronize()
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        total_us = sum(e.device_time for e in kernels) / 5
        print(
            f"\n== profile: {name}, b1 at 2k: {len(kernels) / 5:.0f} kernels, {total_us / 1e3:.2f} ms GPU per step ==",
            flush=True,
        )
        print(
            prof.key_averages().table(
                sort_by="self_device_time_total", row_limit=18, max_name_column_width=70
            )
        )


def gguf_checks(bench: Bench, config, dtype: torch.dtype, contexts: dict[str, tuple[int, int]]) -> dict:
    """The real-shape model at Q4_K_M (llama.cpp's type recipe, random blocks made on the device, through the
    same `build_gguf_model` a file goes through): quantized kernels against their references at real sizes, decode
    tok/s eager and CUDA graph, and the peak memory of the model + one 32k-context sequence."""
    from engine.cache import Cache
    from engine.forward_batch import ForwardBatch
    from engine.gguf.loader import build_gguf_model
    from engine.kernels.quant_matmul import quant_matmul
    from engine.kernels.quant_matmul.reference import quant_matmul as quant_matmul_reference
    from engine.kernels.quant_moe import quant_moe
    from engine.kernels.quant_moe.reference import quant_moe as quant_moe_reference
    from engine.testing.quant_recipe import q4_k_m_table, random_blocks, random_checkpoint, table_bytes

    dev = bench.device
    print("\n== GGUF Q4_K_M: quantized kernels and the whole model ==", flush=True)
    h, inter = config.hidden_size, config.moe_intermediate_size
    ceil = Ceilings(bandwidth=4.0e12, flops=7.0e14) if dev.type == "cuda" else Ceilings(2e10, 1e11)
    from engine.quant.formats import GGMLType, row_bytes

    for kind in (GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K, GGMLType.Q8_0, GGMLType.IQ4_XS, GGMLType.MXFP4):
        rows = config.linear_conv_dim
        with bench.section(f"quant_matmul {kind.name}"):
            blocks = random_blocks(kind, rows, h, h**-0.5, seed=int(kind), device=dev)
            for tokens in (1, 32, 512 if dev.type == "cuda" else 8):
                x = torch.randn(tokens, h, device=dev, dtype=dtype)
                bench.check(f"quant_matmul {kind.name} [{tokens}x{h}]x[{rows}]", quant_matmul(x, blocks, int(kind), h),
                            quant_matmul_reference(x, blocks, int(kind), h), 2e-2 if dtype != torch.float32 else 1e-4)  # fmt: skip
                nbytes = rows * row_bytes(kind, h) + x.numel() * x.element_size()
                bench.timed(f"quant_matmul {kind.name} T={tokens}", lambda x=x, b=blocks, k=int(kind): quant_matmul(x, b, k, h),
                            nbytes, 2 * tokens * rows * h, ceil)  # fmt: skip
    with bench.section("quant_moe Q4_K/Q4_K/Q6_K"):
        e, k = config.num_experts, config.num_experts_per_tok
        gate = random_blocks(GGMLType.Q4_K, (e, inter), h, h**-0.5, 1, dev)
        up = random_blocks(GGMLType.Q4_K, (e, inter), h, h**-0.5, 2, dev)
        down = random_blocks(GGMLType.Q6_K, (e, h), inter, inter**-0.5, 3, dev)
        for tokens in (1, 32):
            x = torch.randn(tokens, h, device=dev, dtype=dtype)
            weights = torch.rand(tokens, k, device=dev).softmax(-1).to(dtype)
            ids = torch.stack([torch.randperm(e, device=dev)[:k] for _ in range(tokens)])
            args = (
                x,
                gate,
                int(GGMLType.Q4_K),
                up,
                int(GGMLType.Q4_K),
                down,
                int(GGMLType.Q6_K),
                weights,
                ids,
            )
            bench.check(
                f"quant_moe T={tokens}",
                quant_moe(*args),
                quant_moe_reference(*args),
                2e-2 if dtype != torch.float32 else 1e-4,
            )
            touched = min(e, tokens * k) * (
                2 * inter * row_bytes(GGMLType.Q4_K, h) + h * row_bytes(GGMLType.Q6_K, inter)
            )
            bench.timed(
                f"quant_moe T={tokens}",
                lambda a=args: quant_moe(*a),
                touched,
                6 * tokens * k * h * inter,
                ceil,
            )

    results: dict[str, dict[str, float]] = {}
    table = q4_k_m_table(config)
    if dev.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)
    with bench.section("GGUF Q4_K_M model"):
        start = time.perf_counter()
        model, report = build_gguf_model(
            random_checkpoint(config, table, dev), config, dev, dtype, progress=False
        )
        bench.sync()
        print(f"built the Q4_K_M model ({table_bytes(table) / 2**30:.2f} GiB of tensors; {report.quantized_bytes / 2**30:.2f}"
              f" GiB kept quantized) in {time.perf_counter() - start:.1f} s", flush=True)  # fmt: skip
        for row, (batch, context) in contexts.items():
            if row.startswith("b1 30k"):
                continue
            with bench.section(f"Q4_K_M {row}"):
                results[f"Q4_K_M {row}"] = decode_row(bench, model, config, dtype, batch, context)
                print(
                    f"  Q4_K_M {row}: "
                    + ", ".join(f"{k} {v:,.0f} tok/s" for k, v in results[f"Q4_K_M {row}"].items()),
                    flush=True,
                )
            if dev.type == "cuda":
                torch.cuda.empty_cache()
        with bench.section("Q4_K_M peak memory, 32k context"):
            context = 32768 if dev.type == "cuda" else 64
            cache = Cache(config, num_slots=1, max_len=context + 8, dtype=dtype, device=dev)
            prefill = 8192 if dev.type == "cuda" else 16
            fb = ForwardBatch.build([0], [0], [prefill], dev)
            model(torch.randint(0, config.vocab_size, (prefill,), device=dev), fb, cache)
            fb = ForwardBatch.build([0], [context - 1], [1], dev)
            model(torch.randint(0, config.vocab_size, (1,), device=dev), fb, cache)
            if dev.type == "cuda":
                peak = torch.cuda.max_memory_allocated(dev) / 2**30
                results["Q4_K_M peak GiB, 32k"] = {"ratio": peak / GGUF_PEAK_GIB, "at_most": 1.0}
                print(
                    f"  peak allocated {peak:.2f} GiB (bar {GGUF_PEAK_GIB} GiB; ratio row = peak / bar)",
                    flush=True,
                )
        del model
    return results


def summary(results: dict[str, dict[str, float]]) -> str:
    lines = [
        "",
        "== summary (tok/s) ==",
        f"{'case':<14}{'eager':>12}{'CUDA graph':>12}{'roofline':>12}{'target':>10}  verdict",
    ]
    for row, r in results.items():
        if "ratio" in r:  # a ratio row names its own bound: at_most or at_least
            bound, most = (r["at_most"], True) if "at_most" in r else (r["at_least"], False)
            met = r["ratio"] <= bound if most else r["ratio"] >= bound
            verdict = "meets target" if met else "BELOW target"
            lines.append(f"{row:<24} {r['ratio']:.2f}x (target {'<=' if most else '>='} {bound}x)  {verdict}")
            continue
        best = max(r.values())
        roof, target = ROOFLINE.get(row), TARGET.get(row)
        cells = "".join(f"{r[k]:>12,.0f}" if k in r else f"{'-':>12}" for k in ("eager", "graph"))
        verdict = "" if target is None else ("meets target" if best >= target else "BELOW target")
        lines.append(
            f"{row:<14}{cells}{(f'{roof:,.0f}' if roof else '-'):>12}"
            f"{(f'{target:,.0f}' if target else '-'):>10}  {verdict}"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny shapes, Triton interpreter")
    parser.add_argument("--skip-model", action="store_true", help="kernel checks only")
    parser.add_argument("--skip-kernels", action="store_true", help="whole-model timing only")
    parser.add_argument("--skip-gguf", action="store_true", help="no GGUF (quantized) rows")
    args = parser.parse_args()

    from engine.config import Config

    torch.manual_seed(0)
    if args.dry_run:
        device, shapes = torch.device("cpu"), TINY
        config = Config(
            vocab_size=512, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
            head_dim=32, linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2,
            linear_num_value_heads=4, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
        )  # fmt: skip
        contexts, prefill, model_dtype = {"b1 2k": (1, 20), "b32 2k": (3, 20)}, 40, torch.float32
    else:
        if not torch.cuda.is_available():
            print("no CUDA device: run with --dry-run on a CPU", file=sys.stderr)
            return 2
        device, shapes = torch.device("cuda"), REAL
        # The released Qwen3.5-35B-A3B text config (model-qwen35-moe.md section 1); Config's defaults are those values.
        config = Config(
            vocab_size=248320, hidden_size=2048, num_hidden_layers=40, num_attention_heads=16, num_key_value_heads=2,
            head_dim=256, rms_norm_eps=1e-6, rope_theta=1e7, partial_rotary_factor=0.25, linear_conv_kernel_dim=4,
            linear_key_head_dim=128, linear_value_head_dim=128, linear_num_key_heads=16, linear_num_value_heads=32,
            num_experts=256, num_experts_per_tok=8, moe_intermediate_size=512, shared_expert_intermediate_size=512,
        )  # fmt: skip
        contexts = {"b1 2k": (1, 2048), "b1 30k": (1, 30720), "b32 2k": (32, 2048)}
        prefill, model_dtype = 8192, torch.bfloat16
        print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    import triton

    print(
        f"triton {triton.__version__}, TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET', '')}", flush=True
    )
    bench = Bench(device, args.dry_run)
    ceilings = measure_ceilings(bench)
    if not args.skip_kernels:
        kernel_checks(bench, shapes, ceilings)
    results = {} if args.skip_model else model_checks(bench, config, model_dtype, contexts, prefill)
    if not args.skip_gguf:
        # K-quants need rows of 256-multiples: the dry run takes the GGUF fixtures' small shape.
        gguf_config = config if not args.dry_run else Config(
            vocab_size=320, hidden_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=64, linear_key_head_dim=64, linear_value_head_dim=64, linear_num_key_heads=2,
            linear_num_value_heads=4, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=256,
            shared_expert_intermediate_size=256, layer_types=["linear_attention", "full_attention"],
        )  # fmt: skip
        results.update(gguf_checks(bench, gguf_config, model_dtype, contexts))
    text = summary(results)
    if bench.failures:
        text += "\n\ncorrectness FAILURES:\n  " + "\n  ".join(bench.failures)
    if args.dry_run:
        text += "\n\n(dry run: tiny shapes on a CPU through the Triton interpreter; the numbers mean nothing)"
    print(text, flush=True)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "gpu_check.txt").write_text("\n".join(bench.rows) + "\n" + text + "\n")
    return 1 if bench.failures else 0


if __name__ == "__main__":
    sys.exit(main())
