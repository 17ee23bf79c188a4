#!/usr/bin/env bash
# scripts/fuzz-api.sh — the bounded schemathesis run of openapi.yaml against a real broker
# (tools/fuzz/README.md). `make fuzz-api` runs it, and `make test` through that.
#
#   scripts/fuzz-api.sh [schemathesis run option...]   e.g. --include-operation-id push
#
# Starts a broker with JWT on (HS256, a fixed test secret) over a fresh database of the local
# cluster (scripts/test-broker.sh), seeds it (tools/fuzz/seed.py), runs schemathesis from
# tools/fuzz/.venv with tools/fuzz/schemathesis.toml, the hooks of tools/fuzz/hooks.py and an
# admin token, stops the broker however this ends, and exits with schemathesis's status
# (non-zero on any failure).
#
# Environment:
#   LANES_FUZZ_PORT   broker port (default 6634; the SDK test broker has 6633)
#   LANES_FUZZ_DB     database name (default lanes_fuzz_api), dropped and created anew
# LANES_PG_* apply as for scripts/pg.sh. Files: .lanes/test-broker-<port>.log (the broker),
# .lanes/fuzz-api/ (schemathesis's working directory, emptied on every run; seed.json there holds
# what was seeded).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SCHEMATHESIS="$REPO/tools/fuzz/.venv/bin/schemathesis"
[[ -x "$SCHEMATHESIS" ]] || { echo "fuzz-api: $SCHEMATHESIS missing: run make deps (or make fuzz-api)" >&2; exit 1; }

export LANES_TEST_PORT="${LANES_FUZZ_PORT:-6634}" LANES_TEST_DB="${LANES_FUZZ_DB:-lanes_fuzz_api}"
export LANES_JWT_ENABLED=true LANES_JWT_ALGORITHM=HS256 LANES_JWT_SECRET=lanes-fuzz-api-test-secret-0123456789
export LANES_LOG_LEVEL=warn
# The broker refuses test faults together with JWT; the SDK auth tests' secret
# (scripts/make-with-test-broker.sh) is not this broker's.
unset LANES_TEST_FAULTS LANES_TEST_JWT_SECRET

trap '"$REPO/scripts/test-broker.sh" stop' EXIT
"$REPO/scripts/test-broker.sh" start
url="$("$REPO/scripts/test-broker.sh" url)"
LANES_FUZZ_TOKEN="$(python3 "$REPO/tools/fuzz/mktoken.py")"
export LANES_FUZZ_TOKEN

# Hypothesis and schemathesis keep state (a cache of past failures they replay first) in their
# working directory: a fresh one keeps the run out of the tree and the same on every machine.
rm -rf "$REPO/.lanes/fuzz-api"
mkdir -p "$REPO/.lanes/fuzz-api"
cd "$REPO/.lanes/fuzz-api"
# Queues with messages, a consumer group, dead letters and KV keys for the valid requests to
# reach; tools/fuzz/hooks.py points them there and keeps them clear of the rules across fields.
export LANES_FUZZ_URL="$url" LANES_FUZZ_SEED_FILE="$REPO/.lanes/fuzz-api/seed.json"
export SCHEMATHESIS_HOOKS="$REPO/tools/fuzz/hooks.py"
python3 "$REPO/tools/fuzz/seed.py" "$LANES_FUZZ_SEED_FILE"
rc=0
"$SCHEMATHESIS" --config-file "$REPO/tools/fuzz/schemathesis.toml" run "$REPO/openapi.yaml" \
  --url "$url" --mode all --suppress-health-check all --no-color "$@" || rc=$?
if ((rc != 0)); then
  echo "fuzz-api: FAILED (each failure above has a curl to reproduce it; start a broker as this script does, or read its log: $REPO/.lanes/test-broker-$LANES_TEST_PORT.log)" >&2
fi
exit "$rc"
