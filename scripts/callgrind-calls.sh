#!/usr/bin/env bash
# Instructions per tool call, counted by valgrind's callgrind: repeatable whatever else the
# machine is doing, unlike CPU time (benches/mcp_load.rs measures time).
#
#   cargo build --release && scripts/callgrind-calls.sh [BINARY] [CALLS]
#
# Serves the benchmark's fixture registry (audit off, read_only) on 127.0.0.1 under callgrind,
# warms up, then counts CALLS `server_info` calls (default 300) over keep-alive HTTP/1.1 as
# MCP 2026-07-28 JSON-RPC POSTs, and prints the instructions per call: in total and inside the
# main parts (HTTP connection, authentication and the layers after it, rmcp, the tool-call
# pipeline, the tool and its rendering). Needs valgrind and python3.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
binary="${1:-$root/target/release/querygate}"
calls="${2:-300}"
command -v valgrind >/dev/null || { echo "valgrind is required (apt-get install valgrind)" >&2; exit 1; }
[[ -x "$binary" ]] || { echo "no querygate binary at $binary (cargo build --release)" >&2; exit 1; }

work="$(mktemp -d)"
server=""
cleanup() {
  [[ -n "$server" ]] && kill -INT "$server" 2>/dev/null && wait "$server" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
cat >"$work/querygate.yaml" <<EOF
registry:
  root: $root/benches/fixtures/registry
providers:
  bench:
    base_url: http://127.0.0.1:9
credentials:
  process_env: false
tenants:
  - id: default
    mode: read_only
audit:
  enabled: false
server:
  listen: 127.0.0.1:$port
  drain:
    delay: 0s
EOF

cat >"$work/drive.py" <<'EOF'
import http.client, json, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
    "name": "server_info", "arguments": {},
    "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
              "io.modelcontextprotocol/clientInfo": {"name": "callgrind-calls", "version": "1"},
              "io.modelcontextprotocol/clientCapabilities": {}}}})
headers = {"content-type": "application/json", "accept": "application/json, text/event-stream",
           "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "server_info"}
connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
for _ in range(n):
    connection.request("POST", "/mcp", body, headers)
    response = connection.getresponse()
    text = response.read()
    if response.status != 200 or b'"isError":true' in text:
        sys.exit(f"server_info failed: {response.status} {text[:300]!r}")
EOF

valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.%p" \
  "$binary" serve --config "$work/querygate.yaml" >"$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 120); do
  python3 "$work/drive.py" "$port" 1 >/dev/null 2>&1 && break
  kill -0 "$server" 2>/dev/null || { cat "$work/serve.log" >&2; exit 1; }
  sleep 1
done
python3 "$work/drive.py" "$port" 50
callgrind_control -z "$server" >/dev/null 2>&1
python3 "$work/drive.py" "$port" "$calls"
callgrind_control -d "$server" >/dev/null 2>&1
sleep 1
dump="$(ls "$work"/callgrind.*.1 2>/dev/null | head -1)"
[[ -n "$dump" ]] || { echo "callgrind wrote no dump" >&2; exit 1; }

total="$(awk '/^totals:/ {print $2}' "$dump")"
callgrind_annotate --inclusive=yes --threshold=100 "$dump" 2>/dev/null | grep -E '^\s*[0-9,]+ \(' >"$work/inclusive.txt"
# The largest inclusive count of the frames matching a pattern (a function can appear
# under several source files when parts of it were inlined).
part() { { grep -E "$1" "$work/inclusive.txt" || true; } | awk '{gsub(",","",$1); v = $1 + 0; if (v > max) max = v} END {print max + 0}'; }
echo "querygate server_info, $calls calls, $(basename "$binary"): instructions per call"
printf '%10d  total (every thread, the runtime included)\n' $((total / calls))
while IFS='|' read -r label pattern; do
  value="$(part "$pattern")"
  printf '%10d  %s\n' $(( ${value:-0} / calls )) "$label"
done <<'EOF'
the HTTP connection (hyper, tower-http layers, router)|src/http/server.rs:querygate::http::server::serve::\{\{closure\}\}::\{\{closure\}\}::\{\{closure\}\}( |$)
authentication and everything after it|src/auth/mod.rs:<querygate::auth::Auth<S> as tower_service::Service<.*>>::call::\{\{closure\}\}( |$)
rmcp's handling of the POST|StreamableHttpService<S,M>::handle_post::\{\{closure\}\}( |$)
rmcp's request task (the handler inside)|rmcp::service::serve_inner::\{\{closure\}\}( |$)
the tool-call pipeline (prepare, layers, tool)|pipeline/observe.rs:(rmcp::handler::server::<impl rmcp::service::Service|<core::pin::Pin<P> as core::future::future::Future>::poll)
the tool and its rendering (dispatch)|dispatch.rs:querygate::mcp::pipeline::dispatch::dispatch::\{\{closure\}\}( |$)
EOF
