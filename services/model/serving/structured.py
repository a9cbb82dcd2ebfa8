"""Structured output: ``tool_choice`` and ``response_format`` enforced with an xgrammar grammar.

The grammar covers the whole assistant turn in XTML (see :mod:`~services.model.serving.template`),
after the generation prefix already opened the ``think`` (or ``response``) channel. It is built as
an xgrammar *structural tag*: a sequence of single special tokens (``[open]``, ``[sep]``,
``[close]``), constant headers (``call tool="get_weather" index:=0``) and content formats (free
text, or a JSON schema). In xgrammar's vocabulary each special token is its marker text behind the
bytes 0xFF 0xFE, which valid UTF-8 never contains: free text and JSON can never spell a marker,
and only the grammar's own token slots (by id) can emit one. Ordinary tokens holding a 0xFF byte
(never part of valid UTF-8 either) are masked out, so a marker cannot be spelt byte by byte.

xgrammar accepts a UTF-8-encoded surrogate (0xED then 0xA0-0xBF: not valid UTF-8) as one
character, while the decoder turns its three bytes into three U+FFFD: a string at its
``maxLength`` in the grammar came out three characters over. So no token may put 0xA0-0xBF after
0xED, inside the token (masked always) or across two tokens (masked while the output so far ends
with a lone 0xED lead byte).

What is enforced:

- ``tool_choice`` ``"required"`` or a named function: the turn is (thinking, then) a ``tools``
  channel with one or more calls (exactly one for a named function, or when
  ``parallel_tool_calls`` is false), and no response text;
- ``"none"``: no ``tools`` channel;
- ``response_format`` ``json_object`` / ``json_schema``: the ``response`` channel is one JSON
  value (of the schema);
- whenever a grammar applies (any of the above, or ``"auto"`` with a ``strict`` tool), every call's
  arguments follow its tool's ``parameters`` schema: each declared property is an ``arg`` element
  in declared order (required ones always, optional ones optionally, no others), a plain string
  property as raw text, any other as compact JSON of its schema. A schema that is not an object
  with ``properties`` is matched as one ``json`` block.

Budgets (:mod:`~services.model.serving.budget`): thinking is capped at the request's thinking
budget, else (with ``max_tokens`` set) at a quarter of it; near the end of ``max_tokens`` the output
takes the shortest way to close, so a forced call or a JSON answer finishes whenever its shortest
form fits, and is reported cut (``length``, ``truncated``) when it does not.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

import torch
import xgrammar as xgr

from services.model.serving.budget import BudgetedProcessor, Vocab, vocab_of
from services.model.serving.emptiness import empty_schema, unproductive_rule
from services.model.serving.grammar_compile import CompileTimeout, GrammarWorker
from services.model.serving.template import Mode, attr_str
from services.model.serving.tokenize_pool import Cancelled
from services.model.tokenizer.base import CLOSE, END_OF_MSG, OPEN, SEP, Tokenizer

if TYPE_CHECKING:
    from services.model.serving.protocol import ChatCompletionRequest, CompletionRequest

MAX_PARALLEL_CALLS = 8
MAX_JSON_WHITESPACE = 8


class StructuredOutputError(ValueError):
    """The requested structure cannot be compiled, or admits no output (the API answers 400
    naming ``param``)."""

    def __init__(self, message: str, param: str = "response_format") -> None:
        super().__init__(message)
        self.param = param


MARKER_PREFIX = b"\xff\xfe"


@dataclass
class _Compiler:
    compiler: xgr.GrammarCompiler
    vocab_size: int
    ids: dict[str, int]
    never: torch.Tensor  # ordinary tokens with a 0xFF byte or an encoded surrogate
    utf8: _SurrogateGuard
    vocab: Vocab


#: Compiles every request's grammar, one at a time (the compiler's cache is shared), cached.
WORKER = GrammarWorker()
_SURROGATE = re.compile(rb"\xed[\xa0-\xbf]")


@dataclass(frozen=True)
class _SurrogateGuard:
    """Tokens that end with a lone 0xED lead byte, and tokens that start with 0xA0-0xBF."""

    ends_with_ed: frozenset[int]
    after_ed: torch.Tensor


def byte_masks(plain: list[tuple[int, bytes]]) -> tuple[torch.Tensor, _SurrogateGuard]:
    """From the ordinary tokens' bytes: the ids never allowed under a grammar (a 0xFF byte, an
    encoded surrogate inside the token) and the guard against a surrogate across two tokens
    (0xED is always a lead byte, so a token ending in it waits for its continuation)."""
    never = [i for i, b in plain if b"\xff" in b or _SURROGATE.search(b)]
    guard = _SurrogateGuard(
        ends_with_ed=frozenset(i for i, b in plain if b.endswith(b"\xed")),
        after_ed=torch.tensor(
            [i for i, b in plain if b[:1] and 0xA0 <= b[0] <= 0xBF], dtype=torch.long
        ),
    )
    return torch.tensor(never, dtype=torch.long), guard


@cache
def _compiler(tokenizer: Tokenizer) -> _Compiler:
    vocab = [
        MARKER_PREFIX + tokenizer.token_bytes(i)
        if tokenizer.is_special(i)
        else tokenizer.token_bytes(i)
        for i in range(tokenizer.vocab_size)
    ]
    plain = [(i, tokenizer.token_bytes(i)) for i in range(tokenizer.vocab_size)]
    never, guard = byte_masks([(i, b) for i, b in plain if not tokenizer.is_special(i)])
    stop = tokenizer.special_id(END_OF_MSG)
    info = xgr.TokenizerInfo(
        vocab, xgr.VocabType.RAW, vocab_size=tokenizer.vocab_size, stop_token_ids=[stop]
    )
    ids = {t: tokenizer.special_id(t) for t in (OPEN, SEP, CLOSE)}
    compiler = xgr.GrammarCompiler(info, max_threads=1)
    return _Compiler(compiler, tokenizer.vocab_size, ids, never, guard, vocab_of(tokenizer))


class GrammarProcessor:
    """A :class:`~services.model.serving.sampling.LogitsProcessor` over one xgrammar matcher."""

    def __init__(
        self,
        compiled: xgr.CompiledGrammar,
        vocab_size: int,
        never: torch.Tensor,
        utf8: _SurrogateGuard,
    ):
        self.matcher = xgr.GrammarMatcher(compiled)
        self.vocab_size = vocab_size
        self.never = never
        self.utf8 = utf8
        self._after_ed = False  # the output so far ends with a lone 0xED
        self.bitmask = xgr.allocate_token_bitmask(1, vocab_size)

    def mask(self, logits: torch.Tensor) -> None:
        self.matcher.fill_next_token_bitmask(self.bitmask)
        n = logits.numel()
        if n < self.vocab_size:
            xgr.apply_token_bitmask_inplace(logits, self.bitmask, vocab_size=n)
        else:
            logits[self.vocab_size :] = float("-inf")
            xgr.apply_token_bitmask_inplace(logits[: self.vocab_size], self.bitmask)
        logits[self.never[self.never < n]] = float("-inf")
        if self._after_ed:
            after = self.utf8.after_ed
            logits[after[after < n]] = float("-inf")

    def accept(self, token: int) -> None:
        self._after_ed = token in self.utf8.ends_with_ed
        if not self.matcher.is_terminated():
            self.matcher.accept_token(token)


@dataclass
class Constraint:
    """A compiled grammar for one request; each choice gets its own matcher, within budget."""

    compiled: xgr.CompiledGrammar
    vocab_size: int
    never: torch.Tensor
    utf8: _SurrogateGuard
    vocab: Vocab
    thinking: bool = False  # the turn starts in the think channel
    think_budget: int | None = None
    json_format: bool = False

    def processor(self) -> BudgetedProcessor:
        grammar = GrammarProcessor(self.compiled, self.vocab_size, self.never, self.utf8)
        return BudgetedProcessor(
            self.vocab,
            grammar,
            thinking=self.thinking,
            think_budget=self.think_budget,
            json_format=self.json_format,
        )


def think_budget(req: ChatCompletionRequest, constrained: bool) -> int | None:
    """The most tokens the turn may think: the request's budget, else (for a constrained turn
    with ``max_tokens``) a quarter of ``max_tokens``, so the structure has room."""
    if req.thinking_budget_tokens is not None:
        return req.thinking_budget_tokens
    max_tokens = req.effective_max_tokens()
    return max(1, max_tokens // 4) if constrained and max_tokens else None


def thinking_cap(req: ChatCompletionRequest, mode: Mode, tokenizer: Tokenizer) -> BudgetedProcessor:
    """For a turn without a grammar: a processor that only closes thinking at its budget."""
    return BudgetedProcessor(
        _compiler(tokenizer).vocab,
        None,
        thinking=mode == "think",
        think_budget=think_budget(req, False),
    )


# ----- custom tools: one raw-text argument in the tool's own grammar (Lark or regex) ----------

GRAMMAR_KEY = "x-k3stack-grammar"


@cache
def _lark_to_ebnf(definition: str) -> str:
    try:
        ebnf = str(xgr.Grammar.from_lark(definition))
    except Exception as exc:  # noqa: BLE001 - xgrammar raises RuntimeError and friends
        raise StructuredOutputError(f"the tool's Lark grammar does not compile: {exc}") from exc
    if (rule := unproductive_rule(ebnf)) is not None:
        raise StructuredOutputError(
            f"the tool's Lark grammar derives no finite text: rule {rule!r} never ends "
            "(it recurses without a base case)"
        )
    return ebnf


@cache
def _schema_problem(text: str) -> str | None:
    """Why the JSON schema (as canonical JSON) admits no value, or None."""
    schema = json.loads(text)
    if (reason := empty_schema(schema)) is not None:
        return reason
    if "$ref" not in text:  # only a reference can recurse
        return None
    try:
        ebnf = str(xgr.Grammar.from_json_schema(text))
    except Exception:  # noqa: BLE001 - left for the compile to report
        return None
    if (rule := unproductive_rule(ebnf)) is not None:
        return f"no finite JSON value satisfies it (it recurses without a base case at {rule!r})"
    return None


def check_schema(schema: Any, where: str) -> None:
    """Refuse a schema no (finite) JSON value satisfies, naming ``where``."""
    if isinstance(schema, dict | bool):
        reason = _schema_problem(json.dumps(schema, sort_keys=True))
        if reason is not None:
            raise StructuredOutputError(f"{where}: {reason}", param=where.split(".")[0])


def grammar_format(spec: dict[str, Any]) -> dict[str, Any]:
    """A structural-tag element for a grammar ``{"syntax": "lark" | "regex", "definition"}``:
    xgrammar reads Lark (into its EBNF) and regular expressions itself."""
    syntax, definition = spec.get("syntax"), spec.get("definition")
    if syntax == "lark" and isinstance(definition, str):
        return {"type": "grammar", "grammar": _lark_to_ebnf(definition)}
    if syntax == "regex" and isinstance(definition, str):
        return {"type": "regex", "pattern": definition}
    raise StructuredOutputError(f"grammar syntax {syntax!r}: only 'lark' and 'regex' are read")


class _Builder:
    """Structural-tag pieces for XTML."""

    def __init__(self, ids: dict[str, int]) -> None:
        self.ids = ids

    def token(self, marker: str) -> dict[str, Any]:
        return {"type": "token", "token": self.ids[marker]}

    @staticmethod
    def const(text: str) -> dict[str, Any]:
        return {"type": "const_string", "value": text}

    @staticmethod
    def seq(*elements: dict[str, Any]) -> dict[str, Any]:
        flat: list[dict[str, Any]] = []
        for e in elements:
            flat.extend(e["elements"] if e["type"] == "sequence" else [e])
        return {"type": "sequence", "elements": flat} if len(flat) != 1 else flat[0]

    @staticmethod
    def either(*elements: dict[str, Any]) -> dict[str, Any]:
        return {"type": "or", "elements": list(elements)} if len(elements) > 1 else elements[0]

    @staticmethod
    def optional(element: dict[str, Any]) -> dict[str, Any]:
        return {"type": "optional", "content": element}

    @staticmethod
    def text(max_tokens: int | None = None, max_chars: int | None = None) -> dict[str, Any]:
        fmt: dict[str, Any] = {"type": "any_text"}
        if max_tokens is not None:
            fmt["max_tokens"] = max_tokens
        if max_chars is not None:
            fmt["max_chars"] = max_chars
        return fmt

    @staticmethod
    def json(schema: dict[str, Any] | bool) -> dict[str, Any]:
        return {
            "type": "json_schema",
            "json_schema": schema,
            "max_whitespace_cnt": MAX_JSON_WHITESPACE,
        }

    def open(self, header: str) -> dict[str, Any]:
        return self.seq(self.token(OPEN), self.const(header), self.token(SEP))

    def close(self, tag: str) -> dict[str, Any]:
        return self.seq(self.token(CLOSE), self.const(tag), self.token(SEP))

    def element(self, header: str, tag: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.seq(self.open(header), body, self.close(tag))

    # -- tool calls ---------------------------------------------------------------------------

    def args(self, schema: Any) -> dict[str, Any]:
        props = schema.get("properties") if isinstance(schema, dict) else None
        if not isinstance(props, dict) or schema.get("type", "object") != "object" or not props:
            if isinstance(schema, dict) and schema.get("type") == "object" and not props:
                # No declared properties: an empty call, or a JSON block of the schema.
                return self.optional(self.element("json", "json", self.json(schema)))
            return self.element("json", "json", self.json(schema or {"type": "object"}))
        required = set(schema.get("required") or ())
        defs = {k: schema[k] for k in ("$defs", "definitions") if k in schema}
        parts = []
        for name, sub in props.items():
            part = self.arg(str(name), sub if isinstance(sub, dict) else {}, defs)
            parts.append(part if name in required else self.optional(part))
        return self.seq(*parts)

    def arg(self, name: str, schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
        header = "arg" + attr_str("name", name)
        if GRAMMAR_KEY in schema:  # a custom tool's raw input, in its own grammar
            return self.element(header, "arg", grammar_format(schema[GRAMMAR_KEY]))
        if schema.get("type") == "string" and not ({"const", "$ref"} & schema.keys()):
            if "enum" in schema:
                body = self.either(*(self.const(str(v)) for v in schema["enum"]))
            elif "pattern" in schema:
                body = {"type": "regex", "pattern": schema["pattern"]}
            else:
                body = self.text(max_chars=schema.get("maxLength"))
            return self.element(header, "arg", body)
        check_schema({**schema, **defs}, f"tools.{name}")
        return self.element(header + ' type="json"', "arg", self.json({**schema, **defs}))

    def call(self, name: str, parameters: Any, max_calls: int) -> dict[str, Any]:
        """One call of ``name``; with room for more than one call its index is any of
        ``0..max_calls-1`` (the parser numbers calls itself), so one copy serves every call."""
        header = "call" + attr_str("tool", name) + " index:="
        if max_calls == 1:
            opening = self.open(header + "0")
        else:
            digits = "|".join(str(i) for i in range(max_calls))
            index = {"type": "regex", "pattern": f"({digits})"}
            opening = self.seq(self.token(OPEN), self.const(header), index, self.token(SEP))
        try:
            check_schema(parameters, "tools")
            return self.seq(opening, self.args(parameters), self.close("call"))
        except StructuredOutputError as exc:
            message = str(exc).removeprefix("tools: ")
            raise StructuredOutputError(f"tools: {name!r}: {message}", param="tools") from None

    def tools(self, tools: dict[str, Any], max_calls: int) -> dict[str, Any]:
        """The tools channel: 1 to ``max_calls`` calls. The tool set is built once and repeated
        (8 copies of 1,000 tools took 36 s of CPU to compile, under the compiler's lock)."""
        one = self.either(*(self.call(n, p, max_calls) for n, p in tools.items()))
        calls = (
            one
            if max_calls == 1
            else {"type": "repeat", "min": 1, "max": max_calls, "content": one}
        )
        return self.seq(self.open("tools"), calls, self.close("tools"))


def chat_constraint(
    req: ChatCompletionRequest,
    mode: Mode,
    tokenizer: Tokenizer,
    cancel: threading.Event | None = None,
) -> Constraint | None:
    """The grammar ``req`` needs, or None when its output is free (raises StructuredOutputError;
    Cancelled once ``cancel`` is set while its grammar compiles)."""
    choice = req.tool_choice
    tools = {t.function.name: t.function.parameters for t in req.tools or []}
    fmt = req.response_format
    json_format = fmt is not None and fmt.type in ("json_object", "json_schema")
    forced = bool(tools) and (choice == "required" or not isinstance(choice, str | None))
    strict = any(t.function.strict for t in req.tools or [])
    if not (forced or json_format or (tools and choice == "none") or strict):
        return None
    if not isinstance(choice, str | None):
        tools = {choice.function.name: tools[choice.function.name]}
    allow_tools = bool(tools) and choice != "none"
    max_calls = 1 if req.parallel_tool_calls is False or not isinstance(choice, str | None) else 0
    max_calls = max_calls or MAX_PARALLEL_CALLS

    compiler = _compiler(tokenizer)
    b = _Builder(compiler.ids)
    if fmt is not None and fmt.type == "json_schema":
        assert fmt.json_schema is not None
        check_schema(fmt.json_schema.schema_ or {}, "response_format.json_schema.schema")
        body = b.json(fmt.json_schema.schema_ or {})
    elif json_format:
        body = b.json({"type": "object"})
    else:
        body = b.text()
    calls = b.tools(tools, max_calls) if allow_tools else None

    if mode == "think":
        parts = [b.text(), b.close("think")]
        response = b.element("response", "response", body)
        if forced:
            assert calls is not None
            parts.append(calls)
        elif calls is not None and not json_format:
            parts.append(b.either(b.seq(response, b.optional(calls)), calls))
        elif calls is not None:
            parts.append(b.seq(response, b.optional(calls)))
        else:
            parts.append(response)
    else:  # the response channel is open already
        parts = [b.close("response")] if forced else [body, b.close("response")]
        if calls is not None:
            parts.append(calls if forced else b.optional(calls))
    tag = json.dumps({"type": "structural_tag", "format": b.seq(*parts)})
    try:
        compiled = WORKER.compile(
            f"{id(compiler)}:{tag}", lambda: compiler.compiler.compile_structural_tag(tag), cancel
        )
    except CompileTimeout as exc:
        what = f"the grammar of {len(tools)} tool(s)" if allow_tools else "the response format"
        raise StructuredOutputError(
            f"{'tools' if allow_tools else 'response_format'}: {what} is too large to enforce: "
            f"{exc}; offer fewer or simpler tools or schemas",
            param="tools" if allow_tools else "response_format",
        ) from exc
    except Cancelled:
        raise
    except Exception as exc:  # noqa: BLE001 - xgrammar raises RuntimeError and friends
        raise StructuredOutputError(f"cannot enforce the requested structure: {exc}") from exc
    return Constraint(
        compiled,
        compiler.vocab_size,
        compiler.never,
        compiler.utf8,
        compiler.vocab,
        thinking=mode == "think",
        think_budget=think_budget(req, True),
        json_format=json_format,
    )


def completion_constraint(
    req: CompletionRequest, prompt_text: str, tokenizer: Tokenizer
) -> Constraint | None:
    """For a token prompt that opened an assistant turn, the grammar a chat completion with the
    same ``tools``/``tool_choice`` would decode under (None without tools). The turn's mode is
    read from the prompt's end, the generation prefix the chat template wrote."""
    from services.model.serving.protocol import ChatCompletionRequest

    if not req.tools:
        return None
    mode: Mode | None = next(
        (m for m in ("think", "response") if prompt_text.endswith(f"{OPEN}{m}{SEP}")), None
    )
    if mode is None:
        raise StructuredOutputError(
            "tools: a completion under tools needs a token prompt that ends with the chat "
            "template's generation prefix ([open]think[sep] or [open]response[sep])"
        )
    chat = ChatCompletionRequest(
        messages=[{"role": "user", "content": ""}],  # type: ignore[list-item]
        tools=req.tools,
        tool_choice=req.tool_choice,
        parallel_tool_calls=req.parallel_tool_calls,
        max_tokens=req.max_tokens,
    )
    return chat_constraint(chat, mode, tokenizer)
