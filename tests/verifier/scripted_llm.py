"""A scripted OpenAI-compatible endpoint for judge tests: a real HTTP server on a free port.

``reply(system, user) -> str`` decides each answer; every request is recorded.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ScriptedLLM:
    def __init__(self, reply: Callable[[str, str], str]) -> None:
        self.reply = reply
        self.requests: list[dict[str, Any]] = []
        self.url = ""


@contextmanager
def scripted_llm(reply: Callable[[str, str], str]) -> Iterator[ScriptedLLM]:
    llm = ScriptedLLM(reply)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            llm.requests.append(body)
            msgs = body["messages"]
            system = next((m["content"] for m in msgs if m["role"] == "system"), "")
            user = [m["content"] for m in msgs if m["role"] == "user"][-1]
            text = llm.reply(system, user) if self.path.endswith("/chat/completions") else ""
            out = json.dumps({
                "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": body.get("model", "m"),
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }).encode()  # fmt: skip
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    llm.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield llm
    finally:
        server.shutdown()
        server.server_close()
