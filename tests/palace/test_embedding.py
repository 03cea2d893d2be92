"""The palace's embedder: how long texts are cut into windows, and turn-taking between passes."""

from __future__ import annotations

import itertools
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from embeddings.heap import release_freed_memory
from palace.engine.embedding import CHUNK_CHARS, chunk_spans, chunk_text
from palace.engine.runtime import Palace


def test_it_lets_a_single_store_embed_while_a_bulk_pass_holds_the_turn(palace: Palace) -> None:
    embedder = palace.embedder
    finished: set[str] = set()

    def embed(name: str, texts: list[str]) -> None:
        embedder.documents(texts)
        finished.add(name)

    single = threading.Thread(target=embed, args=("single", ["The NAS backs up at 02:00."]))
    bulk = threading.Thread(target=embed, args=("bulk", [f"bulk memory number {n}" for n in range(40)]))
    with embedder._documents_lock:  # a piece of a bulk import is being embedded
        single.start()
        bulk.start()
        single.join(timeout=30)
        assert "single" in finished  # did not queue behind the bulk piece
        assert "bulk" not in finished  # another bulk pass waits for its turn
    bulk.join(timeout=60)
    assert finished == {"single", "bulk"}


def test_it_cuts_a_long_text_between_lines() -> None:
    lines = [f'Speaker {n % 2} said, "this is line {n} of a long dialogue about the garden shed."' for n in range(120)]
    text = "\n".join(lines)
    chunks = chunk_text(text)
    assert len(chunks) > 3
    assert all(len(chunk) <= CHUNK_CHARS for chunk in chunks)
    # Every window is a run of whole lines, and the windows together hold every line once, in order.
    assert [line for chunk in chunks for line in chunk.split("\n")] == lines


def test_it_cuts_an_over_long_line_into_overlapping_word_windows() -> None:
    words = [f"word{n}" for n in range(900)]
    line = " ".join(words)
    chunks = chunk_text(f"A short first line.\n{line}\nA short last line.")
    assert chunks[0] == "A short first line." and chunks[-1] == "A short last line."
    windows = chunks[1:-1]
    assert len(windows) > 3 and all(len(window) <= CHUNK_CHARS for window in windows)
    assert all(window.split() for window in windows)
    # Consecutive windows share words, so a sentence cut by one boundary is whole in the next window.
    for before, after in itertools.pairwise(windows):
        assert set(before.split()) & set(after.split())
    assert {word for window in windows for word in window.split()} == set(words)


def test_it_keeps_a_short_text_whole() -> None:
    text = "line one\nline two\n" * 10
    assert chunk_text(text) == [text]


def _resident_heap_mib() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) / 1024 for line in status if line.startswith("RssAnon:"))


def test_it_hands_the_memory_of_a_bulk_pass_back_to_the_system(palace: Palace) -> None:
    line = "the quarterly budget review moved to the harbour office on Friday."
    texts = ["\n".join(f"Line {k} of note {n}: {line}" for k in range(60)) for n in range(6)]  # 24 windows
    palace.embedder.documents(texts)  # the first pass also allocates what stays: caches, pools
    assert release_freed_memory()
    before = _resident_heap_mib()
    palace.embedder.documents(texts)
    # Kept by glibc, the pass's freed activations stayed resident (13-90 MiB more, measured).
    assert _resident_heap_mib() - before < 8


def test_it_returns_freed_heap_pages_to_the_system() -> None:
    blocks = [bytearray(2000) for _ in range(40_000)]  # ~80 MiB in blocks glibc keeps when freed
    pin = bytearray(2000)  # above them on the heap, so freeing them leaves a hole only a trim returns
    held = _resident_heap_mib()
    del blocks
    assert release_freed_memory()
    assert held - _resident_heap_mib() > 40
    assert pin


@given(st.text(alphabet=st.sampled_from("ab c\n ."), max_size=6000))
@settings(max_examples=200, deadline=None)
def test_it_places_every_chunk_where_it_stands_in_the_text(text: str) -> None:
    spans = chunk_spans(text)
    assert [text[start:end] for start, end in spans] == chunk_text(text)
    assert all(0 <= start <= end <= max(len(text), CHUNK_CHARS) for start, end in spans)
