"""A real HTTP server that speaks the Chat Completions protocol (and Anthropic's Messages), answering with
scripted turns.

Each model name has its own script (so tests sharing a server never take each other's turns): a
list of :class:`Turn` played in order, one per request. A turn is an assistant answer (text, or tool
calls), or an HTTP error (a status, a body, headers such as ``Retry-After``), after an optional
delay. Every request is recorded with the messages and tools it sent, so a test can check what the
model was told.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.stack import free_port


@dataclass(frozen=True)
class Turn:
    """One scripted answer: ``content`` and/or ``calls`` ((id, tool, arguments)), or ``status`` != 200."""

    content: str | None = None
    calls: tuple[tuple[str, str, Any], ...] = ()
    status: int = 200
    error: str = "scripted failure"
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    usage: tuple[int, int] = (11, 7)


def say(text: str) -> Turn:
    return Turn(content=text)


def call(*calls: tuple[str, str, Any]) -> Turn:
    return Turn(calls=tuple(calls))


def fail(status: int, error: str = "scripted failure", **headers: str) -> Turn:
    return Turn(status=status, error=error, headers=headers)


@dataclass
class Request:
    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    body: dict[str, Any]
    authorization: str | None


class ModelServer:
    """Scripted Chat Completions on 127.0.0.1; ``url`` is its base URL (``.../v1``)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.scripts: dict[str, list[Turn]] = {}
        self.requests: list[Request] = []
        self._lock = threading.Condition()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, model: str, *turns: Turn) -> None:
        with self._lock:
            self.scripts.setdefault(model, []).extend(turns)

    def requests_for(self, model: str) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.model == model]

    def wait_requests(self, model: str, count: int, timeout: float = 30.0) -> list[Request]:
        deadline = time.monotonic() + timeout
        with self._lock:
            while len([r for r in self.requests if r.model == model]) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"the model {model} got {len(self.requests_for(model))} requests, not {count}")
                self._lock.wait(left)
            return [r for r in self.requests if r.model == model]

    def _take(self, body: dict[str, Any], authorization: str | None) -> Turn | None:
        model = str(body.get("model"))
        with self._lock:
            self.requests.append(Request(model, list(body.get("messages") or []), list(body.get("tools") or []),
                                         body, authorization))
            self._lock.notify_all()
            script = self.scripts.get(model) or []
            return script.pop(0) if script else None

    def start(self) -> ModelServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                turn = server._take(body, self.headers.get("authorization"))
                if turn is None:
                    self._send(500, {"error": {"message": f"no scripted turn left for {body.get('model')}"}}, {})
                    return
                if turn.delay_s:
                    time.sleep(turn.delay_s)
                if turn.status != 200:
                    self._send(turn.status, {"error": {"message": turn.error, "type": "scripted"}}, turn.headers)
                    return
                answer = anthropic_message if self.path.endswith("/messages") else completion
                self._send(200, answer(str(body.get("model")), turn), turn.headers)

            def _send(self, status: int, payload: Any, headers: dict[str, str]) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            def log_message(self, *_: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def completion(model: str, turn: Turn) -> dict[str, Any]:
    """A ``chat.completion`` object for ``turn``."""
    message: dict[str, Any] = {"role": "assistant", "content": turn.content}
    if turn.calls:
        message["tool_calls"] = [
            {"id": call_id, "type": "function",
             "function": {"name": name,
                          "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)}}
            for call_id, name, arguments in turn.calls]
    prompt, completion_tokens = turn.usage
    return {"id": f"chatcmpl-{time.monotonic_ns()}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [{"index": 0, "message": message, "logprobs": None,
                                         "finish_reason": "tool_calls" if turn.calls else "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion_tokens,
                      "total_tokens": prompt + completion_tokens}}


def anthropic_message(model: str, turn: Turn) -> dict[str, Any]:
    """An Anthropic Messages ``message`` object for ``turn``."""
    content: list[dict[str, Any]] = [{"type": "text", "text": turn.content}] if turn.content else []
    content += [{"type": "tool_use", "id": call_id, "name": name,
                 "input": json.loads(arguments) if isinstance(arguments, str) else arguments}
                for call_id, name, arguments in turn.calls]
    prompt, completion_tokens = turn.usage
    return {"id": f"msg_{time.monotonic_ns()}", "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": "tool_use" if turn.calls else "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": prompt, "output_tokens": completion_tokens}}


@contextmanager
def model_server() -> Iterator[ModelServer]:
    server = ModelServer().start()
    try:
        yield server
    finally:
        server.stop()
