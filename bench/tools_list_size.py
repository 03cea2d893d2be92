"""Prints the size of palazzo's tools/list, per tool and in total, as a real `runmcp` server answers it.

Per tool: characters of the description, the input schema and the output schema (compact JSON, as
a client receives them), and tokens estimated as characters / 4 (the estimate@v1 rule). The total is
the whole tools/list result. Figures only; nothing is asserted.
Then the rubric check: per tool, which of the four things an agent needs to choose and call it well its
description covers (what it does to the palace, when to use it, the alternative tool, its limits), by the
phrases that carry them, and which of its parameters have no description.
Usage: python bench/tools_list_size.py [--read-only]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _compact(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False))


def fetch_tools_list(*, read_only: bool) -> dict[str, Any]:
    """Spawn `manage.py runmcp` on an empty data dir and return its tools/list result (raw JSON-RPC)."""
    data_dir = tempfile.mkdtemp(prefix="palazzo-tools-list-")
    env = dict(os.environ, PALAZZO_DATA_DIR=data_dir, PALAZZO_LOG_LEVEL="warning")
    if read_only:
        env["PALAZZO_READ_ONLY"] = "1"
    requests = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "tools-list-size", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    with subprocess.Popen(
        [sys.executable, "manage.py", "runmcp"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as process:
        assert process.stdin is not None and process.stdout is not None
        for request in requests:
            process.stdin.write(json.dumps(request) + "\n")
            process.stdin.flush()
        try:
            for line in process.stdout:
                message = json.loads(line)
                if message.get("id") == 2:
                    result: dict[str, Any] = message["result"]
                    return result
        finally:
            process.stdin.close()
            process.terminate()
            process.wait(timeout=30)
    raise SystemExit("runmcp closed stdout before answering tools/list")


# Phrases that carry each part of the rubric in palazzo's descriptions (checked against the text, case-blind).
COVERAGE = {
    "effect": r"writes nothing|nothing (?:is )?written|no undo|permanently|replaced by|hidden|redact|kept for history"
    r"|read-only|telemetry|counts",
    "when": r"before|at session start|use |call |first |only with|when ",
    "alternative": r"palace_\w+",
    "limits": r"\d|at most|max|limit",
}


def coverage(tool: dict[str, Any]) -> dict[str, bool]:
    """Which parts of the rubric a tool's description covers, and whether every parameter is described."""
    description = (tool.get("description") or "").lower()
    own_name = tool["name"]
    found = {part: bool(re.search(pattern, description.replace(own_name, ""))) for part, pattern in COVERAGE.items()}
    properties = (tool.get("inputSchema") or {}).get("properties", {})
    found["params"] = all(schema.get("description") for schema in properties.values())
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--read-only", action="store_true", help="measure a PALAZZO_READ_ONLY=1 server")
    args = parser.parse_args()
    result = fetch_tools_list(read_only=args.read_only)
    rows = []
    for tool in result["tools"]:
        description = len(tool.get("description") or "")
        input_schema = _compact(tool.get("inputSchema") or {})
        output_schema = _compact(tool.get("outputSchema") or {})
        rows.append((tool["name"], description, input_schema, output_schema, _compact(tool)))
    header = f"{'tool':<26}{'description':>12}{'input':>8}{'output':>8}{'whole':>8}{'tokens':>8}"
    print("characters (compact JSON); tokens = characters / 4")
    print(header)
    for name, description, input_schema, output_schema, whole in rows:
        print(f"{name:<26}{description:>12}{input_schema:>8}{output_schema:>8}{whole:>8}{whole // 4:>8}")
    total = _compact(result)
    sums = [sum(row[i] for row in rows) for i in (1, 2, 3)]
    print(f"{'sum':<26}{sums[0]:>12}{sums[1]:>8}{sums[2]:>8}{sum(r[4] for r in rows):>8}")
    print(f"tools/list total: {len(rows)} tools, {total} characters, {total // 4} tokens")
    print()
    print(f"{'rubric coverage':<26}" + "".join(f"{part:>12}" for part in (*COVERAGE, "params")))
    for tool in result["tools"]:
        covered = coverage(tool)
        print(f"{tool['name']:<26}" + "".join(f"{'yes' if ok else 'MISSING':>12}" for ok in covered.values()))


if __name__ == "__main__":
    main()
