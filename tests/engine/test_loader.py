"""Checkpoint resolution and loading errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine import LLM
from engine.config import Config
from engine.loader import CheckpointError, resolve_model_path
from engine.testing.tiny_checkpoint import make_tiny_checkpoint


@pytest.fixture()
def ckpt(tmp_path: Path) -> Path:
    return make_tiny_checkpoint(tmp_path / "ckpt", seed=0, multimodal=True)


def test_missing_tensor_is_named(ckpt: Path) -> None:
    tensors = load_file(str(ckpt / "model.safetensors"))
    del tensors["model.language_model.layers.1.linear_attn.A_log"]
    save_file(tensors, str(ckpt / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"model\.layers\.1\.linear_attn\.A_log"):
        LLM(str(ckpt), device="cpu", progress=False)


def test_misshaped_tensor_is_named(ckpt: Path) -> None:
    tensors = load_file(str(ckpt / "model.safetensors"))
    key = "model.language_model.layers.3.self_attn.q_proj.weight"
    tensors[key] = tensors[key][:, :-1].contiguous()
    save_file(tensors, str(ckpt / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"q_proj\.weight.*shape"):
        LLM(str(ckpt), device="cpu", progress=False)


def test_truncated_file(ckpt: Path) -> None:
    data = (ckpt / "model.safetensors").read_bytes()
    (ckpt / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="model.safetensors"):
        LLM(str(ckpt), device="cpu", progress=False)


def test_missing_per_expert_tensor(tmp_path: Path) -> None:
    path = make_tiny_checkpoint(tmp_path / "pe", per_expert_layout=True)
    tensors = load_file(str(path / "model.safetensors"))
    del tensors["model.layers.2.mlp.experts.5.up_proj.weight"]
    save_file(tensors, str(path / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"experts\.5\.up_proj"):
        LLM(str(path), device="cpu", progress=False)


def test_missing_shard(tmp_path: Path) -> None:
    path = make_tiny_checkpoint(tmp_path / "sh", sharded=True)
    (path / "model-00002-of-00003.safetensors").unlink()
    with pytest.raises(CheckpointError, match="model-00002-of-00003"):
        LLM(str(path), device="cpu", progress=False)


def test_fp32_decay_params_by_default_and_hf_compat(tmp_path: Path) -> None:
    path = make_tiny_checkpoint(tmp_path / "bf", dtype="bfloat16")
    llm = LLM(str(path), device="cpu", dtype="bfloat16", progress=False)
    deltanet = llm.model.model.layers[0].linear_attn
    assert deltanet.A_log.dtype == torch.float32 and deltanet.norm.weight.dtype == torch.float32
    assert llm.model.model.layers[0].mlp.experts.gate_up_proj.dtype == torch.bfloat16
    compat = LLM(str(path), device="cpu", dtype="bfloat16", hf_compat_dtypes=True, progress=False)
    assert compat.model.model.layers[0].linear_attn.A_log.dtype == torch.bfloat16
    out = compat.generate(["hello"], None)
    assert out[0].outputs[0].token_ids


def test_config_from_multimodal_and_text(ckpt: Path) -> None:
    raw = json.loads((ckpt / "config.json").read_text())
    assert "text_config" in raw
    multimodal = Config.from_pretrained(ckpt)
    text = Config.from_dict(raw["text_config"])
    assert multimodal.layer_types == text.layer_types == ["linear_attention"] * 3 + ["full_attention"]
    assert multimodal.rope_theta == 1e7 and multimodal.rotary_dim == 8
    assert (
        Config.from_dict({"num_hidden_layers": 8, "full_attention_interval": 2}).layer_types[1]
        == "full_attention"
    )


def test_bad_model_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(CheckpointError, match="neither"):
        resolve_model_path(str(tmp_path / "nope" / "deeper"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(CheckpointError, match="hf download"):
        resolve_model_path("nobody-here/no-such-model")


def test_an_unfused_model_says_how_to_fuse_it() -> None:
    """Projections run fused (one GEMM per input); a model built by hand and not fused fails loudly, not slowly."""
    from engine.cache import Cache
    from engine.forward_batch import ForwardBatch
    from engine.models.qwen3_5_moe import Qwen3_5MoeForCausalLM

    config = Config(
        vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
        head_dim=16, linear_key_head_dim=8, linear_value_head_dim=8, linear_num_key_heads=2,
        linear_num_value_heads=2, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=8,
        shared_expert_intermediate_size=8,
    )  # fmt: skip
    model = Qwen3_5MoeForCausalLM(config).eval()
    cache = Cache(config, num_slots=1, max_len=8, dtype=torch.float32, device=torch.device("cpu"))
    batch = ForwardBatch.build([0], [0], [3], torch.device("cpu"))
    with pytest.raises(
        RuntimeError, match=r"GatedDeltaNet runs on fused projection weights: call model\.fuse_weights"
    ):
        model(torch.tensor([1, 2, 3]), batch, cache)
    model.fuse_weights()
    assert model(torch.tensor([1, 2, 3]), batch, cache).shape == (1, 64)
