"""A local OpenAI-compatible answer service for tests and benchmarks: `/chat/completions` with `stream: true`,
answered as Server-Sent Events chunks, as a threaded HTTP server that records every request it received."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Reply:
    """One reply. `pieces` are streamed as content deltas, `piece_delay` seconds apart, after `delay` seconds; with
    `status` other than 200 the body is `error` JSON. `raw` replaces the whole body; `trickle` sends it one byte every
    `trickle` seconds; `break_after` closes the connection after that many pieces (no end of stream)."""

    pieces: list[str] = field(default_factory=lambda: ["It costs ", "12 dollars ", "[1]."])
    status: int = 200
    delay: float = 0.0
    piece_delay: float = 0.0
    usage: dict | None = field(default_factory=lambda: {"prompt_tokens": 91, "completion_tokens": 9})
    raw: bytes | None = None
    trickle: float | None = None
    break_after: int | None = None
    content_type: str = "text/event-stream"


def _chunk(delta: dict, *, finish: str | None = None, usage: dict | None = None, choices: bool = True) -> bytes:
    body = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "fake",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if choices else [],
    }
    if usage is not None:
        body["usage"] = {**usage, "total_tokens": sum(usage.values())}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


class FakeLLM:
    """Replies with the queued replies in order, then with `respond(request body)` (default: a plain Reply())."""

    def __init__(self, replies: list[Reply] | None = None, respond: Callable[[dict], Reply] | None = None) -> None:
        self.replies = list(replies or [])
        self.respond = respond or (lambda body: Reply())
        self.requests: list[tuple[str, str | None, dict]] = []
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                body = json.loads(self.rfile.read(length))
                upstream.requests.append((self.path, self.headers.get("Authorization"), body))
                reply = upstream.replies.pop(0) if upstream.replies else upstream.respond(body)
                try:
                    upstream._send(self, reply)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def _send(self, handler: BaseHTTPRequestHandler, reply: Reply) -> None:
        wait = threading.Event().wait
        if reply.delay:
            wait(reply.delay)
        if reply.status != 200:
            payload = json.dumps({"error": {"message": "fake failure", "type": "server_error"}}).encode()
            handler.send_response(reply.status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            handler.wfile.write(payload)
            return
        handler.send_response(200)
        handler.send_header("Content-Type", reply.content_type)
        handler.end_headers()
        if reply.raw is not None:
            if reply.trickle:
                for index in range(len(reply.raw)):
                    handler.wfile.write(reply.raw[index : index + 1])
                    handler.wfile.flush()
                    wait(reply.trickle)
            else:
                handler.wfile.write(reply.raw)
            return
        handler.wfile.write(_chunk({"role": "assistant", "content": ""}))
        for index, piece in enumerate(reply.pieces):
            if reply.break_after is not None and index >= reply.break_after:
                handler.wfile.flush()
                handler.connection.shutdown(2)
                return
            if index and reply.piece_delay:
                wait(reply.piece_delay)
            handler.wfile.write(_chunk({"content": piece}))
            handler.wfile.flush()
        handler.wfile.write(_chunk({}, finish="stop"))
        if reply.usage is not None:
            handler.wfile.write(_chunk({}, usage=reply.usage, choices=False))
        handler.wfile.write(b"data: [DONE]\n\n")
        handler.wfile.flush()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
