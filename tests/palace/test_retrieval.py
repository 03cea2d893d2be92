"""find's hybrid ranking, long memories, filters inside the fusion, recency, and degraded mode."""

from __future__ import annotations

import hashlib
import json
import random
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from embeddings.ollama_backend import OllamaEmbedder
from palace.engine import runtime
from palace.engine.embedding import PalaceEmbedder, chunk_text
from palace.engine.runtime import Palace
from palace.reads import retrieval, selectors
from palace.schema.timefmt import format_rfc3339
from palace.store.base import MemoryFilter, StoredPoint
from palace.writes import services
from tests.palace.helpers import memory

RARE = "QX-7741-ZETA"
TAGS = {key: value for key, value in memory("").items() if key != "text"}


@pytest.fixture
def mixed(palace: Palace) -> dict[str, int]:
    """A rare token only BM25 can place, a paraphrase only dense can place, and distractors."""
    texts = {
        "rare": f"The deploy key for the backup box is {RARE}.",
        "paraphrase": "My canine companion gets anxious whenever thunder rolls in.",
        "dog food": "The dog food order arrives on Tuesdays from the pet shop.",
        "scrub": "The backup box runs a weekly scrub of its ZFS pool.",
        "pipeline": "The deploy pipeline for the blog uses a GitHub key.",
        "mail": "Thunderbird is the mail client on the old laptop.",
        "power": "Storms knocked out the power in the office last spring.",
    }
    result = services.store_batch(items=[memory(text) for text in texts.values()])
    return {name: outcome["memory"]["id"] for name, outcome in zip(texts, result["items"])}


def ids(found: dict[str, Any]) -> list[int]:
    return [result["id"] for result in found["results"]]


def test_it_finds_an_exact_rare_token_that_only_the_keyword_leg_ranks(mixed: dict[str, int]) -> None:
    query = f"{RARE} key"
    assert ids(selectors.find(query=query, limit=1, ranking="keyword")) == [mixed["rare"]]
    assert ids(selectors.find(query=query, limit=1))[0] == mixed["rare"]


def test_it_finds_a_paraphrase_that_only_the_dense_leg_ranks(mixed: dict[str, int]) -> None:
    query = "is my four-legged friend afraid of bad weather"
    paraphrase = mixed["paraphrase"]
    # No shared stemmed word: BM25 cannot place it at all.
    assert paraphrase not in ids(selectors.find(query=query, limit=7, ranking="keyword"))
    assert ids(selectors.find(query=query, limit=1, ranking="dense")) == [paraphrase]
    assert ids(selectors.find(query=query, limit=1)) == [paraphrase]


def test_it_ranks_by_hybrid_by_default_and_says_it_is_not_degraded(mixed: dict[str, int]) -> None:
    found = selectors.find(query=f"{RARE} anxious dog thunder", limit=3)
    assert found["degraded"] is False and found["degraded_reason"] is None
    assert {mixed["rare"], mixed["paraphrase"]} <= set(ids(found))
    # Fused scores are a fraction of the best possible (first in both legs).
    assert all(0 < result["score"] <= 1 for result in found["results"])


def test_it_lifts_a_fused_hit_by_half_the_best_other_hit_of_its_session() -> None:
    def hit(point_id: int, score: float, session: str | None) -> StoredPoint:
        return StoredPoint(id=point_id, payload={"session": session} if session else {}, score=score)

    hits = [hit(1, 1.0, "a"), hit(2, 0.9, "b"), hit(3, 0.8, "b"), hit(4, 0.85, None), hit(5, 0.1, "b")]
    ranked = retrieval.with_session_context(hits)
    assert [point.id for point in ranked] == [2, 3, 1, 4, 5]
    scores = {point.id: point.score for point in ranked}
    # 2 gains half of 3's score, 3 and 5 half of 2's; alone in its session or without one, no gain.
    assert scores == pytest.approx({1: 1.0, 2: 1.3, 3: 1.25, 4: 0.85, 5: 0.55})


@given(st.permutations([(11, 0.5), (12, 0.5), (13, 0.7), (14, 0.5), (15, 0.2)]))
def test_it_orders_tied_hits_the_same_whatever_order_the_fusion_hands_them_back(hits: list[tuple[int, float]]) -> None:
    points = [StoredPoint(id=point_id, payload={}, score=score) for point_id, score in hits]
    ranked = retrieval.with_session_context(points)
    # Equal fused scores (ranks mirrored across the legs): the newer memory, the larger id, first.
    assert [point.id for point in ranked] == [13, 14, 12, 11, 15]


def test_it_applies_filters_inside_both_legs_of_the_fusion(palace: Palace) -> None:
    services.store_batch(
        items=[memory(f"{RARE} note {i} about the router", room="wanted" if i < 3 else "other") for i in range(30)]
    )
    found = selectors.find(query=f"{RARE} router", limit=10, room="wanted", all_fields=True)
    # Filtering after a top-k would lose most of the three among thirty equal matches.
    assert found["count"] == 3
    assert {result["room"] for result in found["results"]} == {"wanted"}


def test_it_finds_a_sentence_at_the_end_of_a_20_kb_memory(palace: Palace) -> None:
    rng = random.Random(5)
    words = ["garden", "invoice", "kernel", "holiday", "meeting", "recipe", "bicycle", "budget", "sprint", "harbour"]
    filler = " ".join(rng.choice(words) for _ in range(3300))
    needle = "The spare key to the lighthouse is hidden under the blue ceramic frog."
    long_text = f"{filler} {needle}"
    assert len(long_text.encode()) > 20_000 and len(chunk_text(long_text)) > 10
    others = [memory(f"Short note {i}: the {words[i]} plans changed again.") for i in range(10)]
    result = services.store_batch(items=[memory(long_text), *others])
    long_id = result["items"][0]["memory"]["id"]
    for ranking in ("dense", "hybrid"):
        assert ids(selectors.find(query="where is the lighthouse key hidden", limit=1, ranking=ranking)) == [long_id]


def test_it_finds_a_memory_by_its_date_in_words(palace: Palace) -> None:
    may = services.store(text="We agreed on the new logo colours.", timestamp="2023-05-08T13:56:00Z", **TAGS)
    june = services.store(text="We agreed on the new logo fonts.", timestamp="2023-06-03T09:00:00Z", **TAGS)
    # The keyword leg alone: with two memories, a dense leg that disagrees makes an exact RRF tie.
    assert ids(selectors.find(query="What did we agree on 3 June 2023?", limit=1, ranking="keyword")) == [june["id"]]
    assert ids(selectors.find(query="What did we agree in May 2023?", limit=1, ranking="keyword")) == [may["id"]]


def test_it_composes_recency_and_time_filters_with_the_hybrid_ranking(palace: Palace) -> None:
    now = datetime.now(UTC)
    old = services.store(
        text="The team offsite is in Lisbon.",
        timestamp=format_rfc3339(now - timedelta(days=60)),
        **TAGS,
    )
    new = services.store(
        text="The team offsite moved to Porto.",
        timestamp=format_rfc3339(now - timedelta(days=1)),
        **TAGS,
    )
    plain = selectors.find(query="team offsite Lisbon", limit=2)
    assert ids(plain)[0] == old["id"]
    recent_first = selectors.find(query="team offsite Lisbon", limit=2, recency_half_life_days=7)
    assert ids(recent_first)[0] == new["id"]
    by_id = {result["id"]: result["score"] for result in recent_first["results"]}
    unweighted = {result["id"]: result["score"] for result in plain["results"]}
    # A true half-life: 60 days at 7 days per half leaves 0.5 ** (60 / 7) of the score.
    assert by_id[old["id"]] == pytest.approx(unweighted[old["id"]] * 0.5 ** (60 / 7), rel=1e-3)
    windowed = selectors.find(
        query="team offsite Lisbon",
        limit=2,
        since=format_rfc3339(now - timedelta(days=90)),
        until=format_rfc3339(now - timedelta(days=30)),
    )
    assert ids(windowed) == [old["id"]]


DIMENSION = 8


def fake_vector(text: str) -> list[float]:
    """A deterministic vector per text: equal texts embed equally."""
    return [1.0 + byte / 16 for byte in hashlib.sha256(text.encode()).digest()[:DIMENSION]]


class _EmbedHandler(BaseHTTPRequestHandler):
    server: _FakeOllama

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.server.silent:
            time.sleep(30)
            return
        data = json.dumps({"embeddings": [fake_vector(text) for text in body["input"]]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _FakeOllama(ThreadingHTTPServer):
    daemon_threads = True
    silent = False


def start_ollama(port: int = 0, *, silent: bool = False) -> _FakeOllama:
    """A real HTTP server on 127.0.0.1 speaking Ollama's /api/embed."""
    server = _FakeOllama(("127.0.0.1", port), _EmbedHandler)
    server.silent = silent
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def stop(server: _FakeOllama) -> None:
    server.shutdown()
    server.server_close()


@pytest.fixture
def ollama_palace(palace_env: Any, db: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[_FakeOllama, int]]:
    """An open palace whose embedder is the Ollama backend talking to a fake server we can stop."""
    server = start_ollama()
    port = server.server_address[1]
    embedder = PalaceEmbedder(OllamaEmbedder(url=f"http://127.0.0.1:{port}", model="fake", timeout_seconds=1))
    monkeypatch.setattr(runtime, "_embedder", embedder)
    runtime.get_palace()
    holder = [server]
    yield server, port
    stop(holder[0])


def test_it_answers_from_keywords_when_the_embedder_stops_and_embeds_later(
    ollama_palace: tuple[_FakeOllama, int],
) -> None:
    server, port = ollama_palace
    services.store_batch(items=[memory("The NAS runs ZFS with raidz2."), memory("Alice prefers green tea.")])
    stop(server)
    started = time.monotonic()
    found = selectors.find(query="what does the NAS run", limit=2)
    assert time.monotonic() - started < 5
    assert found["degraded"] is True and "unavailable" in found["degraded_reason"]
    assert found["results"][0]["text"] == "The NAS runs ZFS with raidz2."
    # Stored while down: journaled and keyword-searchable at once.
    kept = services.store(text="The router firmware is OpenWrt 23.05.", **TAGS)
    palace = runtime.get_palace()
    assert [p.id for p in palace.store.scroll(memory_filter=MemoryFilter(needs_embedding=True))] == [kept["id"]]
    assert selectors.find(query="router firmware", limit=1)["results"][0]["id"] == kept["id"]
    # The backend returns: the next find embeds the deferred memory and ranks it by its dense vector.
    restarted = start_ollama(port)
    try:
        again = selectors.find(query="The router firmware is OpenWrt 23.05.", limit=1, ranking="dense")
        assert again["degraded"] is False
        assert again["results"][0]["id"] == kept["id"] and again["results"][0]["score"] == pytest.approx(1.0)
        assert list(palace.store.scroll(memory_filter=MemoryFilter(needs_embedding=True))) == []
    finally:
        stop(restarted)
    server.server_close()


def test_it_never_waits_past_the_embed_timeout(palace_env: Any, db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    server = start_ollama()
    port = server.server_address[1]
    embedder = PalaceEmbedder(OllamaEmbedder(url=f"http://127.0.0.1:{port}", model="fake", timeout_seconds=1))
    monkeypatch.setattr(runtime, "_embedder", embedder)
    try:
        runtime.get_palace()
        services.store(text="The VPN listens on 51820.", **TAGS)
        server.silent = True
        started = time.monotonic()
        found = selectors.find(query="VPN port", limit=1)
        assert time.monotonic() - started < 4
        assert found["degraded"] is True and "1 s" in found["degraded_reason"]
        assert found["results"][0]["text"] == "The VPN listens on 51820."
    finally:
        server.silent = False
        stop(server)


def test_it_rebuild_regenerates_dense_and_keyword_vectors(palace: Palace) -> None:
    stored = services.store_batch(items=[memory(f"{RARE} lives on the rebuild box."), memory("Bob likes sailing.")])
    services.rebuild()
    shard = runtime.get_palace().store.shard  # type: ignore[attr-defined]
    records = shard.retrieve([item["memory"]["id"] for item in stored["items"]], with_payload=False, with_vector=True)
    assert len(records) == 2
    for record in records:
        assert set(record.vector) == {"dense", "bm25"}
    assert ids(selectors.find(query=RARE, limit=1, ranking="keyword")) == [stored["items"][0]["memory"]["id"]]
