#!/usr/bin/env bash
# Installs the pi coding agent CLI from the npm registry, pinned, under .tools/pi (gitignored), for the
# end-to-end agent-turn tests. Idempotent; prints the path of the `pi` executable on stdout.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION="${PALAZZO_PI_VERSION:-0.73.1}"
PREFIX="$ROOT/.tools/pi-$VERSION"
PI="$PREFIX/node_modules/.bin/pi"

if [ ! -x "$PI" ]; then
  command -v npm >/dev/null 2>&1 || { echo "install-pi: npm is not installed" >&2; exit 1; }
  mkdir -p "$PREFIX"
  npm install --prefix "$PREFIX" --no-audit --no-fund --silent "@mariozechner/pi-coding-agent@$VERSION" >&2
fi
echo "$PI"
