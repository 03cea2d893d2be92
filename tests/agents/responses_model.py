"""A scripted model on loopback for Codex CLI: the OpenAI Responses API (`POST /v1/responses`), streamed.

A stand-in for the model provider (no model runs offline here), never for palazzo: the CLI, its MCP
server and its hooks are real. Each request is answered by a script (tests/agents/model_server.py's Reply
and Script) from what the conversation holds so far; every request body is recorded, so a test can show
what the model was sent. Codex hands an MCP server's tools over as a `namespace` (`mcp__palazzo`) whose
functions the model calls by name plus namespace; here they read as `mcp__palazzo__palace_find`, the
name Claude Code gives them, and a Reply naming a tool that way is sent back as such a call.
"""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Callable
from typing import Any

from tests.agents import model_server
from tests.agents.model_server import MODEL, LoopbackServer, Reply, Script, ScriptedHandler

__all__ = ["MODEL", "Reply", "ResponsesServer", "Script", "all_text", "scripted", "tool_names", "tool_output"]


def _flattened(tools: Any) -> list[tuple[str | None, dict[str, Any]]]:
    """(namespace, function) for every function a request offers, namespaces opened up."""
    found: list[tuple[str | None, dict[str, Any]]] = []
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "namespace":
            found += [(str(tool.get("name")), inner) for inner in tool.get("tools") or [] if isinstance(inner, dict)]
        else:
            found.append((None, tool))
    return found


def tool_names(body: dict[str, Any]) -> list[str]:
    """The tools the request offers, a namespace's as `<namespace>__<name>` (mcp__palazzo__palace_find)."""
    return [
        f"{space}__{tool.get('name')}" if space else str(tool.get("name"))
        for space, tool in _flattened(body.get("tools"))
    ]


def namespace_tools(body: dict[str, Any], namespace: str) -> list[dict[str, Any]]:
    """The function definitions of one namespace, as the model received them."""
    return [tool for space, tool in _flattened(body.get("tools")) if space == namespace]


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(block.get("text") or "") for block in content if isinstance(block, dict))
    return ""


def all_text(body: dict[str, Any]) -> str:
    """Every text the request carries (instructions, messages, tool outputs), joined: where injected context shows."""
    parts = [body["instructions"]] if isinstance(body.get("instructions"), str) else []
    for item in body.get("input") or []:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            parts.append(_content_text(item.get("content")))
        elif item.get("type") == "function_call_output":
            parts.append(_content_text(item.get("output")))
    return "\n".join(parts)


def tool_output(body: dict[str, Any]) -> str:
    """The output of the last tool call the request carries back (Codex prefixes it with "Wall time: ...")."""
    outputs = [
        item
        for item in body.get("input") or []
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]
    assert outputs, "the request carries no tool output"
    return _content_text(outputs[-1].get("output"))


def scripted(*steps: Callable[[dict[str, Any]], Reply]) -> Script:
    """A script of agent steps: the n-th request that offers palazzo's tools gets steps[n] (any other: text)."""
    return model_server.scripted(*steps, offered=tool_names)


def _output_item(reply: Reply, body: dict[str, Any], number: int) -> dict[str, Any]:
    if reply.tool is None:
        text = reply.text or "ok"
        return {
            "type": "message",
            "id": f"msg_scripted_{number}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
    call: dict[str, Any] = {
        "type": "function_call",
        "id": f"fc_scripted_{number}",
        "call_id": f"call_scripted_{number}",
        "name": reply.tool,
        "arguments": json.dumps(reply.arguments),
        "status": "completed",
    }
    # A namespaced tool is called by its own name plus the namespace, never by the joined name.
    for space in {space for space, _tool in _flattened(body.get("tools")) if space}:
        if reply.tool.startswith(f"{space}__"):
            call |= {"name": reply.tool.removeprefix(f"{space}__"), "namespace": space}
    return call


def _events(reply: Reply, body: dict[str, Any], number: int) -> list[dict[str, Any]]:
    item = _output_item(reply, body, number)
    response: dict[str, Any] = {
        "id": f"resp_scripted_{number}",
        "object": "response",
        "model": MODEL,
        "status": "in_progress",
    }
    usage: dict[str, Any] = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 15,
    }
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": response},
        {"type": "response.output_item.added", "output_index": 0, "item": item | {"status": "in_progress"}},
    ]
    if item["type"] == "message":
        text = item["content"][0]["text"]
        events.append({"type": "response.output_text.delta", "item_id": item["id"], "output_index": 0, "delta": text})
    return [
        *events,
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {
            "type": "response.completed",
            "response": response | {"status": "completed", "output": [item], "usage": usage},
        },
    ]


class ResponsesServer(LoopbackServer):
    """Serves POST /v1/responses on 127.0.0.1 from a script; `requests` holds every body received."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(ScriptedHandler):
            protocol_version = "HTTP/1.1"
            close_after_json = True

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    raw = gzip.decompress(raw)
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                if not self.path.split("?")[0].endswith("/responses") or not isinstance(body, dict):
                    self._json(404, {"error": {"message": f"the scripted model serves /v1/responses, not {self.path}"}})
                    return
                with server._lock:
                    server.requests.append(body)
                    number = len(server.requests)
                events = _events(server.script(body), body, number)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                for sequence, event in enumerate(events):
                    data = json.dumps(event | {"sequence_number": sequence})
                    self.wfile.write(f"event: {event['type']}\ndata: {data}\n\n".encode())
                self.wfile.flush()
                self.close_connection = True

            def do_GET(self) -> None:
                self._json(200, {"object": "list", "data": [], "models": []})

        self._listen(Handler)

    @property
    def url(self) -> str:
        """The base URL a provider's base_url is set to (…/v1)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def agent_requests(self, tool: str) -> list[dict[str, Any]]:
        """The requests of the agent loop itself: those that offer the given tool."""
        return [body for body in self.requests if tool in tool_names(body)]
