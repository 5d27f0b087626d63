"""The checkpoint's recommended sampling settings fill what a request leaves unset, as vLLM's
`--generation-config auto` does: generation_config.json for a safetensors folder, `general.sampling.*` for a GGUF;
an explicit request value wins. Plus the two samplers that makes reachable: min-p and the repetition penalty."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
import uvicorn

from engine import LLM, SamplingParams
from engine.generation_config import (
    SamplingDefaults,
    from_generation_config,
    from_gguf_metadata,
    generation_config_override,
)
from engine.model_runner import ModelRunner
from engine.sampling import RowSampling, sample_on_device, sample_token
from engine.sequence import Sequence
from engine.server import ChatCompletionRequest, build_app
from tests.conftest import free_port

CHAT = [{"role": "user", "content": "What is the weather in Paris?"}]
RECOMMENDED = {"do_sample": True, "temperature": 0.6, "top_k": 20, "top_p": 0.95, "eos_token_id": [1, 2]}


@pytest.fixture(scope="module")
def recommending_ckpt(tiny_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny checkpoint with the sampling settings a model creator recommends in its generation_config.json."""
    folder = tmp_path_factory.mktemp("recommending") / "ckpt"
    shutil.copytree(tiny_ckpt, folder)
    config = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({**config, **RECOMMENDED}))
    return folder


@pytest.fixture(scope="module")
def llm(recommending_ckpt: Path) -> LLM:
    return LLM(str(recommending_ckpt), device="cpu", progress=False, max_num_seqs=2)


def test_the_checkpoint_s_generation_config_is_read(llm: LLM) -> None:
    # vLLM's fields only: do_sample and eos_token_id are not sampling defaults.
    assert llm.sampling_defaults.as_dict() == {"temperature": 0.6, "top_k": 20, "top_p": 0.95}
    assert "generation_config.json" in llm.sampling_defaults.describe()


def test_a_silent_request_samples_with_the_checkpoint_s_top_k(llm: LLM) -> None:
    params = ChatCompletionRequest.model_validate({"messages": CHAT}).sampling_params(llm.sampling_defaults)
    assert (params.top_k, params.top_p, params.temperature) == (20, 0.95, 0.6)
    assert (params.min_p, params.repetition_penalty) == (0.0, 1.0)  # unset in the file: neutral


def test_an_explicit_request_value_wins(llm: LLM) -> None:
    body = {"messages": CHAT, "top_k": 5, "temperature": 0, "top_p": 1.0, "min_p": 0.1}
    params = ChatCompletionRequest.model_validate(body).sampling_params(llm.sampling_defaults)
    assert (params.top_k, params.temperature, params.top_p, params.min_p) == (5, 0, 1.0, 0.1)
    # -1 is an explicit "all tokens", not "unset".
    params = ChatCompletionRequest.model_validate({"messages": CHAT, "top_k": -1}).sampling_params(
        llm.sampling_defaults
    )
    assert params.top_k == -1 and params.top_p == 0.95


def test_in_process_callers_get_the_same_defaults(llm: LLM) -> None:
    assert llm.sampling_params(max_tokens=8).top_k == 20
    assert llm.sampling_params(top_k=3, max_tokens=8).top_k == 3
    default = llm.default_sampling_params()  # what generate() uses without SamplingParams, as vLLM's LLM
    assert (default.top_k, default.temperature, default.max_tokens) == (20, 0.6, 16)


def test_the_sampler_receives_the_defaults_over_http(llm: LLM, monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end: a request naming no sampling field is sampled with top_k 20; /v1/models shows the defaults."""
    import engine.model_runner as model_runner

    seen: list[tuple[int, float]] = []

    def spy(logits: torch.Tensor, rows: list[RowSampling | int]) -> torch.Tensor:
        seen.extend((row.params.top_k, row.params.top_p) for row in rows if isinstance(row, RowSampling))
        return sample_on_device(logits, rows)

    monkeypatch.setattr(model_runner, "sample_on_device", spy)
    with _serving(llm) as base_url:
        card = httpx.get(f"{base_url}/v1/models").json()["data"][0]
        assert card["default_sampling_params"] == {"temperature": 0.6, "top_k": 20, "top_p": 0.95}
        body = {"messages": CHAT, "max_tokens": 4, "ignore_eos": True}
        reply = httpx.post(f"{base_url}/v1/chat/completions", json=body, timeout=60).json()
    assert reply["usage"]["completion_tokens"] == 4
    assert seen and set(seen) == {(20, 0.95)}


def test_generation_config_choice_as_vllm_s_flag(tmp_path: Path) -> None:
    assert generation_config_override("auto") is None  # the checkpoint's own
    assert generation_config_override("vllm").as_dict() == {}
    (tmp_path / "generation_config.json").write_text(json.dumps({"top_k": 7, "max_new_tokens": 64}))
    assert generation_config_override(str(tmp_path)).as_dict() == {"top_k": 7, "max_tokens": 64}
    with pytest.raises(ValueError, match="expected 'auto', 'vllm' or a folder"):
        generation_config_override(str(tmp_path / "absent"))


def test_generation_config_fields_as_vllm_takes_them(tmp_path: Path) -> None:
    assert from_generation_config(tmp_path).as_dict() == {}  # no file: no defaults
    config = {
        "temperature": 0.7,
        "top_k": 20.0,
        "min_p": 0.05,
        "repetition_penalty": 1.05,
        "max_new_tokens": 512,  # vLLM's max_tokens
        "presence_penalty": 1.5,  # not one of vLLM's fields
        "do_sample": False,  # ignored: the temperature still applies
    }
    (tmp_path / "generation_config.json").write_text(json.dumps(config))
    defaults = from_generation_config(tmp_path)
    assert defaults.as_dict() == {
        "repetition_penalty": 1.05,
        "temperature": 0.7,
        "top_k": 20,
        "min_p": 0.05,
        "max_tokens": 512,
    }
    # max_new_tokens caps every request, given or not (vLLM's get_max_tokens).
    assert (
        defaults.max_tokens(None, 4096),
        defaults.max_tokens(4096, 4096),
        defaults.max_tokens(8, 4096),
    ) == (
        512,
        512,
        8,
    )
    assert SamplingDefaults().max_tokens(None, 4096) == 4096
    (tmp_path / "generation_config.json").write_text("{not json")
    with pytest.raises(ValueError, match="cannot read"):
        from_generation_config(tmp_path)


def test_gguf_sampling_metadata(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    from engine.gguf.reader import open_checkpoint

    path = tmp_path / "m.gguf"
    writer = gguf.GGUFWriter(str(path), "qwen35moe")
    writer.add_sampling_top_k(20)
    writer.add_sampling_top_p(0.95)
    writer.add_sampling_temp(0.6)
    writer.add_sampling_penalty_last_n(64)  # no vLLM counterpart: not taken
    writer.add_tensor("token_embd.weight", np.ones((4, 8), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    defaults = from_gguf_metadata(open_checkpoint(path).metadata, path.name)
    assert defaults.as_dict() == {"top_k": 20, "top_p": 0.95, "temperature": 0.6}  # f32 back to its decimal
    assert "general.sampling" in defaults.source
    assert from_gguf_metadata({"general.architecture": "qwen35moe"}).as_dict() == {}


def test_min_p_drops_the_unlikely_tokens() -> None:
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    params = SamplingParams(temperature=1.0, min_p=0.2)  # keeps tokens with p >= 0.1
    generator = torch.Generator().manual_seed(0)
    assert {sample_token(logits, params, generator) for _ in range(400)} == {0, 1, 2}
    with pytest.raises(ValueError, match="min_p"):
        SamplingParams(min_p=1.5)
    with pytest.raises(ValueError, match="repetition_penalty"):
        SamplingParams(repetition_penalty=0)


class _NoForcing:
    def forced_token(self, seq: Sequence) -> None:
        return None


def test_repetition_penalty_steers_greedy_picks_away_from_seen_tokens() -> None:
    """vLLM's penalty on prompt and output tokens (positive logits divided, negative multiplied), applied before
    the greedy argmax and kept up to date as the output grows."""
    runner = ModelRunner.__new__(ModelRunner)  # sample reads no runner state
    params = SamplingParams(temperature=0, repetition_penalty=2.0)
    seq = Sequence("r", None, [0, 1], params, None, in_thinking=False)
    logits = torch.tensor([[2.0, 1.5, 1.2, -1.0]])
    # Seen: 0 and 1 (the prompt) -> [1.0, 0.75, 1.2, -1.0]
    assert runner.sample([seq], logits.clone(), _NoForcing()).tolist() == [2]
    seq.output_ids.append(2)  # now 2 is seen too -> [1.0, 0.75, 0.6, -1.0]
    assert runner.sample([seq], logits.clone(), _NoForcing()).tolist() == [0]
    plain = Sequence("p", None, [0, 1], SamplingParams(temperature=0), None, in_thinking=False)
    assert runner.sample([plain], logits.clone(), _NoForcing()).tolist() == [0]


@contextmanager
def _serving(llm: LLM) -> Iterator[str]:
    """The engine's HTTP server on a free local port, for the length of the block."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(build_app(llm, "tiny"), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
