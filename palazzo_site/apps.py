"""App config for the site: it holds the process commands (`serve`, `runmcp`) that start the entry points."""

from django.apps import AppConfig


class SiteConfig(AppConfig):
    """The site: settings, the ASGI root, HTTP middleware and the commands that run a server process."""

    name = "palazzo_site"
    label = "palazzo_site"
