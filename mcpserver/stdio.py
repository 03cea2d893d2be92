"""The stdio transport: stdout carries only JSON-RPC; the palace opens in the background.

The SDK's stdio server does the protocol; this module gives it the lines to read and takes the
answers it writes. When stdin and stdout are pipes or sockets (how an MCP client starts a server),
the event loop reads and writes them itself: the SDK's own streams read each line and write and flush
each answer in a worker thread, five thread hand-offs per call, which cost 0.5-0.6 ms of a 1.3 ms
trivial call on a 2-core VM. Anything else (a file, a terminal) is read and written in a thread.
Either way the end of input waits for the answers still owed (InFlight).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, BinaryIO, cast

import anyio
import mcp_types

from mcpserver.server import MAX_MESSAGE_BYTES, PalazzoServer, build_server
from palace.engine.holder import loop_can_wait_on
from palace.governance.audit import stop_audit_writer
from palace.operations.gain import stop_usage_writer

logger = logging.getLogger(__name__)

# How long an exit waits for the palace opening in the background (the model loads in 1-3 s).
WARMUP_EXIT_WAIT_SECONDS = 30.0
# What a line over MAX_MESSAGE_BYTES (dropped whole) reads as: not JSON, so the SDK treats it as the
# parse error it is, as over HTTP a body over the same size is refused.
DROPPED_LINE = "\x00 line too long\n"


def run_stdio() -> None:
    """Serve MCP on stdin/stdout until the client closes stdin.

    While serving, fd 0 reads the null device and fd 1 points at stderr, so stray prints from
    libraries cannot corrupt the protocol. initialize and tools/list are answered at once; the
    model loads and the palace opens in a background thread that the first tool call waits for.
    """
    server = build_server(warm_up_in_background=True)
    logger.info("palazzo MCP server on stdio")
    try:
        anyio.run(_serve, server)
    finally:
        from palace.feeding.feeder import stop_spool_watcher

        # A process that exits while the model loads aborts in onnxruntime's C++ ("terminate called
        # without an active exception", exit code -6): a client that leaves at once waits for the load.
        if not server.warmup.wait(timeout=WARMUP_EXIT_WAIT_SECONDS):
            logger.warning("exiting while the palace is still opening")
        stop_spool_watcher()
        stop_usage_writer()
        stop_audit_writer()


async def _serve(server: PalazzoServer) -> None:
    from mcp.server.stdio import stdio_server

    with _claimed_standard_streams() as (wire_in, wire_out):
        async with (
            _wire(wire_in, wire_out) as (lines, answers),
            stdio_server(stdin=cast(Any, lines), stdout=cast(Any, answers)) as (read_stream, write_stream),
        ):
            await server.run_streams(read_stream, write_stream)


@contextlib.contextmanager
def _claimed_standard_streams() -> Iterator[tuple[int, int]]:
    """Private duplicates of fds 0 and 1 for the protocol; meanwhile fd 0 reads /dev/null and fd 1 is stderr."""
    saved_in, saved_out = os.dup(0), os.dup(1)
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        os.dup2(2, 1)
    finally:
        os.close(null)
    try:
        yield wire_in, wire_out
    finally:
        # The loop made the pipes non-blocking; whoever uses fds 0 and 1 next expects them blocking.
        for saved, fd in ((saved_in, 0), (saved_out, 1)):
            with contextlib.suppress(OSError):
                os.set_blocking(saved, True)
                os.dup2(saved, fd)
            os.close(saved)


class InFlight:
    """Requests read and not yet answered. The SDK cancels every running handler when input ends; a
    client that sends its last requests and closes stdin at once still gets their answers, because the
    end of input is passed on only once they are written (or after ANSWER_GRACE_SECONDS)."""

    def __init__(self) -> None:
        self._ids: set[str] = set()
        self._none_left = asyncio.Event()
        self._none_left.set()

    def read(self, line: bytes) -> None:
        """Note a request the SDK will answer (as it parses it); drop one the client cancels."""
        try:
            message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        except (ValueError, RecursionError):  # the SDK drops it unanswered
            return
        if isinstance(message, mcp_types.JSONRPCRequest):
            self._ids.add(json.dumps(message.id))
            self._none_left.clear()
        elif isinstance(message, mcp_types.JSONRPCNotification) and message.method == "notifications/cancelled":
            self._settle((message.params or {}).get("requestId"))

    def wrote(self, text: str) -> None:
        """Note an answer: the SDK writes each response as {"jsonrpc":"2.0","id":...} first."""
        if text.startswith(_ANSWER_PREFIX):
            with contextlib.suppress(ValueError):
                self._settle(_DECODER.raw_decode(text, len(_ANSWER_PREFIX))[0])

    def abandon(self) -> None:
        """The client can no longer be answered: nothing is waited for."""
        self._ids.clear()
        self._none_left.set()

    async def answered(self) -> None:
        """Wait until every request read so far is answered, or ANSWER_GRACE_SECONDS."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._none_left.wait(), ANSWER_GRACE_SECONDS)

    def _settle(self, request_id: object) -> None:
        if _is_request_id(request_id):
            self._ids.discard(json.dumps(request_id))
            if not self._ids:
                self._none_left.set()


def _is_request_id(value: object) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


_ANSWER_PREFIX = '{"jsonrpc":"2.0","id":'
_DECODER = json.JSONDecoder()
# How long the end of input waits for the answers still being worked on (a batch may embed for seconds).
ANSWER_GRACE_SECONDS = 60.0


class Dropped:
    """What a ReadLine returns for a line over MAX_MESSAGE_BYTES, dropped whole."""


DROPPED = Dropped()
ReadLine = Callable[[], Awaitable[bytes | Dropped | None]]  # the next line, None at the end


class PipeLines:
    """The client's messages as the SDK's transport reads them: an async iterator of text lines."""

    def __init__(self, read_line: ReadLine, in_flight: InFlight | None = None) -> None:
        self._read_line = read_line
        self._in_flight = in_flight or InFlight()

    def __aiter__(self) -> PipeLines:
        return self

    async def __anext__(self) -> str:
        line = await self._read_line()
        if line is None:
            await self._in_flight.answered()
            raise StopAsyncIteration
        if isinstance(line, Dropped):
            logger.warning("dropped a JSON-RPC line of more than %d bytes", MAX_MESSAGE_BYTES)
            return DROPPED_LINE
        self._in_flight.read(line)
        return line.decode("utf-8", errors="replace")


def loop_line_reader(reader: asyncio.StreamReader) -> ReadLine:
    """Lines of a stream the event loop reads (its limit bounds a line)."""

    async def read_line() -> bytes | Dropped | None:
        try:
            return await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as end:
            return end.partial or None
        except asyncio.LimitOverrunError:
            while True:  # the rest of the line, through its newline or the end of input
                try:
                    await reader.readuntil(b"\n")
                    return DROPPED
                except asyncio.IncompleteReadError:
                    return DROPPED
                except asyncio.LimitOverrunError as overrun:
                    await reader.readexactly(overrun.consumed)

    return read_line


def threaded_line_reader(file: BinaryIO, limit: int = MAX_MESSAGE_BYTES) -> ReadLine:
    """Lines of a file read in a worker thread (at most limit bytes each)."""

    async def read_line() -> bytes | Dropped | None:
        line: bytes = await anyio.to_thread.run_sync(file.readline, limit + 1)
        if line.endswith(b"\n") or len(line) <= limit:  # a whole line, or the last one, unterminated
            return line or None
        while line and not line.endswith(b"\n"):
            line = await anyio.to_thread.run_sync(file.readline, limit + 1)
        return DROPPED

    return read_line


class _Answers:
    """Where the SDK's transport writes each answer, noted as answered once it is out."""

    def __init__(self, send: Callable[[bytes], Awaitable[None]], in_flight: InFlight) -> None:
        self._send = send
        self._in_flight = in_flight
        self._pending: list[str] = []

    async def write(self, text: str) -> None:
        self._pending.append(text)

    async def flush(self) -> None:
        text, self._pending = "".join(self._pending), []
        try:
            await self._send(text.encode("utf-8"))
        except OSError:  # the client is gone: no answer can be owed any more
            self._in_flight.abandon()
            raise
        self._in_flight.wrote(text)


@contextlib.asynccontextmanager
async def _wire(wire_in: int, wire_out: int) -> AsyncIterator[tuple[PipeLines, _Answers]]:
    """The protocol's two file descriptors as lines in and answers out."""
    loop = asyncio.get_running_loop()
    in_flight = InFlight()
    closers: list[Callable[[], None]] = []
    if loop_can_wait_on(wire_in):
        reader = asyncio.StreamReader(limit=MAX_MESSAGE_BYTES)
        read_transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(wire_in, "rb", buffering=0)
        )
        closers.append(read_transport.close)
        read_line = loop_line_reader(reader)
    else:
        # Never closed: a worker thread may still block in its readline, and closing a buffered file
        # waits for that read to end. The descriptor goes with the process.
        read_line = threaded_line_reader(os.fdopen(wire_in, "rb", closefd=False))
    if loop_can_wait_on(wire_out):
        write_transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(wire_out, "wb", buffering=0)
        )
        closers.append(write_transport.close)
        # No high-water mark: a flush waits until the pipe took the whole answer, as a blocking write
        # does (and returns at once when the write went straight through).
        write_transport.set_write_buffer_limits(high=0)
        writer = asyncio.StreamWriter(write_transport, protocol, None, loop)

        async def send(data: bytes) -> None:
            writer.write(data)
            await writer.drain()

    else:
        sink = os.fdopen(wire_out, "wb", closefd=False)  # never closed either, for the same reason

        async def send(data: bytes) -> None:
            def write() -> None:
                sink.write(data)
                sink.flush()

            await anyio.to_thread.run_sync(write)

    try:
        yield PipeLines(read_line, in_flight), _Answers(send, in_flight)
    finally:
        for close in closers:
            with contextlib.suppress(OSError):
                close()
