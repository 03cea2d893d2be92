"""Redaction before write: named rules (a pattern plus an optional validator) grouped in packs.

Applied once, in palace.writes.services, to every validated memory before the duplicate hash, the vectors,
the journal or a log line see the text. A rule with a `secret` group replaces only that group (the
password of a URL, the value of `password=`), otherwise the whole match.
"""

from __future__ import annotations

import base64
import binascii
import functools
import ipaddress
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODES = ("enforce", "dry-run", "off")
DEFAULT_PACKS = ("secrets",)
RULE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
# Free-text fields of a memory (and of a supersede) that may carry pasted secrets.
REDACTED_FIELDS = ("text", "room", "session", "source_file", "reason", "superseded_reason")


class RedactionConfigError(ValueError):
    """A pack name or custom pack file palazzo cannot use."""


def luhn_valid(value: str) -> bool:
    """Payment card check digit (13-19 digits)."""
    digits = [int(c) for c in value if c.isdigit()]
    if not 13 <= len(digits) <= 19:
        return False
    total = 0
    for position, digit in enumerate(reversed(digits)):
        if position % 2:
            digit *= 2
            if digit > 9:
                digit -= 9
        total += digit
    return total % 10 == 0


def iban_valid(value: str) -> bool:
    """ISO 13616 mod-97 checksum (15-34 characters)."""
    compact = value.replace(" ", "").upper()
    if not 15 <= len(compact) <= 34 or not compact.isascii() or not compact.isalnum():
        return False
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


def ip_valid(value: str) -> bool:
    """An IPv4 or IPv6 address that parses (octets <= 255)."""
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def phone_valid(value: str) -> bool:
    """10-15 digits written with separators, or 8-15 after a leading +; bare digit runs and dates are not phones."""
    digits = sum(c.isdigit() for c in value)
    if value.startswith("+"):
        return 8 <= digits <= 15
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}.*", value) or not re.search(r"[ ().-]", value):
        return False
    return 10 <= digits <= 15


def jwt_valid(value: str) -> bool:
    """The first segment decodes to a JSON object with an `alg`."""
    header = value.split(".", 1)[0]
    try:
        decoded = json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))
    except (ValueError, binascii.Error):
        return False
    return isinstance(decoded, dict) and "alg" in decoded


VALIDATORS: dict[str, Callable[[str], bool]] = {
    "luhn": luhn_valid,
    "iban": iban_valid,
    "ip": ip_valid,
    "phone": phone_valid,
    "jwt": jwt_valid,
}


@dataclass(frozen=True)
class Rule:
    """One named pattern; matches the validator refuses are kept."""

    name: str
    pattern: re.Pattern[str]
    validator: str | None = None
    label: str = ""

    @property
    def replacement(self) -> str:
        """What a match becomes."""
        return f"[REDACTED:{self.label or self.name}]"


def _rule(name: str, pattern: str, validator: str | None = None, flags: int = 0) -> Rule:
    return Rule(name=name, pattern=re.compile(pattern, flags), validator=validator)


_KEY_VALUE = r"[^\s\"',;&]{4,}"
BUILT_IN_PACKS: dict[str, tuple[Rule, ...]] = {
    "secrets": (
        _rule(
            "private_key",
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----.*?"
            r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)",
            flags=re.DOTALL,
        ),
        _rule("aws_access_key", r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b"),
        _rule(
            "aws_secret_key",
            r"(?i)aws_?secret_?access_?key[\"']?\s*[:=]\s*[\"']?(?P<secret>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
        ),
        _rule("gcp_api_key", r"\bAIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])"),
        _rule("gcp_service_account_key", r"\"private_key_id\"\s*:\s*\"(?P<secret>[0-9a-f]{40})\""),
        _rule("github_token", r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b"),
        _rule("gitlab_token", r"\bgl(?:pat|dt|rt|ptt)-[A-Za-z0-9_-]{20,}(?![A-Za-z0-9_-])"),
        _rule(
            "slack_token",
            r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b|https://hooks\.slack\.com/services/[A-Za-z0-9/_-]{20,}",
        ),
        _rule("stripe_key", r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}\b"),
        _rule("anthropic_api_key", r"\bsk-ant-[A-Za-z0-9_-]{20,}(?![A-Za-z0-9_-])"),
        _rule("openai_api_key", r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}(?![A-Za-z0-9_-])"),
        _rule("jwt", r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{10,}", validator="jwt"),
        _rule("bearer_token", r"(?i)\bauthorization\s*:\s*bearer\s+(?!\[REDACTED:)(?P<secret>[A-Za-z0-9._~+/=-]{8,})"),
        _rule("url_password", r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]+:(?!\[REDACTED:)(?P<secret>[^\s@/]+)@"),
        _rule(
            "password_assignment",
            r"(?i)\b(?:password|passwd|pwd|pass|secret|client_secret|api_?key|access_?token|auth_?token|secret_?key)"
            rf"[\"']?\s*[:=]\s*[\"']?(?!\[REDACTED:)(?P<secret>{_KEY_VALUE})",
        ),
    ),
    "pii": (
        _rule("email", r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"),
        _rule("payment_card", r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])", validator="luhn"),
        _rule("iban", r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b", validator="iban"),
        _rule(
            "ip_address",
            r"\b(?:\d{1,3}\.){3}\d{1,3}\b|\b(?:[0-9A-Fa-f]{1,4}:){1,7}:?(?:[0-9A-Fa-f]{1,4}:?){1,7}\b",
            validator="ip",
        ),
        _rule("phone", r"(?<![\w+])\+?\(?\d[\d ().-]{6,}\d(?![\w])", validator="phone"),
    ),
}


def load_pack_file(path: Path) -> tuple[Rule, ...]:
    """A custom pack: {"rules": [{"name", "pattern", "validator"?, "label"?}]} (or the list alone)."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RedactionConfigError(f"cannot read the redaction pack {path}: {exc}") from None
    entries = document.get("rules") if isinstance(document, dict) else document
    if not isinstance(entries, list) or not entries:
        raise RedactionConfigError(f"the redaction pack {path} must hold a non-empty list of rules under 'rules'")
    rules = []
    for position, entry in enumerate(entries):
        where = f"rule {position} of {path}"
        if not isinstance(entry, dict) or set(entry) - {"name", "pattern", "validator", "label"}:
            raise RedactionConfigError(f"{where} must be an object with name, pattern, validator?, label?")
        name, pattern, validator, label = (entry.get(key) for key in ("name", "pattern", "validator", "label"))
        if not isinstance(name, str) or not RULE_NAME.match(name):
            raise RedactionConfigError(f"{where}: name must be 1-64 of a-z, 0-9, '_', '-'")
        if not isinstance(pattern, str) or not pattern:
            raise RedactionConfigError(f"{where}: pattern must be a non-empty regular expression")
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise RedactionConfigError(f"{where}: pattern is not a valid regular expression: {exc}") from None
        if validator is not None and validator not in VALIDATORS:
            raise RedactionConfigError(f"{where}: validator must be one of {', '.join(VALIDATORS)}")
        if label is not None and (not isinstance(label, str) or not RULE_NAME.match(label)):
            raise RedactionConfigError(f"{where}: label must be 1-64 of a-z, 0-9, '_', '-'")
        rules.append(Rule(name=name, pattern=compiled, validator=validator, label=label or ""))
    return tuple(rules)


def resolve_packs(names: Iterable[str]) -> tuple[Rule, ...]:
    """The rules of the named packs (built-in names or JSON file paths), in order; rule names are unique."""
    rules: list[Rule] = []
    for name in names:
        if name in BUILT_IN_PACKS:
            rules.extend(BUILT_IN_PACKS[name])
        elif name.endswith(".json") or "/" in name:
            rules.extend(load_pack_file(Path(name).expanduser()))
        else:
            raise RedactionConfigError(
                f"unknown redaction pack {name!r}: use {', '.join(BUILT_IN_PACKS)} or the path of a JSON file"
            )
    seen = Counter(rule.name for rule in rules)
    repeated = sorted(name for name, count in seen.items() if count > 1)
    if repeated:
        raise RedactionConfigError(f"redaction rule names must be unique across packs: {', '.join(repeated)}")
    return tuple(rules)


@dataclass(frozen=True)
class Redactor:
    """The rules in force and what to do with a match (enforce, dry-run: count only, off)."""

    mode: str
    rules: tuple[Rule, ...]

    @property
    def active(self) -> bool:
        """Whether texts are inspected at all."""
        return self.mode != "off" and bool(self.rules)

    def scan(self, text: str, *, any_case: bool = False) -> tuple[str, Counter[str]]:
        """The text with every match replaced, and the count per rule (the text as given in dry-run).

        any_case matches every rule whatever the letters' case: for values already casefolded.
        """
        counts: Counter[str] = Counter()
        if not self.active or not text:
            return text, counts
        redacted = text
        for rule in self.rules:
            pattern = _any_case(rule.pattern) if any_case else rule.pattern
            redacted = pattern.sub(functools.partial(_replace, rule, counts=counts), redacted)
        return (redacted if self.mode == "enforce" else text), counts

    def record(self, fields: dict[str, Any]) -> Counter[str]:
        """Redact the free-text fields of a memory record in place; the counts per rule."""
        total: Counter[str] = Counter()
        for key in REDACTED_FIELDS:
            value = fields.get(key)
            if isinstance(value, str) and value:
                # A room arrives in its canonical, casefolded form: "AKIA..." reads "akia..." there.
                fields[key], counts = self.scan(value, any_case=key == "room")
                total.update(counts)
        return total

    def deep(self, value: Any, counts: Counter[str]) -> Any:
        """Every string inside a JSON value redacted (journal payloads), counting into counts."""
        if isinstance(value, str):
            redacted, found = self.scan(value)
            counts.update(found)
            return redacted
        if isinstance(value, list):
            return [self.deep(item, counts) for item in value]
        if isinstance(value, Mapping):
            return {key: self.deep(item, counts) for key, item in value.items()}
        return value


@functools.lru_cache(maxsize=256)
def _any_case(pattern: re.Pattern[str]) -> re.Pattern[str]:
    return re.compile(pattern.pattern, pattern.flags | re.IGNORECASE)


def _replace(rule: Rule, match: re.Match[str], *, counts: Counter[str]) -> str:
    whole = match.group(0)
    if rule.validator is not None and not VALIDATORS[rule.validator](whole.strip()):
        return whole
    counts[rule.name] += 1
    if "secret" in rule.pattern.groupindex and match.group("secret") is not None:
        start, end = match.span("secret")
        offset = match.start()
        return whole[: start - offset] + rule.replacement + whole[end - offset :]
    return rule.replacement


def build_redactor(mode: str, packs: Iterable[str]) -> Redactor:
    """A redactor for a mode and pack list (as PALAZZO_REDACTION_MODE / _PACKS give them)."""
    if mode not in MODES:
        raise RedactionConfigError(f"redaction mode must be one of {', '.join(MODES)}")
    return Redactor(mode=mode, rules=resolve_packs(packs))


def scrub_message(message: str) -> str:
    """An error message with the rules in force applied (it may quote a field value that was never stored)."""
    redactor = current()
    if redactor.mode == "off":
        return message
    return Redactor(mode="enforce", rules=redactor.rules).scan(message)[0]


_cache: dict[tuple[str, tuple[str, ...]], Redactor] = {}


def current() -> Redactor:
    """The redactor the configuration asks for (built once per mode and pack list)."""
    from django.conf import settings

    env = settings.PALAZZO
    key = (env.redaction_mode, env.redaction_packs)
    redactor = _cache.get(key)
    if redactor is None:
        redactor = _cache[key] = build_redactor(*key)
    return redactor
