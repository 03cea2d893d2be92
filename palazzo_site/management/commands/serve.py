"""`python manage.py serve`: migrate, then gunicorn with one uvicorn worker (MCP at /mcp)."""

from __future__ import annotations

import os
import sys
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, connections

from palace.governance.auth import insecure_start_problem
from palazzo_site.environment import ConfigurationError, _bind
from palazzo_site.gunicorn_conf import several_workers_problem


class Command(BaseCommand):
    help = "Migrate the database, then serve HTTP (Streamable HTTP MCP at /mcp) with gunicorn + uvicorn."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--bind", help="HOST:PORT to listen on (default: PALAZZO_BIND, 127.0.0.1:6334).")
        parser.add_argument(
            "--workers",
            type=int,
            default=1,
            help="Worker processes (default 1; more than one needs QDRANT_URL: the embedded store is single-process).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        env = settings.PALAZZO
        bind = options["bind"] or env.bind
        try:
            bind = _bind("--bind", bind)
        except ConfigurationError as exc:
            raise CommandError(str(exc)) from None
        workers = options["workers"]
        if workers < 1:
            raise CommandError("--workers must be at least 1")
        problem = several_workers_problem(workers, env.qdrant_url)
        if problem:
            raise CommandError(problem)
        try:
            call_command("migrate", interactive=False, verbosity=0)
        except DatabaseError as exc:
            raise CommandError(
                f"cannot prepare the database ({exc}); check that the data dir {env.data_dir} (or DATABASE_URL) "
                "is writable by this user"
            ) from None
        problem = insecure_start_problem(bind)
        connections.close_all()
        if problem:
            raise CommandError(problem)
        # The ASGI lifespan and the token check read the bind from the environment: give them the real one.
        os.environ["PALAZZO_BIND"] = bind
        sys.stderr.write(f"palazzo: serving on http://{bind} (MCP at /mcp)\n")
        sys.stderr.flush()
        argv = [
            sys.executable,
            "-m",
            "gunicorn",
            "--config",
            "python:palazzo_site.gunicorn_conf",
            "--bind",
            bind,
            "--workers",
            str(workers),
            "palazzo_site.asgi:application",
        ]
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "palazzo_site.settings")
        os.execv(sys.executable, argv)
