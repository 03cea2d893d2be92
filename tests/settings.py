"""Test settings: a throwaway data dir, decided before the real settings read the environment."""

import os
import tempfile

os.environ["PALAZZO_DATA_DIR"] = os.environ.get("PALAZZO_TEST_DATA_DIR") or tempfile.mkdtemp(prefix="palazzo-test-")
os.environ.setdefault("PALAZZO_LOG_LEVEL", "warning")

from palazzo_site.settings import *  # noqa: F403

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":  # noqa: F405
    # A file, as in production (WAL, busy timeout, immediate transactions): SQLite's default test
    # database is a shared-cache memory database, where a write meeting another thread's fails at
    # once with "database table is locked" instead of waiting out the busy timeout.
    DATABASES["default"]["TEST"] = {"NAME": str(PALAZZO.data_dir / "test-palazzo.sqlite3")}  # noqa: F405
