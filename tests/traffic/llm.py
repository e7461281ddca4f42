"""A stand-in for the model provider: an OpenAI-compatible server on 127.0.0.1 (stdlib only).

Every profile's ``config.yaml`` points its model at this server (``provider: custom``,
``base_url`` :attr:`LLMStub.url`, ``default`` :func:`model_for` of the profile), so a request to a
profile's API server runs upstream's real agent loop and comes back with this server's text. The
model name is how the stub tells profiles apart: the multiplexed gateway serves every profile from
one process, but each profile's agent still asks for its own model.

Replies are deterministic (:func:`reply_for`: the profile and a digest of the last user message),
so the load generator can tell a right answer from one that went to the wrong profile. Per
profile, on demand (:meth:`LLMStub.behave`): added latency, an HTTP error, a hang (the request is
held until :meth:`LLMStub.release`), and, once, an answer that is a call of the agent's
``terminal`` tool (:meth:`LLMStub.arm_tool`): the agent then runs that command itself, as a
prompt-injected agent would. The stub records when each profile's agent first reached it
(:meth:`LLMStub.contacts`), which splits a profile's "first answer" into set-up and the call itself.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL_PREFIX = "stub-"
_MAX_BODY = 8 << 20  # the agent sends its whole conversation and every tool's schema: ~100 KB


def model_for(profile: str) -> str:
    """The model name ``profile``'s config.yaml asks for: how the stub knows whose call it is."""
    return MODEL_PREFIX + profile


def profile_of(model: object) -> str | None:
    if isinstance(model, str) and model.startswith(MODEL_PREFIX):
        return model[len(MODEL_PREFIX):]
    return None


def reply_for(profile: str, prompt: str) -> str:
    """The stub's answer to ``prompt`` as ``profile``'s model: the same text every time."""
    digest = hashlib.sha256(prompt.encode()).hexdigest()[:16]
    return f"stub reply for {profile}: {digest}"


@dataclass
class Behaviour:
    """What the stub does with one profile's model calls (the defaults: answer at once)."""

    delay: float = 0.0  # seconds added before every answer
    error: int | None = None  # answer with this HTTP status instead
    hang: bool = False  # hold every call until released
    tool_command: str | None = None  # answer the next user turn with this terminal command (once)
    tool_timeout: int = 120  # the terminal tool's own timeout for that command


@dataclass(frozen=True)
class Call:
    """One request the stub received."""

    at: float  # time.monotonic()
    profile: str | None  # None: a call that names no model (upstream's model-list probes)
    path: str
    kind: str  # "completion", "tool_call" (answered with the armed command), "probe"


@dataclass
class _State:
    lock: threading.Lock = field(default_factory=threading.Lock)
    behaviours: dict[str, Behaviour] = field(default_factory=dict)
    released: dict[str, threading.Event] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    closing: threading.Event = field(default_factory=threading.Event)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (its gateway was killed mid-call) is the normal case here."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class LLMStub:
    """The server, on a free port of 127.0.0.1, answering from a thread per connection."""

    def __init__(self, profiles: tuple[str, ...] = ()) -> None:
        self._state = _State()
        self._profiles = tuple(profiles)
        handler = type("Handler", (_Handler,), {"state": self._state, "profiles": self._profiles})
        self._server = _Server(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="llm-stub",
                                        daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The ``base_url`` a profile's config.yaml names."""
        return f"http://127.0.0.1:{self.port}/v1"

    def behave(self, profile: str, **changes: Any) -> None:
        """Change how ``profile``'s calls are answered (keys of :class:`Behaviour`); ``hang=False``
        also releases the calls held so far."""
        with self._state.lock:
            b = self._state.behaviours.setdefault(profile, Behaviour())
            for key, value in changes.items():
                if not hasattr(b, key):
                    raise TypeError(f"no behaviour {key!r}")
                setattr(b, key, value)
            gate = self._state.released.setdefault(profile, threading.Event())
            if b.hang:
                gate.clear()
            else:
                gate.set()

    def arm_tool(self, profile: str, command: str, timeout: int = 120) -> None:
        """Answer ``profile``'s next user turn with a call of the terminal tool running ``command``."""
        self.behave(profile, tool_command=command, tool_timeout=timeout)

    def release(self, profile: str) -> None:
        self.behave(profile, hang=False)

    def reset(self, profile: str) -> None:
        """Back to the defaults (held calls are answered)."""
        with self._state.lock:
            self._state.behaviours[profile] = Behaviour()
            self._state.released.setdefault(profile, threading.Event()).set()

    def calls(self, profile: str | None = None, since: float = 0.0) -> list[Call]:
        with self._state.lock:
            return [c for c in self._state.calls if c.at >= since and (profile is None or c.profile == profile)]

    def contacts(self, profile: str, since: float) -> dict[str, float | None]:
        """When ``profile``'s agent first reached the stub after ``since``: any call (its set-up's
        model probes), and its first completion."""
        calls = self.calls(profile, since)
        first = min((c.at for c in calls), default=None)
        completion = min((c.at for c in calls if c.kind != "probe"), default=None)
        return {"first_call": first, "first_completion": completion}

    def close(self) -> None:
        """Stop serving; every held call is answered first (nothing waits on a gate that never opens)."""
        self._state.closing.set()
        with self._state.lock:
            for gate in self._state.released.values():
                gate.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def __enter__(self) -> LLMStub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Handler(BaseHTTPRequestHandler):
    state: _State
    profiles: tuple[str, ...]
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the stub answers thousands of calls in a benchmark."""

    # -- routes
    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path in ("/v1/models", "/models"):
            self._record(None, "probe")
            names = [model_for(p) for p in self.profiles]
            self._json(200, {"object": "list", "data": [_model(n) for n in names]})
        elif path.startswith(("/v1/models/", "/models/")):
            name = path.rsplit("/", 1)[1]
            self._record(profile_of(name), "probe")
            self._json(200, _model(name))
        else:
            self._record(None, "probe")
            self._json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})

    def do_POST(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= _MAX_BODY:
            self._json(413, {"error": {"message": "body too large", "type": "invalid_request_error"}})
            return
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            body = None
        path = self.path.split("?", 1)[0]
        if not isinstance(body, dict):
            self._json(400, {"error": {"message": "not a JSON object", "type": "invalid_request_error"}})
            return
        if path not in ("/v1/chat/completions", "/chat/completions"):
            # Upstream probes other servers' routes (Ollama's /api/show) to learn the context length.
            self._record(profile_of(body.get("name") or body.get("model")), "probe")
            self._json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})
            return
        self._completion(body)

    # -- the completion
    def _completion(self, body: dict[str, Any]) -> None:
        model = body.get("model")
        profile = profile_of(model) or "?"
        messages = body.get("messages") if isinstance(body.get("messages"), list) else []
        last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
        with self.state.lock:
            b = self.state.behaviours.get(profile, Behaviour())
            gate = self.state.released.setdefault(profile, threading.Event())
            if not b.hang:
                gate.set()
            command = b.tool_command if last.get("role") == "user" else None
            if command is not None:
                b.tool_command = None  # once
            delay, error, timeout = b.delay, b.error, b.tool_timeout
        self._record(profile, "tool_call" if command is not None else "completion")
        gate.wait()
        if delay > 0:
            self.state.closing.wait(delay)
        if error is not None:
            self._json(error, {"error": {"message": f"stub error {error}", "type": "server_error"}})
            return
        if command is not None:
            message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{int(time.monotonic() * 1e6)}", "type": "function",
                "function": {"name": "terminal", "arguments": json.dumps({"command": command, "timeout": timeout})},
            }]}
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": reply_for(profile, _last_user_text(messages))}
            finish = "stop"
        if body.get("stream"):
            self._stream(str(model), message, finish, bool((body.get("stream_options") or {}).get("include_usage")))
        else:
            self._json(200, {"id": "chatcmpl-stub", "object": "chat.completion", "created": int(time.time()),
                             "model": model, "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                             "usage": _USAGE})

    def _stream(self, model: str, message: dict[str, Any], finish: str, usage: bool) -> None:
        """Server-sent events as OpenAI sends them, the connection closed after ``[DONE]``."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        base = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        if message.get("tool_calls"):
            deltas.append({"tool_calls": [{"index": 0, **message["tool_calls"][0]}]})
        else:
            text = message["content"]
            half = len(text) // 2
            deltas += [{"content": text[:half]}, {"content": text[half:]}]
        chunks = [{**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
        chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        if usage:
            chunks.append({**base, "choices": [], "usage": _USAGE})
        try:
            for chunk in chunks:
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except OSError:
            pass  # the agent went away (its gateway was killed): nothing to answer

    # -- helpers
    def _record(self, profile: str | None, kind: str) -> None:
        with self.state.lock:
            self.state.calls.append(Call(time.monotonic(), profile, self.path, kind))

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            self.close_connection = True


_USAGE = {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}


def _model(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "stub", "context_length": 131072}


def _last_user_text(messages: list[Any]) -> str:
    for m in reversed(messages):
        if isinstance(m, dict) and m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, list):  # content parts
                return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            return str(content)
    return ""
