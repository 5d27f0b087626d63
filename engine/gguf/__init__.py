"""GGUF checkpoints (llama.cpp's format, e.g. unsloth/Qwen-AgentWorld-35B-A3B-GGUF): read, resolved from the hub,
turned into the engine's config, tokenizer and model with the weights kept quantized."""
