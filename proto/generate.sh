#!/usr/bin/env bash
# Regenerates the Go code for proto/: `proto/generate.sh` rewrites the
# committed files, `proto/generate.sh DIR` writes them under DIR instead
# (make verify compares the two).
#
# The output is pinned so that it is byte-identical on any machine:
#  - the plugins are built from the versions in go.mod
#    (google.golang.org/protobuf, connectrpc.com/connect), so regenerated
#    code always matches the runtime it is compiled against;
#  - protoc is Debian's protobuf-compiler, whose version goes into the
#    generated header; libprotobuf-dev provides the well-known types
#    (duration, timestamp). Both are installed when missing.
set -euo pipefail

# Debian 12's protobuf-compiler. Changing it changes the generated headers:
# regenerate and commit when you do.
protoc_version=3.21.12

die() {
	echo "generate.sh: $*" >&2
	exit 1
}

out=${1:-$(dirname "$0")}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")"

if ! command -v protoc >/dev/null || [ ! -e /usr/include/google/protobuf/duration.proto ]; then
	command -v apt-get >/dev/null ||
		die "protoc $protoc_version is missing; install Debian's protobuf-compiler and libprotobuf-dev"
	if [ "$(id -u)" -eq 0 ]; then
		as_root=""
	elif sudo -n true 2>/dev/null; then
		as_root="sudo -n"
	else
		die "protoc is missing; run as root (or with password-less sudo), or: apt-get install protobuf-compiler libprotobuf-dev"
	fi
	echo "generate.sh: installing protobuf-compiler libprotobuf-dev" >&2
	$as_root apt-get update -qq >&2 || die "apt-get update failed; check the network and APT sources"
	$as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		protobuf-compiler libprotobuf-dev >&2 || die "apt-get install protobuf-compiler libprotobuf-dev failed"
	command -v protoc >/dev/null || die "protoc is still missing after installing protobuf-compiler"
fi
have=$(protoc --version)
[ "$have" = "libprotoc $protoc_version" ] ||
	die "found $have, but the generated code is pinned to protoc $protoc_version (Debian 12's protobuf-compiler); install that, or change protoc_version in $0 and regenerate"

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
# Built inside the module, so the versions are go.mod's.
go build -o "$bin/" google.golang.org/protobuf/cmd/protoc-gen-go \
	connectrpc.com/connect/cmd/protoc-gen-connect-go

PATH="$bin:$PATH" protoc -I . -I /usr/include \
	--go_out="$out" --go_opt=module=herald/proto \
	--connect-go_out="$out" --connect-go_opt=module=herald/proto \
	$(find herald -name '*.proto' | LC_ALL=C sort)
