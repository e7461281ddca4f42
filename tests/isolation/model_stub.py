"""A scripted OpenAI-compatible model on 127.0.0.1, so a real gateway's agent calls a real tool offline.

The first completion of a conversation asks for one ``terminal`` tool call with the command the
test chose; once the conversation holds the tool's result, the model answers with that result as
its text. So a request to the gateway's API server runs the real agent loop, the real terminal
tool inside the profile's confinement, and returns what the command printed. JSON and SSE
(``stream: true``) answers, ``GET /v1/models``; every request body is kept in ``requests``.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "stub-model"


class ModelStub:
    def __init__(self, command: str) -> None:
        self.command = command
        self.requests: list[dict[str, Any]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet
                pass

            def _send(self, code: int, body: bytes, kind: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, json.dumps({"object": "list", "data": [
                        {"id": MODEL, "object": "model", "owned_by": "stub"}]}).encode())
                else:
                    self._send(404, b"{}")

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                stub.requests.append(body)
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, b"{}")
                    return
                message = stub.reply(body.get("messages") or [])
                if body.get("stream"):
                    self._send(200, stub.sse(message), "text/event-stream")
                else:
                    self._send(200, json.dumps(stub.completion(message)).encode())

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def reply(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        results = [m for m in messages if m.get("role") == "tool"]
        if results:
            content = results[-1].get("content")
            text = content if isinstance(content, str) else json.dumps(content)
            return {"role": "assistant", "content": "TOOL RESULT: " + text}
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_walls_1", "type": "function",
            "function": {"name": "terminal", "arguments": json.dumps({"command": self.command})}}]}

    @staticmethod
    def completion(message: dict[str, Any]) -> dict[str, Any]:
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        return {"id": "chatcmpl-stub", "object": "chat.completion", "created": 0, "model": MODEL,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}

    @staticmethod
    def sse(message: dict[str, Any]) -> bytes:
        base = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 0, "model": MODEL}
        delta: dict[str, Any] = {"role": "assistant"}
        if message.get("tool_calls"):
            delta["tool_calls"] = [{"index": 0, **call} for call in message["tool_calls"]]
        else:
            delta["content"] = message["content"]
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        chunks = [{**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                  {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
                   "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}]
        return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"

    def __enter__(self) -> ModelStub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)
