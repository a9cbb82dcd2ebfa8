"""A small, safe integer expression language for black-box submissions (no code execution).

``x`` is the only name; integers, ``+ - * // % **``, unary minus, comparisons, ``and``/``or``/
``not``, ``a if c else b``, ``abs``/``min``/``max``. Bounded: at most 400 nodes, exponents up
to 8, intermediate values up to 10**40, so a submission cannot stall the verifier.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable

MAX_NODES = 400
MAX_EXPONENT = 8
MAX_MAGNITUDE = 10**40
_BIN: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
}  # fmt: skip
_CMP: dict[type, Callable[[int, int], bool]] = {
    ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.Eq: operator.eq, ast.NotEq: operator.ne,
}  # fmt: skip
_FUNCS: dict[str, Callable[..., int]] = {"abs": abs, "min": min, "max": max}


class ExpressionError(ValueError):
    """The submission is not a valid expression: its message says where."""


def compile_expression(source: str) -> Callable[[int], int]:
    if len(source) > 4000:
        raise ExpressionError("expression longer than 4000 characters")
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"syntax error at column {exc.offset}: {exc.msg}") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise ExpressionError(f"expression has more than {MAX_NODES} nodes")
    _validate(tree.body)

    def run(x: int) -> int:
        return _eval(tree.body, x)

    return run


def _validate(node: ast.AST) -> None:
    ok = (
        isinstance(node, ast.Constant) and type(node.value) in (int, bool)
        or isinstance(node, ast.Name) and node.id == "x"
        or isinstance(node, ast.BinOp) and (type(node.op) in _BIN or isinstance(node.op, ast.Pow))
        or isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.Not | ast.UAdd)
        or isinstance(node, ast.Compare) and all(type(o) in _CMP for o in node.ops)
        or isinstance(node, ast.BoolOp | ast.IfExp)
        or isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS and not node.keywords
    )  # fmt: skip
    if not ok:
        raise ExpressionError(
            f"not allowed at column {getattr(node, 'col_offset', 0)}: {ast.dump(node)[:80]}"
        )
    children = node.args if isinstance(node, ast.Call) else list(ast.iter_child_nodes(node))
    for child in children:
        if isinstance(
            child, ast.expr_context | ast.operator | ast.cmpop | ast.boolop | ast.unaryop
        ):
            continue
        _validate(child)


def _check(v: int) -> int:
    if abs(v) > MAX_MAGNITUDE:
        raise ExpressionError("a value exceeds 10**40")
    return v


def _eval(node: ast.AST, x: int) -> int:
    if isinstance(node, ast.Constant):
        return int(node.value)
    if isinstance(node, ast.Name):
        return x
    if isinstance(node, ast.BinOp):
        a, b = _eval(node.left, x), _eval(node.right, x)
        if isinstance(node.op, ast.Pow):
            if not 0 <= b <= MAX_EXPONENT:
                raise ExpressionError(f"exponent {b} outside 0..{MAX_EXPONENT}")
            return _check(a**b)
        if isinstance(node.op, ast.FloorDiv | ast.Mod) and b == 0:
            raise ExpressionError("division by zero")
        return _check(_BIN[type(node.op)](a, b))
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, x)
        return (
            int(not v)
            if isinstance(node.op, ast.Not)
            else (-v if isinstance(node.op, ast.USub) else v)
        )
    if isinstance(node, ast.Compare):
        left = _eval(node.left, x)
        for op, comp in zip(node.ops, node.comparators, strict=True):
            right = _eval(comp, x)
            if not _CMP[type(op)](left, right):
                return 0
            left = right
        return 1
    if isinstance(node, ast.BoolOp):
        vals = [_eval(v, x) for v in node.values]
        return int(all(vals)) if isinstance(node.op, ast.And) else int(any(vals))
    if isinstance(node, ast.IfExp):
        return _eval(node.body, x) if _eval(node.test, x) else _eval(node.orelse, x)
    if isinstance(node, ast.Call):
        return _check(int(_FUNCS[node.func.id](*(_eval(a, x) for a in node.args))))  # type: ignore[attr-defined]
    raise ExpressionError("unreachable")
