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
from dataclasses import dataclass, replace
from typing import Any

import torch

from engine import settings
from engine.cache import Cache
from engine.cache_manager import CacheManager
from engine.checkpoint import load_checkpoint
from engine.config import Config
from engine.cuda_graphs import GraphCheck
from engine.generation_config import SamplingDefaults, generation_config_override
from engine.llm_engine import LLMEngine
from engine.loader import DEFAULT_MODEL
from engine.memory_plan import RUNTIME_BYTES, MemoryPlan, model_weight_bytes, plan_memory
from engine.model_runner import ModelRunner
from engine.options import EngineOptions
from engine.output_processor import OutputProcessor
from engine.prefix_cache import PrefixCache
from engine.sampling import SamplingParams, make_generator
from engine.scheduler import Scheduler
from engine.sequence import Sequence as EngineSequence
from engine.sequence import StopCheck, StreamDelta
from engine.structured import AnswerFormat, Constraint, GrammarCompiler, canonical_schema

logger = logging.getLogger(__name__)

Prompt = str | list[int]


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


class LLM:
    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        device: str | torch.device | None = None,
        dtype: str | torch.dtype | None = None,
        **options: Any,
    ) -> None:
        """`model`, `device`, `dtype` and the other `options` by keyword: the fields of `EngineOptions`
        (engine/options.py), each documented there (`max_model_len`, `max_num_seqs`, `max_num_batched_tokens`,
        `enable_prefix_caching`, `prefix_cache_memory_gb`, `cache_memory_gb`, `static_decode`, `compile_decode`,
        `tokenizer`, `hf_compat_dtypes`, `generation_config`, `progress`); an unknown one is a TypeError."""
        self._load(EngineOptions(model=model, device=device, dtype=dtype, **options))

    @classmethod
    def from_options(cls, options: EngineOptions) -> LLM:
        """An engine over the checkpoint `options.model` names (what `aw-mcp engine serve` builds)."""
        llm = cls.__new__(cls)
        llm._load(options)
        return llm

    @classmethod
    def from_model(
        cls,
        model: torch.nn.Module,
        config: Config,
        tokenizer,
        *,
        name: str = "model",
        sampling_defaults: SamplingDefaults | None = None,
        **options: Any,
    ) -> LLM:
        """An engine over a model already built (fused weights) and a tokenizer: what `bench/gpu_check.py` serves
        its random full-size model with. `options`: `EngineOptions`' engine settings (`device` and `dtype` default
        to the model's; the loading ones do not apply); `sampling_defaults`: none unless given."""
        llm = cls.__new__(cls)
        llm.model_path, llm.file_tensor_bytes = None, None
        options = EngineOptions(model=name, **options)
        param = next(model.parameters())
        device = torch.device(options.device) if options.device is not None else param.device
        dtype = param.dtype if options.dtype is None else options.torch_dtype(config, device)
        llm._start(
            model, config, tokenizer, device, dtype, replace(options, compile_decode=False), sampling_defaults
        )
        return llm

    def _load(self, options: EngineOptions) -> None:
        device = options.torch_device()
        # A bad generation_config fails before the weights load.
        override = generation_config_override(options.generation_config)
        loaded = load_checkpoint(
            options.model,
            device,
            lambda config: options.torch_dtype(config, device),
            tokenizer=options.tokenizer,
            hf_compat_dtypes=options.hf_compat_dtypes,
            progress=options.progress,
        )
        self.model_path, self.file_tensor_bytes = loaded.path, loaded.file_tensor_bytes
        compiled = options.uses_compiled_decode(device)
        if compiled:
            loaded.model.compile_decode()
        self._start(
            loaded.model,
            loaded.config,
            loaded.tokenizer,
            device,
            loaded.dtype,
            replace(options, compile_decode=compiled),
            loaded.sampling_defaults if override is None else override,
        )

    def _start(
        self,
        model_module: torch.nn.Module,
        config: Config,
        tokenizer,
        device: torch.device,
        dtype: torch.dtype,
        options: EngineOptions,
        sampling_defaults: SamplingDefaults | None,
    ) -> None:
        """Allocates the cache and starts the step loop; `options` become `self.options`, resolved."""
        self.model_name, self.config, self.tokenizer = options.model, config, tokenizer
        self.sampling_defaults = sampling_defaults or SamplingDefaults()
        logger.info("engine: %s", self.sampling_defaults.describe())
        self.device, self.dtype = device, dtype
        cache = Cache.from_budget(
            config,
            options.cache_budget_bytes(device),
            options.context_length(config),
            options.max_num_seqs,
            dtype,
            device,
        )
        self.processor = OutputProcessor(self.tokenizer, self._eos_ids(), cache.max_len)
        prefix_cache = None
        if options.enable_prefix_caching:
            prefix_cache = PrefixCache(
                options.prefix_cache_budget_bytes(device), self.processor.token_id("<|im_start|>")
            )
        self.options = replace(
            options,
            device=device,
            dtype=dtype,
            max_model_len=cache.max_len,
            max_num_seqs=cache.num_slots,
            max_num_batched_tokens=options.batched_tokens(device),
            static_decode=options.uses_static_decode(device),
        )
        runner = ModelRunner(
            model_module,
            self.config,
            cache,
            self.device,
            emittable=min(len(self.tokenizer), self.config.vocab_size),
            static_decode=self.options.static_decode,
        )
        # Every padded decode batch size, before any caller can run a request (no capture ever happens later).
        runner.capture_graphs()
        scheduler = Scheduler(CacheManager(cache, prefix_cache), self.options.max_num_batched_tokens)
        self.engine = LLMEngine(
            runner, scheduler, self.processor, overlap=settings.overlap_schedule(device.type == "cuda")
        )
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
    def cache_manager(self) -> CacheManager:
        return self.engine.scheduler.cache_manager

    @property
    def prefix_cache(self) -> PrefixCache | None:
        return self.cache_manager.prefix_cache

    @property
    def graph_runner(self):
        return self.engine.runner.graph_runner

    @property
    def static_decode(self) -> bool:
        return self.engine.runner.static_decode

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
            batched_tokens=self.options.max_num_batched_tokens,
            prefix_cache=self.cache_manager.prefix_budget_bytes,
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

    def check_cuda_graphs(
        self, batch_sizes: list[int] | None = None, context: int | None = None
    ) -> list[GraphCheck]:
        """Graph replay against eager decode, one row per batch size (default: every captured size), on random
        tokens at positions up to `context`, from and back to the same cache state; run between two steps.
        `GraphCheck.ok` is the verdict, `describe()` one line of figures. Without captured graphs (CPU,
        `AW_CUDA_GRAPHS=0`) the "graph" is the eager step, so the rows only check the capture-safe step."""
        return self.engine.call(lambda: self.engine.runner.check_graphs(batch_sizes, context))

    def shutdown(self) -> None:
        """Stop the step loop (requests still running end with an error) and drop the captured graphs; the model
        and the cache go when the last reference to this LLM does (no reference cycle holds them)."""
        self.engine.close()

    # -- setup ------------------------------------------------------------------------------------------------
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
            # verbose=False: transformers' "longer than the specified maximum sequence length ... will result in
            # indexing errors" compares with the tokenizer file's model_max_length, not this engine's context,
            # which the scheduler and the server check themselves (PromptTooLong).
            return list(self.tokenizer.encode(prompt, add_special_tokens=False, verbose=False))
        return [int(t) for t in prompt]

    def logits(self, token_ids: list[int] | torch.Tensor) -> torch.Tensor:
        """fp32 logits [T, vocab] of every position of one sequence (for parity tests), computed between two
        steps of the loop in a slot of its own."""
        ids = torch.as_tensor(token_ids, dtype=torch.int64).reshape(-1)
        if not 0 < ids.numel() <= self.cache.max_len:
            raise ValueError(f"need 1 to {self.cache.max_len} tokens, got {ids.numel()}")
        return self.engine.logits(ids)

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
                    generator=None if p.greedy else make_generator(p.seed),
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
