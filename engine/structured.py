"""Schema-constrained decoding: once a request's thinking ends, only tokens that keep its answer valid JSON for its
schema can be sampled.

xgrammar (the grammar engine vLLM and SGLang use) compiles a JSON Schema into a grammar once per schema (cached
here by the schema's canonical JSON) and, per request, a matcher that fills a token bitmask for the next step and
accepts the sampled token. The mask is applied to that row's logits right before sampling — after the model (and
after a CUDA graph's replay), so capture is untouched — and rows without a schema are never touched. While the
request is thinking (its prompt left `<think>` open and `</think>` has not come) it generates freely, except that it
cannot stop: its stop tokens are masked (`mask_stop_tokens`) and stop strings are not looked for in its thinking, so
the thinking ends only through `</think>` (which the thinking budget forces), and the constraint starts with the next
token; from then on the grammar decides, and it allows an end token only once the answer is complete.

An `AnswerFormat` frames the JSON in text: a fixed prefix (a trained answer marker), the JSON value (pretty-printed
with `indent` when set, as the trained observations are), or instead one line matching a regex (a plain-text error),
then a fixed suffix. It is composed from xgrammar's JSON Schema, regex and EBNF grammars (concat / union) and cached
like a plain schema."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch


class StructuredOutputError(ValueError):
    """The schema cannot be compiled into a grammar (the message says why)."""


@dataclass(frozen=True)
class AnswerFormat:
    """An answer that is `prefix`, then a JSON value valid for `json_schema` (or, when `alternative` is set, text
    matching that regex instead), then `suffix`. `indent`: the JSON's layout (None = compact, one line)."""

    json_schema: Mapping[str, Any] | str
    prefix: str = ""
    suffix: str = ""
    alternative: str | None = None
    indent: int | None = None

    def key(self) -> str:
        schema = canonical_schema(self.json_schema)
        fields = [schema, self.prefix, self.suffix, self.alternative, self.indent]
        return "answer:" + json.dumps(fields, separators=(",", ":"))


def canonical_schema(schema: Mapping[str, Any] | str | AnswerFormat | None) -> str | None:
    """The schema as compact JSON text (the cache key and what is compiled); `"json_object"` or True means any JSON
    object. Key order is kept: the grammar writes an object's properties in the schema's order. An AnswerFormat's
    key covers its frame too."""
    if schema is None:
        return None
    if isinstance(schema, AnswerFormat):
        return schema.key()
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as exc:
            raise StructuredOutputError(f"json_schema is not JSON: {exc}") from None
    if not isinstance(schema, Mapping):
        raise StructuredOutputError("json_schema must be a JSON object (a JSON Schema)")
    return json.dumps(schema, separators=(",", ":"))


@dataclass
class GrammarCompiler:
    """Compiles and caches grammars for one tokenizer (built on first use: importing xgrammar costs ~0.5 s)."""

    tokenizer: Any
    vocab_size: int  # the logits' width (the embedding may be padded past the tokenizer)
    stop_token_ids: list[int]  # the engine's end tokens: the grammar ends on one of them
    _compiler: Any = None
    _cache: dict[str, Any] = field(default_factory=dict)
    compiles: int = 0
    # Tokens a constrained answer never takes, whatever the grammar says: those holding a raw control byte
    # (U+0000-U+001F: JSON needs them escaped inside strings, xgrammar's string rule lets them through, and
    # Python's json rejects the result; compact JSON needs no raw whitespace), and the added tokens (`<think>`,
    # `<|im_start|>`, `<|endoftext|>` ...), which the grammar sees as plain text inside a string but the engine
    # reads as control (an end token mid-string would cut the JSON). The grammar's own end tokens stay allowed.
    forbidden_tokens: torch.Tensor | None = None
    # The same for framed answers (AnswerFormat), less the tokens whose only control byte is a line feed: a frame
    # and an indented layout need them, and the grammar (whose strings exclude raw control characters) decides.
    forbidden_framed: torch.Tensor | None = None
    # xgrammar's string rule admits UTF-8-encoded surrogates (0xED then 0xA0-0xBF: U+D800-U+DFFF, not valid
    # UTF-8; they decode to U+FFFD and break `maxLength`). Tokens holding such a pair are in the forbidden masks;
    # a pair split across two tokens is kept out per request: after a token ending in 0xED, the next one may not
    # start with 0xA0-0xBF (`Constraint.accept` tracks it, `mask_logits` applies it).
    ends_in_ed: frozenset[int] | None = None
    surrogate_tails: torch.Tensor | None = None

    def _start(self) -> None:
        import xgrammar

        info = xgrammar.TokenizerInfo.from_huggingface(
            self.tokenizer, vocab_size=self.vocab_size, stop_token_ids=sorted(self.stop_token_ids)
        )
        self._compiler = xgrammar.GrammarCompiler(info, max_threads=2)
        forbidden = torch.zeros(self.vocab_size, dtype=torch.bool)
        framed = torch.zeros(self.vocab_size, dtype=torch.bool)
        ends_in_ed: set[int] = set()
        tails = torch.zeros(self.vocab_size, dtype=torch.bool)
        for token_id, piece in enumerate(info.decoded_vocab[: self.vocab_size]):
            controls = {byte for byte in piece if byte < 0x20}
            surrogate = _SURROGATE.search(piece) is not None
            forbidden[token_id] = bool(controls) or surrogate
            framed[token_id] = bool(controls - {0x0A}) or surrogate
            if piece.endswith(b"\xed"):
                ends_in_ed.add(token_id)
            tails[token_id] = bool(piece) and 0xA0 <= piece[0] <= 0xBF
        added = [i for i in self.tokenizer.added_tokens_decoder if i < self.vocab_size]
        for mask in (forbidden, framed):
            mask[added] = True
            mask[sorted(self.stop_token_ids)] = False
        self.forbidden_tokens, self.forbidden_framed = forbidden, framed
        self.ends_in_ed, self.surrogate_tails = frozenset(ends_in_ed), tails

    def utf8_guard(self) -> tuple[frozenset[int], torch.Tensor] | None:
        """(tokens ending in 0xED, tokens starting with 0xA0-0xBF) for a Constraint; None before the first compile."""
        if self.ends_in_ed is None or self.surrogate_tails is None:
            return None
        return self.ends_in_ed, self.surrogate_tails

    def compile(self, schema: str | AnswerFormat) -> Any:
        """The compiled grammar of a canonical JSON Schema text or of an AnswerFormat (cached)."""
        key = schema.key() if isinstance(schema, AnswerFormat) else schema
        grammar = self._cache.get(key)
        if grammar is None:
            if self._compiler is None:
                self._start()
            try:
                if isinstance(schema, AnswerFormat):
                    grammar = self._compiler.compile_grammar(answer_grammar(schema))
                else:
                    # Compact JSON (no free whitespace between tokens): the model cannot wander in blank space.
                    grammar = self._compiler.compile_json_schema(schema, any_whitespace=False)
            except StructuredOutputError:
                raise
            except Exception as exc:  # xgrammar raises RuntimeError for schemas it cannot express
                raise StructuredOutputError(f"cannot compile the JSON Schema into a grammar: {exc}") from None
            self._cache[key] = grammar
            self.compiles += 1
        return grammar


def answer_grammar(answer: AnswerFormat) -> Any:
    """The xgrammar Grammar of a framed answer: prefix, (JSON | alternative), suffix."""
    import xgrammar

    schema = canonical_schema(answer.json_schema)
    try:
        body = xgrammar.Grammar.from_json_schema(schema, any_whitespace=False, indent=answer.indent)
    except Exception as exc:
        raise StructuredOutputError(f"cannot compile the JSON Schema into a grammar: {exc}") from None
    if answer.alternative is not None:
        try:
            body = xgrammar.Grammar.union(body, xgrammar.Grammar.from_regex(answer.alternative))
        except Exception as exc:
            raise StructuredOutputError(
                f"cannot compile the alternative {answer.alternative!r}: {exc}"
            ) from None
    # An EBNF string literal takes JSON's escapes (\n, \", \\, \uXXXX).
    parts = [xgrammar.Grammar.from_ebnf(f"root ::= {json.dumps(answer.prefix)}")] if answer.prefix else []
    parts.append(body)
    if answer.suffix:
        parts.append(xgrammar.Grammar.from_ebnf(f"root ::= {json.dumps(answer.suffix)}"))
    return xgrammar.Grammar.concat(*parts) if len(parts) > 1 else body


_SURROGATE = re.compile(rb"\xed[\xa0-\xbf]")


class Constraint:
    """One request's grammar state. `active` once its thinking is over."""

    def __init__(
        self,
        grammar: Any,
        active: bool,
        forbidden_tokens: torch.Tensor | None = None,
        utf8_guard: tuple[frozenset[int], torch.Tensor] | None = None,
    ) -> None:
        import xgrammar

        self.matcher = xgrammar.GrammarMatcher(grammar)
        self.active = active
        self._forbidden = forbidden_tokens
        self._ends_in_ed, self._tails = utf8_guard if utf8_guard is not None else (None, None)
        self.after_ed = False  # the last accepted token ended in 0xED: a surrogate tail must not follow
        self.answer_start: int | None = None  # where the answer's text starts after the thinking (`</think>`)

    def fill(self, bitmask: torch.Tensor, row: int) -> None:
        """Write this request's allowed-next-token bits into row `row` of a batch bitmask."""
        self.matcher.fill_next_token_bitmask(bitmask, index=row)

    def forbidden_on(self, device: torch.device) -> torch.Tensor | None:
        if self._forbidden is not None and self._forbidden.device != device:
            self._forbidden = self._forbidden.to(device)
        return self._forbidden

    def accept(self, token: int) -> bool:
        self.after_ed = self._ends_in_ed is not None and token in self._ends_in_ed
        return bool(self.matcher.accept_token(token))

    def surrogate_tails_on(self, device: torch.device) -> torch.Tensor | None:
        if self._tails is not None and self._tails.device != device:
            self._tails = self._tails.to(device)
        return self._tails

    @property
    def finished(self) -> bool:
        return self.matcher.is_terminated()


def answer_pending(constraint: Constraint | None) -> bool:
    """A constrained answer that waits for the thinking to end: until `</think>` its request may not stop (its stop
    tokens are masked, `mask_stop_tokens`; stop strings are not looked for in the thinking), or it would end with
    no answer."""
    return constraint is not None and not constraint.active


def mask_logits(logits: torch.Tensor, rows: list[int], constraints: list[Constraint]) -> None:
    """Apply the constraints of `rows` to a step's contiguous logits [N, vocab] in place: one bitmask for the
    batch, one apply call, then the always-forbidden tokens."""
    import xgrammar

    bitmask = xgrammar.allocate_token_bitmask(logits.shape[0], logits.shape[-1])
    for row, constraint in zip(rows, constraints, strict=True):
        constraint.fill(bitmask, row)
    xgrammar.apply_token_bitmask_inplace(logits, bitmask.to(logits.device), indices=rows)
    for row, constraint in zip(rows, constraints, strict=True):
        forbidden = constraint.forbidden_on(logits.device)
        if forbidden is not None:
            logits[row].masked_fill_(forbidden[: logits.shape[-1]], float("-inf"))
        if constraint.after_ed:
            tails = constraint.surrogate_tails_on(logits.device)
            if tails is not None:
                logits[row].masked_fill_(tails[: logits.shape[-1]], float("-inf"))


def mask_stop_tokens(logits: torch.Tensor, rows: torch.Tensor, stop_ids: torch.Tensor) -> None:
    """Bar `stop_ids` (int64 [S]) in the rows `rows` (int64 [R]) of a step's logits [N, vocab], in place: one
    indexed write for the batch, on the logits' device (both index tensors already there: no read-back)."""
    logits[rows.unsqueeze(1), stop_ids.unsqueeze(0)] = float("-inf")
