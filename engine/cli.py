"""`engine serve --model PATH [--port N] ...`: run the OpenAI-compatible server (also `python -m engine`)."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from engine.loader import DEFAULT_MODEL, CheckpointError


class _Parser(argparse.ArgumentParser):
    """A bad flag is one line naming --help, not the usage block (as `aw-mcp` does; engine/ never imports aw_mcp)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="aw-mcp engine", description="Our inference engine for Qwen3.5-MoE models.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    serve = commands.add_parser("serve", help="serve an OpenAI-compatible /v1/chat/completions endpoint")
    serve.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help="checkpoint folder or hub id, a GGUF file, or a GGUF hub form like "
        "unsloth/Qwen-AgentWorld-35B-A3B-GGUF:Q4_K_M (default: %(default)s)",
    )
    serve.add_argument(
        "--tokenizer", default=None, help="HF tokenizer folder or hub id (default: the checkpoint's own)"
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--device", default=None, help="cuda, cuda:1, cpu (default: cuda when available)")
    serve.add_argument(
        "--dtype", default=None, help="bfloat16, float16, float32 (default: bf16 on GPU, fp32 on CPU)"
    )
    serve.add_argument(
        "--hf-compat-dtypes",
        action="store_true",
        help="round A_log, dt_bias and the DeltaNet norm to the model dtype as transformers does",
    )
    serve.add_argument("--max-model-len", type=int, default=None, help="longest prompt + answer in tokens")
    serve.add_argument("--max-num-seqs", type=int, default=8, help="cache slots (concurrent sequences)")
    serve.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=None,
        help="tokens per engine step; long prompts are prefilled in chunks of this (default: 2048 GPU, 512 CPU)",
    )
    serve.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="reuse the cached state of a prompt's longest known prefix (default: on)",
    )
    serve.add_argument(
        "--prefix-cache-memory-gb",
        type=float,
        default=None,
        help="memory for prefix snapshots (default: half the free GPU memory after the slots; 2 on a CPU)",
    )
    serve.add_argument("--served-model-name", default=None, help="model id reported by the API")
    serve.add_argument(
        "--generation-config",
        default="auto",
        help="sampling defaults for requests that leave them unset, as vLLM's flag: auto (the checkpoint's "
        "generation_config.json or GGUF general.sampling.* metadata), vllm (none), or a folder holding a "
        "generation_config.json (default: %(default)s)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        from engine.llm import LLM
        from engine.server import serve

        try:
            llm = LLM(
                args.model,
                device=args.device,
                dtype=args.dtype,
                hf_compat_dtypes=args.hf_compat_dtypes,
                max_model_len=args.max_model_len,
                max_num_seqs=args.max_num_seqs,
                max_num_batched_tokens=args.max_num_batched_tokens,
                enable_prefix_caching=args.enable_prefix_caching,
                prefix_cache_memory_gb=args.prefix_cache_memory_gb,
                tokenizer=args.tokenizer,
                generation_config=args.generation_config,
            )
        except (CheckpointError, FileNotFoundError, ValueError, MemoryError) as exc:
            print(f"engine: cannot load the model: {exc}", file=sys.stderr)
            return 2
        print(f"engine: {llm.memory_plan().render()}", file=sys.stderr)
        print(f"engine: {llm.sampling_defaults.describe()}", file=sys.stderr)
        serve(llm, host=args.host, port=args.port, served_model_name=args.served_model_name)
        return 0
    return 1
