"""The engine's public API, shaped like vLLM's: `LLM(model=...)`, `generate`, `chat`, `logits`, plus streaming
(blocking and async).

Every call turns its prompts into sequences and hands them to the step loop (`engine/llm_engine.py`), which
batches them with everyone else's: callers on any thread run concurrently, each reading its own outputs. With
`enable_prefix_caching` (on by default) a prompt that starts like an earlier one (call k of a multi-turn chat
repeats call k-1's prompt) restores that state and prefills only the rest (`engine/prefix_cache.py`).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from engine import settings
from engine.cache import Cache
from engine.checkpoint import load_checkpoint
from engine.config import Config
from engine.generation_config import SamplingDefaults, generation_config_override
from engine.llm_engine import LLMEngine
from engine.loader import DEFAULT_MODEL
from engine.memory_plan import RUNTIME_BYTES, MemoryPlan, model_weight_bytes, plan_memory
from engine.model_runner import ModelRunner
from engine.output_processor import OutputProcessor
from engine.prefix_cache import PrefixCache
from engine.sampling import SamplingParams, make_generator
from engine.scheduler import Scheduler
from engine.sequence import Sequence as EngineSequence
from engine.sequence import StopCheck, StreamDelta
from engine.structured import AnswerFormat, Constraint, GrammarCompiler, canonical_schema

logger = logging.getLogger(__name__)

Prompt = str | list[int]
_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


class PromptTooLong(ValueError):
    """The prompt does not fit the context (the server answers 400; the loop serves the others)."""


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None = None  # "stop", "length" or "abort"


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = True
    num_cached_tokens: int = 0  # prompt tokens restored from the prefix cache (vLLM's field)


def resolve_dtype(dtype: str | torch.dtype | None, config: Config, device: torch.device) -> torch.dtype:
    """None: fp32 on CPU (bf16 matmuls are slow there), the checkpoint's dtype on an accelerator."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None or dtype == "auto":
        return torch.float32 if device.type == "cpu" else _DTYPES.get(config.dtype, torch.bfloat16)
    if dtype not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(_DTYPES)}")
    return _DTYPES[dtype]


class LLM:
    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        device: str | torch.device | None = None,
        dtype: str | torch.dtype | None = None,
        *,
        hf_compat_dtypes: bool = False,
        max_model_len: int | None = None,
        max_num_seqs: int = 8,
        max_num_batched_tokens: int | None = None,
        enable_prefix_caching: bool = True,
        cache_memory_gb: float | None = None,
        prefix_cache_memory_gb: float | None = None,
        progress: bool = True,
        static_decode: bool | None = None,
        compile_decode: bool | None = None,
        tokenizer: str | None = None,
        generation_config: str | None = "auto",
    ) -> None:
        """`model`: a checkpoint folder, a hub id, a GGUF file (`model-Q4_K_M.gguf`, any part of a split set) or a
        GGUF hub form (`unsloth/Qwen-AgentWorld-35B-A3B-GGUF:Q4_K_M`). `tokenizer`: an HF tokenizer (folder or hub
        id) to use instead of the checkpoint's own.
        `max_num_seqs`: cache slots, i.e. sequences decoding at once (more wait in order).
        `max_num_batched_tokens`: tokens per step (decodes first, then prompt chunks; default 2048 on a GPU, 512 on
        a CPU). `enable_prefix_caching` / `prefix_cache_memory_gb`: the hybrid prefix cache and its memory budget
        (default: half the device memory left after the slots on a GPU, 2 GiB on a CPU).
        `static_decode`: decode through the capture-safe step and CUDA graphs (default: on CUDA only; on a CPU
        the eager step is faster, since it reads just the cached span and slot views without gathers).
        `compile_decode` (CPU only; default from `AW_COMPILE=1`): run decode batches through `torch.compile`d
        per-layer regions (`engine/models/decode_regions.py`), compiled on first use of each batch
        size (seconds each).
        `generation_config`, as vLLM's flag: "auto" applies the checkpoint's recommended sampling settings
        (generation_config.json, or a GGUF's general.sampling.* metadata) wherever a request leaves them unset;
        "vllm" applies none; a folder applies its generation_config.json (engine/generation_config.py)."""
        device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        override = generation_config_override(generation_config)  # a bad choice fails before the weights load
        loaded = load_checkpoint(
            model,
            device,
            lambda config: resolve_dtype(dtype, config, device),
            tokenizer=tokenizer,
            hf_compat_dtypes=hf_compat_dtypes,
            progress=progress,
        )
        self.model_path, self.file_tensor_bytes = loaded.path, loaded.file_tensor_bytes
        model_module, config, tokenizer, dtype = loaded.model, loaded.config, loaded.tokenizer, loaded.dtype
        if compile_decode is None:
            compile_decode = settings.compile_decode()
        if compile_decode and device.type == "cpu":
            model_module.compile_decode()
        self._start(
            model, model_module, config, tokenizer, device, dtype,
            max_model_len=max_model_len,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            enable_prefix_caching=enable_prefix_caching,
            cache_memory_gb=cache_memory_gb,
            prefix_cache_memory_gb=prefix_cache_memory_gb,
            static_decode=static_decode,
            sampling_defaults=loaded.sampling_defaults if override is None else override,
        )  # fmt: skip

    @classmethod
    def from_model(
        cls,
        model: torch.nn.Module,
        config: Config,
        tokenizer,
        *,
        name: str = "model",
        device: torch.device | None = None,
        dtype: torch.dtype | None = None,
        **engine_options,
    ) -> LLM:
        """An engine over a model already built (fused weights) and a tokenizer: what `bench/gpu_check.py` serves
        its random full-size model with. `engine_options` are `__init__`'s engine settings, and
        `sampling_defaults` (none unless given)."""
        llm = cls.__new__(cls)
        llm.model_path, llm.file_tensor_bytes = None, None
        param = next(model.parameters())
        llm._start(
            name, model, config, tokenizer, device or param.device, dtype or param.dtype, **engine_options
        )
        return llm

    def _start(
        self,
        name: str,
        model_module: torch.nn.Module,
        config: Config,
        tokenizer,
        device: torch.device,
        dtype: torch.dtype,
        *,
        max_model_len: int | None = None,
        max_num_seqs: int = 8,
        max_num_batched_tokens: int | None = None,
        enable_prefix_caching: bool = True,
        cache_memory_gb: float | None = None,
        prefix_cache_memory_gb: float | None = None,
        static_decode: bool | None = None,
        sampling_defaults: SamplingDefaults | None = None,
    ) -> None:
        """Allocates the cache and starts the step loop."""
        self.model_name, self.config, self.tokenizer = name, config, tokenizer
        self.sampling_defaults = sampling_defaults or SamplingDefaults()
        logger.info("engine: %s", self.sampling_defaults.describe())
        self.device, self.dtype = device, dtype
        cache = self._allocate_cache(max_model_len, max_num_seqs, cache_memory_gb)
        self.processor = OutputProcessor(self.tokenizer, self._eos_ids(), cache.max_len)
        prefix_cache = None
        if enable_prefix_caching:
            prefix_cache = PrefixCache(
                cache,
                self._prefix_cache_budget(prefix_cache_memory_gb),
                self.processor.token_id("<|im_start|>"),
            )
        if max_num_batched_tokens is None:
            max_num_batched_tokens = 2048 if self.device.type == "cuda" else 512
        runner = ModelRunner(
            model_module,
            self.config,
            cache,
            self.device,
            emittable=min(len(self.tokenizer), self.config.vocab_size),
            static_decode=self.device.type == "cuda" if static_decode is None else static_decode,
        )
        self.engine = LLMEngine(
            runner, Scheduler(cache, prefix_cache, max_num_batched_tokens), self.processor, prefix_cache
        )
        self._batched_tokens = max_num_batched_tokens
        self._prefix_budget = prefix_cache.budget_bytes if prefix_cache is not None else 0
        self.grammars = GrammarCompiler(
            self.tokenizer, self.config.vocab_size, sorted(self.processor.stop_ids)
        )
        self._grammar_lock = threading.Lock()  # callers on any thread compile through one cache

    # The pieces, for tests, benchmarks and the server.
    @property
    def model(self) -> torch.nn.Module:
        return self.engine.runner.model

    @property
    def cache(self) -> Cache:
        return self.engine.runner.cache

    @property
    def prefix_cache(self) -> PrefixCache | None:
        return self.engine.prefix_cache

    @property
    def graph_runner(self):
        return self.engine.runner.graph_runner

    @property
    def static_decode(self) -> bool:
        return self.engine.runner.static_decode

    @property
    def _lock(self):
        return self.engine.lock

    @property
    def _stop_ids(self) -> set[int]:
        return self.processor.stop_ids

    def memory_plan(self) -> MemoryPlan:
        """What this engine holds on its device: weights as stored (GGUF blocks stay quantized), the cache slots
        for the context, the prefix cache's budget, one step's activations and the runtime's share."""
        return plan_memory(
            self.config,
            model_weight_bytes(self.model),
            context=self.cache.max_len,
            sequences=self.cache.num_slots,
            dtype=self.dtype,
            batched_tokens=self._batched_tokens,
            prefix_cache=self._prefix_budget,
            runtime=0 if self.device.type == "cpu" else RUNTIME_BYTES,
        )

    def default_sampling_params(self) -> SamplingParams:
        """What a call without SamplingParams samples with: SamplingParams()'s values with the checkpoint's
        recommended ones over them (vLLM's `LLM.get_default_sampling_params`)."""
        return SamplingParams(**self.sampling_defaults.values)

    def sampling_params(
        self,
        *,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        min_p: float | None = None,
        repetition_penalty: float | None = None,
        max_tokens: int | None = None,
        **other: Any,
    ) -> SamplingParams:
        """SamplingParams for one request, filled as vLLM's server fills them: the sampling fields left None take
        the checkpoint's recommended values (else the neutral ones), `max_tokens` (SamplingParams' 16 when None) is
        capped by the checkpoint's `max_new_tokens`; `other` fields pass through."""
        defaults = self.sampling_defaults
        return SamplingParams(
            **defaults.apply(
                temperature=temperature,
                top_p=top_p,
                top_k=top_k,
                min_p=min_p,
                repetition_penalty=repetition_penalty,
            ),
            max_tokens=defaults.max_tokens(max_tokens, SamplingParams.max_tokens),
            **other,
        )

    def shutdown(self) -> None:
        """Stop the step loop (requests still running end with an error)."""
        self.engine.close()

    # -- setup ------------------------------------------------------------------------------------------------
    def _allocate_cache(self, max_model_len: int | None, max_num_seqs: int, memory_gb: float | None) -> Cache:
        # 32k: the bundled worlds' prompts (the CRM world's is ~20k tokens) plus a long answer; the slot count
        # shrinks to the memory budget when the model is large.
        max_len = max_model_len or min(self.config.max_position_embeddings, 32768)
        if memory_gb is not None:
            budget = int(memory_gb * 2**30)
        elif self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            budget = int(free * 0.85)
        else:
            budget = 4 * 2**30
        return Cache.from_budget(self.config, budget, max_len, max_num_seqs, self.dtype, self.device)

    def _prefix_cache_budget(self, memory_gb: float | None) -> int:
        if memory_gb is not None:
            return int(memory_gb * 2**30)
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            return int(free * 0.5)
        return 2 * 2**30

    def _eos_ids(self) -> set[int]:
        ids = set(self.config.eos_token_ids)
        for token in ("<|im_end|>", "<|endoftext|>"):
            token_id = self.tokenizer.convert_tokens_to_ids(token)
            if isinstance(token_id, int) and token_id != self.tokenizer.unk_token_id:
                ids.add(token_id)
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        return ids

    # -- public API -------------------------------------------------------------------------------------------
    def generate(
        self,
        prompts: Prompt | Sequence[Prompt],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
        stop: StopCheck = None,
    ) -> list[RequestOutput]:
        """Runs the prompts (batched with whatever else the engine is running) and returns when all are done.
        `stop` (an Event or a callable returning True) cancels them: they end with finish_reason "abort"."""
        if isinstance(prompts, str) or (
            isinstance(prompts, list) and prompts and isinstance(prompts[0], int)
        ):
            prompts = [prompts]
        seqs = self._make_sequences(list(prompts), params, stop)
        try:
            for seq in seqs:
                self.engine.submit(seq)
            for seq in seqs:
                for _ in _drain(seq):
                    pass
        finally:
            for seq in seqs:
                if not seq.finished:
                    self.engine.abort(seq)
        return [self._request_output(s) for s in seqs]

    def generate_stream(
        self, prompt: Prompt, params: SamplingParams | None = None, stop: StopCheck = None
    ) -> Iterator[StreamDelta]:
        """Yields deltas as tokens come; the last one has `finished=True`. `stop` (an Event or a callable
        returning True) cancels the request: it ends with finish_reason "abort". Closing the iterator early
        cancels it too."""
        (seq,) = self._make_sequences([prompt], params, stop)
        self.engine.submit(seq)
        try:
            for delta in _drain(seq):
                if delta.text or delta.token_ids or delta.finished:
                    yield delta
        finally:
            if not seq.finished:
                self.engine.abort(seq)

    async def generate_async(
        self, prompt: Prompt, params: SamplingParams | None = None
    ) -> AsyncIterator[StreamDelta]:
        """`generate_stream` for an asyncio (or anyio-on-asyncio) caller: deltas arrive on the event loop, no
        thread per request. Cancelling the consuming task (or closing the iterator) cancels the request."""
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue = asyncio.Queue()
        (seq,) = self._make_sequences(
            [prompt], params, None, sink=lambda item: loop.call_soon_threadsafe(inbox.put_nowait, item)
        )
        self.engine.submit(seq)
        try:
            while True:
                item = await inbox.get()
                if isinstance(item, BaseException):
                    raise item
                if item.text or item.token_ids or item.finished:
                    yield item
                if item.finished:
                    return
        finally:
            if not seq.finished:
                self.engine.abort(seq)

    def chat(
        self,
        messages: list[dict[str, str]] | list[list[dict[str, str]]],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
        enable_thinking: bool = True,
        stop: StopCheck = None,
    ) -> list[RequestOutput]:
        conversations = messages if messages and isinstance(messages[0], list) else [messages]
        prompts = [self.render_chat(c, enable_thinking) for c in conversations]
        return self.generate(prompts, params, stop)

    def stream_chat(
        self,
        messages: list[dict[str, str]],
        params: SamplingParams | None = None,
        enable_thinking: bool = True,
        stop: StopCheck = None,
    ) -> Iterator[StreamDelta]:
        return self.generate_stream(self.render_chat(messages, enable_thinking), params, stop)

    def render_chat(self, messages: list[dict[str, str]], enable_thinking: bool = True) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, enable_thinking=enable_thinking
        )

    def encode(self, prompt: Prompt) -> list[int]:
        if isinstance(prompt, str):
            return list(self.tokenizer.encode(prompt, add_special_tokens=False))
        return [int(t) for t in prompt]

    def logits(self, token_ids: list[int] | torch.Tensor) -> torch.Tensor:
        """fp32 logits [T, vocab] of every position of one sequence (for parity tests), computed between two
        steps of the loop in a slot of its own."""
        ids = torch.as_tensor(token_ids, dtype=torch.int64).reshape(-1)
        if not 0 < ids.numel() <= self.cache.max_len:
            raise ValueError(f"need 1 to {self.cache.max_len} tokens, got {ids.numel()}")
        return self.engine.call(lambda: self.engine.runner.logits(ids), needs_slot=True)

    # -- requests ---------------------------------------------------------------------------------------------
    def _make_sequences(
        self,
        prompts: list[Prompt],
        params: SamplingParams | Sequence[SamplingParams] | None,
        stop: StopCheck,
        sink=None,
    ) -> list[EngineSequence]:
        if params is None or isinstance(params, SamplingParams):
            params = [params or self.default_sampling_params()] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError("give one SamplingParams, or one per prompt")
        seqs = []
        for prompt, p in zip(prompts, params, strict=True):
            ids = self.encode(prompt)
            if not ids:
                raise ValueError("empty prompt")
            if len(ids) >= self.cache.max_len:
                raise PromptTooLong(
                    f"prompt of {len(ids)} tokens does not fit max_model_len {self.cache.max_len} "
                    "(prompt plus at least one generated token)"
                )
            in_thinking = self.processor.opens_thinking(ids)
            seqs.append(
                EngineSequence(
                    request_id=uuid.uuid4().hex,
                    prompt=prompt if isinstance(prompt, str) else None,
                    prompt_ids=ids,
                    params=p,
                    generator=None if p.greedy else make_generator(p.seed, self.device),
                    in_thinking=in_thinking,
                    stop=stop,
                    sink=sink,
                    constraint=self._constraint(p, in_thinking),
                )
            )
        return seqs

    def _constraint(self, params: SamplingParams, in_thinking: bool) -> Constraint | None:
        """A grammar for the request's JSON Schema (compiled once per schema), active at once unless the answer
        waits for the thinking to end. A schema the grammar engine cannot take fails this request only."""
        grammar = self.compile_schema(params.json_schema)
        if grammar is None:
            return None
        waits = params.structured_after is not None and in_thinking
        framed = isinstance(params.json_schema, AnswerFormat)
        forbidden = self.grammars.forbidden_framed if framed else self.grammars.forbidden_tokens
        return Constraint(
            grammar, active=not waits, forbidden_tokens=forbidden, utf8_guard=self.grammars.utf8_guard()
        )

    def compile_schema(self, json_schema: dict | str | AnswerFormat | None):
        """The grammar of a JSON Schema or a framed answer (cached); raises StructuredOutputError for one it
        cannot take."""
        if isinstance(json_schema, AnswerFormat):
            with self._grammar_lock:
                return self.grammars.compile(json_schema)
        schema = canonical_schema(json_schema)
        if schema is None:
            return None
        with self._grammar_lock:
            return self.grammars.compile(schema)

    @staticmethod
    def _request_output(seq: EngineSequence) -> RequestOutput:
        completion = CompletionOutput(0, seq.text, list(seq.output_ids), seq.finish_reason)
        return RequestOutput(
            seq.request_id, seq.prompt, seq.prompt_ids, [completion], seq.finished, seq.num_prefix_hit
        )


def _drain(seq: EngineSequence) -> Iterator[StreamDelta]:
    """The deltas the loop put in a sequence's outbox, up to the last one; a failed step's exception is raised."""
    while True:
        try:
            item = seq.outbox.get(timeout=1.0)
        except queue.Empty:
            continue  # wakes up now and then so Ctrl-C reaches a waiting caller
        if isinstance(item, BaseException):
            raise item
        yield item
        if item.finished:
            return
