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
        # One ONNX thread per run, and batches split across `threads` runs in parallel: intra-op threads
        # spin and wait on each other when the cores are shared (4 ms single-threaded against 13-16 ms
        # with two on a busy 2-core machine), while parallel runs kept both cores busy (140-220 texts/s
        # against 73).
        self._session = self._new_session(ort, model_file, intra_threads=1)
        # A query is one short run that a caller waits for, alone on the cores between a client's calls:
        # there intra-op threads pay (a 15-token query: 4.9-5.8 ms with two threads against 6.9-7.1 ms
        # with one, p50 of 200 runs 2 ms apart, 2026-12-05). Its own session, so stores keep theirs
        # single-threaded. Its threads spin while a run lasts and stop at its end: spinning between runs
        # doubled a find's p50 while another process kept one core busy (28.3 ms against 12.0-12.3),
        # never spinning cost every quiet find its threads' wake-ups (1.01 of mcp-server-qdrant's find at
        # 1k against 0.91-0.94, bench/bench_floor.py). The second copy costs about 35 MiB.
        self._query_session = (
            self._new_session(ort, model_file, intra_threads=threads, spinning=True) if threads > 1 else self._session
        )
        release_freed_memory()  # the model file's parse buffers, freed but kept by the heap
        self._inputs = {node.name for node in self._session.get_inputs()}
        self._threads = max(1, threads)
        self._pool: ThreadPoolExecutor | None = None

    @staticmethod
    def _new_session(ort: Any, model_file: Path, *, intra_threads: int, spinning: bool = False) -> Any:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = intra_threads
        options.inter_op_num_threads = 1
        if spinning:  # within a run only: the pool stops spinning when the run ends
            options.add_session_config_entry("session.force_spinning_stop", "1")
        else:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # The arena keeps its high-water mark, which single-text runs bound (+19 MiB over the loaded
        # session for short texts, two runs in parallel). Without it every run's buffers went through
        # malloc, whose per-thread heaps kept 100-150 MiB after a bulk pass; returning those blocks
        # to the system at once instead (a fixed mmap threshold) halved bulk throughput.
        options.enable_cpu_mem_arena = True
        return ort.InferenceSession(str(model_file), sess_options=options, providers=["CPUExecutionProvider"])

    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        """One query's normalised vector, from the session whose run may use every thread."""
        return self._embed_batch([text], session=self._query_session)[0]

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

    def _embed_batch(self, texts: list[str], session: Any = None) -> npt.NDArray[np.float32]:
        encoded = self._tokenizer.encode_batch(texts)
        input_ids = np.array([encoding.ids for encoding in encoded], dtype=np.int64)
        feed: dict[str, Any] = {"input_ids": input_ids}
        if "attention_mask" in self._inputs:
            feed["attention_mask"] = np.array([encoding.attention_mask for encoding in encoded], dtype=np.int64)
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.zeros_like(input_ids)
        cls = np.asarray((session or self._session).run(None, feed)[0][:, 0], dtype=np.float32)
        norms = np.maximum(np.linalg.norm(cls, axis=1, keepdims=True), 1e-12)
        result: npt.NDArray[np.float32] = cls / norms
        return result
