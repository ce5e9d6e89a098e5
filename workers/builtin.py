"""The tools every worker runs: echo, sleep, calculate, current_time.

Each declares its contract (an undeclared tool would be a non-idempotent write): all four are reads,
``sleep`` included, since it changes nothing outside its own process.
"""

from __future__ import annotations

import ast
import math
import operator
import time
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from workers.errors import InvalidArguments
from workers.registry import tool


@tool(effect="read", parameters={"type": "object", "additionalProperties": True}, timeout_s=5)
def echo(**arguments: Any) -> dict[str, Any]:
    """Return the arguments unchanged. Useful to test a pipeline end to end."""
    return arguments


@tool(effect="read", timeout_s=3600)
def sleep(seconds: float) -> dict[str, float]:
    """Sleep for the given number of seconds, then return how long it slept."""
    if seconds < 0:
        raise InvalidArguments("seconds must not be negative")
    time.sleep(seconds)
    return {"slept": seconds}


_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
MAX_EXPRESSION = 1000
MAX_EXPONENT = 1000
# Results (and intermediate values) stay below 10**MAX_DIGITS: a bigger integer takes unbounded
# CPU to compute (under the GIL, where no timeout reaches) and cannot be written as JSON anyway.
MAX_DIGITS = 1000
_LIMIT = 10**MAX_DIGITS


def evaluate(expression: str) -> float | int:
    """Evaluate + - * / ** and parentheses on numbers. Walks the syntax tree; never calls eval."""
    if len(expression) > MAX_EXPRESSION:
        raise InvalidArguments(f"expression longer than {MAX_EXPRESSION} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise InvalidArguments(f"not an arithmetic expression: {exc.msg}") from exc
    return _eval(tree.body)


def _checked(value: object) -> float | int:
    """``value`` if the receipt can store it: a finite real number below ``10**MAX_DIGITS``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArguments("the result is not a real number")
    if (isinstance(value, float) and not math.isfinite(value)) or (isinstance(value, int) and abs(value) >= _LIMIT):
        raise InvalidArguments("result too large")
    return value


def _eval(node: ast.AST) -> float | int:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _checked(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _checked(_UNARY[type(node.op)](_eval(node.operand)))  # type: ignore[operator]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            if abs(right) > MAX_EXPONENT:
                raise InvalidArguments(f"exponent larger than {MAX_EXPONENT}")
            # Refuse before computing: the digits of left ** right are about right * log10(left).
            if right > 0 and abs(left) > 1 and right * math.log10(abs(left)) > MAX_DIGITS:
                raise InvalidArguments("result too large")
        try:
            return _checked(_BINARY[type(node.op)](left, right))
        except ZeroDivisionError as exc:
            raise InvalidArguments("division by zero") from exc
        except OverflowError as exc:
            raise InvalidArguments("result too large") from exc
    raise InvalidArguments(f"unsupported element in expression: {type(node).__name__}")


@tool(effect="read")
def calculate(expression: str) -> dict[str, float | int]:
    """Evaluate an arithmetic expression with + - * / ** and parentheses, e.g. "(2 + 3) * 4"."""
    return {"result": evaluate(expression)}


@tool(effect="read")
def current_time(timezone: str = "UTC") -> dict[str, str]:
    """The current date and time in an IANA timezone such as "Europe/Paris" (default UTC)."""
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidArguments(f"unknown timezone {timezone!r}") from exc
    now = datetime.now(zone)
    return {"timezone": timezone, "iso": now.isoformat(), "unix": str(now.timestamp())}
