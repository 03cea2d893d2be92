"""The fastembed backend with the real bundled model, offline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from embeddings.base import ModelNotFoundError
from embeddings.fastembed_backend import BUNDLED_SHA256, FastEmbedEmbedder, prepare_bundled_model
from embeddings.prefixes import BGE_QUERY_INSTRUCTION, prefixes_for


@pytest.fixture(scope="module")
def embedder(tmp_path_factory: pytest.TempPathFactory) -> FastEmbedEmbedder:
    return FastEmbedEmbedder(models_dir=tmp_path_factory.mktemp("models"), threads=2)


def test_it_loads_the_bundled_model_offline_with_384_dimensions(embedder: FastEmbedEmbedder) -> None:
    assert embedder.dimension == 384
    vectors = embedder.embed_documents(["hello world", "the NAS runs ZFS"])
    assert vectors.shape == (2, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_it_embeds_the_bundled_model_exactly_as_fastembed_does(
    embedder: FastEmbedEmbedder, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # The bundled model runs on onnxruntime directly; the same files loaded as a local model
    # directory go through fastembed's own pipeline, so the vectors of existing palaces must not move.
    directory = prepare_bundled_model(tmp_path_factory.mktemp("models"))
    # One text per run on both sides: the int8 model quantizes its activations with a scale taken
    # over the whole run, so in a run of several texts each vector depends on its neighbours.
    through_fastembed = FastEmbedEmbedder(
        model_name="bge-small-en-v1.5-int8",
        models_dir=directory.parent,
        threads=2,
        local_model_dir=directory,
        batch_size=1,
    )
    texts = [
        "",
        " ",
        "hello",
        "the NAS runs ZFS",
        "x" * 5000,
        "word " * 700,
        "\u65e5\u672c \u00fcn\u00efc\u00f6d\u00e9 \x00",
    ]
    texts += [f"memory {number} about port {number * 7}" for number in range(40)]
    assert np.array_equal(embedder.embed_documents(texts), through_fastembed.embed_documents(texts))


def test_it_gives_a_text_the_same_vector_whatever_it_is_embedded_with(embedder: FastEmbedEmbedder) -> None:
    # A memory stored alone, in a batch or at a rebuild, and the same words as a query, get one vector.
    text = "the NAS runs ZFS on four disks"
    neighbours = ["x" * 3000, "hello", "word " * 300, "\u65e5\u672c \u00fcn\u00efc\u00f6d\u00e9"]
    alone = embedder.embed_documents([text])[0]
    for position in range(len(neighbours) + 1):
        batch = [*neighbours[:position], text, *neighbours[position:]]
        assert np.array_equal(embedder.embed_documents(batch)[position], alone)
    assert np.array_equal(embedder.embed_queries([text])[0], alone)


def test_it_ranks_a_related_document_above_an_unrelated_one(embedder: FastEmbedEmbedder) -> None:
    documents = embedder.embed_documents(["The NAS stores its data on ZFS", "Alice likes green tea"])
    query = embedder.embed_queries(["which file system does the storage server use"])[0]
    scores = documents @ query
    assert scores[0] > scores[1] + 0.1


def test_it_embeds_bge_v15_queries_as_written(embedder: FastEmbedEmbedder) -> None:
    text = "backup schedule"
    as_query = embedder.embed_queries([text])[0]
    as_document = embedder.embed_documents([text])[0]
    instructed = embedder.embed_documents([BGE_QUERY_INSTRUCTION + text])[0]
    assert float(as_query @ as_document) == pytest.approx(1.0, abs=1e-5)
    assert float(as_query @ instructed) < 0.999


def test_it_knows_the_prefixes_of_each_model_family() -> None:
    assert prefixes_for("nomic-ai/nomic-embed-text-v1.5-Q").query == "search_query: "
    assert prefixes_for("nomic-ai/nomic-embed-text-v1.5-Q").document == "search_document: "
    assert prefixes_for("BAAI/bge-small-en-v1.5").query == ""
    assert prefixes_for("BAAI/bge-base-en-v1.5").document == ""
    assert prefixes_for("BAAI/bge-small-en").query == BGE_QUERY_INSTRUCTION
    assert prefixes_for("BAAI/bge-small-en").document == ""


def test_it_checks_the_model_checksum(tmp_path: Path) -> None:
    target = prepare_bundled_model(tmp_path)
    assert (target / "tokenizer_config.json").is_file()
    assert BUNDLED_SHA256.startswith("6c9c6101")


def test_it_refuses_a_tampered_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "model_quantized.onnx").write_bytes(b"not a model")
    (fake / "tokenizer.json").write_text("{}")
    monkeypatch.setattr("embeddings.fastembed_backend.bundled_model_source", lambda: fake)
    with pytest.raises(ModelNotFoundError) as caught:
        prepare_bundled_model(tmp_path / "models")
    assert "sha256" in str(caught.value)


def test_it_explains_where_a_missing_model_is_expected(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError) as caught:
        FastEmbedEmbedder(model_name="my-model", models_dir=tmp_path, local_model_dir=tmp_path / "nothing-here")
    assert str(tmp_path / "nothing-here") in str(caught.value)
    with pytest.raises(ModelNotFoundError) as unknown:
        FastEmbedEmbedder(model_name="no/such-model", models_dir=tmp_path, cache_dir=tmp_path)
    assert "no/such-model" in str(unknown.value)


def test_it_says_where_a_builtin_model_is_expected_when_it_cannot_be_fetched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Offline mode answers at once; a blocked download reaches the same error after fastembed's retries.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError) as caught:
        FastEmbedEmbedder(model_name="nomic-ai/nomic-embed-text-v1.5-Q", models_dir=tmp_path, cache_dir=tmp_path)
    assert "FASTEMBED_CACHE_DIR" in str(caught.value) and str(tmp_path) in str(caught.value)


def test_it_runs_a_query_on_a_session_of_its_own_with_every_thread(
    embedder: FastEmbedEmbedder, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # A search waits for its query's one short run: it may use both cores; stores keep one thread per run.
    model = embedder._model
    assert model._query_session is not model._session
    assert model._query_session.get_session_options().intra_op_num_threads == 2
    assert model._session.get_session_options().intra_op_num_threads == 1
    text = "which disks does the NAS use"
    assert np.array_equal(embedder.embed_queries([text])[0], embedder.embed_documents([text])[0])
    single = FastEmbedEmbedder(models_dir=tmp_path_factory.mktemp("models"), threads=1)
    assert single._model._query_session is single._model._session, "one thread: one session, no second copy"
