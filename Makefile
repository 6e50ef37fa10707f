# ferry — everything a newcomer needs goes through these targets.
#   make demo    ferry migrate blue → green on the local testbed, behind HAProxy, then back with green's writes
#   make demo-upgrade  ferry migrate --upgrade: the sample platform's release 1 on blue, its state onto release 2 on green
#   make test    all tests: unit, a few seconds of each fuzz target, and integration against the real testbed
#   make fuzz    each fuzz target for longer (FUZZTIME, 2m by default)
#   make test-kubeflow  the integration tests on the Kubeflow fixtures beside the checkout

SHELL := /bin/bash
GO ?= go
TESTBED := $(GO) run ./integration/testbed/cmd/testbed
VERSION := $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/ferrykube/ferry/internal/buildinfo.version=$(VERSION)
FIXTURES ?= ../shared/fixtures/kubeflow

.PHONY: all build test test-short test-integration test-kubeflow test-fuzz fuzz lint bench testbed-bin testbed-bin-demo testbed-up testbed-down demo demo-upgrade check-go clean

all: build

check-go:
	@command -v $(GO) >/dev/null || { echo "ferry needs Go 1.26 or newer on PATH (https://go.dev/dl/)"; exit 1; }

build: check-go
	@echo "==> building bin/ferry ($(VERSION))"
	@$(GO) build -ldflags "$(LDFLAGS)" -o bin/ferry ./cmd/ferry

lint: check-go
	@echo "==> go vet and gofmt"
	@$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

test-short: lint
	@echo "==> unit tests (go test -short)"
	@$(GO) test -short ./...

# Builds the testbed's binaries into a cache outside the repository on first use (a cold build takes
# about 15 minutes on two cores and prints progress), installs MariaDB and PostgreSQL with apt-get
# when missing.
testbed-bin: check-go
	@echo "==> testbed binaries (Kubernetes v1.37.2, etcd, kwok v0.8.0, MinIO, SeaweedFS, MariaDB, PostgreSQL); compiling the testbed tool first"
	@$(TESTBED) build

# The demos need all but SeaweedFS, whose cold build takes ten minutes more.
testbed-bin-demo: check-go
	@echo "==> testbed binaries (Kubernetes v1.37.2, etcd, kwok v0.8.0, MinIO, MariaDB, PostgreSQL); compiling the testbed tool first"
	@$(TESTBED) build -demo

test-integration: testbed-bin
	@echo "==> all tests, integration included, against the testbed"
	@$(GO) test -count=1 -timeout 80m ./...

test: lint test-fuzz testbed-bin test-integration

# The integration tests with the Kubeflow fixtures (v1.10.2 and v1.11.0, beside $(FIXTURES)) in place
# of the sample platform: every platform test on Kubeflow's manifests, and the Kubeflow upgrade.
test-kubeflow: testbed-bin
	@test -f $(FIXTURES)/platform.yaml || { echo "no Kubeflow fixture at $(FIXTURES) (set FIXTURES)"; exit 2; }
	@echo "==> integration tests on the Kubeflow fixtures in $(abspath $(dir $(FIXTURES)))"
	@FERRY_FIXTURES=$(abspath $(dir $(FIXTURES))) $(GO) test -count=1 -timeout 90m ./integration/

# Fuzz targets, as package:target. Each must not panic, and every error must name its input.
FUZZ_TARGETS := ./snapshot/:FuzzManifest ./migrate/:FuzzJournalEvent ./plans/:FuzzPlanFile ./plans/config/:FuzzConfig ./snapshot/volumes/:FuzzUnpack
FUZZTIME ?= 2m

# Runs each fuzz target for $(1), minimizing a new input for at most $(2); an input that fails is
# kept in the package's testdata/fuzz/ (commit it: it is then a test case of go test).
define run-fuzz
	@for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; name=$${t##*:}; \
	  echo "==> fuzz $$name ($$pkg, $(1))"; \
	  $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(1) -fuzzminimizetime $(2) $$pkg || exit 1; \
	done
endef

# A count of executions, not a time: Go's fuzzing coordinator can fail a duration-bound run with a
# bare "context deadline exceeded" when a loaded machine keeps a worker busy at the deadline.
test-fuzz: check-go
	$(call run-fuzz,300x,50x)

fuzz: check-go
	$(call run-fuzz,$(FUZZTIME),30s)

bench: testbed-bin
	@echo "==> benchmarks: storage and the chunk repository beside raw transfers to the same MinIO; objects, volumes and a verified cutover on the testbed"
	@FERRY_FIXTURES=$(if $(wildcard $(FIXTURES)/platform.yaml),$(abspath $(dir $(FIXTURES)))) \
	  $(GO) test -run '^$$' -bench . -benchtime 3x -timeout 3h ./storage/ ./storage/repo/ ./integration/

testbed-up: testbed-bin
	@$(TESTBED) up

testbed-down: check-go
	@$(TESTBED) down

# The blue-green migration end to end on a fresh testbed (integration/testbed/cmd/testbed/demo.go):
# the Kubeflow fixture when this checkout sits beside it (else examples/platform) and its data on blue,
# HAProxy in front of a blue and a green HTTP endpoint with a client counting answers, ferry migrate
# with progress and the run's report; then writes on green carried back to blue by ferry rollback
# --carry-back. The testbed stays up: make testbed-down.
demo: build testbed-bin-demo
	@$(TESTBED) demo -ferry bin/ferry -fixtures $(FIXTURES)

# The blue-green platform upgrade end to end on a fresh testbed (integration/testbed/cmd/testbed/
# demo_upgrade.go): release 1 of the sample platform (examples/platform) with alice's and bob's
# profiles, their volumes, the pipelines' database and bucket and a PyTorchJob on blue; release 2
# (examples/platform-v2) installed on green. ferry plan --upgrade and ferry migrate --upgrade refuse,
# naming the PyTorchJob; migrate --upgrade --leave-behind pytorchjobs.kubeflow.org moves the state
# only, with progress and its report; then what a user checks on green and blue. The testbed stays
# up: make testbed-down.
demo-upgrade: build testbed-bin-demo
	@$(TESTBED) demo-upgrade -ferry bin/ferry

clean:
	rm -rf bin
