"""The recursive-descent parser of math answers: :func:`parse_math` (the grammar is in :mod:`genalign.rewards.math_answers`)."""

from __future__ import annotations

import re
from fractions import Fraction

from genalign.rewards.math_answers.syntax import (
    Add,
    Const,
    Div,
    MathParseError,
    Mul,
    Neg,
    Node,
    Num,
    Pow,
    Root,
    Seq,
    Var,
)
from genalign.rewards.math_answers.tokenizer import (
    CONSTANT_COMMANDS,
    FRAC_COMMANDS,
    Token,
    strip_units,
    strip_word_units,
    tokenize,
)

MAX_LENGTH = 300
MAX_DEPTH = 40

_CLOSING = {"(": ")", "[": "]"}


class _Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.index = 0
        self.depth = 0

    # -- token helpers --
    @property
    def current(self) -> Token:
        return self.tokens[self.index]

    def _is(self, kind: str, text: str | None = None) -> bool:
        token = self.current
        return token.kind == kind and (text is None or token.text == text)

    def _advance(self) -> Token:
        token = self.tokens[self.index]
        self.index += 1
        return token

    def _expect(self, text: str) -> None:
        if not self._is("op", text):
            raise MathParseError(f"expected {text!r} at position {self.current.position}, found {self.current.text!r}")
        self._advance()

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise MathParseError(f"nested deeper than {MAX_DEPTH} levels")

    # -- grammar --
    def answer(self) -> Node:
        node = self.sequence(open_="", close="")
        if self._is("cmd", "cup"):  # a union of intervals or sets
            parts = [node]
            while self._is("cmd", "cup"):
                self._advance()
                parts.append(self.expr())
            if not all(isinstance(part, Seq) and part.open != "" for part in parts):
                raise MathParseError("\\cup joins intervals or sets")
            node = Seq("\\cup", "", tuple(parts))
        if not self._is("end"):
            raise MathParseError(f"unexpected {self.current.text!r} at position {self.current.position}")
        return node

    def sequence(self, open_: str, close: str) -> Node:
        items = [self.expr()]
        while self._is("op", ","):
            self._advance()
            items.append(self.expr())
        if len(items) == 1:
            return items[0]
        return Seq(open_, close, tuple(items))

    def expr(self) -> Node:
        terms = [self.term()]
        while self._is("op", "+") or self._is("op", "-"):
            sign = self._advance().text
            term = self.term()
            terms.append(term if sign == "+" else Neg(term))
        return terms[0] if len(terms) == 1 else Add(tuple(_scalar(t) for t in terms))

    def _starts_implicit_factor(self) -> bool:
        token = self.current
        if token.kind == "letter":
            return True
        if token.kind == "cmd":
            return token.text in CONSTANT_COMMANDS or token.text in FRAC_COMMANDS or token.text == "sqrt"
        return token.kind == "op" and token.text in ("(", "{")

    def term(self) -> Node:
        node = self.unary()
        while True:
            token = self.current
            if (token.kind == "op" and token.text in ("*", "/")) or (
                token.kind == "cmd" and token.text in ("cdot", "times", "div")
            ):
                self._advance()
                right = self.unary()
                if token.text in ("/", "div"):
                    node = Div(_scalar(node), _scalar(right))
                else:
                    node = _mul(node, right)
            elif self._starts_implicit_factor():
                right = self.power()
                node = _mul(node, right)
            else:
                return node

    def unary(self) -> Node:
        if self._is("op", "-"):
            self._advance()
            return Neg(_scalar(self.unary()))
        if self._is("op", "+"):
            self._advance()
            return self.unary()
        return self.power()

    def power(self) -> Node:
        base = self.atom()
        while self._is("op", "%"):
            self._advance()
        if not self._is("op", "^"):
            return base
        self._advance()
        if self._is("cmd", "circ"):  # degrees: 30^\circ is 30
            self._advance()
            return base
        if (
            self._is("op", "{")
            and self.tokens[self.index + 1].kind == "cmd"
            and self.tokens[self.index + 1].text == "circ"
        ):
            self._advance()
            self._advance()
            self._expect("}")
            return base
        exponent = self.unary()  # right-associative: 2^3^2 = 2^(3^2); '{...}' is an atom inside
        return Pow(_scalar(base), _scalar(exponent))

    def atom(self) -> Node:
        token = self.current
        if token.kind == "num":
            return self._number()
        if token.kind == "letter":
            self._advance()
            return Const("E") if token.text == "e" else Var(token.text)
        if token.kind == "cmd" and token.text in CONSTANT_COMMANDS:
            self._advance()
            return Const(CONSTANT_COMMANDS[token.text])
        if token.kind == "cmd" and token.text in FRAC_COMMANDS:
            return self._frac()
        if token.kind == "cmd" and token.text == "sqrt":
            return self._sqrt()
        if token.kind == "op" and token.text in ("(", "["):
            return self._bracketed()
        if token.kind == "op" and token.text == "\\{":
            return self._set()
        if token.kind == "op" and token.text == "\\begin":
            return self._matrix()
        if token.kind == "op" and token.text == "{":
            self._advance()
            self._enter()
            inner = self.expr()
            self.depth -= 1
            self._expect("}")
            return inner
        if token.kind == "end":
            raise MathParseError("the answer ends where a value was expected")
        raise MathParseError(f"unexpected {token.text!r} at position {token.position}")

    def _number(self) -> Node:
        """A number, or a mixed number: an integer directly followed by a fraction (``2\\frac{1}{2}`` = 5/2)."""
        token = self._advance()
        assert token.value is not None
        if self._is("cmd") and self.current.text in FRAC_COMMANDS and token.value.denominator == 1:
            fraction = self._frac()
            if isinstance(fraction, Div) and all(
                isinstance(part, Num) and part.value.denominator == 1
                for part in (fraction.numerator, fraction.denominator)
            ):
                return Add((Num(token.value), fraction))
            return _mul(Num(token.value), fraction)
        return Num(token.value)

    def _sqrt(self) -> Node:
        """``\\sqrt`` with an optional ``[index]`` and its argument."""
        self._advance()
        index = None
        if self._is("op", "["):
            self._advance()
            self._enter()
            index = _scalar(self.expr())
            self.depth -= 1
            self._expect("]")
        return Root(_scalar(self._argument()), index)

    def _bracketed(self) -> Node:
        """``(..)`` or ``[..]``: a grouped value, or a tuple/interval (any closing bracket) when it holds a list."""
        token = self._advance()
        self._enter()
        inner = self.sequence(open_=token.text, close="")
        self.depth -= 1
        closing = self.current.text if self.current.kind == "op" else ""
        if closing not in (")", "]"):
            raise MathParseError(f"unclosed {token.text!r} at position {token.position}")
        self._advance()
        if isinstance(inner, Seq):
            return Seq(token.text, closing, inner.items)
        if closing != _CLOSING[token.text]:
            raise MathParseError(f"{token.text!r} closed by {closing!r} around a single value")
        return inner

    def _set(self) -> Node:
        """``\\{a, b, ...\\}``: a set (its items compare in any order), one item or more."""
        self._advance()
        self._enter()
        inner = self.sequence(open_="\\{", close="")
        self.depth -= 1
        self._expect("\\}")
        return Seq("\\{", "\\}", inner.items if isinstance(inner, Seq) else (inner,))

    def _matrix(self) -> Node:
        """``\\begin{pmatrix} a & b \\\\ c & d \\end{pmatrix}`` (also ``bmatrix``, ``matrix``): its rows, in order."""
        self._advance()
        self._enter()
        rows: list[Seq] = []
        while not self._is("op", "\\end"):
            items = [_scalar(self.expr())]
            while self._is("op", "&"):
                self._advance()
                items.append(_scalar(self.expr()))
            rows.append(Seq("row", "", tuple(items)))
            if self._is("op", "\\\\"):
                self._advance()
            elif not self._is("op", "\\end"):
                raise MathParseError(
                    f"unexpected {self.current.text!r} in a matrix at position {self.current.position}"
                )
        self._advance()
        self.depth -= 1
        if not rows or len({len(row.items) for row in rows}) != 1:
            raise MathParseError("a matrix needs rows of one length")
        return Seq("matrix", "", tuple(rows))

    def _frac(self) -> Node:
        self._advance()
        numerator = self._argument()
        denominator = self._argument()
        return Div(_scalar(numerator), _scalar(denominator))

    def _argument(self) -> Node:
        """A command argument: ``{expr}``, ``(expr)``, or a single token (``\\frac12``: the first digit of a number)."""
        token = self.current
        if token.kind == "op" and token.text in ("{", "("):  # \sqrt{2}, and the plain sqrt(2)
            return _scalar(self.atom())
        if token.kind == "num" and token.text.isdigit() and len(token.text) > 1:
            rest = token.text[1:]  # \frac12 -> 1 and 2: split the number token after its first digit
            self.tokens[self.index] = Token("num", rest, Fraction(int(rest)), token.position + 1)
            return Num(Fraction(int(token.text[0])))
        if token.kind == "num":
            self._advance()
            assert token.value is not None
            return Num(token.value)
        if token.kind == "letter" or (token.kind == "cmd" and token.text in CONSTANT_COMMANDS):
            return self.atom()
        raise MathParseError(f"expected a {{...}} argument at position {token.position}, found {token.text!r}")


def _scalar(node: Node) -> Node:
    if isinstance(node, Seq):
        raise MathParseError("a tuple or interval cannot be used inside arithmetic")
    return node


def _mul(left: Node, right: Node) -> Node:
    left, right = _scalar(left), _scalar(right)
    factors = (*left.factors, right) if isinstance(left, Mul) else (left, right)
    return Mul(factors)


def parse_math(text: str) -> Node:
    """Parse a final answer into a syntax tree; raises :class:`MathParseError` for anything outside the grammar."""
    if not isinstance(text, str):
        raise MathParseError(f"expected a string, got {type(text).__name__}")
    text = re.sub(r"(?<!\\)\\ ", " ", text).strip()  # "\ " is a space, also at the end (not a lone backslash)
    if len(text) > MAX_LENGTH:
        raise MathParseError(f"the answer has {len(text)} characters, more than {MAX_LENGTH}")
    text = strip_word_units(text.rstrip(".").strip())
    tokens = strip_units(tokenize(text))
    if tokens[0].kind == "end":
        raise MathParseError("empty answer")
    return _Parser(tokens).answer()
