"""`manage.py token create NAME [--scope read|write] [--owner WHO] [--user NAME]`, `token list`, `token revoke NAME`."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from palace.errors import PalaceError
from palace.governance import tokens
from palace.management.database import prepare_database


def _when(value: Any) -> str:
    return value.isoformat(timespec="seconds") if value else "-"


class Command(BaseCommand):
    help = "Create, list and revoke the API tokens of /mcp, /ingest, /export and /metrics."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="Create a token and print its secret (shown this once only).")
        create.add_argument("name")
        create.add_argument("--scope", choices=tokens.SCOPES, default="write")
        create.add_argument("--owner", default="", help="Who holds the token (free text).")
        create.add_argument("--user", help="the admin user it belongs to: it stops working while that user is inactive")
        create.add_argument(
            "--wings", help="comma-separated wings: the token reads and writes only these (default: every wing)"
        )
        listing = sub.add_parser("list", help="List tokens (never their secrets).")
        listing.add_argument("--json", action="store_true")
        revoke = sub.add_parser("revoke", help="Revoke a token: it stops working at once.")
        revoke.add_argument("name")

    def handle(self, *args: Any, **options: Any) -> None:
        prepare_database()
        try:
            if options["action"] == "create":
                wings = options["wings"].split(",") if options["wings"] is not None else None
                token = tokens.create_token(
                    name=options["name"],
                    scope=options["scope"],
                    owner=options["owner"],
                    wings=wings,
                    user=options["user"],
                )
                self.stderr.write(
                    f"created {token['scope']} token {token['name']!r}; its secret is shown once, store it now:"
                )
                self.stdout.write(token["secret"])
            elif options["action"] == "list":
                rows = tokens.list_tokens()
                if options["json"]:
                    self.stdout.write(json.dumps(rows, default=_when, indent=2))
                    return
                self.stdout.write(
                    f"{'NAME':<24} {'SCOPE':<6} {'OWNER':<20} {'CREATED':<26} {'LAST USED':<26} {'REVOKED':<26} WINGS"
                )
                for row in rows:
                    self.stdout.write(
                        f"{row['name']:<24} {row['scope']:<6} {row['owner'][:20]:<20} {_when(row['created_at']):<26} "
                        f"{_when(row['last_used_at']):<26} {_when(row['revoked_at']):<26} "
                        f"{','.join(row['wings']) or 'all'}"
                    )
            else:
                token = tokens.revoke_token(name=options["name"])
                self.stderr.write(f"revoked token {token['name']!r} at {_when(token['revoked_at'])}")
        except PalaceError as exc:
            raise CommandError(str(exc)) from None
