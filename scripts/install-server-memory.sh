#!/usr/bin/env bash
# The official MCP memory server from npm, pinned, for the import tests (driven over MCP, it writes a real
# memory.json); prints the `mcp-server-memory` path.
exec bash "$(dirname "${BASH_SOURCE[0]}")/install-npm-tool.sh" server-memory @modelcontextprotocol/server-memory \
  "${PALAZZO_SERVER_MEMORY_VERSION:-2026.8.31}" mcp-server-memory
