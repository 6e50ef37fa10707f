# ferry — everything a newcomer needs goes through these targets.
#   make demo    bring up the local testbed (two clusters, MinIO, MariaDB) with a sample platform on blue
#   make test    all tests: unit and integration against the real testbed (builds what it needs)

SHELL := /bin/bash
GO ?= go
TESTBED := $(GO) run ./integration/testbed/cmd/testbed
VERSION := $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/ferrykube/ferry/internal/buildinfo.version=$(VERSION)
FIXTURES ?= ../shared/fixtures/kubeflow

.PHONY: all build test test-short test-integration lint bench testbed-bin testbed-up testbed-down demo check-go clean

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
	@echo "==> testbed binaries (Kubernetes v1.37.2, etcd, kwok v0.8.0, MinIO, MariaDB, PostgreSQL); compiling the testbed tool first"
	@$(TESTBED) build

test-integration: testbed-bin
	@echo "==> all tests, integration included, against the testbed"
	@$(GO) test -count=1 -timeout 60m ./...

test: lint testbed-bin test-integration

bench: testbed-bin
	@echo "==> benchmarks: storage (ferry's S3 backend beside raw transfers to the same MinIO), planning and backing up 20,000 objects, a volume backup"
	@$(GO) test -run '^$$' -bench . -benchtime 3x ./storage/ ./integration/

testbed-up: testbed-bin
	@$(TESTBED) up

testbed-down: check-go
	@$(TESTBED) down

# A fresh testbed each time, so the demo always starts from the same state.
demo: build testbed-bin
	@$(TESTBED) down
	@$(TESTBED) up
	@# Both are Kubeflow-shaped and share names, so blue gets one: the full Kubeflow fixture when this
	@# checkout sits beside it, else the sample platform kept in the repository.
	@if [ -d "$(FIXTURES)" ]; then \
	  echo "==> applying the Kubeflow fixture from $(FIXTURES) to blue"; \
	  $(TESTBED) apply -cluster blue $(FIXTURES)/crds.yaml $(FIXTURES)/platform.yaml $(FIXTURES)/profiles.yaml; \
	else \
	  echo "==> applying the sample platform (examples/platform) to blue"; \
	  $(TESTBED) apply -cluster blue examples/platform/00-crds.yaml examples/platform/10-platform.yaml examples/platform/20-profiles.yaml; \
	fi
	@echo "==> what blue holds now"
	@$(TESTBED) kubectl --context blue get profiles,notebooks.kubeflow.org,deployments,pvc -A
	@echo "==> ferry plan --from blue --to green --preset kubeflow -o ferry-plan.yaml"
	@KUBECONFIG=$$($(TESTBED) info | sed -n 's/^  export KUBECONFIG=//p') bin/ferry plan --from blue --to green --preset kubeflow -o ferry-plan.yaml; \
	  code=$$?; if [ $$code -eq 3 ]; then echo "(exit code 3: the blocking findings above stand in the way on green)"; elif [ $$code -ne 0 ]; then exit $$code; fi
	@echo "==> ferry backup --from blue --preset kubeflow (into ./ferry-backups)"
	@KUBECONFIG=$$($(TESTBED) info | sed -n 's/^  export KUBECONFIG=//p') bin/ferry --log-format json backup --from blue --preset kubeflow 2>/dev/null; \
	  code=$$?; if [ $$code -eq 3 ]; then echo "(exit code 3: the items above were skipped; the testbed has no volume provisioner yet)"; elif [ $$code -ne 0 ]; then exit $$code; fi
	@bin/ferry backups list
	@$(TESTBED) info

clean:
	rm -rf bin
