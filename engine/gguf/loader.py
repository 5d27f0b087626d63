"""A Qwen3.5-MoE model from a GGUF checkpoint, its quantized tensors kept in their blocks.

llama.cpp's converter (`conversion/qwen.py`: `Qwen3NextModel`, `_LinearAttentionVReorderBase`) changed the
tensors on the way in; each change is undone here exactly:
- names: `blk.N.attn_qkv` etc. (`GGUF_NAMES` below); `attn_qkv` of a full-attention layer is a fused q|k|v,
  `ffn_gate_up_exps` a fused gate|up (newer converters write either form).
- `*norm.weight` (except the DeltaNet's `ssm_norm`) was stored as w + 1: the engine's zero-centred norms take
  w back (stored - 1).
- `ssm_a` is -exp(A_log): A_log = log(-ssm_a), in fp64.
- `ssm_conv1d` lost its middle dimension: [C, width] -> [C, 1, width].
- V heads were moved from grouped (V heads of K head 0, then of K head 1, ...) to tiled order (V head j of every
  K head, then j + 1). Rows are put back (exact on quantized blocks: a row is its own blocks) in the V rows of
  `attn_qkv` and `ssm_conv1d`, and the rows of `attn_gate`, `ssm_beta`, `ssm_alpha`, `ssm_a`, `ssm_dt`. The
  *columns* of `ssm_out` are permuted in a float tensor; a quantized one keeps its blocks (head groups of 128
  columns cannot move inside 256-weight super-blocks) and permutes its input instead (`QuantizedWeight.in_perm`).
- MTP layers appended as extra blocks (`nextn_predict_layers`) are skipped: the engine does not draft with them.
- the router renormalises its top-k (llama.cpp hard-codes norm_w for this architecture, as the engine does).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch
from torch import nn
from tqdm import tqdm

from engine.config import Config
from engine.gguf.reader import GGUFCheckpoint, GGUFTensor
from engine.loader import CheckpointError, meta_model
from engine.quant.formats import GGMLType
from engine.quant.weight import QuantizedExperts, QuantizedWeight, QuantTensor, replace_parameter

# GGUF tensor (without `blk.N.` and `.weight`) -> engine parameter under `model.layers.N.`.
GGUF_NAMES = {
    "attn_norm": "input_layernorm.weight",
    "post_attention_norm": "post_attention_layernorm.weight",
    "attn_q": "self_attn.q_proj.weight",
    "attn_k": "self_attn.k_proj.weight",
    "attn_v": "self_attn.v_proj.weight",
    "attn_output": "self_attn.o_proj.weight",
    "attn_q_norm": "self_attn.q_norm.weight",
    "attn_k_norm": "self_attn.k_norm.weight",
    "attn_gate": "linear_attn.in_proj_z.weight",
    "ssm_beta": "linear_attn.in_proj_b.weight",
    "ssm_alpha": "linear_attn.in_proj_a.weight",
    "ssm_a": "linear_attn.A_log",
    "ssm_dt": "linear_attn.dt_bias",
    "ssm_conv1d": "linear_attn.conv1d.weight",
    "ssm_norm": "linear_attn.norm.weight",
    "ssm_out": "linear_attn.out_proj.weight",
    "ffn_gate_inp": "mlp.gate.weight",
    "ffn_gate_inp_shexp": "mlp.shared_expert_gate.weight",
    "ffn_gate_shexp": "mlp.shared_expert.gate_proj.weight",
    "ffn_up_shexp": "mlp.shared_expert.up_proj.weight",
    "ffn_down_shexp": "mlp.shared_expert.down_proj.weight",
}
GLOBAL_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                "output.weight": "lm_head.weight"}  # fmt: skip
# Stored as w + 1 by the converter (the DeltaNet's gated norm `ssm_norm` is not).
PLUS_ONE_NORMS = ("attn_norm", "post_attention_norm", "attn_q_norm", "attn_k_norm", "output_norm")
EXPERT_PARTS = ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps", "ffn_gate_up_exps")


@dataclass
class LoadReport:
    skipped_mtp: int = 0  # tensors of the appended MTP (nextn) blocks
    quantized_bytes: int = 0  # kept in blocks
    float_bytes: int = 0  # copied into the model's float parameters


def v_head_order(num_k: int, per_k: int, head_dim: int) -> torch.Tensor:
    """Index i of the result = the stored (tiled) row holding grouped row i: grouped (k, j) <- tiled (j, k)."""
    return torch.arange(num_k * per_k * head_dim).reshape(per_k, num_k, head_dim).transpose(0, 1).reshape(-1)


def tiled_input_order(num_k: int, per_k: int, head_dim: int) -> torch.Tensor:
    """Stored (tiled) column c holds grouped input `result[c]` (for `QuantizedWeight.in_perm`)."""
    return torch.arange(num_k * per_k * head_dim).reshape(num_k, per_k, head_dim).transpose(0, 1).reshape(-1)


def _torch_data(tensor: GGUFTensor) -> torch.Tensor:
    array = tensor.data
    if isinstance(
        array, torch.Tensor
    ):  # made in memory (engine/testing/quant_recipe.py), already in torch order
        return array
    if tensor.kind == GGMLType.BF16:
        return torch.from_numpy(array.view("uint16")).view(torch.bfloat16).reshape(tensor.shape)
    data = torch.from_numpy(array)
    return data.reshape(tensor.shape) if tensor.kind in (GGMLType.F32, GGMLType.F16) else data


def _as_quant(tensor: GGUFTensor) -> QuantTensor:
    return QuantTensor(_torch_data(tensor), tensor.kind, tensor.shape[-1])


def _reorder_rows(qt: QuantTensor, order: torch.Tensor, start: int = 0) -> QuantTensor:
    """Rows start: put back in `order` (rows before `start` kept): exact for any type."""
    data = qt.data
    tail = data[start:].index_select(0, order)
    return QuantTensor(torch.cat([data[:start], tail]) if start else tail, qt.kind, qt.cols)


class _Builder:
    def __init__(self, model: nn.Module, config: Config, device: torch.device, dtype: torch.dtype) -> None:
        self.model, self.config, self.device, self.dtype = model, config, device, dtype
        self.modules = dict(model.named_modules())
        self.expected = {name for name, _ in model.named_parameters()}
        self.loaded: set[str] = set()
        self.float_tensors: dict[str, torch.Tensor] = {}
        self.experts: dict[int, dict[str, QuantTensor]] = {}
        self.report = LoadReport()
        per_k = config.linear_num_value_heads // config.linear_num_key_heads
        self.v_rows = v_head_order(config.linear_num_key_heads, per_k, config.linear_value_head_dim)
        self.v_heads = v_head_order(config.linear_num_key_heads, per_k, 1)
        self.v_inputs = tiled_input_order(config.linear_num_key_heads, per_k, config.linear_value_head_dim)

    def add(self, tensor: GGUFTensor) -> None:
        name = tensor.name
        if name in GLOBAL_NAMES:
            qt = _as_quant(tensor)
            if name == "output_norm.weight":
                qt = QuantTensor(qt.data.float() - 1, GGMLType.F32, qt.cols)
            self._place(GLOBAL_NAMES[name], qt, name)
            return
        parts = name.split(".")
        if parts[0] != "blk" or len(parts) < 3 or not parts[1].isdecimal():
            raise CheckpointError(
                f"unexpected tensor {name!r} in the GGUF file: not part of a qwen35moe model"
            )
        layer, base = int(parts[1]), parts[2]
        if layer >= self.config.num_hidden_layers:
            self.report.skipped_mtp += 1
            return
        prefix = f"model.layers.{layer}."
        full = self.config.layer_types[layer] == "full_attention"
        qt = _as_quant(tensor)
        if base in EXPERT_PARTS:
            self.experts.setdefault(layer, {})[base] = qt
            return
        if base == "attn_qkv":
            self._attn_qkv(prefix, qt, full, name)
            return
        if base in PLUS_ONE_NORMS:
            qt = QuantTensor(qt.data.float() - 1, GGMLType.F32, qt.cols)
        elif base in ("attn_gate",):
            qt = _reorder_rows(qt, self.v_rows)
        elif base in ("ssm_beta", "ssm_alpha"):
            qt = _reorder_rows(qt, self.v_heads)
        elif base in ("ssm_a", "ssm_dt"):
            values = qt.data.reshape(-1).float()[self.v_heads]
            if base == "ssm_a":
                values = (-values.double()).log().float()
            qt = QuantTensor(values, GGMLType.F32, values.numel())
        elif base == "ssm_conv1d":
            key_rows = 2 * self.config.linear_key_dim
            qt = _reorder_rows(qt, self.v_rows, start=key_rows)
            qt = QuantTensor(qt.data.unsqueeze(1), qt.kind, qt.cols)
        elif base == "ssm_out":
            if qt.is_float:
                qt = QuantTensor(qt.data.index_select(1, self.v_rows), qt.kind, qt.cols)
            else:
                self._place(prefix + GGUF_NAMES[base], qt, name, in_perm=self.v_inputs)
                return
        elif base == "ffn_gate_inp_shexp":
            qt = QuantTensor(qt.data.reshape(1, -1), qt.kind, qt.cols) if qt.is_float else qt
        if base not in GGUF_NAMES:
            raise CheckpointError(
                f"unexpected tensor {name!r} in the GGUF file: no qwen35moe parameter takes it"
            )
        self._place(prefix + GGUF_NAMES[base], qt, name)

    def _attn_qkv(self, prefix: str, qt: QuantTensor, full: bool, name: str) -> None:
        if not full:  # the DeltaNet's q|k|v (conv channels): V rows back to grouped order
            qt = _reorder_rows(qt, self.v_rows, start=2 * self.config.linear_key_dim)
            self._place(prefix + "linear_attn.in_proj_qkv.weight", qt, name)
            return
        c = self.config
        q_rows, kv_rows = 2 * c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
        bounds = [0, q_rows, q_rows + kv_rows, q_rows + 2 * kv_rows]
        for proj, lo, hi in zip(("q_proj", "k_proj", "v_proj"), bounds, bounds[1:], strict=False):
            self._place(f"{prefix}self_attn.{proj}.weight", qt.row_slice(lo, hi), name)

    def _place(self, param: str, qt: QuantTensor, source: str, in_perm: torch.Tensor | None = None) -> None:
        if param not in self.expected:
            raise CheckpointError(f"GGUF tensor {source!r} maps to {param!r}, which this model does not have")
        if param in self.loaded:
            raise CheckpointError(f"GGUF tensor {source!r}: {param!r} is given twice")
        module_name, _, attr = param.rpartition(".")
        target = getattr(self.modules[module_name], attr)
        rows_cols = (int(target.shape[0]), int(target.shape[-1])) if target.dim() > 1 else None
        if qt.is_float:
            if tuple(qt.data.shape) != tuple(target.shape):
                raise CheckpointError(
                    f"GGUF tensor {source!r} has shape {tuple(qt.data.shape)}, {param} needs {tuple(target.shape)}"
                )
            self.float_tensors[param] = qt.data
        else:
            if rows_cols != (qt.rows, qt.cols) or target.dim() != 2:
                raise CheckpointError(
                    f"GGUF tensor {source!r} ({qt.kind.name}) has shape {(qt.rows, qt.cols)}, {param} needs "
                    f"{tuple(target.shape)}"
                )
            weight = QuantizedWeight(
                [qt.to(self.device)], self.dtype, None if in_perm is None else in_perm.to(self.device)
            )
            replace_parameter(self.modules[module_name], attr, weight)
            self.report.quantized_bytes += qt.nbytes
        self.loaded.add(param)

    def place_experts(self) -> None:
        c = self.config
        for layer, parts in sorted(self.experts.items()):
            source = f"blk.{layer}"
            if "ffn_gate_up_exps" in parts:
                fused = parts.pop("ffn_gate_up_exps")
                inter = fused.rows // 2
                parts["ffn_gate_exps"] = QuantTensor(
                    fused.data[:, :inter].contiguous(), fused.kind, fused.cols
                )
                parts["ffn_up_exps"] = QuantTensor(fused.data[:, inter:].contiguous(), fused.kind, fused.cols)
            missing = [p for p in ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps") if p not in parts]
            if missing:
                raise CheckpointError(
                    f"the GGUF file lacks {', '.join(f'{source}.{m}.weight' for m in missing)}"
                )
            gate, up, down = parts["ffn_gate_exps"], parts["ffn_up_exps"], parts["ffn_down_exps"]
            shapes = [tuple(t.data.shape[:2]) + (t.cols,) for t in (gate, up, down)]
            want = [(c.num_experts, c.moe_intermediate_size, c.hidden_size)] * 2
            want.append((c.num_experts, c.hidden_size, c.moe_intermediate_size))
            if shapes != want:
                raise CheckpointError(
                    f"{source} expert tensors have shapes {shapes}, the config needs {want}"
                )
            base = f"model.layers.{layer}.mlp.experts"
            experts_module = self.modules[base]
            if gate.is_float and up.is_float and down.is_float:
                self.float_tensors[f"{base}.gate_up_proj"] = torch.cat([gate.data, up.data], dim=1)
                self.float_tensors[f"{base}.down_proj"] = down.data
            else:
                experts_module.quantized = QuantizedExperts(
                    gate.to(self.device), up.to(self.device), down.to(self.device)
                )
                replace_parameter(experts_module, "gate_up_proj", None)
                replace_parameter(experts_module, "down_proj", None)
                self.report.quantized_bytes += gate.nbytes + up.nbytes + down.nbytes
            self.loaded.update({f"{base}.gate_up_proj", f"{base}.down_proj"})

    def copy_floats(self) -> None:
        params = dict(self.model.named_parameters(remove_duplicate=False))
        with torch.no_grad():
            for name, data in self.float_tensors.items():
                params[name].copy_(data)
                self.report.float_bytes += params[name].numel() * params[name].element_size()

    def check_complete(self) -> None:
        tied = {"lm_head.weight"} if self.config.tie_word_embeddings else set()
        missing = sorted(self.expected - self.loaded - tied)
        if missing:
            shown = ", ".join(missing[:8]) + (" ..." if len(missing) > 8 else "")
            raise CheckpointError(f"the GGUF file lacks {len(missing)} tensors the model needs: {shown}")


def build_gguf_model(
    checkpoint: GGUFCheckpoint,
    config: Config,
    device: torch.device,
    dtype: torch.dtype,
    progress: bool = True,
) -> tuple[nn.Module, LoadReport]:
    """The model on `device`: quantized tensors as `QuantizedWeight` / `QuantizedExperts` (their blocks moved to
    the device as stored; on a CPU the memory-mapped file itself), float tensors copied into parameters of
    `dtype` (A_log, dt_bias and the DeltaNet norm in fp32, as the safetensors loader keeps them)."""
    config.tie_word_embeddings = "output.weight" not in checkpoint.tensors
    model = meta_model(config, dtype)
    builder = _Builder(model, config, device, dtype)
    tensors = sorted(checkpoint.tensors.values(), key=lambda t: t.name)
    for tensor in tqdm(tensors, desc="loading GGUF", unit="tensor", file=sys.stderr, disable=not progress):
        builder.add(tensor)
    builder.place_experts()
    builder.check_complete()
    embed = model.model.embed_tokens.weight
    if config.tie_word_embeddings and isinstance(embed, QuantizedWeight):
        replace_parameter(model.lm_head, "weight", embed)
    model.to_empty(device=device)  # allocates the float parameters only: the quantized ones were taken out
    if config.tie_word_embeddings and not isinstance(embed, QuantizedWeight):
        model.lm_head.weight = model.model.embed_tokens.weight
    builder.copy_floats()
    model.requires_grad_(False).fuse_weights()
    return model.eval(), builder.report
