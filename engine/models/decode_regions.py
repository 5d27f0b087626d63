"""CPU decode through `torch.compile`d regions, shared by every layer of the model.

Why: a CPU decode step is hundreds of tiny ops (a [B, 512] norm, gates, a [B, H, 64, 64] state update), each
costing 5-15 us of dispatch, more than its arithmetic, while a compiled call costs ~100 us of guards: only regions
that replace dozens of ops pay (compiling the whole step measured slower). So: a whole DeltaNet decoder layer, an
attention layer's second half, and batch-1 logits. Inductor fuses a region into a few C++ loops, the GEMMs still go
to BLAS. The regions take tensors and numbers only, never a module, so every layer reuses one graph per batch size
(compiled on first use, seconds each). Attention stays eager (its KV span changes every step), and so does anything
past `max_tokens`, where gathered experts stop paying (see `engine/kernels/fused_moe/gathered.py`)."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from typing import TypeVar

import torch

from engine.kernels import rms_norm
from engine.kernels.fused_moe.gathered import gathered_moe
from engine.layers.gated_deltanet import DecodeStates, MixerDims, MixerWeights, deltanet_decode
from engine.layers.moe import moe


def deltanet_layer_decode(
    hidden: torch.Tensor,
    residual: torch.Tensor,
    norms: tuple[torch.Tensor, torch.Tensor],
    eps: float,
    deltanet_weights: MixerWeights,
    deltanet_dims: MixerDims,
    deltanet_states: DecodeStates,
    moe_weights: tuple[torch.Tensor, ...],
    moe_dims: tuple[int, int, int],
) -> tuple[torch.Tensor, torch.Tensor]:
    """A whole DeltaNet decoder layer for decode tokens: add + norm, mixer, add + norm, MoE (gathered experts)."""
    x, residual = rms_norm(hidden, norms[0], eps, residual=residual)
    hidden = deltanet_decode(x, deltanet_weights, deltanet_states, deltanet_dims)
    return moe_tail_decode(hidden, residual, norms[1], eps, moe_weights, moe_dims)


def moe_tail_decode(
    hidden: torch.Tensor,
    residual: torch.Tensor,
    post_norm: torch.Tensor,
    eps: float,
    moe_weights: tuple[torch.Tensor, ...],
    moe_dims: tuple[int, int, int],
) -> tuple[torch.Tensor, torch.Tensor]:
    """A decoder layer's second half for decode tokens: add + norm, then the MoE with gathered experts."""
    x, residual = rms_norm(hidden, post_norm, eps, residual=residual)
    return moe(x, *moe_weights, *moe_dims, experts=gathered_moe), residual


def one_row_logits(hidden: torch.Tensor, lm_head: torch.Tensor) -> torch.Tensor:
    """Batch-1 logits as a broadcast multiply-sum: compiled, a GEMV split across threads that streams the vocab
    matrix about 1.6x faster than BLAS does for one row on a CPU (bench/engine_cpu.py's 32k x 512 head)."""
    return (hidden[:, None, :] * lm_head[None]).sum(-1).float()


T = TypeVar("T")


class RegionsUnavailable(RuntimeError):
    """A decode region could not be compiled (no C++ compiler, an Inductor failure): decode continues eagerly."""


class DecodeRegions:
    """The compiled regions (see the module docstring); `takes` says whether a batch goes through them."""

    def __init__(self, max_tokens: int) -> None:
        import torch._dynamo

        self.max_tokens = max_tokens
        self.enabled = True
        # One graph per decode batch size and function: lift dynamo's default of 8 so no size falls back to eager.
        # Dynamo's config is per thread, and the regions run on the engine's step-loop thread: set it there.
        self.recompile_limit = 2 * max_tokens + 8
        self._configured = threading.local()
        self.deltanet_layer = self._guarded(torch.compile(deltanet_layer_decode, dynamic=False))
        self.moe_tail = self._guarded(torch.compile(moe_tail_decode, dynamic=False))
        self.one_row_logits = self._guarded(torch.compile(one_row_logits, dynamic=False))

    def takes(self, hidden: torch.Tensor) -> bool:
        return self.enabled and hidden.device.type == "cpu" and hidden.shape[0] <= self.max_tokens

    def _guarded(self, compiled: Callable[..., T]) -> Callable[..., T]:
        """The first failure turns every region off with a warning: decode stays correct, only slower."""

        def run(*args: object) -> T:
            if not getattr(self._configured, "done", False):
                config = torch._dynamo.config
                config.recompile_limit = max(config.recompile_limit, self.recompile_limit)
                self._configured.done = True
            try:
                return compiled(*args)
            except Exception as exc:  # noqa: BLE001 - any compile failure must leave a working (eager) engine
                self.enabled = False
                warnings.warn(
                    f"compiled CPU decode is off ({type(exc).__name__}: {str(exc)[:300]}); decoding eagerly",
                    RuntimeWarning,
                    stacklevel=2,
                )
                raise RegionsUnavailable(str(exc)) from exc

        return run
