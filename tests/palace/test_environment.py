"""Settings come from the environment in one place and fail loudly on bad values."""

from __future__ import annotations

from pathlib import Path

import pytest

from palazzo_site.environment import DEFAULT_WINGS, ConfigurationError, read_environment


def test_it_uses_the_documented_defaults() -> None:
    env = read_environment({"PALAZZO_DATA_DIR": "/tmp/palazzo-defaults"})
    assert env.collection == "claude-memory"
    assert env.qdrant_url is None
    assert env.bind == "127.0.0.1:6334"
    assert env.allowed_hosts == ("localhost", "127.0.0.1", "::1")
    assert env.embed_backend == "fastembed"
    assert env.wal_path == Path("/tmp/palazzo-defaults/wal.jsonl")
    assert env.wings == DEFAULT_WINGS
    assert env.gain_enabled is True and env.read_only is False
    assert env.index_after == 12000


def test_it_reads_every_variable() -> None:
    env = read_environment(
        {
            "PALAZZO_DATA_DIR": "/srv/p",
            "QDRANT_URL": "http://q:6333/",
            "QDRANT_API_KEY": "k",
            "COLLECTION": "c",
            "PALAZZO_WAL": "/srv/wal.jsonl",
            "PALAZZO_BIND": "0.0.0.0:9000",
            "PALAZZO_ALLOWED_HOSTS": "a.example, b",
            "PALAZZO_EMBED_BACKEND": "ollama",
            "OLLAMA_URL": "http://o:11434",
            "OLLAMA_MODEL": "m",
            "PALAZZO_EMBED_THREADS": "3",
            "PALAZZO_USAGE_LOG": "/srv/u.jsonl",
            "PALAZZO_GAIN_ENABLED": "off",
            "PALAZZO_LOG_LEVEL": "DEBUG",
            "PALAZZO_WINGS": "home,work",
            "PALAZZO_READ_ONLY": "yes",
            "PALAZZO_INDEX_AFTER": "0",
        }
    )
    assert env.qdrant_url == "http://q:6333" and env.qdrant_api_key == "k" and env.collection == "c"
    assert env.allowed_hosts == ("a.example", "b")
    assert env.embed_backend == "ollama" and env.embed_threads == 3
    assert env.usage_log == Path("/srv/u.jsonl") and env.gain_enabled is False
    assert env.log_level == "DEBUG" and env.wings == ("home", "work") and env.read_only is True
    assert env.index_after == 0


@pytest.mark.parametrize(
    ("name", "value", "rule"),
    [
        ("QDRANT_URL", "localhost:6333", "http://"),
        ("PALAZZO_BIND", "6334", "HOST:PORT"),
        ("PALAZZO_BIND", "127.0.0.1:99999", "HOST:PORT"),
        ("PALAZZO_EMBED_BACKEND", "openai", "fastembed, ollama"),
        ("PALAZZO_EMBED_THREADS", "many", "whole number"),
        ("PALAZZO_EMBED_THREADS", "0", ">= 1"),
        ("PALAZZO_GAIN_ENABLED", "maybe", "true/false"),
        ("PALAZZO_LOG_LEVEL", "loud", "debug, info"),
        ("PALAZZO_WINGS", "a,a", "unique"),
        ("PALAZZO_QDRANT_TIMEOUT", "-1", "> 0"),
        ("PALAZZO_INDEX_AFTER", "-5", "0 or more"),
        ("PALAZZO_INDEX_AFTER", "lots", "0 or more"),
        ("PALAZZO_URL", "palace.example:6334", "http://"),
        ("PALAZZO_DEVICE", "my laptop", "letters, digits"),
        ("PALAZZO_DEVICE", "a@b", "letters, digits"),
        ("PALAZZO_FEED_WING", "attic", "PALAZZO_WINGS"),
        ("PALAZZO_FEED_HALL", "attic", "PALAZZO_HALLS"),
        ("PALAZZO_FEED_CATEGORY", "attic", "PALAZZO_CATEGORIES"),
        ("PALAZZO_REMOTE_TIMEOUT", "0", "> 0"),
        ("PALAZZO_PUBLIC_URL", "palazzo.example.com", "http://"),
        ("PALAZZO_PUBLIC_URL", "https://palazzo.example.com/mcp", "origin only"),
        ("PALAZZO_PUBLIC_URL", "https://palazzo.example.com/?x=1", "origin only"),
        ("PALAZZO_OAUTH_REGISTRATION", "sometimes", "open, off"),
        ("PALAZZO_OAUTH_TOKEN_SECONDS", "0", ">= 1"),
        ("PALAZZO_OAUTH_RATE_LIMIT", "30", "COUNT/PERIOD"),
        ("PALAZZO_OAUTH_RATE_LIMIT", "0/m", "COUNT/PERIOD"),
        ("PALAZZO_OAUTH_RATE_LIMIT", "5/week", "COUNT/PERIOD"),
    ],
)
def test_it_fails_loudly_naming_the_variable(name: str, value: str, rule: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        read_environment({name: value})
    assert name in str(caught.value) and rule in str(caught.value)


def test_it_lets_people_reach_the_public_host_and_keeps_oauth_off_without_a_public_url() -> None:
    off = read_environment({})
    assert off.oauth_enabled is False and off.public_url is None
    on = read_environment({"PALAZZO_PUBLIC_URL": "https://palazzo.example.com/"})
    assert on.oauth_enabled and on.public_url == "https://palazzo.example.com"
    assert on.allowed_hosts == ("localhost", "127.0.0.1", "::1", "palazzo.example.com")
    assert on.oauth_registration == "open" and on.oauth_rate_limit == "30/m" and on.oauth_access_token_seconds == 3600


def test_it_files_fed_transcripts_by_configurable_defaults_and_names_the_device() -> None:
    defaults = read_environment({})
    assert (defaults.feed_wing, defaults.feed_hall, defaults.feed_category) == ("projects", "events", "project-memory")
    assert defaults.device and defaults.remote_url is None and defaults.remote_token is None
    env = read_environment(
        {
            "PALAZZO_WINGS": "home,work",
            "PALAZZO_FEED_WING": "work",
            "PALAZZO_FEED_HALL": "facts",
            "PALAZZO_DEVICE": "ada-laptop.local",
            "PALAZZO_URL": "https://palace.example/",
            "PALAZZO_TOKEN": " pz_secret ",
            "PALAZZO_REMOTE_TIMEOUT": "2.5",
        }
    )
    assert (env.feed_wing, env.feed_hall, env.device) == ("work", "facts", "ada-laptop.local")
    assert (env.remote_url, env.remote_token, env.remote_timeout_seconds) == (
        "https://palace.example",
        "pz_secret",
        2.5,
    )
    # A deployment with its own wings that never feeds still starts (the default is checked when feeding).
    assert read_environment({"PALAZZO_WINGS": "home,work"}).feed_wing == "projects"


def test_it_refuses_to_start_django_with_a_bad_value(tmp_path: Path) -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        env={"PATH": "/usr/bin:/bin", "PALAZZO_DATA_DIR": str(tmp_path), "PALAZZO_BIND": "nope"},
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        timeout=60,
    )
    assert result.returncode != 0
    assert "PALAZZO_BIND='nope' is invalid" in result.stderr


def test_it_keeps_the_palace_under_the_users_data_dir_by_default(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    assert read_environment({"HOME": str(home)}).data_dir == home / ".local" / "share" / "palazzo"
    xdg = tmp_path / "xdg"
    assert read_environment({"HOME": str(home), "XDG_DATA_HOME": str(xdg)}).data_dir == xdg / "palazzo"
    # A relative XDG_DATA_HOME is invalid by the XDG spec and ignored.
    assert read_environment({"HOME": str(home), "XDG_DATA_HOME": "rel"}).data_dir == home / ".local/share/palazzo"
    chosen = tmp_path / "chosen"
    both = {"HOME": str(home), "XDG_DATA_HOME": str(xdg), "PALAZZO_DATA_DIR": str(chosen)}
    assert read_environment(both).data_dir == chosen


def test_it_keeps_using_an_existing_dot_palazzo(tmp_path: Path) -> None:
    (tmp_path / ".palazzo").mkdir()
    env = read_environment({"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "xdg")})
    assert env.data_dir == tmp_path / ".palazzo"
