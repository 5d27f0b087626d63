"""Decode state, allocated once up front: per-slot KV for the full-attention layers, conv + recurrent state for the
Gated DeltaNet layers. A sequence takes a slot when it starts and gives it back when it ends.

One extra slot, `pad_slot`, is scratch that no sequence ever gets: the padded rows of a CUDA-graph decode step
(see engine/cuda_graphs.py) read and write it, so padding can never touch a live sequence."""

from __future__ import annotations

import torch

from engine.config import FULL_ATTENTION, Config


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
        self._free = list(range(num_slots))

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

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self) -> int:
        if not self._free:
            raise RuntimeError("no free cache slot")
        self._free.sort()  # lowest first keeps running batches on consecutive slots (cheap views)
        slot = self._free.pop(0)
        self.conv[:, slot].zero_()
        self.recurrent[:, slot].zero_()
        return slot

    def free(self, slot: int) -> None:
        if slot in self._free or not 0 <= slot < self.num_slots:
            raise ValueError(f"slot {slot} is not in use")
        self._free.append(slot)
