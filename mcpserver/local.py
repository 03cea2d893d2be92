"""The holder's side of the local channel: every palazzo process on the data dir served over one unix socket.

Each connection is either an MCP session (the stdio transport's framing, one session per connection, so
each keeps its client's identity) or an operator command run in a worker thread of the holder. The
framing and the socket's place are in palace.engine.holder.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
from django.conf import settings

from mcpserver.server import PalazzoServer, build_server
from mcpserver.stdio import InFlight, PipeLines, _Answers, loop_line_reader
from palace.engine import holder

logger = logging.getLogger(__name__)

# How long a connection may take to send its preamble before it is closed.
PREAMBLE_SECONDS = 10.0
# Writes a command's output in frames; returns the command's exit status.
Emit = Callable[[str, str], None]
RunCommand = Callable[[dict[str, Any], Emit], int]
# Whether a command replaces the store under everyone (rebuild): it runs only with no other
# connection open, and connections that arrive meanwhile wait until it finished.
IsExclusive = Callable[[str], bool]


@dataclass
class ChannelState:
    """What the holder's idle and hand-over rules read: open connections, commands running, the last end."""

    connections: int = 0
    commands: int = 0
    last_activity: float = field(default_factory=time.monotonic)

    def idle_for(self) -> float:
        """Seconds since the last connection ended (0 while any is open)."""
        return 0.0 if self.connections else time.monotonic() - self.last_activity


class PreambleError(ValueError):
    """A connection's first line is not a preamble the holder can serve."""


def parse_preamble(line: bytes) -> dict[str, Any]:
    """The connection's preamble, checked; PreambleError names what is wrong."""
    if not line.endswith(b"\n"):
        raise PreambleError(f"the preamble must be one line of JSON of at most {holder.PREAMBLE_MAX_BYTES} bytes")
    try:
        preamble = json.loads(line)
    except (ValueError, RecursionError):
        raise PreambleError("the preamble is not JSON") from None
    if not isinstance(preamble, dict):
        raise PreambleError("the preamble must be a JSON object")
    protocol = preamble.get("palazzo")
    if protocol not in (holder.PROTOCOL_MCP, holder.PROTOCOL_COMMAND, holder.PROTOCOL_LEAVE):
        raise PreambleError(
            f"palazzo: must be {holder.PROTOCOL_MCP!r}, {holder.PROTOCOL_COMMAND!r} or {holder.PROTOCOL_LEAVE!r}, "
            f"got {_shown(protocol)}"
        )
    if protocol == holder.PROTOCOL_COMMAND:
        name, args = preamble.get("name"), preamble.get("args", [])
        if not isinstance(name, str) or not name:
            raise PreambleError(f"name: must be a command's name, got {_shown(name)}")
        if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
            raise PreambleError("args: must be a list of strings")
    return preamble


def _shown(value: object) -> str:
    text = json.dumps(value)[:60] if not isinstance(value, str | int | float | bool | None) else repr(value)[:60]
    return text


class Channel:
    """Serves the holder's socket until stopped."""

    def __init__(
        self,
        server: PalazzoServer,
        listener: socket.socket,
        *,
        run_command: RunCommand,
        is_exclusive: IsExclusive = lambda _name: False,
        leaves_on_request: bool = False,
    ) -> None:
        self.server = server
        self.leaves_on_request = leaves_on_request  # the holder does; `serve`, which asks, does not
        self.leave_requested = asyncio.Event()
        self._read_only_server: PalazzoServer | None = None
        self.listener = listener
        self.run_command = run_command
        self.is_exclusive = is_exclusive
        self.state = ChannelState()
        self._tasks: set[asyncio.Task[None]] = set()
        self._open = asyncio.Event()  # cleared while an exclusive command runs
        self._open.set()

    async def serve(self, stop: asyncio.Event) -> None:
        """Accept connections until stop is set; then wait briefly for the open ones."""
        self.listener.setblocking(False)
        unix_server = await asyncio.start_unix_server(
            self._accepted, sock=self.listener, limit=holder.MAX_MESSAGE_BYTES
        )
        try:
            await stop.wait()
        finally:
            unix_server.close()
            # The connections still open end now: waiting for them (Server.wait_closed) could wait forever.
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.wait(self._tasks, timeout=5.0)

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.state.connections += 1
        try:
            await self._connection(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the peer went away; its session's answers have nowhere to go
        except ExceptionGroup as group:
            if group.subgroup(lambda exc: not isinstance(exc, ConnectionError | asyncio.IncompleteReadError)):
                logger.exception("a local connection failed")
        except Exception:
            logger.exception("a local connection failed")
        finally:
            self.state.connections -= 1
            self.state.last_activity = time.monotonic()
            self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = cast(socket.socket, writer.get_extra_info("socket"))
        if sock is not None and not holder.peer_is_this_user(sock):
            writer.write(holder.encode({"error": "the palace's local channel serves only the user who runs it"}))
            await writer.drain()
            return
        try:
            line = await asyncio.wait_for(_read_preamble(reader), PREAMBLE_SECONDS)
            preamble = parse_preamble(line)
        except (PreambleError, TimeoutError) as exc:
            message = str(exc) if isinstance(exc, PreambleError) else "no preamble within 10 s"
            writer.write(holder.encode({"error": message}))
            await writer.drain()
            return
        if preamble["palazzo"] == holder.PROTOCOL_LEAVE:
            if self.leaves_on_request:
                logger.info("process %s takes the palace over: leaving", preamble.get("pid"))
                self.leave_requested.set()
                writer.write(holder.encode({"leaving": True}))
            else:
                refusal = f"process {os.getpid()} serves this palace and does not hand it over"
                writer.write(holder.encode({"error": refusal}))
            await writer.drain()
            return
        await self._open.wait()
        if preamble["palazzo"] == holder.PROTOCOL_MCP:
            await self._mcp_session(reader, writer, await self._server_for(preamble))
        else:
            self.state.commands += 1
            try:
                await self._command(preamble, writer)
            finally:
                self.state.commands -= 1

    async def _server_for(self, preamble: dict[str, Any]) -> PalazzoServer:
        """A session whose own settings say read-only (PALAZZO_READ_ONLY) gets the read tools only."""
        if preamble.get("read_only") is not True or self.server.read_only:
            return self.server
        if self._read_only_server is None:
            env = dataclasses.replace(settings.PALAZZO, read_only=True)
            # Built off the event loop: the server reads the palace's vocabulary from its database.
            built = await anyio.to_thread.run_sync(lambda: build_server(env=env, warmup=self.server.warmup))
            self._read_only_server = self._read_only_server or built
        return self._read_only_server

    async def _mcp_session(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: PalazzoServer
    ) -> None:
        from mcp.server.stdio import stdio_server

        in_flight = InFlight()

        async def send(data: bytes) -> None:
            writer.write(data)
            await writer.drain()

        lines = PipeLines(loop_line_reader(reader), in_flight)
        answers = _Answers(send, in_flight)
        async with stdio_server(stdin=cast(Any, lines), stdout=cast(Any, answers)) as (read_stream, write_stream):
            await server.run_streams(read_stream, write_stream)
        with contextlib.suppress(OSError):
            if writer.can_write_eof():
                writer.write_eof()

    async def _command(self, preamble: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()

        def emit(stream: str, text: str) -> None:
            if text:
                loop.call_soon_threadsafe(writer.write, holder.encode({stream: text}))

        # The first frame says the command was taken: a client whose connection ends before any frame knows
        # nothing ran (a holder that leaves drops the connections it never accepted) and asks the next holder.
        writer.write(holder.encode({"accepted": True}))
        name = preamble["name"]
        exclusive = self.is_exclusive(name)
        if exclusive and self.state.connections > 1:
            others = self.state.connections - 1
            refusal = (
                f"palazzo: `{name}` replaces the store under everyone who uses the palace, and {others} other "
                f"session(s) or command(s) are connected to it now; close the agent sessions on this data dir "
                "(or wait for the commands to finish) and run it again\n"
            )
            writer.write(holder.encode({"err": refusal}))
            writer.write(holder.encode({"exit": 2}))
            await writer.drain()
            return
        logger.info("running `%s` for pid %s", name, preamble.get("pid"))
        if exclusive:
            self._open.clear()
        try:
            # A command waits for the palace the holder is opening (a fresh data dir is migrated there first).
            await anyio.to_thread.run_sync(self.server.warmup.wait_for_call)
            code = await anyio.to_thread.run_sync(self.run_command, preamble, emit)
        finally:
            self._open.set()
        writer.write(holder.encode({"exit": code}))
        await writer.drain()


async def _read_preamble(reader: asyncio.StreamReader) -> bytes:
    line = bytearray()
    while not line.endswith(b"\n"):
        chunk = await reader.read(1)  # byte by byte: what follows the preamble belongs to the protocol
        if not chunk:
            break
        line += chunk
        if len(line) > holder.PREAMBLE_MAX_BYTES:
            break
    return bytes(line)
