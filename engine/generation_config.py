"""The checkpoint's recommended sampling settings, applied where a request leaves them unset, as vLLM does.

vLLM, with its default `--generation-config auto`, reads the checkpoint's `generation_config.json` (through
transformers' `GenerationConfig.to_diff_dict()`), keeps `repetition_penalty`, `temperature`, `top_k`, `top_p`,
`min_p` and `max_new_tokens` (renamed `max_tokens`) where they are set, logs "Default sampling parameters have been
overridden by the model's Hugging Face generation config recommended from the model creator ..." and, per chat
request, takes each of the first five from the request when it is given, else from the checkpoint, else its neutral
value (`ChatCompletionRequest.to_sampling_params`); `max_tokens` caps every request, given or not
(`get_max_tokens`). Its offline `LLM.generate` uses them when called without SamplingParams. Nothing else in the
file is taken: not `do_sample` (a temperature is used even beside `do_sample: false`), not presence or frequency
penalties. `--generation-config vllm` turns all of this off; a folder reads that folder's file instead.

We read the JSON ourselves (same fields): with transformers 5 `to_diff_dict` keeps every value the file sets. (With
transformers 4 it also dropped values equal to its own defaults, so a file's `top_k: 50` was lost there.)

A GGUF has no generation_config.json; llama.cpp's converter copies the recommended settings into `general.sampling.*`
metadata (gguf-py's `Keys.General.SAMPLING_*`), which llama.cpp applies as its defaults. We take the ones with a
vLLM counterpart: top_k, top_p, min_p, temp and penalty_repeat (llama.cpp applies that one to the last
`penalty_last_n` tokens only; we, as vLLM, to the whole prompt and output).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# vLLM's fields, in its order, with the value a request gets when neither it nor the checkpoint sets one.
NEUTRAL: dict[str, float | int] = {
    "repetition_penalty": 1.0,
    "temperature": 1.0,
    "top_k": 0,  # all tokens
    "top_p": 1.0,
    "min_p": 0.0,
}
FIELDS: tuple[str, ...] = (*NEUTRAL, "max_tokens")
_INTEGER_FIELDS = ("top_k", "max_tokens")
# generation_config.json's names for them (HF's `max_new_tokens` is vLLM's `max_tokens`).
_HF_NAMES: dict[str, str] = {**{name: name for name in NEUTRAL}, "max_new_tokens": "max_tokens"}
GGUF_KEYS: dict[str, str] = {
    "general.sampling.top_k": "top_k",
    "general.sampling.top_p": "top_p",
    "general.sampling.min_p": "min_p",
    "general.sampling.temp": "temperature",
    "general.sampling.penalty_repeat": "repetition_penalty",
}
AUTO = "auto"  # the checkpoint's own settings (vLLM's default)
NONE = "vllm"  # vLLM's spelling for "use none": neutral values only


@dataclass(frozen=True)
class SamplingDefaults:
    """The checkpoint's settings (vLLM's field names; only those it sets) and where they were read."""

    values: Mapping[str, float | int] = field(default_factory=dict)
    source: str = "none"

    def apply(
        self,
        *,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        min_p: float | None = None,
        repetition_penalty: float | None = None,
    ) -> dict[str, float | int]:
        """Each sampling field from the request when it sets it, else the checkpoint's, else the neutral one."""
        given = {
            "repetition_penalty": repetition_penalty,
            "temperature": temperature,
            "top_k": top_k,
            "top_p": top_p,
            "min_p": min_p,
        }
        return {
            name: value if value is not None else self.values.get(name, NEUTRAL[name])
            for name, value in given.items()
        }

    def max_tokens(self, requested: int | None, fallback: int | None) -> int | None:
        """The request's token limit (`fallback` when it sets none), capped by the checkpoint's `max_new_tokens`."""
        cap = self.values.get("max_tokens")
        if cap is None:
            return requested if requested is not None else fallback
        return int(cap) if requested is None else min(requested, int(cap))

    def as_dict(self) -> dict[str, float | int]:
        return dict(self.values)

    def describe(self) -> str:
        """One line for the start-up log: which defaults requests get."""
        if not self.values:
            return (
                f"no default sampling parameters ({self.source}): a request that sets none samples at "
                "temperature 1.0 from all tokens"
            )
        return (
            f"default sampling parameters from {self.source}: {self.as_dict()} (used where a request leaves "
            "them unset, as vLLM's --generation-config auto does)"
        )


def _number(name: str, value: Any) -> float | int | None:
    """The value as the field's type; None for what is not a number (bools included: JSON true is not a 1)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if name in _INTEGER_FIELDS else float(value)


def from_generation_config(folder: Path) -> SamplingDefaults:
    """The sampling fields a folder's generation_config.json sets (none when there is no such file)."""
    path = folder / "generation_config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return SamplingDefaults(source=f"no generation_config.json in {folder}")
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from exc
    if not isinstance(config, dict):
        raise ValueError(f"{path}: expected a JSON object")
    values = {}
    for hf_name, name in _HF_NAMES.items():
        number = _number(name, config.get(hf_name))
        if number is not None:
            values[name] = number
    return SamplingDefaults(values, f"{path}")


def _shortest_f32(value: float) -> float:
    """A value stored as float32 (GGUF's f32 keys) back as the shortest decimal that rounds to it: 0.95, not
    0.949999988079071."""
    return float(np.format_float_positional(np.float32(value), unique=True))


def from_gguf_metadata(metadata: Mapping[str, Any], where: str = "the GGUF") -> SamplingDefaults:
    """The `general.sampling.*` settings a GGUF carries (none when it has none)."""
    values = {}
    for key, name in GGUF_KEYS.items():
        number = _number(name, metadata.get(key))
        if number is not None:
            values[name] = _shortest_f32(number) if isinstance(number, float) else number
    if not values:
        return SamplingDefaults(source=f"no general.sampling.* metadata in {where}")
    return SamplingDefaults(values, f"general.sampling.* metadata of {where}")


def generation_config_override(choice: str | None) -> SamplingDefaults | None:
    """`choice` as vLLM's --generation-config: None for "auto" (or None; the checkpoint's own settings apply), no
    defaults for "vllm", else the generation_config.json of the folder it names."""
    if choice in (None, AUTO):
        return None
    if choice == NONE:
        return SamplingDefaults(source="--generation-config vllm")
    folder = Path(choice).expanduser()
    if not folder.is_dir():
        raise ValueError(
            f"generation config {choice!r}: expected 'auto', 'vllm' or a folder holding generation_config.json"
        )
    return from_generation_config(folder)
