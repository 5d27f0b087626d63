"""Tiny random checkpoints shared by the engine tests (built once per session; a few seconds each)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.testing.tiny_checkpoint import make_tiny_checkpoint

torch.set_num_threads(2)


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Text-only, fused experts, single file."""
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), seed=0)


@pytest.fixture(scope="session")
def tiny_llm(tiny_ckpt: Path):
    from engine import LLM

    return LLM(str(tiny_ckpt), device="cpu", progress=False)


@pytest.fixture(scope="session")
def hf_model(tiny_ckpt: Path):
    from transformers import Qwen3_5MoeForCausalLM

    return Qwen3_5MoeForCausalLM.from_pretrained(str(tiny_ckpt), dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def overlap_engines(tiny_ckpt: Path):
    """The same checkpoint and cache twice, by `overlap`: the serial step loop (False) and the overlapped one."""
    from engine import LLM

    built = {}
    for overlap in (False, True):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("AW_OVERLAP_SCHEDULE", "1" if overlap else "0")
            built[overlap] = LLM(
                str(tiny_ckpt), device="cpu", progress=False, max_num_seqs=4, max_model_len=96
            )
        assert built[overlap].engine.overlap is overlap
    yield built
    for llm in built.values():
        llm.shutdown()
