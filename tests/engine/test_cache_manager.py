"""The engine cache has one owner: the cache manager gives the slots and keeps the prefix snapshots within their
budget, the scheduler puts the restores and saves it plans into the step plan, and the runner alone makes the
device copies. These hold the pieces to that without a model: planning writes no device memory, a plan carries its
copies, and the budget's book-keeping holds when steps fail or the device runs out of memory."""

from __future__ import annotations

import pytest
import torch

from engine.cache import Cache
from engine.cache_manager import CacheManager
from engine.config import Config
from engine.model_runner import ModelRunner
from engine.prefix_cache import PrefixCache
from engine.sampling import SamplingParams
from engine.scheduler import Scheduler, StepPlan
from engine.sequence import Sequence

CPU = torch.device("cpu")
START = 7  # stands for `<|im_start|>`
CONFIG = Config(
    vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
    head_dim=16, linear_key_head_dim=8, linear_value_head_dim=8, linear_num_key_heads=2,
    linear_num_value_heads=2, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=8,
    shared_expert_intermediate_size=8, layer_types=["linear_attention", "full_attention"],
)  # fmt: skip
# Two turns: the snapshot points are the two `<|im_start|>` (positions 4 and 9).
PROMPT = [1, 2, 3, 4, START, 5, 6, 8, 9, START, 10, 11]


def _seq(ids: list[int]) -> Sequence:
    return Sequence("r", None, list(ids), SamplingParams(temperature=0, max_tokens=2), None, False)


def _pieces(budget_bytes: int = 2**30, slots: int = 2, batched: int = 64):
    cache = Cache(CONFIG, num_slots=slots, max_len=32, dtype=torch.float32, device=CPU)
    prefix_cache = PrefixCache(budget_bytes, START)
    scheduler = Scheduler(CacheManager(cache, prefix_cache), batched)
    runner = ModelRunner(None, CONFIG, cache, CPU, emittable=CONFIG.vocab_size, static_decode=False)
    return cache, prefix_cache, scheduler, runner


def _step(cache: Cache, scheduler: Scheduler, runner: ModelRunner, plan: StepPlan) -> None:
    """The loop's part without a model: the runner fills the slots, a stand-in forward marks each chunk's
    positions in its slot with the chunk's tokens, the runner takes the snapshots, the scheduler advances."""
    runner.fill_slots(plan.restores)
    for chunk in plan.prefills:
        tokens = torch.tensor(chunk.seq.prompt_ids[chunk.start : chunk.end], dtype=torch.float32)
        cache.keys[:, chunk.seq.slot, :, chunk.start : chunk.end] = tokens[None, None, :, None]
        cache.recurrent[:, chunk.seq.slot] = float(chunk.end)
    scheduler.advance(plan, runner.take_snapshots(plan.saves))


def _device_state(cache: Cache) -> list[torch.Tensor]:
    return [t.clone() for t in (cache.keys, cache.values, cache.conv, cache.recurrent)]


def test_planning_writes_no_device_memory_and_the_plan_carries_the_copies() -> None:
    cache, prefix_cache, scheduler, runner = _pieces(batched=5)
    for t in (cache.keys, cache.values, cache.conv, cache.recurrent):
        t.fill_(3.0)  # stale state from an earlier sequence
    before = _device_state(cache)
    first = _seq(PROMPT)
    scheduler.add(first)
    plan = scheduler.schedule()
    assert all(torch.equal(a, b) for a, b in zip(before, _device_state(cache), strict=True))
    assert [(r.seq, r.snapshot) for r in plan.restores] == [(first, None)]  # a fresh start
    assert [(c.start, c.length) for c in plan.prefills] == [(0, 4)]  # ends at the first snapshot point
    assert [(s.slot, s.tokens) for s in plan.saves] == [(first.slot, tuple(PROMPT[:4]))]
    _step(cache, scheduler, runner, plan)
    assert cache.conv[:, first.slot].eq(0).all()  # the runner started the slot fresh
    assert len(prefix_cache) == 1 and first.snapshot_at == 9
    while first.prefilling:
        _step(cache, scheduler, runner, scheduler.schedule())
    assert len(prefix_cache) == 2 and first.snapshot_at is None

    # the next call repeats the first prompt up to its generation prompt: restored, planned, copied by the runner
    second = _seq(PROMPT[:9] + [START, 12, 13, 14])
    scheduler.add(second)
    before = _device_state(cache)
    plan = scheduler.schedule()
    assert all(torch.equal(a, b) for a, b in zip(before, _device_state(cache), strict=True))
    (restore,) = plan.restores
    assert restore.seq is second and restore.snapshot.tokens == tuple(PROMPT[:9])
    assert second.num_cached == second.num_prefix_hit == 9 and plan.prefills[0].start == 9
    runner.fill_slots(plan.restores)
    assert torch.equal(cache.keys[:, second.slot, :, :9], cache.keys[:, first.slot, :, :9])
    assert cache.recurrent[:, second.slot].eq(9).all()


def test_a_failed_step_fails_the_sequences_it_filled_and_takes_no_snapshot() -> None:
    cache, prefix_cache, scheduler, runner = _pieces(batched=3)
    older, newer = _seq([1, 2, 3, START, 5, 6]), _seq(PROMPT)
    scheduler.add(older)
    scheduler.add(newer)
    plan = scheduler.schedule()
    assert [c.seq for c in plan.prefills] == [older]  # the budget went to the older prompt
    assert plan.sequences == [older, newer]  # newer's slot is filled in this step too
    scheduler.step_failed(plan, RuntimeError("boom"))
    for seq in plan.sequences:
        scheduler.retire(seq)
    assert scheduler.cache_manager.num_free == 2 and len(prefix_cache) == 0
    assert [s.tokens for s in plan.saves] == [tuple(older.prompt_ids[:3])]
    assert prefix_cache.reserve(plan.saves[0].tokens, cache.snapshot_bytes(3))  # released: plannable again


def test_out_of_memory_empties_the_prefix_cache() -> None:
    cache, prefix_cache, scheduler, runner = _pieces()
    seq = _seq(PROMPT)
    scheduler.add(seq)
    while seq.prefilling:
        _step(cache, scheduler, runner, scheduler.schedule())
    assert len(prefix_cache) == 2
    scheduler.add(_seq([20, 21, 22, 23, START, 24]))
    plan = scheduler.schedule()
    scheduler.step_failed(plan, torch.OutOfMemoryError("CUDA out of memory"))
    assert len(prefix_cache) == 0 and prefix_cache.used_bytes == 0

    # a snapshot the device has no memory for: none kept, and the cache gives its memory back
    _, prefix_cache, scheduler, runner = _pieces()
    seq = _seq(PROMPT)
    scheduler.add(seq)
    while seq.prefilling:
        plan = scheduler.schedule()
        if len(prefix_cache) == 1:
            runner.cache.snapshot = _out_of_memory
        _step(runner.cache, scheduler, runner, plan)
    assert len(prefix_cache) == 0


def _out_of_memory(slot: int, tokens: tuple[int, ...]):
    raise torch.OutOfMemoryError("CUDA out of memory")


def test_saves_planned_in_one_step_share_the_budget() -> None:
    size = Cache(CONFIG, 1, 32, torch.float32, CPU).snapshot_bytes(4)
    cache, prefix_cache, scheduler, runner = _pieces(budget_bytes=2 * size, slots=3)
    a, b, c = ([k, k, k, k, START, 1] for k in (20, 21, 22))
    scheduler.add(_seq(a))
    _step(cache, scheduler, runner, scheduler.schedule())
    assert len(prefix_cache) == 1
    for ids in (b, c):
        scheduler.add(_seq(ids))
    plan = scheduler.schedule()
    assert len(plan.saves) == 2  # room for both: a's snapshot goes first, before either copy
    assert prefix_cache.used_bytes == 0 and prefix_cache.stats.evicted == 1
    _step(cache, scheduler, runner, plan)
    assert len(prefix_cache) == 2 and prefix_cache.used_bytes == 2 * size <= prefix_cache.budget_bytes


def test_a_slot_borrowed_for_one_call_comes_back() -> None:
    manager = CacheManager(Cache(CONFIG, 2, 8, torch.float32, CPU), None)
    with pytest.raises(RuntimeError), manager.borrowed_slot() as slot:
        assert slot == 0 and manager.num_free == 1
        raise RuntimeError("the call failed")
    assert manager.num_free == 2
