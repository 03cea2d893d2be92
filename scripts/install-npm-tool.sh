#!/usr/bin/env bash
# Installs one npm package, pinned, under .tools/<name>-<version> (gitignored), for the end-to-end tests that
# drive a real tool (Claude Code, pi, the official MCP memory server). Idempotent; prints the path of the
# executable on stdout.  Usage: install-npm-tool.sh NAME PACKAGE VERSION BIN
set -euo pipefail

NAME="$1" PACKAGE="$2" VERSION="$3" BIN="$4"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PREFIX="$ROOT/.tools/$NAME-$VERSION"
EXECUTABLE="$PREFIX/node_modules/.bin/$BIN"

mkdir -p "$ROOT/.tools"
# Test workers may ask at the same moment: one installs, the others wait and find it installed.
exec 9>"$ROOT/.tools/.install-$NAME.lock"
flock 9
if [ ! -x "$EXECUTABLE" ]; then
  command -v npm >/dev/null 2>&1 || { echo "install-$NAME: npm is not installed" >&2; exit 1; }
  mkdir -p "$PREFIX"
  npm install --prefix "$PREFIX" --no-audit --no-fund --silent "$PACKAGE@$VERSION" >&2
fi
echo "$EXECUTABLE"
