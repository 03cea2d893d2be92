"""The host and origin guard every HTTP route shares (DNS-rebinding protection)."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden


def _hostname(value: str) -> str | None:
    """The host of a Host header `host[:port]` (`[v6][:port]`, or a bare IPv6 address); None when malformed.

    The port must be ASCII digits: `localhost:evil.example` names no allowed host.
    """
    value = value.strip().lower()
    if value.startswith("["):
        host, bracket, port = value[1:].partition("]")
        if not bracket or (port and not (port.startswith(":") and _is_port(port[1:]))):
            return None
        return host
    if value.count(":") == 1:
        host, _, port = value.partition(":")
        return host if _is_port(port) else None
    return value


def _is_port(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 5


def host_allowed(host: str | None) -> bool:
    """Whether a Host header names one of PALAZZO_ALLOWED_HOSTS ('*' allows any)."""
    allowed = settings.PALAZZO.allowed_hosts
    if "*" in allowed:
        return True
    return bool(host) and _hostname(host or "") in allowed


def origin_allowed(origin: str | None) -> bool:
    """Whether an Origin header (absent for non-browser clients) is one of the allowed hosts."""
    if not origin:
        return True
    allowed = settings.PALAZZO.allowed_hosts
    if "*" in allowed:
        return True
    if origin == "null":
        return False
    return (urlsplit(origin).hostname or "").lower() in allowed


def guard_verdict(host: str | None, origin: str | None) -> tuple[int, str] | None:
    """None when the request may proceed, else (status, reason)."""
    if not host_allowed(host):
        return 421, f"Host {host!r} is not allowed (PALAZZO_ALLOWED_HOSTS)"
    if not origin_allowed(origin):
        return 403, f"Origin {origin!r} is not allowed (PALAZZO_ALLOWED_HOSTS)"
    return None


class HostGuardMiddleware:
    """Refuse foreign Host or Origin headers on every Django route."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        verdict = guard_verdict(request.META.get("HTTP_HOST"), request.META.get("HTTP_ORIGIN"))
        if verdict is not None:
            status, reason = verdict
            if status == 403:
                return HttpResponseForbidden(reason, content_type="text/plain")
            return HttpResponse(reason, status=status, content_type="text/plain")
        return self.get_response(request)
