#!/usr/bin/env bash
# The project's test command (README line 2): formatting, lints, then every test, with the
# real StackQL provider documents of ../shared/providers for the compatibility tests.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null; then
  echo "cargo is required (Rust toolchain via rustup)" >&2
  exit 1
fi
for tool in fmt clippy; do
  cargo "$tool" --version >/dev/null 2>&1 || { echo "cargo $tool is required (rustup component add rustfmt clippy)" >&2; exit 1; }
done

compat="${QUERYGATE_COMPAT_REGISTRY:-}"
if [[ -z "$compat" && -d ../shared/providers/src ]]; then
  compat="$(cd ../shared/providers && pwd)"
fi
if [[ -z "$compat" ]]; then
  echo "note: ../shared/providers not found; the tests over real provider documents skip (under CI=true they fail)" >&2
fi
export QUERYGATE_COMPAT_REGISTRY="$compat"

# Disk: a clean build takes about 8 GB under target/ (debug for the tests, release for the
# deployment checks). Say what there is before starting, so that a full disk is told apart
# from a failing build. On CI (a fresh checkout) incremental compilation only costs space.
disk_report() { df -h . | awk 'NR == 2 { print "disk: " $4 " free of " $2 " on " $6 " (" $1 ")" }' >&2; }
disk_report
avail_kb="$(df -Pk . | awk 'NR == 2 { print $4 }')"
if [[ -n "$avail_kb" && "$avail_kb" -lt $((8 * 1024 * 1024)) ]]; then
  echo "warning: less than 8 GB free here; the build may run out of space" >&2
fi
if [[ "${CI:-}" == "true" ]]; then
  export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
fi

# The official MCP Python SDK for tests/python/mcp_client.py (the mcp_python test): a
# virtualenv under target/, made once and reused while the pinned version stays the same.
MCP_PY_VERSION=2.3.0
venv=target/py-venv
stamp="$venv/.querygate-mcp-$MCP_PY_VERSION"
python_bin="$(command -v python3 || true)"
if [[ -z "$python_bin" ]]; then
  echo "python3 is required for the MCP Python SDK test" >&2
  exit 1
fi
if [[ ! -f "$stamp" ]]; then
  rm -rf "$venv"
  mkdir -p target
  if ! "$python_bin" -m venv "$venv" >/dev/null 2>&1; then
    # Debian's python3 lacks venv without python3-venv.
    if command -v apt-get >/dev/null && [[ "$(id -u)" == 0 ]]; then
      echo "note: installing python3-venv" >&2
      apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    fi
    rm -rf "$venv"
    "$python_bin" -m venv "$venv"
  fi
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "mcp==$MCP_PY_VERSION"
  touch "$stamp"
fi
QUERYGATE_PYTHON="$(pwd)/$venv/bin/python"
export QUERYGATE_PYTHON

# The official MCP conformance suite for tests/integration/mcp_conformance.rs, installed
# under target/conformance when its pinned lock file changed (scripts/conformance.sh).
QUERYGATE_CONFORMANCE_DIR="$(scripts/conformance.sh install)"
export QUERYGATE_CONFORMANCE_DIR

# oidc-provider and playwright-core (pinned by tests/approval_web/package-lock.json) under
# target/approval-web, and Debian's chromium when missing, for the approval page's browser
# test (tests/integration/approve_web.rs; scripts/approval-web.sh).
QUERYGATE_APPROVAL_WEB_DIR="$(scripts/approval-web.sh install)"
export QUERYGATE_APPROVAL_WEB_DIR
# The MCP clients of the approval client matrix (tests/integration/approval_clients.rs): npm
# packages and a second Python virtualenv under target/, pinned by tests/clients' lock files.
while IFS='=' read -r name value; do
  export "$name=$value"
done < <(scripts/clients.sh install)

# nginx for the three-replica test (tests/integration/replicas.rs): Debian's nginx-light,
# installed when missing (CI runs as root on a fresh machine); nothing to do when present.
if ! command -v nginx >/dev/null && [[ ! -x /usr/sbin/nginx ]]; then
  if command -v apt-get >/dev/null && [[ "$(id -u)" == 0 ]]; then
    echo "note: installing nginx-light" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nginx-light >/dev/null
    # The package may start the system service on port 80; the test runs nginx of its own.
    if [[ -f /run/nginx.pid ]]; then
      kill "$(cat /run/nginx.pid)" 2>/dev/null || true
    fi
  else
    echo "note: nginx is not installed (apt-get install nginx-light); the three-replica test will be skipped, or fail under CI=true" >&2
  fi
fi

cargo fmt --all -- --check
# --workspace: the engine crate (crates/engine) too, whatever the workspace's default members.
cargo clippy --workspace --all-targets -- -D warnings

# A throwaway PostgreSQL 15 cluster on 127.0.0.1 for the tests that need one (audit,
# approvals, the chart's start check), unless QUERYGATE_TEST_DATABASE_URL already names a server; stopped at exit.
if [[ -z "${QUERYGATE_TEST_DATABASE_URL:-}" ]]; then
  eval "$(scripts/pg-test-cluster.sh start)"
  trap 'scripts/pg-test-cluster.sh stop "$QUERYGATE_TEST_PG_DIR"' EXIT
fi

# Dockerfile, release build from the image's build context, Helm chart (its production example
# started against the cluster above), dashboard.
./scripts/lint-deploy.sh
if [[ "${CI:-}" == "true" ]]; then
  # The release build's intermediate files (about 2 GB) are not needed by the tests.
  rm -rf target/release/deps target/release/build target/release/.fingerprint target/release/incremental
fi
disk_report


cargo test --workspace
disk_report

# A 30-second soak of the server `cargo test` built: 16 clients, mixed calls, no errors
# (the 10-minute, 64-client soak is `scripts/soak.sh`, not run here).
QUERYGATE_BIN=target/debug/querygate scripts/soak.sh --short
