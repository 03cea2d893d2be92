"""Django forms that validate every palace input; errors name the field and the rule."""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from palace.errors import InvalidInput
from palace.schema.memories import (
    BATCH_DEFAULT_FIELDS,
    FILTER_FIELDS,
    FILTER_KEYS,
    FIRST_MEMORY_ID,
    MAX_MEMORY_ID,
    MAX_REASON_CHARS,
    MAX_STAMP_CHARS,
    MAX_SUPERSEDE_IDS,
    MAX_TAG_CHARS,
    MAX_TEXT_BYTES,
    MAX_TTL_DAYS,
    WRITABLE_FIELDS,
    Group,
    Kind,
    MemoryField,
    canonical_room,
)
from palace.schema.timefmt import EXAMPLE, format_rfc3339, parse_rfc3339, utc_now
from palace.schema.vocabulary import active_vocabulary

MAX_BATCH_ITEMS = 256
MAX_RECALL_IDS = 100
MAX_DELETE_IDS = 100
MAX_FIND_LIMIT = 20
# A find answers passages in rank order within a budget (palace.reads.passages), so its page can be
# longer than when it answered whole memories.
DEFAULT_FIND_LIMIT = 10
# The budget of a find's answer is in characters of its JSON text; without one it follows the page
# (palace.reads.passages.default_budget).
MIN_MAX_CHARS = 2000
# A listing shows each memory's opening first: a page of 20 fed exchanges in about 2,000 tokens.
DEFAULT_BROWSE_MAX_CHARS = 8000
MAX_MAX_CHARS = 100_000
# Offsets into a memory's text (characters); far above any text a memory may hold.
MAX_TEXT_OFFSET = 10_000_000
MAX_BROWSE_LIMIT = 100
MAX_FILTER_DELETE = 1000
MAX_HALF_LIFE_DAYS = 1_000_000


def string_problem(value: str) -> str | None:
    """Why a string cannot be stored (NUL, a lone surrogate), or None: the rule every string field shares."""
    if "\x00" in value:
        return "must not contain NUL characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid UTF-8 (it contains a lone surrogate)"
    return None


def clean_string(value: str) -> str:
    """value, or ValidationError when string_problem finds something."""
    problem = string_problem(value)
    if problem is not None:
        raise ValidationError(problem, code="string")
    return value


def shown_name(value: str) -> str:
    """A client-chosen name as it may appear in an error (escaped when it holds NUL or a lone surrogate)."""
    return value if string_problem(value) is None else ascii(value)


def safe_text(value: str) -> str:
    """value with NUL and lone surrogates replaced by U+FFFD, so it can always be stored and printed."""
    if string_problem(value) is None:
        return value
    return "".join("\ufffd" if ch == "\x00" or "\ud800" <= ch <= "\udfff" else ch for ch in value)


def writer_stamp(value: str) -> str:
    """An added_by stamp safe to store: safe_text, at most 200 characters."""
    return safe_text(value)[:MAX_STAMP_CHARS]


def strict_boolean(field: str, value: Any, *, default: bool = False) -> bool:
    """A JSON boolean argument outside a form (None = default); InvalidInput naming field otherwise."""
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidInput.single(field, "must be true or false")
    return value


class StrictCharField(forms.CharField):
    """A string field that refuses numbers, lists and other JSON values instead of str()-ing them."""

    default_error_messages = {
        "required": "is required",
        "max_length": "must be at most %(limit_value)d characters (it has %(show_value)d)",
        "min_length": "must be at least %(limit_value)d characters (it has %(show_value)d)",
    }

    def to_python(self, value: Any) -> Any:
        if value is not None and not isinstance(value, str):
            raise ValidationError("must be a string", code="type")
        if isinstance(value, str):
            clean_string(value)
        return super().to_python(value)


class TextField(StrictCharField):
    """Verbatim memory text: 1 byte to 32 KB of UTF-8, never trimmed."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(strip=False, **kwargs)

    def validate(self, value: Any) -> None:
        super().validate(value)
        if value is None or value == "":
            return
        if not value.strip():
            raise ValidationError("must contain non-whitespace characters", code="blank")
        size = len(value.encode("utf-8", errors="surrogatepass"))
        if size > MAX_TEXT_BYTES:
            raise ValidationError(f"is {size} bytes; the maximum is {MAX_TEXT_BYTES} bytes (32 KB)", code="size")


class TagField(StrictCharField):
    """A free-text tag such as room or session: trimmed, 1-64 characters."""

    def __init__(self, *, max_length: int = MAX_TAG_CHARS, **kwargs: Any) -> None:
        super().__init__(strip=True, max_length=max_length, **kwargs)


class RoomField(TagField):
    """A room: trimmed, then stored and matched in its canonical form (see memories.canonical_room)."""

    def to_python(self, value: Any) -> Any:
        value = super().to_python(value)
        return canonical_room(value) if value else value


class VocabularyField(forms.ChoiceField):
    """One of the deployment's allowed values; the error lists them."""

    def __init__(self, setting: str, **kwargs: Any) -> None:
        self.setting = setting
        super().__init__(choices=(), **kwargs)

    def allowed(self) -> tuple[str, ...]:
        """The values the palace's vocabulary allows right now."""
        return tuple(getattr(active_vocabulary(), self.setting))

    def to_python(self, value: Any) -> Any:
        if value is not None and not isinstance(value, str):
            raise ValidationError("must be a string", code="type")
        return clean_string(value).strip() if isinstance(value, str) else value

    def valid_value(self, value: Any) -> bool:
        return value in self.allowed()

    def validate(self, value: Any) -> None:
        if value in self.empty_values:
            if self.required:
                raise ValidationError(f"is required; allowed values: {', '.join(self.allowed())}", code="required")
            return
        if not self.valid_value(value):
            raise ValidationError(
                f"{value!r} is not allowed; allowed values: {', '.join(self.allowed())}", code="invalid_choice"
            )


class TimestampField(forms.Field):
    """An RFC3339 timestamp with zone, normalised to UTC."""

    default_error_messages = {"required": "is required"}

    def to_python(self, value: Any) -> datetime | None:
        if value in (None, ""):
            return None
        if not isinstance(value, str):
            raise ValidationError(f"must be an RFC3339 string, e.g. {EXAMPLE}", code="type")
        clean_string(value)
        try:
            return parse_rfc3339(value)
        except ValueError as exc:
            raise ValidationError(f"{value[:40]!r} {exc}", code="rfc3339") from None


class StrictBooleanField(forms.Field):
    """A JSON boolean; strings and numbers are refused."""

    def __init__(self, *, default: bool = False, **kwargs: Any) -> None:
        self.default = default
        kwargs.setdefault("required", False)
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> bool:
        if value is None:
            return self.default
        if not isinstance(value, bool):
            raise ValidationError("must be true or false", code="type")
        return value


class StrictIntegerField(forms.Field):
    """A JSON integer within bounds."""

    def __init__(self, *, minimum: int, maximum: int, default: int | None = None, **kwargs: Any) -> None:
        self.minimum, self.maximum, self.default = minimum, maximum, default
        kwargs.setdefault("required", default is None)
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> int | None:
        if value is None:
            return self.default
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValidationError("must be a whole number", code="type")
        if not self.minimum <= value <= self.maximum:
            shown = value if abs(value) < 10**30 else "a larger number"
            raise ValidationError(f"must be between {self.minimum} and {self.maximum}, got {shown}", code="range")
        return value


class HalfLifeField(forms.Field):
    """Recency half-life in days: a finite number >= 0 (0 = off)."""

    def to_python(self, value: Any) -> float:
        if value is None:
            return 0.0
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValidationError("must be a number of days", code="type")
        # Compared before any conversion: float(10**400) would raise OverflowError.
        if (isinstance(value, float) and not math.isfinite(value)) or not 0 <= value <= MAX_HALF_LIFE_DAYS:
            shown = value if isinstance(value, float) or abs(value) < 10**30 else "a larger number"
            raise ValidationError(
                f"must be a finite number of days from 0 to {MAX_HALF_LIFE_DAYS} (0 turns recency off), got {shown}",
                code="range",
            )
        return float(value)


def parse_memory_id(value: Any, label: str) -> int:
    """A memory id from a JSON integer or a string of ASCII digits; ValidationError naming label otherwise."""
    if isinstance(value, str):
        digits = value.strip()
        # isdigit() accepts "²" and other digits int() refuses; only ASCII digits (and few of them) are ids.
        if digits.isascii() and digits.isdigit() and len(digits) <= 20:
            value = int(digits)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"{label} must be an integer id", code="type")
    if not FIRST_MEMORY_ID <= value <= MAX_MEMORY_ID:
        shown = value if abs(value) < 10**30 else "a larger number"
        raise ValidationError(
            f"{label} ({shown}) is not a memory id (ids are {FIRST_MEMORY_ID} to {MAX_MEMORY_ID})", code="range"
        )
    return value


class IdListField(forms.Field):
    """A list of memory ids (integers >= 1_000_000_000), without repeats."""

    default_error_messages = {"required": "is required"}

    def __init__(self, *, maximum: int, **kwargs: Any) -> None:
        self.maximum = maximum
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> list[int]:
        if value is None:
            return []
        if not isinstance(value, list):
            raise ValidationError("must be a list of memory ids", code="type")
        if len(value) > self.maximum:
            raise ValidationError(f"has {len(value)} ids; the maximum is {self.maximum}", code="too_many")
        ids: list[int] = []
        for position, item in enumerate(value):
            item = parse_memory_id(item, f"item {position}")
            if item not in ids:
                ids.append(item)
        return ids

    def validate(self, value: Any) -> None:
        if self.required and not value:
            raise ValidationError("must list at least one id", code="required")


class TtlDaysField(forms.Field):
    """Days until a memory expires: a finite number > 0 and at most MAX_TTL_DAYS."""

    def to_python(self, value: Any) -> float | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValidationError("must be a number of days", code="type")
        # An int is compared as it is: 10**400 would overflow a float conversion.
        if not ((isinstance(value, int) or math.isfinite(value)) and 0 < value <= MAX_TTL_DAYS):
            raise ValidationError(f"must be a number of days > 0 and at most {MAX_TTL_DAYS}, got {value}", code="range")
        return float(value)


class _SharedFields(dict[str, forms.Field]):
    """A form class's fields, handed to each instance as they are instead of deep-copied."""

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, forms.Field]:
        return dict(self)


class _SharedFieldsMetaclass(forms.forms.DeclarativeFieldsMetaclass):
    # Django deep-copies every field of a form for each instance, so that one instance may change its
    # own fields. Palace forms never do (a field only cleans values), and the copy was the largest part
    # of parsing a tool's arguments: 0.3-0.5 ms of every find, against 0.05 ms for the cleaning.
    def __new__(mcs, name: str, bases: tuple[type, ...], attrs: dict[str, Any]) -> type:
        form_class = super().__new__(mcs, name, bases, attrs)
        form_class.base_fields = _SharedFields(form_class.base_fields)  # type: ignore[attr-defined]
        return form_class


class PalaceForm(forms.Form, metaclass=_SharedFieldsMetaclass):
    """A form fed with a JSON object; unknown keys are refused."""

    def __init__(self, data: Any) -> None:
        if not isinstance(data, dict):
            raise InvalidInput.single("input", "must be a JSON object")
        unknown = sorted(set(data) - set(self.base_fields))
        if unknown:
            raise InvalidInput({shown_name(key): ["is not a known field"] for key in unknown[:10]})
        super().__init__(data=dict(data))

    def _clean_fields(self) -> None:
        # Widgets would coerce JSON values to strings; read them raw instead.
        for name, field in self.fields.items():
            value = self.data.get(name)
            try:
                cleaned = field.clean(value)
                self.cleaned_data[name] = cleaned
                method = getattr(self, f"clean_{name}", None)
                if method is not None:
                    self.cleaned_data[name] = method()
            except ValidationError as exc:
                self.add_error(name, exc)

    def parsed(self) -> dict[str, Any]:
        """The cleaned data, or InvalidInput naming each bad field and its rule."""
        if not self.is_valid():
            raise InvalidInput(
                {field: [str(message) for message in messages] for field, messages in self.errors.items()}
            )
        return dict(self.cleaned_data)


def form_field(field: MemoryField, *, required: bool) -> forms.Field:
    """The form field that validates a memory field of the schema (palace.schema.memories.FIELDS)."""
    if field.kind is Kind.TEXT:
        return TextField(required=required)
    if field.kind is Kind.VOCABULARY:
        assert field.vocabulary is not None
        return VocabularyField(field.vocabulary, required=required)
    if field.kind is Kind.ROOM:
        return RoomField(required=required, max_length=field.max_length or MAX_TAG_CHARS)
    if field.kind is Kind.TAG:
        return TagField(required=required, max_length=field.max_length or MAX_TAG_CHARS)
    if field.kind is Kind.STRING:
        return StrictCharField(required=required, max_length=field.max_length, strip=field.strip)
    if field.kind is Kind.TIMESTAMP:
        return TimestampField(required=required)
    if field.kind is Kind.ID:
        return StrictIntegerField(minimum=FIRST_MEMORY_ID, maximum=MAX_MEMORY_ID, required=required, default=None)
    if field.kind is Kind.IDS:
        assert field.max_length is not None
        return IdListField(maximum=field.max_length, required=required)
    if field.kind is Kind.DAYS:
        return TtlDaysField(required=required)
    raise ValueError(f"{field.name} is never written")


def form_fields(fields: Iterable[MemoryField], *, optional: bool = False) -> dict[str, forms.Field]:
    """Form fields for memory fields, in their order; each required as a store needs it unless optional."""
    return {field.name: form_field(field, required=field.required and not optional) for field in fields}


def _writable(*groups: Group) -> tuple[MemoryField, ...]:
    return tuple(field for field in WRITABLE_FIELDS if field.group in groups)


class ExpiryForm(PalaceForm):
    """expires_at or ttl_days, cleaned into one expires_at (a future moment unless allow_past_expiry)."""

    locals().update(form_fields(_writable(Group.EXPIRY)))
    allow_past_expiry = False

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        now = utc_now()
        if data.get("ttl_days") is not None:
            if data.get("expires_at") is not None:
                self.add_error("ttl_days", "give expires_at or ttl_days, not both")
            else:
                data["expires_at"] = now + timedelta(days=data["ttl_days"])
        if data.get("expires_at") is not None and data["expires_at"] <= now and not self.allow_past_expiry:
            self.add_error("expires_at", "must be in the future")
        data.pop("ttl_days", None)
        return data


class MemoryForm(ExpiryForm):
    """One memory to store."""

    locals().update(form_fields(_writable(Group.CONTENT, Group.FILING, Group.TIME)))


class FilterFields(PalaceForm):
    """Filters shared by find and delete_by_filter."""

    locals().update(form_fields(FILTER_FIELDS, optional=True))
    since = TimestampField(required=False)
    until = TimestampField(required=False)
    include_superseded = StrictBooleanField()

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        since, until = data.get("since"), data.get("until")
        if since and until and since > until:
            self.add_error("since", "must not be after until")
        return data


class FindForm(FilterFields):
    """A search."""

    query = TextField()
    limit = StrictIntegerField(minimum=1, maximum=MAX_FIND_LIMIT, default=DEFAULT_FIND_LIMIT)
    recency_half_life_days = HalfLifeField(required=False)
    # None: the budget follows the page (palace.reads.passages.default_budget).
    max_chars = StrictIntegerField(minimum=MIN_MAX_CHARS, maximum=MAX_MAX_CHARS, required=False)
    all_fields = StrictBooleanField()


class BrowseCursor(forms.Field):
    """palace_browse's next_cursor: `<timestamp>/<id>` of the last memory of the previous page."""

    def to_python(self, value: Any) -> tuple[datetime, int] | None:
        if value in (None, ""):
            return None
        rule = "must be the next_cursor of an earlier palace_browse result, passed unchanged"
        if not isinstance(value, str) or len(value) > 64:
            raise ValidationError(rule, code="type")
        stamp, _, memory_id = value.partition("/")
        try:
            moment = parse_rfc3339(stamp)
        except ValueError:
            raise ValidationError(rule, code="cursor") from None
        if not (memory_id.isascii() and memory_id.isdigit()) or not FIRST_MEMORY_ID <= int(memory_id) <= MAX_MEMORY_ID:
            raise ValidationError(rule, code="cursor")
        return moment, int(memory_id)


def browse_cursor(timestamp: datetime, memory_id: int) -> str:
    """The cursor that continues a browse after this memory."""
    return f"{format_rfc3339(timestamp)}/{memory_id}"


class BrowseForm(FilterFields):
    """A listing, newest first, without a query."""

    limit = StrictIntegerField(minimum=1, maximum=MAX_BROWSE_LIMIT, default=20)
    cursor = BrowseCursor(required=False)
    max_chars = StrictIntegerField(minimum=MIN_MAX_CHARS, maximum=MAX_MAX_CHARS, default=DEFAULT_BROWSE_MAX_CHARS)


class CheckDuplicateForm(PalaceForm):
    """A duplicate check."""

    text = TextField()


class RecallForm(PalaceForm):
    """Ids to fetch, and optionally a [start, end) range of one memory's text (characters)."""

    ids = IdListField(maximum=MAX_RECALL_IDS)
    start = StrictIntegerField(minimum=0, maximum=MAX_TEXT_OFFSET, required=False)
    end = StrictIntegerField(minimum=1, maximum=MAX_TEXT_OFFSET, required=False)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        ranged = cleaned.get("start") is not None or cleaned.get("end") is not None
        if ranged and len(cleaned.get("ids") or []) > 1:
            self.add_error("ids", "must hold exactly one id when start or end is given")
        cleaned["ranged"] = ranged
        return cleaned


class SupersedeForm(ExpiryForm):
    """A correction of one or more memories: every memory field is optional (inherited when left out)."""

    locals().update(form_fields(_writable(Group.CONTENT, Group.FILING), optional=True))
    supersedes = IdListField(maximum=MAX_SUPERSEDE_IDS)
    reason = StrictCharField(max_length=MAX_REASON_CHARS, strip=True)
    locals().update(form_fields(_writable(Group.TIME), optional=True))


class BatchDefaultsForm(PalaceForm):
    """store_batch's defaults: values for the fields an item leaves out."""

    locals().update(form_fields(BATCH_DEFAULT_FIELDS, optional=True))


class DeleteForm(PalaceForm):
    """A hard delete by id."""

    ids = IdListField(maximum=MAX_DELETE_IDS)
    reason = StrictCharField(max_length=MAX_REASON_CHARS, strip=True)
    confirm = StrictBooleanField()


class DeleteByFilterForm(FilterFields):
    """A hard delete of everything a filter matches."""

    reason = StrictCharField(max_length=MAX_REASON_CHARS, strip=True)
    confirm = StrictBooleanField()
    dry_run = StrictBooleanField()
    expected_count = StrictIntegerField(minimum=0, maximum=MAX_FILTER_DELETE, required=False, default=None)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        keys = (*FILTER_KEYS, "since", "until")
        if not any(data.get(key) for key in keys):
            self.add_error(None, f"the filter is empty: set at least one of {', '.join(keys)}")
        return data


class GainForm(PalaceForm):
    """A gain summary request."""

    since = TimestampField(required=False)
