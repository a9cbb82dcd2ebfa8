"""Host side of the guest agent protocol (``agent.c`` documents the wire format).

:class:`AgentClient` speaks to one guest agent over a stream socket (QEMU's virtio-serial
chardev socket for microvm; any connected stream works). Requests are multiplexed by id: a
reader thread routes reply frames to per-request queues, so an exec can stream while files are
read. ``client_for_socket(sock)`` is the factory other runtimes use.

Resynchronisation: after a (re)connect the byte stream may start mid-frame (output the guest
wrote for a previous host). :meth:`AgentClient.sync` sends ``H`` with a random token and drops
everything until the matching ``h``; frames for ids this client never issued are dropped.

Checkpoint safety: :meth:`AgentClient.quiesce` holds the request gate, which every request
holds until the guest has fully consumed it (its reply or, for exec, its ``S``), so a
checkpoint never catches a half-delivered request.
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import secrets
import select
import socket
import struct
import threading
import time
from collections.abc import Iterable, Iterator

from services.sandbox.runtime.base import (
    ExecEvent,
    ExecRequest,
    ExecResult,
    FileInfo,
    GuestAgentError,
    GuestFileError,
    GuestFileNotFound,
    GuestFileTooLarge,
    normalize_guest_path,
)

MAGIC = 0x4B334147
HEADER = struct.Struct(">IcII")
MAX_FRAME = 8 << 20
"""Largest frame the host takes from a guest. The agent's frames are at most 1 MiB of file data
(``READ_CHUNK``) or 64 KiB of exec output; a directory listing is one frame (8 MiB is some 100,000
entries). A header claiming more is a lie: the connection is cut at once, never buffered."""
UPLOAD_FRAME = 1 << 20
"""Bytes of file data per frame of a streamed upload (agent version 2)."""
_EOF = object()
BACKLOG = 8 << 20
"""Bytes of replies the reader holds for one request its caller has not taken yet; past it the
reader waits for the caller (back pressure to the guest) instead of buffering without end."""
EFBIG = 27


class GuestProtocolViolation(OSError):
    """The guest broke the wire format (a lie about a frame's size, a bad magic)."""


def tlv(tag: str, value: bytes | str | int) -> bytes:
    if isinstance(value, int):
        value = str(value)
    if isinstance(value, str):
        value = value.encode()
    return tag.encode() + struct.pack(">I", len(value)) + value


def parse_tlv(payload: bytes) -> list[tuple[str, bytes]]:
    out, off = [], 0
    while off + 5 <= len(payload):
        tag = chr(payload[off])
        (n,) = struct.unpack_from(">I", payload, off + 1)
        out.append((tag, payload[off + 5 : off + 5 + n]))
        off += 5 + n
    return out


def frame(kind: str, rid: int, payload: bytes = b"") -> bytes:
    return HEADER.pack(MAGIC, kind.encode(), rid, len(payload)) + payload


def _entry(text: bytes, dirpath: str | None) -> FileInfo:
    mode, size, mtime, kind, name = text.decode("utf-8", "replace").split(" ", 4)
    path = name if dirpath is None else f"{dirpath.rstrip('/')}/{name}"
    return FileInfo(
        path=path,
        name=name.rsplit("/", 1)[-1] if dirpath is None else name,
        size=int(size),
        mode=int(mode, 8),
        is_dir=kind == "d",
        is_symlink=kind == "l",
        mtime=float(mtime),
    )


class _Replies(queue.Queue):
    """One request's replies, and how many payload bytes of them wait to be taken."""

    held = 0


class AgentClient:
    """One connection to a guest agent. Thread-safe.

    ``timeout_s`` is a progress timeout: the longest wait for the next frame of a reply, or for
    the guest to take more bytes of a request; a transfer that keeps moving never times out.
    ``version`` is the agent's protocol version, learnt at :meth:`sync` (1 until then): version
    2 streams file transfers in frames and caps exec output in the guest as well.

    ``resync=True`` is for a stream that may begin mid-frame (a guest that wrote for a previous
    host): everything is dropped until the answer to the first :meth:`sync`."""

    def __init__(self, sock: socket.socket, timeout_s: float = 30.0, resync: bool = False) -> None:
        self._sock = sock
        self._timeout = timeout_s
        self.version = 1
        self._ids = itertools.count(1)
        self._waiters: dict[int, _Replies] = {}
        self._lock = threading.Lock()
        self._drained = threading.Condition(self._lock)
        self._gate = threading.RLock()
        self._send_lock = threading.Lock()
        self._closed = False
        self.broken: str | None = None
        """Why the host cut the guest off (a protocol violation), ``None`` while it behaves."""
        # a token no answer carries: resynchronising from the first byte until sync() sets its own
        self._sync_token: bytes | None = secrets.token_bytes(8) if resync else None
        self._sync_event = threading.Event()
        sock.settimeout(None)
        self._reader = threading.Thread(target=self._read_loop, daemon=True, name="k3s-agent-rx")
        self._reader.start()

    # ------------------------------------------------------------------ transport

    def _read_loop(self) -> None:
        buf = bytearray()
        try:
            while True:
                data = self._sock.recv(1 << 20)
                if not data:
                    break
                buf += data
                self._consume(buf)
        except GuestProtocolViolation as exc:
            self.broken = str(exc)
            buf = bytearray()  # what the liar sent is dropped now, not when the sandbox goes
            with contextlib.suppress(OSError):  # cut off: its next write fails
                self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        with self._lock:
            self._closed = True
            waiters = list(self._waiters.values())
        for q in waiters:
            q.put(_EOF)
        self._sync_event.set()

    def _consume(self, buf: bytearray) -> None:
        magic = HEADER.pack(MAGIC, b"h", 0, 0)[:4]
        while True:
            if self._sync_token is not None:  # resynchronising: scan for the matching 'h'
                i = buf.find(magic)
                if i < 0:
                    del buf[: max(0, len(buf) - 3)]
                    return
                del buf[:i]
                if len(buf) < HEADER.size:
                    return
                _, kind, rid, n = HEADER.unpack_from(buf)
                if kind != b"h" or n > 4096:
                    del buf[:1]
                    continue
                if len(buf) < HEADER.size + n:
                    return
                fields = dict(parse_tlv(bytes(buf[HEADER.size : HEADER.size + n])))
                if fields.get("t") == self._sync_token:
                    with contextlib.suppress(ValueError):
                        self.version = int(fields.get("v", b"1"))
                    self._sync_token = None
                    self._sync_event.set()
                    del buf[: HEADER.size + n]
                else:
                    del buf[:1]
                continue
            if len(buf) < HEADER.size:
                return
            m, kind, rid, n = HEADER.unpack_from(buf)
            if m != MAGIC:
                raise GuestProtocolViolation("guest agent protocol error: bad frame magic "
                                             f"{m:#010x}; control port cut off")  # fmt: skip
            if n > MAX_FRAME:
                raise GuestProtocolViolation(
                    f"guest agent protocol error: a frame claiming {n} bytes (the limit is "
                    f"{MAX_FRAME}); control port cut off"
                )
            if len(buf) < HEADER.size + n:
                return
            payload = bytes(buf[HEADER.size : HEADER.size + n])
            del buf[: HEADER.size + n]
            with self._lock:
                q = self._waiters.get(rid)
                while q is not None and q.held > BACKLOG and not self._closed:
                    self._drained.wait(1.0)  # the caller is slow: the guest waits, not memory
                    q = self._waiters.get(rid)
                if q is not None:
                    q.held += len(payload)
            if q is not None:
                q.put((kind.decode(), payload))

    def _send(self, data: bytes) -> None:
        """Send a frame; fails when the guest takes no bytes for ``timeout_s`` (a guest that
        stops reading cannot hold a request thread, or the send lock, forever)."""
        view = memoryview(data)
        with self._send_lock:
            while view:
                try:
                    _, writable, _ = select.select([], [self._sock], [], self._timeout)
                    if not writable:
                        raise GuestAgentError(f"guest agent took no data for {self._timeout:.0f} s")
                    n = self._sock.send(view, socket.MSG_DONTWAIT)
                except (BlockingIOError, InterruptedError):
                    continue
                except (OSError, ValueError) as exc:
                    raise GuestAgentError(f"guest agent connection lost: {exc}") from exc
                view = view[n:]

    def sync(self, timeout_s: float = 10.0, retry_s: float = 0.25) -> int:
        """Resynchronise the stream (see module docstring); retries until the guest answers.
        Returns how many hellos were sent (1: the guest answered the first)."""
        deadline = time.monotonic() + timeout_s
        sent = 0
        token = secrets.token_bytes(8)
        self._sync_event.clear()
        self._sync_token = token
        while not self._sync_event.is_set():
            if self._closed:
                raise GuestAgentError("guest agent connection closed during sync")
            if time.monotonic() > deadline:
                raise GuestAgentError(f"guest agent did not answer within {timeout_s:.0f} s")
            with contextlib.suppress(BlockingIOError, InterruptedError):
                # never block: a booting guest does not read, and the buffer may be full
                self._sock.send(frame("H", 0, tlv("t", token)), socket.MSG_DONTWAIT)
                sent += 1
            self._sync_event.wait(retry_s)
        if self._closed:
            raise GuestAgentError("guest agent connection closed during sync")
        return sent

    @contextlib.contextmanager
    def quiesce(self) -> Iterator[None]:
        """Hold off new requests until the block ends (used around checkpoints)."""
        with self._gate:
            yield

    def close(self) -> None:
        with self._lock:
            self._closed = True  # a reader waiting on a slow caller stops waiting
            self._drained.notify_all()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()

    @property
    def closed(self) -> bool:
        return self._closed

    # ------------------------------------------------------------------ requests

    def _open(self) -> tuple[int, _Replies]:
        rid = next(self._ids) & 0xFFFFFFFF or next(self._ids)
        q = _Replies()
        with self._lock:
            if self.broken:
                raise GuestAgentError(self.broken)
            if self._closed:
                raise GuestAgentError("guest agent connection is closed")
            self._waiters[rid] = q
        return rid, q

    def _done(self, rid: int) -> None:
        with self._lock:
            self._waiters.pop(rid, None)
            self._drained.notify_all()

    def _get(self, q: _Replies, timeout: float | None) -> tuple[str, bytes]:
        try:
            item = q.get(timeout=timeout)
        except queue.Empty:
            raise GuestAgentError(f"guest agent did not answer within {timeout:.0f} s") from None
        if item is _EOF:
            raise GuestAgentError(self.broken or "guest agent connection lost")
        with self._lock:
            q.held -= len(item[1])
            self._drained.notify_all()
        return item

    def _call(self, kind: str, payload: bytes, path: str = "") -> tuple[str, bytes]:
        rid, q = self._open()
        try:
            with self._gate:
                self._send(frame(kind, rid, payload))
                reply = self._get(q, self._timeout)
        finally:
            self._done(rid)
        if reply[0] == "F":
            f = dict(parse_tlv(reply[1]))
            errno = int(f.get("n", b"0"))
            msg = f.get("m", b"").decode("utf-8", "replace")
            cls = GuestFileNotFound if errno == 2 else GuestFileError
            raise cls(msg, errno=errno, path=path)
        return reply

    def ping(self) -> None:
        self._call("P", b"")

    def exec_stream(self, req: ExecRequest) -> Iterator[ExecEvent]:
        payload = b"".join(tlv("a", a) for a in req.full_argv())
        payload += b"".join(tlv("e", f"{k}={v}") for k, v in req.env.items())
        payload += tlv("c", normalize_guest_path(req.cwd) if req.cwd else "/home/user")
        if req.stdin:
            payload += tlv("i", req.stdin)
        if req.timeout_s:
            payload += tlv("t", max(1, int(req.timeout_s * 1000)))
        if req.background:
            payload += tlv("b", "1")
        cap = req.max_output_bytes
        if cap:
            payload += tlv("o", cap)
        sent = {"O": 0, "E": 0}
        truncated = False
        rid, q = self._open()
        # the guest may run past the deadline by the kill latency; allow a margin
        wait = req.timeout_s + 30.0 if req.timeout_s else None
        try:
            with self._gate:
                self._send(frame("X", rid, payload))
                kind, data = self._get(q, self._timeout)
            if kind == "F":
                msg = dict(parse_tlv(data)).get("m", b"").decode("utf-8", "replace")
                raise GuestAgentError(f"exec failed in the guest: {msg}")
            pid = int(dict(parse_tlv(data))["p"])
            yield ExecEvent(kind="start", pid=pid)
            if req.background:
                return
            while True:
                kind, data = self._get(q, wait)
                if kind in ("O", "E"):
                    if cap:  # the host's own cap: a guest is not trusted to keep it
                        room = max(0, cap - sent[kind])
                        if len(data) > room:
                            data, truncated = data[:room], True
                        sent[kind] += len(data)
                        if not data:
                            continue
                    yield ExecEvent(
                        kind="stdout" if kind == "O" else "stderr",
                        data=data.decode("utf-8", "replace"),
                    )
                elif kind == "Z":
                    f = dict(parse_tlv(data))
                    yield ExecEvent(
                        kind="exit", pid=pid, exit_code=int(f["x"]), timed_out="T" in f,
                        truncated=truncated or "C" in f,
                    )  # fmt: skip
                    return
        finally:
            self._done(rid)

    def exec(self, req: ExecRequest) -> ExecResult:
        t0 = time.perf_counter()
        out: list[str] = []
        err: list[str] = []
        res = ExecResult()
        # decode per stream at the end so multi-byte characters split across chunks survive
        for ev in self._exec_raw(req, out, err):
            if ev.kind == "start":
                res.pid = ev.pid
            elif ev.kind == "exit":
                res.exit_code = ev.exit_code
                res.timed_out = ev.timed_out
                res.truncated = ev.truncated
        res.stdout = "".join(out)
        res.stderr = "".join(err)
        if not req.background:
            res.pid = None if res.exit_code is not None else res.pid
        res.duration_ms = (time.perf_counter() - t0) * 1000
        return res

    def _exec_raw(self, req: ExecRequest, out: list[str], err: list[str]) -> Iterator[ExecEvent]:
        for ev in self.exec_stream(req):
            if ev.kind == "stdout":
                out.append(ev.data)
            elif ev.kind == "stderr":
                err.append(ev.data)
            else:
                yield ev

    def kill_process(self, pid: int, signal: int = 15) -> None:
        self._call("G", tlv("p", pid) + tlv("s", signal), path=str(pid))

    def read_file(self, path: str, limit: int | None = None) -> bytes:
        """A guest file's contents. With ``limit`` (and agent version 2) the guest streams it
        in frames and stops past ``limit`` bytes (:class:`GuestFileTooLarge`): a file that
        never ends (``/dev/zero``) costs at most ``limit`` bytes and no timeout."""
        p = normalize_guest_path(path)
        if limit is None or self.version < 2:
            data = self._call("R", tlv("f", p), p)[1]
            if limit is not None and len(data) > limit:
                raise GuestFileTooLarge(f"{p} is larger than {limit} bytes", EFBIG, p)
            return data
        return b"".join(self.read_file_stream(p, limit))

    def read_file_stream(self, path: str, limit: int) -> Iterator[bytes]:
        """:meth:`read_file` frame by frame (agent version 2; older agents: whole). The
        timeout is per frame, so it measures progress, not the transfer's length."""
        p = normalize_guest_path(path)
        if self.version < 2:
            yield self.read_file(p, limit)
            return
        rid, q = self._open()
        sent = 0
        try:
            with self._gate:
                self._send(frame("R", rid, tlv("f", p) + tlv("n", limit)))
            while True:
                kind, data = self._get(q, self._timeout)
                if kind == "D":
                    sent += len(data)
                    if sent > limit:  # the host's own check
                        raise GuestFileTooLarge(f"{p} is larger than {limit} bytes", EFBIG, p)
                    yield data
                elif kind == "K":
                    return
                elif kind == "F":
                    self._raise_failure(data, p, limit)
        finally:
            self._done(rid)

    @staticmethod
    def _raise_failure(data: bytes, path: str, limit: int | None = None) -> None:
        f = dict(parse_tlv(data))
        errno = int(f.get("n", b"0"))
        msg = f.get("m", b"").decode("utf-8", "replace")
        if errno == EFBIG:
            raise GuestFileTooLarge(
                f"{path} is larger than {limit} bytes" if limit else msg, errno, path
            )
        raise (GuestFileNotFound if errno == 2 else GuestFileError)(msg, errno=errno, path=path)

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> FileInfo:
        if self.version >= 2 and len(data) > UPLOAD_FRAME:
            return self.write_file_stream(path, [data], mode)
        p = normalize_guest_path(path)
        _, payload = self._call("W", tlv("f", p) + tlv("m", f"{mode:o}") + tlv("d", data), p)
        fields = parse_tlv(payload)
        info = _entry(fields[0][1], None)
        return info.model_copy(update={"path": p})

    def write_file_stream(self, path: str, chunks: Iterable[bytes], mode: int = 0o644) -> FileInfo:
        """Create or replace a guest file from ``chunks``, sent in frames of at most
        :data:`UPLOAD_FRAME` bytes as they come (agent version 2; older agents get one frame).
        The file appears (renamed into place) only when every chunk arrived."""
        if self.version < 2:
            return self.write_file(path, b"".join(chunks), mode)
        p = normalize_guest_path(path)
        rid, q = self._open()
        try:
            with self._gate:  # a checkpoint never catches half an upload
                self._send(frame("W", rid, tlv("f", p) + tlv("m", f"{mode:o}") + tlv("z", "1")))
                try:
                    for chunk in chunks:
                        for off in range(0, len(chunk), UPLOAD_FRAME):
                            self._send(frame("A", rid, chunk[off : off + UPLOAD_FRAME]))
                        if not q.empty():
                            break  # the guest refused the file already: its F is waiting
                except GuestAgentError:
                    raise
                except BaseException:  # the source failed (client gone, too large): abort
                    with contextlib.suppress(GuestAgentError):
                        self._send(frame("C", rid, tlv("x", "1")))
                    raise
                self._send(frame("C", rid))
                kind, data = self._get(q, self._timeout)
        finally:
            self._done(rid)
        if kind == "F":
            self._raise_failure(data, p)
        info = _entry(parse_tlv(data)[0][1], None)
        return info.model_copy(update={"path": p})

    def list_dir(self, path: str) -> list[FileInfo]:
        p = normalize_guest_path(path)
        _, payload = self._call("L", tlv("f", p), p)
        return [_entry(v, p) for t, v in parse_tlv(payload) if t == "E"]

    def stat(self, path: str) -> FileInfo:
        p = normalize_guest_path(path)
        _, payload = self._call("T", tlv("f", p), p)
        info = _entry(parse_tlv(payload)[0][1], None)
        return info.model_copy(update={"path": p})

    def remove(self, path: str, recursive: bool = False) -> None:
        p = normalize_guest_path(path)
        self._call("U", tlv("f", p) + (tlv("r", "1") if recursive else b""), p)


def client_for_socket(sock: socket.socket, sync: bool = True) -> AgentClient:
    """An :class:`AgentClient` on a connected stream socket, synchronised when ``sync``."""
    client = AgentClient(sock)
    if sync:
        client.sync()
    return client
