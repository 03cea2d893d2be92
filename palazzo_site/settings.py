"""Django settings; every value comes from palazzo_site.environment."""

from __future__ import annotations

import secrets
import sys
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from palazzo_site.environment import ConfigurationError, read_environment

try:
    PALAZZO = read_environment()
except ConfigurationError as exc:
    raise ImproperlyConfigured(str(exc)) from None

BASE_DIR = Path(__file__).resolve().parent.parent
PALAZZO.data_dir.mkdir(parents=True, exist_ok=True)


def _secret_key() -> str:
    if PALAZZO.secret_key:
        return PALAZZO.secret_key
    # A stable per-install key keeps admin sessions valid across restarts without asking the user.
    key_file = PALAZZO.data_dir / "secret_key"
    if not key_file.exists():
        key_file.write_text(secrets.token_urlsafe(50))
        key_file.chmod(0o600)
    return key_file.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = PALAZZO.debug
# The host guard middleware enforces PALAZZO_ALLOWED_HOSTS for every route, MCP included.
ALLOWED_HOSTS = ["*"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    # Its templates and static files: /api/docs serves Swagger UI from here instead of a CDN (works offline).
    "ninja",
    "palace",
    "palazzo_site",
]

MIDDLEWARE = [
    "palazzo_site.http.HostGuardMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Serves the admin's static files under gunicorn without a separate web server.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "palazzo_site.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "palazzo_site.wsgi.application"
ASGI_APPLICATION = "palazzo_site.asgi.application"

if PALAZZO.database_url:
    DATABASES = {"default": dj_database_url.parse(PALAZZO.database_url, conn_max_age=60)}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(PALAZZO.data_dir / "palazzo.sqlite3"),
            # Persistent connections: closing the last one checkpoints the WAL (an fsync per request).
            "CONN_MAX_AGE": None,
            "OPTIONS": {
                # WAL lets the admin read while the server writes; NORMAL keeps commits durable
                # against process crashes without an fsync per transaction.
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=10000;",
                "transaction_mode": "IMMEDIATE",
            },
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_PASSWORD_VALIDATORS: list[dict[str, str]] = []
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = PALAZZO.data_dir / "static"
STATIC_ROOT.mkdir(exist_ok=True)
WHITENOISE_USE_FINDERS = True
DATA_UPLOAD_MAX_MEMORY_SIZE = 40 * 1024 * 1024

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    # stderr only: in stdio mode stdout carries the MCP protocol and nothing else.
    "handlers": {"stderr": {"class": "logging.StreamHandler", "stream": sys.stderr, "formatter": "plain"}},
    "root": {"handlers": ["stderr"], "level": PALAZZO.log_level},
    "loggers": {"django": {"handlers": ["stderr"], "level": PALAZZO.log_level, "propagate": False}},
}
