"""The ``calculator`` tool: exact arithmetic over a small grammar, parsed by hand and never evaluated as Python.

Grammar (whitespace ignored)::

    expression := term (("+" | "-") term)*
    term       := unary (("*" | "×" | "/" | "÷") unary)*
    unary      := ("+" | "-" | "−") unary | power
    power      := atom (("^" | "**") unary)?           # right-associative: 2^3^2 = 2^9
    atom       := number | "(" expression ")"
    number     := digits ["." digits] [("e" | "E") ["+" | "-"] digits]   # or "." digits

Numbers are exact fractions (``0.1 + 0.2`` is ``0.3``); a non-integer power (``2^0.5``) is a float. Bounds, each an
error message rather than a long computation: at most :data:`MAX_CHARS` characters, nesting of parentheses and signs
at most :data:`MAX_DEPTH`, integer powers with exponent at most :data:`MAX_EXPONENT` in size, and every intermediate
value's numerator and denominator at most :data:`MAX_BITS` bits (``2**10**10`` stops before computing anything
large). Anything else in the text (letters, underscores, quotes, commas, brackets other than parentheses) is refused
at the character where it occurs, so ``__import__('os')`` is just an invalid expression.
"""

from __future__ import annotations

import math
from decimal import Context, Decimal
from fractions import Fraction

from genalign.environments.tools import register_tool

MAX_CHARS = 1000
MAX_DEPTH = 64
MAX_EXPONENT = 10_000
MAX_BITS = 4096
MAX_SCIENTIFIC_EXPONENT = 400
SIGNIFICANT_DIGITS = 15

Number = Fraction | float


class CalculatorError(ValueError):
    """The expression is not in the grammar, or a bound was hit (the message says where)."""


_OPERATORS = {"×": "*", "÷": "/", "−": "-", "**": "^"}


def _tokens(expression: str) -> list[tuple[str, int]]:
    tokens: list[tuple[str, int]] = []
    i = 0
    while i < len(expression):
        char = expression[i]
        if char.isspace():
            i += 1
        elif char.isascii() and (char.isdigit() or char == "."):
            start = i
            while i < len(expression) and expression[i].isascii() and (expression[i].isdigit() or expression[i] == "."):
                i += 1
            if i < len(expression) and expression[i] in "eE":
                j = i + 1
                if j < len(expression) and expression[j] in "+-":
                    j += 1
                if j < len(expression) and expression[j].isascii() and expression[j].isdigit():
                    i = j
                    while i < len(expression) and expression[i].isascii() and expression[i].isdigit():
                        i += 1
            tokens.append((expression[start:i], start))
        elif expression.startswith("**", i):
            tokens.append(("^", i))
            i += 2
        elif char in "+-*/^()×÷−":
            tokens.append((_OPERATORS.get(char, char), i))
            i += 1
        else:
            raise CalculatorError(f"unexpected character {char!r} at position {i}; use numbers, + - * / ^ and ( ).")
    return tokens


class _Parser:
    def __init__(self, expression: str) -> None:
        if len(expression) > MAX_CHARS:
            raise CalculatorError(f"the expression has {len(expression)} characters; at most {MAX_CHARS}.")
        self.tokens = _tokens(expression)
        self.position = 0
        self.depth = 0

    def peek(self) -> str | None:
        return self.tokens[self.position][0] if self.position < len(self.tokens) else None

    def take(self) -> str:
        token = self.tokens[self.position][0]
        self.position += 1
        return token

    def parse(self) -> Number:
        if not self.tokens:
            raise CalculatorError("the expression is empty.")
        value = self.expression()
        if self.position != len(self.tokens):
            token, where = self.tokens[self.position]
            raise CalculatorError(f"unexpected {token!r} at position {where}.")
        return value

    def expression(self) -> Number:
        value = self.term()
        while self.peek() in ("+", "-"):
            value = _checked(value + self.term() if self.take() == "+" else value - self.term())
        return value

    def term(self) -> Number:
        value = self.unary()
        while self.peek() in ("*", "/"):
            operator = self.take()
            right = self.unary()
            if operator == "*":
                value = _checked(value * right)
            elif right == 0:
                raise CalculatorError("division by zero.")
            else:
                value = _checked(value / right)
        return value

    def unary(self) -> Number:
        self.enter()
        try:
            if self.peek() in ("+", "-"):
                return -self.unary() if self.take() == "-" else self.unary()
            return self.power()
        finally:
            self.depth -= 1

    def power(self) -> Number:
        base = self.atom()
        if self.peek() != "^":
            return base
        self.take()
        return power(base, self.unary())

    def atom(self) -> Number:
        token = self.peek()
        if token is None:
            raise CalculatorError("the expression ends where a number or '(' is expected.")
        if token == "(":
            self.take()
            self.enter()
            value = self.expression()
            self.depth -= 1
            if self.peek() != ")":
                raise CalculatorError("a '(' is not closed.")
            self.take()
            return value
        if token[0].isdigit() or token[0] == ".":
            self.take()
            return _number(token)
        raise CalculatorError(f"unexpected {token!r} at position {self.tokens[self.position][1]}.")

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise CalculatorError(f"the expression nests deeper than {MAX_DEPTH} levels.")


def _number(token: str) -> Fraction:
    mantissa, _, exponent = token.lower().partition("e")
    if mantissa.count(".") > 1 or mantissa == ".":
        raise CalculatorError(f"{token!r} is not a number.")
    if exponent and abs(int(exponent)) > MAX_SCIENTIFIC_EXPONENT:
        raise CalculatorError(f"{token!r}: the exponent is larger than {MAX_SCIENTIFIC_EXPONENT}.")
    value = Fraction(mantissa)
    return _checked(value * Fraction(10) ** int(exponent)) if exponent else _checked(value)


def _checked(value: Number) -> Number:
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CalculatorError("the result is too large.")
        return value
    if value.numerator.bit_length() > MAX_BITS or value.denominator.bit_length() > MAX_BITS:
        raise CalculatorError(f"the result is too large (more than {MAX_BITS} bits).")
    return value


def power(base: Number, exponent: Number) -> Number:
    """``base ** exponent`` within the bounds (module docstring)."""
    if isinstance(exponent, Fraction) and exponent.denominator == 1:
        e = exponent.numerator
        if abs(e) > MAX_EXPONENT:
            raise CalculatorError(f"the exponent {e} is larger than {MAX_EXPONENT}.")
        if base == 0 and e < 0:
            raise CalculatorError("division by zero (0 to a negative power).")
        if isinstance(base, Fraction):
            size = max(base.numerator.bit_length(), base.denominator.bit_length())
            if abs(base) != 1 and (size - 1) * abs(e) > MAX_BITS:
                raise CalculatorError(f"the result is too large (more than {MAX_BITS} bits).")
            return _checked(base**e)
        return _checked(_float_power(base, float(e)))
    if base < 0:
        raise CalculatorError("a negative number to a non-integer power has no real value.")
    return _checked(_float_power(float(base), float(exponent)))


def _float_power(base: float, exponent: float) -> float:
    try:
        return math.pow(base, exponent)
    except (OverflowError, ValueError) as err:
        raise CalculatorError(f"the result cannot be computed ({err}).") from None


def evaluate(expression: str) -> Number:
    """The exact value of ``expression`` (a float only after a non-integer power).

    Raises:
        CalculatorError: the expression is not in the grammar or passes a bound.
    """
    return _Parser(expression).parse()


def format_number(value: Number) -> str:
    """An integer as its digits; another fraction as a decimal, exact when it terminates within
    :data:`SIGNIFICANT_DIGITS` digits, else rounded to that many significant digits; a float the same way."""
    if isinstance(value, Fraction) and value.denominator == 1:
        return str(value.numerator)
    wide = Context(prec=SIGNIFICANT_DIGITS + 10)  # its own context: the thread's may have been narrowed by others
    decimal = wide.divide(value.numerator, value.denominator) if isinstance(value, Fraction) else Decimal(value)
    narrow = Context(prec=SIGNIFICANT_DIGITS)
    rounded = narrow.plus(decimal)
    if rounded == rounded.to_integral_value(context=narrow) and rounded.adjusted() < SIGNIFICANT_DIGITS:
        return str(int(rounded))
    text = format(rounded.normalize(narrow), "f" if -6 <= rounded.adjusted() < SIGNIFICANT_DIGITS else "e")
    return text


@register_tool("calculator", summary="exact arithmetic: + - * / ^ and parentheses, parsed by a small grammar")
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly and return the result.

    Args:
        expression: numbers with + - * / (or × ÷), ^ or ** for powers, and parentheses, e.g. "(1234 + 5) * 678^2".
    """
    return format_number(evaluate(expression))
