"""llama.cpp-made GGUF files through the engine with every op on its Triton path (interpreted): the quantized
matmuls and the fused quantized MoE reproduce llama.cpp's logits on the same weights, as the torch references do
(`tests/engine/test_gguf_parity.py`)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

pytest.importorskip("gguf")

from tests.engine.test_gguf_parity import FIXTURES, REFERENCE, agreement, reference_logits  # noqa: E402

TOKENS = (
    12  # a prefix of the reference sequence: the interpreter is slow, the logits of a prefix are the same
)


@pytest.mark.parametrize("name", ["small-Q4_K_M.gguf", "small-IQ4_XS.gguf", "small-MXFP4_MOE.gguf"])
def test_quantized_file_through_triton_kernels(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from engine import LLM

    calls: dict[str, int] = {}
    for module_name, op in (("engine.kernels.quant_matmul.triton", "quant_matmul"),
                            ("engine.kernels.quant_moe.triton", "quant_moe")):  # fmt: skip
        module = importlib.import_module(module_name)
        original = getattr(module, op)

        def counted(*args, _op=op, _original=original, **kwargs):
            calls[_op] = calls.get(_op, 0) + 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(module, op, counted)
    monkeypatch.setenv("AW_KERNELS", "triton")
    llm = LLM(str(FIXTURES / name), device="cpu", dtype="float32", progress=False, max_model_len=64,
              max_num_seqs=1, enable_prefix_caching=False)  # fmt: skip
    try:
        ours = llm.logits(REFERENCE["token_ids"][:TOKENS]).numpy()
    finally:
        llm.shutdown()
    assert calls.get("quant_matmul") and calls.get("quant_moe"), calls
    max_rel, top1 = agreement(ours, reference_logits(name)[:TOKENS])
    assert np.isfinite(ours).all() and max_rel <= 2e-3 and top1 >= 0.98, (max_rel, top1)
