#!/usr/bin/env bash
# scripts/test-broker.sh — one broker for the SDK test suites.
#
#   scripts/test-broker.sh start   build bin/lanes, (re)create a fresh database, start the broker
#                                  in the background and wait until GET /health answers 200
#   scripts/test-broker.sh stop    stop it (SIGTERM, then SIGKILL after 10 s)
#   scripts/test-broker.sh url     print its base URL
#
# Environment:
#   LANES_TEST_PORT      broker port (default 6633)
#   LANES_TEST_DB        database name on the local cluster (default lanes_sdk_test); dropped
#                        and created anew on every start
#   LANES_TEST_BROKER_NOBUILD=1   use the existing bin/lanes without rebuilding
#   LANES_TEST_JWT_SECRET  when set, the broker runs with JWT auth on (HS256, this secret);
#                        without it (and without LANES_JWT_ENABLED=true) the broker serves the
#                        test fault scripts (LANES_TEST_FAULTS, server/internal/api/faults.go),
#                        which the SDK suites use to get a 409, a 5xx or a slow answer from a real
#                        broker (the broker refuses both at once)
# The local cluster comes from scripts/pg.sh (started here if needed; LANES_PG_* apply).
# Files: .lanes/test-broker-<port>.pid, .lanes/test-broker-<port>.log (one broker per port)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PORT="${LANES_TEST_PORT:-6633}"
DB="${LANES_TEST_DB:-lanes_sdk_test}"
STATE="$REPO/.lanes"
PIDFILE="$STATE/test-broker-$PORT.pid"
LOGFILE="$STATE/test-broker-$PORT.log"
BIN="$REPO/bin/lanes"
HEALTH_TIMEOUT="${LANES_TEST_BROKER_TIMEOUT:-30}"

log() { echo "test-broker: $*" >&2; }

alive() { [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

cmd_stop() {
  if ! alive; then
    rm -f "$PIDFILE"
    return 0
  fi
  local pid i
  pid="$(cat "$PIDFILE")"
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "broker $pid ignored SIGTERM for 10 s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$PIDFILE"
  log "stopped broker $pid"
}

cmd_start() {
  mkdir -p "$STATE"
  cmd_stop # a fresh broker on a fresh database every time

  "$REPO/scripts/pg.sh" start
  if [[ "${LANES_TEST_BROKER_NOBUILD:-0}" != 1 || ! -x "$BIN" ]]; then
    (cd "$REPO" && GOTOOLCHAIN=local go build -o "$BIN" ./server/cmd/lanes)
  fi

  PGOPTIONS="-c client_min_messages=warning" "$REPO/scripts/pg.sh" psql -d postgres -c "drop database if exists \"$DB\" with (force)" >/dev/null
  "$REPO/scripts/pg.sh" psql -d postgres -c "create database \"$DB\"" >/dev/null
  local dburl
  dburl="$(LANES_PG_DB="$DB" "$REPO/scripts/pg.sh" url)"

  log "starting $BIN on :$PORT (database $DB, log $LOGFILE)"
  # Without LANES_TEST_JWT_SECRET the broker takes LANES_JWT_* from the environment as it is
  # (scripts/fuzz-api.sh sets its own). With auth off it serves the test fault scripts, which the
  # broker refuses together with JWT.
  local auth=()
  if [[ -n "${LANES_TEST_JWT_SECRET:-}" ]]; then
    auth=(LANES_JWT_ENABLED=true LANES_JWT_SECRET="$LANES_TEST_JWT_SECRET")
  elif [[ ! "${LANES_JWT_ENABLED:-}" =~ ^(1|t|T|true|TRUE|True)$ ]]; then
    auth=(LANES_TEST_FAULTS="${LANES_TEST_FAULTS:-true}")
  fi
  env LANES_PORT="$PORT" LANES_DATABASE_URL="$dburl" "${auth[@]}" \
    setsid "$BIN" >"$LOGFILE" 2>&1 </dev/null &
  local pid=$!
  echo "$pid" >"$PIDFILE"

  local deadline=$((SECONDS + HEALTH_TIMEOUT)) code
  while ((SECONDS < deadline)); do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "broker exited during startup; its log:"
      cat "$LOGFILE" >&2
      rm -f "$PIDFILE"
      return 1
    fi
    code="$(curl -s -o /dev/null -m 2 -w '%{http_code}' "http://127.0.0.1:$PORT/health" || true)"
    if [[ "$code" == 200 ]]; then
      log "ready: http://127.0.0.1:$PORT (pid $pid)"
      return 0
    fi
    sleep 0.2
  done
  log "GET /health did not answer 200 within ${HEALTH_TIMEOUT}s (last: ${code:-none}); broker log:"
  cat "$LOGFILE" >&2
  cmd_stop
  return 1
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  url) echo "http://127.0.0.1:$PORT" ;;
  *) echo "usage: $0 start|stop|url" >&2; exit 2 ;;
esac
