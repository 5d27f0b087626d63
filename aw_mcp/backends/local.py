"""The `local` backend: the world model runs in this process on our own engine (`engine.LLM`).

The model loads on first use, in a worker thread. Generation is a request in the engine's step loop, batched with
every other session's; its deltas come back to the event loop (`LLM.generate_async`), and cancelling the tool call
cancels the request, which leaves the batch at the next step.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import anyio
import anyio.to_thread

from aw_mcp.backends.contract import WorldModel
from aw_mcp.core.model_io import (
    AnswerConstraint,
    BackendError,
    CallRef,
    ChatMessage,
    Generation,
    GenerationParams,
    ProgressCallback,
)
from aw_mcp.prompt.constraint import ANSWER_INDENT

log = logging.getLogger(__name__)

PROGRESS_INTERVAL_S = 1.0


def answer_format(constraint: AnswerConstraint) -> Any:
    """The engine's framed-answer grammar for a constraint: the trained frame around the JSON, pretty-printed."""
    from engine.structured import AnswerFormat

    return AnswerFormat(
        json_schema=constraint.json_schema,
        prefix=constraint.prefix,
        suffix=constraint.suffix,
        alternative=constraint.text_alternative,
        indent=ANSWER_INDENT,
    )


def sampling_params(llm: Any, params: GenerationParams, answer: Any = None) -> Any:
    """The engine's SamplingParams for these settings: fields the world leaves unset (top_p, top_k) take the
    checkpoint's generation_config.json values, as vLLM serves them (`LLM.sampling_params`).
    `answer`: the AnswerFormat to decode under (after the thinking, when the model thinks)."""
    return llm.sampling_params(
        temperature=params.temperature,
        top_p=params.top_p,
        top_k=params.top_k,
        max_tokens=params.max_tokens,
        seed=params.seed,
        stop=list(params.stop) or None,
        json_schema=answer,
        structured_after="</think>" if params.thinking else None,
    )


class LocalWorldModel(WorldModel):
    name = "local"

    def __init__(
        self,
        model: str,
        device: str | None = None,
        dtype: str | None = None,
        max_model_len: int | None = None,
    ) -> None:
        self.model = model
        self.device = device
        self.dtype = dtype
        self.max_model_len = max_model_len
        self._llm = None
        self._load_error: BackendError | None = None
        self._load_lock = threading.Lock()
        from engine.tiny_model import TINY_NOTICE, is_tiny_model

        # `--model tiny`: every answer says it is random text (the simulator puts a backend's notice on each call)
        self.notice = TINY_NOTICE if is_tiny_model(model) else None
        self._refused: set[str] = (
            set()
        )  # tools whose answer grammar the engine could not compile (warned once)

    def _load(self):
        """The engine, loaded on first use. A failure is kept: every later call reports the same cause at once
        (the checkpoint, the device, the memory do not change by asking again) instead of loading again."""
        with self._load_lock:
            if self._load_error is not None:
                raise self._load_error
            if self._llm is None:
                from engine import LLM

                try:
                    self._llm = LLM(
                        self.model, device=self.device, dtype=self.dtype, max_model_len=self.max_model_len
                    )
                except Exception as exc:  # noqa: BLE001 -- any failure to load is the model's cause for every call
                    cause = str(exc) or type(exc).__name__
                    self._load_error = BackendError(
                        f"cannot load the local model {self.model!r}: {cause.rstrip('.')}. Other ways to run: "
                        "point at a vLLM/SGLang server with --base-url http://HOST:PORT/v1, or answer from a "
                        "recording with --backend replay --replay TRAJECTORY.jsonl."
                    )
                    self._load_error.__cause__ = exc
                    raise self._load_error from exc
            return self._llm

    async def preload(self) -> bool:
        """Load the weights now (in a worker thread) so the first tool call does not pay for it.

        A failure is kept for the calls to report; it is also raised here so the caller can show it at once."""
        await anyio.to_thread.run_sync(self._load, abandon_on_cancel=True)
        return True

    async def generate(
        self,
        messages: list[ChatMessage],
        params: GenerationParams,
        on_progress: ProgressCallback | None = None,
        call: CallRef | None = None,
    ) -> Generation:
        from engine.reasoning import split_reasoning

        def encode() -> tuple[Any, list[int], Any]:
            llm = self._load()
            return (
                llm,
                llm.encode(llm.render_chat(list(messages), enable_thinking=params.thinking)),
                self._grammar(llm, params.constraint),
            )

        try:
            llm, prompt, answer = await anyio.to_thread.run_sync(encode, abandon_on_cancel=True)
            sampling = sampling_params(llm, params, answer)
            pieces: list[str] = []
            finish, generated, last_report = None, 0, time.monotonic()
            # Deltas arrive on this event loop from the engine's step loop; cancelling this task cancels the
            # request there (it leaves the batch at the next step).
            async for delta in llm.generate_async(prompt, sampling):
                pieces.append(delta.text)
                generated, finish = delta.num_generated, delta.finish_reason
                if on_progress is not None and time.monotonic() - last_report >= PROGRESS_INTERVAL_S:
                    last_report = time.monotonic()
                    try:
                        await on_progress(generated, "generating")
                    except Exception:  # noqa: BLE001 -- progress is best effort
                        pass
        except BackendError:
            raise
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            raise BackendError(f"local model failed: {exc}") from exc
        text, prompt_tokens, completion_tokens = "".join(pieces), len(prompt), generated
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

    def _grammar(self, llm: Any, constraint: AnswerConstraint | None) -> Any:
        """The compiled-and-cached answer format, or None: no constraint, or one the grammar engine refuses (then
        the tool is decoded free and validated afterwards; one warning per tool)."""
        if constraint is None:
            return None
        from engine.structured import StructuredOutputError

        answer = answer_format(constraint)
        try:
            llm.compile_schema(answer)
        except StructuredOutputError as exc:
            if constraint.name not in self._refused:
                self._refused.add(constraint.name)
                log.warning("%s: decoding unconstrained (validated afterwards): %s", constraint.name, exc)
            return None
        return answer

    async def aclose(self) -> None:
        llm, self._llm = self._llm, None
        if llm is not None:
            await anyio.to_thread.run_sync(llm.shutdown)
