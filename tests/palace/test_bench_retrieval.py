"""The bench_retrieval command on a tiny LoCoMo-format fixture with known answers, run as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

CORPUS = [
    ("c1:D1:1", "c1", 'Mia said, "My sister Ines just adopted a greyhound called Pistachio."'),
    ("c1:D1:2", "c1", 'Leo said, "I finished the Zugspitze climb on Saturday."'),
    ("c1:D1:3", "c1", 'Mia said, "Thanks!"'),
    ("c1:D1:4", "c1", 'Leo said, "My cello lesson moved to Thursdays."'),
    ("c2:D1:1", "c2", 'Ana said, "We planted quinces behind the barn."'),
    ("c2:D1:2", "c2", 'Ben said, "The greyhound rescue asked for volunteers."'),
    ("c2:D1:3", "c2", 'Mia said, "Thanks!"'),  # same text as c1:D1:3: the store merges them
]
QUERIES: list[dict[str, Any]] = [
    {"qid": "c1:q0", "query": "What is the name of Ines's greyhound?", "conversation": "c1", "gold_ids": ["c1:D1:1"]},
    {"qid": "c1:q1", "query": "Which mountain did Leo climb?", "conversation": "c1", "gold_ids": ["c1:D1:2"]},
    {"qid": "c1:q2", "query": "When is Leo's cello lesson?", "conversation": "c1", "gold_ids": ["c1:D1:4"]},
    {"qid": "c2:q0", "query": "What did they plant behind the barn?", "conversation": "c2", "gold_ids": ["c2:D1:1"]},
    {"qid": "c2:q1", "query": "Who asked for volunteers?", "conversation": "c2", "gold_ids": ["c2:D1:2", "c2:D1:1"]},
    {"qid": "c2:q2", "query": "An unanswerable question", "conversation": "c2", "gold_ids": []},
]


def write_fixture(directory: Path) -> None:
    """corpus_turn.jsonl and queries_turn.jsonl in the format of the LoCoMo split."""
    with (directory / "corpus_turn.jsonl").open("w") as handle:
        for i, (record_id, conversation, text) in enumerate(CORPUS):
            record = {"id": record_id, "text": text, "conversation": conversation}
            record |= {"session": f"{conversation}:session_1", "timestamp": f"2023-05-0{i + 1}T10:00:00"}
            handle.write(json.dumps(record) + "\n")
    with (directory / "queries_turn.jsonl").open("w") as handle:
        for query in QUERIES:
            handle.write(json.dumps(query | {"category": 4, "category_name": "single-hop"}) + "\n")


def run_bench(tmp_path: Path, *extra: str, granularity: str = "turn") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PALAZZO_DATA_DIR": str(tmp_path / "configured"), "PALAZZO_LOG_LEVEL": "warning"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run(
        [sys.executable, "manage.py", "bench_retrieval", "--data", str(tmp_path), "--granularity", granularity, *extra],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def row(output: str, group: str) -> list[str]:
    return next(line.split() for line in output.splitlines() if line.startswith(group))


def test_it_scores_a_tiny_fixture_with_known_answers(tmp_path: Path) -> None:
    write_fixture(tmp_path)
    done = run_bench(tmp_path, "--k", "1", "3", "--out", str(tmp_path / "run.jsonl"))
    assert done.returncode == 0, done.stderr
    header = row(done.stdout, "group")
    assert header == ["group", "n", "R@1", "R@3", "Hit@1", "Hit@3", "MRR"]
    everything = dict(zip(header[1:], row(done.stdout, "all")[1:]))
    assert everything["n"] == "5"  # the query without gold is skipped
    # Four single-gold queries are found first; the two-gold one has its named turn in the top 3.
    assert float(everything["Hit@1"]) >= 0.8 and float(everything["Hit@3"]) == 1.0
    assert float(everything["MRR"]) >= 0.8
    assert "1 without gold skipped" in done.stdout
    assert "1 corpus records have the text of an earlier record" in done.stdout
    assert "chance (all)" in done.stdout and "4 single-hop" in done.stdout
    lines = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    assert [line["qid"] for line in lines] == ["c1:q0", "c1:q1", "c1:q2", "c2:q0", "c2:q1"]
    assert lines[0]["ranked_ids"][0] == "c1:D1:1"
    # Restricted to its conversation: no c2 id ever ranks for a c1 query.
    assert all(rid.startswith("c1:") for line in lines[:3] for rid in line["ranked_ids"])
    # The configured palace stays untouched: nothing was stored outside the throwaway one.
    assert not (tmp_path / "configured" / "shards").exists()


def test_it_refuses_a_directory_without_the_files(tmp_path: Path) -> None:
    done = run_bench(tmp_path)
    assert done.returncode != 0
    assert "corpus_turn.jsonl does not exist" in done.stderr


@pytest.mark.parametrize("k", ["0", "21"])
def test_it_refuses_a_cut_off_find_cannot_serve(tmp_path: Path, k: str) -> None:
    write_fixture(tmp_path)
    done = run_bench(tmp_path, "--k", k)
    assert done.returncode != 0 and "--k values must be between 1 and 20" in done.stderr


def write_sessions(directory: Path) -> dict[str, str]:
    """Three long sessions of one conversation (one turn per line) and a question about a buried turn of each."""
    buried = {
        "c1:D1:17": 'Mia said, "My sister Ines just adopted a greyhound called Pistachio."',
        "c1:D2:33": 'Leo said, "I finished the Zugspitze climb on Saturday."',
        "c1:D3:48": 'Mia said, "My cello lesson moved to Thursdays."',
    }
    turns: list[dict[str, Any]] = []
    for session in (1, 2, 3):
        for k in range(1, 61):
            turn_id = f"c1:D{session}:{k}"
            filler = f'{"Mia" if k % 2 else "Leo"} said, "Session {session} note {k}: the market was busy and mild."'
            turns.append({"id": turn_id, "text": buried.get(turn_id, filler), "session": f"c1:session_{session}"})
    with (directory / "corpus_turn.jsonl").open("w") as handle:
        for turn in turns:
            handle.write(json.dumps(turn | {"conversation": "c1", "timestamp": "2023-05-01T10:00:00"}) + "\n")
    with (directory / "corpus_session.jsonl").open("w") as handle:
        for session in (1, 2, 3):
            text = "\n".join(turn["text"] for turn in turns if turn["session"] == f"c1:session_{session}")
            record = {"id": f"c1:session_{session}", "text": text, "conversation": "c1"}
            handle.write(
                json.dumps(record | {"session": record["id"], "timestamp": f"2023-05-0{session}T10:00:00"}) + "\n"
            )
    questions = ["What is the name of Ines's greyhound?", "Which mountain did Leo climb?", "When is the cello lesson?"]
    for granularity in ("turn", "session"):
        with (directory / f"queries_{granularity}.jsonl").open("w") as handle:
            for n, (turn_id, question) in enumerate(zip(buried, questions)):
                gold = turn_id if granularity == "turn" else f"c1:session_{turn_id[4]}"
                record = {"qid": f"c1:q{n}", "query": question, "conversation": "c1", "gold_ids": [gold]}
                handle.write(json.dumps(record | {"category": 4, "category_name": "single-hop"}) + "\n")
    return buried


def test_it_measures_the_evidence_in_answers_and_what_bounds_it(tmp_path: Path) -> None:
    write_sessions(tmp_path)
    done = run_bench(tmp_path, "--answer", "--ceiling", "--budgets", "2000", granularity="session")
    assert done.returncode == 0, done.stderr
    header = row(done.stdout, "group")
    assert header == ["group", "turns", "whole@5", "default", "2000", "ch", "oracle@10", "oracle@20", "lines@10"]
    shares = dict(
        zip(["whole@5", "default", "2000 ch", "oracle@10", "oracle@20", "lines@10"], row(done.stdout, "all")[2:])
    )
    # Whole sessions hold every buried turn; so does a page refitted by the oracle, within the default budget.
    assert shares["whole@5"] == shares["oracle@10"] == shares["oracle@20"] == "1.000"
    sizes = dict(zip(["whole@5", "default", "2000 ch", "oracle@10"], row(done.stdout, "mean chars")[2:]))
    assert float(sizes["whole@5"]) > 6000 >= float(sizes["oracle@10"])
    assert float(sizes["2000 ch"]) <= 2000
    assert "ceiling: embedding" in done.stderr


def test_it_refuses_the_ceiling_without_answers(tmp_path: Path) -> None:
    write_sessions(tmp_path)
    done = run_bench(tmp_path, "--ceiling", granularity="session")
    assert done.returncode != 0 and "--ceiling and --budgets measure answers: add --answer" in done.stderr
    done = run_bench(tmp_path, "--answer", "--budgets", "1000", granularity="session")
    assert done.returncode != 0 and "--budgets values must be between 2000 and 100000" in done.stderr
