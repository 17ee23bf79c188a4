#!/usr/bin/env bash
# scripts/group-list-cost.sh — what a page of the consumer-group list costs on many cursors.
#
#   scripts/group-list-cost.sh fill DB GROUPS QUEUES PARTITIONS
#       (re)create database DB on the scripts/pg.sh cluster, let bin/lanes apply the schema, then
#       insert with SQL alone GROUPS groups × QUEUES queues × PARTITIONS partitions a queue, one
#       cursor per (group, partition): 5 1 100000 is 500,000 cursors in five rows, 100 5 1000 the
#       same cursors in 500 rows. Every partition holds offsets 0-9 in two segments an hour or two
#       old (every 50th trimmed to 5-9); a cursor's committed offset varies from -1 to 9, one in
#       ten holds a live lease and one in ten an expired one. 12-15 s on a loaded 2-core machine.
#   scripts/group-list-cost.sh time BIN DB [ROUNDS]
#       start broker BIN on DB (its lag gauges off), request each page of the list ROUNDS times
#       (default 5) after one unmeasured request, print the median and the slowest of the wall
#       time and of the page statement's CPU time in PostgreSQL, stop it. The pages: the first
#       100 rows by key, the 100 after the 200th by key, and the same 100 by offset (the last two
#       only when there are that many).
#   scripts/group-list-cost.sh explain BIN DB
#       the same pages once each, with auto_explain logging the plan of every statement of the
#       list (EXPLAIN ANALYZE, BUFFERS) to the cluster's log; prints those plans.
#   scripts/group-list-cost.sh gauges BIN DB [ROUNDS]
#       start broker BIN on DB with its lag gauges refreshed every second (or as far apart as the
#       build spaces slow refreshes), let one refresh pass unmeasured, then for ROUNDS refreshes
#       (default 5) print the median and the slowest of the refresh's wall time (the broker's
#       lanes_queue_lag_refresh_seconds) and of its statements' CPU time in PostgreSQL, and the
#       time the broker then waits to the next refresh's start; stop it.
#   scripts/group-list-cost.sh gauges-explain BIN DB
#       one lag refresh with auto_explain logging the plan of each of its statements; prints them.
#
# Environment: LANES_PG_* as for scripts/pg.sh; LANES_COST_PORT the broker's port (default 8844).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PG="$REPO/scripts/pg.sh"
PORT="${LANES_COST_PORT:-8844}"
STATE="$REPO/.lanes"
PGLOG="${LANES_PG_DIR:-$REPO/.lanes/pg}/postgres.log"

log() { echo "group-list-cost: $*" >&2; }
die() { log "error: $*"; exit 1; }

db_url() { LANES_PG_DB="$1" "$PG" url; }

# start_broker BIN DB [EXTRA_URL_PARAMS]: a broker on PORT, in the background, until /health is 200.
start_broker() {
  local bin="$1" db="$2" extra="${3:-}" url
  url="$(db_url "$db")$extra"
  mkdir -p "$STATE"
  # No lag gauges unless LAG_REFRESH_MS says: their refresh sums every cursor too.
  LANES_PORT="$PORT" LANES_BIND_ADDR=127.0.0.1 LANES_DATABASE_URL="$url" LANES_LOG_LEVEL=warn LANES_LAG_REFRESH_MS="${LAG_REFRESH_MS:-0}" \
    "$bin" >>"$STATE/group-list-cost-$PORT.log" 2>&1 &
  BROKER_PID=$!
  local i
  for i in $(seq 1 300); do
    if curl -sf -o /dev/null "http://127.0.0.1:$PORT/health"; then
      return 0
    fi
    kill -0 "$BROKER_PID" 2>/dev/null || die "broker exited (log: $STATE/group-list-cost-$PORT.log)"
    sleep 0.1
  done
  die "broker not healthy after 30 s"
}

stop_broker() {
  [[ -n "${BROKER_PID:-}" ]] || return 0
  kill -TERM "$BROKER_PID" 2>/dev/null || true
  wait "$BROKER_PID" 2>/dev/null || true
  BROKER_PID=
}
trap stop_broker EXIT

cmd_fill() {
  [[ $# == 4 ]] || die "usage: fill DB GROUPS QUEUES PARTITIONS"
  local db="$1" groups="$2" queues="$3" partitions="$4"
  "$PG" start
  PGOPTIONS="-c client_min_messages=warning" "$PG" psql -d postgres -qc "drop database if exists \"$db\" with (force)"
  "$PG" psql -d postgres -qc "create database \"$db\""
  [[ -x "$REPO/bin/lanes" ]] || (cd "$REPO" && go build -o bin/lanes ./server/cmd/lanes)
  start_broker "$REPO/bin/lanes" "$db" # applies the schema
  stop_broker
  local start=$SECONDS
  "$PG" psql -d "$db" -v ON_ERROR_STOP=1 -q \
    -v groups="$groups" -v queues="$queues" -v partitions="$partitions" <<'SQL'
SET synchronous_commit = off;
-- The rows are consistent by construction: no foreign-key check per row (a superuser's setting).
SET session_replication_role = replica;
INSERT INTO lanes.queues (name) SELECT 'q' || lpad(i::text, 4, '0') FROM generate_series(0, :queues - 1) i;
-- Every 50th partition was trimmed: offsets 0-4 are gone (log_start 5).
INSERT INTO lanes.partitions (queue_id, name, last_offset, log_start, last_write_at)
    SELECT q.id, 'p' || lpad(i::text, 6, '0'), 9, CASE WHEN i % 50 = 0 THEN 5 ELSE 0 END, now() - interval '1 hour'
    FROM lanes.queues q, generate_series(0, :partitions - 1) i;
INSERT INTO lanes.segments (partition_id, base_offset, end_offset, created_at, frames)
    SELECT p.id, s.base, s.base + 4, now() - make_interval(secs => 3600 * (2 - s.base / 5) + (substr(p.name, 2)::int % 600)), '\x00'::bytea
    FROM lanes.partitions p, (VALUES (0), (5)) s(base)
    WHERE s.base = 5 OR p.log_start = 0;
INSERT INTO lanes.consumer_groups (consumer_group, queue_id, subscription_mode, subscription_timestamp)
    SELECT 'g' || lpad(g::text, 3, '0'), q.id, 'all', now() - interval '3 hours'
    FROM lanes.queues q, generate_series(0, :groups - 1) g;
-- k mixes the group and the partition, so each cursor's place differs from its neighbours'.
INSERT INTO lanes.consumers (partition_id, consumer_group, queue_id, committed, batch_end, lease_id, lease_expires_at,
        total_consumed, last_consumed_at)
    SELECT p.id, 'g' || lpad(g::text, 3, '0'), p.queue_id, c.committed, c.committed,
        CASE WHEN k % 10 IN (0, 1) THEN gen_random_uuid() END,
        CASE k % 10 WHEN 0 THEN now() + interval '1 hour' WHEN 1 THEN now() - interval '1 hour' END,
        c.committed + 1, CASE WHEN c.committed >= 0 THEN now() - interval '10 minutes' END
    FROM lanes.partitions p, generate_series(0, :groups - 1) g,
        LATERAL (SELECT substr(p.name, 2)::int * 7 + g * 13 AS k) m,
        LATERAL (SELECT k % 11 - 1 AS committed) c;
SQL
  "$PG" psql -d "$db" -qc "VACUUM ANALYZE"
  log "filled $db in $((SECONDS - start)) s: $("$PG" psql -d "$db" -tAc "SELECT (SELECT count(*) FROM lanes.consumers) || ' cursors, ' || (SELECT count(*) FROM lanes.partitions) || ' partitions, ' || (SELECT count(*) FROM lanes.consumer_groups) || ' (group, queue) rows'")"
}

# pages: NAME QUERY pairs of the pages measured, given the database's row count.
pages() {
  local db="$1" rows after
  rows="$("$PG" psql -d "$db" -tAc "SELECT count(*) FROM lanes.consumer_groups")"
  echo "first-100-by-key limit=100"
  if ((rows > 300)); then
    after="$(curl -sf -D - -o /dev/null "http://127.0.0.1:$PORT/api/v1/consumer-groups?limit=200" |
      tr -d '\r' | awk -F': ' 'tolower($1) == "x-lanes-next-after" {print $2}')"
    [[ -n "$after" ]] || die "no X-Lanes-Next-After after 200 rows"
    echo "rows-201-300-by-key limit=100&after=$after"
    echo "rows-201-300-by-offset limit=100&offset=200"
  fi
}

# summary NAME: the median and the largest of the numbers on stdin.
summary() {
  sort -g | awk -v name="$1" '{v[NR] = $1} END {
    printf "%s median %7.1f  max %7.1f", name, NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, v[NR]}'
}

cmd_time() {
  [[ $# -ge 2 ]] || die "usage: time BIN DB [ROUNDS]"
  local bin="$1" db="$2" rounds="${3:-5}" page name query i mark url
  # log_executor_stats logs each statement's CPU time (getrusage) to the cluster's log: on a
  # machine others load, it moves far less than the wall time.
  start_broker "$bin" "$db" "&options=-c%20log_executor_stats%3Don%20-c%20log_min_messages%3Dlog"
  local list
  mapfile -t list < <(pages "$db") # before timing: it reads a page of its own
  for page in "${list[@]}"; do
    read -r name query <<<"$page"
    url="http://127.0.0.1:$PORT/api/v1/consumer-groups?$query"
    curl -sf -o /dev/null "$url" # warm-up
    local walls=() cpus=()
    for i in $(seq 1 "$rounds"); do
      mark="$(wc -l <"$PGLOG")"
      walls+=("$(curl -sf -o /dev/null -w '%{time_total}' "$url" | awk '{print 1000 * $1}')")
      sleep 0.2
      # The page's statement is the costliest one of its window ("! u s user, s s system, ...").
      cpus+=("$(tail -n +"$((mark + 1))" "$PGLOG" |
        awk '$2 ~ /^[0-9]/ && $3 == "s" && $4 == "user," {if ($2 + $5 > top) top = $2 + $5} END {print 1000 * top}')")
    done
    printf '%-24s %s ms, %s ms (%d requests, %s)\n' "$name" \
      "$(printf '%s\n' "${walls[@]}" | summary wall)" "$(printf '%s\n' "${cpus[@]}" | summary "statement CPU")" \
      "$rounds" "$bin"
  done
  stop_broker
}

cmd_explain() {
  [[ $# == 2 ]] || die "usage: explain BIN DB"
  local bin="$1" db="$2" page name query mark
  # auto_explain logs each statement's plan, as run, with its real times and buffers.
  start_broker "$bin" "$db" "&options=-c%20session_preload_libraries%3Dauto_explain%20-c%20log_min_messages%3Dlog%20-c%20auto_explain.log_min_duration%3D10%20-c%20auto_explain.log_analyze%3Don%20-c%20auto_explain.log_buffers%3Don%20-c%20auto_explain.log_timing%3Don"
  local list
  mapfile -t list < <(pages "$db")
  for page in "${list[@]}"; do
    read -r name query <<<"$page"
    mark="$(wc -l <"$PGLOG")"
    curl -sf -o /dev/null "http://127.0.0.1:$PORT/api/v1/consumer-groups?$query"
    sleep 0.5
    echo "=== $name ($query)"
    tail -n +"$((mark + 1))" "$PGLOG"
  done
  stop_broker
}

# gauge NAME: the value of an unlabelled series on the broker's Prometheus page (empty if absent).
gauge() {
  curl -sf "http://127.0.0.1:$PORT/metrics/prometheus" | awk -v name="$1" '$1 == name {print $2}'
}

# next_refresh LAST: waits for a lag refresh that ended after the Unix time LAST, prints its time.
next_refresh() {
  local last="$1" at i
  for i in $(seq 1 3000); do
    at="$(gauge lanes_queue_lag_refresh_timestamp_seconds)"
    if [[ -n "$at" ]] && awk -v a="$at" -v l="$last" 'BEGIN {exit !(a > l)}'; then
      echo "$at"
      return 0
    fi
    sleep 0.1
  done
  die "no lag refresh within 300 s"
}

cmd_gauges() {
  [[ $# -ge 2 ]] || die "usage: gauges BIN DB [ROUNDS]"
  local bin="$1" db="$2" rounds="${3:-5}" i at mark
  LAG_REFRESH_MS=1000 start_broker "$bin" "$db" "&options=-c%20log_executor_stats%3Don%20-c%20log_min_messages%3Dlog"
  at="$(next_refresh 0)" # unmeasured
  local walls=() cpus=() waits=()
  for i in $(seq 1 "$rounds"); do
    mark="$(wc -l <"$PGLOG")"
    at="$(next_refresh "$at")"
    walls+=("$(gauge lanes_queue_lag_refresh_seconds | awk '{print 1000 * $1}')")
    waits+=("$(gauge lanes_queue_lag_refresh_interval_seconds | awk '{print 1000 * $1} END {if (!NR) print "nan"}')")
    # Every statement the broker ran since the last refresh ended: this refresh's, and the
    # health reads and timer polls (well under a millisecond each). Not the "[u s user, s s
    # system total]" lines: those are the connection's totals.
    cpus+=("$(tail -n +"$((mark + 1))" "$PGLOG" |
      awk '$2 ~ /^[0-9]/ && $3 == "s" && $4 == "user," {sum += $2 + $5} END {print 1000 * sum}')")
  done
  printf 'lag refresh %s ms, %s ms, next after %s ms (%d refreshes, %s)\n' \
    "$(printf '%s\n' "${walls[@]}" | summary wall)" "$(printf '%s\n' "${cpus[@]}" | summary "statement CPU")" \
    "$(printf '%s\n' "${waits[@]}" | summary wait)" "$rounds" "$bin"
  stop_broker
}

cmd_gauges_explain() {
  [[ $# == 2 ]] || die "usage: gauges-explain BIN DB"
  local bin="$1" db="$2" mark
  mark="$(wc -l <"$PGLOG")"
  LAG_REFRESH_MS=600000 start_broker "$bin" "$db" "&options=-c%20session_preload_libraries%3Dauto_explain%20-c%20log_min_messages%3Dlog%20-c%20auto_explain.log_min_duration%3D10%20-c%20auto_explain.log_analyze%3Don%20-c%20auto_explain.log_buffers%3Don%20-c%20auto_explain.log_timing%3Don"
  next_refresh 0 >/dev/null
  sleep 0.5
  tail -n +"$((mark + 1))" "$PGLOG"
  stop_broker
}

case "${1:-}" in
  fill) shift; cmd_fill "$@" ;;
  time) shift; cmd_time "$@" ;;
  explain) shift; cmd_explain "$@" ;;
  gauges) shift; cmd_gauges "$@" ;;
  gauges-explain) shift; cmd_gauges_explain "$@" ;;
  *) sed -n '2,28p' "$0" >&2; exit 2 ;;
esac
