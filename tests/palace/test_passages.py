"""Passages: what a find hands back of a long memory, within the answer's budget, and recall of a range."""

from __future__ import annotations

import itertools
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from mcpserver.models import FindResult
from palace.engine import embedding
from palace.engine.embedding import chunk_spans
from palace.engine.points import embed_deferred
from palace.engine.runtime import Palace, get_palace
from palace.errors import InvalidInput
from palace.models import AuditRecord
from palace.reads import passages, selectors
from palace.reads.passages import ELISION, MAX_UNIT_CHARS, WHOLE_CHARS, Hit, fit, units_of
from palace.schema.forms import MAX_MAX_CHARS, MIN_MAX_CHARS
from palace.writes import services
from tests.mcpserver.conftest import connect, stdio_parameters
from tests.palace.helpers import memory

LOCOMO = Path(__file__).resolve().parents[2].parent / "shared" / "bench" / "locomo-dev" / "corpus_session.jsonl"

# A conversation as LoCoMo stores one session: one turn per line.
TURNS = [
    'Caroline said, "I went to a LGBTQ support group yesterday and it was so powerful."',
    'Melanie said, "Wow, that is cool! What happened that was so awesome?"',
    'Caroline said, "The transgender stories were so inspiring, I was so thankful for the support."',
    'Melanie said, "I finally painted that sunrise over the lake last weekend, it took me ages."',
    'Caroline said, "Gonna continue my education and check out counseling jobs."',
    'Melanie said, "The kids and I went camping in the mountains, we saw a huge waterfall."',
    'Caroline said, "My grandmother gave me a necklace from Sweden when I was a child."',
]
# Longer than the default budget, so a find must cut it.
CONVERSATION = [f"{turn} (day {day})" for day in range(1, 13) for turn in TURNS]


def _segments(result: dict[str, Any]) -> list[str]:
    return result["text"].split(ELISION)


def test_it_cuts_units_at_lines_and_never_inside_one() -> None:
    text = "\n".join(CONVERSATION)
    spans = units_of(text)
    assert [text[start:end] for start, end in spans] == CONVERSATION


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=3000))
def test_it_never_splits_a_line_shorter_than_a_unit_nor_a_character(text: str) -> None:
    spans = units_of(text)
    position = 0
    lines = []
    for line in text.split("\n"):
        lines.append((position, position + len(line)))
        position += len(line) + 1
    for start, end in spans:
        piece = text[start:end]
        assert "\n" not in piece and piece.strip() and len(piece) <= MAX_UNIT_CHARS
        piece.encode("utf-8")  # whole characters: a slice of a str never cuts one
        line_start, line_end = next((a, b) for a, b in lines if a <= start and end <= b)
        if line_end - line_start <= MAX_UNIT_CHARS:
            assert (start, end) == (line_start, line_end), "a line that fits a unit is one unit"
    assert spans == sorted(spans) and all(a[1] <= b[0] for a, b in itertools.pairwise(spans))


MEMORY_TEXT = st.text(alphabet=st.sampled_from('ab cd\n."é😀\\'), min_size=1, max_size=4000)


@given(
    query=st.text(max_size=200),
    texts=st.lists(MEMORY_TEXT, max_size=20),
    max_chars=st.integers(min_value=MIN_MAX_CHARS, max_value=20_000),
)
@hypothesis_settings(max_examples=150, deadline=None)
def test_it_holds_the_budget_for_any_query_and_any_memories(query: str, texts: list[str], max_chars: int) -> None:
    hits = [Hit(rank=rank, memory={"id": rank + 1, "text": text, "room": "r"}) for rank, text in enumerate(texts)]
    answer = fit(query=query, hits=hits, envelope={"count": len(hits), "degraded": False}, max_chars=max_chars)
    assert passages.answer_chars(answer) <= max_chars
    for result in answer["results"]:
        text = texts[result["id"] - 1]
        assert result["length"] == len(text)
        if "passages" not in result:
            assert result["text"] == text, "a memory without passages comes back whole"
            continue
        spans = [(start, end) for start, end in result["passages"]]
        assert [text[start:end] for start, end in spans] == _segments(result)
    ranks = [result["id"] for result in answer["results"]]
    assert ranks == sorted(ranks), "results keep their rank order"
    if answer["count"] < len(hits) or any("passages" in result for result in answer["results"]):
        assert "palace_recall" in answer["cut"]


@pytest.fixture
def conversation(palace: Palace) -> dict[str, int]:
    long_text = "\n".join(CONVERSATION)
    items = [
        memory(long_text, room="friends", session="s1"),
        memory("Melanie keeps bees on the roof of the school.", room="friends", session="s2"),
    ]
    stored = services.store_batch(items=items)["items"]
    return {"long": stored[0]["memory"]["id"], "short": stored[1]["memory"]["id"], "length": len(long_text)}


def test_it_answers_a_long_memory_with_its_matching_passages(conversation: dict[str, int]) -> None:
    answer = selectors.find(query="When did Melanie paint the sunrise over the lake?", room="friends")
    long = next(result for result in answer["results"] if result["id"] == conversation["long"])
    assert long["length"] == conversation["length"]
    assert "painted that sunrise over the lake" in long["text"]
    assert len(long["text"]) < conversation["length"]
    whole = "\n".join(CONVERSATION)
    for (start, end), segment in zip(long["passages"], _segments(long)):
        assert whole[start:end] == segment, "every passage names its exact position"
    budget, _, _ = selectors.find_page(query="When did Melanie paint the sunrise over the lake?", room="friends")
    assert passages.answer_chars(answer) <= budget == passages.MIN_DEFAULT_CHARS
    assert long["score"] > 0 and "cut" in answer


def test_it_returns_a_short_memory_whole(conversation: dict[str, int]) -> None:
    answer = selectors.find(query="bees on the roof", room="friends")
    short = next(result for result in answer["results"] if result["id"] == conversation["short"])
    assert short["text"] == "Melanie keeps bees on the roof of the school."
    assert "passages" not in short and short["length"] == len(short["text"]) <= WHOLE_CHARS


def test_it_answers_whole_memories_within_a_larger_budget(conversation: dict[str, int]) -> None:
    answer = selectors.find(query="sunrise", room="friends", max_chars=MAX_MAX_CHARS)
    assert len("\n".join(CONVERSATION)) > passages.MIN_DEFAULT_CHARS
    assert {result["text"] for result in answer["results"]} >= {"\n".join(CONVERSATION)}
    assert answer["cut"] is None


@pytest.mark.parametrize(
    ("arguments", "field"),
    [({"max_chars": MIN_MAX_CHARS - 1}, "max_chars"), ({"max_chars": "6000"}, "max_chars")],
)
def test_it_refuses_a_budget_out_of_bounds(conversation: dict[str, int], arguments: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        selectors.find(query="sunrise", **arguments)
    assert field in caught.value.errors


def test_it_recalls_exactly_a_range(conversation: dict[str, int]) -> None:
    whole = "\n".join(CONVERSATION)
    found = selectors.recall(ids=[conversation["long"]], start=100, end=250)["memories"][0]
    assert found["text"] == whole[100:250]
    assert found["passages"] == [[100, 250]] and found["length"] == len(whole)
    tail = selectors.recall(ids=[conversation["long"]], start=len(whole) - 10)["memories"][0]
    assert tail["text"] == whole[-10:]


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"start": 10, "end": 5}, "end"),
        ({"end": 10**6}, "end"),
        ({"start": 10**6}, "start"),
        ({"start": -1}, "start"),
        ({"start": "1"}, "start"),
        ({"extra": True}, "ids"),
    ],
)
def test_it_refuses_a_bad_range_naming_the_field(
    conversation: dict[str, int], arguments: dict[str, Any], field: str
) -> None:
    ids = [conversation["long"], conversation["short"]] if "extra" in arguments else [conversation["long"]]
    arguments = {key: value for key, value in arguments.items() if key != "extra"} or {"start": 0}
    with pytest.raises(InvalidInput) as caught:
        selectors.recall(ids=ids, **arguments)
    assert field in caught.value.errors


def test_it_hides_superseded_and_out_of_scope_memories_from_passages(conversation: dict[str, int]) -> None:
    services.supersede(supersedes=[conversation["long"]], reason="moved", text="The sunrise painting was sold.")
    answer = selectors.find(query="sunrise over the lake", room="friends")
    assert conversation["long"] not in [result["id"] for result in answer["results"]]
    scoped = selectors.find(query="sunrise over the lake", wings=("personal",))
    assert scoped["results"] == []


def test_it_audits_the_passages_it_read(conversation: dict[str, int]) -> None:
    answer = selectors.find(query="sunrise over the lake", room="friends", actor="auditor")
    selectors.recall(ids=[conversation["long"]], start=0, end=40, actor="auditor")
    rows = list(AuditRecord.objects.filter(actor="auditor").order_by("id"))
    long = next(result for result in answer["results"] if result["id"] == conversation["long"])
    assert rows[0].filters["passages"] == {str(conversation["long"]): long["passages"]}
    assert rows[1].filters["passages"] == {str(conversation["long"]): [[0, 40]]}


@pytest.mark.skipif(not LOCOMO.is_file(), reason="needs ../shared/bench/locomo-dev")
def test_it_keeps_palace_find_within_the_budget_over_mcp(tmp_path: Path) -> None:
    sessions = [json.loads(line) for line in LOCOMO.read_text(encoding="utf-8").splitlines()[:8]]
    with connect(stdio_parameters(tmp_path), "stdio") as client:
        client.ok(
            "palace_store_batch",
            {"items": [memory(session["text"], room="locomo", session=session["id"]) for session in sessions]},
        )
        for query, budget in (("What did Caroline research?", None), ("Melanie painting kids camping", 3000)):
            arguments: dict[str, Any] = {"query": query} | ({"max_chars": budget} if budget else {})
            result = client.call("palace_find", arguments)
            text = result.content[0].text  # type: ignore[union-attr]
            found = json.loads(text)
            applied = int(found["cut"].split(":")[0].removeprefix("max_chars "))
            assert len(text) <= applied == (budget or applied) <= passages.MAX_DEFAULT_CHARS
            assert found["results"] and any("passages" in memory for memory in found["results"])
            first = next(memory for memory in found["results"] if "passages" in memory)
            start, end = first["passages"][0]
            ranged = client.ok("palace_recall", {"ids": [first["id"]], "start": start, "end": end})
            assert ranged["memories"][0]["text"] == _segments(first)[0]


def test_it_reads_back_the_chunk_vectors_a_memory_was_ranked_with_on_both_stores(any_palace: Palace) -> None:
    text = "\n".join(CONVERSATION)
    stored = services.store(**memory(text, room="friends"))
    assert any_palace.store.chunk_vectors([stored["id"]]) == {}, "a single store's dense vector follows"
    embed_deferred(any_palace)
    vectors = any_palace.store.chunk_vectors([stored["id"], 999_999_999_999_999])
    assert list(vectors) == [stored["id"]], "an unknown id is left out"
    expected = any_palace.embedder.documents([text])[0]
    assert vectors[stored["id"]].shape == expected.shape == (len(chunk_spans(text)), any_palace.embedder.dimension)
    assert float(abs(vectors[stored["id"]] - expected).max()) < 1e-2  # stored as float16


def test_it_cuts_passages_of_a_memory_with_older_windows_by_words_until_rebuild_recuts_it(
    palace: Palace, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = "\n".join(CONVERSATION)
    # Stored as palazzo embedded long texts before 2026-12-04: windows of up to 1,400 characters.
    monkeypatch.setattr(embedding, "CHUNK_CHARS", 1400)
    older = len(chunk_spans(text))
    stored = services.store(**memory(text, room="friends"))
    embed_deferred(palace)
    monkeypatch.undo()
    assert len(palace.store.chunk_vectors([stored["id"]])[stored["id"]]) == older != len(chunk_spans(text))
    answer = selectors.find(query="Which necklace did Caroline's grandmother give her?", room="friends")
    result = next(result for result in answer["results"] if result["id"] == stored["id"])
    assert "necklace from Sweden" in result["text"] and result["passages"]
    assert passages.answer_chars(answer) <= passages.MIN_DEFAULT_CHARS
    services.rebuild()  # opens the palace again, on the rebuilt store
    rebuilt = get_palace().store.chunk_vectors([stored["id"]])[stored["id"]]
    assert len(rebuilt) == len(chunk_spans(text))


def test_it_prefers_the_passage_whose_chunk_matches_by_meaning() -> None:
    text = "\n".join(["alpha beta"] * 200 + ["gamma delta"] * 200)
    middle = len("\n".join(["alpha beta"] * 200)) + 1
    hit = Hit(rank=0, memory={"id": 1, "text": text}, chunks=((0, middle - 1, 0.2), (middle, len(text), 0.9)))
    answer = fit(query="nothing in common", hits=[hit], envelope={"count": 1}, max_chars=MIN_MAX_CHARS)
    assert answer["results"][0]["passages"][0][0] >= middle


def test_it_takes_the_units_another_scorer_ranks_first() -> None:
    lines = [f"line {k}: the weather was mild and the market was busy" for k in range(120)]
    text = "\n".join(lines)
    chosen = {lines[7], lines[93]}

    def evidence_first(_: str, pieces: Any, ranks: Any) -> list[float]:
        return [float(piece in chosen) for piece in pieces]

    hit = Hit(rank=0, memory={"id": 1, "text": text})
    answer = fit(query="weather", hits=[hit], envelope={"count": 1}, max_chars=MIN_MAX_CHARS, scorer=evidence_first)
    assert {lines[7], lines[93]} <= set(answer["results"][0]["text"].split("\n"))
    assert passages.answer_chars(answer) <= MIN_MAX_CHARS
    # The find's own scorer, asked the same, reads from the top and never reaches line 93: the scorer chose.
    default = fit(query="weather", hits=[hit], envelope={"count": 1}, max_chars=MIN_MAX_CHARS)
    assert lines[93] not in default["results"][0]["text"].split("\n")


def test_it_lists_every_memory_s_opening_within_the_budget_and_pages_through_the_rest(palace: Palace) -> None:
    texts = [f"User: question {number}\n\n" + "\n".join(CONVERSATION) for number in range(12)]
    stored = services.store_batch(items=[memory(text, room="long") for text in texts])["items"]
    expected = {item["memory"]["id"] for item in stored}
    seen: list[int] = []
    cursor = None
    sizes = []
    while True:
        page = selectors.browse(room="long", limit=10, max_chars=MIN_MAX_CHARS, cursor=cursor)
        sizes.append(page["count"])
        assert passages.answer_chars(page, key="memories") <= MIN_MAX_CHARS
        assert page["memories"], "a page always shows at least one memory"
        for shown in page["memories"]:
            assert shown["text"].startswith("User: question"), "a memory's opening comes first"
        seen += [shown["id"] for shown in page["memories"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(expected), "no memory is skipped or shown twice"
    assert sizes[0] < 10 and len(sizes) >= 2, "the budget moved the first page's tail to the next page"


EXCHANGE = st.builds(
    lambda prompt, steps, conclusion: (
        f"User: {prompt}\n\nAssistant: "
        + "\n\n".join(f"[tool bash: {step}] -> {step[::-1]}" for step in steps)
        + f"\n\n{conclusion}"
    ),
    st.text(alphabet=st.sampled_from('ab cd."é😀\\'), min_size=1, max_size=300),
    st.lists(st.text(alphabet=st.sampled_from("ab cd.é"), min_size=1, max_size=500), max_size=12),
    st.text(alphabet=st.sampled_from('ab cd\n."é'), min_size=1, max_size=800),
)
QUERY = st.text(alphabet=st.sampled_from("ab cdé😀?"), min_size=1, max_size=80).filter(str.strip)


@given(
    query=QUERY,
    texts=st.lists(st.one_of(MEMORY_TEXT, EXCHANGE).filter(str.strip), min_size=1, max_size=8),
    budget=st.none() | st.integers(min_value=MIN_MAX_CHARS, max_value=30_000),
)
@hypothesis_settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_it_holds_the_budget_for_any_query_on_any_palace(
    palace: Palace, query: str, texts: list[str], budget: int | None
) -> None:
    room = f"budget-{uuid.uuid4().hex[:12]}"
    services.store_batch(items=[memory(text, room=room) for text in texts])
    answer = selectors.find(query=query, room=room, max_chars=budget)
    applied, _, page = selectors.find_page(query=query, room=room, max_chars=budget)
    if budget is None:
        assert passages.MIN_DEFAULT_CHARS <= applied <= passages.MAX_DEFAULT_CHARS
    # What an MCP client reads: the tool's structured content as compact JSON text.
    shown = FindResult.model_validate(answer).model_dump(mode="json")
    assert len(json.dumps(shown, ensure_ascii=False, separators=(",", ":"))) <= (budget or applied)
    for result in answer["results"]:
        if "passages" in result:
            assert result["text"].split(ELISION)[0], "a passage is never empty"
    if answer["count"] < len(page) or any("passages" in result for result in answer["results"]):
        assert answer["cut"].startswith(f"max_chars {budget or applied}:")


def test_it_lets_the_budget_follow_the_page_between_its_bounds() -> None:
    assert passages.default_budget(["x" * 100] * 5) == passages.MIN_DEFAULT_CHARS
    assert passages.default_budget(["x" * 4000] * 5) == round(passages.BUDGET_SHARE * 5 * 4002)
    assert passages.default_budget(["x" * 30000] * 10) == passages.MAX_DEFAULT_CHARS
    assert passages.default_budget(["x" * 4000] * 10) == passages.default_budget(["x" * 4000] * 5), "the first five"


def test_it_prefers_an_exchange_s_conclusion_to_the_steps_that_led_there() -> None:
    steps = "\n\n".join(f"[tool bash: grep port config/{k}.yml] -> port settings unchanged" for k in range(40))
    opening = "User: which port does the dev server use?\n\nAssistant: Let me look."
    text = f"{opening}\n\n{steps}\n\nThe dev server port is 3001."
    assert passages.conclusion_start(text) == text.index("The dev server port")
    hit = Hit(rank=0, memory={"id": 1, "text": text})
    answer = fit(query="dev server port", hits=[hit], envelope={"count": 1}, max_chars=MIN_MAX_CHARS)
    shown = answer["results"][0]["text"]
    assert shown.startswith("User: which port") and shown.endswith("The dev server port is 3001.")
    assert passages.conclusion_start("Caroline said hi.\nMelanie said hello.") is None, "not an exchange"
    assert passages.conclusion_start("User: q\n\nAssistant: [tool read: a] -> b") is None, "it ends with a step"


def test_it_names_the_memories_it_left_out_and_how_to_read_them() -> None:
    hits = [Hit(rank=rank, memory={"id": 100 + rank, "text": f"note {rank} " + "word " * 300}) for rank in range(6)]
    answer = fit(query="note", hits=hits, envelope={"count": 6}, max_chars=MIN_MAX_CHARS)
    left_out = [hit.memory["id"] for hit in hits if hit.memory["id"] not in {r["id"] for r in answer["results"]}]
    assert left_out and f"left out: ids [{','.join(map(str, left_out))}]" in answer["cut"]
    assert answer["cut"].startswith(f"max_chars {MIN_MAX_CHARS}:") and "palace_recall" in answer["cut"]


def test_it_fills_the_budget_it_has_instead_of_leaving_a_short_memory_out() -> None:
    # Many adjacent lines of one memory merge into one passage: they cost their text, not an elision and
    # an offset each, so the page's short memory still fits (it was left out with 2,000 characters unused).
    long = "\n".join(f"line {k} about the refactor" for k in range(400))
    hits = [
        Hit(rank=0, memory={"id": 1, "text": long}),
        Hit(rank=1, memory={"id": 2, "text": "The refactoring plan is in docs/refactor.md " + "x" * 300}),
    ]
    answer = fit(query="refactor plan", hits=hits, envelope={"count": 2}, max_chars=6000)
    assert [result["id"] for result in answer["results"]] == [1, 2]
    assert passages.answer_chars(answer) > 6000 - 200, "the budget is used, not overestimated"
