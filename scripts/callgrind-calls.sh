#!/usr/bin/env bash
# Instructions per tool call, counted by valgrind's callgrind: repeatable whatever else the
# machine is doing, unlike CPU time (benches/mcp_load.rs measures time).
#
#   cargo build --release && scripts/callgrind-calls.sh [BINARY] [CALLS] [TOOL]
#
# Serves the benchmark's fixture registry (audit off unless AUDIT=file, read_only) on 127.0.0.1 under callgrind,
# warms up, then counts CALLS calls (default 300) of TOOL over keep-alive HTTP/1.1 as
# MCP JSON-RPC POSTs, and prints the instructions per call: in total and inside the
# main parts (HTTP connection, authentication and the layers after it, rmcp, the tool-call
# pipeline, the tool and its rendering). TOOL is `server_info` (default) or `select`:
# `run_select_query` of benches/mcp_load.rs's statement over 100 rows of `bench.items.items`,
# answered by a mock upstream in python3 outside callgrind (its instructions are not counted).
# AUDIT=file counts the durable audit too (the file sink, strict: a record and an fdatasync
# per call, as the shared peer bench runs it); the default is the audit off. AUDIT=otel is
# AUDIT=file with `audit.format: otel` (each record an OTLP/JSON LogRecord); AUDIT=file+otlp
# is AUDIT=file with the `audit.otlp` copy, exported to an OTLP/HTTP receiver in python3
# outside callgrind that answers 200 (the exporter's task is counted, the receiver is not).
# PROTOCOL is the revision the requests name: 2026-07-28 (default: per-request `_meta` and the
# Mcp-Method and Mcp-Name headers) or 2025-11-25 (the MCP-Protocol-Version header alone, no
# initialize: how the shared peer bench sends its calls).
# KEEP_DUMP=FILE keeps callgrind's dump there (for callgrind_annotate).
# Needs valgrind and python3.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
binary="${1:-$root/target/release/querygate}"
calls="${2:-300}"
tool="${3:-server_info}"
case "$tool" in server_info | select) ;; *) echo "TOOL is server_info or select, not $tool" >&2; exit 2 ;; esac
protocol="${PROTOCOL:-2026-07-28}"
case "$protocol" in 2026-07-28 | 2025-11-25) ;; *) echo "PROTOCOL is 2026-07-28 or 2025-11-25, not $protocol" >&2; exit 2 ;; esac
command -v valgrind >/dev/null || { echo "valgrind is required (apt-get install valgrind)" >&2; exit 1; }
[[ -x "$binary" ]] || { echo "no querygate binary at $binary (cargo build --release)" >&2; exit 1; }

work="$(mktemp -d)"
server=""
mock=""
otlp_receiver=""
cleanup() {
  [[ -n "$otlp_receiver" ]] && kill "$otlp_receiver" 2>/dev/null && wait "$otlp_receiver" 2>/dev/null || true
  [[ -n "$server" ]] && kill -INT "$server" 2>/dev/null && wait "$server" 2>/dev/null || true
  [[ -n "$mock" ]] && kill "$mock" 2>/dev/null && wait "$mock" 2>/dev/null || true
  [[ -n "${KEEP_DUMP:-}" ]] && cp "$work"/callgrind.*.1 "$KEEP_DUMP" 2>/dev/null; rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port="$(free_port)"
upstream=9
if [[ "$tool" == select ]]; then
  upstream="$(free_port)"
  # The rows of benches/mcp_load.rs's mock: 100 items of the fixture's item schema.
  cat >"$work/mock.py" <<'EOF'
import http.server, json, sys
rows = [{"id": 9007199254740993 + i, "seq": i, "name": f"item-{i:04}", "group": f"group-{i % 20:02}",
         "size": (i * 37) % 1000, "active": i % 3 == 0, "score": i / 7.0,
         "created_at": "2026-01-02T03:04:05Z", "owner": {"login": f"user{i % 9}", "id": i % 9},
         "tags": ["a", "b"]} for i in range(100)]
body = json.dumps(rows).encode()
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
EOF
  python3 "$work/mock.py" "$upstream" &
  mock=$!
fi
file_audit="audit:
  enabled: true
  sink: file
  failure_mode: strict
  file:
    dir: $work/audit"
case "${AUDIT:-off}" in
  off) audit_section="audit:
  enabled: false" ;;
  file) audit_section="$file_audit" ;;
  otel) audit_section="$file_audit
  format: otel" ;;
  file+otlp)
    receiver="$(free_port)"
    cat >"$work/receiver.py" <<'EOF'
import http.server, sys
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
EOF
    python3 "$work/receiver.py" "$receiver" &
    otlp_receiver=$!
    audit_section="$file_audit
  otlp:
    endpoint: http://127.0.0.1:$receiver/v1/logs" ;;
  *) echo "AUDIT is off, file, otel or file+otlp, not $AUDIT" >&2; exit 2 ;;
esac
cat >"$work/querygate.yaml" <<EOF
registry:
  root: $root/benches/fixtures/registry
providers:
  bench:
    base_url: http://127.0.0.1:$upstream
credentials:
  process_env: false
tenants:
  - id: default
    mode: read_only
$audit_section
server:
  listen: 127.0.0.1:$port
  drain:
    delay: 0s
EOF

cat >"$work/drive.py" <<'EOF'
import http.client, json, sys
port, n, tool, protocol = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
name, arguments = (("run_select_query",
                    {"sql": 'SELECT id, name, "group", size, active, score FROM bench.items.items'})
                   if tool == "select" else ("server_info", {}))
params = {"name": name, "arguments": arguments}
headers = {"content-type": "application/json", "accept": "application/json, text/event-stream",
           "mcp-protocol-version": protocol}
if protocol == "2026-07-28":
    params["_meta"] = {"io.modelcontextprotocol/protocolVersion": protocol,
                       "io.modelcontextprotocol/clientInfo": {"name": "callgrind-calls", "version": "1"},
                       "io.modelcontextprotocol/clientCapabilities": {}}
    headers.update({"mcp-method": "tools/call", "mcp-name": name})
body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
for _ in range(n):
    connection.request("POST", "/mcp", body, headers)
    response = connection.getresponse()
    text = response.read()
    if response.status != 200 or b'"isError":true' in text:
        sys.exit(f"{name} failed: {response.status} {text[:300]!r}")
EOF

valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.%p" \
  "$binary" serve --config "$work/querygate.yaml" >"$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 120); do
  python3 "$work/drive.py" "$port" 1 "$tool" "$protocol" >/dev/null 2>&1 && break
  kill -0 "$server" 2>/dev/null || { cat "$work/serve.log" >&2; exit 1; }
  sleep 1
done
python3 "$work/drive.py" "$port" 50 "$tool" "$protocol"
callgrind_control -z "$server" >/dev/null 2>&1
python3 "$work/drive.py" "$port" "$calls" "$tool" "$protocol"
callgrind_control -d "$server" >/dev/null 2>&1
sleep 1
dump="$(ls "$work"/callgrind.*.1 2>/dev/null | head -1)"
[[ -n "$dump" ]] || { echo "callgrind wrote no dump" >&2; exit 1; }

total="$(awk '/^totals:/ {print $2}' "$dump")"
callgrind_annotate --inclusive=yes --threshold=100 "$dump" 2>/dev/null | grep -E '^\s*[0-9,]+ \(' >"$work/inclusive.txt"
# The largest inclusive count of the frames matching a pattern (a function can appear
# under several source files when parts of it were inlined).
part() { { grep -E "$1" "$work/inclusive.txt" || true; } | awk '{gsub(",","",$1); v = $1 + 0; if (v > max) max = v} END {print max + 0}'; }
echo "querygate $tool, $calls calls, audit ${AUDIT:-off}, protocol $protocol, $(basename "$binary"): instructions per call"
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
the audit record, caller's side (prepare, queue, wait; AUDIT=file)|auditor.rs:querygate::audit::auditor::Auditor::record::\{\{closure\}\}( |$)
the audit writer thread (link, write, fdatasync, head; AUDIT=file)|file.rs:querygate::audit::file::Writer::run( |$)
the OTLP copy's exporter task (encode, POST; AUDIT=file+otlp)|exporter.rs:querygate::audit::otel::exporter::Worker::run::\{\{closure\}\}( |$)
EOF
