"""sympy objects from syntax trees, built through constructors only (:func:`to_sympy`), and their comparison
(:func:`compare_symbolically`, what the sympy worker process runs)."""

from __future__ import annotations

from typing import Any

from genalign.rewards.math_answers.parser import parse_math
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

MAX_RESULT_BITS = 100_000
MAX_CONSTANT_EXPONENT = 10_000


def _check_power(base: Any, exponent: Any) -> None:
    """Refuse a power of numbers whose value would be huge (sympy evaluates ``Integer ** Integer`` eagerly)."""
    if base.free_symbols or not exponent.is_Number:
        return
    if base.is_Rational and exponent.is_Integer:
        bits = max(int(base.p).bit_length(), int(base.q).bit_length())
        if bits > 1 and abs(int(exponent)) * bits > MAX_RESULT_BITS:
            raise MathParseError(f"power with about {abs(int(exponent)) * bits} bits, more than {MAX_RESULT_BITS}")
    elif abs(exponent) > MAX_CONSTANT_EXPONENT:
        raise MathParseError(f"exponent {exponent} of a constant is larger than {MAX_CONSTANT_EXPONENT}")


def to_sympy(node: Node) -> Any:
    """The sympy object of a syntax tree (a ``sympy.Tuple`` of the items for a :class:`Seq`).

    Raises :class:`MathParseError` for a power of numbers beyond the size limits (:mod:`genalign.rewards.math_answers`).
    """
    import sympy

    if isinstance(node, Num):
        return sympy.Rational(node.value.numerator, node.value.denominator)
    if isinstance(node, Var):
        return sympy.Symbol(node.name)
    if isinstance(node, Const):
        return {"pi": sympy.pi, "E": sympy.E, "oo": sympy.oo}[node.name]
    if isinstance(node, Add):
        return sympy.Add(*(to_sympy(term) for term in node.terms))
    if isinstance(node, Mul):
        return sympy.Mul(*(to_sympy(factor) for factor in node.factors))
    if isinstance(node, Neg):
        return sympy.Mul(sympy.Integer(-1), to_sympy(node.operand))
    if isinstance(node, Div):
        denominator = to_sympy(node.denominator)
        _check_power(denominator, sympy.Integer(-1))
        return sympy.Mul(to_sympy(node.numerator), sympy.Pow(denominator, sympy.Integer(-1)))
    if isinstance(node, Pow):
        base, exponent = to_sympy(node.base), to_sympy(node.exponent)
        _check_power(base, exponent)
        return sympy.Pow(base, exponent)
    if isinstance(node, Root):
        radicand = to_sympy(node.radicand)
        if node.index is None:
            return sympy.sqrt(radicand)
        index = to_sympy(node.index)
        if index.is_Number and index.is_zero:
            raise MathParseError("a root of index 0")
        return sympy.root(radicand, index)
    if isinstance(node, Seq):
        return sympy.Tuple(*(to_sympy(item) for item in node.items))
    raise AssertionError(f"unknown node {node!r}")


def parse_to_sympy(text: str) -> Any:
    """:func:`~genalign.rewards.math_answers.parser.parse_math` then :func:`to_sympy`."""
    return to_sympy(parse_math(text))


#: the opening brackets of collections whose items compare in any order: sets and unions
UNORDERED = frozenset({"\\{", "\\cup"})


def sympy_equal(first: Any, second: Any) -> bool:
    """Whether two parsed values are equal: structurally, or ``simplify(a - b) == 0``; tuples item by item."""
    import sympy

    if isinstance(first, sympy.Tuple) or isinstance(second, sympy.Tuple):
        if not (isinstance(first, sympy.Tuple) and isinstance(second, sympy.Tuple)) or len(first) != len(second):
            return False
        return all(sympy_equal(a, b) for a, b in zip(first.args, second.args))
    if first == second:
        return True
    difference = sympy.simplify(first - second)
    return bool(difference == 0)


def nodes_equal(first: Node, second: Node) -> bool:
    """Whether two parsed answers are equal: values with :func:`sympy_equal`; tuples and intervals with the same
    brackets item by item; sets and unions with the same items in any order."""
    if not (isinstance(first, Seq) or isinstance(second, Seq)):
        return sympy_equal(to_sympy(first), to_sympy(second))
    if not (isinstance(first, Seq) and isinstance(second, Seq)):
        return False
    if (first.open, first.close, len(first.items)) != (second.open, second.close, len(second.items)):
        return False
    if first.open not in UNORDERED:
        return all(nodes_equal(a, b) for a, b in zip(first.items, second.items))
    unmatched = list(second.items)
    for item in first.items:  # equality is an equivalence, so a greedy matching finds one if there is one
        match = next((index for index, other in enumerate(unmatched) if nodes_equal(item, other)), None)
        if match is None:
            return False
        del unmatched[match]
    return True


def compare_symbolically(first: str, second: str) -> str:
    """``"equal"``, ``"not_equal"``, ``"parse_failure"`` (``first``), ``"reference_parse_failure"`` (``second``) or
    ``"error"`` for two answer strings.

    This is what the sympy worker process runs: both strings are parsed again here with the restricted parser, so
    the worker only ever sees objects this module built.
    """
    nodes = []
    for text, failure in ((first, "parse_failure"), (second, "reference_parse_failure")):
        try:
            node = parse_math(text)
            to_sympy(node)  # a size limit of a power is a parse failure of this side
            nodes.append(node)
        except MathParseError:
            return failure
        except Exception:  # sympy failing to build an object
            return "error"
    try:
        equal = nodes_equal(*nodes)
    except Exception:  # sympy raises many types (PolynomialError, NotImplementedError, MemoryError...)
        return "error"
    return "equal" if equal else "not_equal"
