"""Presets: named bundles of perturbations (`presets: [flaky, {name: brownout, probability: 0.5}]`).

Each preset is a small model of the parameters a world may override, and expands into ordinary perturbations
named `<preset>/<part>`, so they are decided, recorded and reported like hand-written ones.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter

from aw_mcp.core.strict_model import StrictSpecModel
from aw_mcp.spec.faults import Perturbation, Probability


class _Preset(StrictSpecModel):
    tools: str = "*"  # glob on tool names the preset applies to

    def expand(self) -> list[Perturbation]:
        raise NotImplementedError

    def _make(self, part: str, fault: dict[str, Any], schedule: dict[str, Any]) -> Perturbation:
        name = getattr(self, "name")  # noqa: B009 - each subclass declares its own literal `name`
        return Perturbation.model_validate(
            {"name": f"{name}/{part}", "match": {"tool": self.tools}, "fault": fault, "schedule": schedule}
        )


class Flaky(_Preset):
    """Random transient failures: 503s, timeouts and rate limits."""

    name: Literal["flaky"]
    probability: Probability = 0.1

    def expand(self) -> list[Perturbation]:
        p = self.probability
        return [
            self._make("unavailable", {"kind": "error", "status": 503}, {"mode": "random", "probability": p}),
            self._make(
                "timeout", {"kind": "error", "timeout_s": 30}, {"mode": "random", "probability": p / 2}
            ),
            self._make(
                "rate-limited",
                {"kind": "error", "status": 429, "retry_after_s": 10},
                {"mode": "random", "probability": p / 2},
            ),
        ]


class Brownout(_Preset):
    """A struggling upstream: latency that grows with load and a circuit breaker that trips on failures."""

    name: Literal["brownout"]
    probability: Probability = 0.2
    latency_ms: float = Field(default=800.0, gt=0)
    failures: int = Field(default=3, ge=1)
    cooldown: int = Field(default=5, ge=1)

    def expand(self) -> list[Perturbation]:
        return [
            self._make(
                "slow",
                {"kind": "latency", "median_ms": self.latency_ms, "sigma": 0.5},
                {"mode": "degrade", "start": 1.0, "step": 0.1, "max": 4.0},
            ),
            self._make(
                "breaker",
                {"kind": "error", "status": 503, "retry_after_s": 5},
                {
                    "mode": "circuit_breaker",
                    "failures": self.failures,
                    "cooldown": self.cooldown,
                    "probability": self.probability,
                },
            ),
        ]


class SlowNetwork(_Preset):
    """A slow, long-tailed network: lognormal latency on every call and the occasional gateway timeout."""

    name: Literal["slow_network"]
    median_ms: float = Field(default=400.0, gt=0)
    sigma: float = Field(default=0.6, ge=0)
    jitter_ms: float = Field(default=50.0, ge=0)
    timeout_probability: Probability = 0.02

    def expand(self) -> list[Perturbation]:
        parts = [
            self._make(
                "latency",
                {
                    "kind": "latency",
                    "median_ms": self.median_ms,
                    "sigma": self.sigma,
                    "jitter_ms": self.jitter_ms,
                },
                {"mode": "always"},
            )
        ]
        if self.timeout_probability > 0:
            parts.append(
                self._make(
                    "gateway-timeout",
                    {"kind": "error", "status": 504},
                    {"mode": "random", "probability": self.timeout_probability},
                )
            )
        return parts


class Adversarial(_Preset):
    """Hostile content: prompt injections, stale reads and plausible-but-wrong details."""

    name: Literal["adversarial"]
    probability: Probability = 0.2
    slot: str = "ignore_previous"
    text: str | None = None

    def expand(self) -> list[Perturbation]:
        p = self.probability
        inject: dict[str, Any] = {"kind": "inject", "slot": self.slot}
        if self.text is not None:
            inject["text"] = self.text
        return [
            self._make("injection", inject, {"mode": "random", "probability": p}),
            self._make("stale", {"kind": "stale"}, {"mode": "random", "probability": p / 2}),
            self._make(
                "wrong-detail",
                {
                    "kind": "wrong_content",
                    "instruction": "Change exactly one plausible detail of this result (a date, an amount, a "
                    "count or a status) to a wrong but believable value; keep everything else correct.",
                },
                {"mode": "random", "probability": p / 2},
            ),
        ]


PresetRef = Annotated[Flaky | Brownout | SlowNetwork | Adversarial, Field(discriminator="name")]
PRESET_NAMES = ("flaky", "brownout", "slow_network", "adversarial")
_ADAPTER: TypeAdapter[Any] = TypeAdapter(PresetRef)


def normalize_preset(data: Any) -> Any:
    """`flaky` → `{name: flaky}` so the discriminated union sees a mapping."""
    return {"name": data} if isinstance(data, str) else data


def parse_preset(data: Any) -> Flaky | Brownout | SlowNetwork | Adversarial:
    return _ADAPTER.validate_python(normalize_preset(data))


def expand_presets(presets: list[Any]) -> list[Perturbation]:
    return [p for preset in presets for p in preset.expand()]
