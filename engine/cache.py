"""Decode state, allocated once up front: per-slot KV for the full-attention layers, conv + recurrent state for the
Gated DeltaNet layers; and the device copies that move a slot's state in and out (`reset`, `snapshot`, `restore`).

This is device memory only. Which sequence holds which slot, and which snapshots are kept, is the cache manager's
(engine/cache_manager.py); the model runner is the one caller of the copies, when a step plan asks for them.

One extra slot, `pad_slot`, is scratch that no sequence ever gets: the padded rows of a CUDA-graph decode step
(see engine/cuda_graphs.py) read and write it, so padding can never touch a live sequence."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.config import FULL_ATTENTION, Config


@dataclass(eq=False)
class Snapshot:
    """A slot's whole state at the end of `tokens`: a copy, so restoring never aliases a slot that keeps decoding."""

    tokens: tuple[int, ...]
    keys: torch.Tensor  # [full layers, kv heads, L, head_dim]
    values: torch.Tensor
    conv: torch.Tensor  # [linear layers, conv_dim, width]
    recurrent: torch.Tensor  # [linear layers, HV, K, V] fp32

    @property
    def length(self) -> int:
        return len(self.tokens)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.keys, self.values, self.conv, self.recurrent))


@dataclass(eq=False)
class RowState:
    """What one decode step of some slots overwrites (`Cache.rows_at`)."""

    slots: torch.Tensor
    positions: torch.Tensor
    keys: torch.Tensor
    values: torch.Tensor
    conv: torch.Tensor
    recurrent: torch.Tensor


class Cache:
    def __init__(
        self, config: Config, num_slots: int, max_len: int, dtype: torch.dtype, device: torch.device | str
    ) -> None:
        if num_slots < 1 or max_len < 1:
            raise ValueError("the cache needs at least one slot of at least one token")
        self.config = config
        self.num_slots = num_slots  # slots sequences can take
        self.pad_slot = num_slots  # the scratch slot, the last row of every per-slot tensor
        self.max_len = max_len
        rows = num_slots + 1
        num_full = sum(t == FULL_ATTENTION for t in config.layer_types)
        num_linear = config.num_hidden_layers - num_full
        kv_shape = (num_full, rows, config.num_key_value_heads, max_len, config.head_dim)
        # Layout [slot, kv_head, position, dim]: a run of consecutive slots up to a length is a strided view that
        # attention reads without copying.
        self.keys = torch.zeros(kv_shape, dtype=dtype, device=device)
        self.values = torch.zeros(kv_shape, dtype=dtype, device=device)
        self.conv = torch.zeros(
            (num_linear, rows, config.linear_conv_dim, config.linear_conv_kernel_dim),
            dtype=dtype,
            device=device,
        )
        self.recurrent = torch.zeros(
            (
                num_linear,
                rows,
                config.linear_num_value_heads,
                config.linear_key_head_dim,
                config.linear_value_head_dim,
            ),
            dtype=torch.float32,
            device=device,
        )

    @staticmethod
    def bytes_per_slot(config: Config, max_len: int, dtype: torch.dtype) -> int:
        item = torch.empty((), dtype=dtype).element_size()
        num_full = sum(t == FULL_ATTENTION for t in config.layer_types)
        num_linear = config.num_hidden_layers - num_full
        kv = 2 * num_full * config.num_key_value_heads * max_len * config.head_dim * item
        conv = num_linear * config.linear_conv_dim * config.linear_conv_kernel_dim * item
        state = (
            num_linear
            * config.linear_num_value_heads
            * config.linear_key_head_dim
            * config.linear_value_head_dim
            * 4
        )
        return kv + conv + state

    @classmethod
    def from_budget(
        cls,
        config: Config,
        budget_bytes: int,
        max_len: int,
        max_slots: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> Cache:
        per_slot = cls.bytes_per_slot(config, max_len, dtype)
        slots = min(max_slots, budget_bytes // per_slot - 1)  # one slot of the budget is the scratch slot
        if slots < 1:
            raise MemoryError(
                f"a cache slot of {max_len} tokens needs {per_slot / 2**30:.2f} GiB, more than the "
                f"{budget_bytes / 2**30:.2f} GiB budget; lower max_model_len"
            )
        return cls(config, int(slots), max_len, dtype, device)

    def snapshot_bytes(self, length: int) -> int:
        """The size of a snapshot of `length` tokens."""
        return self.bytes_per_slot(self.config, length, self.keys.dtype)

    # -- device copies (the model runner's, as a step plan asks) ----------------------------------------------
    def reset(self, slot: int) -> None:
        """A fresh start in `slot`: zero its DeltaNet state (attention reads only the positions a sequence wrote)."""
        self.conv[:, slot].zero_()
        self.recurrent[:, slot].zero_()

    def snapshot(self, slot: int, tokens: tuple[int, ...]) -> Snapshot:
        """A copy of the state of `slot`, which holds exactly `tokens`: KV of positions [0, L) of every attention
        layer, the conv and recurrent state of every DeltaNet layer."""
        length = len(tokens)
        return Snapshot(
            tuple(tokens),
            self.keys[:, slot, :, :length].clone(),
            self.values[:, slot, :, :length].clone(),
            self.conv[:, slot].clone(),
            self.recurrent[:, slot].clone(),
        )

    def rows_at(self, slots: torch.Tensor, positions: torch.Tensor) -> RowState:
        """A copy of what a decode step of `slots` at `positions` overwrites (the KV at each position, the whole
        DeltaNet state of each slot): to run a step again from the same state (`put_rows`)."""
        return RowState(
            slots,
            positions,
            self.keys[:, slots, :, positions].clone(),
            self.values[:, slots, :, positions].clone(),
            self.conv[:, slots].clone(),
            self.recurrent[:, slots].clone(),
        )

    def put_rows(self, state: RowState) -> None:
        slots, positions = state.slots, state.positions
        self.keys[:, slots, :, positions] = state.keys
        self.values[:, slots, :, positions] = state.values
        self.conv[:, slots] = state.conv
        self.recurrent[:, slots] = state.recurrent

    def restore(self, snapshot: Snapshot, slot: int) -> None:
        """Copy a snapshot's state into `slot`, which then holds its tokens."""
        length = snapshot.length
        self.keys[:, slot, :, :length].copy_(snapshot.keys)
        self.values[:, slot, :, :length].copy_(snapshot.values)
        self.conv[:, slot].copy_(snapshot.conv)
        self.recurrent[:, slot].copy_(snapshot.recurrent)
