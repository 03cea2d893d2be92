"""Test settings: a throwaway data dir, decided before the real settings read the environment."""

import os
import tempfile

os.environ["PALAZZO_DATA_DIR"] = os.environ.get("PALAZZO_TEST_DATA_DIR") or tempfile.mkdtemp(prefix="palazzo-test-")
os.environ.setdefault("PALAZZO_LOG_LEVEL", "warning")

from palazzo_site.settings import *  # noqa: F403
