"""A small client for oracle solvers (and tests): a world's apps over HTTP, plus its clock.

It takes any httpx-style client (``httpx.Client`` against a running service, or FastAPI's
``TestClient`` in-process) and uses only public routes: the app routes with the world token,
the clock routes with the service's API key. Helpers build real RFC 2822 mail the way a mail
client does (headers, threading by In-Reply-To / References).
"""

from __future__ import annotations

import base64
from datetime import datetime
from email.message import EmailMessage
from email.utils import getaddresses
from typing import Any

from services.tools.apps.gmail.mime import fix_boundaries


class APIFailure(RuntimeError):
    pass


class WorldAPI:
    def __init__(self, http: Any, world_id: str, token: str, api_key: str | None = None) -> None:
        self.http = http
        self.world_id = world_id
        self.token = token
        self.api_key = api_key

    # --- transport ------------------------------------------------------------------------

    def _call(self, method: str, path: str, *, world: bool = True, **kw: Any) -> Any:
        headers = kw.pop("headers", {})
        if world:
            headers["Authorization"] = f"Bearer {self.token}"
        elif self.api_key:
            headers["X-API-Key"] = self.api_key
        resp = self.http.request(method, path, headers=headers, **kw)
        if resp.status_code >= 400:
            raise APIFailure(f"{method} {path} -> {resp.status_code}: {resp.text[:500]}")
        return resp.json() if resp.content else None

    def app(self, method: str, path: str, **kw: Any) -> Any:
        """Call an app route: ``path`` relative to ``/worlds/{id}/`` (e.g. ``slack/api/x``)."""
        return self._call(method, f"/worlds/{self.world_id}/{path.lstrip('/')}", **kw)

    # --- clock ----------------------------------------------------------------------------

    def clock(self) -> datetime:
        out = self._call("GET", f"/worlds/{self.world_id}/clock", world=False)
        return datetime.fromisoformat(out["now"])

    def advance_to(self, when: datetime) -> dict[str, Any]:
        if when <= self.clock():
            return {"fired": []}
        return self._call(
            "POST",
            f"/worlds/{self.world_id}/clock/advance",
            world=False,
            json={"to": when.isoformat()},
        )

    # --- gmail ----------------------------------------------------------------------------

    def _g(self, method: str, path: str, **kw: Any) -> Any:
        return self.app(method, f"gmail/v1/users/me/{path}", **kw)

    def gmail_search(self, q: str = "", label_ids: list[str] | None = None) -> list[dict[str, Any]]:
        """Full messages matching ``q``, newest first (follows every page)."""
        out, token = [], None
        while True:
            params: dict[str, Any] = {"q": q, "maxResults": 100}
            if label_ids:
                params["labelIds"] = label_ids
            if token:
                params["pageToken"] = token
            page = self._g("GET", "messages", params=params)
            for ref in page.get("messages", []):
                out.append(self._g("GET", f"messages/{ref['id']}", params={"format": "full"}))
            token = page.get("nextPageToken")
            if not token:
                return out

    def gmail_by_msgid(self, msgid: str) -> dict[str, Any]:
        found = self.gmail_search(f"rfc822msgid:{msgid}")
        if not found:
            raise APIFailure(f"no message with Message-ID {msgid}")
        return found[0]

    @staticmethod
    def header(msg: dict[str, Any], name: str) -> str:
        for h in msg.get("payload", {}).get("headers", []):
            if h["name"].lower() == name.lower():
                return h["value"]
        return ""

    @staticmethod
    def body_text(msg: dict[str, Any]) -> str:
        def walk(part: dict[str, Any]) -> str:
            if part.get("mimeType") == "text/plain" and part.get("body", {}).get("data"):
                data = part["body"]["data"]
                return base64.urlsafe_b64decode(data + "=" * (-len(data) % 4)).decode()
            return "".join(walk(p) for p in part.get("parts", []))

        return walk(msg.get("payload", {}))

    def gmail_send(
        self,
        to: list[str] | str,
        subject: str,
        body: str,
        *,
        cc: list[str] | None = None,
        reply_to: dict[str, Any] | None = None,
        attachments: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Send mail; with ``reply_to`` (a full message) it threads as a reply."""
        msg = EmailMessage()
        msg["To"] = to if isinstance(to, str) else ", ".join(to)
        if cc:
            msg["Cc"] = ", ".join(cc)
        msg["Subject"] = subject
        thread_id = None
        if reply_to is not None:
            parent_id = self.header(reply_to, "Message-ID")
            refs = self.header(reply_to, "References")
            msg["In-Reply-To"] = parent_id
            msg["References"] = (refs + " " + parent_id).strip()
            thread_id = reply_to["threadId"]
        msg.set_content(body)
        for att in attachments or []:
            data = att["content"].encode() if isinstance(att["content"], str) else att["content"]
            maintype, _, subtype = att.get("mime_type", "text/plain").partition("/")
            msg.add_attachment(data, maintype=maintype, subtype=subtype, filename=att["filename"])
        # the same calls send the same bytes: the MIME boundary comes from the content, not chance
        names = ",".join(a["filename"] for a in attachments or [])
        fix_boundaries(msg, f"{msg['To']}|{msg['Cc']}|{subject}|{body}|{names}")
        raw = base64.urlsafe_b64encode(msg.as_bytes()).decode()
        body_json: dict[str, Any] = {"raw": raw}
        if thread_id:
            body_json["threadId"] = thread_id
        return self._g("POST", "messages/send", json=body_json)

    def gmail_reply(
        self,
        parent: dict[str, Any],
        body: str,
        *,
        cc: list[str] | None = None,
        to: list[str] | None = None,
        reply_all: bool = False,
        attachments: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        sender = self.header(parent, "Reply-To") or self.header(parent, "From")
        rcpt = to or [a for _, a in getaddresses([sender])]
        if reply_all:
            me = self._g("GET", "profile")["emailAddress"]
            others = getaddresses([self.header(parent, "To"), self.header(parent, "Cc")])
            cc = list(cc or []) + [a for _, a in others if a.lower() != me and a not in rcpt]
        subject = self.header(parent, "Subject")
        if not subject.lower().startswith("re:"):
            subject = "Re: " + subject
        return self.gmail_send(rcpt, subject, body, cc=cc, reply_to=parent, attachments=attachments)

    def gmail_label_id(self, name: str) -> str:
        for lab in self._g("GET", "labels")["labels"]:
            if lab["name"].lower() == name.lower():
                return lab["id"]
        return self._g("POST", "labels", json={"name": name})["id"]

    def gmail_modify(self, message_id: str, add: list[str] = (), remove: list[str] = ()) -> Any:  # type: ignore[assignment]
        return self._g(
            "POST",
            f"messages/{message_id}/modify",
            json={"addLabelIds": list(add), "removeLabelIds": list(remove)},
        )
