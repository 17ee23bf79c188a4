#!/usr/bin/env bash
# scripts/check-make-dry-run.sh — fail if `make -n` of a target that starts services starts any.
#
#   scripts/check-make-dry-run.sh [TARGET...]   (default: test test-sdk conformance fuzz-api run)
#
# Points PostgreSQL (LANES_PG_DIR, LANES_PG_PORT) and the test brokers (LANES_TEST_PORT,
# LANES_FUZZ_PORT) at a throwaway directory and free ports, runs `make -n TARGET`, and fails if
# the cluster's data directory or a broker pid file appeared. Whatever a failing dry run started is stopped again.
# `make verify` runs it. Environment: MAKE  the make to check (default make)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
(($#)) || set -- test test-sdk conformance fuzz-api run
MAKE="${MAKE:-make}"

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# World-readable: as root, pg.sh runs PostgreSQL as the postgres user, which must reach the data.
new_scratch() { tmp="$(mktemp -d)" && chmod 755 "$tmp"; }
new_scratch
export LANES_PG_DIR="$tmp/pg" LANES_PG_PORT LANES_TEST_PORT LANES_FUZZ_PORT
LANES_PG_PORT="$(free_port)"
LANES_TEST_PORT="$(free_port)"
LANES_FUZZ_PORT="$LANES_TEST_PORT" # its broker's pid file is the test broker's
unset LANES_DATABASE_URL
pidfile="$REPO/.lanes/test-broker-$LANES_TEST_PORT.pid"
cleanup() {
  scripts/test-broker.sh stop >/dev/null 2>&1 || true
  [[ -d "$LANES_PG_DIR" ]] && scripts/pg.sh stop >/dev/null 2>&1 || true
  rm -rf "$tmp" "$REPO/.lanes/test-broker-$LANES_TEST_PORT.log"
}
trap cleanup EXIT

rc=0
for target in "$@"; do
  "$MAKE" -n "$target" >/dev/null 2>&1 || { echo "make -n $target failed" >&2; rc=1; }
  if [[ -e "$LANES_PG_DIR" || -e "$pidfile" ]]; then
    echo "error: make -n $target started PostgreSQL or a broker (a dry run must start nothing)" >&2
    rc=1
    cleanup
    new_scratch
    LANES_PG_DIR="$tmp/pg"
  fi
done
((rc == 0)) && echo "make -n $* starts nothing"
exit "$rc"
