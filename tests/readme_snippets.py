"""The fenced code blocks of the README and of the documentation pages (docs/*.md, the mkdocs site), and the
markers that say whether tests/test_readme.py runs them.

A marker is an HTML comment (invisible on GitHub) on the line right before a block's opening fence:

    <!-- runnable: python -->   run as a script, as written
    <!-- runnable: shell -->    run with bash, as written (install lines skipped: see test_readme.py)
    <!-- runnable: world -->    a world file: `aw-mcp validate` must accept it
    <!-- runnable: server -->   one command that serves until stopped: started in the background for the
                                runnable block right after it, then stopped
    <!-- not run: REASON -->    never run; REASON says why (a GPU, a model server, a package that is not ours ...)

Blocks in a language of EXAMPLE_LANGUAGES (configuration and printed output) need no marker; every other block
(python, bash, ...) must have one, so no snippet can be added without being run or saying why it is not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
# Every page whose blocks are checked and run: the README, then the site's pages (mkdocs.yml's nav lists them all).
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]

RUNNABLE_KINDS = {
    "python": {"python"},
    "shell": {"bash", "sh", "shell"},
    "world": {"yaml"},
    "server": {"bash"},
}
# Configuration examples and printed output: read, never run. JSON must parse and YAML must load (test_readme.py).
EXAMPLE_LANGUAGES = {"json", "yaml", "text", ""}

FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,})(?P<lang>[^`\s]*)\s*$")
MARKER = re.compile(r"^<!--\s*(?P<what>runnable|not run)\s*:\s*(?P<detail>.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    heading: str  # the nearest heading above
    marker: str | None = None  # "runnable" or "not run"
    detail: str = ""  # the kind of a runnable block, the reason of a not-run one
    page: str = "README.md"  # the file, relative to the repository

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line} ({self.lang or 'plain'} block under {self.heading!r})"

    @property
    def kind(self) -> str | None:
        return self.detail if self.marker == "runnable" else None


def page_name(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def all_blocks() -> list[Block]:
    """Every page's blocks, page by page (README first)."""
    return [block for path in PAGES for block in blocks(path=path)]


def blocks(text: str | None = None, path: Path = README) -> list[Block]:
    """Every fenced block of one page (the README unless named; or `text`, as that page) in order, with the marker
    on the line before it, if any."""
    lines = (path.read_text(encoding="utf-8") if text is None else text).splitlines()
    found: list[Block] = []
    heading = "(top)"
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        opening = FENCE.match(line)
        if not opening:
            i += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        end = i + 1
        while end < len(lines) and not re.match(rf"^ {{0,3}}{fence}`*\s*$", lines[end]):
            end += 1
        code = "\n".join(raw[indent:] if raw[:indent].isspace() else raw for raw in lines[i + 1 : end]) + "\n"
        marker = MARKER.match(lines[i - 1]) if i > 0 else None
        found.append(
            Block(
                line=i + 1,
                lang=opening["lang"].lower(),
                code=code,
                heading=heading,
                marker=marker["what"] if marker else None,
                detail=marker["detail"] if marker else "",
                page=page_name(path),
            )
        )
        i = end + 1
    return found
