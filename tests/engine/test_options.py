"""One dataclass holds an engine's options: `LLM(model, **options)`, `LLM.from_options`, the `engine serve` flags,
and `LLM.options` as the engine resolved them for its device."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine import LLM
from engine.cli import build_parser
from engine.options import EngineOptions


def test_the_serve_flags_are_the_options_fields() -> None:
    argv = [
        "serve",
        "--model",
        "/x",
        "--max-num-seqs",
        "3",
        "--no-enable-prefix-caching",
        "--hf-compat-dtypes",
    ]
    args = build_parser().parse_args([*argv, "--prefix-cache-memory-gb", "0.5", "--port", "9"])
    assert EngineOptions.from_args(args) == EngineOptions(
        model="/x",
        max_num_seqs=3,
        enable_prefix_caching=False,
        hf_compat_dtypes=True,
        prefix_cache_memory_gb=0.5,
    )
    assert EngineOptions.from_args(build_parser().parse_args(["serve"])) == EngineOptions()


def test_an_unknown_option_fails_before_anything_loads(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="max_num_seq"):
        LLM(str(tmp_path / "missing"), max_num_seq=2)


def test_the_engine_s_options_are_resolved_for_its_device(tiny_llm: LLM) -> None:
    options = tiny_llm.options
    assert (options.device, options.dtype, options.max_num_batched_tokens, options.static_decode) == (
        torch.device("cpu"),
        torch.float32,
        512,
        False,
    )
    assert options.max_model_len == tiny_llm.cache.max_len
    assert options.max_num_seqs == tiny_llm.cache_manager.num_slots == 8


def test_from_options_builds_what_the_keywords_build(tiny_ckpt: Path) -> None:
    options = EngineOptions(
        model=str(tiny_ckpt),
        device="cpu",
        progress=False,
        max_num_seqs=2,
        max_model_len=64,
        enable_prefix_caching=False,
    )
    llm = LLM.from_options(options)
    try:
        assert (llm.model_name, llm.cache_manager.num_slots, llm.options.max_model_len) == (
            str(tiny_ckpt),
            2,
            64,
        )
        assert llm.prefix_cache is None and llm.memory_plan().prefix_cache == 0
    finally:
        llm.shutdown()
