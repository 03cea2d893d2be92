"""The `palazzo` console script: palazzo's own commands, grouped; `palazzo hook ...` without Django.

`palazzo <command>` runs one of the commands listed in COMMAND_GROUPS (a dash or an underscore, either
spelling): most are Django management commands, run as `manage.py` runs them but with Django's base options
(--settings, --pythonpath, --traceback ...) left out of their help, still accepted. Django's other commands
(shell, dbshell, startapp ...) are not palazzo's: `manage.py` in a checkout, `django-admin` with
DJANGO_SETTINGS_MODULE=palazzo_site.settings anywhere else.
`palazzo runmcp` on an embedded palace is a pipe to the palace's holder (palazzo_site.proxy) and
`palazzo holder` is that holder (palazzo_site.holding): neither waits for Django to answer its first line.
`palazzo hook` is what a harness runs on every session event: it must answer within a few hundred
milliseconds, so it imports only the standard library (palazzo_site.hook) and never Django;
`palazzo install-hooks` edits a harness's settings file and needs no Django either. Nothing on those paths
may import more than they do today: the listing below is plain data for that reason.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from palazzo_site.environment import PalazzoEnvironment

# What `palazzo --help` lists, in order: each line says how the command differs from its neighbours.
COMMAND_GROUPS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    (
        "serve and connect",
        (
            ("serve", "serve the palace over HTTP (MCP at /mcp, /ingest, /export, the admin) to many clients"),
            ("runmcp", "serve MCP on stdin/stdout to the one agent that started it (claude mcp add ... runmcp)"),
            ("setup", "set up Claude Code in one step: runmcp as its MCP server, and the hooks (setup claude-code)"),
            ("token", "create, list and revoke the API tokens that HTTP clients of serve present"),
        ),
    ),
    (
        "feed and hooks",
        (
            ("feed", "store what agents said in past sessions, read from harness transcripts on this machine"),
            (
                "install-hooks",
                "add palazzo's session hooks to a harness (for Codex, opencode, Gemini: its MCP server too)",
            ),
            ("hook", "answer one session event from a harness (what install-hooks has the harness run)"),
        ),
    ),
    (
        "move in and out",
        (
            ("import", "bring in another memory server's files or a chat archive (import SOURCE PATH)"),
            ("ingest", "store memories from palazzo's own JSON Lines (standard input or --file)"),
            ("export", "write every memory out as JSON Lines, memory-json or markdown"),
            ("backup", "copy the database and journal into a new directory (tokens and users too)"),
            ("restore", "bring a backup into an empty data dir and re-embed every memory"),
        ),
    ),
    (
        "operate",
        (
            ("status", "show the palace's health: totals, the largest rooms, search index, journal, feeding"),
            ("taxonomy", "show only how memories are filed: counts for every wing, room, hall and category"),
            ("vocabulary", "show or change the wings, halls and categories this palace accepts"),
            ("gain", "show calls and estimated tokens saved per MCP tool"),
            ("verify", "check the vector store against the journal; changes nothing"),
            ("rebuild", "recreate the vector store from the journal (after verify fails or the model changes)"),
            ("expire", "hard-delete memories whose expiry has passed (the journal keeps them)"),
            ("redact", "rewrite stored memories that today's redaction rules match"),
            ("audit", "export or purge the record of who read what"),
            ("migrate", "create or update the database (serve does it by itself)"),
            ("createsuperuser", "create a login for the admin at /admin/"),
        ),
    ),
)
# Commands this module runs itself, without Django (the others are management commands).
OWN_COMMANDS = frozenset({"hook", "install-hooks", "setup", "holder"})
# Commands palazzo runs but does not list: the holder is started by palazzo itself, bench-retrieval is a
# developer's measurement (docs/benchmarks.md).
HIDDEN_COMMANDS = frozenset({"holder", "bench-retrieval"})
# Old spellings kept for a release (CHANGELOG, Unreleased): the Django command each runs, and what replaces it.
DEPRECATED_ALIASES: dict[str, tuple[str, str]] = {
    "import-qdrant": ("import_qdrant", "palazzo import qdrant PATH --collection NAME (or --url URL for a server)"),
}
# Django's options on every management command: accepted as ever, left out of the help.
DJANGO_BASE_OPTIONS = frozenset(
    {
        "--version",
        "--verbosity",
        "--settings",
        "--pythonpath",
        "--traceback",
        "--no-color",
        "--force-color",
        "--skip-checks",
    }
)
# The exit status of a process that wrote into a pipe whose reader had gone (128 + SIGPIPE), as `yes | head`.
BROKEN_PIPE_STATUS = 141


def listed_commands() -> list[str]:
    """Every command `palazzo --help` lists, in its order."""
    return [name for _group, commands in COMMAND_GROUPS for name, _summary in commands]


def known_commands() -> set[str]:
    """Every command name `palazzo` runs, listed or not, in its dash spelling."""
    return {*listed_commands(), *HIDDEN_COMMANDS, *DEPRECATED_ALIASES}


def main(argv: list[str] | None = None) -> int:
    """Dispatch one command line; returns the exit status."""
    args = sys.argv[1:] if argv is None else argv
    try:
        try:
            return _dispatch(args)
        finally:
            if sys.stdout is not None:  # None when started with fd 1 closed (runmcp says why)
                sys.stdout.flush()  # a reader that left (`palazzo gain | head -1`) shows here at the latest
    except BrokenPipeError:
        if not _stdout_reader_gone():
            raise  # a socket's peer left (the holder, a server): that is a fault to show, not a reader's choice
        # Python's recipe: the rest of the output (and the flush at exit) goes nowhere, quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return BROKEN_PIPE_STATUS


def _stdout_reader_gone() -> bool:
    """Whether standard output is a pipe or socket whose reading end has been closed."""
    import select

    poller = select.poll()
    poller.register(sys.stdout.fileno(), select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _fd, events in poller.poll(0))


def _dispatch(args: list[str]) -> int:
    if args and args[0] == "hook":
        from palazzo_site.hook import main as hook_main

        return hook_main(args[1:])
    if args and args[0] == "install-hooks":
        from palazzo_site.install_hooks import main as install_main

        return install_main(args[1:])
    if args[:1] == ["setup"]:
        from palazzo_site.setup import main as setup_main

        return setup_main(args[1:])
    if args[:2] == ["feed", "--spool"] and len(args) == 2 and _server_feeds_it():
        return 0
    if args[:1] == ["holder"]:
        from palazzo_site.holding import main as holder_main

        return holder_main(args[1:])
    if args == ["runmcp"] and (env := _held_palace_env()) is not None:
        from palazzo_site.proxy import run_checked

        return run_checked(env.data_dir, read_only=env.read_only)
    if not args or args[0] in ("-h", "--help") or args == ["help"]:
        sys.stdout.write(usage())
        return 0
    if args[0] == "--version":
        sys.stdout.write(f"palazzo {palazzo_version()}\n")
        return 0
    if args[0] == "help":
        return _dispatch([args[1], "--help", *args[2:]])
    name = args[0].replace("_", "-")
    if name not in known_commands():
        sys.stderr.write(unknown_command_message(args[0]))
        return 2
    if name in OWN_COMMANDS:
        return _dispatch([name, *args[1:]])  # install_hooks: the standard-library path, as install-hooks
    if name in DEPRECATED_ALIASES:
        django_name, replacement = DEPRECATED_ALIASES[name]
        sys.stderr.write(f"palazzo: `{args[0]}` is deprecated and goes in the next release; use `{replacement}`\n")
    else:
        django_name = name.replace("-", "_")
    return _run_management_command(django_name, args[1:])


def _run_management_command(name: str, args: list[str]) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "palazzo_site.settings")
    from django.core.management import execute_from_command_line

    _hide_django_base_options()
    execute_from_command_line(["palazzo", name, *args])
    return 0


def _hide_django_base_options() -> None:
    """Every command's parser keeps Django's base options but leaves them out of its help and usage."""
    import argparse
    from typing import Any

    from django.core.management.base import BaseCommand, CommandParser

    # BaseCommand.suppressed_base_arguments would do, but Django adds --skip-checks past it.
    create_parser = BaseCommand.create_parser

    def create_parser_without_base_options(
        command: BaseCommand, prog_name: str, subcommand: str, **kwargs: Any
    ) -> CommandParser:
        parser = create_parser(command, prog_name, subcommand, **kwargs)
        for action in parser._actions:
            if DJANGO_BASE_OPTIONS.intersection(action.option_strings):
                action.help = argparse.SUPPRESS
        return parser

    BaseCommand.create_parser = create_parser_without_base_options  # type: ignore[method-assign,assignment]


def usage() -> str:
    """`palazzo --help`: what palazzo is, then its commands by group."""
    width = max(len(name) for name in listed_commands()) + 2
    lines = [
        f"palazzo {palazzo_version()}: a memory server for AI agents, over MCP",
        "",
        "usage: palazzo <command> [options]",
        "       palazzo help <command>    (or palazzo <command> --help)",
        "       palazzo --version",
    ]
    for group, commands in COMMAND_GROUPS:
        lines += ["", f"{group}:"]
        lines += [f"  {name:<{width}}{summary}" for name, summary in commands]
    lines += [
        "",
        "A dash or an underscore, either spelling works. Django's own commands (shell, dbshell ...) run through",
        "`manage.py` in a checkout, or `django-admin` with DJANGO_SETTINGS_MODULE=palazzo_site.settings.",
    ]
    return "\n".join(lines) + "\n"


def unknown_command_message(typed: str) -> str:
    """The error for a command palazzo does not have, naming the closest one it has."""
    import difflib

    if typed.startswith("-"):
        return f"palazzo: unknown option `{typed}` (palazzo takes --help and --version; options follow a command)\n"
    candidates = listed_commands()
    close = difflib.get_close_matches(typed.replace("_", "-"), candidates, n=1, cutoff=0.6)
    hint = f"; did you mean `palazzo {close[0]}`?" if close else ""
    return f"palazzo: unknown command `{typed}`{hint} (`palazzo --help` lists them all)\n"


def palazzo_version() -> str:
    """The installed palazzo's version; in a checkout that was never installed, pyproject.toml's."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("palazzo")
    except PackageNotFoundError:
        import tomllib
        from pathlib import Path

        pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
        try:
            return str(tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["version"]) + " (not installed)"
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "unknown (not installed)"


def _held_palace_env() -> PalazzoEnvironment | None:
    """The settings of a runmcp that pipes to a holder: an embedded palace with the holder on (else Django decides)."""
    from palazzo_site.environment import ConfigurationError, read_environment

    try:
        env = read_environment()
    except ConfigurationError:
        return None  # Django says why
    if env.qdrant_url or not env.holder:
        return None
    return env


def _server_feeds_it() -> bool:
    """A detached feeder started while a server feeds the spool only watches it, without loading Django."""
    from palace.feeding import spool
    from palazzo_site.environment import ConfigurationError, read_environment

    try:
        env = read_environment()
    except ConfigurationError:
        return False  # Django says why
    if env.remote_url:
        return False
    return spool.watch_server(env.data_dir, seconds=spool.SERVER_WATCH_SECONDS)


if __name__ == "__main__":
    sys.exit(main())
