"""RFC3339 parsing and the palace's one timestamp format (UTC, second precision, Z)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$")
EXAMPLE = "2026-04-20T08:37:19Z"


def parse_rfc3339(value: str) -> datetime:
    """Parse an RFC3339 timestamp with a zone into an aware UTC datetime; ValueError otherwise."""
    if not isinstance(value, str) or not _RFC3339.match(value.strip()):
        raise ValueError(f"must be an RFC3339 timestamp with a time zone, e.g. {EXAMPLE}")
    text = value.strip().upper()
    if "." in text:
        # Python accepts at most 6 fractional digits; RFC3339 allows more.
        head, _, rest = text.partition(".")
        digits = re.match(r"\d+", rest)
        assert digits is not None
        text = head + "." + digits.group(0)[:6].ljust(6, "0") + rest[digits.end() :]
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"is not a valid date and time, e.g. {EXAMPLE}") from None
    return moment.astimezone(UTC)


def format_rfc3339(moment: datetime) -> str:
    """Format as YYYY-MM-DDTHH:MM:SSZ in UTC."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def utc_now() -> datetime:
    """Now, in UTC, truncated to the second."""
    return datetime.now(UTC).replace(microsecond=0)
