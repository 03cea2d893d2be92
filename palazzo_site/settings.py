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
if PALAZZO.oauth_enabled:
    # The OAuth 2.1 authorization server of HTTP MCP (palace.routes.oauth). Only then: its import costs
    # every start-up ~45 ms (runmcp's first answer waits for it); `serve` migrates its tables at start.
    INSTALLED_APPS.insert(INSTALLED_APPS.index("palace"), "oauth2_provider")

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

# OAuth 2.1 for MCP clients (docs/security.md): django-oauth-toolkit as the authorization server, with
# the admin's users signing in. Everything below only matters when PALAZZO_PUBLIC_URL is set.
LOGIN_URL = "oauth2_provider:login"
_PUBLIC_URL = PALAZZO.public_url or "http://127.0.0.1"
OAUTH2_PROVIDER = {
    "SCOPES_BACKEND_CLASS": "palace.governance.oauth.PalaceScopes",
    "PKCE_REQUIRED": True,
    # S256 only; no implicit or password grant (RFC 9700, OAuth 2.1).
    "COMPLIANT_BCP_RFC9700_PKCE_METHOD": True,
    "COMPLIANT_BCP_RFC9700_IMPLICIT_GRANT": True,
    "COMPLIANT_BCP_RFC9700_PASSWORD_GRANT": True,
    "OAUTH2_RESPONSE_TYPES_SUPPORTED": ["code"],
    "OAUTH2_GRANT_TYPES_SUPPORTED": ["authorization_code", "refresh_token"],
    "OAUTH2_TOKEN_ENDPOINT_AUTH_METHODS_SUPPORTED": ["none", "client_secret_post", "client_secret_basic"],
    "AUTHORIZATION_CODE_EXPIRE_SECONDS": 60,
    "ACCESS_TOKEN_EXPIRE_SECONDS": PALAZZO.oauth_access_token_seconds,
    "REFRESH_TOKEN_EXPIRE_SECONDS": 30 * 24 * 3600,
    "ROTATE_REFRESH_TOKEN": True,
    # A refresh token used twice revokes its whole family: a stolen one stops working for both.
    "REFRESH_TOKEN_REUSE_PROTECTION": True,
    # Native clients listen on a loopback port of their choosing (RFC 8252 section 7.3).
    "ALLOW_LOCALHOST_LOOPBACK": True,
    "ALLOWED_REDIRECT_URI_SCHEMES": ["https", "http"],
    "DCR_ENABLED": PALAZZO.oauth_registration == "open",
    "DCR_REGISTRATION_PERMISSION_CLASSES": ("oauth2_provider.dcr.AllowAllDCRPermission",),
    "OIDC_ISS_ENDPOINT": _PUBLIC_URL,
    "OAUTH2_PROTECTED_RESOURCE_IDENTIFIER": _PUBLIC_URL + "/mcp",
    "OAUTH2_PROTECTED_RESOURCE_AUTHORIZATION_SERVERS": [_PUBLIC_URL],
    "OAUTH2_PROTECTED_RESOURCE_NAME": "palazzo",
}
if PALAZZO.public_url:
    # The login and consent forms post from the public origin, which may sit behind a TLS proxy.
    CSRF_TRUSTED_ORIGINS = [PALAZZO.public_url]
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = PALAZZO.public_url.startswith("https://")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    # stderr only: in stdio mode stdout carries the MCP protocol and nothing else.
    "handlers": {"stderr": {"class": "logging.StreamHandler", "stream": sys.stderr, "formatter": "plain"}},
    "root": {"handlers": ["stderr"], "level": PALAZZO.log_level},
    "loggers": {
        "django": {"handlers": ["stderr"], "level": PALAZZO.log_level, "propagate": False},
        # At debug level oauthlib and the toolkit log authorization codes and tokens: never below INFO.
        "oauthlib": {"level": "INFO" if PALAZZO.log_level == "DEBUG" else PALAZZO.log_level},
        "oauth2_provider": {"level": "INFO" if PALAZZO.log_level == "DEBUG" else PALAZZO.log_level},
    },
}
