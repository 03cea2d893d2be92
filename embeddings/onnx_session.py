"""A CLS-pooled BERT ONNX model run through onnxruntime and tokenizers alone, exactly as fastembed runs it.

The bundled model needs nothing else from fastembed, whose import (huggingface_hub, httpx, its image
models) took 1-4 s of a server's cold start, and whose per-call generator machinery sat on every query.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from embeddings.heap import release_freed_memory

# Texts per ONNX run: one. The int8 model quantizes its activations with a scale taken over the
# whole run, so in a run of several texts each vector depended on its neighbours and on their
# padding (cosine down to 0.979 against the same text alone): a memory stored alone, in a batch
# or at a rebuild now gets one vector, the same as its words as a query. It is no slower: unpadded
# single runs, `threads` at a time, embedded 140-190 texts/s against 107 for runs of 8 (150 for runs
# of 8 sorted by length), and the arena's high-water mark is +19 MiB instead of +48.
RUN_TEXTS = 1


class ClsOnnxModel:
    """Tokenise (truncate at max_tokens, pad to the longest of a run), run, take the [CLS] row, L2-normalise."""

    def __init__(
        self, *, model_file: Path, tokenizer_file: Path, threads: int, max_tokens: int = 512, pad_token: str = "[PAD]"
    ) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(tokenizer_file))
        truncation = tokenizer.truncation or {}
        tokenizer.enable_truncation(max_length=max_tokens, direction=truncation.get("direction", "right"))
        padding = tokenizer.padding or {}
        pad_id = padding.get("pad_id", tokenizer.token_to_id(pad_token))
        tokenizer.enable_padding(
            direction=padding.get("direction", "right"),
            pad_id=pad_id if pad_id is not None else 0,
            pad_type_id=padding.get("pad_type_id", 0),
            pad_token=padding.get("pad_token") or pad_token,
        )
        self._tokenizer = tokenizer
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # One ONNX thread per run, and batches split across `threads` runs in parallel: a query
        # of ~25 tokens gains nothing from intra-op threads, which spin and wait on each other
        # when the cores are shared (4 ms single-threaded against 13-16 ms with two on a busy
        # 2-core machine), while parallel runs kept both cores busy (140-220 texts/s against 73).
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        # The arena keeps its high-water mark, which single-text runs bound (+19 MiB over the loaded
        # session for short texts, two runs in parallel). Without it every run's buffers went through
        # malloc, whose per-thread heaps kept 100-150 MiB after a bulk pass; returning those blocks
        # to the system at once instead (a fixed mmap threshold) halved bulk throughput.
        options.enable_cpu_mem_arena = True
        self._session = ort.InferenceSession(str(model_file), sess_options=options, providers=["CPUExecutionProvider"])
        release_freed_memory()  # the model file's parse buffers, freed but kept by the heap
        self._inputs = {node.name for node in self._session.get_inputs()}
        self._threads = max(1, threads)
        self._pool: ThreadPoolExecutor | None = None

    def embed(self, texts: Sequence[str], batch_size: int = RUN_TEXTS) -> Iterator[npt.NDArray[np.float32]]:
        """One normalised vector per text, at most batch_size (and RUN_TEXTS) texts per ONNX run."""
        step = max(1, min(batch_size, RUN_TEXTS))
        runs = [list(texts[start : start + step]) for start in range(0, len(texts), step)]
        if self._threads == 1 or len(runs) == 1:
            for run in runs:  # a query runs in the caller's thread: no hop
                yield from self._embed_batch(run)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="palazzo-embed")
        for rows in self._pool.map(self._embed_batch, runs):  # at most `threads` runs at a time
            yield from rows

    def _embed_batch(self, texts: list[str]) -> npt.NDArray[np.float32]:
        encoded = self._tokenizer.encode_batch(texts)
        input_ids = np.array([encoding.ids for encoding in encoded], dtype=np.int64)
        feed: dict[str, Any] = {"input_ids": input_ids}
        if "attention_mask" in self._inputs:
            feed["attention_mask"] = np.array([encoding.attention_mask for encoding in encoded], dtype=np.int64)
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.zeros_like(input_ids)
        cls = np.asarray(self._session.run(None, feed)[0][:, 0], dtype=np.float32)
        norms = np.maximum(np.linalg.norm(cls, axis=1, keepdims=True), 1e-12)
        result: npt.NDArray[np.float32] = cls / norms
        return result
