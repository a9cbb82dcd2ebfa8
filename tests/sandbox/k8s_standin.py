"""A **stand-in** for a Kubernetes API server (no cluster exists on the machines this project
is tested on): a loopback HTTP server that replays API exchanges written down as fixtures,
in order. Each exchange names the request it expects (method, path, for an exec a piece of
its command, for a create pieces of its body) and the answer: a status and JSON body, or for
an exec the frames of the ``v4.channel.k8s.io`` websocket (channel 1 stdout, 2 stderr, 3 the
status). A request that is not the next expected one is answered 599 and recorded in
``mismatches``, so a test sees exactly where the runtime deviated from the recorded protocol.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def _frame(payload: bytes, opcode: int = 0x2) -> bytes:
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
    return head + payload


class ReplayServer:
    def __init__(self, fixture: Path, substitutions: dict[str, str] | None = None) -> None:
        text = fixture.read_text()
        for k, v in (substitutions or {}).items():
            text = text.replace(k, v)
        self.exchanges: list[dict] = json.loads(text)["exchanges"]
        self.next = 0
        self.mismatches: list[str] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _body(self) -> str:
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n).decode() if n else ""

            def handle_one(self) -> None:
                url = urlsplit(self.path)
                body = self._body()
                command = " ".join(parse_qs(url.query).get("command", []))
                with server._lock:
                    ex = (
                        server.exchanges[server.next]
                        if server.next < len(server.exchanges)
                        else None
                    )
                    why = server._mismatch(ex, self.command, url.path, command, body)
                    if why:
                        server.mismatches.append(why)
                    else:
                        server.next += 1
                if why:
                    return self._json(599, {"kind": "Status", "message": why})
                if "frames" in ex:
                    return self._websocket(ex["frames"])
                self._json(ex["status"], ex.get("body", {}))

            do_GET = do_POST = do_DELETE = handle_one  # noqa: N815

            def _json(self, status: int, body: object) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _websocket(self, frames: list) -> None:
                key = self.headers.get("Sec-WebSocket-Key", "")
                accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest())
                self.send_response(101)
                self.send_header("Upgrade", "websocket")
                self.send_header("Connection", "Upgrade")
                self.send_header("Sec-WebSocket-Accept", accept.decode())
                self.send_header("Sec-WebSocket-Protocol", "v4.channel.k8s.io")
                self.end_headers()
                for channel, data in frames:
                    payload = json.dumps(data) if isinstance(data, dict) else data
                    self.wfile.write(_frame(bytes([channel]) + payload.encode()))
                self.wfile.write(_frame(struct.pack("!H", 1000), opcode=0x8))
                self.wfile.flush()
                self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    @staticmethod
    def _mismatch(ex: dict | None, method: str, path: str, command: str, body: str) -> str:
        got = f"{method} {path}" + (f" command={command!r}" if command else "")
        if ex is None:
            return f"unexpected request after the last exchange: {got}"
        if ex["method"] != method or ex["path"] != path:
            return f"expected {ex['method']} {ex['path']}, got {got}"
        for piece in ex.get("command_has", []):
            if piece not in command:
                return f"{got}: command lacks {piece!r}"
        for piece in ex.get("body_has", []):
            if piece not in body:
                return f"{got}: body lacks {piece!r}"
        return ""

    @property
    def remaining(self) -> list[str]:
        return [f"{e['method']} {e['path']}" for e in self.exchanges[self.next :]]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
