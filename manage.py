#!/usr/bin/env python
"""Django's command-line utility for palazzo."""

import os
import sys


def main() -> None:
    """Run a management command."""
    if sys.argv[1:] == ["runmcp"]:
        # On an embedded palace runmcp is a pipe to the palace's holder: the console script starts it
        # without Django (and hands the rest back to Django), so the client's first answer does not wait.
        from palazzo_site.cli import main as palazzo

        sys.exit(palazzo(["runmcp"]))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "palazzo_site.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
