"""Constraints whose language is empty are found before decoding: grammars that derive no finite
text (the endless and left-recursive ones that hung xgrammar's jump-forward search inside the
engine step) and JSON schemas no value satisfies (answered 200 with a value failing them)."""

from __future__ import annotations

import json

import pytest
import xgrammar as xgr

from services.model.serving.emptiness import empty_schema, unproductive_rule

LARK = [
    ('start: "a" start', "root"),
    ('start: start "a"', "root"),
    ("start: a\na: b\nb: a", "root"),
    ('start: "b" | "a" x\nx: "a" x', "x"),  # the root ends, but not once it took "a"
    ('start: start "a" | "b"', None),
    ('start: x\nx: "(" x ")" | ""', None),
    ('start: "a"+ b? c*\nb: /[0-9]{2,4}/\nc: "x" | "y"', None),
    ('start: "a"~2..5 /\\w+/ _NL\n_NL: /\\n/', None),
    ('start: "a"~3 start', "root"),
]


@pytest.mark.parametrize(("lark", "rule"), LARK, ids=[str(i) for i in range(len(LARK))])
def test_unproductive_rule_on_xgrammars_own_ebnf(lark, rule):
    assert unproductive_rule(str(xgr.Grammar.from_lark(lark))) == rule


def test_unreadable_ebnf_is_taken_as_satisfiable():
    assert unproductive_rule("root ::= ((@@@))") is None
    assert unproductive_rule("no rules here") is None


EMPTY = [
    {"allOf": [{"type": "string"}, {"type": "integer"}]},
    {"type": []},
    {"enum": []},
    {"type": "string", "enum": [1, 2]},
    {"type": "integer", "minimum": 0.2, "maximum": 0.8},
    {"type": "integer", "exclusiveMinimum": 3, "exclusiveMaximum": 4},
    {"type": "string", "minLength": 3, "maxLength": 2},
    {"type": "array", "minItems": 1, "items": False},
    {"allOf": [{"properties": {"a": {"type": "string"}}, "required": ["a"]}, {"properties": {"a": {"type": "integer"}}}], "type": "object"},
    {"type": "object", "properties": {"a": {}}, "required": ["a", "b"], "additionalProperties": False},
    {"type": "object", "required": ["a", "b"], "maxProperties": 1},
    {"$defs": {"s": {"type": "string"}}, "allOf": [{"$ref": "#/$defs/s"}, {"type": "boolean"}]},
    {"anyOf": [{"type": "string", "maxLength": 1, "minLength": 2}, False]},
    False,
]  # fmt: skip
SATISFIABLE = [
    {},
    True,
    {"type": "number", "minimum": 0.2, "maximum": 0.8},
    {"type": "number", "enum": [1]},
    {"anyOf": [{"type": "string"}, {"type": "null"}]},
    {"$defs": {"x": {"type": "string"}}, "$ref": "#/$defs/x"},
    {"type": "object", "properties": {"a": {"$ref": "#"}}},  # recursion with a base case
    {"allOf": [{"type": "object"}, {"required": ["a"]}]},
    {"type": "integer", "minimum": 3, "maximum": 3},
]


@pytest.mark.parametrize("schema", EMPTY, ids=[json.dumps(s)[:40] for s in EMPTY])
def test_schema_no_value_satisfies(schema):
    assert empty_schema(schema) is not None


@pytest.mark.parametrize("schema", SATISFIABLE, ids=[json.dumps(s)[:40] for s in SATISFIABLE])
def test_satisfiable_schema_passes(schema):
    assert empty_schema(schema) is None
