"""A scripted model on loopback for real agent CLIs: the Anthropic Messages API, streamed, answered from a script.

A stand-in for the model provider (no model runs offline here), never for palazzo. Each request is
answered by the script's function from what the conversation holds so far (a tool result in the last
message moves it on), so the side requests a CLI makes (titles, quota checks) get a plain text answer
and never consume a step. Every request body is recorded, so a test can show what the model was sent.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

MODEL = "scripted-model"


@dataclass(frozen=True)
class Reply:
    """What the model answers: text, or a tool call (then the CLI runs the tool and asks again)."""

    text: str = ""
    tool: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)


Script = Callable[[dict[str, Any]], Reply]


def last_tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool_result blocks of the request's last (user) message."""
    messages = body.get("messages") or []
    if not messages or not isinstance(messages[-1].get("content"), list):
        return []
    return [
        block for block in messages[-1]["content"] if isinstance(block, dict) and block.get("type") == "tool_result"
    ]


def tool_names(body: dict[str, Any]) -> list[str]:
    """The tools the request offers the model."""
    return [tool.get("name", "") for tool in body.get("tools") or [] if isinstance(tool, dict)]


def all_text(body: dict[str, Any]) -> str:
    """Every text the request carries (system prompt and messages), joined: where injected context shows."""
    parts: list[str] = []
    system = body.get("system")
    if isinstance(system, str):
        parts.append(system)
    elif isinstance(system, list):
        parts += [block.get("text", "") for block in system if isinstance(block, dict)]
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            for block in content:
                if isinstance(block, dict):
                    parts.append(str(block.get("text") or ""))
                    if block.get("type") == "tool_result":
                        inner = block.get("content")
                        parts.append(inner if isinstance(inner, str) else json.dumps(inner))
    return "\n".join(parts)


def _events(reply: Reply, number: int) -> list[tuple[str, dict[str, Any]]]:
    message = {
        "id": f"msg_scripted_{number}",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": message})]
    if reply.tool is None:
        block = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": reply.text or "ok"}
        stop = "end_turn"
    else:
        block = {"type": "tool_use", "id": f"toolu_scripted_{number}", "name": reply.tool, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(reply.arguments)}
        stop = "tool_use"
    events += [
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 5},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return events


def _whole(reply: Reply, number: int) -> dict[str, Any]:
    if reply.tool is None:
        content: list[dict[str, Any]] = [{"type": "text", "text": reply.text or "ok"}]
    else:
        content = [{"type": "tool_use", "id": f"toolu_scripted_{number}", "name": reply.tool, "input": reply.arguments}]
    return {
        "id": f"msg_scripted_{number}",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": content,
        "stop_reason": "end_turn" if reply.tool is None else "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def scripted(
    *steps: Callable[[dict[str, Any]], Reply],
    offered: Callable[[dict[str, Any]], list[str]] | None = None,
    side_text: str = "a title",
) -> Script:
    """A script of agent steps: the n-th request that offers palazzo's tools gets steps[n] (side requests: text).

    offered reads the tool names a request offers in its API's dialect (default: the Messages API's).
    """
    seen: list[int] = []
    names = offered or tool_names

    def answer(body: dict[str, Any]) -> Reply:
        if not any(name.endswith("palace_find") for name in names(body)):
            return Reply(text=side_text)
        seen.append(1)
        return steps[min(len(seen), len(steps)) - 1](body)

    return answer


def tool_result_text(body: dict[str, Any]) -> tuple[str, bool]:
    """The text of the one tool result the request carries back, and whether it is an error."""
    [result] = last_tool_results(body)
    content = result.get("content")
    text = content if isinstance(content, str) else "".join(block.get("text", "") for block in content or [])
    return text, bool(result.get("is_error"))


class ScriptedHandler(BaseHTTPRequestHandler):
    """What every scripted model's request handler shares: no access log, JSON answers."""

    # Answers that must end their connection (a client that reuses one would wait on it) set this.
    close_after_json = False

    def log_message(self, *args: Any) -> None:
        pass

    def _json(self, status: int, data: Any) -> None:
        raw = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        if self.close_after_json:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(raw)
        if self.close_after_json:
            self.close_connection = True


class LoopbackServer:
    """A scripted model's HTTP server on 127.0.0.1, served from a thread while its `with` block runs."""

    def _listen(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        """The loopback port it listens on."""
        return int(self._server.server_address[1])

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


class ModelServer(LoopbackServer):
    """Serves POST /v1/messages on 127.0.0.1 from a script; `requests` holds every body received."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(ScriptedHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    body = {}
                if not self.path.split("?")[0].endswith("/messages"):
                    self._json(200, {"input_tokens": 10} if "count_tokens" in self.path else {})
                    return
                with server._lock:
                    server.requests.append(body)
                    number = len(server.requests)
                reply = server.script(body)
                if body.get("stream"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Cache-Control", "no-cache")
                    self.end_headers()
                    for name, data in _events(reply, number):
                        self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                    self.wfile.flush()
                    self.close_connection = True
                else:
                    self._json(200, _whole(reply, number))

            def do_GET(self) -> None:
                self._json(200, {"data": [{"id": MODEL, "type": "model", "display_name": MODEL}], "has_more": False})

            def do_HEAD(self) -> None:
                self.send_response(200)
                self.end_headers()

        self._listen(Handler)

    @property
    def url(self) -> str:
        """The base URL a CLI is pointed at."""
        return f"http://127.0.0.1:{self.port}"

    def agent_requests(self, tool: str) -> list[dict[str, Any]]:
        """The requests of the agent loop itself: those that offer the given tool."""
        return [body for body in self.requests if tool in tool_names(body)]
