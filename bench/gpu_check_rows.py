"""gpu_check's rows: each part appends every row to a JSONL file the moment it is measured (a part that hangs or
dies keeps what it wrote), and the parent renders the table from that file after each part and on SIGTERM.
Imports nothing heavy: the parent process never imports torch."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from pathlib import Path

# A row's verdict. A part's own row (written by the parent) is ok, FAIL, TIMEOUT or skip.
OK, FAIL, SKIP, INFO, MEETS, BELOW, TIMEOUT = (
    "ok",
    "FAIL",
    "skip",
    "info",
    "meets target",
    "BELOW target",
    "TIMEOUT",
)
FAILING = (FAIL, TIMEOUT)
PART_ROW = "(part)"


@dataclass
class Row:
    part: str
    name: str
    status: str = INFO
    value: float | None = None
    unit: str = ""
    target: str = ""  # e.g. ">= 400"
    note: str = ""

    def cells(self) -> list[str]:
        value = "" if self.value is None else f"{figure(self.value)} {self.unit}".strip()
        return [self.part, self.name, value, self.target, self.status, self.note]


def figure(value: float) -> str:
    """A figure as a table shows it: whole numbers from 100 up (with thousands separators), else 3 digits."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


class Rows:
    """A part's writer: one JSON line per row, flushed and fsynced at once, echoed to stdout."""

    def __init__(self, path: Path, part: str) -> None:
        self.path = path
        self.part = part
        self.failures = 0

    def write(self, row: Row) -> Row:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(asdict(row)) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.failures += row.status in FAILING
        text = " ".join(cell for cell in [*row.cells()[2:4], row.note] if cell)
        print(f"  [{row.status}] {row.name}: {text}", flush=True)
        return row

    def measure(
        self,
        name: str,
        value: float,
        unit: str,
        at_least: float | None = None,
        at_most: float | None = None,
        note: str = "",
    ) -> Row:
        """A figure, judged against its target when it has one (a figure below target is no failure)."""
        status, target = INFO, ""
        if at_least is not None:
            status, target = (MEETS if value >= at_least else BELOW), f">= {figure(at_least)}"
        elif at_most is not None:
            status, target = (MEETS if value <= at_most else BELOW), f"<= {figure(at_most)}"
        return self.write(Row(self.part, name, status, value, unit, target, note))

    def check(self, name: str, ok: bool, note: str = "", value: float | None = None, unit: str = "") -> Row:
        """A correctness verdict: FAIL rows make the whole check fail."""
        return self.write(Row(self.part, name, OK if ok else FAIL, value, unit, "", note))

    def skip(self, name: str, why: str) -> Row:
        return self.write(Row(self.part, name, SKIP, note=why))

    def info(self, name: str, note: str, value: float | None = None, unit: str = "") -> Row:
        return self.write(Row(self.part, name, INFO, value, unit, "", note))

    @contextmanager
    def section(self, name: str) -> Iterator[None]:
        """One group of rows: an exception becomes a FAIL row naming it, and the part goes on with the next group
        (after a CUDA fault every later group fails fast the same way)."""
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - one broken check must not hide the others' rows
            import traceback

            traceback.print_exc()
            self.check(name, False, f"{type(exc).__name__}: {first_line(exc)}")


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""


def read_rows(path: Path) -> list[Row]:
    """Every complete row of the file (a line cut short by a kill is dropped)."""
    if not path.exists():
        return []
    names = {f.name for f in fields(Row)}
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and {"part", "name"} <= data.keys():
            rows.append(Row(**{k: v for k, v in data.items() if k in names}))
    return rows


def render(rows: list[Row], title: str) -> str:
    """The table: one line per row in the order measured; the parts' own rows say how each part ended."""
    header = ["part", "row", "value", "target", "verdict", "note"]
    table = [header] + [r.cells() for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(header) - 1)]
    lines = [title]
    for line in table:
        lines.append(
            "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=False)) + "  " + line[-1]
        )
    failing = [r for r in rows if r.status in FAILING]
    below = [r for r in rows if r.status == BELOW]
    lines.append(
        f"{len(rows)} rows: {len(failing)} failing (FAIL/TIMEOUT), {len(below)} below target, "
        f"{sum(r.status == SKIP for r in rows)} skipped"
    )
    return "\n".join(line.rstrip() for line in lines)
