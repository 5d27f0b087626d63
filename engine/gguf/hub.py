"""Where a GGUF model comes from: a local `.gguf` path (any part of a split set), or the hub form
`owner/repo:TYPE` (e.g. `unsloth/Qwen-AgentWorld-35B-A3B-GGUF:Q4_K_M`), whose file(s) of that type are taken
from the Hugging Face cache, else downloaded with a progress bar. With `HF_HUB_OFFLINE=1` only the cache is read."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from engine.gguf.reader import is_gguf, split_parts
from engine.loader import CheckpointError

HUB_FORM = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+):(?P<type>[\w.-]+)$")
# A quantization tag inside a file name: UD-Q4_K_XL, Q4_K_M, IQ4_XS, Q8_0, MXFP4_MOE, BF16, ...
_TAG = re.compile(
    r"(?<![A-Za-z0-9])((?:UD-)?(?:I?Q\d(?:_[A-Z0-9]+)*|MXFP4(?:_MOE)?|BF16|F16|F32))(?=[-.]|$)", re.I
)
_SPLIT_SUFFIX = re.compile(r"-\d{5}-of-\d{5}$")


def is_gguf_source(model: str) -> bool:
    return is_gguf(model) or HUB_FORM.match(model) is not None


def file_tag(path: str) -> str | None:
    """The quantization tag of a repository file (folder names count: `Q4_K_M/x-00001-of-00002.gguf`)."""
    if not path.endswith(".gguf") or "mmproj" in path.lower():
        return None
    stem = _SPLIT_SUFFIX.sub("", path[: -len(".gguf")])
    tags = _TAG.findall(stem)
    return tags[-1].upper() if tags else None


def pick_files(files: list[str], wanted: str, repo: str) -> list[str]:
    """The repository files of type `wanted` (one file or every part of one split set), or an error listing
    the types the repository has."""
    tags = {f: file_tag(f) for f in files}
    chosen = sorted(f for f, tag in tags.items() if tag == wanted.upper())
    if not chosen:
        have = sorted({t for t in tags.values() if t})
        listed = ", ".join(have) if have else "no GGUF model files"
        raise CheckpointError(f"{repo} has no {wanted} GGUF file; it has: {listed}")
    sets = {_SPLIT_SUFFIX.sub("", f[: -len(".gguf")]) for f in chosen}
    if len(sets) > 1:
        raise CheckpointError(f"{repo} has several {wanted} files ({', '.join(chosen)}); pass one by path")
    return chosen


def resolve_gguf(model: str) -> Path:
    """The first (or only) part of the checkpoint, all parts present on disk."""
    match = HUB_FORM.match(model)
    if match is None:
        path = Path(model).expanduser()
        if not path.is_file():
            raise CheckpointError(f"no GGUF file at {path}")
        return split_parts(path)[0]
    repo, wanted = match["repo"], match["type"]
    folder, files = _cached(repo)
    if files:
        try:
            chosen = pick_files(files, wanted, repo)
            if all((folder / f).is_file() for f in chosen):
                return split_parts(folder / chosen[0])[0]
        except CheckpointError:
            if os.environ.get("HF_HUB_OFFLINE"):
                raise
    if os.environ.get("HF_HUB_OFFLINE"):
        raise CheckpointError(
            f"{repo} ({wanted}) is not in the Hugging Face cache and HF_HUB_OFFLINE is set: download it where "
            f"the hub is reachable (`hf download {repo} --include '*{wanted}*'`)"
        )
    return _download(repo, wanted)


def _cached(repo: str) -> tuple[Path, list[str]]:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = Path(snapshot_download(repo, allow_patterns=["*.gguf"], local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError):
        return Path(), []
    return folder, sorted(str(p.relative_to(folder)) for p in folder.rglob("*.gguf"))


def _download(repo: str, wanted: str) -> Path:
    from huggingface_hub import HfApi, hf_hub_download

    try:
        files = HfApi().list_repo_files(repo)
    except Exception as exc:  # noqa: BLE001 - network and hub errors come in many types
        raise CheckpointError(f"cannot list {repo} on the Hugging Face hub ({exc})") from exc
    chosen = pick_files(files, wanted, repo)
    print(f"downloading {len(chosen)} file(s) of {repo} ({wanted}) ...", file=sys.stderr)
    try:
        paths = [Path(hf_hub_download(repo, f)) for f in chosen]  # tqdm progress per file
    except Exception as exc:  # noqa: BLE001
        raise CheckpointError(f"cannot download {repo} ({wanted}): {exc}") from exc
    return split_parts(paths[0])[0]
