"""Expressions of case symbols in shapes and distribution bounds, parsed with :mod:`ast`, never ``eval``."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import cast

_BINOPS: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
}
_OP_TEXT = {ast.Div: "/", ast.Pow: "**", ast.Mod: "%", ast.MatMult: "@", ast.BitAnd: "&", ast.BitOr: "|"}


@dataclass(frozen=True)
class Expr:
    """An integer expression of case symbols: names, integer literals, ``+ - * //``,
    unary ``-`` and parentheses. Parsed with :mod:`ast`, never ``eval``."""

    text: str
    names: tuple[str, ...]
    tree: ast.expr = field(compare=False, repr=False)

    def evaluate(self, symbols: Mapping[str, int]) -> int:
        """Value for the given symbols; ``ZeroDivisionError`` on ``// 0``."""
        return _eval_node(self.tree, symbols)

    def __str__(self) -> str:
        return self.text


def _eval_node(node: ast.expr, symbols: Mapping[str, int]) -> int:
    """The value of a tree :func:`_check_node` admitted: integer constants, names, signs and integer operators."""
    if isinstance(node, ast.Constant):
        return cast(int, node.value)
    if isinstance(node, ast.Name):
        return symbols[node.id]
    if isinstance(node, ast.UnaryOp):
        value = _eval_node(node.operand, symbols)
        return -value if isinstance(node.op, ast.USub) else value
    binop = cast(ast.BinOp, node)
    return _BINOPS[type(binop.op)](_eval_node(binop.left, symbols), _eval_node(binop.right, symbols))


def _check_node(node: ast.AST, text: str) -> None:
    if isinstance(node, ast.Constant):
        if type(node.value) is not int:
            raise ValueError(f"{text!r}: only integer constants are allowed, not {node.value!r}")
    elif isinstance(node, ast.Name):
        pass
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        _check_node(node.operand, text)
    elif isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        _check_node(node.left, text)
        _check_node(node.right, text)
    elif isinstance(node, ast.BinOp):
        op = _OP_TEXT.get(type(node.op), type(node.op).__name__)
        raise ValueError(f"{text!r}: operator {op!r} is not allowed (use + - * // and parentheses)")
    else:
        raise ValueError(f"{text!r}: only symbols, integers, + - * // and parentheses are allowed")


def parse_expr(text: str) -> int | Expr:
    """Parse a shape or bound expression; an expression without symbols is folded to its int.

    Raises ``ValueError`` with a message quoting the text.
    """
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        raise ValueError(f"{text!r} is not a valid expression") from None
    _check_node(tree, text)
    names = tuple(dict.fromkeys(n.id for n in ast.walk(tree) if isinstance(n, ast.Name)))
    expr = Expr(text.strip(), names, tree)
    if names:
        return expr
    try:
        return expr.evaluate({})
    except ZeroDivisionError:
        raise ValueError(f"{text!r}: division by zero") from None


Bound = int | float | Expr
Dim = int | Expr


def value_of(bound: Bound, symbols: Mapping[str, int]) -> int | float:
    """A literal as is; an :class:`Expr` evaluated with the case symbols."""
    return bound.evaluate(symbols) if isinstance(bound, Expr) else bound


# --------------------------------------------------------------------------- real-valued expressions (thresholds)

_REAL_BINOPS: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}
#: Functions a real expression may call, by name.
REAL_FUNCTIONS: dict[str, Callable[..., float]] = {
    "sqrt": math.sqrt,
    "log": math.log,
    "log2": math.log2,
    "min": min,
    "max": max,
}


@dataclass(frozen=True)
class RealExpr:
    """A real-valued expression of case symbols, e.g. ``3e-3 * sqrt(K / 128)``: names, int and float literals,
    ``+ - * / **``, unary ``-``, parentheses and the calls of :data:`REAL_FUNCTIONS`. Parsed with :mod:`ast`,
    never ``eval``."""

    text: str
    names: tuple[str, ...]
    tree: ast.expr = field(compare=False, repr=False)

    def evaluate(self, symbols: Mapping[str, int | float]) -> float:
        """Value for the given symbols (``KeyError`` for a missing symbol, ``ValueError``/``ZeroDivisionError``
        for a value outside a function's domain)."""
        return float(_eval_real(self.tree, symbols))

    def __str__(self) -> str:
        return self.text


def _eval_real(node: ast.expr, symbols: Mapping[str, int | float]) -> float:
    """The value of a tree :func:`_check_real` admitted: numbers, names, signs, operators and known functions."""
    if isinstance(node, ast.Constant):
        return cast(float, node.value)
    if isinstance(node, ast.Name):
        return symbols[node.id]
    if isinstance(node, ast.UnaryOp):
        value = _eval_real(node.operand, symbols)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Call):
        return REAL_FUNCTIONS[cast(ast.Name, node.func).id](*(_eval_real(a, symbols) for a in node.args))
    binop = cast(ast.BinOp, node)
    return _REAL_BINOPS[type(binop.op)](_eval_real(binop.left, symbols), _eval_real(binop.right, symbols))


def _check_real(node: ast.AST, text: str) -> None:
    allowed = "symbols, numbers, + - * / **, parentheses and " + ", ".join(REAL_FUNCTIONS)
    if isinstance(node, ast.Constant):
        if type(node.value) not in (int, float):
            raise ValueError(f"{text!r}: only numbers are allowed as constants, not {node.value!r}")
    elif isinstance(node, ast.Name):
        if node.id in REAL_FUNCTIONS:
            raise ValueError(f"{text!r}: {node.id!r} is a function; call it, e.g. {node.id}(K)")
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        _check_real(node.operand, text)
    elif isinstance(node, ast.BinOp) and type(node.op) in _REAL_BINOPS:
        _check_real(node.left, text)
        _check_real(node.right, text)
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in REAL_FUNCTIONS
        and not node.keywords
        and node.args
    ):
        for a in node.args:
            _check_real(a, text)
    elif isinstance(node, ast.Call):
        name = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
        raise ValueError(
            f"{text!r}: function {name!r} is not allowed (allowed: {', '.join(REAL_FUNCTIONS)}, "
            "with positional arguments)"
        )
    else:
        raise ValueError(f"{text!r}: only {allowed} are allowed")


def parse_real(text: str) -> float | RealExpr:
    """Parse a real-valued expression of case symbols (a threshold); one without symbols is folded to its float.

    Raises ``ValueError`` with a message quoting the text.
    """
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        raise ValueError(f"{text!r} is not a valid expression") from None
    _check_real(tree, text)
    called = {cast(ast.Name, n.func).id for n in ast.walk(tree) if isinstance(n, ast.Call)}
    names = tuple(dict.fromkeys(n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id not in called))
    expr = RealExpr(text.strip(), names, tree)
    if names:
        return expr
    try:
        return expr.evaluate({})
    except (ValueError, ZeroDivisionError, OverflowError) as exc:
        raise ValueError(f"{text!r}: {exc}") from None
