"""Sampling settings (vLLM's field names) and the token sampler: repetition penalty, greedy, temperature, min-p,
top-k, top-p, seeded; in vLLM's order (penalty on the raw logits, greedy after it; min-p after the temperature,
before top-k and top-p). Unset request fields get the checkpoint's defaults first (engine/generation_config.py)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch

from engine.structured import AnswerFormat


@dataclass
class SamplingParams:
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1 = all tokens
    min_p: float = 0.0  # drop tokens less likely than min_p x the most likely one; 0 = off
    repetition_penalty: float = 1.0  # > 1 discourages tokens already in the prompt or output; 1 = off
    max_tokens: int | None = 16  # None = up to the cache's length limit
    seed: int | None = None
    stop: list[str] | str | None = None  # the stop string itself is not part of the output text
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    thinking_budget: int | None = None  # after this many thinking tokens, `</think>` is forced
    # Schema-constrained answer (engine/structured.py): a JSON Schema (dict or JSON text) the answer must follow,
    # or an AnswerFormat (the JSON framed in fixed text, with an optional plain-text alternative).
    json_schema: dict | str | AnswerFormat | None = None
    # When the constraint starts: "</think>" = after the thinking (free while thinking), None = from the first token.
    structured_after: str | None = "</think>"

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        if not 0 <= self.min_p <= 1:
            raise ValueError("min_p must be in [0, 1]")
        if self.repetition_penalty <= 0:
            raise ValueError("repetition_penalty must be > 0")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        if self.thinking_budget is not None and self.thinking_budget < 0:
            raise ValueError("thinking_budget must be >= 0")
        if self.structured_after not in (None, "</think>"):
            raise ValueError('structured_after must be "</think>" or None')

    @property
    def stop_strings(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else [s for s in self.stop if s]

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def make_generator(seed: int | None, device: torch.device) -> torch.Generator:
    """A per-request generator: the same seed gives the same tokens whatever else runs in the batch."""
    generator = torch.Generator(device=device)
    generator.manual_seed(seed if seed is not None else random.getrandbits(63))
    return generator


def apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> None:
    """In place on one row's logits [vocab], vLLM's (and transformers') repetition penalty: every token in `seen`
    (bool [vocab]: in the prompt or the output so far) has a positive logit divided by the penalty, a negative one
    multiplied by it."""
    picked = logits[seen]
    logits[seen] = torch.where(picked > 0, picked / penalty, picked * penalty)


def sample_token(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> int:
    """One token id from fp32 logits [vocab] (ids that must never be emitted already set to -inf, the repetition
    penalty already applied)."""
    if params.greedy:
        return int(torch.argmax(logits))
    scaled = logits / params.temperature
    if params.min_p > 0:
        probs = torch.softmax(scaled, dim=-1)
        scaled = scaled.masked_fill(probs < probs.max() * params.min_p, float("-inf"))
    if 0 < params.top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, params.top_k).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        before = sorted_probs.cumsum(-1) - sorted_probs  # mass of the strictly more likely tokens
        sorted_probs = sorted_probs.masked_fill(before >= params.top_p, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
    return int(torch.multinomial(probs, 1, generator=generator))
