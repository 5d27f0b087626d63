"""The capture-safe decode step (what a CUDA graph replays) computes the same logits and cache updates as the
eager decode step, on CPU: several batch sizes, padded rows, mixed context lengths, scattered slots."""

from __future__ import annotations

import copy

import pytest
import torch

from engine import LLM, SamplingParams
from engine.cache import Cache
from engine.forward_batch import ForwardBatch

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def small_llm(tiny_ckpt) -> LLM:
    """A short cache: the static step attends over all of it."""
    return LLM(str(tiny_ckpt), device="cpu", progress=False, max_num_seqs=7, max_model_len=48)


def _prefill(llm: LLM, cache: Cache, slots: list[int], prompts: list[torch.Tensor]) -> None:
    ids = torch.cat(prompts)
    batch = ForwardBatch.build(slots, [0] * len(slots), [len(p) for p in prompts], CPU)
    llm.model(ids, batch, cache)


def _live_state(cache: Cache, slots: list[int]) -> list[torch.Tensor]:
    rows = torch.tensor(slots)
    return [t[:, rows] for t in (cache.keys, cache.values, cache.conv, cache.recurrent)]


@pytest.mark.parametrize(
    ("slots", "lengths", "padded_size"),
    [
        ([2], [7], 1),
        ([0, 1, 2], [5, 17, 9], 3),  # consecutive slots: the eager step uses cache views
        ([0, 1, 2], [5, 17, 9], 4),
        ([4, 0, 6, 3, 1], [5, 17, 9, 30, 2], 8),  # scattered slots: the eager step gathers and scatters
        ([1, 5], [12, 12], 2),  # equal lengths: the eager step needs no mask
    ],
)
def test_static_decode_step_equals_eager_step(
    small_llm: LLM, slots: list[int], lengths: list[int], padded_size: int
) -> None:
    tiny_llm = small_llm
    gen = torch.Generator().manual_seed(sum(lengths))
    prompts = [torch.randint(0, 300, (n,), generator=gen) for n in lengths]
    eager_cache = tiny_llm.cache
    for slot in range(eager_cache.num_slots + 1):  # stale data in every slot must not leak into attention
        for t in (eager_cache.keys, eager_cache.values, eager_cache.conv):
            t[:, slot].normal_(generator=gen)
    static_cache = copy.deepcopy(eager_cache)
    _prefill(tiny_llm, eager_cache, slots, prompts)
    _prefill(tiny_llm, static_cache, slots, prompts)

    batch = len(slots)
    pad = padded_size - batch
    starts = list(lengths)
    ids = torch.stack([p[-1] for p in prompts])
    for _ in range(4):
        eager = tiny_llm.model(ids, ForwardBatch.build(slots, starts, [1] * batch, CPU), eager_cache)
        # The padded rows are what DecodeGraphRunner feeds a graph: token 0, position 0, the scratch slot.
        static = tiny_llm.model.decode_step(
            torch.cat([ids, torch.zeros(pad, dtype=torch.int64)]),
            torch.tensor(starts + [0] * pad),
            torch.tensor(slots + [static_cache.pad_slot] * pad),
            static_cache,
        )
        assert static.shape == (padded_size, tiny_llm.config.vocab_size)
        # Padding changes the row count of every GEMM, which may round differently (fp32 GEMMs are not batch
        # invariant): then 1e-5 is relative to the logit scale.
        atol = 1e-5 * (1.0 if pad == 0 else max(1.0, float(eager.abs().max())))
        torch.testing.assert_close(static[:batch], eager, rtol=0, atol=atol)
        ids = eager.argmax(-1)
        starts = [s + 1 for s in starts]
    for ours, ref in zip(_live_state(static_cache, slots), _live_state(eager_cache, slots), strict=True):
        torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4)


def test_static_decode_generation_equals_eager(tiny_ckpt) -> None:
    """Through the LLM's scheduling loop and the graph runner (a passthrough on CPU)."""
    prompts = ["Sunny, 24 degrees.", "hi", "Error: permission denied. The command exited with status 1."]
    params = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)
    outputs = []
    for static in (False, True):
        llm = LLM(
            str(tiny_ckpt),
            device="cpu",
            progress=False,
            max_num_seqs=3,
            max_model_len=64,
            static_decode=static,
        )
        assert llm.static_decode is static and llm.graph_runner.pad_slot_id == llm.cache.num_slots
        outputs.append([o.outputs[0].token_ids for o in llm.generate(prompts, params)])
    assert outputs[0] == outputs[1]


def test_scratch_slot_is_never_handed_out(tiny_ckpt) -> None:
    llm = LLM(str(tiny_ckpt), device="cpu", progress=False, max_num_seqs=2, max_model_len=32)
    taken = {llm.cache_manager.take_slot() for _ in range(llm.cache_manager.num_free)}
    assert llm.cache.pad_slot not in taken and llm.cache.keys.shape[1] == llm.cache.num_slots + 1
