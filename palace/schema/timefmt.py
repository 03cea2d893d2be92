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
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        # 0001-01-01T00:00:00+01:00 is a valid RFC3339 string whose UTC moment is before year 1.
        raise ValueError(
            "is outside the representable range once its offset is applied (years 0001 to 9999 in UTC)"
        ) from None


def format_rfc3339(moment: datetime) -> str:
    """Format as YYYY-MM-DDTHH:MM:SSZ in UTC, always with a four-digit year (0001, not 1)."""
    utc = moment.astimezone(UTC)
    return f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}Z"


def utc_now() -> datetime:
    """Now, in UTC, truncated to the second."""
    return datetime.now(UTC).replace(microsecond=0)
