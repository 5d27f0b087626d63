"""A stand-in for CUDA graph capture on CPU tensors (engine/cuda_graphs.py `GraphCapturer`): it records what the
runner asks (pools, warm-ups, captures, replays), and its graphs replay by running the captured step again into
the static output, which is what a CUDA graph computes. For the tests of capture order, the start-up plan and
the graph-vs-eager check, which need no GPU."""

from __future__ import annotations

from collections.abc import Callable

import torch


class FakeGraph:
    def __init__(self, run: Callable[[], torch.Tensor], logits: torch.Tensor, capturer: FakeCapturer) -> None:
        self.run, self.logits, self.capturer = run, logits, capturer

    def replay(self) -> None:
        self.capturer.events.append(("replay", self.logits.shape[0]))
        with torch.inference_mode():  # the step's output is an inference tensor, as on a GPU
            self.logits.copy_(self.run() + self.capturer.replay_error)


class FakeCapturer:
    """`replay_error` is added to every replay's logits: a graph that computes something else."""

    def __init__(self, replay_error: float = 0.0) -> None:
        self.events: list[tuple] = []
        self.replay_error = replay_error

    def supports(self, device: torch.device) -> bool:
        return True

    def new_pool(self, device: torch.device) -> object:
        self.events.append(("pool",))
        return object()

    def warm_up(self, run: Callable[[], torch.Tensor], steps: int, device: torch.device) -> None:
        for _ in range(steps):
            self.events.append(("warm", run().shape[0]))

    def capture(
        self, run: Callable[[], torch.Tensor], pool: object, device: torch.device
    ) -> tuple[FakeGraph, torch.Tensor]:
        logits = run()
        self.events.append(("capture", logits.shape[0], pool))
        return FakeGraph(run, logits, self), logits
