# The README names these targets; .ci/run calls `make verify` and `make test`.
GO ?= go

# Pinned so that a new staticcheck release cannot fail CI on its own; go run
# caches the built binary. Bump it when go.mod's go line moves to a Go release
# that this version does not support yet.
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: build test test-short vet fmt bench faults verify verify-fmt verify-vet verify-staticcheck verify-tidy verify-proto

build:
	$(GO) build -o bin/herald ./cmd/herald

# Every test, with the race detector. Crash tests SIGKILL subprocesses; the
# endpoint tests start nats-server and RabbitMQ, which the script installs
# from Debian's packages when they are missing.
test:
	sh scripts/install-test-deps.sh
	$(GO) vet ./...
	$(GO) test -race -timeout 30m ./...

# The fast tier, for the edit-test loop: the unit tests, without the race
# detector. Under -short the process-level suites (tests/e2e,
# tests/robustness) skip, and so do the tests that start RabbitMQ,
# Chromium or the AWS CLI. CI runs `make test`.
test-short:
	$(GO) test -short ./...

fmt:
	gofmt -l -w $$(git ls-files '*.go')

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s ./internal/...

# The fault suite's long form: random faults (SIGKILLs, a cut-off leader, a
# wiped data directory) on a three-node cluster for HERALD_FAULTS_DURATION
# (10m unless set), then the history check. No go test timeout: the suite
# bounds each of its waits itself.
faults:
	HERALD_FAULTS_DURATION=$${HERALD_FAULTS_DURATION:-10m} $(GO) test -race -run '^TestFaults$$' -count=1 -v -timeout 0 ./tests/robustness

# Every check besides the tests. Each check runs even when an earlier one
# failed, so one run lists everything to fix; each names the command that
# fixes it.
verify:
	@failed=""; \
	for check in fmt vet staticcheck tidy proto; do \
		echo "== verify-$$check"; \
		$(MAKE) --no-print-directory verify-$$check || failed="$$failed $$check"; \
	done; \
	if [ -n "$$failed" ]; then echo "make verify: FAILED:$$failed"; exit 1; fi; \
	echo "make verify: all checks passed"

verify-fmt:
	@files=$$(gofmt -l $$(git ls-files '*.go')) || exit 1; \
	if [ -n "$$files" ]; then \
		echo "$$files"; echo "gofmt: the files above are not formatted; run 'make fmt'"; exit 1; \
	fi

verify-vet:
	@$(GO) vet ./... || { echo "go vet: fix the findings above (re-check: go vet ./...)"; exit 1; }

verify-staticcheck:
	@$(STATICCHECK) ./... || { echo "staticcheck: fix the findings above (re-check: $(STATICCHECK) ./...)"; exit 1; }

verify-tidy:
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy; run 'go mod tidy'"; exit 1; }

# Regenerates proto/ into a temporary directory and compares it byte for
# byte with the committed generated files (the .proto sources are not output).
verify-proto:
	@tmp=$$(mktemp -d) || exit 1; trap 'rm -rf "$$tmp"' EXIT; \
	proto/generate.sh "$$tmp" || { echo "proto: proto/generate.sh failed (see above)"; exit 1; }; \
	diff -r -x '*.proto' proto/herald "$$tmp/herald" || \
	{ echo "proto: the generated code is not current; run proto/generate.sh and commit the result"; exit 1; }
