#!/usr/bin/env bash
# The clients people use, each from a venv of its own, against this checkout's server (the demo backend: the
# protocol, not the model, is under test). Writes what each printed to bench/results/clients_DATE.log.
#   bench/clients/run.sh LLAMA_VENV SMOL_VENV MCPUSE_VENV OPENENV010_VENV
# Each venv: python -m venv V && V/bin/pip install llama-index-tools-mcp | 'smolagents[mcp]' 'mcp<2' websockets |
# mcp-use | openenv==0.10.0 (it pins mcp<2, so it cannot share this package's process).
set -uo pipefail
export MCP_USE_ANONYMIZED_TELEMETRY=false  # no network here but the package registries
cd "$(dirname "$0")/../.."
here=bench/clients
server="$(pwd)/.venv/bin/python"
log="bench/results/clients_$(date -u +%F).log"
port=8047
{
  echo "# $(date -u +%FT%TZ) aw-mcp $(git rev-parse --short HEAD), server python: $("$server" --version)"
  for pair in "llama_index_resources.py:$1" "smolagents_payments.py:$2" "mcp_use_nulls.py:$3"; do
    script="${pair%%:*}"; venv="${pair#*:}"
    echo; echo "## $script"
    timeout 180 "$venv/bin/python" "$here/$script" "$server" 2>&1 | grep -v "^WARNING\|Warning:" | tail -15
    echo "exit ${PIPESTATUS[0]}"
  done
  echo; echo "## openenv010_tool_client.py (server: python -m aw_mcp.integrations.openenv mcp_crm --backend demo)"
  "$server" -m aw_mcp.integrations.openenv mcp_crm --backend demo --port "$port" >/dev/null 2>&1 &
  served=$!
  for _ in $(seq 60); do curl -s "http://127.0.0.1:$port/health" >/dev/null && break; sleep 1; done
  "$server" -c "import importlib.metadata as m; print('server: openenv-core', m.version('openenv-core'), 'fastmcp', m.version('fastmcp'), 'mcp', m.version('mcp'))"
  timeout 120 "$4/bin/python" "$here/openenv010_tool_client.py" "http://127.0.0.1:$port" 2>&1 | tail -8
  echo "exit ${PIPESTATUS[0]}"
  kill "$served"
} | tee "$log"
