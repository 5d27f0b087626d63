"""Importing part of an API (`--tag`, `--path`, `--operation`, `--max-tools`), and what an API too big for the
context or for a world file gets: a warning or a refusal that names those filters, never "an importer bug"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aw_mcp.cli import main
from aw_mcp.load.world import load_world, load_world_text


def api(operations: int, description: str = "Does one thing.") -> dict:
    """`operations` operations over two tags, all returning the shared `Item` component."""
    paths = {}
    for i in range(operations):
        tag = "items" if i % 2 == 0 else "admin"
        paths[f"/{tag}/{i}"] = {
            "get": {
                "operationId": f"op{i}",
                "tags": [tag],
                "description": description,
                "responses": {
                    "200": {
                        "description": "ok",
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Item"}}},
                    }
                },
            }
        }
    item = {
        "type": "object",
        "properties": {"id": {"type": "string"}, "owner": {"$ref": "#/components/schemas/User"}},
    }
    user = {"type": "object", "properties": {"login": {"type": "string"}}}
    return {
        "openapi": "3.0.3",
        "info": {"title": "Many", "version": "1"},
        "paths": paths,
        "components": {"schemas": {"Item": item, "User": user}},
    }


def run(tmp_path: Path, document: dict, *flags: str) -> tuple[int, Path]:
    source = tmp_path / "api.json"
    source.write_text(json.dumps(document), encoding="utf-8")
    out = tmp_path / "world.yaml"
    code = main(["import", "openapi", str(source), "-o", str(out), "--force", *flags])
    return code, out


@pytest.mark.parametrize(
    ("flags", "names"),
    [
        (["--tag", "admin"], ["op1", "op3", "op5"]),
        (["--path", "/items/*", "--path", "/admin/1"], ["op0", "op1", "op2", "op4"]),
        (["--operation", "op2", "--operation", "op5"], ["op2", "op5"]),
        (["--tag", "items", "--max-tools", "2"], ["op0", "op2"]),
        (["--tag", "items", "--path", "/admin/*"], None),  # every filter must hold: none does
    ],
)
def test_filters_pick_the_operations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], names: list[str] | None
) -> None:
    code, out = run(tmp_path, api(6), *flags)
    stderr = capsys.readouterr().err
    if names is None:
        assert code == 1 and "no operation of the document passes the filters" in stderr
        return
    assert code == 0, stderr
    world = load_world(out)
    assert [t.name for t in world.tools] == names
    # The response's own component is opened at its root; the one under it is kept once, referred to.
    assert set(world.defs) == {"User"} and all(t.outputSchema["properties"]["owner"] for t in world.tools)
    if "--max-tools" in flags:
        assert "--max-tools 2: 1 more operation(s) left out" in stderr


def test_a_world_too_big_for_the_context_is_written_with_a_warning_naming_the_filters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from aw_mcp.prompt import fit

    monkeypatch.setattr(fit, "DEFAULT_CONTEXT_TOKENS", 8192)  # a small context stands in for a huge API
    code, out = run(tmp_path, api(100, "Long. " * 60))
    stderr = capsys.readouterr().err
    assert code == 0 and out.exists() and "importer bug" not in stderr
    assert "every call would be refused" in stderr and "--tag items (50 operations)" in stderr
    with pytest.raises(Exception, match="every call would be refused"):
        load_world_text(out.read_text(encoding="utf-8"))  # loading it says the same; nothing is silent


def test_a_world_too_big_for_a_world_file_is_refused_naming_the_filters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from aw_mcp.importers import world_file

    monkeypatch.setattr(
        world_file, "MAX_EXPANDED_NODES", 500
    )  # a small bound stands in for GitHub's 232,678 nodes
    code, out = run(tmp_path, api(40))
    stderr = capsys.readouterr().err
    assert code == 1 and not out.exists() and "importer bug" not in stderr
    assert "more than a world file may hold (500)" in stderr and "--tag admin (20 operations)" in stderr


def test_a_world_with_too_much_text_for_a_world_file_is_refused_naming_the_filters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loader's text bound (4M characters after aliases) applies to the file the importer writes: before, the
    import reported it as "an importer bug" (the validator refusing the written text)."""
    from aw_mcp.spec import source

    monkeypatch.setattr(source, "MAX_EXPANDED_CHARS", 20_000)  # a small bound stands in for 4,000,000
    code, out = run(tmp_path, api(40, "Long. " * 60))
    stderr = capsys.readouterr().err
    assert code == 1 and not out.exists() and "importer bug" not in stderr
    assert "too large for a world file (40 tools)" in stderr and "20,000 characters of text" in stderr
    assert "--tag admin (20 operations)" in stderr
