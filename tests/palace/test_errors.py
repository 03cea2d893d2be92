"""What an agent reads when a palace call fails: the machine code, the problem, what to do."""

from __future__ import annotations

import pytest

from palace.errors import InvalidInput, ModelMismatch, PalaceError, StoreLocked, StoreUnavailable


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            InvalidInput.single("wing", "'x' is not allowed"),
            "[invalid_input] wing: 'x' is not allowed (nothing was changed; correct the named fields and call again)",
        ),
        (
            ModelMismatch("built with A; set PALAZZO_EMBED_MODEL back, or move it with `python manage.py rebuild`"),
            "[model_mismatch] built with A; set PALAZZO_EMBED_MODEL back, or move it with the operator's rebuild "
            "command (retrying will not help; tell the operator)",
        ),
        (
            StoreLocked("held by pid 7: stop it, send work to it (e.g. `python manage.py ingest --url`), or ..."),
            "[store_locked] held by pid 7: stop it, send work to it (e.g. the operator's ingest command), or ... "
            "(retrying will not help; tell the operator)",
        ),
        (StoreUnavailable("Qdrant at x did not answer"), "[store_unavailable] Qdrant at x did not answer (nothing was"),
        (PalaceError("plain"), "[palace_error] plain"),
    ],
)
def test_it_tells_an_agent_the_code_the_problem_and_what_to_do(error: PalaceError, expected: str) -> None:
    message = error.for_agent()
    assert message.startswith(expected), message
    assert "manage.py" not in message
