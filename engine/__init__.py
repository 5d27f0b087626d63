"""Our inference engine for Qwen3.5-MoE (Qwen-AgentWorld-35B-A3B): `from engine import LLM, SamplingParams`."""

from engine.llm import LLM, CompletionOutput, RequestOutput, StreamDelta
from engine.options import EngineOptions
from engine.sampling import SamplingParams

__all__ = ["LLM", "CompletionOutput", "EngineOptions", "RequestOutput", "SamplingParams", "StreamDelta"]
