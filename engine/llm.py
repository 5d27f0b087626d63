"""The engine's public API, shaped like vLLM's: `LLM(model=...)`, `generate`, `chat`, `logits`, plus streaming.

Requests run through one scheduling loop: new sequences are prefilled together (packed), then all running
sequences decode one token per step as a batch; a finished sequence frees its cache slot for the next waiting one.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch

from engine.cache import Cache
from engine.config import Config
from engine.cuda_graphs import DEFAULT_BATCH_SIZES, DecodeGraphRunner
from engine.forward_batch import ForwardBatch
from engine.loader import DEFAULT_MODEL, build_model, resolve_model_path
from engine.reasoning import THINK_END, THINK_START
from engine.sampling import SamplingParams, make_generator, sample_token

Prompt = str | list[int]
StopCheck = threading.Event | Callable[[], bool] | None
_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


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


@dataclass
class StreamDelta:
    """New text and token ids of one request since the previous delta."""

    request_id: str
    text: str
    token_ids: list[int]
    num_generated: int
    finished: bool = False
    finish_reason: str | None = None


@dataclass
class _Sequence:
    request_id: str
    prompt: str | None
    prompt_ids: list[int]
    params: SamplingParams
    generator: torch.Generator | None
    in_thinking: bool
    slot: int | None = None
    num_cached: int = 0
    output_ids: list[int] = field(default_factory=list)
    text: str = ""
    emitted_chars: int = 0
    emitted_ids: int = 0
    thinking_tokens: int = 0
    prefix_offset: int = 0
    read_offset: int = 0
    finish_reason: str | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


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
        cache_memory_gb: float | None = None,
        progress: bool = True,
        static_decode: bool | None = None,
        compile_decode: bool | None = None,
    ) -> None:
        """`static_decode`: decode through the capture-safe step and CUDA graphs (default: on CUDA only; on a CPU
        the eager step is faster, since it reads just the cached span and slot views without gathers).
        `compile_decode` (CPU only; default from `AW_COMPILE=1`): run decode batches through `torch.compile`d
        per-layer regions (`engine/models/decode_regions.py`), compiled on first use of each batch
        size (seconds each)."""
        from transformers import AutoTokenizer

        self.model_path = resolve_model_path(model)
        self.model_name = model
        self.config = Config.from_pretrained(self.model_path)
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.dtype = resolve_dtype(dtype, self.config, self.device)
        self.model = build_model(
            self.config, self.model_path, self.device, self.dtype, hf_compat_dtypes, progress
        )
        if compile_decode is None:
            compile_decode = os.environ.get("AW_COMPILE", "0").strip().lower() in ("1", "true", "on", "yes")
        if compile_decode and self.device.type == "cpu":
            self.model.compile_decode()
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.model_path))
        self.cache = self._allocate_cache(max_model_len, max_num_seqs, cache_memory_gb)
        self._lock = threading.Lock()
        self._stop_ids = self._eos_ids()
        self._think_start = self._token_id(THINK_START)
        self._think_end = self._token_id(THINK_END)
        # The embedding is padded past the tokenizer (248320 rows for 248077 tokens): those ids are never emitted.
        self._emittable = min(len(self.tokenizer), self.config.vocab_size)
        self.static_decode = self.device.type == "cuda" if static_decode is None else static_decode
        num_slots = self.cache.num_slots
        self.graph_runner = DecodeGraphRunner(
            self._static_decode_step,
            pad_slot_id=self.cache.pad_slot,
            batch_sizes=[s for s in DEFAULT_BATCH_SIZES if s < num_slots] + [num_slots],
        )

    # -- setup ------------------------------------------------------------------------------------------------
    def _allocate_cache(self, max_model_len: int | None, max_num_seqs: int, memory_gb: float | None) -> Cache:
        default_len = 32768 if self.device.type == "cuda" else 8192
        max_len = max_model_len or min(self.config.max_position_embeddings, default_len)
        if memory_gb is not None:
            budget = int(memory_gb * 2**30)
        elif self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            budget = int(free * 0.85)
        else:
            budget = 4 * 2**30
        return Cache.from_budget(self.config, budget, max_len, max_num_seqs, self.dtype, self.device)

    def _token_id(self, token: str) -> int | None:
        token_id = self.tokenizer.convert_tokens_to_ids(token)
        return token_id if isinstance(token_id, int) and token_id != self.tokenizer.unk_token_id else None

    def _eos_ids(self) -> set[int]:
        ids = set(self.config.eos_token_ids)
        for token in ("<|im_end|>", "<|endoftext|>"):
            token_id = self._token_id(token)
            if token_id is not None:
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
        if isinstance(prompts, str) or (
            isinstance(prompts, list) and prompts and isinstance(prompts[0], int)
        ):
            prompts = [prompts]
        seqs = self._make_sequences(list(prompts), params)
        for _ in self._run(seqs, stop):
            pass
        return [self._request_output(s) for s in seqs]

    def generate_stream(
        self, prompt: Prompt, params: SamplingParams | None = None, stop: StopCheck = None
    ) -> Iterator[StreamDelta]:
        """Yields deltas as tokens come; the last one has `finished=True`. `stop` (an Event or a callable
        returning True) cancels the request: it ends with finish_reason "abort"."""
        seqs = self._make_sequences([prompt], params)
        for seq in self._run(seqs, stop):
            delta = self._take_delta(seq)
            if delta.text or delta.token_ids or delta.finished:
                yield delta

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
        """fp32 logits [T, vocab] of every position of one sequence (for parity tests)."""
        ids = torch.as_tensor(token_ids, dtype=torch.int64).reshape(-1)
        if not 0 < ids.numel() <= self.cache.max_len:
            raise ValueError(f"need 1 to {self.cache.max_len} tokens, got {ids.numel()}")
        with self._lock:
            slot = self.cache.allocate()
            try:
                batch = ForwardBatch.build([slot], [0], [ids.numel()], self.device)
                return self.model(ids.to(self.device), batch, self.cache, all_logits=True).cpu()
            finally:
                self.cache.free(slot)

    # -- requests ---------------------------------------------------------------------------------------------
    def _make_sequences(
        self, prompts: list[Prompt], params: SamplingParams | Sequence[SamplingParams] | None
    ) -> list[_Sequence]:
        if params is None or isinstance(params, SamplingParams):
            params = [params or SamplingParams()] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError("give one SamplingParams, or one per prompt")
        seqs = []
        for prompt, p in zip(prompts, params, strict=True):
            ids = self.encode(prompt)
            if not ids:
                raise ValueError("empty prompt")
            if len(ids) >= self.cache.max_len:
                raise ValueError(
                    f"prompt of {len(ids)} tokens does not fit max_model_len {self.cache.max_len}"
                )
            seqs.append(
                _Sequence(
                    request_id=uuid.uuid4().hex,
                    prompt=prompt if isinstance(prompt, str) else None,
                    prompt_ids=ids,
                    params=p,
                    generator=None if p.greedy else make_generator(p.seed, self.device),
                    in_thinking=self._opens_thinking(ids),
                )
            )
        return seqs

    def _opens_thinking(self, ids: list[int]) -> bool:
        """The prompt leaves a `<think>` open (the chat template's thinking generation prompt)."""
        if self._think_start is None:
            return False
        last_start = max((i for i, t in enumerate(ids) if t == self._think_start), default=-1)
        last_end = max((i for i, t in enumerate(ids) if t == self._think_end), default=-1)
        return last_start > last_end

    def _request_output(self, seq: _Sequence) -> RequestOutput:
        completion = CompletionOutput(0, seq.text, list(seq.output_ids), seq.finish_reason)
        return RequestOutput(seq.request_id, seq.prompt, seq.prompt_ids, [completion], seq.finished)

    # -- the scheduling loop ----------------------------------------------------------------------------------
    def _run(self, seqs: list[_Sequence], stop: StopCheck) -> Iterator[_Sequence]:
        """Runs the sequences to completion, yielding a sequence every time it got a new token or finished."""
        with self._lock:
            waiting = deque(seqs)
            running: list[_Sequence] = []
            try:
                while waiting or running:
                    if _stop_requested(stop):
                        for seq in [*running, *waiting]:
                            seq.finish_reason = "abort"
                            yield seq
                        break
                    admitted = []
                    while waiting and self.cache.num_free:
                        seq = waiting.popleft()
                        seq.slot = self.cache.allocate()
                        admitted.append(seq)
                    if admitted:
                        stepped, logits = admitted, self._prefill(admitted)
                        running.extend(admitted)
                    else:
                        running.sort(key=lambda s: s.slot)
                        stepped, logits = running, self._decode(running)
                    for seq, token in zip(stepped, self._pick_tokens(stepped, logits), strict=True):
                        self._append_token(seq, token)
                        yield seq
                    for seq in [s for s in running if s.finished]:
                        running.remove(seq)
                        self.cache.free(seq.slot)
                        seq.slot = None
            finally:
                for seq in running:
                    if seq.slot is not None:
                        self.cache.free(seq.slot)
                        seq.slot = None

    def _prefill(self, seqs: list[_Sequence]) -> torch.Tensor:
        ids = torch.tensor([t for s in seqs for t in s.prompt_ids], dtype=torch.int64, device=self.device)
        batch = ForwardBatch.build(
            [s.slot for s in seqs], [0] * len(seqs), [len(s.prompt_ids) for s in seqs], self.device
        )
        logits = self.model(ids, batch, self.cache)
        for seq in seqs:
            seq.num_cached = len(seq.prompt_ids)
        return self._mask_unemittable(logits)

    def _decode(self, seqs: list[_Sequence]) -> torch.Tensor:
        ids = torch.tensor([s.output_ids[-1] for s in seqs], dtype=torch.int64, device=self.device)
        slots, starts = [s.slot for s in seqs], [s.num_cached for s in seqs]
        if self.static_decode:
            positions = torch.tensor(starts, dtype=torch.int64, device=self.device)
            slot_ids = torch.tensor(slots, dtype=torch.int64, device=self.device)
            logits = self.graph_runner(ids, positions, slot_ids)
        else:
            batch = ForwardBatch.build(slots, starts, [1] * len(seqs), self.device)
            logits = self._mask_unemittable(self.model(ids, batch, self.cache))
        for seq in seqs:
            seq.num_cached += 1
        return logits

    def _static_decode_step(
        self, input_ids: torch.Tensor, positions: torch.Tensor, slot_ids: torch.Tensor
    ) -> torch.Tensor:
        """The capture-safe decode step (what `graph_runner` captures), logits of unemittable ids masked."""
        return self._mask_unemittable(self.model.decode_step(input_ids, positions, slot_ids, self.cache))

    @torch.inference_mode()
    def _mask_unemittable(self, logits: torch.Tensor) -> torch.Tensor:
        if self._emittable < logits.shape[-1]:
            logits[:, self._emittable :] = float("-inf")
        return logits

    def _pick_tokens(self, seqs: list[_Sequence], logits: torch.Tensor) -> list[int]:
        """The next token of every sequence: greedy rows take one batched argmax (a single host read-back for the
        whole step), sampled rows their own seeded sampler; an exhausted thinking budget forces `</think>`."""
        greedy = logits.argmax(-1).tolist() if any(s.params.greedy for s in seqs) else None
        tokens = []
        for i, seq in enumerate(seqs):
            budget = seq.params.thinking_budget
            forced_end = self._think_end is not None and seq.in_thinking
            if forced_end and budget is not None and seq.thinking_tokens >= budget:
                tokens.append(self._think_end)
            elif seq.params.greedy:
                tokens.append(greedy[i])
            else:
                tokens.append(sample_token(logits[i], seq.params, seq.generator))
        return tokens

    def _append_token(self, seq: _Sequence, token: int) -> None:
        params = seq.params
        seq.output_ids.append(token)
        if token == self._think_start:
            seq.in_thinking = True
        elif token == self._think_end:
            seq.in_thinking = False
        elif seq.in_thinking:
            seq.thinking_tokens += 1
        checked = len(seq.text)
        self._detokenize(seq)

        stop_strings = params.stop_strings
        if stop_strings:
            # Only text around the new piece can hold a stop string that was not there before.
            window = max(0, checked - max(len(s) for s in stop_strings) + 1)
            hits = [i for s in stop_strings if (i := seq.text.find(s, window)) != -1]
            if hits:
                seq.text = seq.text[: min(hits)]
                seq.finish_reason = "stop"
                return
        if (not params.ignore_eos and token in self._stop_ids) or token in params.stop_token_ids:
            seq.finish_reason = "stop"
        elif params.max_tokens is not None and len(seq.output_ids) >= params.max_tokens:
            seq.finish_reason = "length"
        elif seq.num_cached + 1 >= self.cache.max_len:
            seq.finish_reason = "length"

    def _detokenize(self, seq: _Sequence) -> None:
        """Incremental decoding: re-decode only a short window so a multi-byte character split across tokens is
        emitted once complete."""
        skip = seq.params.skip_special_tokens
        ids = seq.output_ids
        before = self.tokenizer.decode(ids[seq.prefix_offset : seq.read_offset], skip_special_tokens=skip)
        after = self.tokenizer.decode(ids[seq.prefix_offset :], skip_special_tokens=skip)
        if after.endswith("\ufffd"):
            return
        seq.text += after[len(before) :]
        seq.prefix_offset, seq.read_offset = seq.read_offset, len(ids)

    def _take_delta(self, seq: _Sequence) -> StreamDelta:
        """Text not yet streamed; while running, hold back what could still become a stop string."""
        hold = 0 if seq.finished else max((len(s) - 1 for s in seq.params.stop_strings), default=0)
        visible = max(seq.emitted_chars, len(seq.text) - hold)
        text = seq.text[seq.emitted_chars : visible]
        new_ids = seq.output_ids[seq.emitted_ids :]
        seq.emitted_chars, seq.emitted_ids = visible, len(seq.output_ids)
        return StreamDelta(
            seq.request_id, text, new_ids, len(seq.output_ids), seq.finished, seq.finish_reason
        )


def _stop_requested(stop: StopCheck) -> bool:
    if stop is None:
        return False
    if isinstance(stop, threading.Event):
        return stop.is_set()
    return bool(stop())
