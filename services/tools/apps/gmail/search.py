"""Gmail's ``q`` search language: a tokenizer, a recursive-descent parser and an evaluator.

Grammar (Gmail's precedence: ``OR`` binds tighter than the implicit ``AND`` of juxtaposition)::

    query   := seq
    seq     := ortm*                       # implicit AND (the word AND is accepted too)
    ortm    := unary ("OR" unary)*
    unary   := ("-" | "NOT") unary | primary
    primary := "(" seq ")"                 # grouping
             | "{" seq "}"                 # braces: OR of everything inside
             | op ":" "(" seq ")"          # subject:(a b)  -> subject:a AND subject:b
             | op ":" "{" seq "}"          # from:{a b}     -> from:a OR from:b
             | op ":" value | '"' phrase '"' | word

Supported operators: from to cc bcc deliveredto subject label in is has filename after before
older newer older_than newer_than size larger smaller rfc822msgid category list. Anything
else before a colon is searched as text, as Gmail does. Times are the world's simulated clock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

OPERATORS = frozenset(
    "from to cc bcc deliveredto subject label in is has filename after before older newer "
    "older_than newer_than size larger smaller rfc822msgid category list".split()
)
MAX_QUERY_LEN = 2048
MAX_DEPTH = 64


class SearchError(ValueError):
    """The query cannot be understood; the message says where."""


# --- tokens ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tok:
    kind: str  # ( ) { } NEG OR AND TERM OPGROUP
    value: str = ""
    op: str | None = None
    quoted: bool = False


_WORD_END = set(' \t\r\n(){}"')


def tokenize(q: str) -> list[Tok]:
    if len(q) > MAX_QUERY_LEN:
        raise SearchError(f"query longer than {MAX_QUERY_LEN} characters")
    toks: list[Tok] = []
    i, n = 0, len(q)
    while i < n:
        c = q[i]
        if c.isspace():
            i += 1
            continue
        if c in "(){}":
            toks.append(Tok(c))
            i += 1
            continue
        if c in "-" and i + 1 < n and not q[i + 1].isspace():
            toks.append(Tok("NEG"))
            i += 1
            continue
        if c == '"':
            j = q.find('"', i + 1)
            if j < 0:
                j = n  # unterminated phrase: to the end, as Gmail does
            toks.append(Tok("TERM", q[i + 1 : j], quoted=True))
            i = j + 1
            continue
        j = i
        while j < n and q[j] not in _WORD_END:
            j += 1
        word = q[i:j]
        i = j
        if word in ("OR", "|"):
            toks.append(Tok("OR"))
            continue
        if word in ("AND", "&&"):
            toks.append(Tok("AND"))
            continue
        if word == "NOT":
            toks.append(Tok("NEG"))
            continue
        op, sep, value = word.partition(":")
        if sep and op.lower() in OPERATORS:
            op = op.lower()
            if not value and i < n and q[i] in "({":
                toks.append(Tok("OPGROUP", q[i], op=op))
                i += 1
                continue
            if not value and i < n and q[i] == '"':
                j = q.find('"', i + 1)
                j = n if j < 0 else j
                toks.append(Tok("TERM", q[i + 1 : j], op=op, quoted=True))
                i = j + 1
                continue
            toks.append(Tok("TERM", value, op=op))
            continue
        if word.startswith("+") and len(word) > 1:
            word = word[1:]  # +word: exact word, which is what plain words do here anyway
        toks.append(Tok("TERM", word))
    return toks


# --- syntax tree -------------------------------------------------------------------------


@dataclass
class Node:
    kind: str  # and or not term
    children: list[Node] = field(default_factory=list)
    op: str | None = None
    value: str = ""
    quoted: bool = False

    def walk(self):  # type: ignore[no-untyped-def]
        yield self
        for c in self.children:
            yield from c.walk()

    def __str__(self) -> str:
        if self.kind == "term":
            v = f'"{self.value}"' if self.quoted else self.value
            return f"{self.op}:{v}" if self.op else v
        if self.kind == "not":
            return f"-{self.children[0]}"
        sep = " OR " if self.kind == "or" else " "
        return "(" + sep.join(str(c) for c in self.children) + ")"


class _Parser:
    def __init__(self, toks: list[Tok]) -> None:
        self.toks = toks
        self.i = 0
        self.depth = 0

    def peek(self) -> Tok | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> Tok:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def seq(self, closer: str | None) -> Node:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise SearchError("query nests too deeply")
        items: list[Node] = []
        while True:
            tok = self.peek()
            if tok is None:
                if closer:
                    raise SearchError(f"missing {closer!r}")
                break
            if tok.kind in (")", "}"):
                if tok.kind != closer:
                    raise SearchError(f"unexpected {tok.kind!r}")
                break
            if tok.kind == "AND":
                self.take()
                continue
            if tok.kind == "OR":
                raise SearchError("OR needs a term on each side")
            items.append(self.orterm())
        self.depth -= 1
        return Node("and", items)

    def orterm(self) -> Node:
        items = [self.unary()]
        while (tok := self.peek()) is not None and tok.kind == "OR":
            self.take()
            nxt = self.peek()
            if nxt is None or nxt.kind in (")", "}", "OR", "AND"):
                raise SearchError("OR needs a term on each side")
            items.append(self.unary())
        return items[0] if len(items) == 1 else Node("or", items)

    def unary(self) -> Node:
        tok = self.peek()
        if tok is not None and tok.kind == "NEG":
            self.take()
            if self.peek() is None:
                raise SearchError("'-' needs a term after it")
            return Node("not", [self.unary()])
        return self.primary()

    def primary(self) -> Node:
        tok = self.take()
        if tok.kind == "(":
            node = self.seq(")")
            self.take()
            return node
        if tok.kind == "{":
            node = self.seq("}")
            self.take()
            return Node("or", node.children)
        if tok.kind == "OPGROUP":
            closer = ")" if tok.value == "(" else "}"
            node = self.seq(closer)
            self.take()
            _apply_op(node, tok.op or "")
            return node if tok.value == "(" else Node("or", node.children)
        if tok.kind == "TERM":
            return Node("term", op=tok.op, value=tok.value, quoted=tok.quoted)
        raise SearchError(f"unexpected {tok.kind!r}")


def _apply_op(node: Node, op: str) -> None:
    for n in node.walk():
        if n.kind == "term" and n.op is None:
            n.op = op


def parse_query(q: str | None) -> Node | None:
    """The query's syntax tree, or None for an empty query; :class:`SearchError` if malformed."""
    if not q or not q.strip():
        return None
    parser = _Parser(tokenize(q))
    node = parser.seq(None)
    if parser.peek() is not None:
        raise SearchError(f"unexpected {parser.peek().kind!r}")  # type: ignore[union-attr]
    for n in node.walk():
        if n.kind == "term" and n.op:
            _validate(n)
    return node if node.children else None


# --- evaluation --------------------------------------------------------------------------


_WORD = re.compile(r"[\w']+", re.UNICODE)


def words(text: str) -> list[str]:
    return [w.strip("'") for w in _WORD.findall(text.lower()) if w.strip("'")]


def _contains_words(haystack: list[str], needle: list[str]) -> bool:
    if not needle:
        return True
    if len(needle) == 1:
        return needle[0] in haystack
    first, n = needle[0], len(needle)
    return any(haystack[i : i + n] == needle for i, w in enumerate(haystack) if w == first)


@dataclass
class SearchDoc:
    """One message as the evaluator sees it (built by the app from its row)."""

    id: str
    labels: set[str]
    internal_date: datetime
    size: int
    sender: str
    to: str
    cc: str
    bcc: str
    delivered_to: str
    subject: str
    text: str
    msgid: str
    list_id: str
    filenames: list[str]
    _cache: dict[str, Any] = field(default_factory=dict)

    def words_of(self, what: str) -> list[str]:
        if what not in self._cache:
            if what == "subject":
                self._cache[what] = words(self.subject)
            else:
                self._cache[what] = words(
                    " ".join(
                        [self.sender, self.to, self.cc, self.subject, self.text] + self.filenames
                    )
                )
        return self._cache[what]


@dataclass
class SearchEnv:
    now: datetime
    me: str
    label_ids_by_name: dict[str, str]  # normalised name -> id (system and user)
    user_label_ids: set[str]


def _norm_label(name: str) -> str:
    return re.sub(r"[\s/_-]+", "-", name.strip().lower())


SYSTEM_IN = {
    "inbox": "INBOX",
    "sent": "SENT",
    "draft": "DRAFT",
    "drafts": "DRAFT",
    "trash": "TRASH",
    "spam": "SPAM",
    "starred": "STARRED",
    "important": "IMPORTANT",
    "unread": "UNREAD",
    "chats": "CHAT",
    "chat": "CHAT",
}
CATEGORIES = {
    "primary": "CATEGORY_PERSONAL",
    "personal": "CATEGORY_PERSONAL",
    "social": "CATEGORY_SOCIAL",
    "promotions": "CATEGORY_PROMOTIONS",
    "updates": "CATEGORY_UPDATES",
    "forums": "CATEGORY_FORUMS",
}
_REL = re.compile(r"^(\d{1,6})([dmyhw])$")
_SIZE = re.compile(r"^(\d{1,12})([kmb]?)$")


def _parse_date(value: str) -> datetime:
    v = value.strip()
    if v.isdigit() and len(v) >= 9:
        return datetime.fromtimestamp(int(v), UTC)
    for fmt in ("%Y/%m/%d", "%Y-%m-%d", "%m/%d/%Y", "%Y/%m/%d %H:%M"):
        try:
            return datetime.strptime(v, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    raise SearchError(f"cannot read the date {value!r}; use YYYY/MM/DD or epoch seconds")


def _parse_rel(value: str) -> timedelta:
    m = _REL.match(value.strip().lower())
    if not m:
        raise SearchError(f"cannot read the age {value!r}; use e.g. 3d, 2m, 1y")
    n, unit = int(m.group(1)), m.group(2)
    days = {"d": 1, "w": 7, "m": 30, "y": 365}.get(unit)
    return timedelta(hours=n) if unit == "h" else timedelta(days=n * (days or 1))


def _parse_size(value: str) -> int:
    m = _SIZE.match(value.strip().lower())
    if not m:
        raise SearchError(f"cannot read the size {value!r}; use bytes or e.g. 10K, 5M")
    mult = {"": 1, "b": 1, "k": 1024, "m": 1024 * 1024}[m.group(2)]
    return int(m.group(1)) * mult


def _validate(node: Node) -> None:
    op, v = node.op, node.value
    if op in ("after", "before", "older", "newer"):
        _parse_date(v)
    elif op in ("older_than", "newer_than"):
        _parse_rel(v)
    elif op in ("size", "larger", "smaller"):
        _parse_size(v)


def _addr_match(header: str, value: str, env: SearchEnv) -> bool:
    v = value.lower().strip()
    if not v:
        return True
    if v == "me":
        v = env.me.lower()
    return v in header.lower()


def _term(node: Node, doc: SearchDoc, env: SearchEnv) -> bool:
    op, value = node.op, node.value
    v = value.lower().strip()
    if op is None:
        return _contains_words(doc.words_of("all"), words(value))
    if op == "from":
        return _addr_match(doc.sender, value, env)
    if op == "to":
        return _addr_match(doc.to, value, env) or _addr_match(doc.delivered_to, value, env)
    if op == "cc":
        return _addr_match(doc.cc, value, env)
    if op == "bcc":
        return _addr_match(doc.bcc, value, env)
    if op == "deliveredto":
        return _addr_match(doc.delivered_to or doc.to, value, env)
    if op == "subject":
        return _contains_words(doc.words_of("subject"), words(value))
    if op == "label":
        lid = env.label_ids_by_name.get(_norm_label(value))
        if lid is None and (value in env.user_label_ids or value in SYSTEM_IN.values()):
            lid = value
        return lid is not None and lid in doc.labels
    if op == "in":
        if v == "anywhere":
            return True
        lid = SYSTEM_IN.get(v) or env.label_ids_by_name.get(_norm_label(value))
        return lid is not None and lid in doc.labels
    if op == "is":
        if v == "read":
            return "UNREAD" not in doc.labels
        if v in ("unread", "starred", "important", "chat"):
            return SYSTEM_IN.get(v, v.upper()) in doc.labels
        return False  # snoozed, muted, …: nothing is
    if op == "has":
        if v == "attachment":
            return bool(doc.filenames)
        if v == "userlabels":
            return bool(doc.labels & env.user_label_ids)
        if v == "nouserlabels":
            return not doc.labels & env.user_label_ids
        if v in ("yellow-star", "star"):
            return "STARRED" in doc.labels
        if v in ("drive", "document", "spreadsheet", "presentation", "youtube"):
            return v in doc.text.lower()
        return False
    if op == "filename":
        return any(
            f.lower() == v or f.lower().endswith("." + v) or (v and v in f.lower())
            for f in doc.filenames
        )
    if op in ("after", "newer"):
        return doc.internal_date >= _parse_date(value)
    if op in ("before", "older"):
        return doc.internal_date < _parse_date(value)
    if op == "older_than":
        return doc.internal_date < env.now - _parse_rel(value)
    if op == "newer_than":
        return doc.internal_date > env.now - _parse_rel(value)
    if op in ("size", "larger"):
        return doc.size > _parse_size(value)
    if op == "smaller":
        return doc.size < _parse_size(value)
    if op == "rfc822msgid":
        return doc.msgid.strip("<>").lower() == v.strip("<>")
    if op == "category":
        return CATEGORIES.get(v, "") in doc.labels
    if op == "list":
        return bool(v) and v in doc.list_id.lower()
    return False


def matches(node: Node | None, doc: SearchDoc, env: SearchEnv) -> bool:
    if node is None:
        return True
    if node.kind == "and":
        return all(matches(c, doc, env) for c in node.children)
    if node.kind == "or":
        return any(matches(c, doc, env) for c in node.children)
    if node.kind == "not":
        return not matches(node.children[0], doc, env)
    return _term(node, doc, env)


def mentions_spam_or_trash(node: Node | None) -> bool:
    """Whether the query names trash or spam itself (then they are not excluded by default)."""
    if node is None:
        return False
    for n in node.walk():
        if n.kind == "term" and n.op in ("in", "label", "is"):
            if n.value.lower() in ("trash", "spam", "anywhere"):
                return True
    return False
