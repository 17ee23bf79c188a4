#!/usr/bin/env bash
# scripts/pg.sh — a private, throwaway PostgreSQL cluster for local runs and tests.
#
#   scripts/pg.sh start    start the cluster (initialising it first if needed); no-op if running
#   scripts/pg.sh stop     stop it (fast shutdown); no-op if stopped
#   scripts/pg.sh status   print state; exit 0 if running, 3 if not
#   scripts/pg.sh url      print the connection URL of database "lanes"
#   scripts/pg.sh reset    stop, delete the data directory, start fresh
#   scripts/pg.sh restart [fast|immediate] [SECONDS]
#                          stop with that shutdown mode (default fast; immediate is a crash: the
#                          next start runs crash recovery), stay down SECONDS (default 0), start
#   scripts/pg.sh psql ... run psql on the running cluster (database "lanes" unless -d is given)
#
# Environment:
#   LANES_PG_PORT   TCP port (default 54329); the cluster listens on 127.0.0.1 only
#   LANES_PG_DIR    base directory (default $REPO/.lanes/pg): data/, sock/, postgres.log
#   LANES_PG_FAST   1 = fsync, synchronous_commit and full_page_writes off (tests only);
#                   default 0 (durable). Applied on every start.
#   LANES_PG_USER   superuser name (default postgres)
#   LANES_PG_DB     database created on start (default lanes)
#
# Every login is trusted but the role lanes_password_login's, which must give its password
# (scram-sha-256): the broker's wrong-password test logs in as it. The test creates the role.
#
# Runs as root (the server processes run as the "postgres" OS user via runuser) or as any
# other user (the cluster runs as that user). Installs PostgreSQL with apt-get when no
# initdb is found. Survives a postmaster killed with SIGKILL (stale postmaster.pid, zombie).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PORT="${LANES_PG_PORT:-54329}"
BASE="${LANES_PG_DIR:-$REPO/.lanes/pg}"
FAST="${LANES_PG_FAST:-0}"
PGUSER_NAME="${LANES_PG_USER:-postgres}"
DBNAME="${LANES_PG_DB:-lanes}"
MAX_CONN="${LANES_PG_MAX_CONNECTIONS:-200}"

log() { echo "pg.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

IS_ROOT=0
[[ "$(id -u)" == 0 ]] && IS_ROOT=1

# --- locate or install the PostgreSQL server binaries ------------------------------------
find_bindir() {
  local d
  if [[ -n "${LANES_PG_BINDIR:-}" && -x "${LANES_PG_BINDIR}/initdb" ]]; then
    echo "$LANES_PG_BINDIR"; return 0
  fi
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k4 -n -r); do
    if [[ -x "$d/initdb" && -x "$d/pg_ctl" && -x "$d/postgres" ]]; then echo "$d"; return 0; fi
  done
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(readlink -f "$(command -v initdb)")"; return 0
  fi
  return 1
}

install_postgres() {
  log "PostgreSQL server not found; installing it with apt-get"
  local sudo=()
  if [[ $IS_ROOT == 0 ]]; then
    command -v sudo >/dev/null 2>&1 || die "initdb not found and not root: install PostgreSQL (apt-get install postgresql)"
    sudo=(sudo -n)
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq postgresql >/dev/null
}

BINDIR="$(find_bindir || true)"
ensure_bindir() {
  if [[ -z "$BINDIR" ]]; then
    install_postgres
    BINDIR="$(find_bindir || true)"
    [[ -n "$BINDIR" ]] || die "PostgreSQL installed but initdb still not found"
  fi
}

# --- where the cluster lives --------------------------------------------------------------
# As root the server runs as "postgres", which must be able to reach $BASE. If the checkout
# lives somewhere postgres cannot traverse (e.g. under a 0700 home), fall back to /tmp.
if [[ $IS_ROOT == 1 && -z "${LANES_PG_DIR:-}" ]]; then
  id postgres >/dev/null 2>&1 || true
  if id postgres >/dev/null 2>&1 && ! runuser -u postgres -- test -x "$REPO" 2>/dev/null; then
    BASE="/tmp/lanes-pg-$PORT"
  fi
fi
DATA="$BASE/data"
SOCK="$BASE/sock"
LOGFILE="$BASE/postgres.log"

# as_owner CMD...: run CMD as the OS user that owns the cluster.
as_owner() {
  if [[ $IS_ROOT == 1 ]]; then
    (cd "$BASE" && runuser -u postgres -- "$@")
  else
    (cd "$BASE" && "$@")
  fi
}

psql_cmd() {
  local psql="$BINDIR/psql"
  [[ -x "$psql" ]] || psql="psql"
  PGCONNECT_TIMEOUT=5 "$psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$(running_port)" -U "$PGUSER_NAME" "$@"
}

# --- state --------------------------------------------------------------------------------
pid_state() { # prints the State letter of a pid (R, S, Z, ...) or nothing
  awk '/^State:/ {print $2}' "/proc/$1/status" 2>/dev/null || true
}

postmaster_pid() { # pid from postmaster.pid, or empty
  [[ -f "$DATA/postmaster.pid" ]] && head -n1 "$DATA/postmaster.pid" 2>/dev/null | tr -d '[:space:]' || true
}

running_port() {
  local p=""
  [[ -f "$DATA/postmaster.pid" ]] && p="$(sed -n 4p "$DATA/postmaster.pid" 2>/dev/null | tr -d '[:space:]')"
  echo "${p:-$PORT}"
}

# Processes of this cluster (their cwd is the data directory), excluding $1.
cluster_procs() {
  local p cwd real
  real="$(readlink -f "$DATA" 2>/dev/null || echo "$DATA")"
  for p in /proc/[0-9]*; do
    cwd="$(readlink "$p/cwd" 2>/dev/null || true)"
    [[ "$cwd" == "$real" ]] || continue
    [[ "$(pid_state "${p#/proc/}")" == Z ]] && continue
    [[ "${p#/proc/}" == "${1:-}" ]] && continue
    echo "${p#/proc/}"
  done
}

# is_running: 0 if a live postmaster owns the data dir. Cleans up after a dead one.
is_running() {
  local pid state i
  pid="$(postmaster_pid)"
  [[ -n "$pid" ]] || return 1
  state="$(pid_state "$pid")"
  if [[ -n "$state" && "$state" != Z ]]; then
    # Alive. Make sure it is a postgres process (pid reuse after a crash).
    if tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q postgres; then
      return 0
    fi
  fi
  # Dead, a zombie, or a recycled pid: the postmaster is gone.
  log "postmaster $pid is gone (state '${state:-none}'); cleaning up"
  # Orphaned backends notice postmaster death within a second or two; give them time,
  # then stop whatever of this cluster is left so the shared memory is released.
  for i in $(seq 1 50); do
    [[ -z "$(cluster_procs "$pid")" ]] && break
    sleep 0.1
  done
  for p in $(cluster_procs "$pid"); do
    log "killing leftover cluster process $p"
    kill -9 "$p" 2>/dev/null || true
  done
  # A zombie keeps its pid until reaped; postgres would take it for a live postmaster.
  for i in $(seq 1 30); do
    [[ "$(pid_state "$pid")" == Z ]] || break
    sleep 0.1
  done
  rm -f "$DATA/postmaster.pid"
  return 1
}

# --- actions ------------------------------------------------------------------------------
prepare_dirs() {
  mkdir -p "$BASE" "$SOCK"
  if [[ $IS_ROOT == 1 ]]; then
    chown postgres: "$BASE" "$SOCK"
    [[ -d "$DATA" ]] && chown -R postgres: "$DATA"
    [[ -f "$LOGFILE" ]] && chown postgres: "$LOGFILE"
  fi
  chmod 0700 "$BASE" 2>/dev/null || true
}

init_cluster() {
  [[ -f "$DATA/PG_VERSION" ]] && return 0
  log "initialising cluster in $DATA"
  rm -rf "$DATA"
  as_owner "$BINDIR/initdb" -D "$DATA" -U "$PGUSER_NAME" --auth=trust \
    --encoding=UTF8 --no-locale --no-instructions >"$BASE/initdb.log" 2>&1 \
    || { cat "$BASE/initdb.log" >&2; die "initdb failed"; }
  echo "include_if_exists = 'lanes.conf'" >>"$DATA/postgresql.conf"
}

write_conf() {
  local durable=on
  [[ "$FAST" == 1 || "$FAST" == true ]] && durable=off
  local tmp="$BASE/lanes.conf.tmp"
  cat >"$tmp" <<EOF
# Written by scripts/pg.sh on every start; edits are overwritten.
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$SOCK'
max_connections = $MAX_CONN
fsync = $durable
synchronous_commit = $durable
full_page_writes = $durable
log_min_messages = warning
log_line_prefix = '%m [%p] %d '
EOF
  [[ $IS_ROOT == 1 ]] && chown postgres: "$tmp"
  mv -f "$tmp" "$DATA/lanes.conf"
}

# The role the wrong-password test (server/cmd/lanes) logs in as must give its password. Its
# pg_hba.conf lines go ahead of initdb's trust lines (the first line that matches decides), on
# every start, so a cluster initialised before them gets them too.
PASSWORD_ROLE=lanes_password_login
require_password_role() {
  local hba="$DATA/pg_hba.conf" tmp="$BASE/pg_hba.conf.tmp"
  local marker="# Written by scripts/pg.sh: $PASSWORD_ROLE must give its password."
  grep -qxF "$marker" "$hba" && return 0
  {
    echo "$marker"
    echo "local all $PASSWORD_ROLE scram-sha-256"
    echo "host all $PASSWORD_ROLE 127.0.0.1/32 scram-sha-256"
    echo "host all $PASSWORD_ROLE ::1/128 scram-sha-256"
    cat "$hba"
  } >"$tmp"
  chmod 0600 "$tmp"
  [[ $IS_ROOT == 1 ]] && chown postgres: "$tmp"
  mv -f "$tmp" "$hba"
}

ensure_db() {
  local i
  for i in $(seq 1 50); do
    psql_cmd -d postgres -tAc 'select 1' >/dev/null 2>&1 && break
    sleep 0.1
  done
  if [[ "$(psql_cmd -d postgres -tAc "select 1 from pg_database where datname = '$DBNAME'")" != 1 ]]; then
    psql_cmd -d postgres -c "create database \"$DBNAME\"" >/dev/null
    log "created database $DBNAME"
  fi
}

cmd_start() {
  ensure_bindir
  prepare_dirs
  if is_running; then
    # Durability follows this call (make run wants fsync on, make test may turn it off);
    # the three settings are reloadable, so no restart is needed.
    write_conf
    require_password_role
    as_owner "$BINDIR/pg_ctl" -D "$DATA" reload >/dev/null 2>&1 || true
    ensure_db
    local running_mode=durable
    [[ "$FAST" == 1 || "$FAST" == true ]] && running_mode="fast (fsync off)"
    log "already running (pid $(postmaster_pid), port $(running_port), $running_mode, data $DATA)"
    return 0
  fi
  init_cluster
  write_conf
  require_password_role
  if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
    die "port $PORT on 127.0.0.1 is taken by another server (another checkout's cluster?); set LANES_PG_PORT"
  fi
  if ! as_owner "$BINDIR/pg_ctl" -D "$DATA" -l "$LOGFILE" -w -t 60 start >/dev/null; then
    tail -n 40 "$LOGFILE" >&2 || true
    die "PostgreSQL did not start (log: $LOGFILE)"
  fi
  ensure_db
  local mode=durable
  [[ "$FAST" == 1 || "$FAST" == true ]] && mode="fast (fsync off)"
  log "started (pid $(postmaster_pid), port $PORT, $mode, data $DATA)"
}

cmd_stop() {
  if ! is_running; then
    log "not running"
    return 0
  fi
  ensure_bindir
  as_owner "$BINDIR/pg_ctl" -D "$DATA" -m fast -w -t 60 stop >/dev/null || {
    log "fast shutdown failed; sending SIGQUIT"
    kill -QUIT "$(postmaster_pid)" 2>/dev/null || true
    sleep 1
  }
  is_running && die "could not stop PostgreSQL" || true
  log "stopped"
}

cmd_status() {
  if is_running; then
    echo "running: pid $(postmaster_pid), port $(running_port), data $DATA"
    return 0
  fi
  echo "stopped (data $DATA)"
  return 3
}

cmd_url() {
  echo "postgres://$PGUSER_NAME@127.0.0.1:$(running_port)/$DBNAME?sslmode=disable"
}

cmd_restart() {
  local mode="${1:-fast}" down="${2:-0}"
  [[ "$mode" == fast || "$mode" == immediate ]] || die "restart: mode must be fast or immediate, got '$mode'"
  if is_running; then
    ensure_bindir
    as_owner "$BINDIR/pg_ctl" -D "$DATA" -m "$mode" -w -t 60 stop >/dev/null || die "pg_ctl stop -m $mode failed"
    is_running && die "still running after pg_ctl stop -m $mode" || true
  fi
  sleep "$down"
  cmd_start
}

cmd_reset() {
  cmd_stop
  rm -rf "$DATA" "$LOGFILE" "$BASE/initdb.log"
  cmd_start
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  url) cmd_url ;;
  reset) cmd_reset ;;
  restart) shift; cmd_restart "$@" ;;
  psql)
    shift
    is_running || die "not running (scripts/pg.sh start)"
    psql_cmd -d "$DBNAME" "$@"
    ;;
  *) echo "usage: $0 start|stop|status|url|reset|restart [fast|immediate] [seconds]|psql [args]" >&2; exit 2 ;;
esac
