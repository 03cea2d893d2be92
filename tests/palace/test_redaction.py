"""Redaction before write: every rule, its near misses, the modes, custom packs and each write path in-process."""

from __future__ import annotations

import dataclasses
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from palace.engine.runtime import Palace
from palace.governance.redaction import (
    BUILT_IN_PACKS,
    RedactionConfigError,
    build_redactor,
    iban_valid,
    luhn_valid,
    resolve_packs,
)
from palace.models import JournalEntry
from palace.operations import ingest
from palace.reads import selectors
from palace.writes import services
from palazzo_site.environment import ConfigurationError, read_environment
from tests.palace.helpers import memory

AWS_KEY = "AKIAZ7Q3XK2M4PLW9RTE"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ."
    "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
# (rule, text holding the secret, the secret itself)
TRUE_POSITIVES = [
    (
        "private_key",
        "key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7x\n-----END RSA PRIVATE KEY-----\n",
        "MIIEowIBAAKCAQEA7x",
    ),
    (
        "private_key",
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA (cut off",
        "b3BlbnNzaC1rZXktdjEAAAAA",
    ),
    ("aws_access_key", f"export AWS_ACCESS_KEY_ID={AWS_KEY}", AWS_KEY),
    (
        "aws_secret_key",
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    ),
    ("gcp_api_key", "maps key AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW used", "AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW"),
    ("gcp_service_account_key", '{"type": "service_account", "private_key_id": "' + "3f" * 20 + '"}', "3f" * 20),
    ("github_token", "token ghp_" + "A1b2C3d4E5" * 3 + "F6g7h8 in CI", "ghp_" + "A1b2C3d4E5" * 3 + "F6g7h8"),
    (
        "github_token",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
    ),
    ("gitlab_token", "glpat-xY9zW8vU7tS6rQ5pO4nM", "glpat-xY9zW8vU7tS6rQ5pO4nM"),
    ("slack_token", "bot xoxb-1234567890-0987654321-AbCdEfGhIjKl", "xoxb-1234567890-0987654321-AbCdEfGhIjKl"),
    ("stripe_key", "STRIPE=sk_live_4eC39HqLyjWDarjtT1zdp7dc", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    (
        "anthropic_api_key",
        "use sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1 now",
        "sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1",
    ),
    ("openai_api_key", "OPENAI sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12", "sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12"),
    ("jwt", f"cookie {JWT}", JWT),
    ("bearer_token", "curl -H 'Authorization: Bearer tok3n.V4lue-xyz123'", "tok3n.V4lue-xyz123"),
    ("url_password", "DATABASE_URL=postgres://app:S3cr3t!pw@db.internal:5432/app", "S3cr3t!pw"),
    ("password_assignment", "login with password=Tr0ub4dor&3 please", "Tr0ub4dor"),
    ("password_assignment", "Server=db;User Id=sa;Password=Hunter2Hunter2;", "Hunter2Hunter2"),
    ("password_assignment", 'config: {"client_secret": "c0ffee-beef-cafe"}', "c0ffee-beef-cafe"),
    ("email", "write to maria.rossi+palazzo@example.co.uk today", "maria.rossi+palazzo@example.co.uk"),
    ("payment_card", "card 4111 1111 1111 1111 exp 12/29", "4111 1111 1111 1111"),
    ("payment_card", "amex 378282246310005", "378282246310005"),
    ("iban", "pay to DE89 3704 0044 0532 0130 00 by friday", "DE89 3704 0044 0532 0130 00"),
    ("iban", "IBAN GB82WEST12345698765432", "GB82WEST12345698765432"),
    ("ip_address", "ssh root@192.168.10.24 -p 22", "192.168.10.24"),
    ("ip_address", "v6 host 2001:db8::8a2e:370:7334 answers", "2001:db8::8a2e:370:7334"),
    ("phone", "call +39 06 6982 1234 tomorrow", "+39 06 6982 1234"),
    ("phone", "office (555) 123-4567", "(555) 123-4567"),
]
# (rule, text that looks close but must be kept)
NEAR_MISSES = [
    ("private_key", "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----"),
    ("aws_access_key", "AKIA is the prefix of an access key id"),
    ("github_token", "ghp_short is not a token"),
    ("openai_api_key", "the sk-learn library"),
    ("jwt", "eyJub3QiOiJhIGp3dCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fw"),  # header without alg
    ("bearer_token", "the Bearer of bad news"),
    ("url_password", "see https://example.com/docs@v2 for details"),
    ("password_assignment", "reset your password in the settings page"),
    ("email", "the @decorator and user@localhost"),
    ("payment_card", "card 4111 1111 1111 1112 (Luhn-invalid)"),
    ("payment_card", "order number 1234567890123456"),
    ("iban", "DE89 3704 0044 0532 0130 01 has a wrong checksum"),
    ("ip_address", "version 999.1.1.1 and 1.2.3"),
    ("phone", "on 2026-04-20 at 08:37 the build 20260420083719 ran"),
]


def scan(rule: str, text: str) -> tuple[str, dict[str, int]]:
    pack = next(pack for pack, rules in BUILT_IN_PACKS.items() if any(r.name == rule for r in rules))
    redacted, counts = build_redactor("enforce", [pack]).scan(text)
    return redacted, dict(counts)


@pytest.mark.parametrize(("rule", "text", "secret"), TRUE_POSITIVES)
def test_it_redacts_each_rule_s_true_positives(rule: str, text: str, secret: str) -> None:
    redacted, counts = scan(rule, text)

    assert secret not in redacted
    assert f"[REDACTED:{rule}]" in redacted
    assert counts.get(rule) == 1


@pytest.mark.parametrize(("rule", "text"), NEAR_MISSES)
def test_it_keeps_each_rule_s_near_misses(rule: str, text: str) -> None:
    redacted, counts = scan(rule, text)

    assert rule not in counts
    assert f"[REDACTED:{rule}]" not in redacted


def test_it_replaces_only_the_secret_part_of_urls_and_assignments() -> None:
    redacted, _ = scan("url_password", "postgres://app:pw12345@db:5432/x and password=hunter22")

    assert redacted == "postgres://app:[REDACTED:url_password]@db:5432/x and password=[REDACTED:password_assignment]"


def test_it_counts_a_secret_once_even_when_two_rules_could_see_it() -> None:
    redacted, counts = build_redactor("enforce", ["secrets"]).scan("api_key=sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk")

    assert redacted == "api_key=[REDACTED:anthropic_api_key]"
    assert dict(counts) == {"anthropic_api_key": 1}


def test_it_checks_luhn_and_iban_checksums() -> None:
    assert luhn_valid("4539 1488 0343 6467") and not luhn_valid("4539 1488 0343 6468")
    assert iban_valid("NL91ABNA0417164300") and not iban_valid("NL91ABNA0417164301")
    assert not luhn_valid("411111") and not iban_valid("NL91")


@hypothesis_settings(max_examples=60, deadline=None)
@given(
    before=st.text(max_size=60),
    after=st.text(max_size=60),
    key=st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", min_size=16, max_size=16),
)
def test_it_never_lets_an_access_key_through_whatever_surrounds_it(before: str, after: str, key: str) -> None:
    secret = f"AKIA{key}"
    redactor = build_redactor("enforce", ["secrets", "pii"])

    redacted, counts = redactor.scan(f"{before} {secret} {after}")

    assert secret not in redacted
    assert counts["aws_access_key"] >= 1
    again, more = redactor.scan(redacted)
    assert again == redacted and not more  # redacting twice changes nothing


@hypothesis_settings(max_examples=60, deadline=None)
@given(text=st.text(max_size=200))
def test_it_counts_exactly_the_labels_it_leaves(text: str) -> None:
    redacted, counts = build_redactor("enforce", ["secrets", "pii"]).scan(text.replace("[REDACTED:", ""))

    assert sum(counts.values()) == len(re.findall(r"\[REDACTED:[a-z_]+\]", redacted))


def test_it_loads_custom_packs_and_refuses_broken_ones(tmp_path: Path) -> None:
    pack = tmp_path / "acme.json"
    pack.write_text(
        json.dumps(
            {
                "rules": [
                    {"name": "acme_ticket", "pattern": r"ACME-\d{6}", "label": "ticket"},
                    {"name": "acme_card", "pattern": r"\b\d{16}\b", "validator": "luhn"},
                ]
            }
        )
    )
    redactor = build_redactor("enforce", ["secrets", str(pack)])

    redacted, counts = redactor.scan("ticket ACME-123456, card 4111111111111111, not 4111111111111112")

    assert redacted == "ticket [REDACTED:ticket], card [REDACTED:acme_card], not 4111111111111112"
    assert dict(counts) == {"acme_ticket": 1, "acme_card": 1}
    broken = [
        ({"rules": [{"name": "x", "pattern": "("}]}, "not a valid regular expression"),
        ({"rules": [{"name": "x", "pattern": "a", "validator": "rot13"}]}, "validator must be one of"),
        ({"rules": [{"name": "Bad Name", "pattern": "a"}]}, "name must be"),
        ({"rules": []}, "non-empty list"),
        ({"rules": [{"name": "private_key", "pattern": "a"}]}, "unique"),
    ]
    for document, message in broken:
        pack.write_text(json.dumps(document))
        with pytest.raises(RedactionConfigError, match=message):
            resolve_packs(["secrets", str(pack)])
    with pytest.raises(RedactionConfigError, match="unknown redaction pack 'pci'"):
        resolve_packs(["pci"])


def test_it_reads_mode_and_packs_from_the_environment(tmp_path: Path) -> None:
    defaults = read_environment({})
    assert (defaults.redaction_mode, defaults.redaction_packs, defaults.audit_query_plain) == (
        "enforce",
        ("secrets",),
        False,
    )
    chosen = read_environment({"PALAZZO_REDACTION_MODE": "dry-run", "PALAZZO_REDACTION_PACKS": "secrets, pii"})
    assert (chosen.redaction_mode, chosen.redaction_packs) == ("dry-run", ("secrets", "pii"))
    with pytest.raises(ConfigurationError, match=r"PALAZZO_REDACTION_MODE.*enforce, dry-run, off"):
        read_environment({"PALAZZO_REDACTION_MODE": "strict"})
    with pytest.raises(ConfigurationError, match=r"PALAZZO_REDACTION_PACKS.*cannot read"):
        read_environment({"PALAZZO_REDACTION_PACKS": str(tmp_path / "missing.json")})


def use(**changes: Any) -> None:
    settings.PALAZZO = dataclasses.replace(settings.PALAZZO, **changes)


def redaction_metric(rule: str, mode: str) -> float:
    return REGISTRY.get_sample_value("palazzo_redactions_total", {"rule": rule, "mode": mode}) or 0.0


def test_it_redacts_store_before_dedup_vectors_and_journal(palace: Palace) -> None:
    before = redaction_metric("aws_access_key", "enforce")

    stored = services.store(**memory(f"deploy key {AWS_KEY} for the NAS"))
    again = services.store(**memory("deploy key AKIAQ2W3E4R5T6Y7U8I9 for the NAS"))  # another key, same redacted text

    assert stored["text"] == "deploy key [REDACTED:aws_access_key] for the NAS"
    assert stored["redactions"] == {"aws_access_key": 1}
    assert again["duplicate"] and again["id"] == stored["id"]
    assert AWS_KEY not in json.dumps(list(JournalEntry.objects.values_list("payload", flat=True)))
    assert redaction_metric("aws_access_key", "enforce") == before + 2
    hits = selectors.find(query=AWS_KEY)["results"]
    assert all(AWS_KEY not in hit["text"] for hit in hits)


def test_it_redacts_a_secret_in_a_room_although_rooms_are_casefolded(palace: Palace) -> None:
    # The room's canonical form reads "keys akiaz7q3..."; the key's rule must still see it.
    stored = services.store(**memory("the NAS keys live here", room=f"Keys {AWS_KEY}"))

    assert stored["redactions"] == {"aws_access_key": 1}
    assert AWS_KEY.lower() not in stored["room"].lower()
    payloads = json.dumps(list(JournalEntry.objects.values_list("payload", flat=True)))
    assert AWS_KEY.lower() not in payloads.lower()
    [recalled] = selectors.recall(ids=[stored["id"]])["memories"]
    assert recalled["room"].lower() == "keys [redacted:aws_access_key]"


def test_it_redacts_batches_supersedes_and_restores(palace: Palace) -> None:
    batch = services.store_batch(
        items=[memory("clean fact"), memory(f"jwt {JWT}", room="password=room-secret"), {"text": 3}]
    )
    assert [item["redactions"] for item in batch["items"]] == [
        {},
        {"jwt": 1, "password_assignment": 1},
        {},
    ]
    assert batch["redactions"] == {"jwt": 1, "password_assignment": 1}
    assert batch["items"][1]["memory"]["room"] == "password=[REDACTED:password_assignment]"
    corrected = services.supersede(
        supersedes=[batch["items"][0]["memory"]["id"]],
        reason="rotated: old token ghp_" + "Z" * 36,
        **memory("new key sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    )
    assert corrected["memory"]["text"] == "new key [REDACTED:stripe_key]"
    assert corrected["reason"] == "rotated: old token [REDACTED:github_token]"
    assert corrected["redactions"] == {"stripe_key": 1, "github_token": 1}
    restored = list(ingest.ingest(lines=[json.dumps({"id": 1_900_000_000, **memory(f"restored {AWS_KEY}")})]))
    assert restored[0].results[0]["redactions"] == {"aws_access_key": 1}
    assert restored[0].as_line()["redactions"] == {"aws_access_key": 1}
    assert selectors.recall(ids=[1_900_000_000])["memories"][0]["text"] == "restored [REDACTED:aws_access_key]"


def test_it_only_counts_in_dry_run_and_does_nothing_when_off(palace: Palace) -> None:
    use(redaction_mode="dry-run")
    counted = services.store(**memory(f"dry run {AWS_KEY}"))
    assert counted["text"] == f"dry run {AWS_KEY}"
    assert counted["redactions"] == {"aws_access_key": 1}
    use(redaction_mode="off")
    ignored = services.store(**memory(f"off {AWS_KEY}"))
    assert ignored["text"] == f"off {AWS_KEY}" and ignored["redactions"] == {}


def test_it_applies_the_pii_pack_only_when_asked(palace: Palace) -> None:
    assert services.store(**memory("mail maria@example.com"))["redactions"] == {}
    use(redaction_packs=("secrets", "pii"))
    assert services.store(**memory("mail mario@example.com"))["text"] == "mail [REDACTED:email]"


def test_it_reports_redactions_from_the_ingest_command(palace: Palace, tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps(memory(f"ingested {AWS_KEY}")) + "\n")
    out, err = io.StringIO(), io.StringIO()

    call_command("ingest", file=str(source), json=True, stdout=out, stderr=err)

    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines[0]["redactions"] == {"aws_access_key": 1}
    assert lines[-1]["redactions"] == {"aws_access_key": 1}
    assert "redacted: aws_access_key 1" in err.getvalue()
    assert AWS_KEY not in out.getvalue() + err.getvalue()


def test_it_redacts_error_messages_that_quote_a_refused_value(palace: Palace) -> None:
    batch = services.store_batch(items=[memory("fine"), memory("bad wing", wing=f"key {AWS_KEY}")])
    (report,) = list(ingest.ingest(lines=[json.dumps({"id": 1_900_000_001, **memory("x", hall=f"h {AWS_KEY}")})]))

    assert batch["items"][1]["status"] == "failed" and "[REDACTED:aws_access_key]" in batch["items"][1]["error"]
    assert AWS_KEY not in json.dumps(batch) + json.dumps(report.results)


def test_it_redacts_fed_transcripts_and_feeds_them_once(palace: Palace, tmp_path: Path) -> None:
    from palace.feeding import exchanges
    from palace.feeding.exchanges import Destination
    from palace.feeding.transcripts import parse_transcript
    from tests.palace.sessions import claude_session, write_session

    session = "5d1f3a0e-7c2b-4e9a-9f10-2b3c4d5e6f70"
    path = write_session(
        tmp_path / f"{session}.jsonl",
        claude_session(session, "/home/ada/code/orrery", [(f"Use {AWS_KEY} for the bucket", "Noted.")]),
    )
    destination = Destination.configured(harness="claude-code", device="laptop")

    first = exchanges.feed_transcript(transcript=parse_transcript(path), destination=destination, final=True)
    again = exchanges.feed_transcript(transcript=parse_transcript(path), destination=destination, final=True)

    assert (first.stored, again.stored, again.superseded) == (1, 0, 0)
    texts = [m["text"] for m in selectors.recent(count=5)]
    assert texts == ["User: Use [REDACTED:aws_access_key] for the bucket\n\nAssistant: Noted."]
    assert AWS_KEY not in json.dumps([entry.payload for entry in JournalEntry.objects.all()])
