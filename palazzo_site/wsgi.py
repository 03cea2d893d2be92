"""WSGI entry point (the admin and REST routes only; MCP needs the ASGI app)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "palazzo_site.settings")
application = get_wsgi_application()
