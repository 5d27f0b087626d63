"""An engine's start and end on the device: the decode graphs of every padded batch size are captured while the
LLM is built (never during serving), and `shutdown()` plus dropping the LLM frees the model, the cache, the runner
and the graphs by reference counting alone, with the garbage collector off (on a GPU that is the weights' 65 GiB).

On CPU a fake capturer stands in for CUDA (engine/testing/fake_graphs.py): its "graphs" replay by running
the captured step again into the static output, so the runner's buffers, padding and slots are what is tested."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest
import torch

from engine import LLM, SamplingParams, cuda_graphs
from engine.cuda_graphs import padded_batch_sizes
from engine.testing.fake_graphs import FakeCapturer

PROMPTS = ["Sunny, 24 degrees.", "hi", "Error: permission denied.", "ls -la /tmp"]


def _dead_after_shutdown(holder: list[LLM]) -> dict[str, bool]:
    """Shut down and drop the LLM in `holder` (its only reference) with the gc disabled: which of its parts
    reference counting alone freed."""
    llm = holder.pop()
    runner = llm.engine.runner
    refs = {
        "model": weakref.ref(llm.model),
        "cache": weakref.ref(llm.cache),
        "runner": weakref.ref(runner),
        "graph runner": weakref.ref(runner.graph_runner),
        "engine": weakref.ref(llm.engine),
        "llm": weakref.ref(llm),
    }
    del runner
    gc.collect()
    gc.disable()
    try:
        llm.shutdown()
        del llm
        return {name: ref() is None for name, ref in refs.items()}
    finally:
        gc.enable()


def test_shutdown_frees_model_cache_and_runner_without_gc(tiny_ckpt) -> None:
    holder = [LLM(str(tiny_ckpt), device="cpu", progress=False, max_num_seqs=3, max_model_len=64)]
    holder[0].generate(PROMPTS[:2], SamplingParams(temperature=0, max_tokens=4))
    holder[0].generate(PROMPTS[2], SamplingParams(temperature=0.8, max_tokens=4, seed=3))  # a sampled request
    dead = _dead_after_shutdown(holder)
    assert all(dead.values()), (
        f"kept alive after shutdown, without gc: {[k for k, v in dead.items() if not v]}"
    )


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> FakeCapturer:
    """Every DecodeGraphRunner the engine builds gets this capturer (it captures on CPU tensors)."""
    fake = FakeCapturer()
    monkeypatch.setattr(cuda_graphs, "CudaGraphCapturer", lambda: fake)
    return fake


def _graph_llm(tiny_ckpt, **options) -> LLM:
    return LLM(
        str(tiny_ckpt),
        device="cpu",
        progress=False,
        max_num_seqs=5,
        max_model_len=64,
        static_decode=True,
        **options,
    )


def test_graphs_captured_at_start_up_and_dropped_at_shutdown(tiny_ckpt, fake_cuda: FakeCapturer) -> None:
    capturing_threads: set[str] = set()
    capture = fake_cuda.capture

    def capture_on(run, pool, device):
        capturing_threads.add(threading.current_thread().name)
        return capture(run, pool, device)

    fake_cuda.capture = capture_on
    llm = _graph_llm(tiny_ckpt)
    runner = llm.graph_runner
    assert runner.captured_sizes == padded_batch_sizes(5) == [1, 2, 4, 5]
    assert capturing_threads == {threading.current_thread().name}  # by the constructor, before the loop ran
    captured = [e for e in fake_cuda.events if e[0] == "capture"]
    llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=6, ignore_eos=True))
    llm.generate(PROMPTS[0], SamplingParams(temperature=0.7, max_tokens=3, seed=1))
    assert [e for e in fake_cuda.events if e[0] == "capture"] == captured  # serving captured nothing
    assert {e[1] for e in fake_cuda.events if e[0] == "replay"} >= {1, 4}  # the decodes replayed graphs
    del runner
    holder = [llm]
    del llm
    dead = _dead_after_shutdown(holder)
    assert all(dead.values()), (
        f"kept alive after shutdown, without gc: {[k for k, v in dead.items() if not v]}"
    )


def test_graph_shutdown_drops_graphs_even_while_the_llm_is_kept(tiny_ckpt, fake_cuda: FakeCapturer) -> None:
    llm = _graph_llm(tiny_ckpt)
    assert llm.graph_runner.captured_sizes
    llm.shutdown()
    assert llm.graph_runner.captured_sizes == []


def test_graph_replays_give_the_eager_tokens(tiny_ckpt, fake_cuda: FakeCapturer) -> None:
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    graphs = _graph_llm(tiny_ckpt)
    eager = LLM(str(tiny_ckpt), device="cpu", progress=False, max_num_seqs=5, max_model_len=64)
    try:
        assert [o.outputs[0].token_ids for o in graphs.generate(PROMPTS, params)] == [
            o.outputs[0].token_ids for o in eager.generate(PROMPTS, params)
        ]
    finally:
        graphs.shutdown()
        eager.shutdown()


def test_check_cuda_graphs_leaves_the_cache_as_it_was(tiny_ckpt, fake_cuda: FakeCapturer) -> None:
    llm = _graph_llm(tiny_ckpt)
    try:
        gen = torch.Generator().manual_seed(0)
        for t in (llm.cache.keys, llm.cache.values, llm.cache.conv, llm.cache.recurrent):
            t.normal_(generator=gen)
        before = [t.clone() for t in (llm.cache.keys, llm.cache.values, llm.cache.conv, llm.cache.recurrent)]
        checks = llm.check_cuda_graphs()
        assert [c.batch for c in checks] == [1, 2, 4, 5] and all(c.ok for c in checks), [
            c.describe() for c in checks
        ]
        assert all(c.padded == c.batch for c in checks) and all(c.vs_eager < 1e-3 * c.scale for c in checks)
        after = (llm.cache.keys, llm.cache.values, llm.cache.conv, llm.cache.recurrent)
        assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
        fake_cuda.replay_error = 1.0  # a replay that computes something else fails its row
        assert not any(c.ok for c in llm.check_cuda_graphs([3]))
    finally:
        llm.shutdown()
