"""API tokens: create (the secret is returned once), list, revoke, authenticate.

A token reads `pz_<lookup>_<secret>`: the lookup finds the row, the secret is 32 random bytes of which
only the SHA-256 is stored. A fast hash is right here (unlike for passwords): the secret is high-entropy,
so there is nothing to brute-force, and every request checks one.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from palace.errors import InvalidInput, NotFound
from palace.models import ApiToken
from palace.schema.vocabulary import active_vocabulary

PREFIX = "pz"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
SCOPES = tuple(ApiToken.Scope.values)
# last_used_at is for people reading the admin; writing it on every request would serialise readers on SQLite.
LAST_USED_RESOLUTION = timedelta(seconds=60)


@dataclass(frozen=True)
class TokenIdentity:
    """Who an authenticated request is: an API token's name, or the person an OAuth token acts for."""

    name: str
    scope: str
    wings: tuple[str, ...] | None = None  # None: every wing
    kind: str = "token"  # "token": an API token; "user": a person signed in with OAuth

    @property
    def added_by(self) -> str:
        """The writer stamp of this identity's writes (journal and memories): token:<name> or user:<username>."""
        return f"{self.kind}:{self.name}"

    @property
    def described(self) -> str:
        """How errors name this identity: token 'ci' or user 'ada'."""
        return f"{self.kind} {self.name!r}"

    @property
    def can_write(self) -> bool:
        """Whether the token may call write tools and POST /ingest."""
        return self.scope == ApiToken.Scope.WRITE


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def _describe(token: ApiToken) -> dict[str, Any]:
    return {
        "name": token.name,
        "owner": token.owner,
        "scope": token.scope,
        "created_at": token.created_at,
        "last_used_at": token.last_used_at,
        "revoked_at": token.revoked_at,
        "wings": list(token.wings or []),
        "user": token.user.get_username() if token.user else None,
    }


def _clean(name: Any, scope: Any, owner: Any) -> tuple[str, str, str]:
    errors: dict[str, list[str]] = {}
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        errors["name"] = ["must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"]
    if scope not in SCOPES:
        errors["scope"] = [f"must be one of {', '.join(SCOPES)}"]
    if not isinstance(owner, str) or len(owner) > 200:
        errors["owner"] = ["must be text of at most 200 characters"]
    if errors:
        raise InvalidInput(errors)
    return name, scope, owner.strip()


def _clean_wings(wings: Any) -> list[str]:
    if wings is None:
        return []
    allowed = active_vocabulary().wings
    if not isinstance(wings, (list, tuple)) or not all(isinstance(wing, str) for wing in wings):
        raise InvalidInput.single("wings", "must be a list of wing names")
    chosen = list(dict.fromkeys(wing.strip() for wing in wings if wing.strip()))
    unknown = [wing for wing in chosen if wing not in allowed]
    if unknown or not chosen:
        raise InvalidInput.single(
            "wings", f"{', '.join(map(repr, unknown)) or 'nothing'} is not a wing; allowed: {', '.join(allowed)}"
        )
    return chosen


def _person(username: Any) -> Any:
    from django.contrib.auth import get_user_model

    if username is None:
        return None
    person = get_user_model().objects.filter(username=username).first() if isinstance(username, str) else None
    if person is None:
        raise InvalidInput.single("user", f"no user named {username!r} (create people in the admin)")
    return person


def create_token(
    *, name: Any, scope: Any = ApiToken.Scope.WRITE, owner: Any = "", wings: Any = None, user: Any = None
) -> dict[str, Any]:
    """Create a token (limited to wings, owned by a user when given); the result's `secret` is shown this once."""
    name, scope, owner = _clean(name, scope, owner)
    scoped_wings = _clean_wings(wings)
    person = _person(user)
    lookup = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    try:
        with transaction.atomic():
            token = ApiToken.objects.create(
                name=name,
                scope=scope,
                owner=owner,
                lookup=lookup,
                secret_hash=_hash(secret),
                wings=scoped_wings,
                user=person,
            )
    except IntegrityError:
        raise InvalidInput({"name": [f"a token named {name!r} already exists (names are never reused)"]}) from None
    return _describe(token) | {"secret": f"{PREFIX}_{lookup}_{secret}"}


def list_tokens() -> list[dict[str, Any]]:
    """Every token, revoked ones included, without secrets."""
    return [_describe(token) for token in ApiToken.objects.select_related("user")]


def revoke_token(*, name: Any) -> dict[str, Any]:
    """Revoke a token by name (idempotent: revoking twice keeps the first time)."""
    token = ApiToken.objects.filter(name=name).first() if isinstance(name, str) else None
    if token is None:
        raise NotFound(f"no token named {name!r}")
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    return _describe(token)


def active_tokens_exist() -> bool:
    """Whether any non-revoked token exists (then every protected route needs one)."""
    return ApiToken.objects.filter(revoked_at__isnull=True).exists()


def authenticate(presented: str) -> TokenIdentity | None:
    """The identity of a presented bearer secret, or None when it is malformed, unknown or revoked."""
    parts = presented.strip().split("_", 2)
    if len(parts) != 3 or parts[0] != PREFIX or not parts[1] or not parts[2]:
        return None
    token = ApiToken.objects.select_related("user").filter(lookup=parts[1]).first()
    # Hash and compare even without a row, so a wrong lookup costs the same time as a wrong secret.
    expected = token.secret_hash if token is not None else "0" * 64
    if not hmac.compare_digest(_hash(parts[2]), expected) or token is None or token.revoked_at is not None:
        return None
    if token.user is not None and not token.user.is_active:
        return None  # its person left (or was suspended) in the admin
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return TokenIdentity(name=token.name, scope=token.scope, wings=tuple(token.wings) if token.wings else None)
