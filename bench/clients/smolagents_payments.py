"""smolagents' ToolCollection.from_mcp on the payments world over stdio (its adapter reads every inputSchema's
`properties`). Run from a venv with smolagents[mcp]: `python smolagents_payments.py AW_MCP_PYTHON`."""

import importlib.metadata as md
import sys

from mcp import StdioServerParameters
from smolagents import ToolCollection

server = sys.argv[1]
print("smolagents", md.version("smolagents"), "mcpadapt", md.version("mcpadapt"), "mcp", md.version("mcp"))
params = StdioServerParameters(
    command=server, args=["-m", "aw_mcp", "serve", "--world", "faults_payments", "--backend", "demo"]
)
with ToolCollection.from_mcp(params, trust_remote_code=True, structured_output=False) as collection:
    tools = {t.name: t for t in collection.tools}
    for tool in tools.values():
        print(" ", tool.name, "inputs:", list(tool.inputs))
    print("get_payout_schedule() ->", str(tools["get_payout_schedule"]())[:160].replace("\n", " "))
    print(
        "get_customer(cus_1a2b3c4d) ->",
        str(tools["get_customer"](customer_id="cus_1a2b3c4d"))[:160].replace("\n", " "),
    )
print("OK smolagents on faults_payments:", len(tools), "tools")
