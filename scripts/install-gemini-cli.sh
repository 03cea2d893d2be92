#!/usr/bin/env bash
# The Gemini CLI from npm, pinned, for the agent-turn tests; prints the `gemini` path.
exec bash "$(dirname "${BASH_SOURCE[0]}")/install-npm-tool.sh" gemini-cli @google/gemini-cli \
  "${PALAZZO_GEMINI_CLI_VERSION:-0.61.0}" gemini
