"""RFC 2822 / MIME in and out: parse what clients send, build what scenarios deliver.

Gmail stores each message as the raw bytes it received and answers every format from them;
this module is that one parse (headers, plain text for search and snippets, attachment parts)
and the JSON ``payload`` tree of ``format=full``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import html
import re
from dataclasses import dataclass, field
from datetime import datetime
from email import policy
from email.message import EmailMessage, Message
from email.parser import BytesParser
from email.utils import format_datetime, getaddresses
from typing import Any


class MimeError(ValueError):
    """The bytes a client sent are not a usable message."""


def b64url_decode(data: str) -> bytes:
    """Gmail's base64url, tolerant of missing padding and of standard base64 characters."""
    if not isinstance(data, str):
        raise MimeError("expected a base64url string")
    s = data.strip().replace("+", "-").replace("/", "_")
    s += "=" * (-len(s) % 4)
    try:
        return base64.urlsafe_b64decode(s.encode("ascii"))
    except (binascii.Error, ValueError, UnicodeEncodeError) as exc:
        raise MimeError(f"invalid base64url data: {exc}") from None


def b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii")


def attachment_id(message_id: str, part_id: str) -> str:
    """Opaque, stable attachment id that names its message and MIME part."""
    return "ANGj" + b64url_encode(f"{message_id}:{part_id}".encode()).rstrip("=")


def parse_attachment_id(att_id: str) -> tuple[str, str] | None:
    if not att_id.startswith("ANGj"):
        return None
    try:
        msg, _, part = b64url_decode(att_id[4:]).decode().partition(":")
    except (MimeError, UnicodeDecodeError):
        return None
    return (msg, part) if msg else None


_TAGS = re.compile(r"<[^>]+>")
_WS = re.compile(r"\s+")


@dataclass
class ParsedMessage:
    """What search, snippets and threading need from a message, read once at insert."""

    headers: dict[str, str]
    text: str
    attachments: list[dict[str, Any]] = field(default_factory=list)

    def h(self, name: str) -> str:
        return self.headers.get(name.lower(), "")

    @property
    def snippet(self) -> str:
        return html.escape(_WS.sub(" ", self.text).strip()[:200], quote=False)

    @property
    def references(self) -> list[str]:
        ids = re.findall(r"<[^<>\s]+>", self.h("references") + " " + self.h("in-reply-to"))
        return list(dict.fromkeys(ids))


def parse_bytes(raw: bytes) -> EmailMessage:
    if not raw or not raw.strip():
        raise MimeError("the message is empty")
    try:
        msg = BytesParser(policy=policy.default).parsebytes(raw)
    except Exception as exc:  # noqa: BLE001 - the stdlib parser raises many kinds
        raise MimeError(f"unparseable RFC 2822 message: {exc}") from None
    return msg  # type: ignore[return-value]


def _header_str(msg: Message, name: str) -> str:
    try:
        values = msg.get_all(name) or []
        return ", ".join(str(v) for v in values)
    except Exception:  # noqa: BLE001 - malformed header: keep its raw text
        raw = msg.get(name, failobj="")
        return str(raw)


def _part_bytes(part: Message) -> bytes:
    try:
        data = part.get_payload(decode=True)
    except Exception:  # noqa: BLE001
        data = None
    if isinstance(data, bytes):
        return data
    payload = part.get_payload()
    return payload.encode("utf-8", "replace") if isinstance(payload, str) else b""


def _part_text(part: Message) -> str:
    data = _part_bytes(part)
    charset = part.get_content_charset() or "utf-8"
    try:
        return data.decode(charset, "replace")
    except LookupError:
        return data.decode("utf-8", "replace")


def _is_attachment(part: Message) -> bool:
    return bool(part.get_filename()) or part.get_content_disposition() == "attachment"


def walk_parts(msg: Message, part_id: str = ""):  # type: ignore[no-untyped-def]
    """(part_id, part) depth-first, with Gmail's ids: "" for the root, "0", "0.1", …"""
    yield part_id, msg
    if msg.is_multipart():
        subparts = msg.get_payload()
        if isinstance(subparts, list):
            for i, sub in enumerate(subparts):
                child = str(i) if part_id == "" else f"{part_id}.{i}"
                yield from walk_parts(sub, child)


def parse_message(raw: bytes) -> ParsedMessage:
    msg = parse_bytes(raw)
    headers = {}
    for name in (
        "from",
        "to",
        "cc",
        "bcc",
        "subject",
        "date",
        "message-id",
        "in-reply-to",
        "references",
        "reply-to",
        "delivered-to",
        "list-id",
    ):
        value = _header_str(msg, name)
        if value:
            headers[name] = value
    texts, htmls, attachments = [], [], []
    for pid, part in walk_parts(msg):
        if part.is_multipart():
            continue
        ctype = part.get_content_type()
        if _is_attachment(part):
            attachments.append(
                {
                    "partId": pid,
                    "filename": part.get_filename() or "",
                    "mimeType": ctype,
                    "size": len(_part_bytes(part)),
                }
            )
        elif ctype == "text/plain":
            texts.append(_part_text(part))
        elif ctype == "text/html":
            htmls.append(html.unescape(_TAGS.sub(" ", _part_text(part))))
    text = ("\n".join(texts) if texts else "\n".join(htmls)).replace("\r\n", "\n")
    return ParsedMessage(headers=headers, text=text, attachments=attachments)


def part_json(msg: Message, message_id: str, part_id: str = "") -> dict[str, Any]:
    """The ``payload`` of ``format=full``: headers, body (inline data or attachmentId), parts."""
    headers = []
    for name, value in msg.items():
        try:
            headers.append({"name": name, "value": str(value)})
        except Exception:  # noqa: BLE001
            headers.append({"name": name, "value": ""})
    out: dict[str, Any] = {
        "partId": part_id,
        "mimeType": msg.get_content_type(),
        "filename": msg.get_filename() or "",
        "headers": headers,
    }
    if msg.is_multipart():
        out["body"] = {"size": 0}
        subparts = msg.get_payload()
        out["parts"] = [
            part_json(sub, message_id, str(i) if part_id == "" else f"{part_id}.{i}")
            for i, sub in enumerate(subparts if isinstance(subparts, list) else [])
        ]
    else:
        data = _part_bytes(msg)
        if _is_attachment(msg):
            out["body"] = {"attachmentId": attachment_id(message_id, part_id), "size": len(data)}
        else:
            out["body"] = {"size": len(data), "data": b64url_encode(data)}
    return out


def find_part(raw: bytes, part_id: str) -> Message | None:
    for pid, part in walk_parts(parse_bytes(raw)):
        if pid == part_id:
            return part
    return None


def part_data(part: Message) -> bytes:
    return _part_bytes(part)


def addresses(*values: str) -> list[str]:
    """Lower-cased email addresses in header values. Each value is parsed on its own and empty
    ones are left out: a strict ``getaddresses`` (CPython 3.11.10+, Debian 12's patched 3.11.2)
    answers a lone ('', '') for a joined "a@x, , " where an older one skipped the gaps."""
    found = getaddresses([v for v in values if v and v.strip()])
    return [addr.lower() for _, addr in found if addr]


def fix_boundaries(msg: EmailMessage, seed: str) -> None:
    """Give each multipart part of ``msg`` a boundary derived from ``seed`` (the message's
    world-issued Message-ID, or its content) instead of the email package's random one: a
    world built twice from one seed must hold the same bytes, or its state hash differs."""
    digest = hashlib.sha256(seed.encode()).hexdigest()[:32]
    for i, part in enumerate(p for p in msg.walk() if p.is_multipart()):
        part.set_boundary(f"=_k3_{digest}_{i}")


def build_message(
    *,
    sender: str,
    to: list[str] | str,
    subject: str,
    body: str,
    date: datetime,
    message_id: str | None = None,
    cc: list[str] | str | None = None,
    in_reply_to: str | None = None,
    references: list[str] | None = None,
    attachments: list[dict[str, Any]] | None = None,
) -> bytes:
    """An RFC 2822 message as a mail client would send it (attachments: filename, mime_type,
    content as str or bytes)."""
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = to if isinstance(to, str) else ", ".join(to)
    if cc:
        msg["Cc"] = cc if isinstance(cc, str) else ", ".join(cc)
    msg["Subject"] = subject
    msg["Date"] = format_datetime(date)
    if message_id:
        msg["Message-ID"] = message_id
    if in_reply_to:
        msg["In-Reply-To"] = in_reply_to
    if references:
        msg["References"] = " ".join(references)
    msg.set_content(body)
    for att in attachments or []:
        content = att.get("content", b"")
        data = content.encode() if isinstance(content, str) else bytes(content)
        maintype, _, subtype = att.get("mime_type", "application/octet-stream").partition("/")
        msg.add_attachment(data, maintype=maintype, subtype=subtype, filename=att["filename"])
    fix_boundaries(msg, message_id or f"{sender}|{msg['To']}|{subject}|{date.isoformat()}")
    return msg.as_bytes(policy=policy.SMTP)


def ensure_headers(raw: bytes, *, sender: str, date: datetime, message_id: str) -> bytes:
    """Add From / Date / Message-ID when the client left them out, as Gmail does on send."""
    msg = parse_bytes(raw)
    changed = False
    if not msg.get("From"):
        msg["From"] = sender
        changed = True
    if not msg.get("Date"):
        msg["Date"] = format_datetime(date)
        changed = True
    if not msg.get("Message-ID"):
        msg["Message-ID"] = message_id
        changed = True
    if not changed:
        return raw
    try:
        return msg.as_bytes(policy=policy.SMTP)
    except Exception as exc:  # noqa: BLE001 - unserialisable headers
        raise MimeError(f"cannot serialise the message: {exc}") from None
