"""Constraints whose language is empty, found before any token is generated.

A grammar that derives no finite text (``start: "a" start``, or ``start: start "a"`` with no
base case) has no way to end: xgrammar's jump-forward search follows the one allowed character
for ever, inside the engine step. A JSON schema no value satisfies (``allOf`` of a string and an
integer) is read by xgrammar as partly supported and enforced as something else, so the answer
fails the schema it was constrained by. Both are refused up front (the API answers 400).

- :func:`unproductive_rule`: on xgrammar's own EBNF (what it built from Lark, a regex or a JSON
  schema), the rules reachable from ``root`` that derive no finite string (a fixpoint over
  "some alternative has only productive parts");
- :func:`empty_schema`: the JSON types a schema admits at all (``type``, ``enum``/``const``,
  ``allOf``/``anyOf``/``oneOf``, local ``$ref``, bounds that contradict each other, required
  properties no value satisfies); empty -> the reason.

Both are conservative: what they cannot read is taken as satisfiable.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

# ----- EBNF productivity ---------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<str>"(?:[^"\\]|\\.)*")
    | (?P<cls>\[(?:[^\]\\]|\\.)*\])
    | (?P<rep>\{\s*(?P<lo>\d+)\s*(?:,\s*-?\d+\s*)?\})
    | (?P<macro>[A-Za-z_]\w*\((?:[^()]|\([^()]*\))*\))
    | (?P<id>[A-Za-z_][\w.]*)
    | (?P<op>\(=|[()|*+?])
    )""",
    re.VERBOSE,
)


@dataclass
class _Node:
    kind: str  # "term" | "ref" | "alt" | "seq" | "rep" | "look"
    name: str = ""
    items: list[_Node] | None = None
    min: int = 0


class _Unreadable(ValueError):
    pass


def _tokens(body: str) -> list[tuple[str, str, int]]:
    out: list[tuple[str, str, int]] = []
    pos = 0
    while pos < len(body):
        if body[pos:].strip() == "":
            break
        m = _TOKEN.match(body, pos)
        if m is None or m.end() == pos:
            raise _Unreadable(body[pos : pos + 20])
        kind = "rep" if m.group("rep") else m.lastgroup or ""
        out.append((kind, m.group(kind), int(m.group("lo") or 0)))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, body: str) -> None:
        self.toks = _tokens(body)
        self.i = 0

    def peek(self) -> tuple[str, str, int] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def alt(self) -> _Node:
        seqs = [self.seq()]
        while (t := self.peek()) is not None and t[:2] == ("op", "|"):
            self.i += 1
            seqs.append(self.seq())
        return _Node("alt", items=seqs)

    def seq(self) -> _Node:
        items: list[_Node] = []
        while (t := self.peek()) is not None and not (t[0] == "op" and t[1] in "|)"):
            items.append(self.postfix(self.atom()))
        return _Node("seq", items=items)

    def atom(self) -> _Node:
        kind, value, _ = self.toks[self.i]
        self.i += 1
        if kind in ("str", "cls", "macro"):
            return _Node("term")
        if kind == "id":
            return _Node("ref", name=value)
        if kind == "op" and value in ("(", "(="):
            inner = self.alt()
            if self.peek() is None or self.peek()[:2] != ("op", ")"):  # type: ignore[index]
                raise _Unreadable("unclosed group")
            self.i += 1
            return _Node("look") if value == "(=" else inner
        raise _Unreadable(value)

    def postfix(self, node: _Node) -> _Node:
        while (t := self.peek()) is not None and (t[0] == "rep" or t[1] in ("*", "+", "?")):
            self.i += 1
            low = t[2] if t[0] == "rep" else (1 if t[1] == "+" else 0)
            node = _Node("rep", items=[node], min=low)
        return node


def _productive(node: _Node, done: set[str]) -> bool:
    if node.kind in ("term", "look"):
        return True
    if node.kind == "ref":
        return node.name in done
    items = node.items or []
    if node.kind == "alt":
        return any(_productive(n, done) for n in items)
    if node.kind == "seq":
        return all(_productive(n, done) for n in items)
    return node.min == 0 or _productive(items[0], done)  # rep


def _refs(node: _Node) -> set[str]:
    if node.kind == "ref":
        return {node.name}
    return set().union(*(_refs(n) for n in node.items or []))


def unproductive_rule(ebnf: str, root: str = "root") -> str | None:
    """The first rule reachable from ``root`` that derives no finite string, or None (also when
    the text is not xgrammar's EBNF as this reads it)."""
    rules: dict[str, _Node] = {}
    try:
        for line in ebnf.splitlines():
            if "::=" not in line:
                continue
            name, body = line.split("::=", 1)
            parser = _Parser(body)
            rules[name.strip()] = parser.alt()
            if parser.peek() is not None:
                raise _Unreadable(body)
    except (_Unreadable, IndexError):
        return None
    if root not in rules:
        return None
    done: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, node in rules.items():
            if name not in done and _productive(node, done):
                done.add(name)
                changed = True
    reach, todo = {root}, [root]
    while todo:
        node = rules.get(todo.pop())
        for ref in _refs(node) if node is not None else ():
            if ref not in reach:
                reach.add(ref)
                todo.append(ref)
    order = [root, *sorted(reach - {root})]
    return next((r for r in order if r in rules and r not in done), None)


# ----- JSON schema emptiness -----------------------------------------------------------------------

_TYPES = frozenset({"null", "boolean", "integer", "number", "string", "array", "object"})
_MAX_DEPTH = 64


def _type_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


class _Schema:
    """The types a schema admits, within one document (for its local ``$ref``)."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.active: set[int] = set()

    def resolve(self, ref: str) -> Any:
        if not ref.startswith("#"):
            return True
        node = self.root
        for part in [p for p in ref[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return True  # xgrammar refuses a dangling $ref itself
        return node

    def types(self, schema: Any, depth: int = 0) -> set[str]:
        if schema is True or schema == {} or not isinstance(schema, dict) or depth > _MAX_DEPTH:
            return set(_TYPES) if schema is not False else set()
        if id(schema) in self.active:  # a cycle: taken as satisfiable
            return set(_TYPES)
        self.active.add(id(schema))
        try:
            return self._types(schema, depth + 1)
        finally:
            self.active.discard(id(schema))

    def _types(self, s: dict[str, Any], depth: int) -> set[str]:
        out = set(_TYPES)
        if isinstance(s.get("$ref"), str):
            out &= self.types(self.resolve(s["$ref"]), depth)
        t = s.get("type")
        if isinstance(t, str | list):
            named = {t} if isinstance(t, str) else {x for x in t if isinstance(x, str)}
            if "number" in named:
                named.add("integer")
            out &= named
        values = [s["const"]] if "const" in s else s.get("enum")
        if isinstance(values, list):
            out &= {_type_of(v) for v in values} | (
                {"number"} if any(_type_of(v) == "integer" for v in values) else set()
            )
            if not values:
                return set()
        for sub in s.get("allOf") or []:
            out &= self.types(sub, depth)
        for key in ("anyOf", "oneOf"):
            if isinstance(s.get(key), list):
                out &= set().union(*(self.types(sub, depth) for sub in s[key]))
        return {t for t in out if self._fits(t, s, depth)}

    def _fits(self, t: str, s: dict[str, Any], depth: int) -> bool:
        """Type ``t``'s own keywords (and those of ``allOf`` branches) leave some value."""
        merged = [s, *[b for b in s.get("allOf") or [] if isinstance(b, dict)]]
        if t in ("integer", "number"):
            lo, hi = _num_bounds(merged)
            if lo[0] > hi[0] or (lo[0] == hi[0] and (lo[1] or hi[1])):
                return False
            if t == "integer" and not (math.isinf(lo[0]) or math.isinf(hi[0])):
                first = math.floor(lo[0]) + 1 if lo[1] or lo[0] != math.floor(lo[0]) else lo[0]
                last = math.ceil(hi[0]) - 1 if hi[1] or hi[0] != math.ceil(hi[0]) else hi[0]
                return first <= last
            return True
        if t == "string":
            return _lowest(merged, "minLength") <= _highest(merged, "maxLength")
        if t == "array":
            return _lowest(merged, "minItems") <= _highest(merged, "maxItems") and not (
                _lowest(merged, "minItems") > 0 and any(b.get("items") is False for b in merged)
            )
        if t == "object":
            return self._object_fits(merged, depth)
        return True

    def _object_fits(self, merged: list[dict[str, Any]], depth: int) -> bool:
        required: set[str] = set()
        for b in merged:
            required |= {r for r in b.get("required") or [] if isinstance(r, str)}
        if len(required) > _highest(merged, "maxProperties"):
            return False
        for name in required:
            subs: list[Any] = []
            for b in merged:
                props = b.get("properties") if isinstance(b.get("properties"), dict) else {}
                if name in props:
                    subs.append(props[name])
                elif b.get("additionalProperties") is False and not b.get("patternProperties"):
                    return False
            if subs and not self.types({"allOf": subs}, depth):
                return False
        return _lowest(merged, "minProperties") <= _highest(merged, "maxProperties")


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _lowest(merged: list[dict[str, Any]], key: str) -> float:
    return max([0.0, *(n for b in merged if (n := _num(b.get(key))) is not None)])


def _highest(merged: list[dict[str, Any]], key: str) -> float:
    return min([math.inf, *(n for b in merged if (n := _num(b.get(key))) is not None)])


def _num_bounds(
    merged: list[dict[str, Any]],
) -> tuple[tuple[float, bool], tuple[float, bool]]:
    """(lowest, exclusive), (highest, exclusive) over ``minimum``/``exclusiveMinimum``/..."""
    lo: tuple[float, bool] = (-math.inf, False)
    hi: tuple[float, bool] = (math.inf, False)
    for b in merged:
        for key, excl in (("minimum", False), ("exclusiveMinimum", True)):
            if (n := _num(b.get(key))) is not None and (n, excl) > lo:
                lo = (n, excl)
        for key, excl in (("maximum", False), ("exclusiveMaximum", True)):
            if (n := _num(b.get(key))) is not None and (n < hi[0] or (n == hi[0] and excl)):
                hi = (n, excl)
    return lo, hi


def empty_schema(schema: Any) -> str | None:
    """Why no JSON value satisfies ``schema``, or None when one may."""
    if schema is False:
        return "the schema is false"
    if not _Schema(schema).types(schema):
        return "no JSON value satisfies it (its types, enums, bounds or allOf branches conflict)"
    return None
