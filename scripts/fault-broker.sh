#!/usr/bin/env bash
# scripts/fault-broker.sh — a broker and a PostgreSQL cluster that a test may kill and restart.
#
# The SDK fault tests (sdk-go faults_integration_test.go, sdk-python tests/test_faults.py,
# sdk-js test/faults.test.ts) run their SDK's consume loop and producer through a broker SIGKILL
# and a PostgreSQL restart. The shared test broker (scripts/test-broker.sh) and the cluster of
# `make test` serve every other test at the same time, so each fault test gets its own broker
# process and its own cluster from this script, keyed by LANES_FAULT_DIR.
#
#   scripts/fault-broker.sh start         start the cluster (initialised on first use) and the
#                                         broker; wait until GET /health answers 200
#   scripts/fault-broker.sh kill          SIGKILL the broker and wait until it is gone
#   scripts/fault-broker.sh stop-pg       stop PostgreSQL (fast shutdown); the broker keeps running
#   scripts/fault-broker.sh start-pg      start it again
#   scripts/fault-broker.sh restart-pg    both at once
#   scripts/fault-broker.sh stop          stop the broker and the cluster, delete LANES_FAULT_DIR
#
# Environment (all required but the last two):
#   LANES_FAULT_DIR       state directory /tmp/lanes-fault-* (PostgreSQL runs as the postgres user
#                         when root, and must reach it): pg/, spool/, broker.pid, broker.log, and
#                         owner (the pid of the test process that ran the first start; a start
#                         stops the broker and cluster of every such directory whose owner is gone)
#   LANES_FAULT_PORT      the broker's port; `start` after `kill` reuses it
#   LANES_FAULT_PG_PORT   the cluster's port
#   LANES_FAULT_ENV       further broker settings, space-separated KEY=value (optional)
#   LANES_FAULT_TIMEOUT   seconds `start` waits for /health (default 30)
# Uses bin/lanes, built when missing (`make test` builds it through scripts/test-broker.sh).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${LANES_FAULT_DIR:?set LANES_FAULT_DIR}"
PORT="${LANES_FAULT_PORT:?set LANES_FAULT_PORT}"
PG_PORT="${LANES_FAULT_PG_PORT:?set LANES_FAULT_PG_PORT}"
BIN="$REPO/bin/lanes"
PIDFILE="$DIR/broker.pid"
LOGFILE="$DIR/broker.log"
HEALTH_TIMEOUT="${LANES_FAULT_TIMEOUT:-30}"

log() { echo "fault-broker: $*" >&2; }

pg() { LANES_PG_PORT="$PG_PORT" LANES_PG_DIR="$DIR/pg" LANES_PG_FAST=1 "$REPO/scripts/pg.sh" "$@"; }

broker_pid() { [[ -f "$PIDFILE" ]] && cat "$PIDFILE" || true; }

alive() {
  local pid
  pid="$(broker_pid)"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && [[ "$(awk '/^State:/ {print $2}' "/proc/$pid/status" 2>/dev/null)" != Z ]]
}

wait_gone() {
  local pid="$1" i
  for i in $(seq 1 200); do
    kill -0 "$pid" 2>/dev/null || return 0
    [[ "$(awk '/^State:/ {print $2}' "/proc/$pid/status" 2>/dev/null)" == Z ]] && return 0
    sleep 0.05
  done
  log "broker $pid still alive"
  return 1
}

# A test process that died without its cleanup (a Go test timeout, a SIGKILL) leaves its broker
# and cluster running: the next start stops those whose test process (owner) is gone.
sweep_orphans() {
  local d owner
  for d in /tmp/lanes-fault-*/; do
    d="${d%/}"
    [[ "$d" != "$DIR" && -f "$d/owner" ]] || continue
    owner="$(cat "$d/owner")"
    kill -0 "$owner" 2>/dev/null && continue
    log "stopping the broker and cluster of $d: its test process $owner is gone"
    LANES_FAULT_DIR="$d" LANES_FAULT_PORT=0 LANES_FAULT_PG_PORT=0 "${BASH_SOURCE[0]}" stop || true
  done
}

health_code() { curl -s -o /dev/null -m 2 -w '%{http_code}' "http://127.0.0.1:$PORT/health" || true; }

cmd_start() {
  sweep_orphans
  mkdir -p "$DIR/spool"
  [[ -f "$DIR/owner" ]] || echo "$PPID" >"$DIR/owner" # the test process that runs this script
  pg start 2>>"$DIR/pg.out"
  alive && { log "broker already running (pid $(broker_pid))"; return 0; }
  if [[ ! -x "$BIN" ]]; then
    (cd "$REPO" && GOTOOLCHAIN=local go build -o "$BIN" ./server/cmd/lanes)
  fi
  local extra=()
  # shellcheck disable=SC2206 # KEY=value words, split on purpose
  [[ -n "${LANES_FAULT_ENV:-}" ]] && extra=($LANES_FAULT_ENV)
  # The same spool directory across restarts: pushes spooled before a kill drain after it.
  env LANES_PORT="$PORT" LANES_BIND_ADDR=127.0.0.1 LANES_DATABASE_URL="$(pg url)" \
    LANES_SPOOL_DIR="$DIR/spool" LANES_LOG_LEVEL=warn "${extra[@]}" \
    setsid "$BIN" >>"$LOGFILE" 2>&1 </dev/null &
  local pid=$!
  echo "$pid" >"$PIDFILE"
  local deadline=$((SECONDS + HEALTH_TIMEOUT)) code=""
  while ((SECONDS < deadline)); do
    if ! alive; then
      log "broker exited during startup; its log ends:"
      tail -n 30 "$LOGFILE" >&2
      return 1
    fi
    code="$(health_code)"
    [[ "$code" == 200 ]] && return 0
    sleep 0.05
  done
  log "GET /health did not answer 200 within ${HEALTH_TIMEOUT}s (last: ${code:-none}); log ends:"
  tail -n 30 "$LOGFILE" >&2
  return 1
}

cmd_kill() {
  alive || { log "broker not running"; return 0; }
  local pid
  pid="$(broker_pid)"
  kill -KILL "$pid"
  wait_gone "$pid"
  rm -f "$PIDFILE"
}

cmd_restart_pg() {
  pg stop 2>>"$DIR/pg.out"
  pg start 2>>"$DIR/pg.out"
}

cmd_stop() {
  if alive; then
    local pid
    pid="$(broker_pid)"
    kill -TERM "$pid" 2>/dev/null || true
    wait_gone "$pid" || kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$PIDFILE"
  [[ -d "$DIR/pg" ]] && pg stop 2>>"$DIR/pg.out"
  [[ "$DIR" == /tmp/* ]] && rm -rf "$DIR"
  return 0
}

case "${1:-}" in
  start) cmd_start ;;
  kill) cmd_kill ;;
  stop-pg) pg stop 2>>"$DIR/pg.out" ;;
  start-pg) pg start 2>>"$DIR/pg.out" ;;
  restart-pg) cmd_restart_pg ;;
  stop) cmd_stop ;;
  *) echo "usage: $0 start|kill|stop-pg|start-pg|restart-pg|stop" >&2; exit 2 ;;
esac
