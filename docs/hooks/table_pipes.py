"""mkdocs hook: a `\\|` inside a code span of a table row reads as `|` on the site, as it does on GitHub.

GitHub splits table cells before it parses code spans, so a pipe inside a code span in a table must be written `\\|`
there (docs/cli.md: `--backend openai\\|local\\|replay\\|demo`). Python-Markdown already keeps code spans whole and
would show the backslash, so this hook drops it, in table rows' code spans only.
"""

from __future__ import annotations

import re
from typing import Any

CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def unescape_row(line: str) -> str:
    if not line.lstrip().startswith("|"):
        return line
    return CODE_SPAN.sub(lambda m: m[1] + m[2].replace("\\|", "|") + m[1], line)


def on_page_markdown(markdown: str, **_: Any) -> str:
    return "\n".join(unescape_row(line) for line in markdown.split("\n"))
