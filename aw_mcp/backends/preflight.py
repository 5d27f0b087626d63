"""Before serving: can the chosen backend answer at all? A server that cannot is an error at start-up, in seconds,
with the ways out, instead of a failure at the agent's first call.

- `openai`: the server at `--base-url` must answer `GET {base_url}/models` (vLLM, SGLang and `aw-mcp engine serve`
  all do); an unreachable server or a refused API key is an error. A model list without `--model` is a warning.
  AW_API_KEY goes with it by the rule calls follow (backends/resolve.py `sends_api_key`): not to a URL that came
  from the world file unless `--trust-world-backend`. Messages show the URL without its credentials, and read at most
  PREFLIGHT_BODY_BYTES of the answer.
- `local`: the engine extra must be installed, and the model must fit: a CUDA GPU with enough memory for its weights
  (estimated from the checkpoint's files before anything is downloaded), or a small checkpoint that runs on a CPU.
- `replay`: the recording is read when the backend opens, so there is nothing left to check.

`aw-mcp serve --no-preflight` skips all of it (for a model server that starts after this one).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import httpx

from aw_mcp.backends.engine_extra import require_engine
from aw_mcp.backends.resolve import DEFAULT_MODEL, BackendChoice, sends_api_key
from aw_mcp.core.endpoint import endpoint
from aw_mcp.core.errors import ServeError
from aw_mcp.core.redaction import redact_secrets, redact_text, redact_url
from aw_mcp.core.settings import read_settings

log = logging.getLogger(__name__)

PREFLIGHT_TIMEOUT_S = 5.0
# A model list; a longer answer is not read further (the server is up all the same).
PREFLIGHT_BODY_BYTES = 1024 * 1024
GIB = 1024**3
# What the default model's weights take in bf16 (35B parameters; vision and MTP tensors are not loaded), for when
# neither the hub cache nor the hub can tell us.
DEFAULT_MODEL_WEIGHT_BYTES = 35 * 10**9 * 2
# Checkpoints at most this large may run on a CPU (test and demo checkpoints); larger ones need a GPU.
CPU_MODEL_LIMIT_BYTES = 2 * GIB
# Beyond the weights: the state cache of the concurrent sequences, activations and the CUDA context.
CACHE_HEADROOM_FRACTION = 0.15
MIN_HEADROOM_BYTES = 4 * GIB

VLLM_COMMAND = "vllm serve {model} --language-model-only --reasoning-parser qwen3 --port 8000"
SGLANG_COMMAND = "python -m sglang.launch_server --model-path {model} --reasoning-parser qwen3 --port 8000"


class PreflightError(ServeError):
    """The backend cannot answer; the message names what failed and the ways out."""


def gib(n: float) -> str:
    return f"{n / GIB:.0f} GiB" if n >= 10 * GIB else f"{n / GIB:.1f} GiB"


def server_ways_out(model: str) -> str:
    return (
        f"Start the model server first (`{VLLM_COMMAND.format(model=model)}`, or SGLang: "
        f"`{SGLANG_COMMAND.format(model=model)}`) and pass its URL, e.g. --base-url http://127.0.0.1:8000/v1; or run "
        "the model in this process on the embedded engine (drop --base-url; needs a GPU). --no-preflight skips this "
        "check for a server that starts later."
    )


def check_openai(
    base_url: str,
    model: str,
    api_key: str | None = None,
    timeout_s: float = PREFLIGHT_TIMEOUT_S,
    withheld_key: bool = False,
) -> int | None:
    """`api_key`: sent as a bearer token; the caller decides whether this URL may have it (`preflight` does).
    `withheld_key`: AW_API_KEY is set but not for this URL (a refusal then says why). Returns the context the
    server says it serves for the model (None when it does not say)."""
    url = endpoint(base_url, "models")
    shown = redact_url(base_url)  # `http://user:pw@host` is shown as `http://***@host`
    headers = {"Accept-Encoding": "identity"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    try:
        with httpx.stream("GET", url, headers=headers, timeout=timeout_s) as response:
            status = response.status_code
            body = _head(response, PREFLIGHT_BODY_BYTES) if status == 200 else b""
            location = response.headers.get("location", "")
    except httpx.HTTPError as exc:
        reason = redact_secrets(redact_text(str(exc) or type(exc).__name__, base_url))
        raise PreflightError(
            f"cannot reach the model server at {shown} ({type(exc).__name__}: {reason}). {server_ways_out(model)}"
        ) from None
    if status in (401, 403):
        raise PreflightError(
            f"the model server at {shown} refused the request (HTTP {status}): "
            + (
                "AW_API_KEY was not sent to it, as its URL comes from the world file; pass --base-url, set "
                "AW_BASE_URL, or --trust-world-backend"
                if withheld_key
                else "set AW_API_KEY to the key it expects"
            )
        )
    if 300 <= status < 400:  # calls are not redirected either: every one would fail "HTTP 30x"
        to = f" to {redact_secrets(redact_url(location))}" if location else ""
        raise PreflightError(
            f"the model server at {shown} answered GET /models with a redirect (HTTP {status}{to}); calls are not "
            "redirected, so each would fail the same way: pass the URL it redirects to as --base-url (AW_BASE_URL)"
        )
    if status != 200:
        log.debug("preflight: %s answered %s; the server is up", redact_url(url), status)
        return None
    served = served_models(body)
    if served and model not in served:
        log.warning(
            "the model server at %s serves %s, not %r: pass --model %s (calls naming another model will fail)",
            shown,
            ", ".join(served),
            model,
            served[0],
        )
    return served_context(body, model)


def served_context(body: bytes, model: str) -> int | None:
    """The context (`max_model_len`, as vLLM, SGLang and `aw-mcp engine serve` list it) of `model`, or of the one
    model served; None when the list does not say."""
    try:
        data = json.loads(body).get("data")
    except (ValueError, AttributeError):
        return None
    entries = [e for e in data if isinstance(e, dict)] if isinstance(data, list) else []
    chosen = [e for e in entries if e.get("id") == model] or (entries if len(entries) == 1 else [])
    value = chosen[0].get("max_model_len") if chosen else None
    return value if isinstance(value, int) and value > 0 else None


def _head(response: httpx.Response, limit: int) -> bytes:
    """The body, or b"" when it is longer than `limit` (not read further)."""
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > limit:
            return b""
    return bytes(body)


def served_models(body: bytes | httpx.Response) -> list[str]:
    try:
        raw = body.content if isinstance(body, httpx.Response) else body
        data = json.loads(raw).get("data")
    except (ValueError, AttributeError):
        return []
    if not isinstance(data, list):
        return []
    return [str(entry["id"]) for entry in data if isinstance(entry, dict) and "id" in entry]


def safetensors_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.glob("*.safetensors"))


def weight_bytes(model: str) -> int | None:
    """The checkpoint's weight size: a local folder's files, the hub cache, the hub's metadata, or the default
    model's known size. None when nothing says."""
    local = Path(model).expanduser()
    if local.is_dir():
        return safetensors_bytes(local) or None
    if model.count("/") != 1 or model.startswith((".", "/", "~")):
        return None  # not a hub id either; the engine reports it when it loads
    try:
        from huggingface_hub import HfApi, snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError

        try:
            cached = Path(snapshot_download(model, allow_patterns=["*.safetensors"], local_files_only=True))
            size = safetensors_bytes(cached)
            if size:
                return size
        except LocalEntryNotFoundError:
            pass
        if not read_settings().hf_hub_offline:
            info = HfApi().model_info(model, files_metadata=True, timeout=PREFLIGHT_TIMEOUT_S)
            sizes = [s.size or 0 for s in info.siblings or [] if s.rfilename.endswith(".safetensors")]
            if sum(sizes):
                return sum(sizes)
    except Exception as exc:  # noqa: BLE001 -- the hub is optional here: fall back to what we know
        log.debug("preflight: no weight size for %s from the hub: %s", model, exc)
    return DEFAULT_MODEL_WEIGHT_BYTES if model == DEFAULT_MODEL else None


def needed_bytes(weights: int) -> int:
    return weights + max(MIN_HEADROOM_BYTES, int(weights * CACHE_HEADROOM_FRACTION))


def requirement(model: str, weights: int | None) -> str:
    if weights is None:
        return f"{model!r} needs a CUDA GPU (its size is unknown here)"
    return (
        f"{model!r} needs a CUDA GPU with about {gib(needed_bytes(weights))} of memory "
        f"({gib(weights)} of weights + cache)"
    )


def local_ways_out(model: str) -> str:
    return (
        "Ways out: run on a machine with such a GPU; point at a vLLM/SGLang server that runs the model "
        f"(`{VLLM_COMMAND.format(model=model)}`, then --base-url http://127.0.0.1:8000/v1); or see the whole "
        "product without a model: `aw-mcp demo`."
    )


def check_local(model: str, device: str | None, cuda: Any = None, max_model_len: int | None = None) -> None:
    """`cuda`: torch.cuda or a stand-in with `is_available()`, `mem_get_info(index)`, `get_device_name(index)`."""
    require_engine("--backend local")
    from engine.gguf.hub import is_gguf_source
    from engine.tiny_model import is_tiny_model

    if cuda is None:  # a stand-in `cuda` (tests) describes the GPUs itself
        check_device(device)
    if is_tiny_model(model):
        return  # built on first use, a few MiB: runs anywhere
    if is_gguf_source(model):
        check_gguf(model, device, cuda, max_model_len)
        return
    local = Path(model).expanduser()
    if not local.is_dir() and (local.exists() or model.startswith((".", "/", "~")) or model.count("/") != 1):
        raise PreflightError(
            f"--model {model!r} is neither a checkpoint folder nor a Hugging Face hub id like {DEFAULT_MODEL!r}"
        )
    if device is not None and device.startswith("cpu"):
        return  # asked for explicitly: the engine runs anything there, slowly
    weights = weight_bytes(model)
    if cuda is None:
        import torch

        cuda = torch.cuda
    if not cuda.is_available():
        if weights is not None and weights <= CPU_MODEL_LIMIT_BYTES:
            return  # a small checkpoint: the engine runs it on the CPU
        raise PreflightError(
            f"the local engine found no CUDA GPU: {requirement(model, weights)}. --device cpu runs only small test "
            f"checkpoints at a useful speed. {local_ways_out(model)}"
        )
    if weights is None:
        return
    index = int(device.split(":", 1)[1]) if device and ":" in device else 0
    free, total = cuda.mem_get_info(index)
    if needed_bytes(weights) > free:
        name = cuda.get_device_name(index)
        have = f"GPU {index} ({name}) has {gib(total)}" + (f", {gib(free)} free" if free < total else "")
        raise PreflightError(f"{requirement(model, weights)}; {have}. {local_ways_out(model)}")


def check_device(device: str | None) -> None:
    """A device asked for that this machine lacks (`--device cuda` on a torch without CUDA) is one line now, as the
    engine says it (engine/options.py), not a failure of every call once the server runs."""
    if device is None:
        return
    from engine.options import DeviceError, EngineOptions

    try:
        EngineOptions(device=device).torch_device()
    except DeviceError as exc:
        raise PreflightError(str(exc)) from None


def check_gguf(model: str, device: str | None, cuda: Any, max_model_len: int | None) -> None:
    """A GGUF file is planned from its own tensor table (weights as stored, quantized) and metadata: the engine's
    memory plan for one sequence of the context must fit the GPU's free memory, else one line says what would."""
    from engine.loader import CheckpointError
    from engine.memory_plan import plan_gguf

    try:
        plan = plan_gguf(model, context=max_model_len or 32768)
    except CheckpointError as exc:
        raise PreflightError(f"--model {model}: {exc}") from exc
    if device is not None and device.startswith("cpu"):
        return
    if cuda is None:
        import torch

        cuda = torch.cuda
    if not cuda.is_available():
        if plan.weights <= CPU_MODEL_LIMIT_BYTES:
            return
        raise PreflightError(
            f"the local engine found no CUDA GPU: {model!r} needs one with {gib(plan.total)} "
            f"({plan.render()}). {local_ways_out(model)}"
        )
    index = int(device.split(":", 1)[1]) if device and ":" in device else 0
    free, total = cuda.mem_get_info(index)
    if plan.total > free:
        name = cuda.get_device_name(index)
        have = f"GPU {index} ({name}) has {gib(total)}" + (f", {gib(free)} free" if free < total else "")
        raise PreflightError(
            f"{model!r} needs {gib(plan.total)} ({plan.render()}); {have}: {plan.what_fits(free)}"
        )


def preflight(choice: BackendChoice, trust_world_backend: bool = False) -> int | None:
    """Raise PreflightError when the backend cannot answer calls. AW_API_KEY goes to the server only where calls
    send it too (`trust_world_backend`: as `--trust-world-backend`, for a URL from the world file). Returns the
    context a model server says it serves (the caller checks the world fits it), else None."""
    choice = choice.answering()  # hybrid: its world model
    if choice.backend == "openai":
        assert choice.base_url is not None
        key = read_settings().api_key_value
        send = sends_api_key(choice, trust_world_backend)
        return check_openai(
            choice.base_url, choice.model, key if send else None, withheld_key=bool(key) and not send
        )
    if choice.backend == "local":
        check_local(choice.model, choice.device, max_model_len=choice.max_model_len)
    return None
