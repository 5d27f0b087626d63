"""Weights stay quantized in memory: loading a Q4_K_M file grows the process by about the file's tensor bytes,
measured against the same model's F32 file in the same run (each loaded in a fresh process; RSS = anonymous +
file-backed pages, after one forward pass so the weights have been read)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("gguf")

from tests.conftest import REPO  # noqa: E402

MEASURE = r"""
import json, sys
import torch
from engine import LLM

def rss():
    fields = dict(line.split(":", 1) for line in open("/proc/self/status"))
    return sum(int(fields[k].split()[0]) * 1024 for k in ("RssAnon", "RssFile"))

before = rss()
llm = LLM(sys.argv[1], device="cpu", dtype="float32", progress=False, max_model_len=64, max_num_seqs=1,
          enable_prefix_caching=False)
llm.logits(list(range(1, 17)))
print(json.dumps({"grown": rss() - before, "file_tensors": llm.file_tensor_bytes,
                  "planned_weights": llm.memory_plan().weights}))
llm.shutdown()
"""

CONFIG = dict(
    vocab_size=4096, hidden_size=512, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
    head_dim=128, linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=64,
    linear_value_head_dim=64, num_experts=16, num_experts_per_tok=4, moe_intermediate_size=256,
    shared_expert_intermediate_size=256, max_position_embeddings=4096,
)  # fmt: skip


def measure(path: Path) -> dict[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, str(path)], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_q4_k_m_grows_the_process_by_about_its_size(tmp_path: Path) -> None:
    from engine.config import Config
    from engine.testing.gguf_model_file import write_random_pair
    from engine.testing.tiny_checkpoint import build_tokenizer

    quant, dense = write_random_pair(tmp_path, Config(**CONFIG), build_tokenizer())
    q4, f32 = measure(quant), measure(dense)
    assert q4["planned_weights"] <= 1.1 * q4["file_tensors"]
    # What loading costs besides the weights (cache, buffers, allocator), from the F32 run...
    overhead = max(f32["grown"] - f32["file_tensors"], 0)
    # ...so the Q4_K_M run grows by its tensor bytes (x1.1) plus that, never by the dense size.
    assert q4["grown"] <= 1.1 * q4["file_tensors"] + overhead + 8 * 2**20, (q4, f32)
    # The measurement sees weights: the F32 twin costs its extra bytes.
    assert f32["grown"] - q4["grown"] >= 0.8 * (f32["file_tensors"] - q4["file_tensors"]), (q4, f32)
