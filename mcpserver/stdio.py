"""The stdio transport: stdout carries only JSON-RPC; the palace opens in the background."""

from __future__ import annotations

import logging

import anyio

from mcpserver.server import build_server
from palace.audit import stop_audit_writer
from palace.gain import stop_usage_writer

logger = logging.getLogger(__name__)


def run_stdio() -> None:
    """Serve MCP on stdin/stdout until the client closes stdin.

    The SDK's stdio transport points fd 1 at stderr while it serves, so stray prints from
    libraries cannot corrupt the protocol. initialize and tools/list are answered at once; the
    model loads and the palace opens in a background thread that the first tool call waits for.
    """
    server = build_server(warm_up_in_background=True)
    logger.info("palazzo MCP server on stdio")
    try:
        anyio.run(server.run_stdio_async)
    finally:
        from palace.feeder import stop_spool_watcher

        stop_spool_watcher()
        stop_usage_writer()
        stop_audit_writer()
