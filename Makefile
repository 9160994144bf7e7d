# The README names these targets; .ci/run calls `make test`.
GO ?= go

.PHONY: build test vet fmt bench

build:
	$(GO) build -o bin/herald ./cmd/herald

# Every test, with the race detector. Crash tests SIGKILL subprocesses; the
# endpoint tests start nats-server and RabbitMQ, which the script installs
# from Debian's packages when they are missing.
test:
	sh scripts/install-test-deps.sh
	$(GO) vet ./...
	$(GO) test -race -timeout 30m ./...

fmt:
	gofmt -l -w $$(git ls-files '*.go')

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s ./internal/...
