"""Weights held in GGUF block formats, and the objects the layers multiply by.

`QuantTensor`: one tensor of one type: uint8 blocks [..., rows, row_bytes] (or a float array for F32/F16/BF16).
`QuantizedWeight`: a 2-D [rows, cols] weight made of row ranges of possibly different types (a fused projection
whose parts llama.cpp stored in different types), optionally with its input columns stored in another order
(`in_perm`: llama.cpp reorders the DeltaNet output projection's columns by V head, and 128-column groups cannot be
moved inside 256-weight super-blocks, so the activation is permuted instead). `linear(x, w)` sends it here.
`QuantizedExperts`: the routed experts' gate, up and down stacks [E, ...], read by `quant_moe` (only the routed
experts' blocks are touched)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.kernels.dequantize import dequantize
from engine.kernels.quant_matmul import quant_matmul, quant_matmul_parts
from engine.kernels.quant_moe import quant_moe
from engine.quant.formats import FLOAT_TYPES, GGMLType


@dataclass(frozen=True)
class QuantTensor:
    data: torch.Tensor  # uint8 [..., rows, row_bytes]; a float tensor [..., rows, cols] for float kinds
    kind: GGMLType
    cols: int

    @property
    def rows(self) -> int:
        return int(self.data.shape[-2])

    @property
    def is_float(self) -> bool:
        return self.kind in FLOAT_TYPES

    @property
    def nbytes(self) -> int:
        return self.data.numel() * self.data.element_size()

    def to(self, device: torch.device) -> QuantTensor:
        return QuantTensor(self.data.to(device), self.kind, self.cols)

    def row_slice(self, start: int, stop: int) -> QuantTensor:
        return QuantTensor(self.data[..., start:stop, :], self.kind, self.cols)

    def dequantize(self, dtype: torch.dtype) -> torch.Tensor:
        if self.is_float:
            return self.data.to(dtype)

        return dequantize(self.data, int(self.kind), self.cols, dtype)

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, cols] -> [T, rows] for a 2-D tensor."""
        if self.is_float:
            return F.linear(x, self.data if self.data.dtype == x.dtype else self.data.to(x.dtype))

        return quant_matmul(x, self.data, int(self.kind), self.cols)


class QuantizedWeight:
    """A [rows, cols] linear weight in GGUF blocks: `linear(x, w)` computes x @ W.T through `quant_matmul`."""

    def __init__(
        self, parts: list[QuantTensor], dtype: torch.dtype, in_perm: torch.Tensor | None = None
    ) -> None:
        if not parts or len({p.cols for p in parts}) != 1 or any(p.data.dim() != 2 for p in parts):
            raise ValueError("a QuantizedWeight is 2-D row ranges of one column count")
        self.parts = parts
        self.dtype = dtype  # the compute dtype of the model around it
        self.in_perm = in_perm  # stored column c holds logical input in_perm[c]

    @property
    def shape(self) -> torch.Size:
        return torch.Size((sum(p.rows for p in self.parts), self.parts[0].cols))

    @property
    def device(self) -> torch.device:
        return self.parts[0].data.device

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts)

    @property
    def kinds(self) -> list[str]:
        return [p.kind.name for p in self.parts]

    def __repr__(self) -> str:
        return f"QuantizedWeight({tuple(self.shape)}, {'+'.join(self.kinds)})"

    def to(self, device: torch.device) -> QuantizedWeight:
        perm = None if self.in_perm is None else self.in_perm.to(device)
        return QuantizedWeight([p.to(device) for p in self.parts], self.dtype, perm)

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, cols] (or [cols]) -> [T, rows] (or [rows])."""
        flat = x.reshape(-1, x.shape[-1])
        if self.in_perm is not None:
            flat = flat.index_select(-1, self.in_perm)
        if len(self.parts) == 1:
            out = self.parts[0].matmul(flat)
        else:  # one launch for two parts at decode sizes on a GPU, not one per part and a cat
            out = quant_matmul_parts(flat, [(p.data, int(p.kind)) for p in self.parts], self.parts[0].cols)
        return out.reshape(*x.shape[:-1], out.shape[-1])

    def input_groups(self, group: int) -> tuple[torch.Tensor, QuantizedWeight] | None:
        """When `in_perm` moves whole groups of `group` columns: (`out_rows` [cols / group] int64, the stored-order
        weight). Logical group i of the input is stored group `out_rows[i]`: a producer that writes its row i
        there (`gated_rms_norm(out_rows=)`) feeds the stored-order weight directly, with no gather of x. None
        without a permutation or when it splits a group. Call at load (it reads `in_perm` on the host once; a
        meta tensor has no values and is taken as it comes)."""
        perm = self.in_perm
        cols = self.parts[0].cols
        if perm is None or cols % group:
            return None
        blocks = perm.view(-1, group)
        held = blocks[:, 0] // group  # the logical group stored group g holds
        groups = torch.arange(len(held), device=perm.device)
        if perm.device.type != "meta":
            whole = held[:, None] * group + torch.arange(group, device=perm.device)
            if not (torch.equal(blocks, whole) and torch.equal(held.sort().values, groups)):
                return None
        out_rows = torch.empty_like(held).scatter_(0, held, groups)
        return out_rows, QuantizedWeight(self.parts, self.dtype)

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The whole weight as a dense [rows, cols] tensor, logical column order (tests and small weights only)."""
        dense = torch.cat([p.dequantize(dtype or self.dtype) for p in self.parts])
        if self.in_perm is not None:
            dense = torch.empty_like(dense).index_copy_(1, self.in_perm, dense)
        return dense

    def rows_of(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows `ids` dequantized (an embedding lookup): [*ids.shape, cols] in the compute dtype."""
        if len(self.parts) != 1 or self.in_perm is not None:
            raise ValueError("row lookup needs a single-part weight in stored column order")
        part = self.parts[0]
        flat = ids.reshape(-1)
        rows = part.data.index_select(0, flat)
        out = (
            rows.to(self.dtype)
            if part.is_float
            else QuantTensor(rows, part.kind, part.cols).dequantize(self.dtype)
        )
        return out.reshape(*ids.shape, part.cols)

    def row_slice(self, start: int, stop: int) -> QuantizedWeight:
        """Rows start:stop (views of the same blocks)."""
        parts, offset = [], 0
        for part in self.parts:
            lo, hi = max(start - offset, 0), min(stop - offset, part.rows)
            if lo < hi:
                parts.append(part.row_slice(lo, hi))
            offset += part.rows
        return QuantizedWeight(parts, self.dtype, self.in_perm)

    @classmethod
    def concat(cls, weights: list[QuantizedWeight | torch.Tensor], dtype: torch.dtype) -> QuantizedWeight:
        """Row-wise concatenation (a fused projection). Neighbouring parts of one type are merged into one block
        tensor (exact: quantized rows are independent), so the fused weight runs as few matmuls as possible."""
        parts: list[QuantTensor] = []
        for weight in weights:
            if isinstance(weight, QuantizedWeight):
                if weight.in_perm is not None:
                    raise ValueError("a weight with permuted input columns cannot be fused")
                parts.extend(weight.parts)
            else:
                parts.append(QuantTensor(weight.detach(), _float_kind(weight.dtype), int(weight.shape[-1])))
        merged: list[QuantTensor] = []
        for part in parts:
            last = merged[-1] if merged else None
            if last is not None and last.kind == part.kind and last.data.dtype == part.data.dtype:
                merged[-1] = QuantTensor(torch.cat([last.data, part.data]), part.kind, part.cols)
            else:
                merged.append(part)
        return cls(merged, dtype)


def _float_kind(dtype: torch.dtype) -> GGMLType:
    return {torch.float16: GGMLType.F16, torch.bfloat16: GGMLType.BF16}.get(dtype, GGMLType.F32)


class QuantizedExperts:
    """The routed experts in GGUF blocks: gate and up [E, I, row_bytes(H)], down [E, H, row_bytes(I)]."""

    def __init__(self, gate: QuantTensor, up: QuantTensor, down: QuantTensor) -> None:
        self.gate, self.up, self.down = gate, up, down

    @property
    def num_experts(self) -> int:
        return int(self.gate.data.shape[0])

    @property
    def inter(self) -> int:
        return self.gate.rows

    @property
    def nbytes(self) -> int:
        return self.gate.nbytes + self.up.nbytes + self.down.nbytes

    def __repr__(self) -> str:
        kinds = "/".join(t.kind.name for t in (self.gate, self.up, self.down))
        return f"QuantizedExperts(E={self.num_experts}, I={self.inter}, H={self.down.rows}, {kinds})"

    def to(self, device: torch.device) -> QuantizedExperts:
        return QuantizedExperts(self.gate.to(device), self.up.to(device), self.down.to(device))

    def __call__(self, x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor) -> torch.Tensor:

        g, u, d = self.gate, self.up, self.down
        return quant_moe(
            x, g.data, int(g.kind), u.data, int(u.kind), d.data, int(d.kind), topk_weights, topk_ids
        )


def replace_parameter(module: torch.nn.Module, name: str, value: object) -> None:
    """Put a non-Parameter weight (a QuantizedWeight, QuantizedExperts) where a parameter was: the parameter is
    dropped, so `to_empty` and `named_parameters` no longer see (or allocate) it."""
    module._parameters.pop(name, None)
    object.__setattr__(module, name, value)
