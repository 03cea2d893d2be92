"""Who may reach the palace over HTTP: the token rules of /mcp, /ingest, /export, /metrics, /feed and /wake-up.

The site's ASGI middleware (palazzo_site.middleware.BearerAuth) applies them to every request and puts
the authenticated identity in the ASGI scope (SCOPE_KEY), where the MCP tools and the Django views read
it (request_identity) to stamp writes.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import socket
from collections.abc import MutableMapping
from typing import Any

from django.conf import settings
from django.db import close_old_connections

from palace.governance import oauth, tokens
from palace.governance.tokens import TokenIdentity

logger = logging.getLogger(__name__)


SCOPE_KEY = "palazzo.token"
PROTECTED_PREFIXES = ("/mcp", "/ingest", "/export", "/metrics", "/feed", "/wake-up")
WRITE_ROUTES = (("POST", "/ingest"), ("POST", "/feed"))


@functools.lru_cache(maxsize=64)
def is_loopback_host(host: str) -> bool:
    """Whether a host name or address only ever reaches this machine."""
    host = host.strip().strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    return bool(addresses) and all(ipaddress.ip_address(str(a).split("%")[0]).is_loopback for a in addresses)


def bind_host(bind: str) -> str:
    """The host part of HOST:PORT (IPv6 in brackets or not)."""
    return bind.rpartition(":")[0].strip("[]")


def insecure_start_problem(bind: str) -> str | None:
    """Why serving on this address is refused (off loopback, no token, no PALAZZO_ALLOW_INSECURE), or None."""
    if is_loopback_host(bind_host(bind)) or tokens.active_tokens_exist() or oauth.enabled():
        return None
    if settings.PALAZZO.allow_insecure:
        logger.warning(
            "serving on %s, off loopback, with no API token: anyone who can reach it can read and write the "
            "palace (PALAZZO_ALLOW_INSECURE=1). Create one with `palazzo token create NAME`.",
            bind,
        )
        return None
    return (
        f"palazzo refuses to serve on {bind}, off loopback, with no API token: anyone on the network could read "
        "and write the palace. Create a token first (`palazzo token create NAME`), bind 127.0.0.1, or "
        "set PALAZZO_ALLOW_INSECURE=1 to accept the risk."
    )


def is_protected(path: str) -> bool:
    """Whether a path needs a bearer token (when tokens exist or the server is reachable off loopback)."""
    return any(path == prefix or path.startswith(prefix + "/") for prefix in PROTECTED_PREFIXES)


def request_identity(request_or_scope: Any) -> TokenIdentity | None:
    """The token identity of a request (Django request, Starlette request or ASGI scope), None when unauthenticated."""
    scope = request_or_scope
    if not isinstance(scope, MutableMapping):
        scope = getattr(request_or_scope, "scope", None)
    identity = scope.get(SCOPE_KEY) if isinstance(scope, MutableMapping) else None
    return identity if isinstance(identity, TokenIdentity) else None


def writer(request_or_scope: Any, claimed: str) -> str:
    """The added_by stamp of a write: the token's identity over anything the client claims."""
    identity = request_identity(request_or_scope)
    return identity.added_by if identity is not None else claimed


def token_wings(request_or_scope: Any) -> tuple[str, ...] | None:
    """The wings a request's token is limited to; None when it sees every wing (or no token was presented)."""
    identity = request_identity(request_or_scope)
    return identity.wings if identity is not None else None


def read_scope_refusal(request_or_scope: Any, tool: str) -> str | None:
    """The error for a read-scoped token calling a write tool, or None when allowed."""
    identity = request_identity(request_or_scope)
    if identity is None or identity.can_write:
        return None
    return (
        f"[read_scope] {identity.described} has the read scope: {tool} writes to the palace and needs a token "
        "with the write scope; the read tools still work, and the operator can issue a write token"
    )


def _authenticate(presented: str) -> TokenIdentity | None:
    if presented.startswith(tokens.PREFIX + "_") or not oauth.enabled():
        return tokens.authenticate(presented)
    return oauth.authenticate(presented)


def challenge(error: str | None = None, *, scope: str | None = None) -> str:
    """The WWW-Authenticate value of a refusal; with OAuth on, it names the resource metadata (RFC 9728)."""
    parts = ['Bearer realm="palazzo"']
    if oauth.enabled():
        parts.append(f'resource_metadata="{oauth.resource_metadata_url()}"')
    if error:
        parts.append(f'error="{error}"')
    if scope:
        parts.append(f'scope="{scope}"')
    return ", ".join(parts)


def check_request(presented: str | None, server_host: str | None) -> tuple[bool, TokenIdentity | None]:
    """(token required, identity) for one request; blocking (it reads the database), so run it in a thread."""
    close_old_connections()
    try:
        identity = _authenticate(presented) if presented else None
        if identity is not None:
            return True, identity
        if oauth.enabled():
            return True, None  # a public server: people sign in, nobody passes without a token
        off_loopback = not is_loopback_host(bind_host(settings.PALAZZO.bind)) or (
            server_host is not None and not is_loopback_host(server_host)
        )
        return tokens.active_tokens_exist() or (off_loopback and not settings.PALAZZO.allow_insecure), None
    finally:
        close_old_connections()
