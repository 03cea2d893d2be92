"""Operator commands on an embedded palace run inside its holder, so they work while any session holds it.

From the command line (`palazzo status`, `palazzo export` ...), a command of this kind on an embedded
palace connects to the data dir's holder (starting one when none listens), sends its arguments and its
working directory, and prints what the holder's run of it prints, ending with its exit status. The holder
parses the arguments again with the same parser and resolves the command's file arguments against the
client's working directory. Standard input (ingest's default) is copied to a private file in the data dir
first. `call_command` (tests, code) and PALAZZO_HOLDER=off run the command in the calling process, as
does a data dir where no holder can be started (read-only, say).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import get_commands, load_command_class
from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections

from palace.engine import holder

logger = logging.getLogger(__name__)
# A command the holder never took (it was leaving as the command connected) is asked of the next holder.
NOT_ACCEPTED = -1
NOT_ACCEPTED_RETRIES = 3

Emit = Callable[[str, str], None]


class HeldPalaceCommand(BaseCommand):
    """A command that runs inside the holder of an embedded palace when called from the command line."""

    # The dests of arguments that name files, resolved against the client's working directory.
    path_options: tuple[str, ...] = ()
    # The dest of the option that names the input file when standard input is read instead (None: never).
    stdin_option: str | None = None
    # It replaces the store under everyone (rebuild): the holder runs it only with nobody else connected.
    exclusive = False

    def raw_stdout(self) -> Any:
        """Standard output without Django's line endings (exports, progress lines): the client's, in the holder."""
        return getattr(self.stdout, "_out", sys.stdout)

    def raw_stderr(self) -> Any:
        """Standard error for progress bars: the client's terminal, in the holder."""
        return getattr(self.stderr, "_out", sys.stderr)

    def forwarded_here(self, argv: list[str]) -> bool:
        """Whether this command line is run by the holder rather than by this process."""
        env = settings.PALAZZO
        return env.holder and not env.qdrant_url and not env.remote_url

    def caller_arguments(self, options: dict[str, Any]) -> list[str]:
        """Arguments only the caller's environment can supply, added to what the holder parses again."""
        return []

    def run_from_argv(self, argv: list[str]) -> None:
        if not self.forwarded_here(argv[2:]):
            super().run_from_argv(argv)
            return
        # Parsed here first: --help, and every mistake in the arguments, are answered at once as always.
        self._called_from_command_line = True
        parser = self.create_parser(argv[0], argv[1])
        options = vars(parser.parse_args(argv[2:]))
        code = forward(self, name=argv[1], argv=[*argv[2:], *self.caller_arguments(options)], options=options)
        if code is None:
            super().run_from_argv(argv)  # no holder could be started here: this process holds the palace
            return
        sys.exit(code)


def forward(command: HeldPalaceCommand, *, name: str, argv: list[str], options: dict[str, Any]) -> int | None:
    """Run the command line in the holder and relay its output; its exit status, None when no holder is there."""
    data_dir = settings.PALAZZO.data_dir
    stdin_copy: Path | None = None
    try:
        for _attempt in range(NOT_ACCEPTED_RETRIES + 1):
            try:
                connection = holder.ensure(data_dir)
            except holder.HolderUnavailable as exc:
                if stdin_copy is not None:  # standard input is read already: it cannot be run here now
                    sys.stderr.write(f"palazzo: the palace's holder is gone ({exc}); run `{name}` again\n")
                    return 75
                logger.info("running here: %s", exc)
                return None
            if command.stdin_option and not options.get(command.stdin_option) and stdin_copy is None:
                stdin_copy = _copy_stdin(data_dir)
                argv = [*argv, f"--{command.stdin_option.replace('_', '-')}", str(stdin_copy)]
            try:
                request = {
                    "palazzo": holder.PROTOCOL_COMMAND,
                    "name": name,
                    "args": argv,
                    "cwd": os.getcwd(),
                    "pid": os.getpid(),
                    "tty": sys.stderr.isatty(),  # progress bars are drawn on the client's terminal only
                }
                connection.sendall(holder.encode(request))
                code = _relay(connection)
            except OSError:
                code = NOT_ACCEPTED
            finally:
                connection.close()
            if code != NOT_ACCEPTED:
                return code
            # A holder leaving (idle, or handing over) drops connections it never accepted: nothing ran, and
            # the next holder runs the command.
            logger.info("the palace's holder left before it took `%s`; asking the next one", name)
        sys.stderr.write(f"palazzo: no holder of the palace took `{name}`; run it again\n")
        return 75
    finally:
        if stdin_copy is not None:
            stdin_copy.unlink(missing_ok=True)


def _copy_stdin(data_dir: Path) -> Path:
    """Standard input into a file only this user can read, in the data dir (the holder reads it there)."""
    descriptor, name = tempfile.mkstemp(prefix=".stdin-", suffix=".part", dir=data_dir)
    with os.fdopen(descriptor, "wb") as copy:
        while chunk := sys.stdin.buffer.read(1 << 20):
            copy.write(chunk)
    return Path(name)


def _relay(connection: Any) -> int:
    """Relay the holder's frames; the command's exit status, NOT_ACCEPTED when the holder never took it."""
    buffer = bytearray()
    accepted = False
    while True:
        try:
            line = holder.read_line(connection, buffer)
        except OSError:
            line = None
        if line is None:
            break
        accepted = True
        try:
            frame = json.loads(line)
        except ValueError:
            continue
        if not isinstance(frame, dict):
            continue
        if "exit" in frame:
            code = frame["exit"]
            return code if isinstance(code, int) else 1
        if "error" in frame:
            sys.stderr.write(f"palazzo: the palace's holder refused the command: {frame['error']}\n")
            return 2
        for key, stream in (("out", sys.stdout), ("err", sys.stderr)):
            if isinstance(frame.get(key), str):
                with contextlib.suppress(BrokenPipeError):
                    stream.write(frame[key])
                    stream.flush()
    if not accepted:
        return NOT_ACCEPTED
    sys.stderr.write(
        "palazzo: the palace's holder went away before the command finished; what it acknowledged is kept "
        "(check with `palazzo status`, then run the command again if needed)\n"
    )
    return 75  # EX_TEMPFAIL: try again


class _Frames(io.TextIOBase):
    """A text stream whose writes go back to the client as frames of one kind."""

    def __init__(self, emit: Emit, kind: str, *, tty: bool = False) -> None:
        self._emit = emit
        self._kind = kind
        self._tty = tty

    def write(self, text: str) -> int:
        self._emit(self._kind, text)
        return len(text)

    def isatty(self) -> bool:
        return self._tty


def _held_command(name: str) -> HeldPalaceCommand | None:
    app = get_commands().get(name)
    command = load_command_class(app, name) if app is not None else None
    return command if isinstance(command, HeldPalaceCommand) else None


def exclusive(name: str) -> bool:
    """Whether the named command runs in the holder only with nobody else connected."""
    command = _held_command(name)
    return command is not None and command.exclusive


def run_forwarded(request: dict[str, Any], emit: Emit) -> int:
    """Run a forwarded command line here, in the holder; its exit status."""
    name, argv = request["name"], request["args"]
    out, err = _Frames(emit, "out"), _Frames(emit, "err", tty=request.get("tty") is True)
    command = _held_command(name)
    if command is None:
        err.write(f"palazzo: `{name}` is not a command the palace's holder runs\n")
        return 2
    cwd = request.get("cwd")
    close_old_connections()
    try:
        parser = command.create_parser("palazzo", name)
        options = vars(parser.parse_args(argv))
        _resolve_paths(options, command.path_options, Path(cwd) if isinstance(cwd, str) else None)
        args = options.pop("args", ())
        options.pop("skip_checks", None)
        command.execute(*args, stdout=out, stderr=err, skip_checks=True, **options)
        return 0
    except CommandError as exc:
        err.write(f"CommandError: {exc}\n")
        return exc.returncode
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    except Exception as exc:
        logger.exception("`%s` failed in the holder", name)
        err.write(
            f"palazzo: `{name}` failed unexpectedly ({type(exc).__name__}: {exc}); the holder's log has the details\n"
        )
        return 1
    finally:
        close_old_connections()


def _resolve_paths(options: dict[str, Any], dests: tuple[str, ...], cwd: Path | None) -> None:
    if cwd is None or not cwd.is_absolute():
        return
    for dest in dests:
        value = options.get(dest)
        if isinstance(value, list):
            options[dest] = [_resolved(item, cwd) for item in value]
        elif value is not None:
            options[dest] = _resolved(value, cwd)


def _resolved(value: Any, cwd: Path) -> Any:
    if isinstance(value, Path):
        return value if value.expanduser().is_absolute() else cwd / value
    if isinstance(value, str) and value and value != "-":
        return value if Path(value).expanduser().is_absolute() else str(cwd / value)
    return value
