"""gpu_check parts on single kernels: every quantized GEMV/GEMM and MoE kernel for each GGUF type (Q4_K, Q5_K,
Q6_K, Q8_0, IQ4_XS, MXFP4) against its torch reference and its floor, then the bf16 kernels at the real sizes
(hidden 2048, 256 experts top-8, expert intermediate 512, 32 value / 16 key heads of 128, conv dim 8192 width 4).
Error = relative RMS. Floor = max(bytes / copy bandwidth, flops / bf16 matmul rate), both ceilings measured first
on the device (datasheet: 4.8 TB/s, 989 TFLOP/s). Inputs rotate where they would otherwise sit in L2."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
from gpu_check_setup import Context, gguf_config

from engine.kernels.causal_conv1d import reference as conv_ref
from engine.kernels.decode_attention import reference as attn_ref
from engine.kernels.fused_moe import reference as moe_ref
from engine.kernels.gated_delta_rule import reference as gdr_ref
from engine.kernels.gated_rms_norm import reference as gated_ref
from engine.kernels.qk_norm_rope import reference as rope_ref
from engine.kernels.rms_norm import reference as rms_ref
from engine.kernels.router_topk import reference as router_ref

DATASHEET_BW = 4.8e12
DATASHEET_FLOPS = 989e12


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
    """The kernel checks' view of a part: correctness and timing lines become rows."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.device = ctx.device
        self.dry_run = ctx.dry_run

    def section(self, name: str):  # noqa: ANN201
        return self.ctx.rows.section(name)

    def time_ms(self, fn: Callable[[], object], reps: int = 50) -> float:
        return self.ctx.time_ms(fn, rep_ms=max(reps, 25))

    def verdict(self, name: str, ok: bool, note: str) -> None:
        self.ctx.rows.check(name, ok, note)

    def check(self, name: str, actual: torch.Tensor, expected: torch.Tensor, bound: float) -> None:
        a, e = actual.double(), expected.double()
        finite = bool(torch.isfinite(a).all())
        err = ((a - e).norm() / e.norm().clamp_min(1e-30)).item() if finite else float("inf")
        self.verdict(name, err < bound, f"rel RMS err {err:.2e} (bound {bound:.0e})")

    def timed(self, name: str, fn: Callable[[], object], nbytes: float, flops: float, ceil: Ceilings) -> None:
        ms = self.time_ms(fn)
        floor_ms = max(nbytes / ceil.bandwidth, flops / ceil.flops) * 1e3
        note = (
            f"floor {floor_ms * 1e3:.1f} us, x{ms / max(floor_ms, 1e-12):.1f}; "
            f"{nbytes / (ms * 1e-3) / 1e9:,.0f} GB/s, {flops / (ms * 1e-3) / 1e12:.1f} TFLOP/s"
        )
        self.ctx.rows.info(name, note, ms * 1e3, "us")


def quant_kernels(ctx: Context) -> None:
    bench = Bench(ctx)
    quant_checks(bench, gguf_config(ctx.dry_run), ctx.dtype)


def bf16_kernels(ctx: Context) -> None:
    bench = Bench(ctx)
    ceilings = measure_ceilings(bench)
    source = "measured" if ctx.device.type == "cuda" else "the datasheet's (dry run)"
    figures = f"copy {ceilings.bandwidth / 1e12:.2f} TB/s, bf16 matmul {ceilings.flops / 1e12:.0f} TFLOP/s"
    ctx.rows.info("ceilings", f"{source}: {figures}")
    kernel_checks(bench, TINY if ctx.dry_run else REAL, ceilings)


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
    return Ceilings(bw, flops)


QUANT_TYPES = ("Q4_K", "Q5_K", "Q6_K", "Q8_0", "IQ4_XS", "MXFP4")


def quant_checks(bench: Bench, config, dtype: torch.dtype) -> None:
    """Each GGUF type's quantized matmul (decode T=1, the batch-32 band, a prefill GEMM) and grouped MoE (T=1 and
    32, gate/up/down of that type; then Q4_K_M's own mix, Q4_K/Q4_K/Q6_K) against the torch references, with
    random blocks made on the device (engine/testing/quant_recipe.py)."""
    from engine.kernels.quant_matmul import quant_matmul
    from engine.kernels.quant_matmul.reference import quant_matmul as quant_matmul_reference
    from engine.quant.formats import GGMLType, row_bytes
    from engine.testing.quant_recipe import random_blocks

    dev = bench.device
    h = config.hidden_size
    ceil = Ceilings(bandwidth=4.0e12, flops=7.0e14) if dev.type == "cuda" else Ceilings(2e10, 1e11)
    bound = 2e-2 if dtype != torch.float32 else 1e-4
    for kind in (GGMLType[name] for name in QUANT_TYPES):
        rows = config.linear_conv_dim
        with bench.section(f"quant_matmul {kind.name}"):
            blocks = random_blocks(kind, rows, h, h**-0.5, seed=int(kind), device=dev)
            for tokens in (1, 32, 512 if dev.type == "cuda" else 8):
                x = torch.randn(tokens, h, device=dev, dtype=dtype)
                bench.check(f"quant_matmul {kind.name} [{tokens}x{h}]x[{rows}]", quant_matmul(x, blocks, int(kind), h),
                            quant_matmul_reference(x, blocks, int(kind), h), bound)  # fmt: skip
                nbytes = rows * row_bytes(kind, h) + x.numel() * x.element_size()
                bench.timed(f"quant_matmul {kind.name} T={tokens}", lambda x=x, b=blocks, k=int(kind): quant_matmul(x, b, k, h),
                            nbytes, 2 * tokens * rows * h, ceil)  # fmt: skip
    for kinds in [(name, name, name) for name in QUANT_TYPES] + [("Q4_K", "Q4_K", "Q6_K")]:
        with bench.section(f"quant_moe {'/'.join(kinds)}"):
            quant_moe_rows(bench, config, dtype, tuple(GGMLType[k] for k in kinds), ceil, bound)


def quant_moe_rows(
    bench: Bench, config, dtype: torch.dtype, kinds: tuple, ceil: Ceilings, bound: float
) -> None:
    from engine.kernels.quant_moe import quant_moe
    from engine.kernels.quant_moe.reference import quant_moe as quant_moe_reference
    from engine.quant.formats import row_bytes
    from engine.testing.quant_recipe import random_blocks

    dev, h, inter = bench.device, config.hidden_size, config.moe_intermediate_size
    e, k = config.num_experts, config.num_experts_per_tok
    gate_kind, up_kind, down_kind = kinds
    gate = random_blocks(gate_kind, (e, inter), h, h**-0.5, 1, dev)
    up = random_blocks(up_kind, (e, inter), h, h**-0.5, 2, dev)
    down = random_blocks(down_kind, (e, h), inter, inter**-0.5, 3, dev)
    label = "/".join(kind.name for kind in kinds)
    for tokens in (1, 32) if dev.type == "cuda" else (1, 4):  # the interpreter: minutes at 32
        x = torch.randn(tokens, h, device=dev, dtype=dtype)
        weights = torch.rand(tokens, k, device=dev).softmax(-1).to(dtype)
        ids = torch.stack([torch.randperm(e, device=dev)[:k] for _ in range(tokens)])
        args = (x, gate, int(gate_kind), up, int(up_kind), down, int(down_kind), weights, ids)
        bench.check(f"quant_moe {label} T={tokens}", quant_moe(*args), quant_moe_reference(*args), bound)
        touched = min(e, tokens * k) * (
            inter * (row_bytes(gate_kind, h) + row_bytes(up_kind, h)) + h * row_bytes(down_kind, inter)
        )
        bench.timed(
            f"quant_moe {label} T={tokens}",
            lambda a=args: quant_moe(*a),
            touched,
            6 * tokens * k * h * inter,
            ceil,
        )


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
            bench.verdict(
                f"router_topk ids T={tokens}", same > 0.99, f"{same:.4f} of picks equal (bf16 ties aside)"
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
