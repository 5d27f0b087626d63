"""Runs the model for a planned step: fills the slots the plan restores (or starts fresh), packs the prefill chunks
into one forward, decodes the running sequences (through CUDA graphs on a GPU), takes the snapshots the plan saves,
and picks each sequence's next token. Owns the model and the cache's device memory; only the step loop's thread
calls it. Which slot is whose, and which snapshots to take or restore, is the plan's (engine/cache_manager.py)."""

from __future__ import annotations

import torch

from engine.cache import Cache, Snapshot
from engine.cache_manager import Restore, Save
from engine.config import Config
from engine.cuda_graphs import DEFAULT_BATCH_SIZES, DecodeGraphRunner
from engine.forward_batch import ForwardBatch
from engine.output_processor import OutputProcessor
from engine.sampling import RowSampling, sample_tokens
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
    ) -> None:
        self.model = model
        self.config = config
        self.cache = cache
        self.device = device
        # The embedding is padded past the tokenizer (248320 rows for 248077 tokens): those ids are never emitted.
        self.emittable = emittable
        self.static_decode = static_decode
        num_slots = cache.num_slots
        self.graph_runner = DecodeGraphRunner(
            self._static_decode_step,
            pad_slot_id=cache.pad_slot,
            batch_sizes=[s for s in DEFAULT_BATCH_SIZES if s < num_slots] + [num_slots],
        )
        # The engine's end tokens (masked while a constrained answer waits for the thinking), on the device.
        self._stop_ids: tuple[tuple[int, ...], torch.Tensor] | None = None

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
        ids = torch.tensor(
            [t for c in chunks for t in c.seq.prompt_ids[c.start : c.start + c.length]],
            dtype=torch.int64,
            device=self.device,
        )
        batch = ForwardBatch.build(
            [c.seq.slot for c in chunks], [c.start for c in chunks], [c.length for c in chunks], self.device
        )
        return self._mask_unemittable(self.model(ids, batch, self.cache))

    def decode(self, seqs: list[Sequence]) -> torch.Tensor:
        ids = torch.tensor([s.output_ids[-1] for s in seqs], dtype=torch.int64, device=self.device)
        slots, starts = [s.slot for s in seqs], [s.num_cached for s in seqs]
        if self.static_decode:
            positions = torch.tensor(starts, dtype=torch.int64, device=self.device)
            slot_ids = torch.tensor(slots, dtype=torch.int64, device=self.device)
            return self.graph_runner(ids, positions, slot_ids)
        batch = ForwardBatch.build(slots, starts, [1] * len(seqs), self.device)
        return self._mask_unemittable(self.model(ids, batch, self.cache))

    def logits(self, token_ids: torch.Tensor, slot: int) -> torch.Tensor:
        """fp32 logits [T, vocab] of every position of one sequence, run from a fresh start in `slot`."""
        self.cache.reset(slot)
        batch = ForwardBatch.build([slot], [0], [token_ids.numel()], self.device)
        return self.model(token_ids.to(self.device), batch, self.cache, all_logits=True).cpu()

    @torch.inference_mode()
    def pick_tokens(
        self, seqs: list[Sequence], logits: torch.Tensor, processor: OutputProcessor
    ) -> list[int]:
        """The next token of every sequence, all rows in one batched sampler (engine/sampling.py: a single host
        read-back for the whole step, each sampled row drawing from its own seeded generator); an exhausted thinking
        budget forces `</think>`; rows
        with an active grammar constraint are masked first, rows whose constrained answer waits for the thinking
        to end have their stop tokens masked, rows with a repetition penalty penalized first (greedy ones too, as
        in vLLM)."""
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
        forced = [processor.forced_token(seq) for seq in seqs]
        rows = [
            None
            if f is not None
            else RowSampling(
                seq.params,
                seq.generator,
                _seen_tokens(seq, logits.shape[-1], logits.device) if i in penalized else None,
            )
            for i, (seq, f) in enumerate(zip(seqs, forced, strict=True))
        ]
        picked = sample_tokens(logits, rows)  # the whole batch at once, one host read
        return [f if f is not None else t for f, t in zip(forced, picked, strict=True)]

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

    def _static_decode_step(
        self, input_ids: torch.Tensor, positions: torch.Tensor, slot_ids: torch.Tensor
    ) -> torch.Tensor:
        """The capture-safe decode step (what `graph_runner` captures), logits of unemittable ids masked."""
        return self._mask_unemittable(self.model.decode_step(input_ids, positions, slot_ids, self.cache))

    @torch.inference_mode()
    def _mask_unemittable(self, logits: torch.Tensor) -> torch.Tensor:
        if self.emittable < logits.shape[-1]:
            logits[:, self.emittable :] = float("-inf")
        return logits


def _indices(values: list[int], device: torch.device) -> torch.Tensor:
    """int64 indices on `device`; to a GPU through pinned memory, without waiting for the copy (no host sync)."""
    indices = torch.tensor(values, dtype=torch.int64)
    if device.type == "cuda":
        return indices.pin_memory().to(device, non_blocking=True)
    return indices.to(device)


def _seen_tokens(seq: Sequence, vocab: int, device: torch.device) -> torch.Tensor:
    """The sequence's bool [vocab] of token ids in its prompt and output, kept on the sequence and brought up to
    date with the tokens added since the last step (one scatter each, not a pass over the whole prompt)."""
    if seq.seen_tokens is None:
        seq.seen_tokens = torch.zeros(vocab, dtype=torch.bool, device=device)
        seq.seen_tokens[torch.tensor(seq.prompt_ids, dtype=torch.int64, device=device)] = True
    new = seq.output_ids[seq.seen_outputs :]
    if new:
        seq.seen_tokens[torch.tensor(new, dtype=torch.int64, device=device)] = True
        seq.seen_outputs = len(seq.output_ids)
    return seq.seen_tokens
