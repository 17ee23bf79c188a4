#!/usr/bin/env bash
# scripts/make-with-test-broker.sh — run make targets against one test broker, then stop it.
#
#   scripts/make-with-test-broker.sh TARGET...
#
# Starts the broker (scripts/test-broker.sh start; LANES_TEST_* and LANES_PG_* apply), exports
# its LANES_TEST_URL, runs `$MAKE TARGET` for each target in order (all of them, even after one
# fails), stops the broker however this ends, and exits 1 if any target failed.
# A second broker with JWT auth on (port LANES_TEST_AUTH_PORT, default 6635, its own database)
# serves the SDKs' auth tests: LANES_TEST_AUTH_URL and LANES_TEST_JWT_SECRET (their HS256 key).
#
# The Makefile's test targets call this instead of starting the broker in their recipe: a recipe
# line naming $(MAKE) runs even under `make -n`, so a dry run used to start PostgreSQL and a
# broker (and leave PostgreSQL running).
#
# Environment: MAKE  the make to run (default make; the Makefile passes its own)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MAKE="${MAKE:-make}"
cd "$REPO"

if (($# == 0)); then
  echo "usage: $0 TARGET..." >&2
  exit 2
fi

AUTH_PORT="${LANES_TEST_AUTH_PORT:-6635}" # 6634 is scripts/fuzz-api.sh's
JWT_SECRET=lanes-sdk-auth-test-secret-0123456789
plain_broker() { LANES_TEST_JWT_SECRET='' LANES_JWT_ENABLED=false "$REPO/scripts/test-broker.sh" "$@"; }
auth_broker() {
  LANES_TEST_PORT="$AUTH_PORT" LANES_TEST_DB=lanes_sdk_auth_test LANES_TEST_BROKER_NOBUILD=1 \
    LANES_TEST_JWT_SECRET="$JWT_SECRET" "$REPO/scripts/test-broker.sh" "$@"
}
trap 'plain_broker stop; auth_broker stop' EXIT
plain_broker start
auth_broker start
export LANES_TEST_JWT_SECRET="$JWT_SECRET"
LANES_TEST_URL="$(plain_broker url)"
LANES_TEST_AUTH_URL="$(auth_broker url)"
export LANES_TEST_URL LANES_TEST_AUTH_URL

rc=0
for target in "$@"; do
  "$MAKE" "$target" || rc=1
done
exit "$rc"
