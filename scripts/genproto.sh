#!/bin/sh
# Regenerates proto/*.pb.go with protoc (Debian's protobuf-compiler) and
# protoc-gen-go pinned to the protobuf runtime version in go.mod.
set -eu
cd "$(dirname "$0")/.."
command -v protoc >/dev/null || { echo "genproto: protoc not found; apt-get install protobuf-compiler" >&2; exit 1; }
version=$(go list -m -f '{{.Version}}' google.golang.org/protobuf)
GOBIN="$PWD/bin/tools" go install "google.golang.org/protobuf/cmd/protoc-gen-go@$version"
PATH="$PWD/bin/tools:$PATH" protoc --proto_path=proto --go_out=proto --go_opt=paths=source_relative proto/*.proto
