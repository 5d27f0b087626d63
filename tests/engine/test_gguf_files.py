"""GGUF files without a model run: the reader's errors, split sets, the hub form (offline, from a cache laid out
as huggingface_hub lays it out), llama.cpp's V-head order undone, and the memory plan of the real model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")

from engine.config import Config  # noqa: E402
from engine.gguf.hub import file_tag, pick_files, resolve_gguf  # noqa: E402
from engine.gguf.loader import tiled_input_order, v_head_order  # noqa: E402
from engine.gguf.reader import open_checkpoint  # noqa: E402
from engine.loader import CheckpointError  # noqa: E402
from engine.memory_plan import GIB, plan_memory  # noqa: E402
from engine.testing.quant_recipe import q4_k_m_table, table_bytes  # noqa: E402


def write_gguf(path, arch="qwen35moe", tensors=None, raw_dtype=None, extra=None):
    writer = gguf.GGUFWriter(str(path), arch)
    for key, value in (extra or {}).items():
        writer.add_uint32(key, value)
    for name, array in (tensors or {"token_embd.weight": np.ones((4, 8), np.float32)}).items():
        writer.add_tensor(name, array, raw_dtype=raw_dtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_reads_metadata_and_tensors_in_torch_order(tmp_path):
    path = write_gguf(
        tmp_path / "m.gguf", tensors={"a.weight": np.arange(24, dtype=np.float32).reshape(4, 6)}
    )
    ckpt = open_checkpoint(path)
    assert ckpt.architecture == "qwen35moe"
    tensor = ckpt.tensors["a.weight"]
    assert tensor.shape == (4, 6) and tensor.kind.name == "F32"
    assert np.array_equal(np.asarray(tensor.data).reshape(4, 6), np.arange(24).reshape(4, 6))
    assert ckpt.tensor_bytes == 96


def test_truncated_file_is_one_line(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", tensors={"a.weight": np.ones((64, 64), np.float32)})
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 1000])
    with pytest.raises(CheckpointError, match="truncated"):
        open_checkpoint(path)
    path.write_bytes(data[:40])
    with pytest.raises(CheckpointError, match="truncated|cannot read"):
        open_checkpoint(path)


def test_other_architecture_is_named(tmp_path):
    path = write_gguf(tmp_path / "llama.gguf", arch="llama")
    with pytest.raises(CheckpointError, match="architecture 'llama'.*qwen35moe"):
        open_checkpoint(path)


def test_unsupported_type_names_tensor_type_and_supported_list(tmp_path):
    blocks = np.zeros((2, 18), np.uint8)  # Q4_0: 32 weights in 18 bytes
    path = write_gguf(
        tmp_path / "q40.gguf",
        tensors={"blk.0.ffn_up_exps.weight": blocks},
        raw_dtype=gguf.GGMLQuantizationType.Q4_0,
    )
    with pytest.raises(
        CheckpointError, match=r"blk\.0\.ffn_up_exps\.weight.*Q4_0.*supported types: F32, F16, BF16, Q8_0"
    ):
        open_checkpoint(path)


def test_split_set_reads_every_part_and_names_a_missing_one(tmp_path):
    write_gguf(tmp_path / "m-00001-of-00002.gguf", tensors={"a.weight": np.ones((2, 4), np.float32)})
    write_gguf(tmp_path / "m-00002-of-00002.gguf", tensors={"b.weight": np.zeros((3, 4), np.float32)})
    ckpt = open_checkpoint(tmp_path / "m-00002-of-00002.gguf")  # any part names the set
    assert sorted(ckpt.tensors) == ["a.weight", "b.weight"] and len(ckpt.files) == 2
    (tmp_path / "m-00002-of-00002.gguf").unlink()
    with pytest.raises(CheckpointError, match="m-00002-of-00002.gguf is missing"):
        open_checkpoint(tmp_path / "m-00001-of-00002.gguf")


REPO_FILES = [
    "Qwen-AgentWorld-35B-A3B-Q4_K_M.gguf",
    "Qwen-AgentWorld-35B-A3B-UD-Q4_K_XL.gguf",
    "Q8_0/Qwen-AgentWorld-35B-A3B-Q8_0-00001-of-00002.gguf",
    "Q8_0/Qwen-AgentWorld-35B-A3B-Q8_0-00002-of-00002.gguf",
    "mmproj-F16.gguf",
    "Qwen-AgentWorld-35B-A3B-MXFP4_MOE.gguf",
    "README.md",
]


def test_hub_file_choice():
    assert file_tag("mmproj-F16.gguf") is None and file_tag("README.md") is None
    assert pick_files(REPO_FILES, "q4_k_m", "r") == ["Qwen-AgentWorld-35B-A3B-Q4_K_M.gguf"]
    assert len(pick_files(REPO_FILES, "Q8_0", "r")) == 2
    with pytest.raises(
        CheckpointError, match="has no IQ4_XS GGUF file; it has: MXFP4_MOE, Q4_K_M, Q8_0, UD-Q4_K_XL"
    ):
        pick_files(REPO_FILES, "IQ4_XS", "unsloth/Qwen-AgentWorld-35B-A3B-GGUF")


def fake_hub_cache(home, repo, files):
    """huggingface_hub's cache layout: models--owner--name/{refs/main, snapshots/<rev>/<files>}."""
    root = home / "hub" / f"models--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / ("a" * 40)
    for name in files:
        (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
        write_gguf(snapshot / name)
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text("a" * 40)
    return snapshot


def test_hub_form_resolves_offline_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    repo = "unsloth/Qwen-AgentWorld-35B-A3B-GGUF"
    snapshot = fake_hub_cache(tmp_path, repo, [f for f in REPO_FILES if f.endswith(".gguf")])
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    first = resolve_gguf(f"{repo}:Q8_0")
    assert first == snapshot / "Q8_0/Qwen-AgentWorld-35B-A3B-Q8_0-00001-of-00002.gguf"
    assert resolve_gguf(f"{repo}:Q4_K_M").name == "Qwen-AgentWorld-35B-A3B-Q4_K_M.gguf"
    with pytest.raises(CheckpointError, match="no Q6_K GGUF file; it has:"):
        resolve_gguf(f"{repo}:Q6_K")
    with pytest.raises(CheckpointError, match="not in the Hugging Face cache"):
        resolve_gguf("someone/absent-GGUF:Q4_K_M")


def converter_reorder(tensor: torch.Tensor, dim: int, num_k: int, per_k: int, head_dim: int) -> torch.Tensor:
    """llama.cpp's grouped -> tiled V-head reorder, as `_LinearAttentionVReorderBase._reorder_v_heads` does it."""
    shape = list(tensor.shape)
    grouped = tensor.reshape(*shape[:dim], num_k, per_k, head_dim, *shape[dim + 1 :])
    return grouped.transpose(dim, dim + 1).reshape(shape)


@pytest.mark.parametrize(("num_k", "per_k", "head_dim"), [(2, 2, 3), (16, 2, 128), (4, 3, 1)])
def test_v_head_order_undoes_the_converter(num_k, per_k, head_dim):
    rows = torch.randn(num_k * per_k * head_dim, 5)
    stored = converter_reorder(rows, 0, num_k, per_k, head_dim)
    assert torch.equal(stored[v_head_order(num_k, per_k, head_dim)], rows)
    # Columns (ssm_out): the stored weight times the input permuted by in_perm is the original product.
    weight = torch.randn(7, num_k * per_k * head_dim, dtype=torch.float64)
    stored_w = converter_reorder(weight, 1, num_k, per_k, head_dim)
    x = torch.randn(3, weight.shape[1], dtype=torch.float64)
    perm = tiled_input_order(num_k, per_k, head_dim)
    assert torch.allclose(x[:, perm] @ stored_w.T, x @ weight.T)
    assert torch.equal(stored_w[:, v_head_order(num_k, per_k, head_dim)], weight)


def test_real_model_at_q4_k_m_with_32k_context_plans_inside_24_gib():
    config = Config()  # the defaults are Qwen3.5-35B-A3B / Qwen-AgentWorld-35B-A3B
    weights = table_bytes(q4_k_m_table(config))
    assert 19 * GIB < weights < 21 * GIB  # the published Q4_K_M files are about 20 GiB
    plan = plan_memory(config, weights, context=32768, sequences=1, dtype=torch.bfloat16)
    assert plan.total <= 24 * GIB, plan.render()
    assert "holds" in plan.what_fits(24 * GIB)
    small = plan.what_fits(16 * GIB)
    assert "smaller quantization" in small and "leave no room" in small
    assert "one sequence of" in plan.what_fits(22 * GIB)
