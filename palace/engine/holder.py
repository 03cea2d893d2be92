"""The process that holds an embedded palace, and the local channel every other palazzo process reaches it by.

The embedded Qdrant Edge shard allows one process. So on a laptop one process, the *holder*
(`palazzo holder`, started on demand and detached), opens the palace and serves every other palazzo
process on that data dir over a unix socket: each `runmcp` is a thin pipe between its MCP client and the
holder, and the operator commands run inside the holder when one is live.

Standard library only: the `runmcp` pipe and `palazzo hook` load it without Django. Files:

- `<data dir>/holder.lock`: flock'ed by the holder for its whole life, so at most one runs per data dir;
  the kernel drops it when the holder dies, SIGKILL included.
- `<data dir>/palazzo.sock` (or, when that path is too long for a socket address, `<runtime dir>/<hash>.sock`
  in a 0700 directory of this user): the channel, created 0600, so only this OS user can connect, and the
  holder also checks each peer's uid where the system says it (SO_PEERCRED).
- `<data dir>/holder.log`: what holders printed.

A connection starts with one line of JSON, the preamble, then speaks one of two protocols:

- `{"palazzo": "mcp", "pid": N}`: an MCP session. Newline-delimited JSON-RPC both ways, exactly as MCP's
  stdio transport: the session is the connection's, so its `initialize` (clientInfo) is the caller's
  identity for provenance and the read audit.
- `{"palazzo": "command", "name": ..., "args": [...], "cwd": ...}`: an operator command line run inside
  the holder; the holder answers with lines `{"accepted": true}` first, then `{"out": text}`, `{"err": text}` and a last
  `{"exit": code}`.
- `{"palazzo": "leave"}`: `serve` starting on the data dir asks the holder to hand the palace over; the holder
  answers `{"leaving": true}`, a `serve` holding the palace `{"error": ...}` (it does not hand over).

A preamble the holder cannot use is answered with one line `{"error": "..."}` and the connection closed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

SOCKET_NAME = "palazzo.sock"
LOCK_NAME = "holder.lock"
LOG_NAME = "holder.log"
# sun_path holds 108 bytes on Linux and 104 on macOS, with its terminating NUL.
MAX_SOCKET_PATH_BYTES = 100
PREAMBLE_MAX_BYTES = 64 * 1024
# The largest JSON-RPC line the channel carries: 256 memories of 32 KB each, JSON-escaped, with room to spare
# (the same bound as MCP over stdio and HTTP).
MAX_MESSAGE_BYTES = 40 * 1024 * 1024
# How long a process waits for a holder it started (or another process started) to accept connections.
CONNECT_WAIT_SECONDS = 30.0
PROTOCOL_MCP = "mcp"
PROTOCOL_COMMAND = "command"
PROTOCOL_LEAVE = "leave"  # `serve` starting on the data dir asks the holder to hand the palace over


class HolderUnavailable(Exception):
    """No holder could be reached or started for this data dir."""


def socket_path(data_dir: Path) -> Path:
    """Where the holder of data_dir listens: in the data dir, or a short path in this user's runtime dir."""
    data_dir = data_dir.expanduser().absolute()
    candidate = data_dir / SOCKET_NAME
    if len(os.fsencode(candidate)) <= MAX_SOCKET_PATH_BYTES:
        return candidate
    digest = hashlib.sha256(os.fsencode(data_dir.resolve())).hexdigest()[:20]
    return runtime_dir() / f"{digest}.sock"


def runtime_dir() -> Path:
    """A directory only this user may enter, for sockets whose data dir path is too long."""
    import tempfile  # only on this path: `palazzo hook` loads this module and must start fast

    base = os.environ.get("XDG_RUNTIME_DIR")
    if base and Path(base).is_absolute() and len(os.fsencode(base)) < 60:
        directory = Path(base) / "palazzo"
    else:
        directory = Path(tempfile.gettempdir()) / f"palazzo-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        directory.mkdir(mode=0o700, parents=True)
    info = os.lstat(directory)
    # Another user could have made it first, or made it a link: never trust such a directory.
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise HolderUnavailable(
            f"{directory} is not a private directory of this user (owner {info.st_uid}, mode "
            f"{stat.S_IMODE(info.st_mode):o}); remove it or set PALAZZO_DATA_DIR to a shorter path"
        )
    return directory


def lock_path(data_dir: Path) -> Path:
    """The file the holder keeps flock'ed."""
    return data_dir / LOCK_NAME


def log_path(data_dir: Path) -> Path:
    """Where a detached holder's output goes."""
    return data_dir / LOG_NAME


def take_lock(data_dir: Path) -> IO[bytes] | None:
    """The holder's lock, held while the returned file stays open; None when a live holder has it."""
    data_dir.mkdir(parents=True, exist_ok=True)
    handle: IO[bytes] = open(lock_path(data_dir), "ab")  # noqa: SIM115 - held for the holder's life
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    os.set_inheritable(handle.fileno(), False)
    return handle


def holder_running(data_dir: Path) -> bool:
    """Whether some process holds the holder lock now (probed without waiting)."""
    return lock_held(lock_path(data_dir))


def lock_held(path: Path) -> bool:
    """Whether some process holds an flock on path now (probed without waiting; False when it cannot be opened)."""
    try:
        handle = open(path, "ab")  # noqa: SIM115 - closed below
    except OSError:
        return False
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        handle.close()  # closing releases a lock taken here
    return False


def loop_can_wait_on(fd: int) -> bool:
    """Whether an event loop can wait on fd: a pipe or a socket (epoll refuses regular files)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def listen(data_dir: Path) -> socket.socket:
    """Bind the holder's socket (call with the holder lock held): 0600 from the start, a stale one replaced."""
    path = socket_path(data_dir)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # a dead holder's: the lock says no live one uses it
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    previous = os.umask(0o177)  # the socket is born 0600: no moment at which another user could connect
    try:
        listener.bind(os.fsencode(path))
    finally:
        os.umask(previous)
    os.chmod(path, 0o600)
    listener.listen(128)
    return listener


def peer_is_this_user(connection: socket.socket) -> bool:
    """Whether the process at the other end runs as this user (True where the system cannot say)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return True  # the socket's 0600 mode is the guard there
    import struct

    credentials = connection.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", credentials)
    return uid == os.getuid()


def connect(data_dir: Path, *, timeout: float | None = 5.0) -> socket.socket | None:
    """A connection to the live holder of data_dir, or None when none listens."""
    try:
        path = socket_path(data_dir)
    except (HolderUnavailable, OSError):
        return None
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.settimeout(timeout)
    try:
        connection.connect(os.fsencode(path))
    except OSError as exc:
        connection.close()
        if exc.errno in {errno.ENOENT, errno.ECONNREFUSED, errno.ENOTDIR, errno.EACCES, errno.EAGAIN} or isinstance(
            exc, TimeoutError
        ):
            return None
        raise
    connection.settimeout(None)
    return connection


# Where palazzo's own packages live: a detached process starts here, so that `python -m` finds them and never
# a folder of the caller's that happens to be called `palace` (a data dir, a project's).
CODE_ROOT = Path(__file__).resolve().parents[2]


def spawn(data_dir: Path, *, environ: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start a detached `palazzo holder` for data_dir (own session, output to holder.log)."""
    data_dir = data_dir.expanduser().absolute()
    data_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ if environ is None else environ)
    env["PALAZZO_DATA_DIR"] = str(data_dir)
    with open(log_path(data_dir), "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "palazzo_site.cli", "holder"],
            cwd=CODE_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,  # not in the client's process group: a closing window does not take it along
            close_fds=True,
            env=env,
        )


def ensure(
    data_dir: Path, *, wait_seconds: float = CONNECT_WAIT_SECONDS, environ: dict[str, str] | None = None
) -> socket.socket:
    """A connection to data_dir's holder, starting one when none listens; HolderUnavailable after wait_seconds."""
    connection = connect(data_dir)
    if connection is not None:
        return connection
    deadline = time.monotonic() + wait_seconds
    process: subprocess.Popen[bytes] | None = None
    pause = 0.02
    while True:
        if process is None and not holder_running(data_dir):
            try:
                process = spawn(data_dir, environ=environ)
            except OSError as exc:
                raise HolderUnavailable(f"cannot start a palace holder for {data_dir}: {exc}") from None
        elif process is not None and process.poll() is not None and not holder_running(data_dir):
            if process.returncode != 0:  # it failed (the log says why): starting it again would fail again
                raise HolderUnavailable(
                    f"the palace holder for {data_dir} exited with status {process.returncode}{_log_tail(data_dir)}"
                )
            process = None  # it lost the lock to another, which has left since: start one again
        connection = connect(data_dir)
        if connection is not None:
            return connection
        if time.monotonic() >= deadline:
            raise HolderUnavailable(
                f"no palace holder answered for {data_dir} within {wait_seconds:.0f} s{_log_tail(data_dir)}"
            )
        time.sleep(pause)
        pause = min(pause * 2, 0.2)


def _log_tail(data_dir: Path) -> str:
    try:
        with open(log_path(data_dir), "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 600))
            tail = log.read().decode("utf-8", errors="replace").strip()
    except OSError:
        return ""
    return f"; the end of {log_path(data_dir)}: {tail}" if tail else ""


def ask_to_leave(data_dir: Path) -> bool:
    """Ask data_dir's holder to close the palace and exit (its sessions reconnect); False when it refuses.

    A `serve` holding the palace refuses (it never hands over); a holder answers that it leaves, or, leaving
    already, may close the connection first: that is not a refusal.
    """
    connection = connect(data_dir, timeout=2.0)
    if connection is None:
        return True
    try:
        connection.sendall(encode({"palazzo": PROTOCOL_LEAVE, "pid": os.getpid()}))
        answer = read_line(connection, bytearray(), limit=64 * 1024)
    except OSError:
        return True
    finally:
        connection.close()
    try:
        reply = json.loads(answer) if answer else None
    except ValueError:
        reply = None
    return not (isinstance(reply, dict) and "error" in reply)


def encode(message: dict[str, Any]) -> bytes:
    """One line of the channel."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def read_line(connection: socket.socket, buffer: bytearray, *, limit: int = MAX_MESSAGE_BYTES) -> bytes | None:
    """The next line from a blocking socket (buffer keeps what follows it); None at the end."""
    while True:
        end = buffer.find(b"\n")
        if end >= 0:
            line = bytes(buffer[: end + 1])
            del buffer[: end + 1]
            return line
        if len(buffer) > limit:
            raise HolderUnavailable(f"the holder sent a line of more than {limit} bytes")
        chunk = connection.recv(65536)
        if not chunk:
            if buffer:
                line = bytes(buffer)
                buffer.clear()
                return line
            return None
        buffer += chunk
