"""OllamaEmbedder against a real in-process HTTP server that speaks Ollama's /api/embed."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from embeddings.base import (
    BackendUnavailableError,
    Embedder,
    EmbeddingError,
    ModelNotFoundError,
)
from embeddings.ollama_backend import OllamaEmbedder

DIMENSION = 8


def raw_vector(text: str) -> list[float]:
    """The fake server's deterministic, deliberately unnormalised vector for a text."""
    digest = hashlib.sha256(text.encode()).digest()
    return [1.0 + byte / 16 for byte in digest[:DIMENSION]]


def expected_vector(text: str) -> np.ndarray:
    """What the embedder should return for a text: the raw vector scaled to unit length."""
    vector = np.asarray(raw_vector(text), dtype=np.float64)
    return vector / np.linalg.norm(vector)


@dataclass
class FakeOllama:
    """Knobs and request log of the fake server, shared with its handler threads."""

    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    delay_seconds: float = 0.0
    mode: str = "ok"
    wake: threading.Event = field(default_factory=threading.Event)


class _OllamaHandler(BaseHTTPRequestHandler):
    server: _FakeServer

    def do_POST(self) -> None:
        state = self.server.state
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        state.requests.append(body)
        if state.delay_seconds:
            state.wake.wait(state.delay_seconds)
        if self.path != "/api/embed":
            self._send(404, b"404 page not found", "text/plain")
        elif body["model"] == "nope":
            self._send_json(404, {"error": 'model "nope" not found, try pulling it first'})
        elif state.mode == "error500":
            self._send_json(500, {"error": "llama runner process has terminated: signal: killed"})
        elif state.mode == "garbage":
            self._send(200, b"<html>definitely not json</html>", "text/html")
        else:
            rows = [raw_vector(text) for text in body["input"]]
            if state.mode == "wrong_count":
                rows = rows[:-1]
            elif state.mode == "ragged":
                rows[-1] = rows[-1][:-1]
            self._send_json(200, {"model": body["model"], "embeddings": rows})

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json")

    def _send(self, status: int, data: bytes, content_type: str) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout test); nothing to answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _FakeServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, state: FakeOllama) -> None:
        super().__init__(("127.0.0.1", 0), _OllamaHandler)
        self.state = state


@pytest.fixture
def ollama() -> Iterator[FakeOllama]:
    state = FakeOllama()
    server = _FakeServer(state)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    yield state
    state.wake.set()
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


@pytest.fixture
def make_embedder() -> Iterator[Callable[..., OllamaEmbedder]]:
    made: list[OllamaEmbedder] = []

    def make(**kwargs: Any) -> OllamaEmbedder:
        embedder = OllamaEmbedder(**kwargs)
        made.append(embedder)
        return embedder

    yield make
    for embedder in made:
        embedder.close()


def test_it_satisfies_the_embedder_protocol(ollama: FakeOllama, make_embedder: Callable[..., OllamaEmbedder]) -> None:
    embedder: Embedder = make_embedder(url=ollama.url, model="all-minilm")

    assert embedder.model_name == "all-minilm"
    assert embedder.max_tokens == 512
    assert embedder.dimension == DIMENSION


def test_it_embeds_in_batches_of_the_configured_size(
    ollama: FakeOllama, make_embedder: Callable[..., OllamaEmbedder]
) -> None:
    texts = [f"text {number}" for number in range(5)]
    embedder = make_embedder(url=ollama.url, model="all-minilm", batch_size=2)

    vectors = embedder.embed_documents(texts)

    assert [request["input"] for request in ollama.requests] == [texts[0:2], texts[2:4], texts[4:5]]
    assert all(request["model"] == "all-minilm" and request["truncate"] is True for request in ollama.requests)
    assert vectors.shape == (5, DIMENSION)
    np.testing.assert_allclose(vectors, [expected_vector(text) for text in texts], rtol=1e-5)


def test_it_normalises_vectors(ollama: FakeOllama, make_embedder: Callable[..., OllamaEmbedder]) -> None:
    embedder = make_embedder(url=ollama.url, model="all-minilm")

    vectors = embedder.embed_documents(["alpha", "beta"])

    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), [1.0, 1.0], rtol=1e-5)
    np.testing.assert_allclose(vectors, [expected_vector("alpha"), expected_vector("beta")], rtol=1e-5)


def test_it_prefixes_queries_for_nomic_models(ollama: FakeOllama, make_embedder: Callable[..., OllamaEmbedder]) -> None:
    embedder = make_embedder(url=ollama.url, model="nomic-embed-text:latest")

    query = embedder.embed_queries(["where is the key"])
    embedder.embed_documents(["the key is under the mat"])

    assert [request["input"] for request in ollama.requests] == [
        ["search_query: where is the key"],
        ["search_document: the key is under the mat"],
    ]
    np.testing.assert_allclose(query[0], expected_vector("search_query: where is the key"), rtol=1e-5)


def test_it_sends_texts_unchanged_for_models_without_prefixes(
    ollama: FakeOllama, make_embedder: Callable[..., OllamaEmbedder]
) -> None:
    embedder = make_embedder(url=ollama.url, model="all-minilm")

    embedder.embed_queries(["where is the key"])
    embedder.embed_documents(["the key is under the mat"])

    assert [request["input"] for request in ollama.requests] == [
        ["where is the key"],
        ["the key is under the mat"],
    ]


def test_it_reports_a_down_server_as_unavailable(make_embedder: Callable[..., OllamaEmbedder]) -> None:
    # A bound socket that never listens refuses connections, and no other process can take its port.
    with socket.socket() as idle:
        idle.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{idle.getsockname()[1]}"
        embedder = make_embedder(url=url, model="all-minilm")

        with pytest.raises(BackendUnavailableError) as raised:
            embedder.embed_documents(["hello"])

    message = str(raised.value)
    assert url in message and "all-minilm" in message
    assert "ollama serve" in message and "OLLAMA_URL" in message


def test_it_reports_a_missing_model_with_the_pull_command(
    ollama: FakeOllama, make_embedder: Callable[..., OllamaEmbedder]
) -> None:
    embedder = make_embedder(url=ollama.url, model="nope")

    with pytest.raises(ModelNotFoundError) as raised:
        embedder.embed_documents(["hello"])

    message = str(raised.value)
    assert "`ollama pull nope`" in message
    assert ollama.url in message
    assert "\n" not in message


def test_it_times_out_instead_of_hanging(ollama: FakeOllama, make_embedder: Callable[..., OllamaEmbedder]) -> None:
    ollama.delay_seconds = 3.0
    embedder = make_embedder(url=ollama.url, model="all-minilm", timeout_seconds=0.5)

    started = time.monotonic()
    with pytest.raises(BackendUnavailableError) as raised:
        embedder.embed_documents(["hello"])
    elapsed = time.monotonic() - started

    assert elapsed < 2.5
    assert ollama.url in str(raised.value) and "0.5 s" in str(raised.value)


def test_it_reports_a_server_error_with_its_status_and_body(
    ollama: FakeOllama, make_embedder: Callable[..., OllamaEmbedder]
) -> None:
    ollama.mode = "error500"
    embedder = make_embedder(url=ollama.url, model="all-minilm")

    with pytest.raises(EmbeddingError) as raised:
        embedder.embed_documents(["hello"])

    assert type(raised.value) is EmbeddingError
    message = str(raised.value)
    assert "500" in message and "llama runner process has terminated" in message
    assert ollama.url in message and "all-minilm" in message


def test_it_rejects_a_wrong_number_of_embeddings(
    ollama: FakeOllama, make_embedder: Callable[..., OllamaEmbedder]
) -> None:
    ollama.mode = "wrong_count"
    embedder = make_embedder(url=ollama.url, model="all-minilm")

    with pytest.raises(EmbeddingError, match="2 embeddings for 3 inputs"):
        embedder.embed_documents(["a", "b", "c"])


def test_it_rejects_embeddings_of_inconsistent_dimensions(
    ollama: FakeOllama, make_embedder: Callable[..., OllamaEmbedder]
) -> None:
    ollama.mode = "ragged"
    embedder = make_embedder(url=ollama.url, model="all-minilm")

    with pytest.raises(EmbeddingError, match="inconsistent dimensions"):
        embedder.embed_documents(["a", "b"])


def test_it_rejects_a_dimension_change_between_calls(
    ollama: FakeOllama, make_embedder: Callable[..., OllamaEmbedder]
) -> None:
    embedder = make_embedder(url=ollama.url, model="all-minilm")
    embedder.dimension = DIMENSION + 1

    with pytest.raises(EmbeddingError, match=f"{DIMENSION}-dimensional vectors .* expected {DIMENSION + 1}"):
        embedder.embed_documents(["a"])


def test_it_rejects_a_body_that_is_not_json(ollama: FakeOllama, make_embedder: Callable[..., OllamaEmbedder]) -> None:
    ollama.mode = "garbage"
    embedder = make_embedder(url=ollama.url, model="all-minilm")

    with pytest.raises(EmbeddingError, match="not JSON"):
        embedder.embed_documents(["a"])


def test_it_discovers_the_dimension_lazily(ollama: FakeOllama, make_embedder: Callable[..., OllamaEmbedder]) -> None:
    embedder = make_embedder(url=ollama.url, model="all-minilm")
    assert ollama.requests == []

    assert embedder.dimension == DIMENSION
    assert embedder.dimension == DIMENSION
    assert len(ollama.requests) == 1


def test_it_learns_the_dimension_from_an_ordinary_call(
    ollama: FakeOllama, make_embedder: Callable[..., OllamaEmbedder]
) -> None:
    embedder = make_embedder(url=ollama.url, model="all-minilm")

    embedder.embed_documents(["a"])

    assert embedder.dimension == DIMENSION
    assert len(ollama.requests) == 1


def test_it_answers_empty_input_without_a_request(
    ollama: FakeOllama, make_embedder: Callable[..., OllamaEmbedder]
) -> None:
    embedder = make_embedder(url=ollama.url, model="all-minilm")

    before = embedder.embed_queries([])
    assert before.shape == (0, 0) and before.dtype == np.float32
    assert ollama.requests == []

    embedder.embed_documents(["a"])
    after = embedder.embed_documents([])
    assert after.shape == (0, DIMENSION) and after.dtype == np.float32
    assert len(ollama.requests) == 1
