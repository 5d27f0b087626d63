"""The step loop serves many callers at once: continuous batching, chunked prefill, the hybrid prefix cache,
cancellation, limits. Everything here is about results (tokens, logits, slots); no assertion depends on speed."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from engine import LLM, SamplingParams
from engine.cache_manager import CacheManager
from engine.forward_batch import ForwardBatch
from engine.llm import PromptTooLong
from engine.prefix_cache import PrefixCache
from engine.testing.tiny_checkpoint import make_tiny_checkpoint

CHAT = [
    {"role": "system", "content": "You simulate tools. " * 20},
    {"role": "user", "content": 'Action: {"name": "read_file", "arguments": {"path": "/tmp/notes.txt"}}'},
]
PROMPTS = [
    "The world model simulates tools",
    "Action: read the file",
    "Error: permission denied.",
    "Sunny, 24 degrees. Wind from the west",
    "def main():",
    "### Turn 1",
    "Environment Observation: the file was created.",
    "Let me think about what the tool would return.",
]


def _params(i: int) -> SamplingParams:
    """Greedy and seeded requests alternate."""
    if i % 2 == 0:
        return SamplingParams(temperature=0, max_tokens=12 + i, ignore_eos=True)
    return SamplingParams(
        temperature=0.9, top_p=0.95, top_k=40, seed=100 + i, max_tokens=12 + i, ignore_eos=True
    )


def _in_threads(fns) -> list:
    results: list = [None] * len(fns)
    errors: list[BaseException] = []
    start = threading.Barrier(len(fns))

    def run(i: int) -> None:
        try:
            start.wait()
            results[i] = fns[i]()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    return results


@pytest.fixture(scope="module")
def fresh_llm(tiny_ckpt: Path):
    """A private engine (the shared `tiny_llm` keeps prefix snapshots from other tests)."""
    llm = LLM(str(tiny_ckpt), device="cpu", progress=False, max_num_batched_tokens=64)
    yield llm
    llm.shutdown()


def test_concurrent_callers_get_the_tokens_they_get_alone(fresh_llm: LLM) -> None:
    alone = [fresh_llm.generate(p, _params(i))[0].outputs[0].token_ids for i, p in enumerate(PROMPTS)]
    engine = fresh_llm.engine
    steps_before = engine.num_steps
    together: list = [None] * len(PROMPTS)

    def call(i: int) -> None:
        together[i] = fresh_llm.generate(PROMPTS[i], _params(i))[0].outputs[0].token_ids

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(PROMPTS))]
    with engine.lock:  # hold the loop between steps until every caller has submitted (an event, not a clock)
        for t in threads:
            t.start()
        while len(engine._inbox) + len(engine.scheduler.waiting) < len(PROMPTS):
            threading.Event().wait(0.001)
    for t in threads:
        t.join(120)
    assert together == alone
    # batched: far fewer steps than the 8 requests' tokens one after another
    assert engine.num_steps - steps_before < sum(len(t) for t in alone) // 2
    assert fresh_llm.cache_manager.num_free == fresh_llm.cache_manager.num_slots


def test_requests_beyond_the_slots_wait_in_order(tiny_ckpt: Path) -> None:
    llm = LLM(str(tiny_ckpt), device="cpu", progress=False, max_num_seqs=2, enable_prefix_caching=False)
    try:
        alone = [llm.generate(p, _params(i))[0].outputs[0].token_ids for i, p in enumerate(PROMPTS[:6])]
        outs = llm.generate(PROMPTS[:6], [_params(i) for i in range(6)])
        assert [o.outputs[0].token_ids for o in outs] == alone
        assert all(o.outputs[0].finish_reason == "length" for o in outs)
        assert llm.cache_manager.num_free == 2
    finally:
        llm.shutdown()


def test_cancelling_one_of_eight_streams_leaves_the_others_unchanged(fresh_llm: LLM) -> None:
    # The cancelled stream may run on past its cancel by as many steps as its consumer lags (the machine's speed):
    # 200 tokens, so that it is still running when the cancel lands, however loaded the machine.
    params = [
        SamplingParams(temperature=0, max_tokens=200 if i == 3 else 20, ignore_eos=True)
        for i in range(len(PROMPTS))
    ]
    alone = [fresh_llm.generate(p, params[i])[0].outputs[0].token_ids for i, p in enumerate(PROMPTS)]
    cancel = threading.Event()

    def stream(i: int) -> tuple[list[int], str | None]:
        ids: list[int] = []
        finish = None
        for delta in fresh_llm.generate_stream(PROMPTS[i], params[i], stop=cancel if i == 3 else None):
            ids += delta.token_ids
            finish = delta.finish_reason
            if i == 3 and len(ids) >= 3:
                cancel.set()
        return ids, finish

    results = _in_threads([(lambda i=i: stream(i)) for i in range(8)])
    for i, (ids, finish) in enumerate(results):
        if i == 3:
            assert finish == "abort" and len(ids) < 200 and ids == alone[3][: len(ids)]
        else:
            assert (ids, finish) == (alone[i], "length")
    assert fresh_llm.cache_manager.num_free == fresh_llm.cache_manager.num_slots


def test_stop_check_is_honoured_at_the_next_step(fresh_llm: LLM) -> None:
    calls = []

    def stop() -> bool:  # evaluated by the loop once per step, before it plans
        calls.append(1)
        return len(calls) > 5

    out = fresh_llm.generate(
        "Action: read the file", SamplingParams(temperature=0, max_tokens=500), stop=stop
    )
    completion = out[0].outputs[0]
    assert completion.finish_reason == "abort" and len(completion.token_ids) == 5
    assert fresh_llm.cache_manager.num_free == fresh_llm.cache_manager.num_slots


def test_prompt_too_long_fails_alone(fresh_llm: LLM) -> None:
    with pytest.raises(PromptTooLong, match="max_model_len"):
        fresh_llm.generate([1] * fresh_llm.cache.max_len, SamplingParams(max_tokens=1))
    out = fresh_llm.generate("hello", SamplingParams(temperature=0, max_tokens=3, ignore_eos=True))
    assert len(out[0].outputs[0].token_ids) == 3


def test_a_failing_step_fails_its_requests_and_the_loop_serves_on(fresh_llm: LLM, monkeypatch) -> None:
    runner = fresh_llm.engine.runner
    real = runner.prefill

    def broken(chunks):
        raise RuntimeError("injected kernel failure")

    monkeypatch.setattr(runner, "prefill", broken)
    with pytest.raises(RuntimeError, match="injected kernel failure"):
        fresh_llm.generate("hello", SamplingParams(max_tokens=3))
    monkeypatch.setattr(runner, "prefill", real)
    out = fresh_llm.generate("hello", SamplingParams(temperature=0, max_tokens=3, ignore_eos=True))
    assert len(out[0].outputs[0].token_ids) == 3
    assert fresh_llm.cache_manager.num_free == fresh_llm.cache_manager.num_slots


# -- chunked prefill ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def long_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_checkpoint(tmp_path_factory.mktemp("long"), seed=3, max_position_embeddings=32768)


def test_a_30k_prompt_prefills_in_chunks_while_others_decode(long_ckpt: Path) -> None:
    llm = LLM(
        str(long_ckpt),
        device="cpu",
        progress=False,
        max_model_len=32768,
        max_num_batched_tokens=4096,
        enable_prefix_caching=False,
    )
    try:
        events: list[tuple[str, int, bool]] = []  # (request, tokens so far, finished), in the loop's order
        chunks: list[list[int]] = []
        real_prefill = llm.engine.runner.prefill

        def recording_prefill(plan_chunks):
            chunks.append([c.length for c in plan_chunks])
            return real_prefill(plan_chunks)

        llm.engine.runner.prefill = recording_prefill
        short_started = threading.Event()

        def sink_for(name: str):
            def sink(item) -> None:
                assert not isinstance(item, BaseException), item
                events.append((name, item.num_generated, item.finished))
                if name == "short":
                    short_started.set()

            return sink

        short = llm._make_sequences(
            ["Action: read the file"],
            SamplingParams(temperature=0, max_tokens=8, ignore_eos=True),
            None,
            sink=sink_for("short"),
        )[0]
        long_prompt = (llm.encode("Environment Observation: the file was created. ") * 3000)[:30000]
        long = llm._make_sequences(
            [long_prompt],
            SamplingParams(temperature=0, max_tokens=2, ignore_eos=True),
            None,
            sink=sink_for("long"),
        )[0]
        llm.engine.submit(short)
        assert short_started.wait(60)
        llm.engine.submit(long)
        deadline = threading.Event()
        while not (short.finished and long.finished):
            deadline.wait(0.05)
        long_chunks = [c[-1] for c in chunks if c and sum(c) > 1]
        assert sum(long_chunks) >= 30000 - 1 and len(long_chunks) >= 8  # 30k in <= 4096-token chunks
        assert max(long_chunks) <= 4096
        first_long = next(i for i, e in enumerate(events) if e[0] == "long")
        short_done = next(i for i, e in enumerate(events) if e[0] == "short" and e[2])
        assert short_done < first_long, "the short request should finish while the long prompt loads"
        assert short.output_ids and len(long.output_ids) == 2
    finally:
        llm.shutdown()


# -- the prefix cache -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module", params=["ends_in_attention", "ends_in_deltanet"])
def hybrid_llm(request, tmp_path_factory: pytest.TempPathFactory):
    layers = {
        "ends_in_attention": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
        "ends_in_deltanet": ["full_attention", "linear_attention", "full_attention", "linear_attention"],
    }[request.param]
    ckpt = make_tiny_checkpoint(tmp_path_factory.mktemp(request.param), seed=5, layer_types=layers)
    llm = LLM(str(ckpt), device="cpu", progress=False, max_num_batched_tokens=48)
    assert [layer.is_full_attention for layer in llm.model.model.layers] == [
        t == "full_attention" for t in layers
    ]
    yield llm
    llm.shutdown()


def _restored_logits(llm: LLM, ids: list[int], prefix: int) -> torch.Tensor:
    """Keep the state after `prefix` tokens, restore it into another slot, run the rest from there: the copies
    the runner makes when a step plan saves and restores (`Cache.snapshot`, `Cache.restore`)."""

    def run() -> torch.Tensor:
        cache, model, slots = llm.cache, llm.model, llm.cache_manager
        pc = PrefixCache(2**30)
        with slots.borrowed_slot() as first, slots.borrowed_slot() as second:
            cache.reset(first)
            ids_t = torch.tensor(ids)
            # the prefix in two chunks, as chunked prefill would run it
            half = prefix // 2
            model(ids_t[:half], ForwardBatch.build([first], [0], [half], llm.device), cache)
            model(ids_t[half:prefix], ForwardBatch.build([first], [half], [prefix - half], llm.device), cache)
            tokens = tuple(ids[:prefix])
            assert pc.reserve(tokens, cache.snapshot_bytes(prefix))
            pc.keep(cache.snapshot(first, tokens))
            snapshot = pc.lookup(ids)
            assert snapshot is not None and snapshot.length == prefix
            cache.restore(snapshot, second)
            rest = len(ids) - prefix
            batch = ForwardBatch.build([second], [prefix], [rest], llm.device)
            return model(ids_t[prefix:], batch, cache, all_logits=True)

    return llm.engine.call(run, needs_slot=True)


@pytest.mark.parametrize("prefix", [64, 70, 128])  # on a delta-rule chunk edge, inside a chunk, two chunks
def test_restored_prefix_logits_equal_a_full_recompute(hybrid_llm: LLM, prefix: int) -> None:
    ids = hybrid_llm.encode(hybrid_llm.render_chat(CHAT))[:150]
    assert len(ids) == 150
    full = hybrid_llm.logits(ids)[prefix:]
    restored = _restored_logits(hybrid_llm, ids, prefix)
    rel = (restored - full).norm() / full.norm()
    assert rel <= 1e-4, rel


def test_multi_turn_chat_reuses_the_previous_call(hybrid_llm: LLM) -> None:
    llm = hybrid_llm
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    conversation = list(CHAT)
    first_prompt = llm.encode(llm.render_chat(conversation))
    first = llm.chat(conversation, params)[0]
    conversation += [
        {"role": "assistant", "content": "Environment Observation: the file holds 3 lines."},
        {"role": "user", "content": 'Action: {"name": "list_dir", "arguments": {"path": "/tmp"}}'},
    ]
    second = llm.chat(conversation, params)[0]
    generation_prompt = max(
        i for i, t in enumerate(first_prompt) if t == llm.processor.token_id("<|im_start|>")
    )
    assert first.num_cached_tokens in (0, generation_prompt)  # another test may have run this prompt first
    assert second.num_cached_tokens == generation_prompt
    assert second.prompt_token_ids[:generation_prompt] == first_prompt[:generation_prompt]
    # a hit never changes results: the same call with the cache off
    no_cache = LLM(str(llm.model_path), device="cpu", progress=False, enable_prefix_caching=False)
    try:
        assert no_cache.chat(conversation, params)[0].outputs[0].token_ids == second.outputs[0].token_ids
    finally:
        no_cache.shutdown()


def test_a_call_whose_last_turn_is_rendered_anew_restores_everything_before_it(hybrid_llm: LLM) -> None:
    """A world shows per-step notes in the current turn only: the next call repeats that turn without them, so the
    snapshot before the generation prompt does not match; the one before the last user turn does."""
    llm = hybrid_llm
    params = SamplingParams(temperature=0, max_tokens=2, ignore_eos=True)
    head = [*CHAT[:-1], {"role": "user", "content": "Action: read /etc/hosts"}]
    first = [*head[:-1], {"role": "user", "content": "Action: read /etc/hosts\nNotes: the disk is full."}]
    llm.chat(first, params)
    following = [
        *head,
        {"role": "assistant", "content": "Environment Observation: 127.0.0.1 localhost"},
        {"role": "user", "content": "Action: read /etc/hostname"},
    ]
    second = llm.chat(following, params)[0]
    first_ids = llm.encode(llm.render_chat(first))
    start = llm.processor.token_id("<|im_start|>")
    last_user = sorted(i for i, t in enumerate(first_ids) if t == start)[-2]
    assert second.num_cached_tokens == last_user
    assert second.prompt_token_ids[:last_user] == first_ids[:last_user]


def test_prefix_cache_is_bounded_and_evicts_least_recently_used(hybrid_llm: LLM) -> None:
    cache = hybrid_llm.cache

    def run() -> None:
        size_100 = cache.snapshot_bytes(100)
        pc = PrefixCache(budget_bytes=2 * size_100 + 10)
        manager = CacheManager(cache, pc)  # its own index over the engine's cache; the slot is the engine's
        with hybrid_llm.cache_manager.borrowed_slot() as slot:

            def save(ids: list[int]) -> bool:
                planned = manager.plan_save(ids, slot)
                if planned is not None:  # what the runner does after the step
                    manager.saved(planned, cache.snapshot(planned.slot, planned.tokens))
                return planned is not None

            a, b, c = ([k] * 100 for k in (5, 6, 7))
            assert save(a) and save(b)
            assert pc.lookup(a + [1]) is not None  # a is now the most recently used
            assert save(c)  # evicts b
            assert pc.lookup(b + [1]) is None and pc.lookup(a + [1]) is not None
            assert pc.used_bytes <= pc.budget_bytes and pc.stats.evicted == 1
            assert not save([9] * 1000)  # larger than the whole budget: skipped, nothing lost
            assert not save(a)  # kept already: nothing to copy
            assert len(pc) == 2
            assert pc.lookup(a) is None  # a prompt that IS a snapshot leaves nothing to prefill: no hit

    hybrid_llm.engine.call(run, needs_slot=True)


def test_metrics_count_requests_tokens_and_hits(hybrid_llm: LLM) -> None:
    hybrid_llm.chat(CHAT, SamplingParams(temperature=0, max_tokens=3, ignore_eos=True))
    text = hybrid_llm.engine.metrics.render().decode()
    for name in (
        "aw_engine:num_requests_running",
        "aw_engine:num_requests_waiting",
        "aw_engine:prompt_tokens_total",
        "aw_engine:generation_tokens_total",
        "aw_engine:prefix_cache_queries_total",
        "aw_engine:prefix_cache_hits_total",
        "aw_engine:prefix_cache_hit_rate",
        "aw_engine:step_duration_seconds_bucket",
        "aw_engine:time_to_first_token_seconds_count",
    ):
        assert name in text, name
    hits = next(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("aw_engine:prefix_cache_hits_total")
    )
    assert hits > 0


def test_capture_safe_decode_step_serves_concurrent_callers_alike(tiny_ckpt: Path, fresh_llm: LLM) -> None:
    """The step CUDA graphs replay (slots and positions on the device only), here run eagerly on a CPU."""
    static = LLM(str(tiny_ckpt), device="cpu", progress=False, static_decode=True, max_num_batched_tokens=64)
    try:
        assert static.static_decode
        calls = [
            (lambda i=i, p=p: static.generate(p, _params(i))[0].outputs[0].token_ids)
            for i, p in enumerate(PROMPTS)
        ]
        expected = [fresh_llm.generate(p, _params(i))[0].outputs[0].token_ids for i, p in enumerate(PROMPTS)]
        assert _in_threads(calls) == expected
    finally:
        static.shutdown()


def test_an_engine_over_a_model_already_built(fresh_llm: LLM) -> None:
    """`LLM.from_model` (how bench/gpu_check.py serves its random full-size model) runs the same engine."""
    other = LLM.from_model(
        fresh_llm.model,
        fresh_llm.config,
        fresh_llm.tokenizer,
        name="built",
        max_model_len=512,
        max_num_seqs=2,
    )
    try:
        assert other.cache.max_len == 512 and other.cache.num_slots == 2 and other.model_name == "built"
        params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
        expected = fresh_llm.generate(PROMPTS[:3], params)
        assert [o.outputs[0].token_ids for o in other.generate(PROMPTS[:3], params)] == [
            o.outputs[0].token_ids for o in expected
        ]
    finally:
        other.shutdown()
