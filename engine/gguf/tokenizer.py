"""The engine's tokenizer built from a GGUF's metadata alone (no Hugging Face files), tokenizing as llama.cpp does.

llama.cpp is the reference: a GGUF's `tokenizer.ggml.*` keys are what its converter (`convert_hf_to_gguf.py`,
`get_vocab_base` + `gguf.SpecialVocab`) wrote from the Hugging Face tokenizer, and `llama_vocab` (src/llama-vocab.cpp)
reads them back. This module rebuilds the same tokenizer with the `tokenizers` library:

* the vocabulary is the token list itself (ids are positions), the merges come ranked in file order (the first of
  duplicate pairs wins, as in llama.cpp's `bpe_ranks.emplace`);
* control, unknown and user-defined tokens are matched in the raw text before anything else, as llama.cpp does with
  `parse_special=true` (control and unknown ones are `special`: skipped by `decode(skip_special_tokens=True)`, the
  way llama.cpp does not render them; user-defined ones such as `<think>` are plain text);
* the rest of the text is split with llama.cpp's own pre-tokenizer regex for `tokenizer.ggml.pre`, byte-encoded
  (GPT-2's byte-to-unicode map) and merged by rank; there is no normalizer, since llama.cpp applies none (the Hugging
  Face Qwen tokenizers apply NFC first: they differ from llama.cpp on text that is not NFC-normalized);
* the end-of-generation and fill-in-the-middle markers llama.cpp promotes to control by their text are promoted
  here too, so that a mistyped `<|im_end|>` is matched in text exactly as llama.cpp matches it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from engine.loader import CheckpointError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

logger = logging.getLogger(__name__)

# tokenizer.ggml.token_type values (llama.h, enum llama_token_type)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# llama.cpp's regexes (llm_tokenizer_bpe, src/llama-vocab.cpp), as it spells them: `(?i:'s|...)` is written out
# with ASCII classes (llama.cpp lower-cases with its own table; only ASCII letters map to s/t/r/e/v/m/l/d).
_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_QWEN2_SPLIT = (
    _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Qwen3.5: letter runs also take combining marks (\p{M}).
_QWEN35_SPLIT = (
    _CONTRACTIONS
    + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# tokenizer.ggml.pre -> split regex. Only names whose llama.cpp pre-tokenizer is one of these regexes (run there by a
# hand-written matcher equivalent to it), with no merge skipping (`ignore_merges`), no implicit BOS and no
# space clean-up on decoding (`clean_spaces = false`): for those the ids are the same as llama.cpp's.
PRE_TOKENIZERS: dict[str, str] = {
    "qwen35": _QWEN35_SPLIT,  # LLAMA_VOCAB_PRE_TYPE_QWEN35
    "qwen2": _QWEN2_SPLIT,  # LLAMA_VOCAB_PRE_TYPE_QWEN2
    "deepseek-r1-qwen": _QWEN2_SPLIT,
    "kormo": _QWEN2_SPLIT,
    "f2llmv2": _QWEN2_SPLIT,
    "hunyuan": _QWEN2_SPLIT,  # LLAMA_VOCAB_PRE_TYPE_HUNYUAN: the Qwen2 regex
    "solar-open": _QWEN2_SPLIT,  # LLAMA_VOCAB_PRE_TYPE_SOLAR_OPEN: the Qwen2 regex
}

# Texts llama.cpp makes control tokens whatever their stored type (llama_vocab::impl::load): end-of-generation
# markers (always) ...
_EOG_TEXTS = frozenset(
    {
        "<|eot_id|>",
        "<|im_end|>",
        "<|end|>",
        "<|return|>",
        "<|call|>",
        "<|flush|>",
        "<|calls|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "</s>",
        "<|eom_id|>",
        "<EOT>",
        "_<EOT>",
        "[EOT]",
        "[EOS]",
        "<|end_of_text|>",
        "<end_of_utterance>",
        "<eos>",
        "<turn|>",
        "<|tool_response>",
        "<｜end▁of▁sentence｜>",
        "[e~[",
    }
)
# ... and fill-in-the-middle markers, when the GGUF does not name that token by id (llama.cpp promotes the first one
# it meets; a vocabulary holds at most one of each kind in practice).
_FIM_TEXTS: dict[tuple[str, ...], frozenset[str]] = {
    ("fim_pre", "prefix"): frozenset(
        {
            "<|fim_prefix|>",
            "<fim-prefix>",
            "<fim_prefix>",
            "<｜fim▁begin｜>",
            "<PRE>",
            "▁<PRE>",
            "<|code_prefix|>",
            "<|prefix|>",
        }
    ),
    ("fim_suf", "suffix"): frozenset(
        {
            "<|fim_suffix|>",
            "<fim-suffix>",
            "<fim_suffix>",
            "<｜fim▁hole｜>",
            "<SUF>",
            "▁<SUF>",
            "<|code_suffix|>",
            "<|suffix|>",
        }
    ),
    ("fim_mid", "middle"): frozenset(
        {
            "<|fim_middle|>",
            "<fim-middle>",
            "<fim_middle>",
            "<｜fim▁end｜>",
            "<MID>",
            "▁<MID>",
            "<|code_middle|>",
            "<|middle|>",
        }
    ),
    ("fim_pad",): frozenset({"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}),
    ("fim_rep",): frozenset({"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}),
    ("fim_sep",): frozenset({"<|file_sep|>"}),
}
# gpt-oss: llama.cpp always renders these (user-defined, still matched in text).
_ALWAYS_USER_DEFINED = frozenset({"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})


def tokenizer_from_metadata(metadata: Mapping[str, Any]) -> PreTrainedTokenizerFast:
    """A `transformers.PreTrainedTokenizerFast` from a GGUF's key/value table (plain Python values, as
    `engine.gguf.reader.open_checkpoint(path).metadata`), giving llama.cpp's token ids for every text (special
    tokens in the text parsed, as llama.cpp's `parse_special=true`). `encode(text)` adds a BOS / EOS only when
    `tokenizer.ggml.add_bos_token` / `add_eos_token` say so; the chat template is `tokenizer.chat_template`.

    Trailing `[PAD<i>]` entries of type UNUSED (the converter pads the list to the embedding's rows) are left out, as
    in the Hugging Face tokenizer: ids past `len(tokenizer)` are never produced, and decode to nothing.

    Raises `CheckpointError` for a tokenizer model or pre-tokenizer it cannot reproduce exactly, or malformed keys."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    model = metadata.get("tokenizer.ggml.model")
    if model != "gpt2":
        raise CheckpointError(
            f"GGUF tokenizer model {model!r} (tokenizer.ggml.model) is not supported: the engine reads byte-level BPE "
            "tokenizers ('gpt2') only"
        )
    pre = metadata.get("tokenizer.ggml.pre")
    if pre not in PRE_TOKENIZERS:
        raise CheckpointError(
            f"GGUF pre-tokenizer {pre!r} (tokenizer.ggml.pre) is not supported; the engine reproduces llama.cpp's "
            f"{', '.join(repr(name) for name in PRE_TOKENIZERS)}"
        )
    tokens = _strings(metadata, "tokenizer.ggml.tokens")
    if not tokens:
        raise CheckpointError("the GGUF has no tokenizer vocabulary (tokenizer.ggml.tokens)")
    kinds = _token_kinds(tokens, metadata)
    # llama.cpp renames empty tokens so that every text is unique
    tokens = [token or f"[EMPTY_{i}]" for i, token in enumerate(tokens)]
    if len(set(tokens)) != len(tokens):
        raise CheckpointError(
            "the GGUF tokenizer vocabulary (tokenizer.ggml.tokens) holds the same token twice"
        )
    n = len(tokens)
    while n > 1 and kinds[n - 1] == UNUSED and tokens[n - 1] == f"[PAD{n - 1}]":
        n -= 1
    vocab = {token: i for i, token in enumerate(tokens[:n])}
    merges = _merges(_strings(metadata, "tokenizer.ggml.merges"), vocab)

    backend = Tokenizer(
        models.BPE(
            vocab=vocab,
            merges=merges,
            dropout=None,
            unk_token=None,
            continuing_subword_prefix="",
            end_of_word_suffix="",
            fuse_unk=False,
            byte_fallback=False,
            ignore_merges=False,
        )
    )
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRE_TOKENIZERS[pre]), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    # Every added token is already in the vocabulary, so it keeps its id.
    backend.add_tokens(
        [
            AddedToken(tokens[i], special=kinds[i] in (CONTROL, UNKNOWN), normalized=False)
            for i in range(n)
            if kinds[i] in (CONTROL, UNKNOWN, USER_DEFINED)
        ]
    )

    roles = {
        role: _token_id(metadata, f"tokenizer.ggml.{key}_token_id", n)
        for role, key in (("bos", "bos"), ("eos", "eos"), ("unk", "unknown"), ("pad", "padding"))
    }
    single = ["$A"]
    specials: list[tuple[str, int]] = []
    for role in ("bos", "eos"):
        if not metadata.get(f"tokenizer.ggml.add_{role}_token", False):
            continue
        token_id = roles[role]
        if token_id is None:
            raise CheckpointError(
                f"the GGUF asks for a {role.upper()} token (tokenizer.ggml.add_{role}_token) but names none"
            )
        single = [tokens[token_id], *single] if role == "bos" else [*single, tokens[token_id]]
        specials.append((tokens[token_id], token_id))
    backend.post_processor = processors.TemplateProcessing(
        single=single,
        pair=single + ["$B:1" if piece == "$A" else piece for piece in single],
        special_tokens=specials,
    )

    chat_template = metadata.get("tokenizer.chat_template")
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        chat_template=chat_template if isinstance(chat_template, str) else None,
        clean_up_tokenization_spaces=False,
        model_max_length=int(metadata.get(f"{metadata.get('general.architecture', '')}.context_length", 0))
        or int(1e30),
    )
    # Set after construction: passed to the constructor, a role naming a plain vocabulary token would make it an
    # added special token (matched in text), which llama.cpp does not do.
    for role, token_id in roles.items():
        setattr(tokenizer, f"{role}_token", tokens[token_id] if token_id is not None else None)
    return tokenizer


def _strings(metadata: Mapping[str, Any], key: str) -> list[str]:
    value = metadata.get(key)
    if value is None:
        return []
    if (
        not isinstance(value, Sequence)
        or isinstance(value, str)
        or not all(isinstance(v, str) for v in value)
    ):
        raise CheckpointError(f"GGUF key {key} should be an array of strings")
    return list(value)


def _token_id(metadata: Mapping[str, Any], key: str, n_tokens: int) -> int | None:
    value = metadata.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise CheckpointError(f"GGUF key {key} should be a token id, not {value!r}")
    if not 0 <= value < n_tokens:
        logger.warning("GGUF %s = %d is out of the vocabulary (%d tokens): ignored", key, value, n_tokens)
        return None
    return value


def _token_kinds(tokens: list[str], metadata: Mapping[str, Any]) -> list[int]:
    """The token types as llama.cpp ends up with them: the stored ones, then its promotions by token text."""
    types = metadata.get("tokenizer.ggml.token_type")
    if types is None:
        kinds = [NORMAL] * len(tokens)
    else:
        if not isinstance(types, Sequence) or not all(isinstance(t, int) for t in types):
            raise CheckpointError("GGUF key tokenizer.ggml.token_type should be an array of integers")
        if len(types) < len(tokens):
            raise CheckpointError(
                f"the GGUF has {len(tokens)} tokens but only {len(types)} token types (tokenizer.ggml.token_type)"
            )
        kinds = [int(t) for t in types[: len(tokens)]]
    index = {token: i for i, token in enumerate(tokens)}
    promoted = set(_EOG_TEXTS)
    for keys, texts in _FIM_TEXTS.items():
        if all(metadata.get(f"tokenizer.ggml.{key}_token_id") is None for key in keys):
            promoted |= texts
    for text in promoted & index.keys():
        if kinds[index[text]] != CONTROL:
            kinds[index[text]] = CONTROL
    for text in _ALWAYS_USER_DEFINED & index.keys():
        kinds[index[text]] = USER_DEFINED
    # o200k_harmony / solar-open: `<|end|>` is not an end of generation there, and llama.cpp makes it user-defined
    present = index.keys()
    if "<|end|>" in present and (
        {"<|return|>", "<|call|>"} <= present
        or ("<|flush|>" in present and present & {"<|call|>", "<|calls|>"})
    ):
        kinds[index["<|end|>"]] = USER_DEFINED
    # gemma4 / plamo: `</s>` is a normal token there
    if "</s>" in present and ("<|tool_response>" in present or "<|plamo:eos|>" in present):
        kinds[index["</s>"]] = NORMAL
    return kinds


def _merges(lines: list[str], vocab: Mapping[str, int]) -> list[tuple[str, str]]:
    """`"a b"` lines -> ranked pairs, split as llama.cpp splits them (at the first space after the first character);
    a repeated pair keeps its first rank. Pairs the BPE cannot hold (a part or their join out of the vocabulary: no
    well-formed conversion has them, llama.cpp would fall back to bytes) are dropped with a warning."""
    pairs: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    dropped = 0
    for line in lines:
        cut = line.find(" ", 1)
        pair = (line[:cut], line[cut + 1 :]) if cut >= 0 else ("", "")
        if pair in seen:
            continue
        seen.add(pair)
        if pair[0] not in vocab or pair[1] not in vocab or pair[0] + pair[1] not in vocab:
            dropped += 1
            continue
        pairs.append(pair)
    if dropped:
        logger.warning(
            "%d GGUF merges (tokenizer.ggml.merges) name tokens out of the vocabulary: ignored", dropped
        )
    return pairs
