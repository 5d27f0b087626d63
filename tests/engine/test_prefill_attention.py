"""Chunked prefill attention without a dense mask (engine/layers/attention.py `prefill_attention`): the same
numbers as the dense-mask path it replaced, on random inputs, on each of its three paths (the flash kernel with
grouped KV heads, the memory-efficient kernel with the KV heads repeated, query blocks), and the path chosen as a
GPU would choose it. A dense [chunk, context] mask with grouped KV heads leaves SDPA on a GPU only its math path
(4 GiB of scores at 2,048 x 32k); the layer must never pass one."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import CausalBias

from engine.cache import Cache
from engine.forward_batch import ForwardBatch
from engine.layers import attention
from engine.layers.attention import prefill_attention, prefill_attention_reference


def _inputs(n: int, end: int, heads: int = 8, kv_heads: int = 2, dim: int = 32, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, heads, n, dim, generator=gen).to(dtype)
    k = torch.randn(1, kv_heads, end, dim, generator=gen).to(dtype)
    v = torch.randn(1, kv_heads, end, dim, generator=gen).to(dtype)
    return q, k, v


class SdpaCalls:
    """Records each of the layer's SDPA calls (mask kind, KV heads, enable_gqa), then runs the real one."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, bool]] = []
        self.real = F.scaled_dot_product_attention

    def __call__(self, q, k, v, attn_mask=None, is_causal=False, enable_gqa=False, **kwargs):
        kind = (
            "dense"
            if isinstance(attn_mask, torch.Tensor) and not isinstance(attn_mask, CausalBias)
            else ("causal bias" if isinstance(attn_mask, CausalBias) else "none")
        )
        self.calls.append((kind, k.shape[1], enable_gqa))
        return self.real(q, k, v, attn_mask=attn_mask, is_causal=is_causal, enable_gqa=enable_gqa, **kwargs)


@pytest.fixture
def sdpa(monkeypatch: pytest.MonkeyPatch) -> SdpaCalls:
    calls = SdpaCalls()
    monkeypatch.setattr(attention, "scaled_dot_product_attention", calls)
    return calls


def _as_gpu(monkeypatch: pytest.MonkeyPatch, flash: bool, efficient: bool) -> None:
    """Choose the path as a GPU would, with the given kernels taking the inputs (they run here as CPU SDPA)."""
    monkeypatch.setattr(attention, "_has_fused_kernels", lambda device: True)
    answers = {attention.can_use_flash_attention: flash, attention.can_use_efficient_attention: efficient}
    monkeypatch.setattr(attention, "_takes", lambda check, q, k, v, gqa: answers[check])


@pytest.mark.parametrize(("n", "end"), [(1, 1), (17, 17), (5, 40), (33, 70), (64, 64 + 129)])
@pytest.mark.parametrize(("flash", "efficient"), [(True, True), (False, True), (False, False)])
def test_equals_the_dense_mask_path(
    monkeypatch, sdpa: SdpaCalls, n: int, end: int, flash: bool, efficient: bool
):
    _as_gpu(monkeypatch, flash, efficient)
    q, k, v = _inputs(n, end, seed=n + end)
    torch.testing.assert_close(
        prefill_attention(q, k, v), prefill_attention_reference(q, k, v), rtol=1e-5, atol=1e-5
    )
    assert {kind for kind, _, _ in sdpa.calls} == {"causal bias"}
    heads = {kv for _, kv, _ in sdpa.calls}
    assert heads == (
        {2} if flash else {8} if efficient else {2}
    )  # KV heads repeated for the efficient kernel only


def test_query_blocks_bound_the_scores(monkeypatch, sdpa: SdpaCalls) -> None:
    """Forced to small blocks (the CPU path at 32k runs 256-row blocks): many calls, each over the keys it sees."""
    monkeypatch.setattr(attention, "SCORE_BLOCK_BYTES", 8 * 200 * 4 * 16)  # 16 rows at 200 keys, 8 heads
    q, k, v = _inputs(70, 200, seed=3)
    out = prefill_attention(q, k, v)
    blocks = len(sdpa.calls)
    torch.testing.assert_close(out, prefill_attention_reference(q, k, v), rtol=1e-5, atol=1e-5)
    assert blocks == 5 and all(kind == "causal bias" for kind, _, _ in sdpa.calls[:blocks])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_matches(dtype: torch.dtype) -> None:
    q, k, v = _inputs(48, 300, dtype=dtype, seed=5)
    ours, ref = (
        prefill_attention(q, k, v).float(),
        prefill_attention_reference(q.float(), k.float(), v.float()),
    )
    torch.testing.assert_close(ours, ref, rtol=0, atol=2e-2)


def test_the_layer_never_passes_a_dense_mask(tiny_llm, sdpa: SdpaCalls) -> None:
    """Two packed sequences, one starting fresh and one continuing its cached prefix (where the old path built
    a dense mask), through the tiny model's attention layers; logits as with one sequence at a time."""
    model, cpu = tiny_llm.model, torch.device("cpu")
    cache = Cache(tiny_llm.config, num_slots=3, max_len=64, dtype=torch.float32, device=cpu)
    gen = torch.Generator().manual_seed(1)
    first, second = torch.randint(0, 300, (20,), generator=gen), torch.randint(0, 300, (30,), generator=gen)
    model(second[:12], ForwardBatch.build([1], [0], [12], cpu), cache)
    sdpa.calls.clear()
    both = model(torch.cat([first, second[12:]]), ForwardBatch.build([0, 1], [0, 12], [20, 18], cpu), cache)
    assert sdpa.calls and all(kind != "dense" for kind, _, _ in sdpa.calls)
    alone = model(second, ForwardBatch.build([2], [0], [30], cpu), cache)
    torch.testing.assert_close(both[1], alone[0], rtol=1e-4, atol=1e-4)
