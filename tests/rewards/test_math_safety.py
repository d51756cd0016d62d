"""math_equivalence never evaluates model-written text: code payloads are parse failures (counted, reward 0, no side
effect); the restricted parser builds the hand-checked values; size limits and timeouts are counted too."""

from __future__ import annotations

import ast
import inspect
import time

import pytest
import sympy

from genalign.rewards import REWARDS
from genalign.rewards.math_answers import equivalence, parser, symbolic, sympy_worker, syntax, tokenizer
from genalign.rewards.math_answers.equivalence import MathEquivalence, compare_math_answers
from genalign.rewards.math_answers.parser import parse_math
from genalign.rewards.math_answers.symbolic import parse_to_sympy
from genalign.rewards.math_answers.sympy_worker import symbolic_equal
from genalign.rewards.math_answers.syntax import MathParseError

x, y = sympy.symbols("x y")

PAYLOADS = [
    "__import__('os').system('touch {marker}')",
    "open('{marker}','w')",
    'exec(\'open("{marker}","w")\')',
    'eval(\'open("{marker}","w")\')',
    "().__class__.__bases__[0].__subclasses__()",
    "(lambda: open('{marker}','w'))()",
    "getattr(__builtins__,'open')('{marker}','w')",
    "globals()['__builtins__'].open('{marker}','w')",
    "import os",
    "Symbol('x').__class__",
    "x.__init__.__globals__",
    "{{1:open('{marker}','w')}}",
]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_code_payloads_are_counted_parse_failures_without_side_effects(payload, tmp_path):
    marker = tmp_path / "pwned"
    text = payload.format(marker=marker)
    reward = MathEquivalence(timeout_s=10.0)
    assert reward([""], [f"The answer is \\boxed{{{text}}}"], answer=["1"]) == [0.0]
    metrics = reward.pop_metrics()
    assert metrics["parse_failures"] == 1.0 and metrics["scored"] == 1.0
    assert symbolic_equal(text, "1") is False  # the module-level helper refuses it too
    assert compare_math_answers("1", text) == "reference_parse_failure"  # a poisoned reference is refused as well
    with pytest.raises(MathParseError):
        parse_math(text)
    assert not marker.exists()


def test_parser_module_has_no_path_to_eval():
    """No call of eval/exec/compile/__import__/sympify/parse_expr/parse_latex anywhere in the parser's code."""
    modules = (syntax, tokenizer, parser, symbolic, sympy_worker, equivalence)
    nodes = [node for module in modules for node in ast.walk(ast.parse(inspect.getsource(module)))]
    string_entry_points = {"eval", "exec", "__import__", "sympify", "parse_expr", "parse_latex"}
    names = {node.id for node in nodes if isinstance(node, ast.Name)}
    attributes = {node.attr for node in nodes if isinstance(node, ast.Attribute)}
    assert not names & (string_entry_points | {"compile"})
    assert not attributes & (string_entry_points | {"S"})  # sympy.S("...") sympifies a string; re.compile is fine


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\\frac{1}{2}", sympy.Rational(1, 2)),
        ("\\dfrac{3}{4}", sympy.Rational(3, 4)),
        ("\\tfrac12", sympy.Rational(1, 2)),
        ("0.5", sympy.Rational(1, 2)),
        (".25", sympy.Rational(1, 4)),
        ("1,000", sympy.Integer(1000)),
        ("1{,}000", sympy.Integer(1000)),
        ("1.5e-3", sympy.Rational(3, 2000)),
        ("50\\%", sympy.Integer(50)),
        ("30^\\circ", sympy.Integer(30)),
        ("5\\text{ cm}^2", sympy.Integer(5)),
        ("\\$12", sympy.Integer(12)),
        ("2\\frac{1}{2}", sympy.Rational(5, 2)),  # a mixed number
        ("\\sqrt{8}", 2 * sympy.sqrt(2)),
        ("\\sqrt[3]{27}", sympy.Integer(3)),
        ("2\\pi", 2 * sympy.pi),
        ("e^{2}", sympy.E**2),
        ("2^-1", sympy.Rational(1, 2)),
        ("2^{3^2}", sympy.Integer(512)),  # right-associative
        ("2**3", sympy.Integer(8)),
        ("3 \\times 4 \\cdot 2", sympy.Integer(24)),
        ("6 \\div 4", sympy.Rational(3, 2)),
        ("-x^2", -(x**2)),
        ("x^2+2x+1", x**2 + 2 * x + 1),
        ("\\left( x+1 \\right)^{2}", (x + 1) ** 2),
        ("2x y", 2 * x * y),
        ("sqrt(8) + 2pi", 2 * sympy.sqrt(2) + 2 * sympy.pi),
        ("\\frac{x}{2}", x / 2),
        ("(1, 2)", sympy.Tuple(1, 2)),
        ("[-\\infty, 3)", sympy.Tuple(-sympy.oo, 3)),
    ],
)
def test_restricted_parser_builds_hand_checked_values(text, expected):
    assert parse_to_sympy(text) == expected


@pytest.mark.parametrize(
    "text",
    ["xy", "sin(x)", "\\sin x", "x=5", "2 3", "x2", "1_000", "f'(x)", "a.b", "(1,2)+3", "x \\text{ and } y", ""],
)
def test_outside_the_grammar_is_a_parse_failure(text):
    with pytest.raises(MathParseError):
        parse_math(text)


@pytest.mark.parametrize(
    "text", ["9^{9^{9^9}}", "2^{2^{20}}", "\\sqrt{2}^{100000}", "(" * 60 + "1" + ")" * 60, "1" * 400]
)
def test_oversized_answers_are_refused_quickly(text):
    started = time.perf_counter()
    with pytest.raises(MathParseError):
        parse_to_sympy(text)
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize(
    ("predicted", "reference", "reward"),
    [
        ("\\frac{1}{2}", "0.5", 1.0),
        ("\\sqrt{8}", "2\\sqrt{2}", 1.0),
        ("x^2+2x+1", "(x+1)^2", 1.0),
        ("1,000", "1000", 1.0),
        ("50\\%", "50", 1.0),
        ("2\\frac{1}{2}", "\\frac{5}{2}", 1.0),
        ("\\pi \\cdot 2", "2\\pi", 1.0),
        ("5\\text{ cm}", "5", 1.0),
        ("\\left(1, 2\\right]", "(1,2]", 1.0),
        ("(1, 2)", "[1, 2]", 0.0),  # an open and a closed interval differ
        ("\\sqrt{2}", "1.414", 0.0),  # symbolic comparison is exact
        ("x^2", "x^3", 0.0),
    ],
)
def test_math_equivalence_hand_checked(predicted, reference, reward):
    fn = MathEquivalence()
    assert fn([""], [f"so \\boxed{{{predicted}}}"], answer=[reference]) == [reward]
    assert fn.pop_metrics()["parse_failures"] == 0.0


def test_counters_cover_each_outcome_and_reset_after_pop():
    fn = REWARDS.get("math_equivalence")(answer_format="boxed", timeout_s=10.0)
    completions = ["\\boxed{12}", "no box", "\\boxed{open('x')}", "\\boxed{9^{9^{9^9}}}", "\\boxed{x}"]
    answers = ["12", "12", "12", "1", "\\sin x"]
    assert fn([""] * 5, completions, answer=answers) == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert fn.pop_metrics() == {
        "scored": 5.0,
        "no_answer": 1.0,
        "parse_failures": 2.0,  # a forbidden word, and a power too large to build (refused inside the worker)
        "reference_parse_failures": 1.0,
        "timeouts": 0.0,
        "symbolic_errors": 0.0,
        "bad_answer": 0.0,
    }
    assert fn.pop_metrics()["scored"] == 0.0


def test_a_slow_comparison_is_a_counted_timeout():
    fn = MathEquivalence(timeout_s=1.0)
    started = time.perf_counter()
    rewards = fn([""], ["\\boxed{(x+y+z+w)^{40}-(x+y)^{40}}"], answer=["1"])  # sympy needs minutes for this
    assert rewards == [0.0]
    assert time.perf_counter() - started < 5.0
    assert fn.pop_metrics()["timeouts"] == 1.0


def test_constructor_rejects_bad_arguments_by_name():
    with pytest.raises(ValueError, match="answer_format='latex'"):
        MathEquivalence(answer_format="latex")
    with pytest.raises(ValueError, match="timeout_s=0"):
        MathEquivalence(timeout_s=0)
