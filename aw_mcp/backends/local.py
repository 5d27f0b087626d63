"""The `local` backend: the world model runs in this process on our own engine (`engine.LLM`).

The model loads on first use, in a worker thread. Generation runs in a worker thread too; when the tool call is
cancelled the anyio scope abandons the thread and a stop flag ends its decode loop after the current step.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread

from aw_mcp.backends.base import (
    BackendError,
    CallRef,
    ChatMessage,
    Generation,
    GenerationParams,
    ProgressCallback,
)

PROGRESS_INTERVAL_S = 1.0


def sampling_params(params: GenerationParams) -> Any:
    """The engine's SamplingParams for these settings; top_p / top_k unset mean no filtering (all tokens)."""
    from engine import SamplingParams

    return SamplingParams(
        temperature=params.temperature,
        top_p=1.0 if params.top_p is None else params.top_p,
        top_k=0 if params.top_k is None else params.top_k,
        max_tokens=params.max_tokens,
        seed=params.seed,
        stop=list(params.stop) or None,
    )


class LocalWorldModel:
    name = "local"

    def __init__(self, model: str, device: str | None = None, dtype: str | None = None) -> None:
        self.model = model
        self.device = device
        self.dtype = dtype
        self._llm = None
        self._load_lock = threading.Lock()

    def _load(self):
        with self._load_lock:
            if self._llm is None:
                from engine import LLM
                from engine.loader import CheckpointError

                try:
                    self._llm = LLM(self.model, device=self.device, dtype=self.dtype)
                except (CheckpointError, FileNotFoundError, ValueError, MemoryError, OSError) as exc:
                    raise BackendError(
                        f"cannot load the local model {self.model!r}: {exc} Other ways to run: point at a "
                        "vLLM/SGLang server with --base-url http://HOST:PORT/v1, or answer from a recording with "
                        "--backend replay --replay TRAJECTORY.jsonl."
                    ) from exc
            return self._llm

    async def preload(self) -> None:
        """Load the weights now (in a worker thread) so the first tool call does not pay for it.

        A failure is kept for the calls to report; it is also raised here so the caller can show it at once."""
        await anyio.to_thread.run_sync(self._load, abandon_on_cancel=True)

    async def generate(
        self,
        messages: list[ChatMessage],
        params: GenerationParams,
        on_progress: ProgressCallback | None = None,
        call: CallRef | None = None,
    ) -> Generation:
        from engine.reasoning import split_reasoning

        cancel = threading.Event()
        sampling = sampling_params(params)

        def report(tokens: int, status: str) -> None:
            if on_progress is None or cancel.is_set():
                return
            try:
                anyio.from_thread.run(on_progress, tokens, status)
            except Exception:  # progress is best effort; the loop may be shutting down
                pass

        def run() -> tuple[str, str | None, int, int]:
            llm = self._load()
            prompt = llm.encode(llm.render_chat(list(messages), enable_thinking=params.thinking))
            pieces: list[str] = []
            finish, generated, last_report = None, 0, time.monotonic()
            for delta in llm.generate_stream(prompt, sampling, stop=cancel):
                pieces.append(delta.text)
                generated, finish = delta.num_generated, delta.finish_reason
                if time.monotonic() - last_report >= PROGRESS_INTERVAL_S:
                    last_report = time.monotonic()
                    report(generated, "generating")
            return "".join(pieces), finish, len(prompt), generated

        try:
            text, finish, prompt_tokens, completion_tokens = await anyio.to_thread.run_sync(
                run, abandon_on_cancel=True
            )
        except anyio.get_cancelled_exc_class():
            cancel.set()
            raise
        except BackendError:
            raise
        except Exception as exc:
            raise BackendError(f"local model failed: {exc}") from exc
        if finish == "abort":
            raise BackendError("local generation was stopped")
        if on_progress is not None:
            await on_progress(completion_tokens, "done")
        reasoning, answer = split_reasoning(text, params.thinking)
        return Generation(
            text=answer,
            reasoning=reasoning,
            finish_reason=finish,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
        )

    async def aclose(self) -> None:
        self._llm = None
