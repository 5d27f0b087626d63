"""DecodeGraphRunner on CPU: a passthrough (graphs need CUDA), with the padding rule it uses on a GPU; through a
fake capturer, what it asks of CUDA (every padded size at start-up, largest first, thread-local capture, never a
capture in a call) and the graph-vs-eager check."""

from __future__ import annotations

import pytest
import torch

from engine.cuda_graphs import (
    CudaGraphCapturer,
    DecodeGraphRunner,
    compare_graph_with_eager,
    padded_batch_sizes,
)
from engine.testing.fake_graphs import FakeCapturer


def _recording_step(calls: list[tuple[torch.Tensor, ...]], vocab: int = 11):
    def step(input_ids: torch.Tensor, positions: torch.Tensor, slot_ids: torch.Tensor) -> torch.Tensor:
        calls.append((input_ids, positions, slot_ids))
        return torch.randn(input_ids.shape[0], vocab) + input_ids[:, None].float()

    return step


@pytest.mark.parametrize("batch", [1, 3, 65])
def test_cpu_runner_is_a_passthrough(batch: int) -> None:
    calls: list[tuple[torch.Tensor, ...]] = []
    runner = DecodeGraphRunner(_recording_step(calls), pad_slot_id=7)
    ids, pos, slots = torch.randint(0, 100, (batch,)), torch.randint(0, 50, (batch,)), torch.arange(batch)
    logits = runner(ids, pos, slots)
    assert len(calls) == 1 and calls[0][0] is ids and calls[0][1] is pos and calls[0][2] is slots
    assert logits.shape == (batch, 11)
    assert runner.captured_sizes == []


def test_padded_sizes() -> None:
    runner = DecodeGraphRunner(_recording_step([]), pad_slot_id=0, batch_sizes=(4, 1, 2, 8))
    assert [runner.padded_size(b) for b in (1, 2, 3, 4, 5, 8, 9)] == [1, 2, 4, 4, 8, 8, None]
    with pytest.raises(ValueError):
        DecodeGraphRunner(_recording_step([]), pad_slot_id=0, batch_sizes=(0, 2))


def test_disabled_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AW_CUDA_GRAPHS", "0")
    assert not DecodeGraphRunner(_recording_step([]), pad_slot_id=0).enabled
    monkeypatch.setenv("AW_CUDA_GRAPHS", "1")
    assert DecodeGraphRunner(_recording_step([]), pad_slot_id=0).enabled


def test_capture_all_captures_every_padded_size_largest_first() -> None:
    calls: list[tuple[torch.Tensor, ...]] = []
    fake = FakeCapturer()
    runner = DecodeGraphRunner(
        _recording_step(calls), pad_slot_id=7, batch_sizes=padded_batch_sizes(20), capturer=fake
    )
    runner.capture_all(torch.device("cpu"))
    assert runner.captured_sizes == [1, 2, 4, 8, 16, 20]
    captures = [e for e in fake.events if e[0] == "capture"]
    assert [e[1] for e in captures] == [20, 16, 8, 4, 2, 1]  # largest first: smaller ones reuse its pool
    assert len({id(e[2]) for e in captures}) == 1 and fake.events[0] == ("pool",)
    # Every capture is warmed up first, on padding only (token 0, position 0, the scratch slot).
    sizes = [e[1] for e in fake.events if e[0] in ("warm", "capture")]
    assert sizes == [s for size in (20, 16, 8, 4, 2, 1) for s in (size, size, size)]
    assert all(bool((c[0] == 0).all() and (c[1] == 0).all() and (c[2] == 7).all()) for c in calls)
    runner.capture_all(torch.device("cpu"))  # once only
    assert len([e for e in fake.events if e[0] == "capture"]) == 6


@pytest.mark.parametrize("num_slots", [1, 3, 7, 24, 64, 100])
def test_start_up_plan_covers_every_batch(num_slots: int) -> None:
    """No decode batch the cache can hold is left to run eagerly or to be captured later."""
    fake = FakeCapturer()
    runner = DecodeGraphRunner(
        _recording_step([]), pad_slot_id=num_slots, batch_sizes=padded_batch_sizes(num_slots), capturer=fake
    )
    runner.capture_all(torch.device("cpu"))
    assert all(runner.padded_size(b) in runner.captured_sizes for b in range(1, num_slots + 1))
    assert max(runner.captured_sizes) == num_slots


def test_a_call_never_captures() -> None:
    """Capturing lazily beside caller threads is what breaks a capture: an uncaptured size runs eagerly."""
    calls: list[tuple[torch.Tensor, ...]] = []
    fake = FakeCapturer()
    runner = DecodeGraphRunner(_recording_step(calls), pad_slot_id=0, batch_sizes=(1, 2, 4), capturer=fake)
    runner(torch.tensor([5]), torch.tensor([3]), torch.tensor([1]))
    assert fake.events == [] and runner.captured_sizes == [] and len(calls) == 1


def test_replay_pads_and_returns_the_real_rows() -> None:
    calls: list[tuple[torch.Tensor, ...]] = []
    fake = FakeCapturer()
    runner = DecodeGraphRunner(_recording_step(calls), pad_slot_id=9, batch_sizes=(1, 4), capturer=fake)
    runner.capture_all(torch.device("cpu"))
    calls.clear()
    logits = runner(torch.tensor([5, 6, 7]), torch.tensor([3, 4, 5]), torch.tensor([0, 2, 1]))
    assert fake.events[-1] == ("replay", 4) and logits.shape == (3, 11)
    ids, pos, slots = calls[-1]
    assert ids.tolist() == [5, 6, 7, 0] and pos.tolist() == [3, 4, 5, 0] and slots.tolist() == [0, 2, 1, 9]
    runner.reset()
    assert runner.captured_sizes == []


def test_disabled_or_unsupported_device_captures_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeCapturer()
    DecodeGraphRunner(_recording_step([]), pad_slot_id=0, enabled=False, capturer=fake).capture_all(
        torch.device("cpu")
    )
    real = DecodeGraphRunner(_recording_step([]), pad_slot_id=0)  # CUDA's capturer: not on a CPU
    real.capture_all(torch.device("cpu"))
    assert fake.events == [] and real.captured_sizes == []


def test_cuda_capture_is_thread_local(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another thread's CUDA calls during capture (a request making its generator) must not invalidate it."""
    seen: dict[str, object] = {}

    class Graph:
        pass

    class Capture:
        def __init__(self, graph, pool=None, stream=None, capture_error_mode="global") -> None:
            seen.update(graph=graph, pool=pool, mode=capture_error_mode)

        def __enter__(self) -> None:
            return None

        def __exit__(self, *exc) -> None:
            return None

    monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
    monkeypatch.setattr(torch.cuda, "graph", Capture)
    pool = object()
    graph, logits = CudaGraphCapturer().capture(lambda: torch.ones(2, 3), pool, torch.device("cuda"))
    assert seen == {"graph": graph, "pool": pool, "mode": "thread_local"} and logits.shape == (2, 3)


def _stateful_step(state: torch.Tensor):
    """A decode step that, like the model's, advances state in place: running it twice differs from once."""

    def step(input_ids: torch.Tensor, positions: torch.Tensor, slot_ids: torch.Tensor) -> torch.Tensor:
        state[slot_ids] += 1.0
        return state[slot_ids, None] * torch.ones(1, 5) + input_ids[:, None].float()

    return step


@pytest.mark.parametrize(("error", "ok"), [(0.0, True), (0.5, False)])
def test_graph_vs_eager_check(error: float, ok: bool) -> None:
    state = torch.zeros(8)
    fake = FakeCapturer(replay_error=error)
    runner = DecodeGraphRunner(_stateful_step(state), pad_slot_id=7, batch_sizes=(1, 2, 4), capturer=fake)
    runner.capture_all(torch.device("cpu"))
    state.zero_()
    inputs = (torch.tensor([3, 1, 2]), torch.tensor([4, 4, 4]), torch.tensor([0, 1, 2]))
    check = compare_graph_with_eager(
        runner, _stateful_step(state), inputs, lambda: state.clone(), lambda saved: state.copy_(saved)
    )
    assert check.ok is ok and check.batch == 3 and check.padded == 4
    assert check.vs_step == pytest.approx(error) and check.vs_eager == pytest.approx(error)
    assert state[:3].tolist() == [0.0, 0.0, 0.0]  # the state each run started from is back
    assert ("ok" if ok else "FAIL") in check.describe()
