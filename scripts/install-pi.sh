#!/usr/bin/env bash
# The pi coding agent CLI from npm, pinned, for the agent-turn tests; prints the `pi` path.
exec bash "$(dirname "${BASH_SOURCE[0]}")/install-npm-tool.sh" pi @mariozechner/pi-coding-agent \
  "${PALAZZO_PI_VERSION:-0.73.1}" pi
