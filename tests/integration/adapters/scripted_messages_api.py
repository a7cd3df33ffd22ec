"""A scripted Anthropic Messages API on loopback, for running the bundled ``claude`` CLI in
tests (``ANTHROPIC_BASE_URL=server.url``). It streams (server-sent events) what a script
decides from each request, and keeps every request body for the test to inspect.

The script of the end-to-end test: the first turn asks for a subagent (the ``Agent`` tool,
whose own model call gets a text answer), then for one ``Read`` tool call; the model call
after the read's result never answers (the agent is killed there); a later prompt naming
``RESUMED_PROMPT`` gets a final text. Side calls (no tools offered: titles, summaries) get a
short text."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOOL_USE_ID = "toolu_e2e_read_1"
SUBAGENT_ID = "toolu_e2e_agent_1"
SUBAGENT_PROMPT = "Look at the directory and report what is there."
SUBAGENT_TEXT = "The subagent looked: one file, notes.txt."
FIRST_PROMPT = "Read the file notes.txt and tell me what it says."
RESUMED_PROMPT = "Are you still there? Summarise what you read."
FINAL_TEXT = "Still here: the file says the journal survived."


def _texts(message: Mapping[str, Any]) -> list[str]:
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    return [str(b.get("text", "")) for b in content or [] if b.get("type") == "text"]


def _tool_results(message: Mapping[str, Any]) -> list[str]:
    content = message.get("content")
    if isinstance(content, str):
        return []
    return [str(b.get("tool_use_id")) for b in content or [] if b.get("type") == "tool_result"]


def _events(message: dict[str, Any], blocks: list[dict[str, Any]], stop: str) -> Iterator[bytes]:
    def event(kind: str, data: dict[str, Any]) -> bytes:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()

    yield event("message_start", {"message": {**message, "content": []}})
    for n, block in enumerate(blocks):
        if block["type"] == "tool_use":
            yield event(
                "content_block_start", {"index": n, "content_block": {**block, "input": {}}}
            )
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        else:
            yield event("content_block_start", {"index": n, "content_block": {**block, "text": ""}})
            delta = {"type": "text_delta", "text": block["text"]}
        yield event("content_block_delta", {"index": n, "delta": delta})
        yield event("content_block_stop", {"index": n})
    usage = {"output_tokens": 12}
    yield event(
        "message_delta", {"delta": {"stop_reason": stop, "stop_sequence": None}, "usage": usage}
    )
    yield event("message_stop", {})


class ScriptedMessagesApi:
    """``with ScriptedMessagesApi(read_path) as api:`` serves on ``api.url`` until closed."""

    def __init__(self, read_path: str) -> None:
        self.read_path = read_path
        self.requests: list[dict[str, Any]] = []
        self.released = threading.Event()
        """Set at close: a model call the script holds open (the killed agent's) ends."""
        self._lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.startswith("/v1/messages") or "count_tokens" in self.path:
                    self._send_json(404, {"type": "error", "error": {"type": "not_found_error"}})
                    return
                with api._lock:
                    api.requests.append(body)
                decided = api.decide(body)
                if decided is None:  # hold the call open: the agent is killed meanwhile
                    api.released.wait(120)
                    self._send_json(529, {"type": "error", "error": {"type": "overloaded_error"}})
                    return
                blocks, stop = decided
                message = {
                    "id": f"msg_{len(api.requests)}",
                    "type": "message",
                    "role": "assistant",
                    "model": body.get("model", "claude-test"),
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 25, "output_tokens": 1},
                }
                if not body.get("stream"):
                    done = {**message, "content": blocks, "stop_reason": stop}
                    self._send_json(200, done)
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.end_headers()
                for chunk in _events(message, blocks, stop):
                    self.wfile.write(chunk)
                self.wfile.flush()

            def _send_json(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def decide(self, body: Mapping[str, Any]) -> tuple[list[dict[str, Any]], str] | None:
        """The reply to one request: blocks and stop reason, or None to hold the call."""
        messages = list(body.get("messages") or [])
        offered = {t.get("name") for t in body.get("tools") or []}
        texts = [t for m in messages if m.get("role") == "user" for t in _texts(m)]
        answered = [r for m in messages if m.get("role") == "user" for r in _tool_results(m)]
        if "Read" not in offered:
            return [{"type": "text", "text": "Session notes"}], "end_turn"
        if any(RESUMED_PROMPT in t for t in texts):
            return [{"type": "text", "text": FINAL_TEXT}], "end_turn"
        if messages and any(SUBAGENT_PROMPT in t for t in _texts(messages[0])):
            return [{"type": "text", "text": SUBAGENT_TEXT}], "end_turn"  # the subagent's call
        if TOOL_USE_ID in answered:
            return None
        if SUBAGENT_ID in answered:
            call = {
                "type": "tool_use",
                "id": TOOL_USE_ID,
                "name": "Read",
                "input": {"file_path": self.read_path},
            }
            return [{"type": "text", "text": "Reading it."}, call], "tool_use"
        if any(FIRST_PROMPT in t for t in texts):
            agent = {
                "type": "tool_use",
                "id": SUBAGENT_ID,
                "name": "Agent" if "Agent" in offered else "Task",
                "input": {
                    "description": "Look around",
                    "prompt": SUBAGENT_PROMPT,
                    "subagent_type": "general-purpose",
                },
            }
            return [agent], "tool_use"
        return [{"type": "text", "text": "ok"}], "end_turn"

    def main_requests(self) -> list[dict[str, Any]]:
        """The requests that offered the agent's tools (its own turns, not side calls)."""
        with self._lock:
            return [
                r
                for r in self.requests
                if any(t.get("name") == "Read" for t in r.get("tools") or [])
            ]

    def __enter__(self) -> ScriptedMessagesApi:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.released.set()
        self._server.shutdown()
        self._server.server_close()
