"""The tokenizer built from a GGUF's metadata (`engine.gguf.tokenizer`): the tiny checkpoint's tokenizer written into
a GGUF as llama.cpp's converter writes it, read back, and compared with the Hugging Face tokenizer of the same
folder; llama.cpp's own ids for a fixture file when `tests/fixtures/gguf/reference.json` is there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.gguf.reader import open_checkpoint
from engine.gguf.tokenizer import tokenizer_from_metadata
from engine.loader import CheckpointError
from engine.testing.gguf_writer import write_tokenizer_metadata

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "gguf"

TEXTS = [
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>system\nYou are a world model.<|im_end|>\n<|im_start|>assistant\n",
    "<think>\nThe user wants the weather.\n</think>\n\nSunny, 24 degrees.",
    "<|im_end|><|im_end|>x<|endoftext|>",
    "<think></think>",
    "a  b   c    d     e",
    "trailing spaces   ",
    "   leading spaces",
    "\ttab\t\ttabs\t",
    "line\nbreaks\n\n\nand\r\nCRLF\r\n",
    " \n \n\n \t \t\t \t\n  \n   \n    \n",
    "0 12 345 6789 3.14159 1,000,000 0x1F",
    "café naïve résumé Ünïcödé",
    "中文测试，我想在apple工作1314151天～",
    "emoji 😀 🚀🚀 👍🏽 👨‍👩‍👧 ❤️ 😶‍🌫️",
    "I've 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like tea? We'Ve a'lL",
    'def main():\n    print("hello world")\n    return 0\n',
    '{"name": "read_file", "arguments": {"path": "/tmp/notes.txt"}}',
    "------======= '''''``````\"\"\"\"......!!!!!!??????",
    "",
]
MESSAGES = [
    {"role": "system", "content": "You simulate tools."},
    {"role": "user", "content": "Action: list the files"},
    {"role": "assistant", "content": "<think>\nfiles...\n</think>\n\nEnvironment Observation: a.txt b.txt"},
    {"role": "user", "content": "Action: read a.txt"},
]


def _write_gguf(path: Path, tokenizer: Any, pre: str = "qwen35") -> dict[str, Any]:
    """A GGUF holding the tokenizer keys (no tensors), read back through the engine's reader: its metadata."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "qwen35moe")
    write_tokenizer_metadata(writer, tokenizer, pre=pre)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return open_checkpoint(path).metadata


@pytest.fixture(scope="module")
def metadata(tiny_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _write_gguf(tmp_path_factory.mktemp("gguf_tok") / "tiny.gguf", tiny_ckpt)


@pytest.fixture(scope="module")
def tokenizer(metadata: dict[str, Any]):
    return tokenizer_from_metadata(metadata)


@pytest.fixture(scope="module")
def hf_tokenizer(tiny_ckpt: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_ckpt))


def test_metadata_as_the_converter_writes_it(metadata: dict[str, Any], hf_tokenizer, tiny_ckpt: Path) -> None:
    assert metadata["general.architecture"] == "qwen35moe"
    assert metadata["tokenizer.ggml.model"] == "gpt2"
    assert metadata["tokenizer.ggml.pre"] == "qwen35"
    tokens, types = metadata["tokenizer.ggml.tokens"], metadata["tokenizer.ggml.token_type"]
    config = json.loads((tiny_ckpt / "config.json").read_text())
    # padded to the embedding's rows with [PAD<i>] of type UNUSED (5)
    assert len(tokens) == len(types) == config["vocab_size"] > len(hf_tokenizer)
    assert tokens[len(hf_tokenizer)] == f"[PAD{len(hf_tokenizer)}]" and types[-1] == 5
    im_end, think = (
        hf_tokenizer.convert_tokens_to_ids("<|im_end|>"),
        hf_tokenizer.convert_tokens_to_ids("<think>"),
    )
    assert types[im_end] == 3 and types[think] == 4  # CONTROL, USER_DEFINED
    assert metadata["tokenizer.ggml.eos_token_id"] == im_end
    assert metadata["tokenizer.ggml.padding_token_id"] == hf_tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert all(isinstance(m, str) and " " in m for m in metadata["tokenizer.ggml.merges"])
    assert metadata["tokenizer.chat_template"] == hf_tokenizer.chat_template


@pytest.mark.parametrize("text", TEXTS)
def test_ids_match_the_hf_tokenizer(tokenizer, hf_tokenizer, text: str) -> None:
    ours = tokenizer.encode(text, add_special_tokens=False)
    assert ours == hf_tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ours) == text


def test_vocabulary_and_special_tokens(tokenizer, hf_tokenizer) -> None:
    # The converter's trailing [PAD<i>] entries are left out: the same vocabulary as the HF tokenizer.
    assert len(tokenizer) == len(hf_tokenizer)
    assert tokenizer.get_vocab() == hf_tokenizer.get_vocab()
    assert {i: (t.content, t.special) for i, t in tokenizer.added_tokens_decoder.items()} == {
        i: (t.content, t.special) for i, t in hf_tokenizer.added_tokens_decoder.items()
    }
    for name in ("eos_token_id", "pad_token_id", "unk_token_id", "bos_token_id"):
        assert getattr(tokenizer, name) == getattr(hf_tokenizer, name), name
    assert tokenizer.eos_token == "<|im_end|>"
    for token in ("<|im_end|>", "<|endoftext|>", "<think>", "</think>", "no-such-token"):
        assert tokenizer.convert_tokens_to_ids(token) == hf_tokenizer.convert_tokens_to_ids(token)
    ids = tokenizer.encode(TEXTS[2] + TEXTS[0], add_special_tokens=False)
    for skip in (False, True):
        assert tokenizer.decode(ids, skip_special_tokens=skip) == hf_tokenizer.decode(
            ids, skip_special_tokens=skip
        )


@pytest.mark.parametrize("enable_thinking", [True, False])
def test_chat_template_matches(tokenizer, hf_tokenizer, enable_thinking: bool) -> None:
    kwargs = dict(tokenize=False, add_generation_prompt=True, enable_thinking=enable_thinking)
    ours = tokenizer.apply_chat_template(MESSAGES, **kwargs)
    assert ours == hf_tokenizer.apply_chat_template(MESSAGES, **kwargs)
    assert ours.startswith("<|im_start|>system\n") and ours.endswith(
        "<|im_start|>assistant\n<think>\n" + ("" if enable_thinking else "\n</think>\n\n")
    )
    assert tokenizer.encode(ours, add_special_tokens=False) == hf_tokenizer.encode(
        ours, add_special_tokens=False
    )


def test_xgrammar_sees_the_same_vocabulary(tokenizer, hf_tokenizer, metadata: dict[str, Any]) -> None:
    xgrammar = pytest.importorskip("xgrammar")
    vocab_size = len(metadata["tokenizer.ggml.tokens"])
    eos = [tokenizer.eos_token_id]
    ours = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=eos)
    theirs = xgrammar.TokenizerInfo.from_huggingface(hf_tokenizer, vocab_size=vocab_size, stop_token_ids=eos)
    assert ours.vocab_type == theirs.vocab_type
    assert ours.decoded_vocab == theirs.decoded_vocab
    assert ours.special_token_ids == theirs.special_token_ids


def test_no_normalization_as_in_llama_cpp(tokenizer, hf_tokenizer) -> None:
    # llama.cpp applies no NFC (the HF Qwen tokenizers do): decomposed text keeps its bytes.
    text = "cafe\u0301 n\u0303"
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text
    assert hf_tokenizer.decode(hf_tokenizer.encode(text, add_special_tokens=False)) == "café ñ"


def test_qwen2_pre_tokenizer(tiny_ckpt: Path, tmp_path: Path, tokenizer) -> None:
    from transformers import Qwen2Tokenizer

    qwen2 = tokenizer_from_metadata(_write_gguf(tmp_path / "qwen2.gguf", tiny_ckpt, pre="qwen2"))
    hf_qwen2 = Qwen2Tokenizer.from_pretrained(str(tiny_ckpt))
    for text in [*TEXTS, "x\u0301y \u0915\u093f\u0928"]:
        assert qwen2.encode(text, add_special_tokens=False) == hf_qwen2.encode(text, add_special_tokens=False)

    # Qwen3.5 keeps combining marks in letter runs, Qwen2 does not (the tiny vocabulary has no merge to show it).
    def pieces(tok, text: str) -> list[str]:
        return [piece for piece, _ in tok.backend_tokenizer.pre_tokenizer.pre_tokenize_str(text)]

    assert pieces(qwen2, "x\u0301y") == ["x", "Ìģy"]
    assert pieces(tokenizer, "x\u0301y") == ["xÌģy"]


def test_special_token_parsing_follows_llama_cpp(metadata: dict[str, Any], tokenizer) -> None:
    text = "<|im_start|>a<think>b"
    im_start, think = (
        tokenizer.convert_tokens_to_ids("<|im_start|>"),
        tokenizer.convert_tokens_to_ids("<think>"),
    )
    assert tokenizer.encode(text, add_special_tokens=False) == [
        im_start,
        *tokenizer.encode("a"),
        think,
        *tokenizer.encode("b"),
    ]
    # llama.cpp's parse_special=false: control tokens are text, user-defined ones are still matched.
    split = tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)
    assert im_start not in split and think in split
    # A token llama.cpp makes control by its text (end of generation) is matched even if stored as a normal one.
    types = list(metadata["tokenizer.ggml.token_type"])
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    types[im_end] = 1
    demoted = tokenizer_from_metadata({**metadata, "tokenizer.ggml.token_type": types})
    assert demoted.encode("x<|im_end|>", add_special_tokens=False)[-1] == im_end


def test_bos_and_eos_when_the_gguf_asks(metadata: dict[str, Any], tokenizer) -> None:
    bos = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    asking = tokenizer_from_metadata(
        {**metadata, "tokenizer.ggml.bos_token_id": bos, "tokenizer.ggml.add_bos_token": True}
    )
    plain = tokenizer.encode("hi", add_special_tokens=False)
    assert asking.encode("hi") == [bos, *plain]
    assert asking.encode("hi", add_special_tokens=False) == plain
    assert tokenizer.encode("hi") == plain  # the tiny GGUF asks for none (add_bos_token absent)


def test_writer_takes_a_tokenizer_object(tmp_path: Path) -> None:
    from transformers import PreTrainedTokenizerFast

    from engine.testing.tiny_checkpoint import build_tokenizer

    raw = build_tokenizer()
    ours = tokenizer_from_metadata(_write_gguf(tmp_path / "raw.gguf", raw))
    hf = PreTrainedTokenizerFast(tokenizer_object=raw)  # its own pre-tokenizer: the Qwen3.5 regex
    assert len(ours) == raw.get_vocab_size()  # no config.json: no padding
    for text in TEXTS:
        assert ours.encode(text, add_special_tokens=False) == hf.encode(text, add_special_tokens=False)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"tokenizer.ggml.model": "llama"}, r"tokenizer model 'llama'.*gpt2"),
        ({"tokenizer.ggml.model": None}, r"tokenizer model None"),
        ({"tokenizer.ggml.pre": "llama-bpe"}, r"pre-tokenizer 'llama-bpe'.*'qwen35', 'qwen2'"),
        ({"tokenizer.ggml.pre": None}, r"pre-tokenizer None"),
        ({"tokenizer.ggml.tokens": None}, r"no tokenizer vocabulary"),
        ({"tokenizer.ggml.token_type": [1, 1]}, r"only 2 token types"),
    ],
)
def test_clear_errors(metadata: dict[str, Any], change: dict[str, Any], message: str) -> None:
    broken = {k: v for k, v in {**metadata, **change}.items() if v is not None}
    with pytest.raises(CheckpointError, match=message):
        tokenizer_from_metadata(broken)


def test_llama_cpp_reference_ids() -> None:
    """llama.cpp's own ids for the fixture GGUF (`tokenization`: [{"text", "ids"}], as `llama_tokenize` gives them
    with add_special=false and parse_special=true unless an entry says otherwise)."""
    reference, model = FIXTURES / "reference.json", FIXTURES / "small-F32.gguf"
    if not reference.is_file() or not model.is_file():
        pytest.skip(f"no llama.cpp reference ids yet ({reference.name} and {model.name} in {FIXTURES})")
    cases = json.loads(reference.read_text()).get("tokenization")
    if not cases:
        pytest.skip(f"{reference.name} holds no 'tokenization' entries")
    tokenizer = tokenizer_from_metadata(open_checkpoint(model).metadata)
    for case in cases:
        ids = tokenizer.encode(
            case["text"],
            add_special_tokens=bool(case.get("add_special", False)),
            split_special_tokens=not case.get("parse_special", True),
        )
        assert ids == case["ids"], case["text"]
