"""The calculator parses a small arithmetic grammar by hand: exact results, bounded powers and sizes, and anything
outside the grammar (Python included) is an error, never evaluated."""

from __future__ import annotations

import re
import time
from decimal import localcontext
from fractions import Fraction

import pytest

from genalign.environments import TOOLS, CalculatorError, evaluate
from genalign.environments.calculator import MAX_BITS, calculator, format_number


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1 + 2 * 3", "7"),
        ("(1 + 2) * 3", "9"),
        ("4821 * 9377", "45206517"),  # 4821 * 9377 = 45,206,517 (hand: 4821*9000=43,389,000; 4821*377=1,817,517)
        ("123456789 * 987654321", "121932631112635269"),
        ("10 - 4 - 3", "3"),  # left-associative
        ("2 ^ 3 ^ 2", "512"),  # right-associative: 2^9
        ("2 ** 10", "1024"),
        ("-2 ^ 2", "-4"),  # the sign binds looser than the power
        ("2 ^ -2", "0.25"),
        ("7 / 2", "3.5"),
        ("1 / 3", "0.333333333333333"),
        ("0.1 + 0.2", "0.3"),  # exact fractions
        ("6 × 7 ÷ 2 − 1", "20"),
        ("1.5e3 + .5", "1500.5"),
        ("--3", "3"),
        ("((((2))))", "2"),
        ("2 ^ 0.5", "1.4142135623731"),  # 1.41421356237309505 to 15 digits, trailing 0 dropped
    ],
)
def test_hand_checked_results(expression, expected):
    assert calculator(expression) == expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os').system('true')", "unexpected character '_'"),
        ("2 + x", "unexpected character 'x'"),
        ("[1, 2]", "unexpected character '['"),
        ("1,000 + 1", "unexpected character ','"),
        ("", "empty"),
        ("1 +", "ends where a number"),
        ("(1 + 2", "not closed"),
        ("1 2", "unexpected '2'"),
        ("1 / 0", "division by zero"),
        ("0 ^ -1", "division by zero"),
        ("(-8) ^ 0.5", "no real value"),
        ("1.2.3", "not a number"),
        ("1e999", "exponent is larger"),
    ],
)
def test_what_is_outside_the_grammar_is_an_error(expression, message):
    with pytest.raises(CalculatorError, match=re.escape(message)):
        evaluate(expression)


def test_huge_powers_and_products_are_bounded_before_computing():
    started = time.perf_counter()
    for expression in ("2**10**10", "9 ^ 9 ^ 9", "10 ^ 5000", "(10^1000) * (10^1000) * (10^1000) * (10^1000) * 10^1000",
                       "2.5 ^ 100000", "1.0000001 ^ 0.5 ^ -100000"):  # fmt: skip
        with pytest.raises(CalculatorError, match=r"too large|larger than|cannot be computed"):
            evaluate(expression)
    assert time.perf_counter() - started < 1.0
    assert evaluate("2 ^ 4000") == Fraction(2**4000) and (2**4000).bit_length() <= MAX_BITS
    assert evaluate("(-1) ^ 9999") == -1 and evaluate("0.5 ^ 4000") == Fraction(1, 2**4000)


def test_deep_nesting_and_long_input_are_refused():
    with pytest.raises(CalculatorError, match="deeper than"):
        evaluate("(" * 200 + "1" + ")" * 200)
    with pytest.raises(CalculatorError, match="deeper than"):
        evaluate("-" * 300 + "1")
    with pytest.raises(CalculatorError, match="characters"):
        evaluate("1+" * 1000 + "1")


def test_number_formatting():
    assert format_number(Fraction(10**20)) == "100000000000000000000"
    assert format_number(Fraction(-7, 4)) == "-1.75"
    assert format_number(Fraction(1, 10**9)) == "1e-9"
    assert format_number(Fraction(10**20 + 1, 3)) == "3.33333333333333e+19"


def test_the_registered_tool_refuses_python_with_a_tool_error():
    tool = TOOLS.get("calculator")()
    assert tool.schema["function"]["parameters"]["required"] == ["expression"]
    with pytest.raises(CalculatorError):
        tool.fn(expression="__import__('os')")


def test_number_formatting_does_not_depend_on_the_threads_decimal_context():
    with localcontext() as context:
        context.prec = 5  # another library narrowed the thread's context
        assert format_number(Fraction(1, 3)) == "0.333333333333333"
        assert format_number(Fraction(10**20 + 1, 3)) == "3.33333333333333e+19"
