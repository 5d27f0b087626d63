"""The overlap scheduler's device-side tokens (engine/llm_engine.py, engine/model_runner.py `sample` and
`SampledTokens`, engine/sampling.py `sample_on_device`): a step's tokens stay on the device, the next decode takes
its input ids from them, and the host reads them only when it settles the step, after the next step is launched.
(The order itself: tests/engine/test_overlap_ordering.py.)"""

from __future__ import annotations

import threading

import pytest
import torch

from engine import LLM, SamplingParams, cuda_graphs
from engine.forward_batch import HostCopy
from engine.model_runner import ModelRunner, SampledTokens
from engine.sampling import RowSampling, make_generator, sample_on_device, sample_tokens
from engine.sequence import Sequence
from engine.testing.fake_graphs import FakeCapturer
from tests.engine.test_overlap_ordering import Traced, traced


# -- the sampler's device variant ---------------------------------------------------------------------------------
def test_the_device_sampler_reads_nothing_and_matches_sample_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    vocab = 300
    logits = torch.randn(7, vocab) * 3
    seen = torch.zeros(vocab, dtype=torch.bool)
    seen[:40] = True
    params = [
        SamplingParams(temperature=0),
        SamplingParams(temperature=0.8, top_k=12, seed=1),
        SamplingParams(temperature=1.0, top_p=0.7, min_p=0.05, seed=2),
        SamplingParams(temperature=0, repetition_penalty=1.4),
        SamplingParams(temperature=0.6, top_k=20, top_p=0.9, repetition_penalty=1.2, seed=3),
        SamplingParams(temperature=1.2, seed=4),
        SamplingParams(temperature=0),
    ]

    def rows(fixed: dict[int, int | None]) -> list:
        return [
            fixed[i]
            if i in fixed
            else RowSampling(
                p,
                None if p.greedy else make_generator(p.seed),
                seen if p.repetition_penalty != 1.0 else None,
            )
            for i, p in enumerate(params)
        ]

    log: list[tuple[str, int]] = []
    monkeypatch.setattr(Traced, "log", log)
    on_device = sample_on_device(traced(logits, 0), rows({1: 17, 5: None}))
    assert log == [] and isinstance(on_device, Traced) and on_device.dtype == torch.int64
    host = sample_tokens(logits, rows({1: None, 5: None}))
    expected = [17 if i == 1 else -1 if i == 5 else t for i, t in enumerate(host)]
    assert on_device.tolist() == expected
    assert host[1] is None and host[5] is None
    assert sample_on_device(logits[:3], [4, None, 9]).tolist() == [4, -1, 9]  # every row fixed
    assert sample_on_device(logits[:0], []).numel() == 0


def test_host_copy_on_cpu_is_the_values() -> None:
    ids = torch.tensor([5, 7, 11])
    copy = HostCopy(ids)
    assert copy.wait().tolist() == [5, 7, 11] and copy.tolist() == [5, 7, 11]


# -- the next decode's inputs -------------------------------------------------------------------------------------
def _seq(name: str, output: list[int], cached: int) -> Sequence:
    seq = Sequence(name, None, [1, 2, 3], SamplingParams(temperature=0), None, False)
    seq.output_ids, seq.num_cached = list(output), cached
    return seq


def _runner() -> ModelRunner:
    runner = ModelRunner.__new__(ModelRunner)  # _input_ids reads only the device
    runner.device = torch.device("cpu")
    return runner


def test_decode_inputs_are_the_last_step_s_device_tokens_gathered_by_sequence() -> None:
    a, b, c = _seq("a", [10], 4), _seq("b", [20], 5), _seq("c", [30, 31], 6)
    ids = torch.tensor([101, 102, 103])
    last = SampledTokens([a, b, c], ids, HostCopy(ids), [4, 5, 6])
    runner = _runner()
    same, starts = runner._input_ids([a, b, c], last, [[4, 5, 6]])
    assert same is ids and starts.tolist() == [4, 5, 6]  # the whole tensor, in order: no copy, no gather
    (gathered,) = runner._input_ids([c, a], last, [])
    assert gathered.tolist() == [103, 101]  # rows by sequence (b finished: its row dropped)
    newcomer = _seq("d", [40, 41], 2)  # its token is not in `last`: uploaded from the host
    mixed, slots = runner._input_ids([b, newcomer, a], last, [[0, 1, 2]])
    assert mixed.tolist() == [102, 41, 101] and slots.tolist() == [0, 1, 2]
    c.num_cached += 1  # c decoded its token since: `last` no longer holds its input
    assert last.row_of(c) is None and c in last
    (stale,) = runner._input_ids([c], last, [])
    assert stale.tolist() == [31]
    (fresh,) = runner._input_ids([a, b], None, [])
    assert fresh.tolist() == [10, 20]


# -- the same outputs with overlap on and off ---------------------------------------------------------------------
def _run_batch(llm: LLM, failing: str) -> list[tuple]:
    """Five requests on four slots (all admitted at one step), two more joining once the first has three tokens
    (prefills joining running decodes), one failing at its fourth token (its processor raises), one aborted after
    its fifth decode (a stop check on its cached length: the same step in both loops), the rest finishing at
    different steps."""
    engine = llm.engine
    append = llm.processor.append_token

    def append_or_fail(seq, token: int) -> None:
        if seq.prompt == failing and len(seq.output_ids) == 3:
            raise RuntimeError("this request's output check broke")
        append(seq, token)

    llm.processor.append_token = append_or_fail
    try:
        first = llm._make_sequences(
            ["The world model", failing, "hi", "ls -la /tmp", "hello there"],
            [
                SamplingParams(temperature=0, max_tokens=5, ignore_eos=True),
                SamplingParams(temperature=0, max_tokens=20, ignore_eos=True),
                SamplingParams(temperature=0, max_tokens=11, ignore_eos=True),
                SamplingParams(temperature=0.9, top_p=0.8, max_tokens=9, seed=7, ignore_eos=True),
                SamplingParams(temperature=0, max_tokens=4, ignore_eos=True),  # waits for a slot
            ],
            None,
        )
        later = llm._make_sequences(
            ["The world model", "x" * 40],
            [
                SamplingParams(temperature=0, max_tokens=7, ignore_eos=True),
                SamplingParams(temperature=0, max_tokens=60, ignore_eos=True),
            ],
            None,
        )
        later[1].stop = lambda seq=later[1]: seq.num_cached >= len(seq.prompt_ids) + 5
        joined = threading.Event()
        base_sink = first[0].sink

        def join_on_third_delta(item) -> None:
            base_sink(item)
            if len(first[0].output_ids) >= 3 and not joined.is_set():
                joined.set()
                for seq in later:
                    engine.submit(seq)  # from the loop thread: admitted at the next step

        first[0].sink = join_on_third_delta
        engine.call(lambda: [engine.submit(seq) for seq in first])  # one step admits them all
        outcome = []
        for seq in first + later:
            error = None
            while True:
                item = seq.outbox.get(timeout=120)
                if isinstance(item, BaseException):
                    error = str(item)
                    break
                if item.finished:
                    break
            outcome.append((seq.output_ids, seq.text, seq.finish_reason, error))
        return outcome
    finally:
        llm.processor.append_token = append


def test_greedy_and_seeded_outputs_identical_with_overlap_on_and_off(
    overlap_engines: dict[bool, LLM],
) -> None:
    failing = "fail here please"
    results = {overlap: _run_batch(llm, failing) for overlap, llm in overlap_engines.items()}
    assert results[True] == results[False]
    reasons = [reason for _, _, reason, _ in results[True]]
    assert reasons == ["length", "error", "length", "length", "length", "length", "abort"]
    assert results[True][1][3] == "this request's output check broke" and len(results[True][1][0]) == 3
    assert len(results[True][6][0]) == 6  # the prefill's token and five decodes


def test_seeded_sampling_identical_with_overlap_on_and_off(overlap_engines: dict[bool, LLM]) -> None:
    prompts = ["The world model", "ls -la /tmp", "hi", "The world model", "x" * 30]
    params = [
        SamplingParams(temperature=0.8, top_k=20, top_p=0.95, max_tokens=14, seed=1, ignore_eos=True),
        SamplingParams(temperature=1.0, min_p=0.1, max_tokens=9, seed=2, ignore_eos=True),
        SamplingParams(temperature=0.7, repetition_penalty=1.3, max_tokens=12, seed=3, ignore_eos=True),
        SamplingParams(temperature=1.1, top_p=0.6, max_tokens=5, seed=4, ignore_eos=True),
        SamplingParams(temperature=0.9, thinking_budget=2, max_tokens=8, seed=5, ignore_eos=True),
    ]
    results = {
        overlap: [(o.outputs[0].token_ids, o.outputs[0].finish_reason) for o in llm.generate(prompts, params)]
        for overlap, llm in overlap_engines.items()
    }
    assert results[True] == results[False]
    assert len({tuple(ids) for ids, _ in results[True]}) == len(prompts)


def test_graph_decode_takes_device_tokens_with_overlap(tiny_ckpt, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the CUDA-graph runner (a fake capturer on CPU): the decode ids handed to it are the last step's
    sampled tensor itself (it copies them into its static input buffer on the device), and the outputs are those
    of the serial eager loop."""
    fake = FakeCapturer()
    monkeypatch.setattr(cuda_graphs, "CudaGraphCapturer", lambda: fake)
    prompts = ["The world model", "hi", "ls -la /tmp"]
    params = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in (6, 3, 8)]

    def run(overlap: bool, static: bool, as_sampled: list[bool]) -> list[list[int]]:
        monkeypatch.setenv("AW_OVERLAP_SCHEDULE", "1" if overlap else "0")
        llm = LLM(
            str(tiny_ckpt),
            device="cpu",
            progress=False,
            max_num_seqs=4,
            max_model_len=64,
            static_decode=static,
        )
        engine, graphs = llm.engine, llm.graph_runner
        replay = graphs.__call__

        def recording(ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
            as_sampled.append(engine._last is not None and ids is engine._last.ids)
            return replay(ids, positions, slots)

        engine.runner.graph_runner = recording
        try:
            return [o.outputs[0].token_ids for o in llm.generate(prompts, params)]
        finally:
            engine.runner.graph_runner = graphs
            llm.shutdown()

    as_sampled: list[bool] = []
    graph_tokens = run(overlap=True, static=True, as_sampled=as_sampled)
    assert graph_tokens == run(overlap=False, static=False, as_sampled=[])
    assert any(as_sampled), "no decode took the sampled tensor as its input ids"
    assert {e[1] for e in fake.events if e[0] == "replay"}, "no graph replayed"
