"""The plain-torch kernel references agree with each other and with transformers' torch fallbacks."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine.kernels.causal_conv1d import reference as conv_ref
from engine.kernels.fused_moe import grouped as moe_grouped
from engine.kernels.fused_moe import reference as moe_ref
from engine.kernels.gated_delta_rule import reference as gdr
from engine.kernels.gated_rms_norm.reference import gated_rms_norm
from engine.kernels.rms_norm.reference import rms_norm
from engine.kernels.router_topk.reference import router_topk


def _delta_inputs(batch: int, length: int, heads_k: int, heads_v: int, dim: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, length, heads_k, dim, generator=gen)
    k = torch.randn(batch, length, heads_k, dim, generator=gen)
    v = torch.randn(batch, length, heads_v, dim, generator=gen)
    g = -F.softplus(torch.randn(batch, length, heads_v, generator=gen))
    beta = torch.rand(batch, length, heads_v, generator=gen)
    h0 = torch.randn(batch, heads_v, dim, dim, generator=gen)
    return q, k, v, g, beta, h0


@pytest.mark.parametrize("length", [1, 37, 64, 150])
@pytest.mark.parametrize("with_state", [False, True])
def test_chunk_equals_recurrent(length: int, with_state: bool) -> None:
    q, k, v, g, beta, h0 = _delta_inputs(2, length, 2, 4, 16, seed=length)
    init = h0 if with_state else None
    kw = dict(initial_state=init, output_final_state=True, use_qk_l2norm_in_kernel=True)
    o1, s1 = gdr.chunk_gated_delta_rule(q, k, v, g, beta, **kw)
    o2, s2 = gdr.recurrent_gated_delta_rule(q, k, v, g, beta, **kw)
    assert o1.shape == v.shape and s1.shape == (2, 4, 16, 16) and s1.dtype == torch.float32
    torch.testing.assert_close(o1, o2, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(s1, s2, atol=2e-5, rtol=1e-4)


def test_matches_transformers_torch_fallbacks() -> None:
    modeling = pytest.importorskip("transformers.models.qwen3_5_moe.modeling_qwen3_5_moe")
    hf_chunk = getattr(
        modeling.torch_chunk_gated_delta_rule, "__wrapped__", modeling.torch_chunk_gated_delta_rule
    )
    q, k, v, g, beta, h0 = _delta_inputs(2, 100, 2, 4, 16, seed=3)
    ours = gdr.chunk_gated_delta_rule(
        q, k, v, g, beta, initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True
    )
    theirs = hf_chunk(
        q, k, v, g=g, beta=beta, initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True
    )
    torch.testing.assert_close(ours[0], theirs[0], atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(ours[1], theirs[1], atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("lengths", [[5, 70, 1], [40, 0, 40]])  # an empty sequence passes its state through
def test_packed_cu_seqlens_equals_separate(with_state: bool, lengths: list[int]) -> None:
    seqs = [_delta_inputs(1, n, 2, 4, 8, seed=i) for i, n in enumerate(lengths)]
    packed = [torch.cat([s[i] for s in seqs], dim=1) for i in range(5)]
    h0 = torch.cat([s[5] for s in seqs], dim=0) if with_state else None
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    for fn in (gdr.chunk_gated_delta_rule, gdr.recurrent_gated_delta_rule):
        o, s = fn(
            *packed, initial_state=h0, output_final_state=True, cu_seqlens=cu, use_qk_l2norm_in_kernel=True
        )
        for i, seq in enumerate(seqs):
            init = seq[5] if with_state else None
            oi, si = fn(*seq[:5], initial_state=init, output_final_state=True, use_qk_l2norm_in_kernel=True)
            torch.testing.assert_close(o[:, cu[i] : cu[i + 1]], oi, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(s[i : i + 1], si, atol=1e-5, rtol=1e-5)
            if lengths[i] == 0:
                expected = seq[5] if with_state else torch.zeros_like(seq[5])
                torch.testing.assert_close(s[i : i + 1], expected)


def test_recurrent_inplace_state_and_decode_steps_match_prefill() -> None:
    q, k, v, g, beta, h0 = _delta_inputs(2, 9, 1, 2, 8, seed=7)
    full, final = gdr.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True)
    state = h0.clone()
    for t in range(9):
        o, returned = gdr.recurrent_gated_delta_rule(
            q[:, t : t + 1],
            k[:, t : t + 1],
            v[:, t : t + 1],
            g[:, t : t + 1],
            beta[:, t : t + 1],
            initial_state=state,
            inplace_final_state=True,
        )
        assert returned is state
        torch.testing.assert_close(o, full[:, t : t + 1], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(state, final, atol=1e-5, rtol=1e-5)


def test_conv1d_prefill_then_updates_equals_full() -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 11, 6, generator=gen)
    w = torch.randn(6, 4, generator=gen)
    full, _ = conv_ref.causal_conv1d(x, w)
    expected = F.silu(F.conv1d(F.pad(x.transpose(1, 2), (3, 0)), w.unsqueeze(1), groups=6)).transpose(1, 2)
    torch.testing.assert_close(full, expected)
    head, state = conv_ref.causal_conv1d(x[:, :2], w)  # shorter than the kernel: state is left zero-padded
    assert torch.equal(state[..., :2], torch.zeros(2, 6, 2)) and torch.equal(
        state[..., 2:], x[:, :2].transpose(1, 2)
    )
    mid, state = conv_ref.causal_conv1d(x[:, 2:7], w, conv_state=state)
    steps = [conv_ref.causal_conv1d_update(x[:, t], w, state) for t in range(7, 11)]
    torch.testing.assert_close(torch.cat([head, mid, torch.stack(steps, 1)], 1), full)
    torch.testing.assert_close(state, x[:, -4:].transpose(1, 2))


def test_conv1d_packed_equals_separate() -> None:
    gen = torch.Generator().manual_seed(1)
    a, b = torch.randn(1, 3, 5, generator=gen), torch.randn(1, 8, 5, generator=gen)
    w = torch.randn(5, 4, generator=gen)
    state = torch.randn(2, 5, 4, generator=gen)
    y, new_state = conv_ref.causal_conv1d(
        torch.cat([a, b], 1), w, conv_state=state, cu_seqlens=torch.tensor([0, 3, 11])
    )
    ya, sa = conv_ref.causal_conv1d(a, w, conv_state=state[:1])
    yb, sb = conv_ref.causal_conv1d(b, w, conv_state=state[1:])
    torch.testing.assert_close(y, torch.cat([ya, yb], 1))
    torch.testing.assert_close(new_state, torch.cat([sa, sb], 0))


def test_conv1d_packed_with_an_empty_sequence() -> None:
    gen = torch.Generator().manual_seed(2)
    x, w = torch.randn(1, 6, 5, generator=gen), torch.randn(5, 4, generator=gen)
    state = torch.randn(3, 5, 4, generator=gen)
    y, new_state = conv_ref.causal_conv1d(x, w, conv_state=state, cu_seqlens=torch.tensor([0, 2, 2, 6]))
    ya, sa = conv_ref.causal_conv1d(x[:, :2], w, conv_state=state[:1])
    yc, sc = conv_ref.causal_conv1d(x[:, 2:], w, conv_state=state[2:])
    torch.testing.assert_close(y, torch.cat([ya, yc], 1))
    torch.testing.assert_close(new_state, torch.cat([sa, state[1:2], sc], 0))


@pytest.mark.parametrize("num_tokens", [1, 2, 9])
def test_fused_moe_matches_dense_loop(num_tokens: int) -> None:
    gen = torch.Generator().manual_seed(num_tokens)
    experts, hidden, inter, top_k = 6, 8, 5, 3
    x = torch.randn(num_tokens, hidden, generator=gen)
    w_gate_up = torch.randn(experts, 2 * inter, hidden, generator=gen)
    w_down = torch.randn(experts, hidden, inter, generator=gen)
    weights, ids = router_topk(torch.randn(num_tokens, experts, generator=gen), top_k)
    expected = torch.zeros_like(x)
    for t in range(num_tokens):
        for j in range(top_k):
            e = ids[t, j]
            gate, up = (w_gate_up[e] @ x[t]).split(inter)
            expected[t] += weights[t, j] * (w_down[e] @ (F.silu(gate) * up))
    torch.testing.assert_close(moe_ref.fused_moe(x, w_gate_up, w_down, weights, ids), expected)
    torch.testing.assert_close(
        moe_ref._moe_loop_hit_experts(x, w_gate_up, w_down, weights, ids, inter), expected
    )
    if moe_grouped.available(x, w_down):  # the CPU path for 2+ tokens (not at these unaligned widths)
        got = moe_grouped.fused_moe(x, w_gate_up, w_down, weights, ids)
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("num_tokens", [2, 8, 70])
def test_grouped_experts_equal_the_reference_loop_with_unused_experts(num_tokens: int) -> None:
    gen = torch.Generator().manual_seed(100 + num_tokens)
    experts, hidden, inter, top_k = 17, 24, 12, 4  # rows of 96 and 48 bytes
    x = torch.randn(num_tokens, hidden, generator=gen)
    w_gate_up = torch.randn(experts, 2 * inter, hidden, generator=gen)
    w_down = torch.randn(experts, hidden, inter, generator=gen)
    # Routing that leaves the first, the last and some middle experts without tokens (empty groups).
    allowed = torch.tensor([2, 3, 5, 8, 9, 11, 14, 15])
    ids = torch.stack(
        [allowed[torch.randperm(len(allowed), generator=gen)[:top_k]] for _ in range(num_tokens)]
    )
    weights = torch.rand(num_tokens, top_k, generator=gen).softmax(-1)
    assert moe_grouped.available(x, w_down)
    expected = moe_ref.fused_moe(x, w_gate_up, w_down, weights, ids)
    torch.testing.assert_close(moe_grouped.fused_moe(x, w_gate_up, w_down, weights, ids), expected)


def test_router_topk_renormalises() -> None:
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
    weights, ids = router_topk(logits, 2)
    assert ids.tolist() == [[3, 2]]
    torch.testing.assert_close(weights, torch.tensor([[1.0, torch.e**-1]]) / (1 + torch.e**-1))


def test_norms() -> None:
    x = torch.randn(3, 8)
    w = torch.randn(8)
    xf = x / x.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()
    torch.testing.assert_close(rms_norm(x, w, 1e-6), xf * (1 + w))
    r = torch.randn(3, 8)
    normed, summed = rms_norm(x, w, 1e-6, residual=r)
    torch.testing.assert_close(summed, x + r)
    torch.testing.assert_close(normed, rms_norm(x + r, w, 1e-6))
    gate = torch.randn(3, 8)
    torch.testing.assert_close(gated_rms_norm(x, gate, w, 1e-6), w * xf * F.silu(gate))


def test_dispatch_env(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.kernels.dispatch import use_triton

    x = torch.zeros(1)
    monkeypatch.delenv("AW_KERNELS", raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert not use_triton(x)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert use_triton(x)
    monkeypatch.setenv("AW_KERNELS", "torch")
    assert not use_triton(x)
    monkeypatch.setenv("AW_KERNELS", "bogus")
    with pytest.raises(ValueError):
        use_triton(x)


def test_an_op_is_its_reference_decorated(monkeypatch: pytest.MonkeyPatch) -> None:
    import inspect

    from engine.kernels import fused_moe as moe_op
    from engine.kernels import rms_norm as rms_op
    from engine.kernels.rms_norm import reference as rms_reference

    assert rms_op.__name__ == "rms_norm" and rms_op.reference is rms_reference.rms_norm
    assert inspect.signature(rms_op) == inspect.signature(rms_reference.rms_norm)
    assert rms_op.__doc__ == rms_reference.rms_norm.__doc__
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setenv("AW_KERNELS", "torch")
    calls = []
    real_grouped_mm = moe_grouped._grouped_mm
    monkeypatch.setattr(
        moe_grouped, "_grouped_mm", lambda *a, **k: calls.append("grouped") or real_grouped_mm(*a, **k)
    )
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 16, generator=gen)
    w_gate_up, w_down = torch.randn(5, 16, 16, generator=gen), torch.randn(5, 16, 8, generator=gen)
    weights, ids = router_topk(torch.randn(4, 5, generator=gen), 2)
    moe_op(x, w_gate_up, w_down, weights, ids)
    assert calls == ["grouped", "grouped"]  # 4 tokens, aligned widths on a CPU: two grouped GEMMs
    moe_op(x[:1], w_gate_up, w_down, weights[:1], ids[:1])
    assert len(calls) == 2  # one token: the reference's in-place path


def test_settings_parse_every_switch_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine import settings

    monkeypatch.setenv("AW_CUDA_GRAPHS", "Off")
    assert settings.cuda_graphs() is False
    monkeypatch.setenv("AW_CUDA_GRAPHS", "yes")
    assert settings.cuda_graphs() is True
    monkeypatch.setenv("AW_COMPILE", "maybe")
    with pytest.raises(ValueError, match="AW_COMPILE"):
        settings.compile_decode()
    monkeypatch.delenv("AW_COMPILE")
    assert settings.compile_decode() is False
