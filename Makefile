# gatehouse — see README.md. `make run` and `make test` are the two commands.
GO      ?= go
# Workers apply Landlock and capability drops to every thread through
# AllThreadsSyscall, which cgo disables: build and test without cgo.
export CGO_ENABLED = 0
# pipefail: the test target tees go test's output and keeps its status.
SHELL := /bin/bash
BIN     := bin
PKGS    := ./...
FUZZTIME ?= 30s

# The race detector needs cgo, under which the privilege drop and the
# sandbox (and the spawner, which sets no_new_privs) cannot work: it runs
# over every package whose tests need neither
# (the supervisor's loop over fake workers, ipc, worker, config, ...).
RACE_PKGS = $(shell $(GO) list ./... | grep -v -e /internal/e2e -e /sandbox -e /spawner)

.PHONY: all build run test race vet fuzz bench generate clean

all: build

VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/gatehouse-dev/gatehouse/internal/version.Version=$(VERSION)

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/gatehouse ./cmd/gatehouse
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/gatehousectl ./cmd/gatehousectl

run: build
	$(BIN)/gatehouse -config examples/gatehouse.hcl

# The whole suite: unit, fuzz seeds, and end-to-end tests with real worker
# processes on loopback. -p 1 keeps the socket-heavy packages from competing
# for the two cores. The OpenBSD build is part of the suite. A failure's
# lines are repeated at the end, where a long log's tail shows them.
test: build race
	$(GO) vet $(PKGS)
	GOOS=openbsd $(GO) build $(PKGS)
	@mkdir -p $(BIN)
	set -o pipefail; $(GO) test -p 1 -count=1 -timeout 30m $(PKGS) 2>&1 | tee $(BIN)/test.log || \
	  { echo "== failed:"; grep -E -e '--- FAIL|^panic:|^FAIL' $(BIN)/test.log; exit 1; }

# The race detector (it needs cgo and a C compiler) over RACE_PKGS.
race:
	CGO_ENABLED=1 $(GO) test -race -p 1 -count=1 -timeout 10m $(RACE_PKGS)

vet:
	$(GO) vet $(PKGS)

# Each fuzz target for FUZZTIME (go test -fuzz takes one target at a time).
fuzz:
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  for t in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$t"; \
	    $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 5s $$pkg; \
	  done; \
	done

bench: build
	./scripts/bench/run.sh

generate:
	./scripts/genproto.sh

clean:
	rm -rf $(BIN)
