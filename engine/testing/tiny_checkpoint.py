"""The tests' and benchmarks' name for the tiny random checkpoint maker, which lives in `engine/tiny_model.py` (it
ships with the engine: `--model tiny` builds it for a user who has no weights).

    python -m engine.testing.tiny_checkpoint OUT [--multimodal] [--per-expert] [--sharded] [--seed N]
"""

from __future__ import annotations

from engine.tiny_model import TINY_TEXT_CONFIG, build_tokenizer, main, make_tiny_checkpoint, save_tokenizer

__all__ = ["TINY_TEXT_CONFIG", "build_tokenizer", "main", "make_tiny_checkpoint", "save_tokenizer"]

if __name__ == "__main__":
    raise SystemExit(main(prog="python -m engine.testing.tiny_checkpoint"))
