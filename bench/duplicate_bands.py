"""Prints the similarity bands palace_check_duplicate's description quotes, as measured for the configured model.

Three kinds of pairs (a stored memory, then the text an agent is about to store): paraphrases (the same fact
in other words), corrected facts (the same subject, one detail changed: a case for palace_supersede) and
unrelated texts. Each pair's score is what palace_check_duplicate reports as closest.score: the cosine of the
two texts' embeddings (the first chunk of each, as the store compares them). Figures only; nothing asserted.
Usage: python bench/duplicate_bands.py [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "palazzo_site.settings")

PARAPHRASES = (
    ("The staging database runs PostgreSQL 15 on db2.", "db2 hosts the staging database, on PostgreSQL 15."),
    ("Alice prefers tabs over spaces in Go code.", "In Go code, Alice likes tabs rather than spaces."),
    ("Deploys go out every Tuesday at 10:00 UTC.", "Every Tuesday at 10:00 UTC we ship a deploy."),
    ("The CI pipeline caches pip wheels between runs.", "Between runs, CI keeps the pip wheel cache."),
    ("We chose Django Ninja for the HTTP API.", "The HTTP API is built on Django Ninja, by our choice."),
    ("Bob is allergic to peanuts.", "Peanuts give Bob an allergic reaction."),
    ("The backup job writes to the NAS at 02:00.", "At 02:00 the backup job saves to the NAS."),
    ("Our team standup is at 9:30 on weekdays.", "On weekdays the team meets for standup at 9:30."),
    ("The API rate limit is 100 requests per minute.", "Clients may make 100 API requests a minute."),
    ("Carol moved to the Berlin office in March.", "In March, Carol relocated to our Berlin office."),
    ("The search index is rebuilt nightly.", "Every night the search index gets rebuilt."),
    ("Logs are kept for 30 days, then deleted.", "We delete logs after keeping them 30 days."),
)
CORRECTIONS = (
    ("The staging database runs PostgreSQL 15 on db2.", "The staging database runs PostgreSQL 16 on db3."),
    ("Alice prefers tabs over spaces in Go code.", "Alice prefers spaces over tabs in Go code."),
    ("Deploys go out every Tuesday at 10:00 UTC.", "Deploys go out every Thursday at 14:00 UTC."),
    ("The CI pipeline caches pip wheels between runs.", "The CI pipeline no longer caches pip wheels."),
    ("We chose Django Ninja for the HTTP API.", "We chose FastAPI for the HTTP API."),
    ("Bob is allergic to peanuts.", "Bob is allergic to shellfish, not peanuts."),
    ("The backup job writes to the NAS at 02:00.", "The backup job writes to S3 at 04:00."),
    ("Our team standup is at 9:30 on weekdays.", "Our team standup moved to 10:15 on weekdays."),
    ("The API rate limit is 100 requests per minute.", "The API rate limit is 500 requests per minute."),
    ("Carol moved to the Berlin office in March.", "Carol moved to the Lisbon office in May."),
    ("The search index is rebuilt nightly.", "The search index is rebuilt every hour."),
    ("Logs are kept for 30 days, then deleted.", "Logs are kept for 90 days, then archived."),
)
UNRELATED = (
    ("The staging database runs PostgreSQL 15 on db2.", "Alice prefers tabs over spaces in Go code."),
    ("Bob is allergic to peanuts.", "The CI pipeline caches pip wheels between runs."),
    ("Deploys go out every Tuesday at 10:00 UTC.", "Carol moved to the Berlin office in March."),
    ("We chose Django Ninja for the HTTP API.", "Our team standup is at 9:30 on weekdays."),
    ("The backup job writes to the NAS at 02:00.", "The API rate limit is 100 requests per minute."),
    ("The search index is rebuilt nightly.", "Bob is allergic to peanuts."),
    ("Logs are kept for 30 days, then deleted.", "We chose Django Ninja for the HTTP API."),
    ("Carol moved to the Berlin office in March.", "The staging database runs PostgreSQL 15 on db2."),
    ("Our team standup is at 9:30 on weekdays.", "The backup job writes to the NAS at 02:00."),
    ("The API rate limit is 100 requests per minute.", "Alice prefers tabs over spaces in Go code."),
    ("Alice prefers tabs over spaces in Go code.", "The search index is rebuilt nightly."),
    ("The CI pipeline caches pip wheels between runs.", "Logs are kept for 30 days, then deleted."),
)
KINDS = {"paraphrase": PARAPHRASES, "corrected fact": CORRECTIONS, "unrelated": UNRELATED}


def cosine(left: np.ndarray, right: np.ndarray) -> float:
    """The cosine of two vectors."""
    return float(np.dot(left, right) / (np.linalg.norm(left) * np.linalg.norm(right)))


def measure() -> dict[str, dict[str, float | int]]:
    """Per kind of pair: count, min, median and max score under the configured model."""
    import django

    django.setup()
    from django.conf import settings

    from palace.engine.runtime import get_embedder

    embedder = get_embedder()
    bands: dict[str, dict[str, float | int]] = {"model": settings.PALAZZO.embed_model}  # type: ignore[dict-item]
    for kind, pairs in KINDS.items():
        scores = sorted(
            cosine(embedder.documents([stored])[0][0], embedder.documents([candidate])[0][0])
            for stored, candidate in pairs
        )
        bands[kind] = {
            "pairs": len(scores),
            "min": round(scores[0], 3),
            "median": round(float(np.median(scores)), 3),
            "max": round(scores[-1], 3),
        }
    return bands


def main() -> None:
    """Print the bands as a table (or JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    bands = measure()
    if args.json:
        print(json.dumps(bands, indent=2))
        return
    print(f"model: {bands.pop('model')}")
    print(f"{'pair':<16}{'pairs':>6}{'min':>8}{'median':>8}{'max':>8}")
    for kind, figures in bands.items():
        assert isinstance(figures, dict)
        print(f"{kind:<16}{figures['pairs']:>6}{figures['min']:>8}{figures['median']:>8}{figures['max']:>8}")


if __name__ == "__main__":
    main()
