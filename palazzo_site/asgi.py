"""ASGI entry point: `palazzo_site.asgi:application` (MCP at /mcp, Django for the rest)."""

from __future__ import annotations

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "palazzo_site.settings")
django.setup()

from mcpserver.http import PalazzoApplication  # noqa: E402

application = PalazzoApplication()
