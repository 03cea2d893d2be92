#!/usr/bin/env bash
# The opencode CLI from npm, pinned, for the agent-turn tests; prints the `opencode` path.
exec bash "$(dirname "${BASH_SOURCE[0]}")/install-npm-tool.sh" opencode opencode-ai \
  "${PALAZZO_OPENCODE_VERSION:-1.18.33}" opencode
