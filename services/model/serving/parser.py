"""Streaming parser: generated XTML -> OpenAI ``reasoning_content``, ``content``, ``tool_calls``.

It consumes :class:`~services.model.tokenizer.Piece` s (text, or one special token) as the engine
detokenises them and emits deltas at once, so SSE clients see reasoning, content and tool-call
arguments while they are generated. Tool-call arguments are re-assembled into the JSON string
OpenAI clients expect: string arguments stream JSON-escaped as they arrive; typed (``type="json"``)
arguments are held until their element closes and validated, and an invalid one becomes a string
(with an error noted) so the emitted ``arguments`` always parse as a JSON object.

Malformed output never raises: unknown or misplaced elements, stray text, a missing close, or
text after ``[end_of_msg]`` are recorded in ``errors``, stray text goes to ``content``, and the
raw text (markers included) is kept in :attr:`ParsedMessage.raw`.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from services.model.serving.template import Mode
from services.model.tokenizer.base import CLOSE, END_OF_MSG, OPEN, SEP, XTML_TOKENS, Piece


@dataclass(frozen=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True)
class ContentDelta:
    text: str


@dataclass(frozen=True)
class ToolCallStart:
    index: int
    id: str
    name: str


@dataclass(frozen=True)
class ToolCallArgsDelta:
    index: int
    text: str


Event = ReasoningDelta | ContentDelta | ToolCallStart | ToolCallArgsDelta


@dataclass
class ParsedToolCall:
    index: int
    id: str
    name: str
    arguments: str = ""


@dataclass
class ParsedMessage:
    """What one assistant turn parsed into; ``errors`` is empty for well-formed output."""

    reasoning_content: str | None
    content: str | None
    tool_calls: list[ParsedToolCall]
    errors: list[str]
    raw: str
    finished: bool = False  # saw [end_of_msg]


_HEADER = re.compile(r"\s*([A-Za-z_][\w.-]*)")
_ATTR = re.compile(r"\s*([A-Za-z_][\w.-]*)\s*(:?=)\s*")
_DECODER = json.JSONDecoder()


def parse_header(header: str) -> tuple[str, dict[str, Any], list[str]]:
    """``tag a="x" b:=1`` -> (tag, attrs, problems). Never raises."""
    problems: list[str] = []
    m = _HEADER.match(header)
    if not m:
        return "", {}, [f"element header {header!r} has no tag name"]
    tag, pos, attrs = m.group(1), m.end(), {}
    while pos < len(header):
        if not header[pos:].strip():
            break
        am = _ATTR.match(header, pos)
        if not am:
            problems.append(f"cannot read attributes {header[pos:]!r} of <{tag}>")
            break
        name, op, pos = am.group(1), am.group(2), am.end()
        try:
            value, end = _DECODER.raw_decode(header, pos)
        except json.JSONDecodeError:
            problems.append(f"attribute {name} of <{tag}> has an unreadable value")
            break
        if op == "=" and not isinstance(value, str):
            problems.append(f"attribute {name} of <{tag}> should be a quoted string")
        attrs[name] = value
        pos = end
    return tag, attrs, problems


def split_markers(text: str) -> list[Piece]:
    """Split raw text on the literal XTML markers (for text that lost its token boundaries)."""
    pattern = "(" + "|".join(re.escape(t) for t in XTML_TOKENS) + ")"
    pieces = []
    for part in re.split(pattern, text):
        if not part:
            continue
        pieces.append(Piece(part, special=part in XTML_TOKENS))
    return pieces


@dataclass
class _Frame:
    tag: str
    attrs: dict[str, Any] = field(default_factory=dict)
    buf: list[str] = field(default_factory=list)  # held text of typed args / json blocks
    call: ParsedToolCall | None = None  # for call frames
    num_args: int = 0  # for call frames
    json_block: bool = False  # a call whose arguments came as one [open]json block


_CHANNELS = ("think", "response", "tools")


def _new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


class StreamParser:
    """Incremental parser of one assistant turn that began with the ``mode`` prefix."""

    def __init__(self, mode: Mode = "think", *, new_id: Callable[[], str] = _new_call_id) -> None:
        self.mode = mode
        self._new_id = new_id
        self._stack: list[_Frame] = [_Frame(mode)]
        self._pending: tuple[str, list[str]] | None = None  # ("open"|"close", header text)
        self._reasoning: list[str] = []
        self._content: list[str] = []
        self._saw_think = mode == "think"
        self.tool_calls: list[ParsedToolCall] = []
        self.errors: list[str] = []
        self._raw: list[str] = []
        self.finished = False
        self._after_end_noted = False
        self._stray_noted: set[str] = set()
        self.truncated = False  # max_tokens cut a tool call: its arguments are not closed

    @property
    def channel(self) -> str | None:
        """The channel being generated (``think``, ``response``, ``tools``), if any."""
        return self._stack[0].tag if self._stack else None

    @property
    def thinking(self) -> bool:
        """Inside the think channel's text (not in a marker's header)."""
        return self.channel == "think" and self._pending is None

    # -- input -----------------------------------------------------------------------------

    def feed(self, piece: Piece) -> list[Event]:
        self._raw.append(piece.text)
        if self.finished:
            if piece.text.strip() and not self._after_end_noted:
                self._after_end_noted = True
                self.errors.append("output continues after [end_of_msg]; ignored")
            return []
        return self._special(piece.text) if piece.special else self._text(piece.text)

    def feed_many(self, pieces: Iterable[Piece]) -> list[Event]:
        out: list[Event] = []
        for p in pieces:
            out.extend(self.feed(p))
        return out

    def feed_text(self, text: str) -> list[Event]:
        """Feed raw text whose markers are literal strings (see :func:`split_markers`)."""
        return self.feed_many(split_markers(text))

    def finish(self, cut: bool = False) -> list[Event]:
        """End of generation: close whatever is still open so the arguments stay valid JSON;
        ``cut`` (max_tokens ended it) leaves open arguments as generated instead, unrepaired."""
        out: list[Event] = []
        if self._pending is not None:
            kind, buf = self._pending
            self.errors.append(f"unterminated [{kind}] {''.join(buf)!r} at end of output")
            self._pending = None
        while self._stack:
            frame = self._stack[-1]
            if frame.tag in ("arg", "json", "call", "tools") and not self.finished:
                self.errors.append(f"<{frame.tag}> not closed at end of output")
                if cut:
                    self.truncated = True
                    out.extend(self._cut(self._stack.pop()))
                    continue
            out.extend(self._pop())
        return out

    def _cut(self, frame: _Frame) -> list[Event]:
        """A frame left open by max_tokens: its held text goes out as it is."""
        if frame.tag == "arg" and frame.attrs.get("type") == "json":
            call_frame = self._call_frame()
            if call_frame is not None:
                key = str(frame.attrs.get("name", "arg"))
                return self._args(self._key_prefix(call_frame, key) + "".join(frame.buf))
        if frame.tag == "json":
            call_frame = self._call_frame()
            if call_frame is not None and call_frame.num_args == 0:
                call_frame.json_block = True
                call_frame.num_args = 1
                return self._args("".join(frame.buf))
        return []

    def result(self) -> ParsedMessage:
        reasoning = "".join(self._reasoning)
        content = "".join(self._content)
        return ParsedMessage(
            reasoning_content=reasoning if (reasoning or self._saw_think) else None,
            content=content if (content or not self.tool_calls) else None,
            tool_calls=list(self.tool_calls),
            errors=list(self.errors),
            raw="".join(self._raw),
            finished=self.finished,
        )

    # -- internals -------------------------------------------------------------------------

    def _special(self, tok: str) -> list[Event]:
        out: list[Event] = []
        if tok == SEP:
            if self._pending is None:
                self.errors.append("[sep] outside an element header; ignored")
                return out
            kind, buf = self._pending
            self._pending = None
            header = "".join(buf)
            return self._open(header) if kind == "open" else self._close(header)
        if self._pending is not None:
            kind, buf = self._pending
            self.errors.append(f"[{kind}] {''.join(buf)!r} not ended by [sep]; dropped")
            self._pending = None
        if tok == OPEN:
            self._pending = ("open", [])
        elif tok == CLOSE:
            self._pending = ("close", [])
        elif tok == END_OF_MSG:
            while self._stack:
                frame = self._stack[-1]
                if frame.tag not in ("think", "response"):
                    self.errors.append(f"<{frame.tag}> not closed before [end_of_msg]")
                out.extend(self._pop())
            self.finished = True
        else:
            self.errors.append(f"unexpected special token {tok!r}; ignored")
        return out

    def _text(self, text: str) -> list[Event]:
        if not text:
            return []
        if self._pending is not None:
            self._pending[1].append(text)
            return []
        top = self._stack[-1] if self._stack else None
        tag = top.tag if top else ""
        if tag == "think":
            self._reasoning.append(text)
            return [ReasoningDelta(text)]
        if tag == "response":
            self._content.append(text)
            return [ContentDelta(text)]
        if tag == "arg" and top is not None and top.attrs.get("type") != "json":
            escaped = json.dumps(text, ensure_ascii=False)[1:-1]
            return self._args(escaped)
        if tag in ("arg", "json") and top is not None:
            top.buf.append(text)
            return []
        if tag in ("tools", "call") and not text.strip():
            return []  # whitespace between elements
        where = f"<{tag}>" if tag else "outside any channel"
        if where not in self._stray_noted:
            self._stray_noted.add(where)
            self.errors.append(f"text {where} kept as content")
        self._content.append(text)
        return [ContentDelta(text)]

    def _args(self, text: str, call: ParsedToolCall | None = None) -> list[Event]:
        call = call or self._current_call()
        if call is None or not text:
            return []
        call.arguments += text
        return [ToolCallArgsDelta(call.index, text)]

    def _current_call(self) -> ParsedToolCall | None:
        for frame in reversed(self._stack):
            if frame.tag == "call":
                return frame.call
        return None

    def _call_frame(self) -> _Frame | None:
        for frame in reversed(self._stack):
            if frame.tag == "call":
                return frame
        return None

    def _open(self, header: str) -> list[Event]:
        tag, attrs, problems = parse_header(header)
        self.errors.extend(problems)
        out: list[Event] = []
        if tag in _CHANNELS:
            if self._stack:
                self.errors.append(
                    f"<{tag}> opened inside <{self._stack[-1].tag}>; closing it first"
                )
            while self._stack:
                out.extend(self._pop())
            if tag == "think":
                self._saw_think = True
            self._stack.append(_Frame(tag, attrs))
            return out
        if tag == "call":
            while self._stack and self._stack[-1].tag not in ("tools",):
                if self._stack[-1].tag in ("think", "response"):
                    self.errors.append(f"<call> inside <{self._stack[-1].tag}>; closing it")
                else:
                    self.errors.append(f"<{self._stack[-1].tag}> not closed before <call>")
                out.extend(self._pop())
            if not self._stack:
                self._stack.append(_Frame("tools"))
            name = attrs.get("tool")
            if not isinstance(name, str) or not name:
                self.errors.append("<call> without a tool name")
                name = ""
            call = ParsedToolCall(index=len(self.tool_calls), id=self._new_id(), name=name)
            self.tool_calls.append(call)
            self._stack.append(_Frame("call", attrs, call=call))
            out.append(ToolCallStart(call.index, call.id, call.name))
            return out
        if tag in ("arg", "json"):
            while self._stack and self._stack[-1].tag in ("arg", "json"):
                self.errors.append(f"<{self._stack[-1].tag}> not closed before <{tag}>")
                out.extend(self._pop())
            frame = self._call_frame()
            if frame is None or self._stack[-1] is not frame:
                self.errors.append(f"<{tag}> outside a <call>; ignored")
                self._stack.append(_Frame(f"ignored-{tag}", attrs))
                return out
            if frame.json_block or (tag == "json" and frame.num_args > 0):
                self.errors.append(f"<{tag}> mixes typed and JSON-block arguments; ignored")
                self._stack.append(_Frame(f"ignored-{tag}", attrs))
                return out
            new = _Frame(tag, attrs)
            if tag == "arg":
                key = attrs.get("name")
                if not isinstance(key, str):
                    self.errors.append("<arg> without a name")
                    key = f"arg{frame.num_args}"
                    new.attrs["name"] = key
                if attrs.get("type") != "json":
                    out.extend(self._args(self._key_prefix(frame, key) + '"'))
            self._stack.append(new)
            return out
        self.errors.append(f"unknown element <{tag or header}>")
        self._stack.append(_Frame(tag or "unknown", attrs))
        return out

    def _key_prefix(self, call_frame: _Frame, key: str) -> str:
        sep = "{" if call_frame.num_args == 0 else ", "
        call_frame.num_args += 1
        return sep + json.dumps(key, ensure_ascii=False) + ": "

    def _close(self, header: str) -> list[Event]:
        tag, _, problems = parse_header(header)
        self.errors.extend(problems)
        names = [f.tag for f in self._stack]
        if tag not in names and f"ignored-{tag}" not in names:
            self.errors.append(f"[close]{tag} matches no open element; ignored")
            return []
        out: list[Event] = []
        while self._stack:
            top = self._stack[-1].tag
            if top in (tag, f"ignored-{tag}"):
                out.extend(self._pop())
                break
            self.errors.append(f"<{top}> not closed before [close]{tag}")
            out.extend(self._pop())
        return out

    def _pop(self) -> list[Event]:
        frame = self._stack.pop()
        out: list[Event] = []
        if frame.tag == "arg":
            if frame.attrs.get("type") == "json":
                raw = "".join(frame.buf)
                key = frame.attrs.get("name", "arg")
                try:
                    value = json.loads(raw)
                    encoded = json.dumps(value, ensure_ascii=False)
                except json.JSONDecodeError:
                    self.errors.append(f"argument {key!r} is not valid JSON; kept as a string")
                    encoded = json.dumps(raw, ensure_ascii=False)
                call_frame = self._call_frame()
                if call_frame is not None:
                    out.extend(self._args(self._key_prefix(call_frame, str(key)) + encoded))
            else:
                out.extend(self._args('"'))
        elif frame.tag == "json":
            raw = "".join(frame.buf)
            call_frame = self._call_frame()
            try:
                value = json.loads(raw)
            except json.JSONDecodeError:
                value = None
            if not isinstance(value, dict):
                self.errors.append("<json> arguments are not a JSON object; kept as a string")
                value = {"_raw": raw}
            if call_frame is not None and call_frame.num_args == 0:
                call_frame.json_block = True
                call_frame.num_args = 1
                out.extend(self._args(json.dumps(value, ensure_ascii=False)))
        elif frame.tag == "call" and frame.call is not None and not frame.json_block:
            out.extend(self._args("{}" if frame.num_args == 0 else "}", frame.call))
        return out


def parse_assistant(pieces: Iterable[Piece], mode: Mode = "think") -> ParsedMessage:
    """Parse a complete turn (pieces after the generation prefix)."""
    parser = StreamParser(mode)
    parser.feed_many(pieces)
    parser.finish()
    return parser.result()


def parse_assistant_text(text: str, mode: Mode = "think") -> ParsedMessage:
    """Parse a complete turn given as raw text with literal markers."""
    return parse_assistant(split_markers(text), mode)
