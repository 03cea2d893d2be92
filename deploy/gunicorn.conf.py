"""gunicorn settings for a deployed palazzo (deploy/palazzo.service runs `gunicorn -c deploy/gunicorn.conf.py`).

One worker with the embedded store (Qdrant Edge allows one process); with QDRANT_URL and DATABASE_URL set,
WEB_CONCURRENCY (gunicorn's own variable, default 4) workers share the Qdrant server and the database.
"""

from __future__ import annotations

import os

from palazzo_site.environment import read_environment
from palazzo_site.gunicorn_conf import (
    child_exit,
    control_socket_disable,
    graceful_timeout,
    on_exit,
    on_starting,
    post_fork,
    timeout,
    worker_class,
)

_env = read_environment()
wsgi_app = "palazzo_site.asgi:application"
bind = [_env.bind]
# Several workers need a shared store and database; the embedded ones allow one process.
workers = int(os.environ.get("WEB_CONCURRENCY") or 4) if _env.qdrant_url and _env.database_url else 1
# The journal and logs go to stderr, which systemd sends to the journal.
accesslog = "-"
errorlog = "-"
forwarded_allow_ips = "127.0.0.1,::1"

__all__ = [
    "accesslog",
    "bind",
    "child_exit",
    "control_socket_disable",
    "errorlog",
    "forwarded_allow_ips",
    "graceful_timeout",
    "on_exit",
    "on_starting",
    "post_fork",
    "timeout",
    "worker_class",
    "workers",
    "wsgi_app",
]
