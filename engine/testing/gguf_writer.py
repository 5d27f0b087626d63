"""Write a Hugging Face tokenizer into a GGUF the way llama.cpp's converter does, for tests and fixtures.

`write_tokenizer_metadata` follows `convert_hf_to_gguf.py` for a GPT-2-style byte-level BPE (`_set_vocab_gpt2`:
`get_vocab_base`, then `gguf.SpecialVocab(dir, load_merges=True).add_to_gguf`), except that the pre-tokenizer name is
given rather than detected from a hash of a test string's token ids (the tiny tokenizer's hash is nobody's)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any


def write_tokenizer_metadata(
    writer: Any, tokenizer: Any, pre: str = "qwen35", vocab_size: int | None = None
) -> list[str]:
    """Add the `tokenizer.ggml.*` keys and `tokenizer.chat_template` to a `gguf.GGUFWriter`; returns the token list.

    `tokenizer` is a folder holding the Hugging Face tokenizer files (and, as a model folder, config.json), a
    `transformers` tokenizer, or a `tokenizers.Tokenizer` (saved as `engine.testing.tiny_checkpoint` saves its own).
    The list is padded with `[PAD<i>]` (type UNUSED) to `vocab_size`, by default config.json's `vocab_size` (the
    embedding's rows) when there is one, as the converter does."""
    if isinstance(tokenizer, (str, Path)):
        return _write(writer, Path(tokenizer), pre, vocab_size)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if hasattr(tokenizer, "save_pretrained"):
            tokenizer.save_pretrained(folder)
        else:
            from engine.testing.tiny_checkpoint import save_tokenizer

            save_tokenizer(tokenizer, folder)
        return _write(writer, folder, pre, vocab_size)


def _write(writer: Any, folder: Path, pre: str, vocab_size: int | None) -> list[str]:
    import gguf
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    vocab: dict[str, int] = tokenizer.get_vocab()
    if vocab_size is None:
        vocab_size = _config_vocab_size(folder) or len(vocab)
    assert max(vocab.values()) < vocab_size
    reverse = {i: token for token, i in vocab.items()}
    added_vocab = tokenizer.get_added_vocab()
    added_decoder = tokenizer.added_tokens_decoder
    tokens: list[str] = []
    types: list[int] = []
    for i in range(vocab_size):
        if i not in reverse:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
            continue
        token = reverse[i]
        if token in added_vocab:
            # llama.cpp assumes control and user-defined tokens are pre-normalized
            if not added_decoder[i].normalized:
                token = tokenizer.decode(tokenizer.encode(token, add_special_tokens=False))
            if added_decoder[i].special or _looks_special(token):
                types.append(gguf.TokenType.CONTROL)
            else:
                token = token.replace("\u2581", " ")  # pre-normalize user-defined spaces
                types.append(gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)
        tokens.append(token)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    gguf.SpecialVocab(folder, load_merges=True).add_to_gguf(writer, quiet=True)
    return tokens


def _config_vocab_size(folder: Path) -> int | None:
    config_file = folder / "config.json"
    if not config_file.is_file():
        return None
    config = json.loads(config_file.read_text())
    value = config.get("vocab_size", (config.get("text_config") or {}).get("vocab_size"))
    return int(value) if value else None


def _looks_special(token: str) -> bool:
    """convert_hf_to_gguf.py's `does_token_look_special`."""
    return (
        token in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
        or (token.startswith("<|") and token.endswith("|>"))
        or (token.startswith("<｜") and token.endswith("｜>"))
        or (token.startswith("<unused") and token.endswith(">"))
    )
