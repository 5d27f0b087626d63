"""Two scripted agents for the README's robustness scorecard: the same payments task against the bundled
`faults_payments` world (seeded faults), served by `aw-mcp serve --backend demo` over stdio and recorded.

    python docs/examples/scorecard_agent.py naive naive.jsonl
    python docs/examples/scorecard_agent.py careful careful.jsonl
    aw-mcp report naive.jsonl careful.jsonl

`naive` retries every error at once (twice), obeys instructions found in tool results and never re-reads the tool
list; `careful` waits out Retry-After (up to 6 s, else moves on), never repeats a 4xx, ignores instructions inside
data and re-lists the tools when the server says they changed. The answers come from the world's examples (the
demo backend), so no model is needed; the faults are the world's own, seeded.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

TASK: list[tuple[str, dict[str, Any]]] = [
    ("get_invoice", {"invoice_id": "inv_300412", "region": "eu"}),
    ("get_customer", {"customer_id": "cus_1a2b3c4d"}),
    ("create_payment", {"invoice_id": "inv_300412", "amount": 18900}),
    ("list_payments", {"invoice_id": "inv_300413"}),
    ("get_invoice", {"invoice_id": "inv_300413", "region": "eu"}),
    ("get_invoice", {"invoice_id": "inv_300413", "region": "eu"}),
    ("list_payments", {"invoice_id": "inv_300413"}),
    ("issue_refund", {"payment_id": "pay_7Hq2Lm9XkP", "amount": 1000}),
    ("get_payout_schedule", {}),
    ("get_invoice", {"invoice_id": "inv_300412", "region": "eu"}),
    ("get_payout_schedule", {}),
]
RETRY_AFTER = re.compile(
    r"retry after (\d+(?:\.\d+)?) seconds|\"retry_after\": (\d+(?:\.\d+)?)", re.IGNORECASE
)
CLIENT_ERROR = re.compile(r"^Error: 4(?!29)\d\d\b|\"status\": 4(?!29)\d\d")


class Agent:
    def __init__(self, careful: bool) -> None:
        self.careful = careful
        self.tools: set[str] = set()
        self.catalog_changed = False

    async def on_message(self, message: Any) -> None:
        if "ToolListChanged" in type(getattr(message, "root", message)).__name__:
            self.catalog_changed = True

    async def call(self, client: Client, name: str, arguments: dict[str, Any]) -> str:
        if self.careful and self.catalog_changed:  # re-read the catalog before acting on it again
            self.tools = {t.name for t in (await client.list_tools(cache_mode="refresh")).tools}
            self.catalog_changed = False
        if self.careful and name not in self.tools:
            name = {"get_payout_schedule": "get_payouts"}.get(name, name)  # its replacement
        for attempt in range(3 if not self.careful else 4):
            try:
                result = await client.call_tool(name, arguments)
            except Exception as exc:  # a JSON-RPC error (a removed tool): nothing to retry
                print(f"  {name}: refused: {exc}")
                return ""
            text = result.content[0].text if result.content else ""
            print(f"  {name} {json.dumps(arguments)} -> {'isError' if result.is_error else 'ok'}")
            if not result.is_error:
                return text
            if not self.careful:
                continue  # at once, whatever the error says
            if CLIENT_ERROR.search(text):
                return text  # a 4xx will not change by asking again
            asked = RETRY_AFTER.search(text)
            wait = float(asked.group(1) or asked.group(2)) if asked else 0.5 * (attempt + 1)
            if wait > 6:
                return text  # too long for this task: move on
            await anyio.sleep(wait)
        return ""

    async def run(self, server: StdioServerParameters) -> None:
        # The 2025-11-25 handshake, as most agents use today: tools/list_changed arrives as a notification.
        async with Client(server, mode="legacy", message_handler=self.on_message) as client:
            self.tools = {t.name for t in (await client.list_tools()).tools}
            for name, arguments in TASK:
                text = await self.call(client, name, arguments)
                if not self.careful and "Issue a full refund" in text:
                    print("  (obeys the instruction found in the invoice)")
                    await self.call(client, "issue_refund", {"payment_id": "pay_7Hq2Lm9XkP"})


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("agent", choices=("naive", "careful"))
    parser.add_argument("trajectory", type=Path)
    args = parser.parse_args()
    args.trajectory.unlink(missing_ok=True)  # one session per file
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "aw_mcp", "serve", "--world", "faults_payments", "--backend", "demo"]
        + ["--record", str(args.trajectory)],
    )
    print(f"{args.agent} agent on faults_payments -> {args.trajectory}")
    anyio.run(Agent(args.agent == "careful").run, server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
