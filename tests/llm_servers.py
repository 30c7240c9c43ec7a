"""Loopback HTTP servers that speak the Anthropic Messages and OpenAI Chat Completions
protocols and answer from a script (real sockets, real SDK clients on the other end)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson


@dataclass
class Reply:
    text: str = ""
    status: int = 200
    delay_s: float = 0.0
    stop: str = "end_turn"


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    raw: bytes


@dataclass
class ScriptedLLM:
    protocol: str  # "anthropic" | "openai"
    replies: list[Reply]
    seen: list[Seen] = field(default_factory=list)

    def respond(self, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, bytes, float]:
        lowered = {k.lower(): v for k, v in headers.items()}
        self.seen.append(Seen(path, lowered, orjson.loads(raw), raw))
        expected = "/v1/messages" if self.protocol == "anthropic" else "/v1/chat/completions"
        if path != expected:
            return 404, orjson.dumps({"error": {"type": "not_found", "message": path}}), 0
        if not self.replies:
            return 500, orjson.dumps({"error": {"type": "api_error", "message": "no reply"}}), 0
        reply = self.replies.pop(0)
        if reply.status != 200:
            error = {"type": "error", "error": {"type": "invalid_request_error",
                                                "message": reply.text or "rejected"}}
            return reply.status, orjson.dumps(error), reply.delay_s
        return 200, orjson.dumps(self._message(reply)), reply.delay_s

    def _message(self, reply: Reply) -> dict[str, Any]:
        if self.protocol == "anthropic":
            return {"id": "msg_test", "type": "message", "role": "assistant",
                    "model": "claude-test", "content": [{"type": "text", "text": reply.text}],
                    "stop_reason": reply.stop, "stop_sequence": None,
                    "usage": {"input_tokens": 10, "output_tokens": 10}}
        finish = "stop" if reply.stop == "end_turn" else "length"
        return {"id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()),
                "model": "gpt-test", "choices": [{
                    "index": 0, "finish_reason": finish, "logprobs": None,
                    "message": {"role": "assistant", "content": reply.text, "refusal": None}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}}


class LLMServer:
    """`with LLMServer(script) as base_url:` serves the script on 127.0.0.1."""

    def __init__(self, script: ScriptedLLM) -> None:
        self.script = script
        handler = self._handler()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        script = self.script

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                status, body, delay = script.respond(self.path, dict(self.headers), raw)
                time.sleep(delay)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    def __enter__(self) -> str:
        self.thread.start()
        host, port = self.httpd.server_address[:2]
        root = f"http://{host!s}:{port}"
        return root if self.script.protocol == "anthropic" else root + "/v1"

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
