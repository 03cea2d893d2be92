"""App config for the palace domain."""

from django.apps import AppConfig


class PalaceConfig(AppConfig):
    """The palace: memories, their journal and usage."""

    name = "palace"
    default_auto_field = "django.db.models.BigAutoField"
