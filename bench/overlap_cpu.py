"""CPU benchmark of the overlap scheduler's order (engine/llm_engine.py): when does the host read step k's tokens,
relative to the launch of step k + 1? Not a test.

Two loops on the same engine, measured in this run, both with `overlap` on:
* device tokens (the engine as it is): step k's tokens stay on the device as step k + 1's input ids, and the host
  reads their pinned copy only when it settles step k, after step k + 1 is launched;
* the previous path (the baseline): the same loop with the sampler's host read put back where it was, right
  after sampling (so before step k + 1 is planned and launched), and the next decode's ids uploaded from those
  host ints.

Per step: the bubble = launch of step k + 1 (its first forward called, inputs built) minus the moment step k's
tokens are on the host. On a GPU the host read
waits for the device to finish step k, so a positive bubble is device idle time (planning, input building, Python
launch overhead with nothing queued); a negative one means step k + 1 was already queued when the host read step
k (the device idles only if the host's work per step exceeds the device's). Also printed: the host time between
two launches (what the device's step must exceed for no idle at all) and tok/s (on CPU nothing runs
asynchronously, so they should match: the order costs nothing here).

    .venv/bin/python bench/overlap_cpu.py [--batch 1 8] [--tokens 48] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from engine import LLM, SamplingParams  # noqa: E402
from engine.forward_batch import HostCopy, to_device  # noqa: E402
from engine.model_runner import SampledTokens  # noqa: E402
from engine.testing.tiny_checkpoint import make_tiny_checkpoint  # noqa: E402


class Timeline:
    """Launch times and host-read times by step, for one generate call."""

    def __init__(self) -> None:
        self.launches: dict[int, float] = {}
        self.reads: dict[int, float] = {}

    def bubbles_ms(self) -> list[float]:
        return [
            (self.launches[k + 1] - read) * 1e3 for k, read in self.reads.items() if k + 1 in self.launches
        ]

    def launch_gaps_ms(self) -> list[float]:
        steps = sorted(self.launches)
        return [(self.launches[k + 1] - self.launches[k]) * 1e3 for k in steps if k + 1 in self.launches]


def instrument(llm: LLM, baseline: bool) -> Callable[[], Timeline]:
    """Record launches and host reads; with `baseline`, read each step's tokens in the sampler, as before."""
    engine, runner = llm.engine, llm.engine.runner
    timeline = [Timeline()]
    sample = runner.sample
    step_of: dict[int, int] = {}
    tolist = SampledTokens.tolist

    def stamp_launch(module: torch.nn.Module, inputs: tuple) -> None:
        # The step's first forward call, its inputs built: where its first kernel is queued.
        timeline[0].launches.setdefault(engine.num_steps, time.perf_counter())

    def sampled(seqs, logits, processor) -> SampledTokens:  # noqa: ANN001
        tokens = sample(seqs, logits, processor)
        step = engine.num_steps
        if baseline:
            host = tokens.tolist()  # the sampler's host read, where the previous loop made it
            timeline[0].reads[step] = time.perf_counter()
            ids = to_device([host], tokens.ids.device)[0]  # and the next decode's ids, uploaded from ints
            return SampledTokens(tokens.seqs, ids, HostCopy(ids), tokens.cached)
        step_of[id(tokens)] = step
        return tokens

    def timed_tolist(self: SampledTokens) -> list[int]:
        values = tolist(self)
        step = step_of.pop(id(self), None)
        if step is not None:
            timeline[0].reads[step] = time.perf_counter()
        return values

    runner.model.register_forward_pre_hook(stamp_launch)
    runner.sample = sampled
    SampledTokens.tolist = timed_tolist  # type: ignore[method-assign]

    def take() -> Timeline:
        done, timeline[0] = timeline[0], Timeline()
        return done

    return take


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(f"# torch {torch.__version__}, {args.threads} threads, load average {load}")
    print("# model: the tiny random checkpoint (engine/tiny_model.py), CPU, eager decode, overlap on")
    os.environ["AW_OVERLAP_SCHEDULE"] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        path = make_tiny_checkpoint(tmp, seed=0)
        llms = {
            name: LLM(
                path.as_posix(), device="cpu", progress=False, max_num_seqs=max(args.batch), max_model_len=256
            )
            for name in ("previous path", "device tokens")
        }
    takes = {name: instrument(llm, baseline=name == "previous path") for name, llm in llms.items()}
    params = SamplingParams(
        temperature=0.6, top_k=20, top_p=0.95, max_tokens=args.tokens, ignore_eos=True, seed=1
    )
    header = f"{'batch':>5} {'loop':<14} {'bubble median ms':>17} {'bubble p90':>11} {'launch gap ms':>14} {'tok/s':>8}"
    print(header)
    for batch in args.batch:
        prompts = [f"request {i}: the world model answers" for i in range(batch)]
        for llm in llms.values():
            llm.generate(prompts, params)  # warm-up
        for take in takes.values():
            take()
        bubbles = {name: [] for name in llms}
        gaps = {name: [] for name in llms}
        rates = {name: [] for name in llms}
        for repeat in range(args.repeats):  # the two loops interleaved: the machine's load hits both alike
            for name in sorted(llms, reverse=repeat % 2 == 1):
                started = time.perf_counter()
                outputs = llms[name].generate(prompts, params)
                elapsed = time.perf_counter() - started
                timeline = takes[name]()
                bubbles[name] += timeline.bubbles_ms()
                gaps[name] += timeline.launch_gaps_ms()
                rates[name].append(sum(len(o.outputs[0].token_ids) for o in outputs) / elapsed)
        rows = {}
        for name in llms:
            b = bubbles[name]
            rows[name] = (statistics.median(b), _p90(b), statistics.median(gaps[name]), max(rates[name]))
            median, p90, gap, rate = rows[name]
            print(f"{batch:>5} {name:<14} {median:>17.3f} {p90:>11.3f} {gap:>14.3f} {rate:>8.0f}")
        old, new = rows["previous path"], rows["device tokens"]
        print(
            f"{batch:>5} device idle per step (positive bubble): previous {max(0.0, old[0]):.3f} ms, "
            f"device tokens {max(0.0, new[0]):.3f} ms (ratio {max(0.0, new[0]) / max(old[0], 1e-9):.2f}); "
            f"step k + 1 launched {-new[0]:.3f} ms before step k's host read; tok/s ratio {new[3] / old[3]:.2f}"
        )
    for llm in llms.values():
        llm.shutdown()


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


if __name__ == "__main__":
    main()
