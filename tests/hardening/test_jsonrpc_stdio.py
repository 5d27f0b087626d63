"""Item 6 of issue 21 over stdio: every JSON-RPC request gets its answer, with its id whenever it can be read.
Raw lines into a real `aw-mcp serve` process; its stdout is read back line by line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from tests.conftest import REPO

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": "init",
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    },
}


def request(request_id: object, method: object = "ping", **extra: object) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, **extra})


def call(request_id: int, arguments: str) -> str:
    """A tools/call line with `arguments` spliced in as raw JSON text."""
    return (
        f'{{"jsonrpc": "2.0", "id": {request_id}, "method": "tools/call", '
        f'"params": {{"name": "cancel_order", "arguments": {arguments}}}}}'
    )


def serve_stdio(world: Path, lines: list[str]) -> tuple[list[dict], str]:
    """Feed `lines` and then a closing ping to `aw-mcp serve` over stdio; once that ping is answered (lines are
    read in order, so every earlier line has been dealt with), close stdin. Every line it wrote, parsed.

    Stdin stays open until then because the SDK cancels requests still in flight at EOF."""
    env = {**os.environ, "AW_BASE_URL": "http://127.0.0.1:9/v1", "AW_MODEL": "m"}
    command = [sys.executable, "-m", "aw_mcp", "serve", "--world", str(world), "--backend", "openai"]
    with tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen(
            [*command, "--no-preflight"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
            cwd=str(REPO),
            text=True,
        )
        watchdog = threading.Timer(120, proc.kill)  # a bound for a hang, not a speed check
        watchdog.start()
        try:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write("\n".join([*lines, request("last")]) + "\n")
            proc.stdin.flush()
            answers = []
            for line in proc.stdout:
                answers.append(json.loads(line))
                if answers[-1].get("id") == "last":
                    break
            proc.stdin.close()
            answers += [json.loads(line) for line in proc.stdout if line.strip()]
            proc.wait()
        finally:
            watchdog.cancel()
            proc.kill()
        stderr.seek(0)
        return [a for a in answers if a.get("id") != "last"], stderr.read().decode(errors="replace")


def test_requests_with_ids_json_rpc_does_not_allow_are_answered_with_a_null_id(
    small_world_path: Path,
) -> None:
    bad_ids = [None, 1.5, True, {}, [1]]
    answers, stderr = serve_stdio(
        small_world_path, [json.dumps(INITIALIZE), *(request(i) for i in bad_ids), request(99)]
    )
    by_id: dict = {}
    for answer in answers:
        by_id.setdefault(json.dumps(answer.get("id")), []).append(answer)
    assert "result" in by_id['"init"'][0] and "result" in by_id["99"][0], stderr  # still serving
    nulls = by_id.get("null", [])
    assert len(nulls) == len(bad_ids), answers  # each one answered, none left waiting for a timeout
    assert all(a["error"]["code"] == -32600 for a in nulls)
    assert all("id must be a string or an integer" in a["error"]["message"] for a in nulls)


def test_malformed_requests_with_a_readable_id_get_it_back(small_world_path: Path) -> None:
    lines = {
        1: json.dumps({"jsonrpc": "1.0", "id": 1, "method": "ping"}),
        2: request(2, method=7),
        3: request(3, params="x"),
        4: request(4, params=5),
        5: request(5, params=[1, 2]),
        6: call(6, '{"order_id": "\\ud800"}'),
        7: call(7, '{"order_id": "ORD-1", "n": ' + "7" * 5000 + "}"),
        8: call(8, '{"order_id": "ORD-1", "deep": ' + "[" * 900 + "]" * 900 + "}"),
        9: json.dumps({"jsonrpc": "2.0", "id": 9}),
    }
    answers, stderr = serve_stdio(small_world_path, [json.dumps(INITIALIZE), *lines.values()])
    errors = {a["id"]: a["error"] for a in answers if "error" in a}
    assert set(errors) == set(lines), (answers, stderr[-2000:])  # every id echoed
    assert all(errors[i]["code"] == -32600 for i in (1, 2, 3, 4, 5, 9))
    assert "batch" not in errors[5]["message"] and "params" in errors[5]["message"]  # a list, not a batch
    assert all(errors[i]["code"] == -32602 for i in (6, 7, 8))
    assert "surrogate" in errors[6]["message"]
    assert "5,000 digits" in errors[7]["message"]
    assert "nested more than" in errors[8]["message"]


def test_well_formed_notifications_get_no_answer_and_malformed_ones_a_null_id(small_world_path: Path) -> None:
    notifications = [
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 12345}}),
        "",  # a blank line is not a message either
    ]
    malformed = json.dumps({"jsonrpc": "2.0", "method": 5})
    answers, stderr = serve_stdio(small_world_path, [json.dumps(INITIALIZE), *notifications, malformed])
    assert sorted(json.dumps(a.get("id")) for a in answers) == ['"init"', "null"], (answers, stderr[-2000:])
    assert next(a for a in answers if a["id"] is None)["error"]["code"] == -32600
