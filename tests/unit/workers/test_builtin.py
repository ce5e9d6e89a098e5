"""The built-in tools: echo, sleep, calculate (parsed, never eval'd) and current_time."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from workers.builtin import calculate, current_time, echo, evaluate, sleep
from workers.errors import InvalidArguments


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("1 + 2", 3),
        ("2 + 3 * 4", 14),
        ("(2 + 3) * 4", 20),
        ("10 - 4 - 3", 3),
        ("7 / 2", 3.5),
        ("2 ** 10", 1024),
        ("2 ** 3 ** 2", 512),
        ("-2 ** 2", -4),
        ("(-2) ** 2", 4),
        ("-3 + +5", 2),
        ("--3", 3),
        ("1.5 * 4", 6.0),
        ("((1 + 2) * (3 + 4)) / 7", 3.0),
        ("2 ** -1", 0.5),
        (" 6*7 ", 42),
    ],
)
def test_arithmetic_follows_python_precedence(expression: str, value: float) -> None:
    assert evaluate(expression) == value
    assert calculate(expression) == {"result": value}


@pytest.mark.parametrize(
    "expression",
    [
        "x",
        "x + 1",
        "abs(-1)",
        "__import__('os').system('true')",
        "(1).real",
        "'a' * 3",
        "[1, 2]",
        "True + 1",
        "1 if 1 else 2",
        "lambda: 1",
        "1 < 2",
        "7 // 2",
        "7 % 2",
        "1 & 3",
        "",
        "1 +",
        "2 ** 1001",
        "9 ** 9 ** 9",
        "10 ** -5000",
    ],
)
def test_anything_but_numbers_and_arithmetic_is_refused(expression: str) -> None:
    with pytest.raises(InvalidArguments):
        evaluate(expression)


def test_division_by_zero_is_invalid_arguments() -> None:
    with pytest.raises(InvalidArguments, match="division by zero"):
        evaluate("1 / (2 - 2)")
    with pytest.raises(InvalidArguments, match="division by zero"):
        evaluate("0 ** -1")


def test_overlong_expressions_are_refused() -> None:
    with pytest.raises(InvalidArguments, match="longer"):
        evaluate("1+" * 600 + "1")


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    "expression",
    [
        "((10 ** 999) ** 1000) ** 1000",  # each exponent is small; the result has a billion digits
        "(9 ** 999) ** 999",
        "10 ** 999 * 10 ** 999 * 10 ** 999 * 10 ** 999 * 10 ** 999",  # too many digits for JSON
        "1e308 * 10",
        "1e999",
        "-(10 ** 999) * 10 ** 999",
    ],
)
def test_results_too_large_to_compute_or_store_are_refused_quickly(expression: str) -> None:
    with pytest.raises(InvalidArguments, match="too large"):
        evaluate(expression)


def test_results_that_are_not_real_numbers_are_refused() -> None:
    with pytest.raises(InvalidArguments, match="not a real number"):
        evaluate("(-8) ** 0.5")


def test_large_but_reasonable_results_are_computed() -> None:
    assert evaluate("2 ** 1000") == 2**1000
    assert evaluate("1e300 * 10") == 1e301


def test_current_time_in_an_iana_zone() -> None:
    result = current_time("Asia/Tokyo")
    assert result["timezone"] == "Asia/Tokyo"
    moment = datetime.fromisoformat(result["iso"])
    assert moment.utcoffset() == timedelta(hours=9)
    assert abs(moment.timestamp() - datetime.now().timestamp()) < 60
    assert float(result["unix"]) == pytest.approx(moment.timestamp())


def test_current_time_defaults_to_utc() -> None:
    moment = datetime.fromisoformat(current_time()["iso"])
    assert moment.utcoffset() == timedelta(0)


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "../../etc/passwd", "", "Not A Zone"])
def test_current_time_refuses_unknown_zones(zone: str) -> None:
    with pytest.raises(InvalidArguments, match="unknown timezone"):
        current_time(zone)


def test_echo_returns_its_arguments() -> None:
    assert echo(x=1, nested={"a": [1, 2]}) == {"x": 1, "nested": {"a": [1, 2]}}


def test_sleep_sleeps_and_refuses_negative_seconds() -> None:
    assert sleep(0) == {"slept": 0}
    with pytest.raises(InvalidArguments):
        sleep(-1)
