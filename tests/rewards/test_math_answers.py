"""The classes where ``math_equivalence`` was wrong in benchmarks/grader_comparison.py (constructed truth), one test
per fix: exact integers, a truly relative tolerance, ``x = 5`` answers, plain-word units, sets, unions of intervals,
matrices, ``\\ `` and ``~`` spacing."""

from __future__ import annotations

import pytest
import sympy

from genalign.rewards.math_answers.equivalence import compare_math_answers
from genalign.rewards.math_answers.parser import parse_math
from genalign.rewards.math_answers.symbolic import parse_to_sympy
from genalign.rewards.math_answers.syntax import MathParseError, Seq


@pytest.mark.parametrize(
    ("predicted", "reference", "outcome"),
    [
        ("7481507", "7481506", "not_equal"),  # was equal: 1.3e-7 relative, under the 1e-6 tolerance
        ("6,464,344", "6464343", "not_equal"),
        ("90274223935675", "90274223935674", "not_equal"),
        ("\\frac{1000001}{3}", "\\frac{1000000}{3}", "not_equal"),
        ("1234567", "1,234,567", "equal"),
        ("1234567.0", "1234567", "equal"),  # a decimal still gets the tolerance
        ("0.33333333", "1/3", "equal"),
    ],
)
def test_integers_and_fractions_compare_exactly(predicted, reference, outcome):
    assert compare_math_answers(predicted, reference) == outcome


@pytest.mark.parametrize(
    ("predicted", "reference", "outcome"),
    [
        ("1.416867e-19", "1.4168669847975098e-20", "not_equal"),  # was equal: tolerance was absolute below 1
        ("2e-7", "1e-7", "not_equal"),
        ("1.4168669e-20", "1.4168669847975098e-20", "equal"),  # 6e-8 relative
        ("0.001", "0.0015", "not_equal"),
    ],
)
def test_the_tolerance_is_relative_for_small_numbers(predicted, reference, outcome):
    assert compare_math_answers(predicted, reference) == outcome


@pytest.mark.parametrize(
    ("predicted", "reference", "outcome"),
    [
        ("x = 75", "75", "equal"),  # was a parse failure ("=")
        ("75", "x=75", "equal"),
        ("y = \\frac{1}{2}", "0.5", "equal"),
        ("x = 74", "75", "not_equal"),
        ("x = 5", "y = 5", "parse_failure"),  # equations are still outside the grammar
        ("x = 1 = 2", "1", "parse_failure"),
    ],
)
def test_an_answer_stated_as_x_equals_value_is_the_value(predicted, reference, outcome):
    assert compare_math_answers(predicted, reference) == outcome


@pytest.mark.parametrize(
    ("predicted", "reference", "outcome"),
    [
        ("142 square units", "142", "equal"),  # was a parse failure (a word of several letters)
        ("300 meters", "300", "equal"),
        ("5 cm^2", "5", "equal"),
        ("\\frac{1}{2} cup", "0.5", "equal"),
        ("2 pi", "2\\pi", "equal"),  # pi and sqrt are values, not units
        ("3ab", "3", "parse_failure"),  # a word glued to the number is not a unit
        ("301 meters", "300", "not_equal"),
    ],
)
def test_plain_word_units_after_a_value_are_dropped(predicted, reference, outcome):
    assert compare_math_answers(predicted, reference) == outcome


@pytest.mark.parametrize(
    ("predicted", "reference", "outcome"),
    [
        ("\\{7, 2\\}", "\\{2, 7\\}", "equal"),  # was a parse failure (\{)
        ("\\{2, \\sqrt{8}\\}", "\\{2\\sqrt{2}, 2\\}", "equal"),
        ("\\{7, 3\\}", "\\{2, 7\\}", "not_equal"),
        ("\\{2, 7\\}", "(2, 7)", "not_equal"),  # a set is not a tuple
        ("\\{2, 7, 9\\}", "\\{2, 7\\}", "not_equal"),
        ("(2, 7)", "(7, 2)", "not_equal"),  # tuples keep their order
    ],
)
def test_sets_compare_in_any_order(predicted, reference, outcome):
    assert compare_math_answers(predicted, reference) == outcome


@pytest.mark.parametrize(
    ("predicted", "reference", "outcome"),
    [
        ("(2,\\infty)\\cup(-\\infty,1)", "(-\\infty, 1) \\cup (2, \\infty)", "equal"),  # was a parse failure (\cup)
        ("(-\\infty, 1] \\cup (2, \\infty)", "(-\\infty, 1) \\cup (2, \\infty)", "not_equal"),
        ("(2, \\infty] \\cup (-\\infty, 1)", "(-\\infty, 1) \\cup (2, \\infty)", "not_equal"),
        ("(-\\infty, 1)", "(-\\infty, 1) \\cup (2, \\infty)", "not_equal"),
    ],
)
def test_unions_of_intervals_compare_in_any_order(predicted, reference, outcome):
    assert compare_math_answers(predicted, reference) == outcome


@pytest.mark.parametrize(
    ("predicted", "reference", "outcome"),
    [
        ("\\begin{pmatrix} 3 \\\\ 0.5 \\end{pmatrix}", "\\begin{pmatrix} 3 \\\\ \\frac{1}{2} \\end{pmatrix}", "equal"),
        (
            "\\begin{bmatrix} 3 \\\\ 4 \\end{bmatrix}",
            "\\begin{pmatrix} 3 \\\\ 4 \\end{pmatrix}",
            "equal",
        ),  # was a failure
        (
            "\\begin{pmatrix}1&2\\\\3&\\sqrt{16}\\\\\\end{pmatrix}",
            "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}",
            "equal",
        ),
        ("\\begin{pmatrix} 4 \\\\ 3 \\end{pmatrix}", "\\begin{pmatrix} 3 \\\\ 4 \\end{pmatrix}", "not_equal"),
        (
            "\\begin{pmatrix} 3 & 4 \\end{pmatrix}",
            "\\begin{pmatrix} 3 \\\\ 4 \\end{pmatrix}",
            "not_equal",
        ),  # a row is not a column
        ("(3, 4)", "\\begin{pmatrix} 3 \\\\ 4 \\end{pmatrix}", "not_equal"),
        ("\\begin{vmatrix} 3 & 4 \\\\ 5 & 6 \\end{vmatrix}", "-2", "parse_failure"),  # a determinant: not supported
        ("\\begin{pmatrix} 3 & 4 \\\\ 5 \\end{pmatrix}", "1", "parse_failure"),  # ragged rows
    ],
)
def test_matrices_compare_entry_by_entry_whatever_their_brackets(predicted, reference, outcome):
    assert compare_math_answers(predicted, reference) == outcome


@pytest.mark.parametrize(
    ("predicted", "reference"), [("\\ \\frac{9}{32}\\ ", "\\frac{9}{32}"), ("~\\frac{2}{21}~", "\\frac{2}{21}")]
)
def test_backslash_space_and_tilde_are_spaces(predicted, reference):
    assert compare_math_answers(predicted, reference) == "equal"  # were a lone-backslash and a character failure


def test_the_new_forms_parse_to_the_expected_trees():
    assert parse_to_sympy("\\{1, 2\\}") == sympy.Tuple(1, 2)
    assert parse_math("\\{5\\}") == Seq("\\{", "\\}", (parse_math("5"),))
    union = parse_math("(1, 2) \\cup [3, 4]")
    assert isinstance(union, Seq) and union.open == "\\cup" and [s.open for s in union.items] == ["(", "["]
    for text in ("x=5", "1 \\cup 2", "\\{1, 2", "5 sqrt"):
        with pytest.raises(MathParseError):
            parse_math(text)
