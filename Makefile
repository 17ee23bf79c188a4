# Lanes — build, generate, lint and test everything from the repository root.
#
#   make run        broker on http://localhost:6632 (PORT=…) over LANES_DATABASE_URL, else a local PostgreSQL (scripts/pg.sh)
#   make test       every test suite (Go modules, then the JS and Python SDKs against one broker, then conformance, then fuzz-api)
#   make conformance  the cross-SDK conformance suite: every case through go, js, python and python-async (own database and broker; CONFORMANCE_FLAGS='-sdk python-async' for one; docs/conformance.md)
#   make fuzz-api   the bounded schemathesis run of openapi.yaml against a JWT broker (own database; tools/fuzz/README.md)
#   make generate   regenerate code from openapi.yaml (Go server + client, TypeScript, Python)
#   make verify     regenerate, lint the spec, fail if generated code differs from what is committed
#   make lint       golangci-lint, tsc + eslint, ruff + mypy
#   make deps       npm ci and the dist/ build (sdk-js), Python venvs (sdk-python/.venv, tools/fuzz/.venv)
#   make build      bin/lanes
#   make bench      benchmark smoke run
#   make soak       fault soak: random broker kills, PostgreSQL crashes and dropped connections under load, then a loss check (SOAK_DURATION=5m; docs/operations.md)
#   make upgrade-audit  old commits' brokers upgraded to this one on real databases (needs git history; docs/operations.md)

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

export GOTOOLCHAIN := local

REPO := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
SPEC ?= openapi.yaml
SPEC_ABS := $(abspath $(SPEC))
BIN := $(REPO)/bin
# Go modules: every `use` of go.work (server, sdk-go, conformance, bench, ...).
GO_MODULES = $(or $(patsubst $(REPO)/%,%,$(shell go list -m -f '{{.Dir}}' 2>/dev/null)),server sdk-go conformance)
GO_TEST_TIMEOUT ?= 15m
GO_TEST_FLAGS ?=
BENCH_FLAGS ?=
PORT ?= 6632

PYTHON ?= python3
VENV := sdk-python/.venv
VPY := $(VENV)/bin/python
VENV_STAMP := $(VENV)/.installed
NPM_STAMP := sdk-js/node_modules/.package-lock.json
FUZZ_VENV := tools/fuzz/.venv
FUZZ_STAMP := $(FUZZ_VENV)/.installed

# A recipe line naming $(MAKE) runs even under `make -n`, so lines that start services pass
# make to their script as $(SUBMAKE): make -n does not treat a reference through a variable as
# recursive, and a dry run starts nothing (scripts/check-make-dry-run.sh in `make verify`).
SUBMAKE = $(MAKE)

OAPI_CODEGEN := $(BIN)/oapi-codegen
GOLANGCI_LINT := $(BIN)/golangci-lint

# Generated outputs (checked by `make verify`).
GEN_PATHS := server/internal/api/gen sdk-go/internal/gen sdk-js/src/generated sdk-python/src/lanes/_generated

# Spec linting and the npm tools never phone home.
export REDOCLY_TELEMETRY := off
export REDOCLY_SUPPRESS_UPDATE_NOTICE := true
export NO_UPDATE_NOTIFIER := 1

.PHONY: help
help:
	@sed -n 's/^#   make /make /p' $(MAKEFILE_LIST)

# ---------------------------------------------------------------------------------------------
# Tools (pinned in tools/go.mod and tools/golangci/go.mod, built into ./bin)

$(OAPI_CODEGEN): tools/go.mod tools/go.sum
	cd tools && GOWORK=off go build -o $@ github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen

$(GOLANGCI_LINT): tools/golangci/go.mod tools/golangci/go.sum
	cd tools/golangci && GOWORK=off go build -o $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint

.PHONY: tools
tools: $(OAPI_CODEGEN) $(GOLANGCI_LINT)

# ---------------------------------------------------------------------------------------------
# Dependencies

$(NPM_STAMP): sdk-js/package.json sdk-js/package-lock.json
	cd sdk-js && npm ci --no-audit --no-fund

$(VENV_STAMP): sdk-python/requirements-dev.txt sdk-python/pyproject.toml
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --disable-pip-version-check -r sdk-python/requirements-dev.txt
	$(VPY) -m pip install -q --disable-pip-version-check -e sdk-python
	touch $@

$(FUZZ_STAMP): tools/fuzz/requirements.txt
	test -x $(FUZZ_VENV)/bin/python || $(PYTHON) -m venv $(FUZZ_VENV)
	$(FUZZ_VENV)/bin/python -m pip install -q --disable-pip-version-check -r tools/fuzz/requirements.txt
	touch $@

.PHONY: deps deps-js deps-python deps-fuzz
deps: deps-js deps-python deps-fuzz tools
# The package ships no install script (npm 11 warns about one), so npm ci does not build dist/.
deps-js:
	cd sdk-js && npm ci --no-audit --no-fund && npm run --silent build
deps-python:
	rm -f $(VENV_STAMP)
	$(MAKE) $(VENV_STAMP)
deps-fuzz:
	rm -f $(FUZZ_STAMP)
	$(MAKE) $(FUZZ_STAMP)

# ---------------------------------------------------------------------------------------------
# Code generation from openapi.yaml

.PHONY: generate generate-go generate-js generate-python check-spec
check-spec:
	@test -f "$(SPEC_ABS)" || { echo "error: $(SPEC) not found (the OpenAPI spec is the source of truth for generation)" >&2; exit 1; }

generate: generate-go generate-js generate-python

generate-go: check-spec $(OAPI_CODEGEN)
	$(OAPI_CODEGEN) -config server/internal/api/gen/oapi-codegen.yaml "$(SPEC_ABS)"
	$(OAPI_CODEGEN) -config sdk-go/internal/gen/oapi-codegen.yaml "$(SPEC_ABS)"

generate-js: check-spec $(NPM_STAMP)
	cd sdk-js && LANES_SPEC="$(SPEC_ABS)" npm run --silent generate

generate-python: check-spec $(VENV_STAMP)
	cd sdk-python && .venv/bin/datamodel-codegen --input "$(SPEC_ABS)" --output src/lanes/_generated/models.py

# ---------------------------------------------------------------------------------------------
# Verify: spec lints, and the committed generated code is exactly what the spec produces.

.PHONY: verify lint-spec
lint-spec: check-spec $(NPM_STAMP)
	cd sdk-js && npx --no-install redocly lint --config "$(REPO)/redocly.yaml" "$(SPEC_ABS)"

verify: lint-spec generate verify-plain-go-client verify-plain-python-models verify-make-dry-run
	@echo "--- checking generated code is committed and up to date"
	@if ! git diff --exit-code --stat -- $(GEN_PATHS); then \
	  echo "error: generated code differs from the commit; run 'make generate' and commit the result" >&2; \
	  git diff -- $(GEN_PATHS) | head -n 60 >&2 || true; exit 1; fi
	@untracked="$$(git ls-files --others --exclude-standard -- $(GEN_PATHS))"; \
	if [[ -n "$$untracked" ]]; then \
	  echo "error: untracked generated files (run 'make generate' and commit them):" >&2; \
	  echo "$$untracked" >&2; exit 1; fi
	@echo "verify: OK"

# Users generate their own clients from openapi.yaml: one from plain oapi-codegen v2 (client +
# models, no overlay or other option) must build. It borrows sdk-go's go.mod for the runtime module.
.PHONY: verify-plain-go-client
verify-plain-go-client: check-spec $(OAPI_CODEGEN)
	@echo "--- checking a plain oapi-codegen client of $(SPEC) builds"
	@tmp="$$(mktemp -d)"; trap 'rm -rf "$$tmp"' EXIT; \
	printf 'package: plainclient\noutput: %s/client.gen.go\ngenerate:\n  client: true\n  models: true\n' "$$tmp" >"$$tmp/oapi-codegen.yaml"; \
	$(OAPI_CODEGEN) -config "$$tmp/oapi-codegen.yaml" "$(SPEC_ABS)"; \
	sed 's#^module .*#module plainclient#' sdk-go/go.mod >"$$tmp/go.mod"; cp sdk-go/go.sum "$$tmp/"; \
	cd "$$tmp" && GOWORK=off GOFLAGS=-mod=mod go vet ./...

.PHONY: verify-make-dry-run
verify-make-dry-run:
	@echo "--- checking make -n of the targets that start services starts nothing"
	@MAKE='$(SUBMAKE)' scripts/check-make-dry-run.sh

# The README tells Python users to run datamodel-codegen with --strict-nullable and nothing else:
# models made so must accept null wherever the spec lets the broker send it.
.PHONY: verify-plain-python-models
verify-plain-python-models: check-spec $(VENV_STAMP)
	@echo "--- checking plain datamodel-codegen models of $(SPEC) accept the broker's nulls"
	$(VPY) scripts/check-plain-python-models.py "$(SPEC_ABS)"

# ---------------------------------------------------------------------------------------------
# Lint

.PHONY: lint lint-go lint-js lint-python
lint:
	@rc=0; \
	for t in lint-go lint-js lint-python; do $(MAKE) $$t || { echo "$$t: FAILED" >&2; rc=1; }; done; \
	exit $$rc

# --allow-serial-runners: a second golangci-lint on the machine (another worktree) waits for the
# first instead of failing the target with "parallel golangci-lint is running".
lint-go: $(GOLANGCI_LINT)
	@rc=0; \
	for m in $(GO_MODULES); do \
	  if [[ -z "$$(cd $$m && go list ./... 2>/dev/null)" ]]; then echo "lint-go: $$m has no packages yet; skipped"; continue; fi; \
	  echo "--- golangci-lint $$m"; \
	  (cd $$m && $(GOLANGCI_LINT) run --allow-serial-runners --config $(REPO)/.golangci.yml ./...) || rc=1; \
	done; \
	exit $$rc

# The conformance adapters are linted with their SDK's config, so CI keeps them clean too.
# ESLint ignores files outside its config's folder unless run from theirs with --config.
lint-js: $(NPM_STAMP)
	cd sdk-js && npm run --silent typecheck && npm run --silent lint
	cd conformance/adapters/js && $(REPO)/sdk-js/node_modules/.bin/eslint --config $(REPO)/sdk-js/eslint.config.js .

# Ruff and mypy read sdk-python/pyproject.toml for the adapter too (the config of the folder they
# run in); mypy checks its configured files, then the adapter (files on its command line replace them).
lint-python: $(VENV_STAMP)
	cd sdk-python && .venv/bin/ruff check . ../conformance/adapters/python && .venv/bin/ruff format --check . ../conformance/adapters/python && .venv/bin/mypy && .venv/bin/mypy ../conformance/adapters/python

# ---------------------------------------------------------------------------------------------
# Build and run

# The build /health, lanes_build_info and the boot log name; a plain go build says "dev".
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)

.PHONY: build run
build:
	go build -ldflags "-X main.version=$(VERSION)" -o $(BIN)/lanes ./server/cmd/lanes

# A LANES_DATABASE_URL you set wins (the local cluster is then not started); its URL is not
# echoed, since it may hold a password.
run: build
	@if [[ -n "$${LANES_DATABASE_URL:-}" ]]; then \
	  echo "Lanes broker: http://localhost:$(PORT)   (database: LANES_DATABASE_URL)"; \
	else \
	  scripts/pg.sh start; \
	  export LANES_DATABASE_URL="$$(scripts/pg.sh url)"; \
	  echo "Lanes broker: http://localhost:$(PORT)   (database: $$LANES_DATABASE_URL)"; \
	fi; \
	LANES_PORT=$(PORT) exec $(BIN)/lanes

# ---------------------------------------------------------------------------------------------
# Test: THE one test command.

.PHONY: test test-go test-sdk test-sdk-suites pg-test
pg-test:
	LANES_PG_FAST=$${LANES_PG_FAST:-1} scripts/pg.sh start

# The broker's start, the suites and its stop live in a script (SUBMAKE above says why).
test: pg-test $(NPM_STAMP) $(VENV_STAMP) $(FUZZ_STAMP)
	@if MAKE='$(SUBMAKE)' scripts/make-with-test-broker.sh test-go test-sdk-suites conformance fuzz-api; then \
	  echo "make test: all suites passed"; else echo "make test: FAILED" >&2; exit 1; fi

test-go: pg-test
	@export LANES_TEST_DATABASE_URL="$$(scripts/pg.sh url)"; \
	rc=0; \
	for m in $(GO_MODULES); do \
	  if [[ -z "$$(cd $$m && go list ./... 2>/dev/null)" ]]; then echo "test-go: $$m has no packages yet; skipped"; continue; fi; \
	  echo "--- go test $$m"; \
	  (cd $$m && go test -count=1 -timeout $(GO_TEST_TIMEOUT) $(GO_TEST_FLAGS) ./...) || rc=1; \
	done; \
	exit $$rc

# SDK tests find the broker through LANES_TEST_URL (one broker on :6633, database lanes_sdk_test),
# and their auth tests a second one with JWT on through LANES_TEST_AUTH_URL (:6635).
# test-sdk runs the JS and Python suites against their own broker; `make test` shares one broker
# (LANES_TEST_URL) between the Go SDK, JS and Python suites.
test-sdk: pg-test $(NPM_STAMP) $(VENV_STAMP)
	@MAKE='$(SUBMAKE)' scripts/make-with-test-broker.sh test-sdk-suites

test-sdk-suites:
	@rc=0; \
	echo "--- npm test (sdk-js)"; \
	(cd sdk-js && npm test) || rc=1; \
	echo "--- pytest (sdk-python)"; \
	prc=0; (cd sdk-python && .venv/bin/pytest) || prc=$$?; \
	if [[ $$prc == 5 ]]; then echo "pytest: no tests collected (treated as success)"; prc=0; fi; \
	[[ $$prc == 0 ]] || rc=1; \
	exit $$rc

# ---------------------------------------------------------------------------------------------
# Conformance: every case of conformance/cases through the Go, TypeScript and Python adapters
# (SDKs go, js, python and python-async: the Python adapter drives Lanes, then AsyncLanes),
# against a fresh database and the real broker with its test-only fault scripts on
# (CONFORMANCE_FLAGS e.g. -sdk go -run 'retries/*' -v). Needs PostgreSQL (pg.sh), the sdk-js
# build and the sdk-python venv, all prepared here.
CONFORMANCE_FLAGS ?=
.PHONY: conformance
conformance: pg-test $(NPM_STAMP) $(VENV_STAMP)
	@echo "--- conformance"
	cd sdk-js && npm run --silent build
	go build -o $(BIN)/lanes ./server/cmd/lanes
	go run ./conformance/cmd/conformance -lanes $(BIN)/lanes $(CONFORMANCE_FLAGS)

# ---------------------------------------------------------------------------------------------
# fuzz-api: schemathesis generates requests from openapi.yaml (valid and invalid ones) and checks
# every answer against it, against its own broker with JWT on (scripts/fuzz-api.sh, port
# LANES_FUZZ_PORT, default 6634). FUZZ_FLAGS reaches schemathesis, e.g.
# FUZZ_FLAGS='--include-operation-id push'.
FUZZ_FLAGS ?=
.PHONY: fuzz-api
fuzz-api: pg-test $(FUZZ_STAMP)
	@echo "--- fuzz-api (schemathesis)"
	scripts/fuzz-api.sh $(FUZZ_FLAGS)

# Builds old commits' brokers and runs each against this checkout's on fresh databases of the
# local cluster: upgrade after SIGTERM and after SIGKILL, a mixed fleet, a spool left behind, a
# downgrade (scripts/upgrade-audit.py; docs/operations.md, "Checked against real old brokers").
# Needs git history, so it is not part of `make test`. UPGRADE_FLAGS reaches the script, e.g.
# UPGRADE_FLAGS='--old 0c78c46 --scenario sigterm mixed'.
.PHONY: upgrade-audit
upgrade-audit: pg-test
	scripts/upgrade-audit.py $(UPGRADE_FLAGS)

# ---------------------------------------------------------------------------------------------

# Starts its own durable PostgreSQL (scripts/pg.sh, port 54339) and broker (bin/lanes);
# results in bench/results/latest. The full documented run: see docs/benchmarks.md.
# BENCH_FLAGS reaches the harness, e.g. BENCH_FLAGS='-pg-port 55531 -pg-dir /tmp/pg-x
# -broker-port 7231 -pprof-addr 127.0.0.1:7232' to run beside another harness.
.PHONY: bench
bench: build
	go run ./bench/cmd/lanes-bench -short $(BENCH_FLAGS)

# The fault soak (docs/operations.md, "Fault soak"): its own durable PostgreSQL (port 54349) and
# two brokers (6642, 6643, behind proxies on 6644, 6645); not part of `make test`, as it crashes
# PostgreSQL and needs minutes. SOAK_FLAGS reaches the tool (lanes-soak -h), e.g. other ports.
SOAK_DURATION ?= 5m
SOAK_SEED ?= 0
.PHONY: soak
soak: build
	go run ./tools/soak -duration $(SOAK_DURATION) -seed $(SOAK_SEED) $(SOAK_FLAGS)
