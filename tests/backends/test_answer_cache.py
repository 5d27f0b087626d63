"""Issue 33, item 6: `--cache DIR` replays a rerun byte for byte with no model server; replay-only turns a miss into
an isError; concurrent identical requests ask the model once; the folder is bounded, owner-only and secret-free."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import anyio
import pytest

from aw_mcp import Env
from aw_mcp.backends.answer_cache import AnswerStore, CachedWorldModel, answer_key
from aw_mcp.core.model_io import CallRef, Generation, GenerationParams
from aw_mcp.core.redaction import register_secret
from tests.conftest import SMALL_WORLD
from tests.fake_openai import Reply, ScriptedOpenAIServer

pytestmark = pytest.mark.anyio

CALLS = [("get_order", {"order_id": "ORD-1001"}), ("get_order", {"order_id": "ORD-2002"})]


def answers(body: dict, call_number: int) -> Reply:
    order = "ORD-2002" if "ORD-2002" in body["messages"][-1]["content"] else "ORD-1001"
    # The call number in the answer: a rerun that reached the model would show a later one.
    return Reply(
        content=f'**Environment Observation:**\n{{"id": "{order}", "status": "shipped", "total": {call_number}}}'
    )


async def run_agent(world: Path, cache: Path, **options: object) -> list[tuple[bool, str]]:
    async with await Env.open(world, cache=str(cache), seed=5, thinking=False, **options) as env:
        results = [await env.call(tool, args) for tool, args in CALLS]
    return [(r.is_error, r.content[0].text) for r in results]


@pytest.fixture
def world(tmp_path: Path) -> Path:
    path = tmp_path / "shop.yaml"
    path.write_text(SMALL_WORLD)
    return path


async def test_a_rerun_makes_no_model_request_and_sees_the_same_bytes(world: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with ScriptedOpenAIServer(answers) as server:
        first = await run_agent(world, cache, base_url=server.base_url, model="m")
        asked = len(server.requests)
        second = await run_agent(world, cache, base_url=server.base_url, model="m")
        assert asked == 2 and len(server.requests) == asked  # the rerun asked nothing
    assert not any(is_error for is_error, _ in first)
    assert second == first
    # No model server at all: replay-only answers the recorded calls from the folder alone.
    assert (
        await run_agent(world, cache, base_url="http://127.0.0.1:9/v1", model="m", cache_mode="replay-only")
        == first
    )


async def test_replay_only_turns_a_miss_into_an_is_error_naming_the_way_out(
    world: Path, tmp_path: Path
) -> None:
    results = await run_agent(
        world, tmp_path / "empty", base_url="http://127.0.0.1:9/v1", cache_mode="replay-only"
    )
    assert all(is_error for is_error, _ in results)
    assert "replay-only" in results[0][1] and "--cache-mode read-write" in results[0][1]


async def test_another_model_seed_or_message_is_another_answer() -> None:
    messages = [{"role": "user", "content": "hi"}]
    base = answer_key("m", messages, GenerationParams(seed=1))
    assert base == answer_key("m", [dict(m) for m in messages], GenerationParams(seed=1))
    assert base != answer_key("other", messages, GenerationParams(seed=1))
    assert base != answer_key("m", messages, GenerationParams(seed=2))
    assert base != answer_key("m", messages, GenerationParams(seed=1, temperature=0.0))
    assert base != answer_key("m", [{"role": "user", "content": "hi!"}], GenerationParams(seed=1))


class CountingModel:
    name = "counting"

    def __init__(self, text: str = "answer") -> None:
        self.calls = 0
        self.text = text
        self.release = anyio.Event()

    async def generate(self, messages, params, on_progress=None, call=None) -> Generation:  # noqa: ANN001
        self.calls += 1
        await self.release.wait()
        return Generation(text=self.text)

    async def preload(self) -> bool:
        return False

    async def aclose(self) -> None:
        pass


async def test_concurrent_identical_requests_ask_the_model_once(tmp_path: Path) -> None:
    inner = CountingModel()
    cached = CachedWorldModel(inner, AnswerStore(tmp_path), "m")
    messages = [{"role": "user", "content": "same"}]
    texts: list[str] = []

    async def ask() -> None:
        texts.append((await cached.generate(messages, GenerationParams(seed=3))).text)

    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(ask)
        await anyio.wait_all_tasks_blocked()
        inner.release.set()
    assert inner.calls == 1 and texts == ["answer"] * 5
    assert (cached.hits, cached.misses) == (4, 1)


async def test_files_are_owner_only_secret_free_and_the_folder_bounded(tmp_path: Path) -> None:
    secret = "sk-cache-test-0123456789abcdef"
    register_secret(secret)
    inner = CountingModel(text=f"the key is {secret} " + "x" * 400)
    inner.release.set()
    store = AnswerStore(tmp_path, max_bytes=4000)
    cached = CachedWorldModel(inner, store, "m")
    for n in range(30):
        await cached.generate(
            [{"role": "user", "content": f"call {n}"}], GenerationParams(), call=CallRef("t", {}, n)
        )
    files = [p for p in tmp_path.rglob("*.json")]
    assert files and sum(p.stat().st_size for p in files) <= 4000
    for path in files:
        text = path.read_text()
        assert secret not in text and "***" in text and "call " not in text  # no key, no messages
        if os.name == "posix":
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
    newest = answer_key("m", [{"role": "user", "content": "call 29"}], GenerationParams())
    assert json.loads(store.path(newest).read_text())["tool"] == "t"  # the least recently used went first
