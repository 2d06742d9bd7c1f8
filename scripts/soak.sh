#!/usr/bin/env bash
# Soak test (not part of CI): a release `querygate serve` and a mock upstream on 127.0.0.1,
# 64 clients sending mixed MCP calls for 10 minutes; reports errors (target 0), the server's
# RSS after the first window and at the end (target: growth under 10%) and p99 over time.
# Exits non-zero when a target is missed.
#
#   scripts/soak.sh                 # 10 minutes, 64 clients, target/release/querygate
#   scripts/soak.sh --short         # 30 seconds, 16 clients; RSS growth reported, not gated
#   SOAK_SECONDS=120 SOAK_CLIENTS=32 QUERYGATE_BIN=target/debug/querygate scripts/soak.sh
#
# Builds the release binary first when QUERYGATE_BIN is unset and it is missing. Needs only
# python3 (standard library). Audit records go to a temporary folder, as in production.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${SOAK_SECONDS:-600}
clients=${SOAK_CLIENTS:-64}
if [[ "${1:-}" == "--short" ]]; then
  seconds=${SOAK_SECONDS:-30}
  clients=${SOAK_CLIENTS:-16}
  export SOAK_GATE_RSS=0
fi
bin=${QUERYGATE_BIN:-}
if [[ -z "$bin" ]]; then
  bin="$root/target/release/querygate"
  [[ -x "$bin" ]] || (cd "$root" && cargo build --release --bin querygate)
fi

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

python3 "$root/scripts/soak.py" mock "$work/mock.port" &
pids+=($!)
for _ in $(seq 100); do [[ -s "$work/mock.port" ]] && break; sleep 0.1; done
[[ -s "$work/mock.port" ]] || { echo "soak: the mock upstream did not start" >&2; exit 1; }

cat > "$work/querygate.yaml" <<EOF
registry:
  root: $root/benches/fixtures/registry
providers:
  bench:
    base_url: http://127.0.0.1:$(cat "$work/mock.port")
credentials:
  process_env: false
tenants:
  - id: default
    mode: read_only
audit:
  file:
    dir: $work/audit
server:
  listen: 127.0.0.1:0
EOF

"$bin" --config "$work/querygate.yaml" serve 2> "$work/serve.log" &
server=$!
pids+=($server)
url=""
for _ in $(seq 300); do
  url=$(sed -n 's/^querygate: serving MCP at //p' "$work/serve.log" | head -1)
  [[ -n "$url" ]] && break
  kill -0 "$server" 2>/dev/null || break
  sleep 0.1
done
if [[ -z "$url" ]]; then
  echo "soak: querygate serve did not start:" >&2
  cat "$work/serve.log" >&2
  exit 1
fi

status=0
python3 "$root/scripts/soak.py" load "$url" "$server" "$seconds" "$clients" || status=$?
kill -0 "$server" 2>/dev/null || { echo "soak: the server died" >&2; status=1; }
exit "$status"
