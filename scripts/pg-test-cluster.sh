#!/usr/bin/env bash
# A throwaway PostgreSQL 15 cluster for the tests and benchmarks: a new data directory in a
# temporary folder, listening on a free port of 127.0.0.1 only, trust authentication (nothing
# but this machine's loopback can reach it), stopped and deleted when the caller is done.
#
#   scripts/pg-test-cluster.sh run -- CMD...   start, run CMD with the variables below, stop
#   scripts/pg-test-cluster.sh start           start; print `export` lines for the variables
#   scripts/pg-test-cluster.sh stop DIR        stop the cluster of DIR and delete DIR
#
# Variables given to the tests:
#   QUERYGATE_TEST_DATABASE_URL   admin URL (role postgres, database postgres)
#   QUERYGATE_TEST_PG_BIN         the PostgreSQL binaries (tests start private clusters too)
#   QUERYGATE_TEST_PG_DIR         the cluster's folder (data in DIR/data)
#
# Binaries: $QUERYGATE_PG_BIN, else /usr/lib/postgresql/15/bin; when they are missing and we
# are root with apt-get, postgresql-15 is installed. As root the server runs as `postgres`.
set -euo pipefail

pg_bin="${QUERYGATE_PG_BIN:-/usr/lib/postgresql/15/bin}"

ensure_binaries() {
  if [[ -x "$pg_bin/initdb" && -x "$pg_bin/pg_ctl" ]]; then
    return
  fi
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
    echo "note: installing postgresql-15 (the tests need a PostgreSQL server)" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql-15 >/dev/null
  fi
  if [[ ! -x "$pg_bin/initdb" ]]; then
    echo "error: PostgreSQL 15 binaries not found in $pg_bin (install postgresql-15 or set QUERYGATE_PG_BIN)" >&2
    exit 1
  fi
}

# Runs a PostgreSQL binary as the server's owner.
as_owner() {
  if [[ "$(id -u)" == 0 ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

start() {
  ensure_binaries
  local dir port
  dir="$(mktemp -d "${TMPDIR:-/tmp}/querygate-pg.XXXXXX")"
  chmod 0755 "$dir"
  if [[ "$(id -u)" == 0 ]]; then
    chown postgres: "$dir"
  fi
  as_owner "$pg_bin/initdb" -D "$dir/data" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 || {
    cat "$dir/initdb.log" >&2
    exit 1
  }
  for _ in 1 2 3 4 5; do
    port="$(free_port)"
    if as_owner "$pg_bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
      -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$dir -c max_connections=300" \
      start >/dev/null 2>&1; then
      echo "export QUERYGATE_TEST_DATABASE_URL='postgres://postgres@127.0.0.1:$port/postgres'"
      echo "export QUERYGATE_TEST_PG_BIN='$pg_bin'"
      echo "export QUERYGATE_TEST_PG_DIR='$dir'"
      return
    fi
  done
  echo "error: the test PostgreSQL cluster did not start; its log:" >&2
  cat "$dir/server.log" >&2 || true
  exit 1
}

stop() {
  local dir="$1"
  if [[ -z "$dir" || ! -d "$dir/data" ]]; then
    return
  fi
  as_owner "$pg_bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}

case "${1:-}" in
  start)
    start
    ;;
  stop)
    stop "${2:-}"
    ;;
  run)
    shift
    [[ "${1:-}" == "--" ]] && shift
    eval "$(start)"
    trap 'stop "$QUERYGATE_TEST_PG_DIR"' EXIT
    "$@"
    ;;
  *)
    echo "usage: $0 start | stop DIR | run -- CMD..." >&2
    exit 2
    ;;
esac
