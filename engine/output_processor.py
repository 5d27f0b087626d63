"""From sampled token ids to what a caller sees: incremental detokenization, thinking tracking, stop tokens and
strings, length limits, and the streamed deltas (holding back text that could still become a stop string)."""

from __future__ import annotations

from engine.reasoning import THINK_END, THINK_START
from engine.sequence import Sequence, StreamDelta
from engine.structured import answer_pending


class OutputProcessor:
    def __init__(self, tokenizer, eos_ids: set[int], max_len: int) -> None:
        self.tokenizer = tokenizer
        self.stop_ids = set(eos_ids)
        self.max_len = max_len
        self.think_start = self.token_id(THINK_START)
        self.think_end = self.token_id(THINK_END)

    def token_id(self, token: str) -> int | None:
        token_id = self.tokenizer.convert_tokens_to_ids(token)
        return token_id if isinstance(token_id, int) and token_id != self.tokenizer.unk_token_id else None

    def opens_thinking(self, ids: list[int]) -> bool:
        """The prompt leaves a `<think>` open (the chat template's thinking generation prompt)."""
        if self.think_start is None:
            return False
        last_start = max((i for i, t in enumerate(ids) if t == self.think_start), default=-1)
        last_end = max((i for i, t in enumerate(ids) if t == self.think_end), default=-1)
        return last_start > last_end

    def forced_token(self, seq: Sequence) -> int | None:
        """`</think>` when the sequence's thinking budget is spent, else None (sample as usual)."""
        budget = seq.params.thinking_budget
        if self.think_end is not None and seq.in_thinking and budget is not None:
            if seq.thinking_tokens >= budget:
                return self.think_end
        return None

    def append_token(self, seq: Sequence, token: int) -> None:
        params = seq.params
        seq.output_ids.append(token)
        if token == self.think_start:
            seq.in_thinking = True
        elif token == self.think_end:
            seq.in_thinking = False
        elif seq.in_thinking:
            seq.thinking_tokens += 1
        constraint = seq.constraint
        grammar_done = False
        if constraint is not None:
            if constraint.active:
                if not constraint.accept(token):  # the mask allows only accepted tokens: a bug if reached
                    raise RuntimeError(f"token {token} broke the request's grammar")
                grammar_done = constraint.finished
            elif token == self.think_end:
                constraint.active = True  # the answer starts with the next token
        checked = len(seq.text)
        self._detokenize(seq)
        if grammar_done:  # the grammar took its end token: the answer is complete
            seq.finish_reason = "stop"
            return
        if constraint is not None and token == self.think_end and constraint.answer_start is None:
            constraint.answer_start = len(seq.text)  # the text so far is the thinking

        stop_strings = params.stop_strings
        if stop_strings and not answer_pending(constraint):
            # Only text around the new piece can hold a stop string that was not there before (and, for a
            # constrained answer after thinking, only the answer's text: the thinking is not searched).
            window = max(0, checked - max(len(s) for s in stop_strings) + 1)
            if constraint is not None and constraint.answer_start is not None:
                window = max(window, constraint.answer_start)
            hits = [i for s in stop_strings if (i := seq.text.find(s, window)) != -1]
            if hits:
                seq.text = seq.text[: min(hits)]
                seq.finish_reason = "stop"
                return
        if (not params.ignore_eos and token in self.stop_ids) or token in params.stop_token_ids:
            seq.finish_reason = "stop"
        elif params.max_tokens is not None and len(seq.output_ids) >= params.max_tokens:
            seq.finish_reason = "length"
        elif len(seq.prompt_ids) + len(seq.output_ids) >= self.max_len:
            seq.finish_reason = "length"

    def _detokenize(self, seq: Sequence) -> None:
        """Re-decode only a short window so a multi-byte character split across tokens is emitted once whole."""
        skip = seq.params.skip_special_tokens
        ids = seq.output_ids
        before = self.tokenizer.decode(ids[seq.prefix_offset : seq.read_offset], skip_special_tokens=skip)
        after = self.tokenizer.decode(ids[seq.prefix_offset :], skip_special_tokens=skip)
        if after.endswith("\ufffd"):
            return
        seq.text += after[len(before) :]
        seq.prefix_offset, seq.read_offset = seq.read_offset, len(ids)

    @staticmethod
    def take_delta(seq: Sequence) -> StreamDelta:
        """Text not yet streamed; while running, hold back what could still become a stop string."""
        hold = 0 if seq.finished else max((len(s) - 1 for s in seq.params.stop_strings), default=0)
        visible = max(seq.emitted_chars, len(seq.text) - hold)
        text = seq.text[seq.emitted_chars : visible]
        new_ids = seq.output_ids[seq.emitted_ids :]
        seq.emitted_chars, seq.emitted_ids = visible, len(seq.output_ids)
        return StreamDelta(
            seq.request_id,
            text,
            new_ids,
            len(seq.output_ids),
            seq.finished,
            seq.finish_reason,
            seq.num_prefix_hit,
        )
