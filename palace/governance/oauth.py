"""People signing in with OAuth 2.1: the scopes they grant and what an OAuth access token may do on /mcp.

django-oauth-toolkit is the authorization server (PKCE S256, RFC 7591 registration, RFC 8414 and 9728
metadata, RFC 8707 resource indicators, refresh-token rotation, revocation); this module is the palace's
side of it: the scopes (`read`, `write`, and `wing:<name>` to limit the wings), the resource a token must
be bound to, and the identity (`user:<username>`) an access token stands for.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.utils import timezone

from palace.governance.tokens import TokenIdentity
from palace.schema.vocabulary import active_vocabulary

READ = "read"
WRITE = "write"
WING_PREFIX = "wing:"
MCP_PATH = "/mcp"
LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")


def enabled() -> bool:
    """Whether OAuth sign-in is on (PALAZZO_PUBLIC_URL is set)."""
    return bool(settings.PALAZZO.oauth_enabled)


def public_url() -> str:
    """The server's public origin, e.g. https://palazzo.example.com (only when enabled)."""
    return str(settings.PALAZZO.public_url)


def resource_identifier() -> str:
    """The protected resource every token is bound to (RFC 8707): the public URL of /mcp."""
    return public_url() + MCP_PATH


def resource_metadata_url() -> str:
    """Where a client finds the protected resource metadata of /mcp (RFC 9728, path-suffixed form)."""
    return public_url() + "/.well-known/oauth-protected-resource" + MCP_PATH


def all_scopes() -> dict[str, str]:
    """Every scope a person can grant, with the sentence the consent page shows for it."""
    scopes = {
        READ: "Read memories (find, recall, browse)",
        WRITE: "Store, correct and delete memories",
    }
    for wing in active_vocabulary().wings:
        scopes[WING_PREFIX + wing] = f"Only the {wing} wing (with the other wings chosen)"
    return scopes


def granted_scope(*, write: bool, wings: list[str] | None) -> str:
    """The scope string of a consent: read, write when granted, and wing:<name> for each chosen wing."""
    parts = [READ] + ([WRITE] if write else [])
    parts += [WING_PREFIX + wing for wing in wings or ()]
    return " ".join(parts)


def scope_wings(scopes: Iterable[str]) -> list[str]:
    """The wings named by the wing:<name> scopes among scopes."""
    return [item[len(WING_PREFIX) :] for item in scopes if item.startswith(WING_PREFIX)]


def is_this_resource(uri: str) -> bool:
    """Whether a resource indicator names this server's /mcp (a trailing slash aside)."""
    return uri.rstrip("/") == resource_identifier()


def identity_for(scope: str, username: str) -> TokenIdentity:
    """The identity a granted scope gives a person: write or read, limited to its wing scopes if any."""
    scopes = scope.split()
    wings = tuple(scope_wings(scopes))
    return TokenIdentity(name=username, scope=WRITE if WRITE in scopes else READ, wings=wings or None, kind="user")


def redirect_uri_problem(uri: Any) -> str | None:
    """Why a client's redirect URI is refused (https, or http on loopback per RFC 8252), or None."""
    if not isinstance(uri, str) or not uri:
        return "each redirect_uri must be a non-empty string"
    parts = urlsplit(uri)
    host = (parts.hostname or "").lower()
    if parts.fragment or not host:
        return f"redirect_uri {uri!r} must be an absolute URI without a fragment"
    if parts.scheme == "http" and host in LOOPBACK_HOSTS:
        return None  # a native client's loopback listener (RFC 8252 section 7.3)
    if parts.scheme != "https":
        return f"redirect_uri {uri!r} must use https (or http on 127.0.0.1, [::1] or localhost)"
    allowed = settings.PALAZZO.oauth_redirect_hosts
    if allowed and host not in allowed:
        return f"redirect_uri {uri!r}: this server registers clients redirecting to {', '.join(allowed)} only"
    return None


class PalaceScopes:
    """The toolkit's scopes backend: read, write and one wing:<name> per wing; read and write by default."""

    def get_all_scopes(self) -> dict[str, str]:
        """Every scope with its description."""
        return all_scopes()

    def get_available_scopes(
        self, application: Any = None, request: Any = None, *args: Any, **kwargs: Any
    ) -> list[str]:
        """The scopes any client may ask for."""
        return list(all_scopes())

    def get_default_scopes(self, application: Any = None, request: Any = None, *args: Any, **kwargs: Any) -> list[str]:
        """What a client that names no scope asks for."""
        return [READ, WRITE]


def authenticate(presented: str) -> TokenIdentity | None:
    """The person an OAuth access token acts for; None when unknown, expired, revoked or for another resource."""
    from oauth2_provider.models import get_access_token_model

    checksum = hashlib.sha256(presented.encode("utf-8")).hexdigest()
    token: Any = get_access_token_model().objects.select_related("user").filter(token_checksum=checksum).first()
    if token is None or token.user is None or not token.user.is_active:
        return None
    if token.expires <= timezone.now() or READ not in token.scope.split():
        return None
    # Every token this server issues is bound to its /mcp; one without a resource, or for another, is refused.
    if not token.resource or not token.allows_audience(resource_identifier()):
        return None
    return identity_for(token.scope, token.user.get_username())
