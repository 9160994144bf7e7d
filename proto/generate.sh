#!/usr/bin/env bash
# Regenerates the Go code for proto/. Needs protoc (Debian: protobuf-compiler),
# protoc-gen-go and protoc-gen-connect-go on PATH:
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.11
#   go install connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.21.1
set -euo pipefail
cd "$(dirname "$0")"
protoc -I . -I /usr/include \
  --go_out=. --go_opt=module=herald/proto \
  --connect-go_out=. --connect-go_opt=module=herald/proto \
  herald/v1/herald.proto
