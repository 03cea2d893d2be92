"""Real Claude Code transcript files for the feeding and hook tests (the line shapes of CLI 2.1.x)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

SAMPLES = Path(__file__).resolve().parents[2].parent / "shared" / "transcripts"
INLINE_SUBAGENTS = (
    SAMPLES / "claude-code/d-kimuson-claude-code-viewer/sample-project/fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"
)
START = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def _stamp(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def claude_session(
    session: str,
    cwd: str,
    turns: Sequence[tuple[str, str | None]],
    *,
    start: datetime = START,
    tool_output: str | None = None,
) -> list[dict[str, Any]]:
    """Lines of a session: per turn a user prompt and (unless None: still being written) the assistant's text.

    With tool_output, each answered turn first runs a Bash tool call whose result is that text.
    """
    lines: list[dict[str, Any]] = []
    parent = None
    envelope = {"sessionId": session, "cwd": cwd, "version": "2.1.197", "isSidechain": False, "userType": "external"}
    for index, (prompt, reply) in enumerate(turns):
        moment = start + timedelta(minutes=index)
        user = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{session}/{index}/user"))
        lines.append(
            envelope
            | {"type": "user", "uuid": user, "parentUuid": parent, "timestamp": _stamp(moment)}
            | {"message": {"role": "user", "content": prompt}}
        )
        parent = user
        if reply is not None and tool_output is not None:
            call, result = (
                str(uuid.uuid5(uuid.NAMESPACE_URL, f"{session}/{index}/{part}")) for part in ("call", "result")
            )
            tool_id = f"toolu_{index:04d}"
            use = {"type": "tool_use", "id": tool_id, "name": "Bash", "input": {"command": f"cat build-{index}.log"}}
            lines.append(
                envelope
                | {"type": "assistant", "uuid": call, "parentUuid": parent, "timestamp": _stamp(moment)}
                | {"message": {"id": f"msg_{session[:8]}_{index}_tool", "role": "assistant", "content": [use]}}
            )
            output = {"type": "tool_result", "tool_use_id": tool_id, "content": tool_output}
            lines.append(
                envelope
                | {"type": "user", "uuid": result, "parentUuid": call, "timestamp": _stamp(moment)}
                | {"message": {"role": "user", "content": [output]}}
            )
            parent = result
        if reply is not None:
            answer = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{session}/{index}/assistant"))
            message = {"id": f"msg_{session[:8]}_{index}", "role": "assistant", "type": "message"}
            lines.append(
                envelope
                | {"type": "assistant", "uuid": answer, "parentUuid": parent}
                | {"timestamp": _stamp(moment + timedelta(seconds=5))}
                | {"message": message | {"content": [{"type": "text", "text": reply}]}}
            )
            parent = answer
    return lines


def write_session(path: Path, lines: Sequence[dict[str, Any]]) -> Path:
    """Write transcript lines as JSONL (replacing the file, as the harness appends to it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    return path
