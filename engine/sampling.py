"""Sampling settings (vLLM's field names) and the batched token sampler.

`sample_on_device` picks the next token of every row of a step's fp32 logits [B, vocab] in one launch sequence and
returns them as a device tensor, read by nobody (the overlapped step loop feeds it to the next decode and copies it
to the host behind it); `sample_tokens` is the same with its one host read. In vLLM's order: the repetition penalty on the raw logits (greedy rows too), greedy rows' argmax
after it; sampled rows divided by their temperature, then min-p, then top-k, then top-p over the kept values, then
one draw. Nothing loops over rows in Python and nothing sorts the vocabulary:
* rows with a top-k take their batch's largest k (plus TIE_SLACK, so that tokens tied with the k-th value stay, as
  in vLLM) with `torch.topk`; min-p, top-k, top-p and the draw then run on those few values;
* rows without one run over the whole vocabulary: min-p is a mask, top-p a threshold found digit by digit on the bits
  of the probabilities (exact to the float: no sort), the draw an inverse CDF over the vocabulary's order.
Each sampled row draws one uniform per step from its own generator (`make_generator`: a seeded Python RNG on the
host, so a request never makes a CUDA call and a draw costs nanoseconds); the uniforms go up with the step's other
per-row values in one copy. A row's tokens depend only on its seed and its own logits, whatever else is batched.
Unset request fields get the checkpoint's defaults first (engine/generation_config.py).

`sample_token` and `apply_repetition_penalty` are the plain-torch reference (one row: softmax, full sort,
multinomial), kept beside the batched sampler for its tests and bench/sampler_cpu.py.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from engine.forward_batch import to_device
from engine.structured import AnswerFormat

TIE_SLACK = 32  # top-k candidates past the batch's largest k: ties with the k-th value stay (vLLM keeps all)
_FIXED_POINT = 2.0**40  # top-p's mass unit: a 248k-token row sums to < 2^58, exact in int64


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


def make_generator(seed: int | None) -> random.Random:
    """A per-request generator: the same seed gives the same tokens whatever else runs in the batch. It lives on the
    host (the sampler draws one uniform per step from it), so creating one never touches the GPU."""
    return random.Random(seed if seed is not None else random.getrandbits(63))


@dataclass(frozen=True)
class RowSampling:
    """One row of a step: its settings, its generator (None: greedy), and, for a repetition penalty, the bool [vocab]
    mask of the token ids in its prompt and output so far (on the logits' device)."""

    params: SamplingParams
    generator: random.Random | None = None
    seen: torch.Tensor | None = None


def sample_on_device(logits: torch.Tensor, rows: Sequence[RowSampling | int | None]) -> torch.Tensor:
    """The next token of each row of fp32 logits [B, vocab] (ids that must never be emitted already -inf), as int64
    [B] on the logits' device, without reading anything back: the overlapped step loop feeds it to the next decode
    as it is and copies it to the host behind it. An int row is that token (forced: it draws nothing), a None row
    gets -1. `logits` is not modified."""
    if logits.shape[0] != len(rows):
        raise ValueError(f"{logits.shape[0]} rows of logits for {len(rows)} rows of settings")
    if not rows:
        return torch.empty(0, dtype=torch.int64, device=logits.device)
    live = [i for i, row in enumerate(rows) if isinstance(row, RowSampling)]
    fixed = [i for i, row in enumerate(rows) if not isinstance(row, RowSampling)]
    picks = []
    if live:
        logits = _penalized(logits, rows)
        vocab = logits.shape[-1]
        greedy = [i for i in live if rows[i].params.greedy]
        windowed = [i for i in live if not rows[i].params.greedy and 0 < rows[i].params.top_k < vocab]
        full = [i for i in live if not rows[i].params.greedy and not 0 < rows[i].params.top_k < vocab]
        if greedy:
            picks.append(_select(logits.argmax(-1), greedy))
        if windowed:
            picks.append(_sample_windowed(_select(logits, windowed), [rows[i] for i in windowed]))
        if full:
            picks.append(_sample_full(_select(logits, full), [rows[i] for i in full]))
        order = greedy + windowed + full + fixed
    else:
        order = fixed
    in_order = order == list(range(len(rows)))
    if fixed or not in_order:  # the fixed tokens and the rows' places go up in one copy
        values = [-1 if rows[i] is None else rows[i] for i in fixed]
        fixed_ids, places = to_device([values, [] if in_order else order], logits.device)
        if fixed:
            picks.append(fixed_ids)
    tokens = picks[0] if len(picks) == 1 else torch.cat(picks)
    return tokens if in_order else torch.empty_like(tokens).index_copy_(0, places, tokens)


def sample_tokens(logits: torch.Tensor, rows: Sequence[RowSampling | None]) -> list[int | None]:
    """`sample_on_device`, read back: the next token of each row as a host int (None for a None row, whose token is
    forced), in the step's one host read."""
    if logits.shape[0] != len(rows):
        raise ValueError(f"{logits.shape[0]} rows of logits for {len(rows)} rows of settings")
    if all(row is None for row in rows):
        return [None] * len(rows)
    picked = sample_on_device(logits, rows).tolist()
    return [None if row is None else token for row, token in zip(rows, picked, strict=True)]


def _penalized(logits: torch.Tensor, rows: Sequence[RowSampling | int | None]) -> torch.Tensor:
    """The repetition penalty of every penalized row at once (as `apply_repetition_penalty`, row for row), on a copy
    when any row has one."""
    sampled = [(i, row) for i, row in enumerate(rows) if isinstance(row, RowSampling)]
    penalized = [i for i, row in sampled if row.params.repetition_penalty != 1.0]
    if not penalized:
        return logits
    if any(rows[i].seen is None for i in penalized):
        raise ValueError("a row with a repetition penalty needs its `seen` token mask")
    # Stacked as bytes: torch's CPU stack of bool tensors is ~100x slower (0.4 s at 32 x 248k).
    seen = torch.stack([rows[i].seen.view(torch.uint8) for i in penalized]).view(torch.bool)
    penalties = [rows[i].params.repetition_penalty for i in penalized]
    penalty = to_device([penalties], logits.device, torch.float32)[0].unsqueeze(1)
    picked = _select(logits, penalized)
    picked = torch.where(seen, torch.where(picked > 0, picked / penalty, picked * penalty), picked)
    if len(penalized) == logits.shape[0]:
        return picked
    return logits.index_copy(0, to_device([penalized], logits.device)[0], picked)


class _RowValues(NamedTuple):
    """A group's per-row settings and this step's uniform draw, as [R, 1] columns on the logits' device."""

    temperature: torch.Tensor
    top_p: torch.Tensor
    min_p: torch.Tensor
    top_k: torch.Tensor  # int64
    uniform: torch.Tensor  # float64, in [0, 1)


def _sample_windowed(logits: torch.Tensor, rows: list[RowSampling]) -> torch.Tensor:
    values = _row_values(rows, logits.device)
    ids, weights = _windowed_weights(logits, values, max(row.params.top_k for row in rows))
    return ids.gather(1, _inverse_cdf(weights, values.uniform)).squeeze(1)


def _sample_full(logits: torch.Tensor, rows: list[RowSampling]) -> torch.Tensor:
    values = _row_values(rows, logits.device)
    min_p = any(row.params.min_p > 0 for row in rows)
    weights = _full_weights(logits, values, min_p, top_p=any(row.params.top_p < 1 for row in rows))
    return _inverse_cdf(weights, values.uniform).squeeze(1)


def _windowed_weights(
    logits: torch.Tensor, values: _RowValues, largest_k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows with a top-k: their token ids and unnormalized probabilities on [R, largest k + TIE_SLACK] candidates
    (torch.topk: a selection, not a sort of the vocabulary); everything after it runs on those few values."""
    width = min(logits.shape[-1], largest_k + TIE_SLACK)
    candidates, ids = _canonical(*logits.topk(width, dim=-1))
    scaled = candidates / values.temperature
    keep = scaled >= scaled.gather(1, values.top_k - 1)  # top-k: the k-th value and everything tied with it
    weights = torch.exp(scaled - scaled[:, :1])  # p / p_max: the window is sorted, the row's max comes first
    keep &= (
        weights >= values.min_p
    )  # min-p: the same mask before or after top-k (both keep the largest values)
    weights = weights.masked_fill(~keep, 0.0)
    before = weights.cumsum(-1) - weights  # the kept mass strictly more likely than each value
    return ids, weights.masked_fill(before >= values.top_p * weights.sum(-1, keepdim=True), 0.0)


def _full_weights(logits: torch.Tensor, values: _RowValues, min_p: bool, top_p: bool) -> torch.Tensor:
    """Rows without a top-k: unnormalized probabilities over the whole vocabulary (min-p and top-p passes only
    when a row of the group uses them)."""
    scaled = logits / values.temperature
    weights = torch.exp(scaled - scaled.amax(-1, keepdim=True))  # p / p_max
    if min_p:
        weights = weights.masked_fill(weights < values.min_p, 0.0)
    if top_p:
        weights = weights.masked_fill(weights < _top_p_threshold(weights, values.top_p), 0.0)
    return weights


def _top_p_threshold(weights: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Per row the smallest weight t whose strictly larger weights hold less than top_p of the mass: top-p keeps
    exactly the weights >= t. Found digit by digit on t's float bits (weights are in [0, 1], where a float's bits
    order as the float does): three rounds of a 1,024-bucket mass histogram, each narrowing t to one bucket of
    the last. Masses are fixed point (units of 2^-40), so every sum is exact and the same in any order and batch.
    No sort, no host read. Rows with top_p 1 get 0 (keep everything)."""
    bits = weights.view(torch.int32)
    mass = (weights * _FIXED_POINT).long()
    # Keep while the mass strictly above < top_p x total, i.e. (integers) < ceil(top_p x total).
    target = (top_p.double() * mass.sum(-1, keepdim=True).double()).ceil().long()
    prefix = torch.zeros(weights.shape[0], 1, dtype=torch.int32, device=weights.device)  # t's digits so far
    for shift in (20, 10, 0):  # bits 29..20, 19..10, 9..0 (a weight <= 1.0 has bits < 2^30)
        digit = ((bits >> shift) & 1023).long()
        inside = mass if shift == 20 else torch.where((bits >> (shift + 10)) == prefix, mass, 0)
        histogram = torch.zeros(weights.shape[0], 1024, dtype=torch.int64, device=weights.device)
        histogram.scatter_add_(1, digit, inside)
        at_or_above = histogram.flip(-1).cumsum(-1).flip(-1)
        # The highest bucket whose mass at or above it reaches the target holds t; what lies above it is kept.
        chosen = (at_or_above >= target).sum(-1, keepdim=True) - 1
        target = target - (at_or_above.gather(1, chosen) - histogram.gather(1, chosen))
        prefix = (prefix << 10) | chosen.int()
    return torch.where(top_p < 1, prefix.view(torch.float32), 0.0)


def _inverse_cdf(weights: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """Per row [R, N] of non-negative weights, the first index [R, 1] whose cumulative weight passes uniform x total:
    a draw with probability weight / total. The point stays below the total (u x total can round up to it), so a
    zero weight, e.g. a masked id at the end, is never picked. Float64: a sum over 248k values loses nothing."""
    cumulative = weights.double().cumsum(-1)
    total = cumulative[:, -1:]
    point = torch.minimum(uniform * total, total.nextafter(torch.zeros_like(total)))
    return (cumulative <= point).sum(-1, keepdim=True).clamp_(max=weights.shape[-1] - 1)


def _canonical(values: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """topk's output with ties ordered by token id (the kernel's own tie order can depend on the batch's shape),
    so that a seeded row picks the same token whatever else is in the batch."""
    by_id = ids.argsort(-1)
    values, ids = values.gather(1, by_id), ids.gather(1, by_id)
    values, order = values.sort(dim=-1, descending=True, stable=True)
    return values, ids.gather(1, order)


def _row_values(rows: list[RowSampling], device: torch.device) -> _RowValues:
    """The group's settings and one uniform per row from its own generator (drawn here, on the host): one upload."""
    table = [
        (
            row.params.temperature,
            row.params.top_p,
            row.params.min_p,
            row.params.top_k,
            (row.generator or random).random(),
        )
        for row in rows
    ]
    flat = to_device([[value for row in table for value in row]], device, torch.float64)[0]
    temperature, top_p, min_p, top_k, uniform = flat.view(len(rows), 5).T.unsqueeze(-1)
    return _RowValues(temperature.float(), top_p.float(), min_p.float(), top_k.long(), uniform)


def _select(tensor: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """The given rows of `tensor` (itself when they are all of them, in order)."""
    if rows == list(range(tensor.shape[0])):
        return tensor
    return tensor.index_select(0, to_device([rows], tensor.device)[0])


def apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> None:
    """Reference. In place on one row's logits [vocab], vLLM's (and transformers') repetition penalty: every token in
    `seen` (bool [vocab]: in the prompt or the output so far) has a positive logit divided by the penalty, a negative
    one multiplied by it."""
    picked = logits[seen]
    logits[seen] = torch.where(picked > 0, picked / penalty, picked * penalty)


def reference_probabilities(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Reference. The distribution `sample_token` draws from: fp32 logits [vocab] (penalty already applied) ->
    probabilities [vocab] summing to 1, in vLLM's order (temperature, min-p, top-k, top-p by a full sort)."""
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
        probs = probs / probs.sum()
    return probs


def sample_token(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> int:
    """Reference. One token id from fp32 logits [vocab] (ids that must never be emitted already -inf, the repetition
    penalty already applied), one row at a time."""
    if params.greedy:
        return int(torch.argmax(logits))
    return int(torch.multinomial(reference_probabilities(logits, params), 1, generator=generator))
