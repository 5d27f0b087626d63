"""One gpu_check call that answers everything: each part in its own process with its own time budget, every row
written to $OUT as it is measured, the table so far printed on SIGTERM.

    bench/gpu_check.sh                       # on a GPU: at most 8 minutes (TOTAL_BUDGET_S)
    bench/gpu_check.sh --dry-run             # on a CPU: the same parts, tiny shapes, the Triton interpreter
    python bench/gpu_check.py --list         # the parts, their budgets and what each answers
    python bench/gpu_check.py --only bf16_decode gguf_decode
    python bench/gpu_check.py --part smoke   # one part in this process (what the parent runs in each child)

Parts, in the order of what their answers are worth: a ~10 s smoke test (one Triton kernel compiled and run, one
CUDA graph captured and replayed); the Triton cache filled from the ahead-of-time compile; bf16 decode b1/b32
through CUDA graphs, each with a graph-vs-eager logits check (then b1 at 30k and an 8k prefill); GGUF Q4_K_M
decode b1/b4/b8/b16/b32, the same check; the Q4_K_M peak memory at a 32k context in a fresh process; the step
loop, greedy and with the checkpoint's default sampling (and the sampler, structured output, session TTFT);
quantized kernels of every GGUF type; the bf16 kernels; the decode profile; forks on one engine.

A CUDA fault or a hang loses only its part: the parent kills a part at its budget (its process group), records
how it ended as the part's own row, and goes on. Rows land in $OUT/gpu_check.jsonl the moment they are measured;
$OUT/gpu_check.txt holds the table, rewritten after every part, and SIGTERM prints the table so far. Exit 1 when
any row is FAIL or TIMEOUT (a figure below its target is reported, not failed).
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path[:0] = [str(BENCH), str(REPO)]

from gpu_check_rows import FAIL, FAILING, OK, PART_ROW, SKIP, TIMEOUT, Row, Rows, read_rows, render  # noqa: E402

TOTAL_BUDGET_S = 480.0  # 8 minutes of a 10-minute device command
GRACE_S = 5.0  # after SIGTERM, before SIGKILL
MIN_START_S = 8.0  # a part is not started with less than this left of the total


@dataclass(frozen=True)
class Part:
    name: str
    entry: str  # "module:function" in bench/, called with a gpu_check_setup.Context
    budget_s: float  # on a GPU
    dry_budget_s: float  # on a CPU (a shared 2-core machine)
    answers: str
    # On a dry run, its Triton kernels through the interpreter (the kernel parts: that is what they check); the
    # whole-model parts run the plain-torch references there (the interpreter takes minutes per forward).
    interpret: bool = False


PARTS = (
    Part(
        "smoke",
        "gpu_check_smoke:smoke",
        15,
        120,
        "one Triton kernel compiled and run, one CUDA graph replayed",
        True,
    ),
    Part("warm", "gpu_check_warm:warm_triton_cache", 45, 30, "the Triton cache filled from the AOT compile"),
    Part("bf16_decode", "gpu_check_models:bf16_decode", 90, 200, "bf16 b1/b32 graph tok/s + graph == eager"),
    Part(
        "gguf_decode", "gpu_check_models:gguf_decode", 70, 200, "Q4_K_M b1/b4/b8/b16/b32 graph tok/s + check"
    ),
    Part("gguf_peak", "gpu_check_models:gguf_peak", 40, 120, "Q4_K_M peak memory at a 32k context"),
    Part("step_loop", "gpu_check_loop:step_loop", 70, 300, "the step loop greedy and sampled, sampler, TTFT"),
    Part(
        "quant_kernels",
        "gpu_check_kernels:quant_kernels",
        55,
        400,
        "quantized kernels of every GGUF type",
        True,
    ),
    Part("bf16_kernels", "gpu_check_kernels:bf16_kernels", 35, 400, "bf16 kernels at the real sizes", True),
    Part("profile", "gpu_check_profile:decode_profile", 30, 200, "where a b1 decode step spends its time"),
    Part("env_fork", "gpu_check_env_fork:env_forks", 30, 200, "forks on one engine (prefix cache, batching)"),
)
assert sum(p.budget_s for p in PARTS) <= TOTAL_BUDGET_S


@dataclass(frozen=True)
class Job:
    """One part as the parent runs it: a command, its budget."""

    name: str
    argv: Sequence[str]
    budget_s: float


class _Terminated(Exception):
    pass


def run_jobs(jobs: Sequence[Job], out_dir: Path, total_budget_s: float, title: str) -> int:
    """Each job in its own process group, one after another, within its budget and what is left of the total;
    its rows in out_dir/gpu_check.jsonl (the child appends them, $GPU_CHECK_ROWS), how it ended as its
    `(part)` row. The table (out_dir/gpu_check.txt) is rewritten after each job; SIGTERM or SIGINT stops the
    job running, records it, prints the table so far and exits 143. Returns 1 if any row fails, else 0."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows_path, table_path = out_dir / "gpu_check.jsonl", out_dir / "gpu_check.txt"
    rows_path.write_text("")
    parent = Rows(rows_path, "")
    deadline = time.monotonic() + total_budget_s
    running: dict[str, subprocess.Popen] = {}

    def on_signal(signum: int, _frame: object) -> None:
        raise _Terminated(signal.Signals(signum).name)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        for job in jobs:
            left = deadline - time.monotonic()
            parent.part = job.name
            if left < MIN_START_S:
                parent.write(
                    Row(
                        job.name,
                        PART_ROW,
                        SKIP,
                        note=f"not started: {left:.0f} s left of {total_budget_s:.0f} s",
                    )
                )
            else:
                parent.write(_run_job(job, min(job.budget_s, left), rows_path, running))
            table_path.write_text(render(read_rows(rows_path), title) + "\n")
    except _Terminated as stop:
        for name, proc in running.items():
            _stop(proc)
            parent.write(Row(name, PART_ROW, TIMEOUT, note=f"stopped by {stop}: the rows so far are kept"))
        table = render(read_rows(rows_path), title + f" (interrupted by {stop})")
        table_path.write_text(table + "\n")
        print(table, flush=True)
        return 143
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    table = render(read_rows(rows_path), title)
    table_path.write_text(table + "\n")
    print("\n" + table, flush=True)
    return 1 if any(r.status in FAILING for r in read_rows(rows_path)) else 0


def _run_job(job: Job, budget_s: float, rows_path: Path, running: dict[str, subprocess.Popen]) -> Row:
    print(f"\n== {job.name} (budget {budget_s:.0f} s) ==", flush=True)
    env = {
        **os.environ,
        "GPU_CHECK_ROWS": str(rows_path),
        "GPU_CHECK_BUDGET": f"{budget_s:.1f}",
        "PYTHONUNBUFFERED": "1",
    }
    start = time.monotonic()
    proc = subprocess.Popen(
        list(job.argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    running[job.name] = proc
    tail: deque[str] = deque(maxlen=60)
    reader = threading.Thread(target=_echo, args=(proc, tail), daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout=budget_s)
    except subprocess.TimeoutExpired:
        _stop(proc)
        running.pop(job.name)
        reader.join(2)
        seconds = time.monotonic() - start
        where = _last_line(tail)
        note = f"killed at its {budget_s:.0f} s budget; the rows so far are kept" + (
            f"; last: {where}" if where else ""
        )
        return Row(job.name, PART_ROW, TIMEOUT, round(seconds, 1), "s", f"<= {budget_s:.0f} s", note)
    running.pop(job.name)  # (on SIGTERM it stays, for run_jobs to stop and record)
    _kill_group(proc)  # whatever the part left running (e.g. compile workers) goes with it
    reader.join(2)
    seconds = time.monotonic() - start
    if code == 0:
        failed = sum(r.part == job.name and r.status in FAILING for r in read_rows(rows_path))
        note = f"{failed} failing rows" if failed else ""
        return Row(
            job.name, PART_ROW, FAIL if failed else OK, round(seconds, 1), "s", f"<= {budget_s:.0f} s", note
        )
    how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
    return Row(
        job.name,
        PART_ROW,
        FAIL,
        round(seconds, 1),
        "s",
        f"<= {budget_s:.0f} s",
        f"{how}: {_error_line(tail)}",
    )


def _echo(proc: subprocess.Popen, tail: deque[str]) -> None:
    for raw in proc.stdout:
        line = raw.decode(errors="replace").rstrip()
        tail.append(line)
        print(line, flush=True)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the part's process group, SIGKILL after the grace period (a hung CUDA call ignores the first)."""
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, GRACE_S)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


_ERROR = re.compile(r"^[A-Za-z_.]*(Error|Exception|Interrupt|Exit)\b")


def _error_line(tail: deque[str]) -> str:
    lines = [line.strip() for line in tail if line.strip()]
    errors = [line for line in lines if _ERROR.match(line)]
    return (errors or lines or ["(no output)"])[-1][:300]


def _last_line(tail: deque[str]) -> str:
    lines = [line.strip() for line in tail if line.strip()]
    return lines[-1][:200] if lines else ""


def run_part(name: str, dry_run: bool) -> int:
    """The child: one part in this process, its rows appended to $GPU_CHECK_ROWS."""
    part = next(p for p in PARTS if p.name == name)
    if dry_run and part.interpret:
        # Before the first triton import: kernels are decorated as interpreted functions at import time.
        os.environ["TRITON_INTERPRET"] = "1"
        os.environ["AW_KERNELS"] = "triton"
    elif dry_run:
        os.environ["AW_KERNELS"] = "torch"
    rows_path = Path(os.environ.get("GPU_CHECK_ROWS") or _out_dir() / "gpu_check.jsonl")
    budget = float(os.environ.get("GPU_CHECK_BUDGET") or (part.dry_budget_s if dry_run else part.budget_s))
    import gpu_check_setup as setup

    rows = Rows(rows_path, name)
    ctx = setup.make_context(rows, dry_run, budget, _out_dir())
    cached = setup.triton_cache_entries()
    module, function = part.entry.split(":")
    with rows.section(name):
        getattr(importlib.import_module(module), function)(ctx)
    after = setup.triton_cache_entries()
    if not dry_run and cached is not None and after is not None:
        rows.info(
            "(triton cache)",
            f"{after - cached} kernels compiled cold in this part",
            after - cached,
            "kernels",
        )
    return 0


def _out_dir() -> Path:
    return Path(os.environ.get("OUT") or "/tmp/gpu_check")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny shapes, Triton interpreter")
    parser.add_argument("--only", nargs="+", metavar="PART", help="run these parts only")
    parser.add_argument("--skip", nargs="+", default=[], metavar="PART", help="leave these parts out")
    parser.add_argument("--part", help="run one part in this process (the parent's child)")
    parser.add_argument(
        "--total", type=float, help=f"total budget in seconds (default {TOTAL_BUDGET_S:.0f} on a GPU)"
    )
    parser.add_argument("--list", action="store_true", help="list the parts")
    args = parser.parse_args()
    names = [p.name for p in PARTS]
    for name in [*(args.only or []), *args.skip, *([args.part] if args.part else [])]:
        if name not in names:
            parser.error(f"no part {name!r}; the parts: {', '.join(names)}")
    if args.list:
        for p in PARTS:
            dry = f"dry run {p.dry_budget_s:.0f} s{', interpreted' if p.interpret else ''}"
            print(f"{p.name:<14} {p.budget_s:>4.0f} s ({dry})  {p.answers}")
        return 0
    if args.part:
        return run_part(args.part, args.dry_run)
    chosen = [p for p in PARTS if (not args.only or p.name in args.only) and p.name not in args.skip]
    flags = ["--dry-run"] if args.dry_run else []
    jobs = [
        Job(p.name, [sys.executable, str(Path(__file__).resolve()), "--part", p.name, *flags],
            p.dry_budget_s if args.dry_run else p.budget_s)
        for p in chosen
    ]  # fmt: skip
    total = args.total or (sum(j.budget_s for j in jobs) if args.dry_run else TOTAL_BUDGET_S)
    title = "gpu_check" + (
        " --dry-run (tiny shapes on a CPU, the kernel parts through the Triton interpreter: figures mean nothing)"
        if args.dry_run
        else ""
    )
    return run_jobs(jobs, _out_dir(), total, title)


if __name__ == "__main__":
    sys.exit(main())
