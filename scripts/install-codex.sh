#!/usr/bin/env bash
# The OpenAI Codex CLI from npm, pinned, for the agent-turn tests; prints the `codex` path.
exec bash "$(dirname "${BASH_SOURCE[0]}")/install-npm-tool.sh" codex @openai/codex \
  "${PALAZZO_CODEX_VERSION:-0.169.0}" codex
