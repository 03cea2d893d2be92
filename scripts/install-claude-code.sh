#!/usr/bin/env bash
# Installs the Claude Code CLI from the npm registry, pinned, under .tools/claude-code (gitignored), for the
# end-to-end hook tests. Idempotent; prints the path of the `claude` executable on stdout.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION="${PALAZZO_CLAUDE_CODE_VERSION:-2.1.197}"
PREFIX="$ROOT/.tools/claude-code-$VERSION"
CLAUDE="$PREFIX/node_modules/.bin/claude"

if [ ! -x "$CLAUDE" ]; then
  command -v npm >/dev/null 2>&1 || { echo "install-claude-code: npm is not installed" >&2; exit 1; }
  mkdir -p "$PREFIX"
  npm install --prefix "$PREFIX" --no-audit --no-fund --silent "@anthropic-ai/claude-code@$VERSION" >&2
fi
echo "$CLAUDE"
