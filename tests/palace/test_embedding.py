"""The palace's embedder: turn-taking between bulk document passes, single stores and queries."""

from __future__ import annotations

import threading

from palace.runtime import Palace


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
