"""The overlap scheduler's ordering (engine/llm_engine.py): the host reads a step's tokens only when it settles
that step, after the next step has been launched; step k + 1's forward never waits for step k's tokens to reach the
host.

On CPU the device is the host, so the order is observed with a traced tensor: the logits of every forward carry
the number of the step that launched it, everything computed from them carries it on, and every read of such a
tensor to the host (`tolist`, `item`, ...) is logged with that number. Only the engine's public pieces are used,
so the check runs against any version of the loop (it fails on the one whose sampler read the tokens at once)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch.utils._pytree import tree_leaves, tree_map_only

from engine import LLM, SamplingParams

HOST_READS = {torch.Tensor.tolist, torch.Tensor.item, torch.Tensor.numpy, torch.Tensor.__int__}
HOST_READS |= {torch.Tensor.__float__, torch.Tensor.__bool__, torch.Tensor.__index__}


class Traced(torch.Tensor):
    """A tensor computed from step `step`'s logits. `log` gets ("read", step) for every host read of one; inside
    a forward (`forward_depth`) nothing is traced: the model's own tensors stay plain."""

    log: list[tuple[str, int]] = []
    forward_depth = 0
    step: int

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        kwargs = kwargs or {}
        steps = [t.step for t in tree_leaves((args, kwargs)) if isinstance(t, Traced) and hasattr(t, "step")]
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **kwargs)
        if not steps or cls.forward_depth:
            return out
        if func in HOST_READS:
            cls.log.append(("read", max(steps)))
            return out
        return tree_map_only(torch.Tensor, lambda t: traced(t, max(steps)), out)


def traced(tensor: torch.Tensor, step: int) -> Traced:
    out = tensor.as_subclass(Traced)
    out.step = step
    return out


def trace_launches(llm: LLM, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Log ("launch", step) for every forward the runner starts, and trace its logits."""
    runner, engine = llm.engine.runner, llm.engine
    log: list[tuple[str, int]] = []
    monkeypatch.setattr(Traced, "log", log)

    def launching(forward: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        def run(*args, **kwargs) -> torch.Tensor:
            log.append(("launch", engine.num_steps))
            Traced.forward_depth += 1
            try:
                logits = forward(*args, **kwargs)
            finally:
                Traced.forward_depth -= 1
            return traced(logits, engine.num_steps)

        return run

    monkeypatch.setattr(runner, "prefill", launching(runner.prefill))
    monkeypatch.setattr(runner, "decode", launching(runner.decode))
    return log


# -- the ordering -------------------------------------------------------------------------------------------------
def test_the_next_step_launches_before_the_host_reads_a_step_s_tokens(
    overlap_engines: dict[bool, LLM], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fails on the loop that read each step's tokens in its sampler (before the next launch)."""
    llm = overlap_engines[True]
    log = trace_launches(llm, monkeypatch)
    prompts = ["The world model", "ls -la /tmp"]
    params = [
        SamplingParams(temperature=0, max_tokens=6, ignore_eos=True),
        SamplingParams(temperature=0.8, top_k=5, max_tokens=4, seed=3, ignore_eos=True),
    ]
    outputs = llm.generate(prompts, params)
    assert [len(o.outputs[0].token_ids) for o in outputs] == [6, 4]
    reads = [i for i, (kind, _) in enumerate(log) if kind == "read"]
    assert reads, "the settling never read the tokens"
    for i in reads:
        step = log[i][1]
        assert ("launch", step + 1) in log[:i], (
            f"step {step}'s tokens were read before step {step + 1} launched"
        )
        assert log[i] not in log[:i], "a step's tokens were read twice"


def test_without_overlap_each_step_is_read_before_the_next_launch(
    overlap_engines: dict[bool, LLM], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same code path, settled at once: the trace sees the serial order (so the check above can fail)."""
    log = trace_launches(overlap_engines[False], monkeypatch)
    overlap_engines[False].generate(
        "The world model", SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    )
    launches = [step for kind, step in log if kind == "launch"]
    for i, (kind, step) in enumerate(log):
        if kind == "read" and step + 1 in launches:
            assert ("launch", step + 1) in log[i:]
