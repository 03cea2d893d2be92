#!/usr/bin/env bash
# The Claude Code CLI from npm, pinned, for the end-to-end hook and agent-turn tests; prints the `claude` path.
exec bash "$(dirname "${BASH_SOURCE[0]}")/install-npm-tool.sh" claude-code @anthropic-ai/claude-code \
  "${PALAZZO_CLAUDE_CODE_VERSION:-2.1.197}" claude
