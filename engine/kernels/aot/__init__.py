"""Ahead-of-time compile check: every Triton kernel the engine can launch, compiled for the real cards on a machine
without a GPU, and judged against them.

- `scenarios`: the real model (Qwen3.5-35B-A3B widths, bf16 and every GGUF type) on the meta device, stepped
  through decode (batch 1..32, eager and CUDA-graph steps, short and 32k contexts) and prefill (2^k and 2^k + 1
  tokens up to a 2,048-token chunk, a chunk ending a 32k context, a mixed step).
- `capture`: the launches those steps make through the engine's own wrappers, intercepted at `JITFunction.run`
  and bound for `GPUTarget("cuda", arch, 32)` as Triton's runtime would bind them; identical compiles are one.
- `compile`: each distinct kernel through `triton.compile`: shared memory, registers, spills (ptxas -v), global
  loads by width (PTX).
- `check`: the judgement (compiles, fits the card's shared memory, no spill on a decode path, every launch site
  reached), `report`: the table. `coverage`: the launch sites in the engine's source.

Run `python -m engine.kernels.aot [--arch 90 89 86 120] [--table FILE]`.
"""
