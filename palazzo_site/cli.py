"""The `palazzo` console script: `palazzo hook ...` without Django, every other command through Django.

`palazzo <command>` runs the management command of that name (`palazzo serve`, `palazzo runmcp`,
`palazzo feed`, `palazzo install-hooks` ...; dashes stand for underscores), as `manage.py` does.
`palazzo runmcp` on an embedded palace is a pipe to the palace's holder (palazzo_site.proxy) and
`palazzo holder` is that holder (palazzo_site.holding): neither waits for Django to answer its first line.
`palazzo hook` is what a harness runs on every session event: it must answer within a few hundred
milliseconds, so it imports only the standard library (palazzo_site.hook) and never Django;
`palazzo install-hooks` edits a harness's settings file and needs no Django either.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from palazzo_site.environment import PalazzoEnvironment


def main(argv: list[str] | None = None) -> int:
    """Dispatch one command line; returns the exit status."""
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "hook":
        from palazzo_site.hook import main as hook_main

        return hook_main(args[1:])
    if args and args[0] == "install-hooks":
        from palazzo_site.install_hooks import main as install_main

        return install_main(args[1:])
    if args[:2] == ["feed", "--spool"] and len(args) == 2 and _server_feeds_it():
        return 0
    if args[:1] == ["holder"]:
        from palazzo_site.holding import main as holder_main

        return holder_main(args[1:])
    if args == ["runmcp"] and (env := _held_palace_env()) is not None:
        from palazzo_site.proxy import run_checked

        return run_checked(env.data_dir, read_only=env.read_only)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "palazzo_site.settings")
    from django.core.management import execute_from_command_line

    command = [args[0].replace("-", "_"), *args[1:]] if args and not args[0].startswith("-") else args
    execute_from_command_line(["palazzo", *command])
    return 0


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
