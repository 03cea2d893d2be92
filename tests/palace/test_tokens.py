"""API tokens on the real database (SQLite, and PostgreSQL under `make unit-postgres`)."""

from __future__ import annotations

import hashlib
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from palace.errors import InvalidInput, NotFound
from palace.governance import tokens
from palace.models import ApiToken

pytestmark = pytest.mark.django_db


def test_it_shows_the_secret_once_and_stores_only_its_hash() -> None:
    created = tokens.create_token(name="ci-bot", scope="read", owner="ops")
    secret = created["secret"]
    row = ApiToken.objects.get(name="ci-bot")
    assert secret.startswith(f"pz_{row.lookup}_")
    assert row.secret_hash == hashlib.sha256(secret.split("_", 2)[2].encode()).hexdigest()
    assert secret not in str(tokens.list_tokens())
    identity = tokens.authenticate(secret)
    assert identity is not None and (identity.name, identity.scope, identity.added_by) == (
        "ci-bot",
        "read",
        "token:ci-bot",
    )
    assert not identity.can_write


def test_it_refuses_wrong_malformed_and_revoked_secrets() -> None:
    secret = tokens.create_token(name="laptop")["secret"]
    assert tokens.active_tokens_exist()
    assert tokens.authenticate(secret[:-1] + ("A" if secret[-1] != "A" else "B")) is None
    assert tokens.authenticate("pz_nothing_here") is None
    assert tokens.authenticate("Bearer") is None
    tokens.revoke_token(name="laptop")
    assert tokens.authenticate(secret) is None
    assert not tokens.active_tokens_exist()


def test_it_records_when_a_token_was_last_used() -> None:
    secret = tokens.create_token(name="agent")["secret"]
    assert ApiToken.objects.get(name="agent").last_used_at is None
    tokens.authenticate(secret)
    assert ApiToken.objects.get(name="agent").last_used_at is not None


def test_it_names_the_field_and_the_rule_for_bad_input() -> None:
    tokens.create_token(name="taken")
    with pytest.raises(InvalidInput) as duplicate:
        tokens.create_token(name="taken")
    assert "name" in duplicate.value.errors
    with pytest.raises(InvalidInput) as bad:
        tokens.create_token(name="has space", scope="admin")
    assert set(bad.value.errors) == {"name", "scope"}
    with pytest.raises(NotFound):
        tokens.revoke_token(name="never-made")


def test_it_creates_lists_and_revokes_from_the_command_line() -> None:
    out, err = StringIO(), StringIO()
    call_command("token", "create", "deploy-bot", "--scope", "read", stdout=out, stderr=err)
    secret = out.getvalue().strip()
    assert "shown once" in err.getvalue()
    assert tokens.authenticate(secret) is not None
    listing = StringIO()
    call_command("token", "list", stdout=listing)
    assert "deploy-bot" in listing.getvalue() and secret not in listing.getvalue()
    call_command("token", "revoke", "deploy-bot", stderr=StringIO())
    assert tokens.authenticate(secret) is None
    with pytest.raises(CommandError, match="already exists"):
        call_command("token", "create", "deploy-bot", stdout=StringIO(), stderr=StringIO())
