"""`palazzo vocabulary [show [--json]]`, `vocabulary set PRESET`, `vocabulary add-wing|add-hall|add-category NAME`."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from palace.errors import PalaceError
from palace.management.database import prepare_database
from palace.schema.vocabulary import PRESETS, Vocabulary, active_vocabulary, preset, save_vocabulary

ADDITIONS = {"add-wing": "wings", "add-hall": "halls", "add-category": "categories"}


class Command(BaseCommand):
    help = "Show or change the palace's own wings, halls and categories (recorded in its database)."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action")
        show = sub.add_parser("show", help="Print the palace's vocabulary (the default action).")
        show.add_argument("--json", action="store_true", help="print it as JSON")
        chosen = sub.add_parser("set", help=f"Replace the vocabulary with a preset: {', '.join(PRESETS)}.")
        chosen.add_argument("preset", help=f"one of {', '.join(PRESETS)}")
        for action, kind in ADDITIONS.items():
            added = sub.add_parser(action, help=f"Add one value to the palace's {kind}.")
            added.add_argument("name")

    def handle(self, *args: Any, **options: Any) -> None:
        prepare_database()
        action = options.get("action") or "show"
        try:
            if action == "set":
                vocabulary = save_vocabulary(preset(options["preset"]))
            elif action in ADDITIONS:
                vocabulary = self._added(ADDITIONS[action], options["name"])
            else:
                vocabulary = active_vocabulary()
        except PalaceError as exc:
            raise CommandError(str(exc)) from None
        if options.get("json"):
            self.stdout.write(json.dumps(vocabulary.as_dict(), indent=2))
            return
        self.stdout.write(_described(vocabulary))
        if action != "show":
            self.stderr.write("recorded; memories keep their filing; a running serve or holder uses it once restarted")

    @staticmethod
    def _added(kind: str, name: str) -> Vocabulary:
        current = active_vocabulary()
        values = getattr(current, kind)
        if name in values:
            raise CommandError(f"{kind}: {name!r} is already in the palace's {kind}")
        return save_vocabulary(current.replacing({kind: (*values, name)}))


def _described(vocabulary: Vocabulary) -> str:
    return "\n".join(
        [f"preset:     {vocabulary.preset}"]
        + [f"{kind + ':':<11} {', '.join(getattr(vocabulary, kind))}" for kind in ("wings", "halls", "categories")]
    )
