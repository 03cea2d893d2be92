"""A scripted model on loopback for the real Gemini CLI: the Gemini API (generateContent, streamed or not).

A stand-in for the model provider (no model runs offline here), never for palazzo. The CLI's side
requests, which ask for JSON (the model router's classification, the next-speaker check), get a JSON text
that satisfies each of them and never reach the script; every other request is answered by the script,
a function of the request body returning a `Reply` (model_server.py). Every request body is recorded.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

from tests.agents import model_server
from tests.agents.model_server import LoopbackServer, Reply, Script, ScriptedHandler

MODEL = "gemini-2.5-flash"
# One answer fits every JSON side request 0.61 makes (each schema ignores the others' keys): the numerical
# router's {complexity_reasoning, complexity_score}, the classifier router's {reasoning, model_choice} and
# the next-speaker check's {reasoning, next_speaker}.
SIDE_ANSWER = json.dumps(
    {
        "complexity_reasoning": "scripted",
        "complexity_score": 10,
        "reasoning": "scripted",
        "model_choice": "flash",
        "next_speaker": "user",
    }
)


def tool_names(body: dict[str, Any]) -> list[str]:
    """The function names the request offers the model (every tools[].functionDeclarations[])."""
    names: list[str] = []
    for tool in body.get("tools") or []:
        if isinstance(tool, dict):
            names += [item.get("name", "") for item in tool.get("functionDeclarations") or [] if isinstance(item, dict)]
    return names


def declarations(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The function declarations the request offers, by name."""
    return {
        item["name"]: item
        for tool in body.get("tools") or []
        if isinstance(tool, dict)
        for item in tool.get("functionDeclarations") or []
        if isinstance(item, dict) and isinstance(item.get("name"), str)
    }


def _parts(body: dict[str, Any]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    system = body.get("systemInstruction")
    if isinstance(system, dict):
        parts += [part for part in system.get("parts") or [] if isinstance(part, dict)]
    for content in body.get("contents") or []:
        if isinstance(content, dict):
            parts += [part for part in content.get("parts") or [] if isinstance(part, dict)]
    return parts


def all_text(body: dict[str, Any]) -> str:
    """Every text the request carries (system instruction and contents, function responses as JSON), joined."""
    texts: list[str] = []
    for part in _parts(body):
        if isinstance(part.get("text"), str):
            texts.append(part["text"])
        if isinstance(part.get("functionResponse"), dict):
            texts.append(json.dumps(part["functionResponse"].get("response"), ensure_ascii=False))
    return "\n".join(texts)


def last_function_response(body: dict[str, Any]) -> dict[str, Any]:
    """The one functionResponse of the request's last content: {"name", "response", ...}."""
    contents = body.get("contents") or []
    parts = contents[-1].get("parts") or [] if contents and isinstance(contents[-1], dict) else []
    [response] = [part["functionResponse"] for part in parts if isinstance(part, dict) and "functionResponse" in part]
    return dict(response)


def function_response_text(body: dict[str, Any]) -> tuple[str, bool]:
    """The text the last tool call brought back to the model (MCP output unwrapped), and whether it is an error."""
    response = last_function_response(body).get("response") or {}
    failed = "error" in response
    value = response["error"] if failed else response.get("output", response)
    text = value if isinstance(value, str) else json.dumps(value)
    # Gemini CLI wraps an MCP server's output for the model as data, not instructions.
    unwrapped = re.fullmatch(r"\s*<untrusted_context>\n?(.*?)\n?</untrusted_context>\s*", text, re.DOTALL)
    return (unwrapped.group(1) if unwrapped else text), failed


def _response(reply: Reply) -> dict[str, Any]:
    part: dict[str, Any]
    if reply.tool is None:
        part = {"text": reply.text or "ok"}
    else:
        part = {"functionCall": {"name": reply.tool, "args": reply.arguments}}
    return {
        "candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
        "modelVersion": MODEL,
    }


def asks_for_json(body: dict[str, Any]) -> bool:
    """A side request of the CLI: it wants a JSON answer to a schema, not a turn of the conversation."""
    config = body.get("generationConfig")
    return isinstance(config, dict) and config.get("responseMimeType") == "application/json"


def scripted(*steps: Script) -> Script:
    """A script of agent steps: the n-th request offering a `*palace_find` tool gets steps[n] (others: text)."""
    return model_server.scripted(*steps, offered=tool_names, side_text="a reply without palazzo")


class GeminiModelServer(LoopbackServer):
    """Serves POST /v1beta/models/<model>:<method> on 127.0.0.1 from a script; `requests` holds every body."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self.methods: list[str] = []
        self._lock = threading.Lock()
        server = self

        class Handler(ScriptedHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    body = {}
                method = self.path.split("?")[0].rpartition(":")[2]
                if method == "countTokens":
                    self._json(200, {"totalTokens": 10})
                    return
                if method not in ("generateContent", "streamGenerateContent"):
                    self._json(404, {"error": {"code": 404, "message": f"not scripted: {self.path}"}})
                    return
                with server._lock:
                    server.requests.append(body)
                    server.methods.append(method)
                reply = Reply(text=SIDE_ANSWER) if asks_for_json(body) else server.script(body)
                if method == "generateContent":
                    self._json(200, _response(reply))
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                self.wfile.write(f"data: {json.dumps(_response(reply))}\r\n\r\n".encode())
                self.wfile.flush()
                self.close_connection = True

            def do_GET(self) -> None:
                self._json(200, {"models": [{"name": f"models/{MODEL}", "displayName": MODEL}]})

        self._listen(Handler)

    @property
    def url(self) -> str:
        """The base URL the CLI is pointed at (GOOGLE_GEMINI_BASE_URL)."""
        return f"http://127.0.0.1:{self.port}"

    def agent_requests(self, tool: str) -> list[dict[str, Any]]:
        """The requests of the agent loop itself: those that offer the given tool."""
        return [body for body in self.requests if tool in tool_names(body)]
