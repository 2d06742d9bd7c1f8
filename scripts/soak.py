#!/usr/bin/env python3
"""Soak load for `querygate serve` (driven by scripts/soak.sh; standard library only).

  soak.py mock PORT_FILE
      A mock upstream on 127.0.0.1 for the `bench` fixture provider: `/items` is 3 pages of
      100 rows linked by `Link`; `/items?page=0` is 10 rows. Writes its port to PORT_FILE.

  soak.py load URL PID SECONDS CLIENTS
      CLIENTS threads send mixed MCP 2026-07-28 calls (small and paginated selects,
      validate_select_query, server_info, list_providers, describe_resource) as raw JSON-RPC
      POSTs over keep-alive HTTP/1.1 until SECONDS have passed. Every window (a tenth of the
      run, at least 5 s) prints calls, errors, p50/p99 latency and the server's RSS. At the
      end: errors (target 0), RSS after the first window and at the end (target: growth
      under 10%; not gated when SOAK_GATE_RSS=0), p99 per window. Exits 1 when a target is
      missed.
"""

import http.client
import json
import os
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PAGE_ROWS = 100
PAGES = 3


def rows(page, count):
    out = []
    for j in range(count):
        i = page * PAGE_ROWS + j
        out.append({"id": 9007199254740993 + i, "seq": i, "name": "item-%05d" % i,
                    "group": "group-%02d" % (i % 20), "size": (i * 37) % 1000,
                    "active": i % 3 == 0, "score": i / 7.0,
                    "created_at": "2026-01-02T03:04:05Z",
                    "owner": {"login": "user%d" % (i % 9), "id": i % 9}, "tags": ["a", "b"]})
    return json.dumps(out).encode()


def mock(port_file):
    bodies = {0: rows(0, 10)}
    for n in range(1, PAGES + 1):
        bodies[n] = rows(n, PAGE_ROWS)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            url = urllib.parse.urlparse(self.path)
            if url.path != "/items":
                self.send_error(404)
                return
            query = urllib.parse.parse_qs(url.query)
            try:
                page = int(query.get("page", ["1"])[0])
            except ValueError:
                page = 1
            page = page if page in bodies else 1
            body = bodies[page]
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            if 1 <= page < PAGES:
                host = self.headers.get("host", "127.0.0.1")
                self.send_header("link", '<http://%s/items?page=%d>; rel="next"' % (host, page + 1))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(port_file + ".tmp", port_file)
    server.serve_forever()


CALLS = [
    ("run_select_query", {"sql": "SELECT id, name FROM bench.items.items WHERE page = 0"}, 10),
    ("run_select_query", {"sql": 'SELECT id, name, "group", size FROM bench.items.items'}, PAGES * PAGE_ROWS),
    ("run_select_query", {"sql": 'SELECT "group", count(*) AS n FROM bench.items.items GROUP BY "group"'}, 20),
    ("validate_select_query", {"sql": "SELECT id FROM bench.items.items"}, None),
    ("server_info", {}, None),
    ("list_providers", {}, None),
    ("describe_resource", {"provider": "bench", "service": "items", "resource": "items"}, None),
]


def rss_kib(pid):
    with open("/proc/%s/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.latencies = []
        self.errors = []

    def record(self, ms, error):
        with self.lock:
            if error is None:
                self.latencies.append(ms)
            else:
                self.errors.append(error)

    def take(self):
        with self.lock:
            out = (self.latencies, self.errors)
            self.latencies, self.errors = [], []
            return out


def call_once(conn, path, name, arguments, expected_rows, seq):
    arguments = dict(arguments)
    if name not in ("server_info", "list_providers"):  # the tools without `format`
        arguments["format"] = "json"
    body = json.dumps({"jsonrpc": "2.0", "id": seq, "method": "tools/call", "params": {
        "name": name, "arguments": arguments,
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientInfo": {"name": "soak", "version": "1"},
                  "io.modelcontextprotocol/clientCapabilities": {}}}})
    conn.request("POST", path, body=body, headers={
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call",
        "mcp-name": name,
    })
    response = conn.getresponse()
    data = response.read()
    if response.status != 200:
        return "HTTP %d" % response.status
    reply = json.loads(data)
    if "error" in reply:
        return "JSON-RPC %s" % reply["error"].get("code")
    result = reply.get("result", {})
    if result.get("isError"):
        return (result.get("structuredContent") or {}).get("error", {}).get("code", "tool error")
    if expected_rows is not None:
        got = len((result.get("structuredContent") or {}).get("rows", []))
        if got != expected_rows:
            return "%s rows instead of %s" % (got, expected_rows)
    return None


def client(url, deadline, stats, index):
    parsed = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=60)
    seq = 0
    while time.monotonic() < deadline:
        name, arguments, expected = CALLS[(index + seq) % len(CALLS)]
        seq += 1
        started = time.monotonic()
        try:
            error = call_once(conn, parsed.path, name, arguments, expected, seq)
        except Exception as err:  # a transport failure is an error of the run
            error = "%s: %s" % (type(err).__name__, err)
            conn.close()
            conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=60)
        stats.record((time.monotonic() - started) * 1000.0, error)
    conn.close()


def percentile(values, q):
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def load(url, pid, seconds, clients):
    seconds, clients = float(seconds), int(clients)
    window = max(5.0, seconds / 10.0)
    stats = Stats()
    initial = rss_kib(pid)
    started = time.monotonic()
    deadline = started + seconds
    threads = [threading.Thread(target=client, args=(url, deadline, stats, i), daemon=True)
               for i in range(clients)]
    for t in threads:
        t.start()
    print("soak: %d clients for %.0f s against %s (server pid %s, RSS %.1f MiB before load)"
          % (clients, seconds, url, pid, initial / 1024.0), flush=True)
    print("%8s %8s %7s %9s %9s %9s" % ("t (s)", "calls", "errors", "p50 ms", "p99 ms", "RSS MiB"), flush=True)
    windows = []
    all_errors = {}
    total = 0
    next_mark = started + window
    while True:
        now = time.monotonic()
        alive = any(t.is_alive() for t in threads)
        if now < next_mark and alive:
            time.sleep(min(0.2, next_mark - now))
            continue
        latencies, errors = stats.take()
        rss = rss_kib(pid)
        total += len(latencies) + len(errors)
        for e in errors:
            all_errors[e] = all_errors.get(e, 0) + 1
        if latencies or errors:
            windows.append((now - started, len(latencies) + len(errors), len(errors),
                            percentile(latencies, 0.5), percentile(latencies, 0.99), rss))
            print("%8.0f %8d %7d %9.1f %9.1f %9.1f" % (windows[-1][0], windows[-1][1], windows[-1][2],
                                                     windows[-1][3], windows[-1][4], rss / 1024.0), flush=True)
        next_mark += window
        if not alive:
            break
    for t in threads:
        t.join()
    if not windows:
        print("soak: no calls were made")
        return 1
    warm = windows[0][5]
    end = windows[-1][5]
    growth = (end - warm) * 100.0 / warm if warm else float("nan")
    errors = sum(all_errors.values())
    print("soak: %d calls, %d errors %s" % (total, errors, json.dumps(all_errors) if all_errors else ""))
    print("soak: RSS before load %.1f MiB, after the first window %.1f MiB, at the end %.1f MiB: growth %+.1f%% (target under 10%%)"
          % (initial / 1024.0, warm / 1024.0, end / 1024.0, growth))
    print("soak: p99 per window (ms): %s" % ", ".join("%.0f" % w[4] for w in windows))
    # A short run reports RSS growth without gating on it (allocator warm-up dominates).
    gate_rss = os.environ.get("SOAK_GATE_RSS", "1") != "0"
    ok = errors == 0 and (growth < 10.0 or not gate_rss)
    print("soak: %s" % ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "mock":
        mock(sys.argv[2])
    elif len(sys.argv) == 6 and sys.argv[1] == "load":
        sys.exit(load(*sys.argv[2:]))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
