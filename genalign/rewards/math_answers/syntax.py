"""The syntax tree of a parsed math answer (plain frozen nodes, no sympy), and :class:`MathParseError`."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction


class MathParseError(ValueError):
    """The text is not a math answer of the supported grammar (see :mod:`genalign.rewards.math_answers`)."""


@dataclass(frozen=True)
class Num:
    value: Fraction


@dataclass(frozen=True)
class Var:
    name: str  # a single ASCII letter


@dataclass(frozen=True)
class Const:
    name: str  # "pi", "E" or "oo"


@dataclass(frozen=True)
class Add:
    terms: tuple[Node, ...]


@dataclass(frozen=True)
class Mul:
    factors: tuple[Node, ...]


@dataclass(frozen=True)
class Neg:
    operand: Node


@dataclass(frozen=True)
class Div:
    numerator: Node
    denominator: Node


@dataclass(frozen=True)
class Pow:
    base: Node
    exponent: Node


@dataclass(frozen=True)
class Root:
    radicand: Node
    index: Node | None  # None: square root


@dataclass(frozen=True)
class Seq:
    """A tuple or interval (``open``/``close`` are the brackets, ``""`` for a bare list; at least two items), a set
    (``"\\{"``/``"\\}"``, one item or more, in any order) or a union (``"\\cup"``/``""``, of tuples, intervals or
    sets, in any order) or a matrix (``"matrix"``/``""``, of rows ``"row"``/``""``, whatever its LaTeX brackets)."""

    open: str
    close: str
    items: tuple[Node, ...]


Node = Num | Var | Const | Add | Mul | Neg | Div | Pow | Root | Seq
