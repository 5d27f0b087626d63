"""Runs the model for a planned step: fills the slots the plan restores (or starts fresh), packs the prefill chunks
into one forward, decodes the running sequences (through CUDA graphs on a GPU), takes the snapshots the plan saves,
and picks each sequence's next token. Owns the model and the cache's device memory; only the step loop's thread
calls it. Which slot is whose, and which snapshots to take or restore, is the plan's (engine/cache_manager.py).

Nothing here refers back to the runner (the graphs capture a `StaticDecodeStep`, not a bound method of it): once
the engine is dropped, reference counting alone frees the model, the cache and the graphs. Inputs go to the device
in one pinned, non-blocking copy per forward (engine/forward_batch.py `to_device`). `sample` leaves a step's tokens
on the device (`SampledTokens`): the next `decode` takes its input ids from them (gathered by sequence, a row whose
token is not there uploaded from the host), and their copy to the host is queued behind them, read when the step
loop settles them (`HostCopy`: pinned memory and a CUDA event; on CPU the values are simply there)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.cache import Cache, Snapshot
from engine.cache_manager import Restore, Save
from engine.config import Config
from engine.cuda_graphs import (
    DecodeGraphRunner,
    GraphCapturer,
    GraphCheck,
    compare_graph_with_eager,
    padded_batch_sizes,
)
from engine.forward_batch import ForwardBatch, HostCopy, to_device
from engine.output_processor import OutputProcessor
from engine.sampling import RowSampling, sample_on_device
from engine.scheduler import PrefillChunk
from engine.sequence import Sequence
from engine.structured import answer_pending, mask_logits, mask_stop_tokens


class ModelRunner:
    def __init__(
        self,
        model: torch.nn.Module,
        config: Config,
        cache: Cache,
        device: torch.device,
        emittable: int,
        static_decode: bool,
        graph_capturer: GraphCapturer | None = None,
    ) -> None:
        self.model = model
        self.config = config
        self.cache = cache
        self.device = device
        # The embedding is padded past the tokenizer (248320 rows for 248077 tokens): those ids are never emitted.
        self.emittable = emittable
        self.static_decode = static_decode
        self.graph_runner = DecodeGraphRunner(
            StaticDecodeStep(model, cache, emittable),
            pad_slot_id=cache.pad_slot,
            batch_sizes=padded_batch_sizes(cache.num_slots),
            capturer=graph_capturer,
        )
        # The engine's end tokens (masked while a constrained answer waits for the thinking), on the device.
        self._stop_ids: tuple[tuple[int, ...], torch.Tensor] | None = None

    def capture_graphs(self) -> None:
        """Capture the decode graph of every padded batch size (static decode on a GPU only), before the step loop
        serves anything: a step never captures."""
        if self.static_decode:
            self.graph_runner.capture_all(self.device)

    def close(self) -> None:
        """Drop the captured graphs and their memory pool (the engine shut down)."""
        self.graph_runner.reset()

    def check_graphs(
        self, batch_sizes: list[int] | None = None, context: int | None = None
    ) -> list[GraphCheck]:
        """For each batch size (default: every captured size), one decode step of random tokens in slots 0..B-1 at
        positions up to `context` (default: half the cache length): graph replay against the capture-safe step and
        the eager forward, from the same cache state; the slots are restored afterwards, so live sequences are
        untouched. Between two steps only (`LLM.check_cuda_graphs`)."""
        sizes = batch_sizes or self.graph_runner.captured_sizes or [1]
        reach = max(1, min(context or self.cache.max_len // 2, self.cache.max_len - 1))
        gen = torch.Generator().manual_seed(0)
        checks = []
        for size in sizes:
            if not 1 <= size <= self.cache.num_slots:
                raise ValueError(
                    f"batch size {size} is outside 1..{self.cache.num_slots} (the cache's slots)"
                )
            tokens = torch.randint(0, self.emittable, (size,), generator=gen).tolist()
            starts = torch.randint(max(0, reach - 64), reach, (size,), generator=gen).tolist()
            ids, positions, slot_ids = to_device([tokens, starts, list(range(size))], self.device)

            def eager(ids: torch.Tensor, positions: torch.Tensor, slot_ids: torch.Tensor) -> torch.Tensor:
                batch = ForwardBatch.build(
                    slot_ids.tolist(), positions.tolist(), [1] * ids.numel(), self.device
                )
                return self._mask_unemittable(self.model(ids, batch, self.cache))

            checks.append(
                compare_graph_with_eager(
                    self.graph_runner,
                    eager,
                    (ids, positions, slot_ids),
                    lambda slots=slot_ids, at=positions: self.cache.rows_at(slots, at),
                    self.cache.put_rows,
                )
            )
        return checks

    def fill_slots(self, restores: list[Restore]) -> None:
        """The slots taken this step, before any forward reads them: a cached prefix copied in, or a fresh start."""
        for restore in restores:
            if restore.snapshot is None:
                self.cache.reset(restore.seq.slot)
            else:
                self.cache.restore(restore.snapshot, restore.seq.slot)

    def take_snapshots(self, saves: list[Save]) -> list[Snapshot | None]:
        """The planned snapshots, after the forward; None for the first the device has no memory for and the rest
        (the cache manager then gives the prefix cache's memory back)."""
        snapshots: list[Snapshot | None] = []
        for save in saves:
            try:
                snapshots.append(self.cache.snapshot(save.slot, save.tokens))
            except torch.OutOfMemoryError:
                return snapshots + [None] * (len(saves) - len(snapshots))
        return snapshots

    def prefill(self, chunks: list[PrefillChunk]) -> torch.Tensor:
        """All chunks packed into one forward; fp32 logits [N, vocab] of each chunk's last token."""
        batch = ForwardBatch.build(
            [c.seq.slot for c in chunks],
            [c.start for c in chunks],
            [c.length for c in chunks],
            self.device,
            input_ids=[t for c in chunks for t in c.seq.prompt_ids[c.start : c.start + c.length]],
        )
        return self._mask_unemittable(self.model(batch.input_ids, batch, self.cache))

    def decode(self, seqs: list[Sequence], last: SampledTokens | None = None) -> torch.Tensor:
        """fp32 logits [N, vocab] of one decode step of `seqs`. Each one's input token is its row of `last` (the
        previous step's tokens, still on the device and maybe not yet handed to the sequence), or, where `last`
        does not hold it, its last output token from the host."""
        slots, starts = [s.slot for s in seqs], [s.num_cached for s in seqs]
        if self.static_decode:
            ids, positions, slot_ids = self._input_ids(seqs, last, [starts, slots])
            # Copied into the graph's static inputs on the device.
            return self.graph_runner(ids, positions, slot_ids)
        (ids,) = self._input_ids(seqs, last, [])
        batch = ForwardBatch.build(slots, starts, [1] * len(seqs), self.device)
        return self._mask_unemittable(self.model(ids, batch, self.cache))

    def _input_ids(
        self, seqs: list[Sequence], last: SampledTokens | None, also: list[list[int]]
    ) -> list[torch.Tensor]:
        """The decode's input ids on the device, then the host lists `also`, all moved in one copy: the ids are
        `last`'s rows of the sequences (itself when they are all of it, in order), gathered on the device; only a
        sequence `last` does not hold has its token uploaded."""
        rows = [None if last is None else last.row_of(seq) for seq in seqs]
        from_host = [seq.output_ids[-1] for seq, row in zip(seqs, rows, strict=True) if row is None]
        if last is not None and not from_host and rows == list(range(len(last.seqs))):
            return [last.ids, *(to_device(also, self.device) if also else [])]
        if last is None:
            return to_device([from_host, *also], self.device)
        held = len(last.seqs)
        spare = iter(range(held, held + len(from_host)))  # uploaded tokens follow the held ones
        index = [row if row is not None else next(spare) for row in rows]
        index_ids, host_ids, *rest = to_device([index, from_host, *also], self.device)
        source = torch.cat([last.ids, host_ids]) if from_host else last.ids
        return [source.index_select(0, index_ids), *rest]

    def logits(self, token_ids: torch.Tensor, slot: int) -> torch.Tensor:
        """fp32 logits [T, vocab] of every position of one sequence, run from a fresh start in `slot`."""
        self.cache.reset(slot)
        batch = ForwardBatch.build([slot], [0], [token_ids.numel()], self.device)
        return self.model(token_ids.to(self.device), batch, self.cache, all_logits=True).cpu()

    @torch.inference_mode()
    def sample(self, seqs: list[Sequence], logits: torch.Tensor, processor: OutputProcessor) -> SampledTokens:
        """The next token of every sequence, all rows in one batched sampler (engine/sampling.py, each sampled row
        drawing from its own seeded generator), left on the device with its copy to the host queued behind it:
        nothing here waits for the device. An exhausted thinking budget forces `</think>`; rows with an active
        grammar constraint are masked first, rows whose constrained answer waits for the thinking to end have their
        stop tokens masked, rows with a repetition penalty penalized first (greedy ones too, as in vLLM). All of
        that reads only host state the sequences' previous tokens have already updated (the loop settles them
        first)."""
        constrained = [i for i, s in enumerate(seqs) if s.constraint is not None and s.constraint.active]
        pending = [i for i, s in enumerate(seqs) if answer_pending(s.constraint)]
        penalized = [i for i, s in enumerate(seqs) if s.params.repetition_penalty != 1.0]
        if constrained or penalized:  # after the model (and its CUDA graph): capture is untouched
            # Rows must be contiguous for the bitmask kernel (CPU decode logits can be a transposed view).
            logits = logits.contiguous()
        if constrained:
            mask_logits(logits, constrained, [seqs[i].constraint for i in constrained])
        if pending:
            self._mask_stops(logits, [seqs[i] for i in pending], pending, processor)
        rows: list[RowSampling | int] = []
        for i, seq in enumerate(seqs):
            forced = processor.forced_token(seq)
            if forced is not None:
                rows.append(forced)
                continue
            seen = _seen_tokens(seq, logits.shape[-1], logits.device) if i in penalized else None
            rows.append(RowSampling(seq.params, seq.generator, seen))
        ids = sample_on_device(logits, rows)  # the whole batch at once, forced tokens in place
        return SampledTokens(list(seqs), ids, HostCopy(ids), [seq.num_cached for seq in seqs])

    def _mask_stops(
        self, logits: torch.Tensor, seqs: list[Sequence], rows: list[int], processor: OutputProcessor
    ) -> None:
        """Mask the end tokens of `rows` (their constrained answer has not started: ending now would leave it
        empty, so the thinking may end only through `</think>`): the engine's end tokens for all of them in one
        indexed write, a request's own `stop_token_ids` row by row. The indices go up without a read-back."""
        vocab = logits.shape[-1]
        eos_rows = [row for row, seq in zip(rows, seqs, strict=True) if not seq.params.ignore_eos]
        if eos_rows and processor.stop_ids:
            key = tuple(sorted(t for t in processor.stop_ids if t < vocab))
            if self._stop_ids is None or self._stop_ids[0] != key:
                self._stop_ids = key, torch.tensor(key, dtype=torch.int64, device=logits.device)
            mask_stop_tokens(logits, _indices(eos_rows, logits.device), self._stop_ids[1])
        for row, seq in zip(rows, seqs, strict=True):
            own = [t for t in seq.params.stop_token_ids if 0 <= t < vocab]
            if own:
                mask_stop_tokens(logits, _indices([row], logits.device), _indices(own, logits.device))

    def _mask_unemittable(self, logits: torch.Tensor) -> torch.Tensor:
        return mask_unemittable(logits, self.emittable)


@dataclass(eq=False)
class SampledTokens:
    """One step's tokens: `ids` (int64 [N] on the device, the next decode's input; nothing has read them) and
    `host`, their copy on its way to the host (what settling reads). `cached` is each sequence's cached length when
    sampled: its token is the decode input at that position, and only until the sequence has decoded it."""

    seqs: list[Sequence]
    ids: torch.Tensor
    host: HostCopy
    cached: list[int]
    _rows: dict[Sequence, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rows = {seq: row for row, seq in enumerate(self.seqs)}

    def __contains__(self, seq: Sequence) -> bool:
        return seq in self._rows

    def row_of(self, seq: Sequence) -> int | None:
        """The sequence's row while its token here is its next decode input, else None."""
        row = self._rows.get(seq)
        return row if row is not None and seq.num_cached == self.cached[row] else None

    def tolist(self) -> list[int]:
        """The tokens on the host (waits for their copy)."""
        return self.host.tolist()


class StaticDecodeStep:
    """The capture-safe decode step (what the graph runner captures), logits of unemittable ids masked. It holds
    the model and the cache, never the runner: a bound method of the runner would make runner -> graph runner ->
    runner a cycle that only a full gc pass frees (65 GiB of weights kept after shutdown on a GPU)."""

    def __init__(self, model: torch.nn.Module, cache: Cache, emittable: int) -> None:
        self.model, self.cache, self.emittable = model, cache, emittable

    def __call__(
        self, input_ids: torch.Tensor, positions: torch.Tensor, slot_ids: torch.Tensor
    ) -> torch.Tensor:
        return mask_unemittable(
            self.model.decode_step(input_ids, positions, slot_ids, self.cache), self.emittable
        )


@torch.inference_mode()
def mask_unemittable(logits: torch.Tensor, emittable: int) -> torch.Tensor:
    """-inf for the ids past the tokenizer (the embedding is padded: 248320 rows for 248077 tokens)."""
    if emittable < logits.shape[-1]:
        logits[:, emittable:] = float("-inf")
    return logits


def _indices(values: list[int], device: torch.device) -> torch.Tensor:
    """int64 indices on `device`; to a GPU through pinned memory, without waiting for the copy (no host sync)."""
    return to_device([values], device)[0]


def _seen_tokens(seq: Sequence, vocab: int, device: torch.device) -> torch.Tensor:
    """The sequence's bool [vocab] of token ids in its prompt and output, kept on the sequence and brought up to
    date with the tokens added since the last step (one scatter each, not a pass over the whole prompt)."""
    if seq.seen_tokens is None:
        seq.seen_tokens = torch.zeros(vocab, dtype=torch.bool, device=device)
        seq.seen_tokens[_indices(seq.prompt_ids, device)] = True
    new = seq.output_ids[seq.seen_outputs :]
    if new:
        seq.seen_tokens[_indices(new, device)] = True
        seq.seen_outputs = len(seq.output_ids)
    return seq.seen_tokens
