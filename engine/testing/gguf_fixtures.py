"""Regenerate the GGUF fixtures (`tests/fixtures/gguf/`): small GGUF files written by llama.cpp itself, and
llama.cpp's reference logits and token ids for them, so the test suite and CI never need llama.cpp.

Run it in a venv that has llama-cpp-python (built from source, so its vendored llama.cpp tree is at hand) plus
torch, transformers, safetensors, tokenizers, sentencepiece, the vendored gguf-py and prometheus_client (importing
the `engine` package loads `engine.llm`), with this repository on the path (e.g. the venv `/work/llama/venv`):

    PYTHONPATH=/work/main /work/llama/venv/bin/python -m engine.testing.gguf_fixtures tests/fixtures/gguf \\
        [--llama-cpp-dir /work/llama/llama_cpp_python-0.3.36/vendor/llama.cpp] [--engine-python .venv/bin/python]

What it does:
  1. `make_tiny_checkpoint` a "small" Qwen3.5-MoE checkpoint (SMALL_CONFIG, SEED) whose matrices all have rows
     of a multiple of 256 (K-quants' block; otherwise llama.cpp silently falls back to other types), with
     2 V heads per K head in the linear-attention layers (so the converter's V-head reorder matters).
  2. Converts it with llama.cpp's `convert_hf_to_gguf.py --outtype f32 --no-mtp` (in a subprocess; the tiny BPE
     tokenizer's pre-tokenizer hash is unknown, so `get_vocab_base_pre` is patched there to answer "qwen35", whose
     split the tiny tokenizer uses).
  3. Quantizes the F32 file with `llama_model_quantize` to Q8_0, Q4_K_M, Q5_K_M, Q6_K, IQ4_XS and MXFP4_MOE, and
     each of these back to an all-F32 "dequantized twin" (in a temp dir, not written out).
  4. Reads every file's tensor types (gguf.GGUFReader) and fails on a type outside EXPECTED_TYPES (a fallback).
  5. Validates the oracle first: the project's engine (run by `--engine-python`, the project venv) on the HF
     checkpoint vs llama.cpp on the F32 GGUF (max relative difference and top-1 agreement); stops if they differ.
     Then llama.cpp's logits (F32 KV cache) for TOKEN_TEXT on the F32 file, on every dequantized twin ("logits")
     and on every quantized file itself ("quantized_logits": llama.cpp also quantizes the activations there).
  6. Tokenizes TOKENIZE_TEXTS with llama.cpp (`special=True`, no BOS) and with the HF tokenizer.
  7. Writes to OUT_DIR: small-F32.gguf, small-{Q8_0,Q4_K_M,Q5_K_M,Q6_K,IQ4_XS,MXFP4_MOE}.gguf and reference.json
     (llama.cpp version, config overrides and seed, token_ids, logits as base64 float32 little-endian [T, vocab],
     tensor types, tokenization cases, engine-vs-llama.cpp agreement), and prints the sizes.
"""

from __future__ import annotations

import argparse
import base64
import collections
import ctypes
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_LLAMA_CPP_DIR = Path("/work/llama/llama_cpp_python-0.3.36/vendor/llama.cpp")
# Seed 3 of 0..15 has the widest margins on TOKEN_TEXT (router 2nd-vs-3rd expert >= 0.034, logit top-1 vs top-2
# >= 0.02): a random model amplifies small weight changes ~50x, and a near-tie in routing swaps a whole expert.
SEED = 3
# Every matrix row (ggml ne0) is 256: hidden, heads * head_dim, linear K/V dims, expert and shared intermediates.
SMALL_CONFIG: dict[str, Any] = dict(
    hidden_size=256,
    num_hidden_layers=2,
    layer_types=["linear_attention", "full_attention"],
    full_attention_interval=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    linear_num_key_heads=2,
    linear_key_head_dim=64,
    linear_num_value_heads=4,
    linear_value_head_dim=64,
    num_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=256,
    shared_expert_intermediate_size=256,
    # The tiny default's rope (theta, partial factor 0.25, interleaved MRoPE) with the sections scaled to the
    # 16 rotary dims of head_dim 64 (they sum to rotary_dim / 2, like [11, 11, 10] for the real 64).
    rope_parameters={
        "rope_type": "default",
        "rope_theta": 10_000_000.0,
        "partial_rotary_factor": 0.25,
        "mrope_section": [4, 2, 2],
        "mrope_interleaved": True,
    },
    # No MTP layers: the GGUF is converted with --no-mtp (the checkpoint's `mtp.*` stub is dropped).
    mtp_num_hidden_layers=0,
)
QUANT_FTYPES = ["Q8_0", "Q4_K_M", "Q5_K_M", "Q6_K", "IQ4_XS", "MXFP4_MOE"]
EXPECTED_TYPES = {"F32", "F16", "BF16", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS", "MXFP4"}
# The types each file must contain (the quantization actually happened, no fallback).
REQUIRED_TYPES = {
    "Q8_0": {"Q8_0"},
    "Q4_K_M": {"Q4_K", "Q6_K"},
    "Q5_K_M": {"Q5_K", "Q6_K"},
    "Q6_K": {"Q6_K"},
    "IQ4_XS": {"IQ4_XS"},
    "MXFP4_MOE": {"MXFP4", "Q8_0"},
}
TOKEN_TEXT = "<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n<|im_start|>assistant\n<think>\n"
TOKENIZE_TEXTS = [
    "<|im_start|>user\nhi<|im_end|>\n",
    "<think>\nLet me think.\n</think>\n\nThe answer.",
    "a  b   c    d     e",
    "\tindented\t\ttabs\t",
    "line one\n\nline two\n\n\n  line three\r\n",
    "12345 and 3.14159 and 1,000,000",
    "é 中文 😀",
    "café naïve Ωmega — “quotes” ½",
    'Action: {"name": "read_file", "arguments": {"path": "/tmp/notes.txt"}}',
    "def main():\n    print('hello world')  # it's\n    return 0\n",
    "I've been told he's there, 'RE you sure? We'Ve",
]
_CONVERT_BOOTSTRAP = """
import sys
sys.path.insert(0, {llama_dir!r})
sys.argv = ["convert_hf_to_gguf.py"] + {argv!r}
import convert_hf_to_gguf
from conversion.base import TextModel
TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen35"  # the tiny BPE's hash is not in llama.cpp's table
convert_hf_to_gguf.main()
"""
_ENGINE_LOGITS = """
import sys, numpy as np
from engine.llm import LLM
llm = LLM(sys.argv[1], device="cpu", dtype="float32", progress=False)
try:
    ids = [int(t) for t in sys.argv[3].split(",")]
    np.save(sys.argv[2], llm.logits(ids).float().numpy())
finally:
    llm.shutdown()
"""


def log(*parts: object) -> None:
    print(*parts, flush=True)


def make_checkpoint(path: Path) -> Path:
    from engine.testing.tiny_checkpoint import make_tiny_checkpoint

    return make_tiny_checkpoint(path, seed=SEED, **SMALL_CONFIG)


def convert(checkpoint: Path, out: Path, llama_dir: Path) -> None:
    argv = [str(checkpoint), "--outtype", "f32", "--no-mtp", "--outfile", str(out)]
    code = _CONVERT_BOOTSTRAP.format(llama_dir=str(llama_dir), argv=argv)
    proc = subprocess.run([sys.executable, "-c", code], cwd=llama_dir, capture_output=True, text=True)
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError(f"convert_hf_to_gguf failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")


def quantize(src: Path, dst: Path, ftype_name: str, *, requantize: bool = False) -> None:
    """llama.cpp's `llama_model_quantize`; `ftype_name` is a LLAMA_FTYPE_* suffix ("ALL_F32" for the twins)."""
    import llama_cpp

    llama_cpp.llama_backend_init()
    attr = "LLAMA_FTYPE_ALL_F32" if ftype_name == "ALL_F32" else f"LLAMA_FTYPE_MOSTLY_{ftype_name}"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, attr)
    params.nthread = 2
    params.allow_requantize = requantize
    if ftype_name == "ALL_F32":
        params.pure = True  # every tensor to F32, no per-tensor type rules
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0 or not dst.exists():
        raise RuntimeError(f"llama_model_quantize {src.name} -> {dst.name} ({ftype_name}) failed: {rc}")


def tensor_info(path: Path) -> list[tuple[str, str, list[int]]]:
    """(name, type, ggml ne) of every tensor of a GGUF file."""
    import gguf

    reader = gguf.GGUFReader(path)
    return [(t.name, t.tensor_type.name, [int(n) for n in t.shape]) for t in reader.tensors]


def twin_vs_gguf_py(quantized: Path, twin: Path) -> float:
    """max |llama.cpp's dequantized twin - gguf-py's numpy dequantization| over every tensor of the file."""
    import gguf

    twin_tensors = {t.name: t for t in gguf.GGUFReader(twin).tensors}
    worst = 0.0
    for t in gguf.GGUFReader(quantized).tensors:
        mine = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
        theirs = np.asarray(twin_tensors[t.name].data, dtype=np.float32).reshape(-1)
        worst = max(worst, float(np.abs(mine - theirs).max()))
    return worst


def type_counts(path: Path) -> dict[str, int]:
    return dict(sorted(collections.Counter(t for _, t, _ in tensor_info(path)).items()))


def llama_logits(path: Path, ids: list[int]) -> np.ndarray:
    """llama.cpp's float32 logits [T, vocab] of every position (F32 KV cache, 2 threads, one batch)."""
    import llama_cpp

    llm = llama_cpp.Llama(
        model_path=str(path),
        n_ctx=256,
        n_batch=256,
        n_ubatch=256,
        logits_all=True,
        n_threads=2,
        n_threads_batch=2,
        type_k=llama_cpp.GGML_TYPE_F32,
        type_v=llama_cpp.GGML_TYPE_F32,
        verbose=False,
    )
    try:
        llm.eval(ids)
        return np.array(llm.scores[: len(ids)], dtype=np.float32, copy=True)
    finally:
        llm.close()


def llama_tokenize(path: Path, texts: list[str]) -> list[list[int]]:
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(path), n_ctx=256, vocab_only=True, verbose=False)
    try:
        return [list(llm.tokenize(t.encode("utf-8"), add_bos=False, special=True)) for t in texts]
    finally:
        llm.close()


def engine_logits(checkpoint: Path, ids: list[int], engine_python: Path, tmp: Path) -> np.ndarray:
    """The project's engine (fp32, CPU) on the HF checkpoint, in the project venv."""
    out = tmp / "engine_logits.npy"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    cmd = [str(engine_python), "-c", _ENGINE_LOGITS, str(checkpoint), str(out), ",".join(map(str, ids))]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"engine logits failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return np.load(out)


def compare(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """max |a - b| / max |b|, the fraction of positions whose argmax agrees and ||a - b|| / ||b|| (b is the
    reference)."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    max_rel = float(np.abs(a - b).max() / np.abs(b).max())
    top1 = float((a.argmax(-1) == b.argmax(-1)).mean())
    rel_rms = float(np.linalg.norm(a - b) / np.linalg.norm(b))
    return {"max_rel": max_rel, "top1": top1, "rel_rms": rel_rms}


def encode_logits(x: np.ndarray) -> dict[str, Any]:
    x = np.ascontiguousarray(x, dtype="<f4")
    return {"shape": list(x.shape), "dtype": "float32-le", "values": base64.b64encode(x.tobytes()).decode()}


def check_rows(info: list[tuple[str, str, list[int]]]) -> list[str]:
    """Tensors whose row length (ne0) is not a multiple of 256, marked when llama.cpp would quantize them."""
    problems = []
    for name, _, ne in info:
        if ne[0] % 256:
            kind = "2D+" if len(ne) >= 2 else "1D"
            problems.append(f"{name} ne={ne} ({kind})")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m engine.testing.gguf_fixtures", description=__doc__.split("\n")[0]
    )
    parser.add_argument("out", type=Path)
    parser.add_argument(
        "--llama-cpp-dir",
        type=Path,
        default=Path(os.environ.get("LLAMA_CPP_DIR", DEFAULT_LLAMA_CPP_DIR)),
        help="llama.cpp source tree with convert_hf_to_gguf.py (the one llama-cpp-python was built from)",
    )
    parser.add_argument(
        "--engine-python",
        type=Path,
        default=REPO_ROOT / ".venv" / "bin" / "python",
        help="the project venv's python, to run the engine for the oracle check",
    )
    args = parser.parse_args(argv)

    import llama_cpp
    from transformers import AutoTokenizer

    out_dir: Path = args.out.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gguf_fixtures_") as tmp_name:
        tmp = Path(tmp_name)
        checkpoint = make_checkpoint(tmp / "small")
        tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
        ids = list(tokenizer.encode(TOKEN_TEXT, add_special_tokens=False))
        log(f"checkpoint: {checkpoint} ({len(ids)} tokens)")

        # 2. llama.cpp's converter.
        f32 = out_dir / "small-F32.gguf"
        convert(checkpoint, f32, args.llama_cpp_dir)
        info = tensor_info(f32)
        odd = check_rows(info)
        log(f"F32 GGUF: {len(info)} tensors; rows not a multiple of 256: {odd or 'none'}")

        # 5a. The oracle check before anything else: the engine vs llama.cpp on the F32 GGUF.
        ref_f32 = llama_logits(f32, ids)
        mine = engine_logits(checkpoint, ids, args.engine_python, tmp)
        if mine.shape != ref_f32.shape:
            raise SystemExit(f"engine logits {mine.shape} vs llama.cpp {ref_f32.shape}")
        engine_vs_llama = compare(mine, ref_f32)
        log(f"engine vs llama.cpp (F32 GGUF): {engine_vs_llama}")
        if engine_vs_llama["max_rel"] > 1e-3 or engine_vs_llama["top1"] < 1.0:
            raise SystemExit(
                f"the engine and llama.cpp disagree on the F32 GGUF: {engine_vs_llama}; stopping"
            )

        # 3. Quantized files and their dequantized twins.
        files = {"small-F32.gguf": f32}
        twins: dict[str, Path] = {}
        for ftype in QUANT_FTYPES:
            path = out_dir / f"small-{ftype}.gguf"
            quantize(f32, path, ftype)
            twin = tmp / f"small-{ftype}-dequantized-F32.gguf"
            quantize(path, twin, "ALL_F32", requantize=True)
            files[path.name] = path
            twins[path.name] = twin

        # 4. Tensor types.
        tensor_types = {name: type_counts(path) for name, path in files.items()}
        tensors = {name: {n: t for n, t, _ in tensor_info(path)} for name, path in files.items()}
        problems = []
        for name, counts in tensor_types.items():
            log(f"{name}: {counts}")
            if unexpected := set(counts) - EXPECTED_TYPES:
                problems.append(f"{name} has unexpected types {sorted(unexpected)} (a fallback)")
            ftype = name.removeprefix("small-").removesuffix(".gguf")
            if missing := REQUIRED_TYPES.get(ftype, set()) - set(counts):
                problems.append(f"{name} lacks {sorted(missing)}")
        for name, twin in twins.items():
            if set(type_counts(twin)) != {"F32"}:
                problems.append(f"the dequantized twin of {name} is not all F32: {type_counts(twin)}")
            elif (diff := twin_vs_gguf_py(files[name], twin)) != 0.0:
                problems.append(f"gguf-py's dequantization of {name} differs from llama.cpp's by {diff}")
        if problems:
            raise SystemExit("tensor types:\n  " + "\n  ".join(problems))

        log("dequantized twins: all F32, equal to gguf-py's numpy dequantization")

        # 5b. Reference logits.
        logits = {"small-F32.gguf": {"reference": "f32", **encode_logits(ref_f32)}}
        quantized_logits = {}
        agreement = {}
        for name, path in files.items():
            if name == "small-F32.gguf":
                continue
            twin_logits = llama_logits(twins[name], ids)
            own_logits = llama_logits(path, ids)
            logits[name] = {"reference": "dequantized_twin", **encode_logits(twin_logits)}
            quantized_logits[name] = {"reference": "quantized", **encode_logits(own_logits)}
            agreement[name] = {
                "quantized_vs_twin": compare(own_logits, twin_logits),
                "twin_vs_f32": compare(twin_logits, ref_f32),
            }
            log(f"{name}: {agreement[name]}")

        # 6. Tokenization.
        llama_ids = llama_tokenize(f32, TOKENIZE_TEXTS)
        tokenization = []
        for text, lids in zip(TOKENIZE_TEXTS, llama_ids, strict=True):
            hf_ids = list(tokenizer.encode(text, add_special_tokens=False))
            tokenization.append({"text": text, "ids": lids, "hf_ids": hf_ids, "agree": lids == hf_ids})
            if lids != hf_ids:
                log(f"tokenization differs for {text!r}: llama.cpp {lids} vs HF {hf_ids}")
        log(f"tokenization: {sum(t['agree'] for t in tokenization)}/{len(tokenization)} texts agree")

        # 7. reference.json.
        reference = {
            "llama_cpp_version": llama_cpp.__version__,
            "generator": "python -m engine.testing.gguf_fixtures",
            "checkpoint": {"seed": SEED, "config_overrides": SMALL_CONFIG},
            "llama_settings": {"n_ctx": 256, "n_threads": 2, "kv_cache_type": "f32", "flash_attn": False},
            "token_text": TOKEN_TEXT,
            "token_ids": ids,
            "logits": logits,
            "quantized_logits": quantized_logits,
            "agreement": agreement,
            "tensor_types": tensor_types,
            "tensors": tensors,
            "rows_not_multiple_of_256": odd,
            "tokenization": tokenization,
            "engine_vs_llama_f32": engine_vs_llama,
        }
        (out_dir / "reference.json").write_text(json.dumps(reference, indent=1, ensure_ascii=False) + "\n")

    total = 0
    for path in sorted(out_dir.iterdir()):
        size = path.stat().st_size
        total += size
        log(f"{size / 2**20:8.2f} MiB  {path.name}")
    log(f"{total / 2**20:8.2f} MiB  total")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
