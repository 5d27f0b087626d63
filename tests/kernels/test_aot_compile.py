"""The ahead-of-time compile check (`engine/kernels/aot`): every Triton kernel the engine launches, compiled for
sm_90/89/86/120 through the engine's own wrappers, fits the card and does not spill on a decode path.

The check runs in a subprocess: this folder's kernels (and Triton's own library) are imported for the interpreter,
and the check needs the compiling `JITFunction`. Its stats are looked up first in the committed seed
(`bench/results/aot_compile_seed.json`, keyed by triton version, kernel source, specialization and target) and the
local cache, so only kernels changed since the seed was written are compiled here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from engine.kernels.aot.capture import KernelSpec, Occurrence
from engine.kernels.aot.check import Row
from engine.kernels.aot.compile import KernelStats, count_global_loads, parse_ptxas_log
from engine.kernels.arch import shared_memory_per_block
from engine.kernels.quant_matmul import tiles
from engine.quant.formats import GGMLType

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "bench" / "results" / "aot_compile_seed.json"


def _python(
    args: list[str], timeout: float, python: str = sys.executable
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "AW_KERNELS")}
    return subprocess.run([python, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_global_loads_are_counted_by_width() -> None:
    ptx = """
        @%p1 ld.global.b8 { %rs1 }, [ %rd1 + 0 ];
        ld.global.L1::evict_last.b16 { %rs2 }, [ %rd2 + 0 ];
        @%p2 ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd3 + 0 ];
        ld.global.nc.v2.f32 {%f1, %f2}, [%rd4];
        ld.global.u8 %rs3, [%rd5];
        ld.shared.b32 %r5, [%r6];
        st.global.b32 [ %rd6 + 0 ], { %r7 };
        ld.global.b64 %rd7, [%rd8];
    """
    assert count_global_loads(ptx) == {"b8": 2, "b16": 1, "b32": 0, "b64": 1, "v2": 1, "v4": 1}


def test_ptxas_log_gives_registers_and_spills() -> None:
    log = (
        "ptxas info    : Compiling entry function '_k' for 'sm_89'\n"
        "ptxas info    : Function properties for _k\n"
        "    912 bytes stack frame, 912 bytes spill stores, 736 bytes spill loads\n"
        "ptxas info    : Used 255 registers, used 1 barriers, 384 bytes smem, 400 bytes cmem[0]\n"
    )
    assert parse_ptxas_log(log) == (255, 912, 912, 736)


def test_launch_configurations_follow_the_cards_shared_memory() -> None:
    """The per-card table, read on a CPU by passing the arch: a [64 x 128] IQ4_XS tile pipelines 2 stages on an
    H100 and 1 on a 99 KB card (an A100's 163 KB takes the consumer row); Q5_K 3 and 2; tiles that fit keep 3."""
    iq4, q5, q8 = (int(k) for k in (GGMLType.IQ4_XS, GGMLType.Q5_K, GGMLType.Q8_0))
    assert [tiles.stages(tiles.LARGE, (iq4,), arch) for arch in (90, 89, 86, 120, 80)] == [2, 1, 1, 1, 1]
    assert [tiles.stages(tiles.LARGE, (q5,), arch) for arch in (90, 89, 86, 120)] == [3, 2, 2, 2]
    assert tiles.stages(tiles.LARGE, (q8,), 89) == 3 and tiles.stages(tiles.MEDIUM, (iq4,), 89) == 3
    assert tiles.stages(tiles.LARGE, (q8, iq4), 90) == 2  # gate and up of different types: the fewer
    config = tiles.launch_config(tiles.LARGE, (iq4,), 89)
    assert config == {"BLOCK_M": 64, "BLOCK_N": 128, "num_warps": 8, "num_stages": 1}
    assert shared_memory_per_block(90) == 232_448 and shared_memory_per_block(120) == 101_376


def _row(arch: int, stats: KernelStats, path: str) -> Row:
    spec = KernelSpec(
        "engine.kernels.x.triton", "_k", arch, (("x_ptr", "*bf16"),), (), (), (("num_warps", 4),)
    )
    return Row(spec, stats, [Occurrence("bf16 scenario", path, (1,))])


def test_the_judgement_names_what_a_card_cannot_run() -> None:
    fits = KernelStats(shared=101_376, registers=64)
    assert _row(89, fits, "prefill").problems() == []
    too_big = KernelStats(shared=102_400, registers=64)
    assert "sm_89 allows 101,376" in _row(89, too_big, "prefill").problems()[0]
    assert _row(90, too_big, "prefill").problems() == []  # an H100 allows 232,448
    spilling = KernelStats(shared=0, registers=255, spill_stores=24, spill_loads=24)
    assert _row(90, spilling, "prefill").problems() == []  # reported in the table, not a failure
    assert "spills on the decode path" in _row(90, spilling, "decode").problems()[0]
    broken = KernelStats(error="CompilationError: at 3:4")
    assert _row(86, broken, "decode").problems() == ["does not compile: CompilationError: at 3:4"]


@pytest.mark.timeout(1800)
def test_the_prefill_kernels_that_overflowed_a_card_fit_it() -> None:
    """A 2,048-token prefill chunk of an IQ4_XS and a Q5_K model on an RTX 4090 (sm_89) and an H100 (sm_90). On
    the previous launch configurations the quantized GEMM and grouped MoE kernels needed 196,736 B (IQ4_XS) and
    106,624 B (Q5_K) of shared memory on sm_89, which allows 101,376, and 241,664 B (IQ4_XS) on sm_90 (232,448);
    the delta rule's state pass needed 102,400 B on sm_89."""
    kernels = [
        "quant_matmul._gemm_kernel",
        "quant_moe._gate_up_kernel",
        "quant_moe._down_kernel",
        "gated_delta_rule._chunk_state_output_kernel",
    ]
    args = ["--quiet", "--seed", str(SEED), "--arch", "89", "90", "--format", "IQ4_XS", "Q5_K"]
    done = _python(
        ["-m", "engine.kernels.aot", *args, "--scenario", "prefill T2048", "--kernel", *kernels], 1700
    )
    assert done.returncode == 0, f"{done.stdout[-6000:]}\n{done.stderr[-12000:]}"
    for arch in ("sm_89", "sm_90"):
        assert f"| {arch} |" in done.stdout


def _compilers() -> list[tuple[str, str]]:
    """(interpreter, its triton version): this one, and each in AW_AOT_PYTHONS (paths joined by os.pathsep; .ci/run
    adds one holding the device image's Triton, 3.6: a kernel's registers and spills depend on the compiler)."""
    found = []
    for python in [sys.executable, *filter(None, os.environ.get("AW_AOT_PYTHONS", "").split(os.pathsep))]:
        probe = subprocess.run(
            [python, "-c", "import triton; print(triton.__version__)"], capture_output=True, text=True
        )
        found.append((python, probe.stdout.strip() or f"unusable: {probe.stderr.strip()[-300:]}"))
    return found


def seed_for(version: str, main: bool) -> Path:
    """The committed seed of a triton version: SEED for the suite's own, a file per version for the others."""
    return SEED if main else SEED.with_name(f"aot_compile_seed_triton-{version}.json")


COMPILERS = _compilers()


@pytest.mark.slow
@pytest.mark.timeout(5400)
@pytest.mark.parametrize(
    ("python", "version"), COMPILERS, ids=[f"triton-{version}" for _, version in COMPILERS]
)
def test_every_kernel_compiles_fits_every_card_and_does_not_spill_on_decode(
    python: str, version: str
) -> None:
    """The whole matrix: bf16 and each GGUF type, decode (batch 1..32, eager and graph, 4k and 32k contexts) and
    prefill (2^k and 2^k + 1 tokens up to 2,048, a chunk at 32k, a mixed step), for sm_90, sm_89, sm_86 and
    sm_120, with each Triton the suite is given. On the code before the per-arch launch configurations this
    failed: the chunked delta rule's state pass (102,400 B on sm_89/120), the quantized prefill GEMM and grouped
    MoE kernels (IQ4_XS 196,736 B and Q5_K 106,624 B on the consumer cards, IQ4_XS 241,664 B on sm_90). With
    Triton 3.6 (the device image's) the decode GEMVs that were clean under 3.9 spilled 4 B to 1 KB on sm_90."""
    assert not version.startswith("unusable"), f"{python}: {version}"
    seed = seed_for(version, python == sys.executable)
    args = ["-m", "engine.kernels.aot", "--quiet", "--seed", str(seed)]
    if python != sys.executable:  # its stats under a cache of its own (keys hold the version anyway)
        args += ["--cache", str(Path(os.environ.get("TMPDIR", "/tmp")) / f"aw-aot-triton-{version}.json")]
    done = _python(args, timeout=5300, python=python)
    assert done.returncode == 0, f"{done.stdout[-6000:]}\n{done.stderr[-12000:]}"
    compiled = re.search(r"\((\d+) in this run", done.stdout)
    assert compiled is not None, done.stdout[-2000:]
    if int(compiled.group(1)):  # each costs CI a compile per run until the seed has it
        writer = "python" if python == sys.executable else python
        warnings.warn(
            f"{compiled.group(1)} kernels are not in {seed.name} and were compiled here: refresh it with "
            f"`{writer} -m engine.kernels.aot --write-seed {seed.relative_to(ROOT)}`",
            stacklevel=1,
        )
