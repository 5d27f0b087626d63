"""Branch a world: a scripted policy drives a payments world to call 5, the world is forked 8 ways, each branch
takes a different next action, and a table shows what each branch saw, with its robustness scorecard.

    python docs/examples/fork_eight_ways.py [--backend demo] [--base-url URL --model NAME]

With `--backend demo` (the default) the answers are the world's own examples; give a model server for real ones.
Fault schedules are seeded: every branch meets the same faults at the same calls for the same actions.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import anyio

from aw_mcp import Env
from aw_mcp.eval.scorecard import score

PREFIX: list[tuple[str, dict[str, Any]]] = [  # the policy up to call 5
    ("get_customer", {"customer_id": "cus_1a2b3c4d"}),
    ("get_invoice", {"invoice_id": "inv_300412"}),
    ("get_invoice", {"invoice_id": "inv_300413"}),
    ("create_payment", {"invoice_id": "inv_300412", "amount": 18900}),
    ("create_payment", {"invoice_id": "inv_300412", "amount": 18900}),
]
BRANCHES: list[tuple[str, dict[str, Any]]] = [  # eight different sixth actions
    ("create_payment", {"invoice_id": "inv_300412", "amount": 18900}),
    ("create_payment", {"invoice_id": "inv_300413", "amount": 4599}),
    ("issue_refund", {"payment_id": "pay_7Hq2Lm9XkP", "amount": 1000}),
    ("issue_refund", {"payment_id": "pay_7Hq2Lm9XkP"}),
    ("get_invoice", {"invoice_id": "inv_300412"}),
    ("get_customer", {"customer_id": "cus_5e6f7a8b"}),
    ("get_payout_schedule", {}),
    ("no_such_tool", {}),
]


def first_line(text: str, width: int = 60) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= width else line[: width - 1] + "…"


async def main(options: dict[str, Any]) -> None:
    async with await Env.open("faults_payments", seed=42, **options) as env:
        for tool, arguments in PREFIX:
            await env.call(tool, arguments)
        branches = await env.fork(len(BRANCHES))
        rows = []
        for number, (branch, (tool, arguments)) in enumerate(zip(branches, BRANCHES, strict=True), 1):
            try:
                result = await branch.call(tool, arguments)
                seen = first_line(result.content[0].text) if result.content else ""
                status = "error" if result.is_error else "ok"
            except Exception as exc:  # an unknown tool is a protocol error, as over MCP
                seen, status = first_line(str(exc)), "refused"
            last = branch.trajectory[-1] if branch.trajectory and branch.trajectory[-1].index == 5 else None
            faults = ", ".join(f.name for f in last.faults) if last else ""
            card = score([(f"branch-{number}", branch.trajectory)])
            outcomes = [
                f"{category}: " + ", ".join(f"{n} {outcome}" for outcome, n in summary.outcomes.items() if n)
                for category, summary in card.summary.items()
            ]
            rows.append((number, f"{tool} {json.dumps(arguments)}", status, faults or "-", seen, outcomes))
            await branch.close()
    for number, action, status, faults, seen, outcomes in rows:
        print(f"branch {number}: {action}\n  -> {status}; faults: {faults}; saw: {seen}")
        print(f"  scorecard: {'; '.join(outcomes) if outcomes else 'no graded reactions'}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", default="demo")
    parser.add_argument("--base-url")
    parser.add_argument("--model")
    args = parser.parse_args()
    anyio.run(main, {"backend": args.backend, "base_url": args.base_url, "model": args.model})
