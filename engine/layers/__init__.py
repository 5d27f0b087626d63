"""Building blocks of the Qwen3.5-MoE decoder."""
