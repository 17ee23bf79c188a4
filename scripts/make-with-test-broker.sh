#!/usr/bin/env bash
# scripts/make-with-test-broker.sh — run make targets against one test broker, then stop it.
#
#   scripts/make-with-test-broker.sh TARGET...
#
# Starts the broker (scripts/test-broker.sh start; LANES_TEST_* and LANES_PG_* apply), exports
# its LANES_TEST_URL, runs `$MAKE TARGET` for each target in order (all of them, even after one
# fails), stops the broker however this ends, and exits 1 if any target failed.
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

trap '"$REPO/scripts/test-broker.sh" stop' EXIT
"$REPO/scripts/test-broker.sh" start
LANES_TEST_URL="$("$REPO/scripts/test-broker.sh" url)"
export LANES_TEST_URL

rc=0
for target in "$@"; do
  "$MAKE" "$target" || rc=1
done
exit "$rc"
