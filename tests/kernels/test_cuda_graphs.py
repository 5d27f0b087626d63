"""DecodeGraphRunner on CPU: a passthrough (graphs need CUDA), with the padding rule it uses on a GPU."""

from __future__ import annotations

import pytest
import torch

from engine.cuda_graphs import DecodeGraphRunner


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
