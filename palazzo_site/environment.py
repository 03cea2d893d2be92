"""Every environment variable palazzo reads, parsed and checked in this one place."""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

from palace.feeding.devices import DEVICE_PATTERN
from palace.schema.vocabulary import DEFAULT_PRESET, PRESETS

T = TypeVar("T")

DEFAULT_CATEGORIES = PRESETS[DEFAULT_PRESET].categories
DEFAULT_WINGS = PRESETS[DEFAULT_PRESET].wings
DEFAULT_HALLS = PRESETS[DEFAULT_PRESET].halls


class ConfigurationError(ValueError):
    """An environment variable holds a value palazzo cannot use."""


@dataclass(frozen=True)
class PalazzoEnvironment:
    """The parsed configuration; every variable is in docs/configuration.md."""

    data_dir: Path
    qdrant_url: str | None
    qdrant_api_key: str | None
    qdrant_timeout_seconds: float
    collection: str
    wal_path: Path
    wal_verbatim: bool
    bind: str
    allowed_hosts: tuple[str, ...]
    embed_backend: str
    embed_model: str
    embed_threads: int | None
    fastembed_cache_dir: Path
    ollama_url: str
    ollama_model: str
    ollama_timeout_seconds: float
    usage_log: Path | None
    gain_enabled: bool
    log_level: str
    database_url: str | None
    read_only: bool
    wake_up_count: int
    secret_key: str
    debug: bool
    ingest_max_bytes: int = 256 * 1024 * 1024
    # What a new palace records (palace.schema.vocabulary): the preset's lists, or PALAZZO_<LIST> where set.
    categories: tuple[str, ...] = field(default=DEFAULT_CATEGORIES)
    wings: tuple[str, ...] = field(default=DEFAULT_WINGS)
    halls: tuple[str, ...] = field(default=DEFAULT_HALLS)
    vocabulary_preset: str | None = None  # PALAZZO_VOCABULARY; None: the default (a palace with memories: legacy)
    vocabulary_lists: tuple[tuple[str, tuple[str, ...]], ...] = ()  # the PALAZZO_<LIST> that are set, by kind
    allow_insecure: bool = False
    index_after: int = 12000
    gain_tool: bool = False  # palace_gain in tools/list (off: it is operator telemetry; the resource keeps it)
    redaction_mode: str = "enforce"
    redaction_packs: tuple[str, ...] = ("secrets",)
    audit_query_plain: bool = False
    remote_url: str | None = None
    remote_token: str | None = None
    remote_timeout_seconds: float = 10.0
    device: str = "localhost"
    feed_wing: str = "projects"
    feed_hall: str = "events"
    feed_category: str = "project-memory"
    http_stateless: bool = False  # /mcp keeps no session between requests (several workers or hosts)
    public_url: str | None = None  # set: OAuth 2.1 sign-in on /mcp, this is the resource's origin
    oauth_registration: str = "open"
    oauth_redirect_hosts: tuple[str, ...] = ()  # empty: any https host, or loopback http
    oauth_access_token_seconds: int = 3600
    oauth_rate_limit: str = "30/m"
    holder: bool = True  # an embedded palace is held by one `palazzo holder` that every other process reaches
    holder_idle_seconds: int = 300  # how long that holder stays once nothing uses it

    @property
    def oauth_enabled(self) -> bool:
        """Whether people sign in with OAuth on the HTTP server (PALAZZO_PUBLIC_URL is set)."""
        return self.public_url is not None


def _fail(name: str, value: str, rule: str) -> ConfigurationError:
    return ConfigurationError(f"{name}={value!r} is invalid: {rule}")


def _boolean(name: str, raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise _fail(name, raw, "expected 1/0, true/false, yes/no or on/off")


def _whole_number(name: str, raw: str, *, minimum: int, rule: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise _fail(name, raw, rule) from None
    if value < minimum:
        raise _fail(name, raw, rule)
    return value


def _positive_int(name: str, raw: str) -> int:
    return _whole_number(name, raw, minimum=1, rule="expected a whole number >= 1")


def _count(name: str, raw: str) -> int:
    return _whole_number(name, raw, minimum=0, rule="expected a whole number (0 or more)")


def _positive_float(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise _fail(name, raw, "expected a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise _fail(name, raw, "expected a finite number > 0")
    return value


def _url(name: str, raw: str) -> str:
    value = raw.strip().rstrip("/")
    if not value.startswith(("http://", "https://")):
        raise _fail(name, raw, "expected an http:// or https:// URL")
    return value


def _public_url(name: str, raw: str) -> str:
    value = _url(name, raw)
    parts = urlsplit(value)
    if parts.path or parts.query or parts.fragment or not parts.hostname:
        raise _fail(name, raw, "expected the server's origin only, e.g. https://palazzo.example.com")
    return value


def _rate(name: str, raw: str) -> str:
    count, slash, period = raw.strip().partition("/")
    if not slash or not count.isdigit() or int(count) < 1 or period not in ("s", "m", "h", "d"):
        raise _fail(name, raw, "expected COUNT/PERIOD with PERIOD one of s, m, h, d, e.g. 30/m")
    return raw.strip()


def _with_public_host(hosts: tuple[str, ...], public_url: str | None) -> tuple[str, ...]:
    """The allowed hosts, with the public URL's host: people's browsers reach the sign-in pages by that name."""
    host = (urlsplit(public_url).hostname or "") if public_url else ""
    return hosts if not host or host in hosts or "*" in hosts else (*hosts, host)


def _bind(name: str, raw: str) -> str:
    host, sep, port = raw.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise _fail(name, raw, "expected HOST:PORT, e.g. 127.0.0.1:6334")
    return raw.strip()


def _word_list(name: str, raw: str) -> tuple[str, ...]:
    words = tuple(word.strip() for word in raw.split(",") if word.strip())
    if not words:
        raise _fail(name, raw, "expected a comma-separated list with at least one value")
    if len(set(words)) != len(words):
        raise _fail(name, raw, "values must be unique")
    return words


def _choice(options: tuple[str, ...]) -> Callable[[str, str], str]:
    def parse(name: str, raw: str) -> str:
        value = raw.strip().lower()
        if value not in options:
            raise _fail(name, raw, f"expected one of {', '.join(options)}")
        return value

    return parse


def _path(name: str, raw: str) -> Path:
    if not raw.strip():
        raise _fail(name, raw, "expected a file system path")
    return Path(raw.strip()).expanduser()


def _redaction_packs(name: str, raw: str) -> tuple[str, ...]:
    from palace.governance.redaction import RedactionConfigError, resolve_packs

    packs = tuple(word.strip() for word in raw.split(",") if word.strip())
    try:
        resolve_packs(packs)
    except RedactionConfigError as exc:
        raise _fail(name, raw, str(exc)) from None
    return packs


def _device(name: str, raw: str) -> str:
    value = raw.strip()
    if not DEVICE_PATTERN.fullmatch(value):
        raise _fail(
            name, raw, "expected 1-64 characters: letters, digits, '.', '_' or '-' (starting with one of the first two)"
        )
    return value


def default_device() -> str:
    """This machine's host name, cut to what PALAZZO_DEVICE accepts."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname()).lstrip("._-")[:64]
    return cleaned or "localhost"


LEGACY_DATA_DIR = "~/.palazzo"


def default_data_dir(environ: Mapping[str, str]) -> Path:
    """The palace's home when PALAZZO_DATA_DIR is unset: an existing ~/.palazzo, else $XDG_DATA_HOME/palazzo."""
    # A palace made before the XDG default stays where it is: moving to a new empty one would split a user's
    # memories between two palaces without a word.
    home = Path(environ.get("HOME") or Path.home())
    legacy = home / LEGACY_DATA_DIR.removeprefix("~/")
    if legacy.is_dir():
        return legacy
    xdg = (environ.get("XDG_DATA_HOME") or "").strip()
    # The XDG spec says a relative XDG_DATA_HOME is invalid and must be ignored.
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else home / ".local" / "share"
    return base / "palazzo"


def read_environment(environ: Mapping[str, str] | None = None) -> PalazzoEnvironment:
    """Parse palazzo's variables from the environment, raising on the first bad value."""
    env = os.environ if environ is None else environ

    def get(name: str, parse: Callable[[str, str], T], default: T) -> T:
        raw = env.get(name)
        if raw is None or (raw.strip() == "" and not isinstance(default, bool)):
            return default
        return parse(name, raw)

    data_dir = get("PALAZZO_DATA_DIR", _path, None) or default_data_dir(env)
    public_url = get("PALAZZO_PUBLIC_URL", _public_url, None)
    threads = get("PALAZZO_EMBED_THREADS", _positive_int, 0)
    vocabulary_preset = get("PALAZZO_VOCABULARY", _choice(tuple(PRESETS)), None)
    chosen = PRESETS[vocabulary_preset or DEFAULT_PRESET]
    vocabulary_lists = tuple(
        (kind, _word_list(f"PALAZZO_{kind.upper()}", env[f"PALAZZO_{kind.upper()}"]))
        for kind in ("wings", "halls", "categories")
        if (env.get(f"PALAZZO_{kind.upper()}") or "").strip()
    )
    wings, halls, categories = (
        dict(vocabulary_lists).get(kind, getattr(chosen, kind)) for kind in ("wings", "halls", "categories")
    )

    def vocabulary_value(name: str, default: str, allowed: tuple[str, ...], vocabulary: str) -> str:
        # Checked only when set: a deployment with its own vocabularies that never feeds must still start.
        raw = env.get(name)
        if raw is None or not raw.strip():
            return default
        if raw.strip() not in allowed:
            raise _fail(name, raw, f"expected one of {vocabulary}: {', '.join(allowed)}")
        return raw.strip()

    return PalazzoEnvironment(
        data_dir=data_dir,
        qdrant_url=get("QDRANT_URL", _url, None),
        qdrant_api_key=env.get("QDRANT_API_KEY") or None,
        qdrant_timeout_seconds=get("PALAZZO_QDRANT_TIMEOUT", _positive_float, 5.0),
        collection=get("COLLECTION", lambda _n, raw: raw.strip(), "claude-memory"),
        wal_path=get("PALAZZO_WAL", _path, data_dir / "wal.jsonl"),
        wal_verbatim=get("PALAZZO_WAL_VERBATIM", _boolean, False),
        bind=get("PALAZZO_BIND", _bind, "127.0.0.1:6334"),
        allowed_hosts=_with_public_host(
            get("PALAZZO_ALLOWED_HOSTS", _word_list, ("localhost", "127.0.0.1", "::1")), public_url
        ),
        embed_backend=get("PALAZZO_EMBED_BACKEND", _choice(("fastembed", "ollama")), "fastembed"),
        embed_model=get("PALAZZO_EMBED_MODEL", lambda _n, raw: raw.strip(), "BAAI/bge-small-en-v1.5"),
        embed_threads=threads or None,
        fastembed_cache_dir=get("FASTEMBED_CACHE_DIR", _path, data_dir / "models"),
        ollama_url=get("OLLAMA_URL", _url, "http://127.0.0.1:11434"),
        ollama_model=get("OLLAMA_MODEL", lambda _n, raw: raw.strip(), "nomic-embed-text"),
        ollama_timeout_seconds=get("PALAZZO_EMBED_TIMEOUT", _positive_float, 10.0),
        usage_log=get("PALAZZO_USAGE_LOG", _path, None),
        gain_enabled=get("PALAZZO_GAIN_ENABLED", _boolean, True),
        log_level=get("PALAZZO_LOG_LEVEL", _choice(("debug", "info", "warning", "error", "critical")), "info").upper(),
        database_url=env.get("DATABASE_URL") or None,
        read_only=get("PALAZZO_READ_ONLY", _boolean, False),
        wake_up_count=get("PALAZZO_WAKE_UP_COUNT", _positive_int, 10),
        secret_key=env.get("PALAZZO_SECRET_KEY") or "",
        debug=get("PALAZZO_DEBUG", _boolean, False),
        ingest_max_bytes=get("PALAZZO_INGEST_MAX_BYTES", _positive_int, 256 * 1024 * 1024),
        categories=categories,
        wings=wings,
        halls=halls,
        vocabulary_preset=vocabulary_preset,
        vocabulary_lists=vocabulary_lists,
        allow_insecure=get("PALAZZO_ALLOW_INSECURE", _boolean, False),
        index_after=get("PALAZZO_INDEX_AFTER", _count, 12000),
        gain_tool=get("PALAZZO_GAIN_TOOL", _boolean, False),
        redaction_mode=get("PALAZZO_REDACTION_MODE", _choice(("enforce", "dry-run", "off")), "enforce"),
        redaction_packs=get("PALAZZO_REDACTION_PACKS", _redaction_packs, ("secrets",)),
        audit_query_plain=get("PALAZZO_AUDIT_QUERY_PLAIN", _boolean, False),
        remote_url=get("PALAZZO_URL", _url, None),
        remote_token=(env.get("PALAZZO_TOKEN") or "").strip() or None,
        remote_timeout_seconds=get("PALAZZO_REMOTE_TIMEOUT", _positive_float, 10.0),
        device=get("PALAZZO_DEVICE", _device, None) or default_device(),
        feed_wing=vocabulary_value("PALAZZO_FEED_WING", "projects", wings, "PALAZZO_WINGS"),
        feed_hall=vocabulary_value("PALAZZO_FEED_HALL", "events", halls, "PALAZZO_HALLS"),
        feed_category=vocabulary_value("PALAZZO_FEED_CATEGORY", "project-memory", categories, "PALAZZO_CATEGORIES"),
        http_stateless=get("PALAZZO_HTTP_STATELESS", _boolean, False),
        public_url=public_url,
        oauth_registration=get("PALAZZO_OAUTH_REGISTRATION", _choice(("open", "off")), "open"),
        oauth_redirect_hosts=get("PALAZZO_OAUTH_REDIRECT_HOSTS", _word_list, ()),
        oauth_access_token_seconds=get("PALAZZO_OAUTH_TOKEN_SECONDS", _positive_int, 3600),
        oauth_rate_limit=get("PALAZZO_OAUTH_RATE_LIMIT", _rate, "30/m"),
        holder=get("PALAZZO_HOLDER", _boolean, True),
        holder_idle_seconds=get("PALAZZO_HOLDER_IDLE_SECONDS", _count, 300),
    )
