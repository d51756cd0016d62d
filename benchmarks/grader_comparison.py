"""Math graders side by side: genalign's ``math_equivalence`` against math-verify (``math_verify_equivalence``, the
grader of TRL's ``accuracy_reward``, run in the sandbox) on a corpus of (gold answer, completion) pairs whose truth
is known by construction.

The corpus (:func:`build_corpus`, seeded): procedural pairs in 14 categories (integers with separators, decimals vs
fractions, mixed numbers, percentages, units, intervals and sets, ``\\boxed{}`` forms, LaTeX spacing, scientific
notation, negative signs, degrees, pi and roots, algebraic forms, tuples and matrices) and pairs built from
reasoning-gym's answers (arithmetic, GCD/LCM, equations, decimals, fractions, complex numbers, polynomial roots,
powers, products and integrals of polynomials): each gold answer with formatting variants of the same value (truth:
equal) and plausible wrong answers (off by one, a sign, a digit, a reciprocal, a swapped interval end; truth: not
equal). Every pair has a *kind* (what was varied); every completion ends with ``\\boxed{answer}`` unless the kind is
about the box itself. Both graders score the same completion text against the same gold answer through their reward
classes (extraction included).

Reported: agreement of the two graders, each one's accuracy against the constructed truth, accuracy per category,
each disagreement class (kind and the two decisions) with its count, an example and who is right, each grader's
errors that the other shares, and the cost per pair.

    HF_HUB_OFFLINE=1 python benchmarks/grader_comparison.py                 # writes benchmarks/grader_comparison_results.md
    HF_HUB_OFFLINE=1 python benchmarks/grader_comparison.py --smoke         # one pair per kind, prints, writes nothing

Needs math-verify (``pip install 'genalign[math]'``) and reasoning-gym (``genalign[data]``); ``--smoke`` without
math-verify fails with that message.
"""

from __future__ import annotations

import argparse
import collections
import math
import platform
import random
import sys
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from genalign.rewards.math_answers.equivalence import MathEquivalence  # noqa: E402
from genalign.rewards.math_answers.math_verify_grader import (  # noqa: E402
    MathVerifyEquivalence,
    math_verify_available,
    math_verify_outcomes,
)


@dataclass(frozen=True)
class Pair:
    category: str
    kind: str  # what was varied: the disagreement classes are per kind
    gold: str
    completion: str
    equal: bool  # the truth, by construction

    @property
    def shown(self) -> str:
        """The answer part of the completion (for the report)."""
        prefix = "Therefore, the final answer is "
        return self.completion.split(prefix, 1)[1] if prefix in self.completion else self.completion


def boxed(answer: str) -> str:
    return f"Let me work through it step by step.\nTherefore, the final answer is $\\boxed{{{answer}}}$."


# ----------------------------------------------------------------------------------------------------------------------
# procedural pairs: each function adds (kind, gold, completion, truth) for a few random values
# ----------------------------------------------------------------------------------------------------------------------


class Corpus:
    def __init__(self, rng: random.Random, repeat: int) -> None:
        self.rng, self.repeat, self.pairs = rng, repeat, []
        self.category = ""

    def add(self, kind: str, gold: str, answer: str, equal: bool, *, raw: bool = False) -> None:
        self.pairs.append(Pair(self.category, kind, gold, answer if raw else boxed(answer), equal))


def _sep(n: int, sep: str) -> str:
    return f"{n:,}".replace(",", sep)


def integers(c: Corpus) -> None:
    for _ in range(c.repeat):
        n = c.rng.randrange(1_000, 10_000_000)
        c.add("comma separators", str(n), f"{n:,}", True)
        c.add("comma separators in gold", f"{n:,}", str(n), True)
        c.add("{,} separators", str(n), _sep(n, "{,}"), True)
        c.add("thin-space separators \\,", str(n), _sep(n, "\\,"), True)
        c.add("space separators", str(n), _sep(n, " "), True)
        c.add("trailing .0", str(n), f"{n}.0", True)
        c.add("wrong: off by one", str(n), f"{n + 1:,}", False)
        c.add("wrong: times ten", str(n), str(n * 10), False)
        c.add("wrong: digits swapped", str(n), _swap_digits(str(n)), _swap_digits(str(n)) == str(n))


def _swap_digits(text: str) -> str:
    return text[:-2] + text[-1] + text[-2]


def decimals_fractions(c: Corpus) -> None:
    for _ in range(c.repeat):
        q = c.rng.choice([2, 4, 5, 8, 10, 20, 25, 40])
        p = c.rng.choice([k for k in range(1, 3 * q) if math.gcd(k, q) == 1])
        exact = str(float(Fraction(p, q)))
        c.add("decimal for \\frac", f"\\frac{{{p}}}{{{q}}}", exact, True)
        c.add("\\frac for decimal", exact, f"\\frac{{{p}}}{{{q}}}", True)
        c.add("\\dfrac / \\tfrac", f"\\frac{{{p}}}{{{q}}}", f"\\{c.rng.choice(['d', 't'])}frac{{{p}}}{{{q}}}", True)
        c.add("a/b", f"\\frac{{{p}}}{{{q}}}", f"{p}/{q}", True)
        c.add("unreduced fraction", f"\\frac{{{p}}}{{{q}}}", f"\\frac{{{2 * p}}}{{{2 * q}}}", True)
        c.add("\\frac with one-digit arguments (\\frac12)", "\\frac{1}{2}" if p > 9 else f"\\frac{{{p}}}{{3}}",
              "\\frac12" if p > 9 else f"\\frac{p}3", True)  # fmt: skip
        c.add("wrong: reciprocal", f"\\frac{{{p}}}{{{q}}}", f"\\frac{{{q}}}{{{p}}}", p == q)
        c.add("wrong: denominator + 1", f"\\frac{{{p}}}{{{q}}}", f"\\frac{{{p}}}{{{q + 1}}}", False)
        q3 = c.rng.choice([3, 6, 7, 9, 11])
        p3 = c.rng.choice([k for k in range(1, q3) if math.gcd(k, q3) == 1])
        c.add("wrong: rounded decimal (2 places)", f"\\frac{{{p3}}}{{{q3}}}", f"{p3 / q3:.2f}", False)


def mixed_numbers(c: Corpus) -> None:
    for _ in range(c.repeat):
        a, q = c.rng.randrange(1, 10), c.rng.choice([3, 4, 5, 7, 8])
        b = c.rng.choice([k for k in range(1, q) if math.gcd(k, q) == 1])
        improper = f"\\frac{{{a * q + b}}}{{{q}}}"
        c.add("mixed number a\\frac{b}{c}", improper, f"{a}\\frac{{{b}}}{{{q}}}", True)
        c.add("mixed number with a space", improper, f"{a} \\frac{{{b}}}{{{q}}}", True)
        c.add("mixed number in gold", f"{a}\\frac{{{b}}}{{{q}}}", improper, True)
        c.add("wrong: mixed number, other fraction", improper, f"{a}\\frac{{{q - b}}}{{{q}}}", q - b == b)


def percentages(c: Corpus) -> None:
    for _ in range(c.repeat):
        n = c.rng.randrange(1, 100)
        c.add("\\% sign", str(n), f"{n}\\%", True)
        c.add("% sign (no backslash)", str(n), f"{n}%", True)
        c.add("\\% in gold", f"{n}\\%", str(n), True)
        c.add("wrong: percent, other value", f"{n}\\%", f"{n + 5}\\%", False)


_UNITS = ["cm", "m", "km", "meters", "inches", "feet", "dollars", "square units", "units", "kg", "hours", "degrees"]


def units(c: Corpus) -> None:
    for _ in range(c.repeat):
        n, unit = c.rng.randrange(2, 500), c.rng.choice(_UNITS)
        c.add("\\text{ unit}", str(n), f"{n}\\text{{ {unit}}}", True)
        c.add("\\text{unit} after a space", str(n), f"{n} \\text{{{unit}}}", True)
        c.add("\\,\\text{unit}", str(n), f"{n}\\,\\text{{{unit}}}", True)
        c.add("\\mbox{ unit}", str(n), f"{n}\\mbox{{ {unit}}}", True)
        c.add("\\mathrm{unit}", str(n), f"{n}\\mathrm{{{unit.split()[0]}}}", True)
        c.add("\\text{unit}^2", str(n), f"{n}\\text{{ cm}}^2", True)
        c.add("plain word unit (5 cm)", str(n), f"{n} {unit}", True)
        c.add("\\$ before", str(n), f"\\${n}", True)
        c.add("unit in gold", f"{n}\\text{{ {unit}}}", str(n), True)
        c.add("wrong: unit, other value", str(n), f"{n + 1}\\text{{ {unit}}}", False)


def intervals_sets(c: Corpus) -> None:
    for _ in range(c.repeat):
        a = c.rng.randrange(-9, 5)
        b = a + c.rng.randrange(1, 9)
        c.add("interval spacing", f"({a}, {b}]", f"({a},{b}]", True)
        c.add("interval \\left( \\right]", f"({a}, {b}]", f"\\left({a}, {b}\\right]", True)
        c.add("interval to infinity", f"[{a}, \\infty)", f"[{a},\\infty)", True)
        c.add("union of intervals", f"(-\\infty, {a}) \\cup ({b}, \\infty)", f"(-\\infty,{a})\\cup({b},\\infty)", True)
        c.add("set, other order", f"\\{{{a}, {b}\\}}", f"\\{{{b}, {a}\\}}", True)
        c.add("set, same order", f"\\{{{a}, {b}\\}}", f"\\{{{a},{b}\\}}", True)
        c.add("wrong: interval, closed end", f"({a}, {b}]", f"[{a}, {b}]", False)
        c.add("wrong: interval, open end", f"[{a}, \\infty)", f"({a}, \\infty)", False)
        c.add("wrong: union, other end", f"(-\\infty, {a}) \\cup ({b}, \\infty)", f"(-\\infty, {a}) \\cup ({b + 1}, \\infty)",
              False)  # fmt: skip
        c.add("wrong: set, other element", f"\\{{{a}, {b}\\}}", f"\\{{{a}, {b + 1}\\}}", False)


def boxed_forms(c: Corpus) -> None:
    intro = "We compute the value.\n"
    for _ in range(c.repeat):
        n = c.rng.randrange(2, 1000)
        c.add("\\boxed{\\boxed{}}", str(n), f"{intro}So the answer is \\boxed{{\\boxed{{{n}}}}}.", True, raw=True)
        c.add("\\boxed without $", str(n), f"{intro}The answer is \\boxed{{{n}}}", True, raw=True)
        c.add("spaces inside \\boxed", str(n), f"{intro}The answer is $\\boxed{{ {n} }}$.", True, raw=True)
        c.add("\\fbox", str(n), f"{intro}The answer is \\fbox{{{n}}}.", True, raw=True)
        c.add("\\boxed{\\text{}}", str(n), f"{intro}The answer is $\\boxed{{\\text{{{n}}}}}$.", True, raw=True)
        c.add("\\boxed{x = n}", str(n), f"{intro}The answer is $\\boxed{{x = {n}}}$.", True, raw=True)
        c.add("final period inside \\boxed", str(n), f"{intro}The answer is $\\boxed{{{n}.}}$", True, raw=True)
        c.add("earlier box wrong, last box right", str(n),
              f"{intro}First guess $\\boxed{{{n + 1}}}$, but checking again, the answer is $\\boxed{{{n}}}$.", True,
              raw=True)  # fmt: skip
        c.add("wrong: earlier box right, last box wrong", str(n),
              f"{intro}First guess $\\boxed{{{n}}}$, but checking again, the answer is $\\boxed{{{n + 1}}}$.", False,
              raw=True)  # fmt: skip
        c.add("wrong: boxed other value", str(n), f"{intro}The answer is $\\boxed{{{n + 2}}}$.", False, raw=True)
        c.add("wrong: no box, value in text", str(n), f"{intro}The answer is {n + 3}.", False, raw=True)


_SPACES = ["\\,", "\\;", "\\!", "\\quad ", "~", "\\ ", "\\:"]


def latex_spacing(c: Corpus) -> None:
    for _ in range(c.repeat):
        p, q = c.rng.randrange(1, 20), c.rng.randrange(21, 40)
        s = c.rng.choice(_SPACES)
        c.add(f"spacing command {s.strip()}", f"\\frac{{{p}}}{{{q}}}", f"{s}\\frac{{{p}}}{{{q}}}{s}", True)
        c.add("\\displaystyle", f"\\frac{{{p}}}{{{q}}}", f"\\displaystyle\\frac{{{p}}}{{{q}}}", True)
        c.add("\\left( \\right)", f"{p}", f"\\left({p}\\right)", True)
        c.add("spaces in \\sqrt", f"{p}\\sqrt{{{q}}}", f"{p} \\sqrt {{ {q} }}", True)
        c.add("wrong: spacing, other value", f"\\frac{{{p}}}{{{q}}}", f"{s}\\frac{{{p + 1}}}{{{q}}}", False)


def scientific(c: Corpus) -> None:
    for _ in range(c.repeat):
        mantissa, exponent = c.rng.randrange(11, 99), c.rng.randrange(3, 8)
        value = mantissa * 10 ** (exponent - 1)
        m = f"{mantissa // 10}.{mantissa % 10}"
        c.add("e-notation", str(value), f"{m}e{exponent}", True)
        c.add("E+ notation", str(value), f"{m}E+{exponent}", True)
        c.add("\\times 10^{n}", str(value), f"{m} \\times 10^{{{exponent}}}", True)
        c.add("\\cdot 10^n", str(value), f"{m}\\cdot10^{exponent}", True)
        c.add("\\times 10^{-n} for a small decimal", f"{m}\\times 10^{{-{exponent}}}",
              str(Fraction(mantissa, 10 ** (exponent + 1)).__float__()), True)  # fmt: skip
        c.add("wrong: exponent off by one", str(value), f"{m} \\times 10^{{{exponent + 1}}}", False)
        c.add("wrong: e-notation, other mantissa", str(value), f"{mantissa // 10}.{(mantissa + 1) % 10}e{exponent}",
              (mantissa + 1) % 10 == mantissa % 10)  # fmt: skip


def negatives(c: Corpus) -> None:
    for _ in range(c.repeat):
        n, q = c.rng.randrange(1, 200), c.rng.choice([3, 5, 7])
        c.add("unicode minus", f"-{n}", f"\u2212{n}", True)
        c.add("minus and a space", f"-{n}", f"- {n}", True)
        c.add("parenthesised negative", f"-{n}", f"(-{n})", True)
        c.add("minus in the numerator", f"-\\frac{{{n}}}{{{q}}}", f"\\frac{{-{n}}}{{{q}}}", n % q == 0 or True)
        c.add("minus in the denominator", f"-\\frac{{{n}}}{{{q}}}", f"\\frac{{{n}}}{{-{q}}}", True)
        c.add("-a/b", f"-\\frac{{{n}}}{{{q}}}", f"-{n}/{q}", True)
        c.add("wrong: sign dropped", f"-{n}", str(n), False)
        c.add("wrong: fraction, sign dropped", f"-\\frac{{{n}}}{{{q}}}", f"\\frac{{{n}}}{{{q}}}", False)


def degrees(c: Corpus) -> None:
    for _ in range(c.repeat):
        n = c.rng.randrange(1, 360)
        c.add("^\\circ", str(n), f"{n}^\\circ", True)
        c.add("^{\\circ}", str(n), f"{n}^{{\\circ}}", True)
        c.add("degree sign °", str(n), f"{n}°", True)
        c.add("\\text{ degrees}", str(n), f"{n}\\text{{ degrees}}", True)
        c.add("^\\circ in gold", f"{n}^\\circ", str(n), True)
        c.add("wrong: degrees, other value", str(n), f"{n + 10}^\\circ", False)


_SQUAREFREE = [2, 3, 5, 6, 7, 10, 11, 13]


def pi_sqrt(c: Corpus) -> None:
    for _ in range(c.repeat):
        a, b = c.rng.randrange(2, 9), c.rng.choice(_SQUAREFREE)
        k = c.rng.randrange(2, 13)
        gold = f"{a}\\sqrt{{{b}}}"
        c.add("\\sqrt{a^2 b} for a\\sqrt{b}", gold, f"\\sqrt{{{a * a * b}}}", True)
        c.add("\\sqrt without braces", gold, f"{a}\\sqrt{b}" if b < 10 else f"{a}\\sqrt {{{b}}}", True)
        c.add("sqrt() plain", gold, f"{a}*sqrt({b})", True)
        c.add("root factor first", gold, f"\\sqrt{{{b}}} \\cdot {a}", True)
        c.add("rationalised denominator", f"\\frac{{\\sqrt{{{b}}}}}{{{b}}}", f"\\frac{{1}}{{\\sqrt{{{b}}}}}", True)
        c.add("\\pi times n", f"{k}\\pi", f"\\pi \\cdot {k}", True)
        c.add("\\pi over n as a/b", f"\\frac{{\\pi}}{{{k}}}", f"\\pi/{k}", True)
        c.add("cube root", str(a), f"\\sqrt[3]{{{a**3}}}", True)
        c.add("wrong: other radicand", gold, f"{a}\\sqrt{{{b + 1 if b + 1 != 4 else 5}}}", False)
        c.add("wrong: decimal approximation of a root", gold, f"{a * math.sqrt(b):.3f}", False)
        c.add("wrong: \\pi, other factor", f"{k}\\pi", f"{k + 1}\\pi", False)


def algebraic(c: Corpus) -> None:
    for _ in range(c.repeat):
        a, b = c.rng.randrange(2, 9), c.rng.randrange(1, 9)
        var = c.rng.choice("xyt")
        c.add("factored out", f"{a}{var}+{a * b}", f"{a}({var}+{b})", True)
        c.add("terms reordered", f"{a}{var}+{a * b}", f"{a * b} + {a}{var}", True)
        c.add("difference of squares", f"{var}^2-{b * b}", f"({var}-{b})({var}+{b})", True)
        c.add("square of a sum", f"{var}^2+{2 * b}{var}+{b * b}", f"({var}+{b})^2", True)
        c.add("\\frac{x}{a} as a decimal coefficient", f"\\frac{{{var}}}{{2}}", f"0.5{var}", True)
        c.add("\\frac{1}{a}x", f"\\frac{{{var}}}{{{a}}}", f"\\frac{{1}}{{{a}}}{var}", True)
        c.add("wrong: constant off by one", f"{a}{var}+{a * b}", f"{a}{var}+{a * b + 1}", False)
        c.add("wrong: square, sign", f"{var}^2+{2 * b}{var}+{b * b}", f"({var}-{b})^2", False)
        c.add("wrong: other variable", f"{a}{var}+{b}", f"{a}{'z' if var != 'z' else 'w'}+{b}", False)


def tuples_matrices(c: Corpus) -> None:
    for _ in range(c.repeat):
        a, b, d = c.rng.randrange(-9, 10), c.rng.randrange(-9, 10), c.rng.randrange(1, 10)
        if a == b:
            b += 1
        c.add("tuple spacing", f"({a}, {b})", f"({a},{b})", True)
        c.add("tuple \\left( \\right)", f"({a}, {b})", f"\\left({a}, {b}\\right)", True)
        c.add("tuple with a fraction", f"({a}, \\frac{{1}}{{{d}}})", f"({a}, 1/{d})", True)
        vector = f"\\begin{{pmatrix}} {a} \\\\ {b} \\end{{pmatrix}}"
        c.add("pmatrix spacing", vector, f"\\begin{{pmatrix}}{a}\\\\{b}\\end{{pmatrix}}", True)
        matrix = f"\\begin{{pmatrix}} {a} & {b} \\\\ {d} & {a} \\end{{pmatrix}}"
        c.add("2x2 pmatrix spacing", matrix, f"\\begin{{pmatrix}}{a}&{b}\\\\{d}&{a}\\end{{pmatrix}}", True)
        c.add("pmatrix with a fraction for a decimal", f"\\begin{{pmatrix}} {a} \\\\ \\frac{{1}}{{2}} \\end{{pmatrix}}",
              f"\\begin{{pmatrix}} {a} \\\\ 0.5 \\end{{pmatrix}}", True)  # fmt: skip
        c.add("bmatrix for pmatrix", vector, f"\\begin{{bmatrix}} {a} \\\\ {b} \\end{{bmatrix}}", True)
        c.add("wrong: tuple, swapped", f"({a}, {b})", f"({b}, {a})", False)
        c.add("wrong: tuple, other value", f"({a}, {b})", f"({a}, {b + 1})", False)
        c.add("wrong: pmatrix, swapped", vector, f"\\begin{{pmatrix}} {b} \\\\ {a} \\end{{pmatrix}}", False)
        c.add("wrong: tuple as interval", f"({a}, {b})" if a < b else f"({b}, {a})",
              f"[{min(a, b)}, {max(a, b)}]", False)  # fmt: skip


PROCEDURAL = {
    "integers with separators": integers,
    "decimals vs fractions": decimals_fractions,
    "mixed numbers": mixed_numbers,
    "percentages": percentages,
    "units": units,
    "intervals and sets": intervals_sets,
    "boxed forms": boxed_forms,
    "LaTeX spacing": latex_spacing,
    "scientific notation": scientific,
    "negative signs": negatives,
    "degrees": degrees,
    "pi and roots": pi_sqrt,
    "algebraic forms": algebraic,
    "tuples and matrices": tuples_matrices,
}


# ----------------------------------------------------------------------------------------------------------------------
# pairs from reasoning-gym's answers
# ----------------------------------------------------------------------------------------------------------------------


def _integer_variants(c: Corpus, task: str, gold: str) -> None:
    n = int(gold)
    c.add(f"{task}: as given", gold, gold, True)
    c.add(f"{task}: trailing .0", gold, f"{n}.0", True)
    if abs(n) >= 1000:
        c.add(f"{task}: comma separators", gold, f"{n:,}", True)
    c.add(f"{task}: wrong, off by one", gold, str(n + 1), False)
    c.add(f"{task}: wrong, sign", gold, str(-n), n == 0)


def _decimal_variants(c: Corpus, task: str, gold: str) -> None:
    value = Fraction(gold)
    c.add(f"{task}: as given", gold, gold, True)
    c.add(f"{task}: trailing zero", gold, gold + "0" if "." in gold else gold + ".0", True)
    stripped = gold.replace("0.", ".", 1) if gold.startswith("0.") else None
    if stripped:
        c.add(f"{task}: no leading zero", gold, stripped, True)
    wrong = value * Fraction(11, 10) if value else Fraction(1, 10)
    c.add(f"{task}: wrong, 10% off", gold, str(float(wrong)), False)
    c.add(f"{task}: wrong, sign", gold, str(-value if value else 1).replace("/", "/"), value == 0)


def reasoning_gym_pairs(c: Corpus, per_task: int) -> None:
    import reasoning_gym

    def answers(task: str, **config) -> list[str]:
        dataset = reasoning_gym.create_dataset(task, seed=c.rng.randrange(1 << 30), size=per_task, **config)
        return [str(dataset[i]["answer"]) for i in range(per_task)]

    for task in ("basic_arithmetic", "chain_sum", "products", "gcd", "lcm", "simple_equations"):
        for gold in answers(task):
            _integer_variants(c, task, gold)
        if task == "simple_equations":
            for gold in answers(task):
                c.add("simple_equations: x = n", gold, f"x = {gold}", True)
    for task in ("decimal_arithmetic", "decimal_chain_sum"):
        for gold in answers(task):
            _decimal_variants(c, task, gold)
    for gold in answers("fraction_simplification"):
        inner = gold.strip("$")
        p, q = (inner.replace("\\dfrac{", "").replace("\\frac{", "").replace("}{", "/").rstrip("}")).split("/")
        c.add("fraction_simplification: as given", gold, inner, True)
        c.add("fraction_simplification: \\frac", gold, f"\\frac{{{p}}}{{{q}}}", True)
        c.add("fraction_simplification: a/b", gold, f"{p}/{q}", True)
        c.add("fraction_simplification: wrong, reciprocal", gold, f"\\frac{{{q}}}{{{p}}}", p == q)
        c.add("fraction_simplification: wrong, numerator + 1", gold, f"\\frac{{{int(p) + 1}}}{{{q}}}", False)
    for gold in answers("complex_arithmetic"):
        real, imag = _complex_parts(gold)
        sign = "+" if imag >= 0 else "-"
        c.add("complex_arithmetic: as given", gold, gold, True)
        c.add("complex_arithmetic: integers", gold, f"{_num(real)} {sign} {_num(abs(imag))}i", True)
        c.add("complex_arithmetic: imaginary part first", gold, f"{_num(imag)}i {'+' if real >= 0 else '-'} {_num(abs(real))}",
              True)  # fmt: skip
        c.add("complex_arithmetic: wrong, conjugate", gold, f"{_num(real)} {'-' if sign == '+' else '+'} {_num(abs(imag))}i",
              imag == 0)  # fmt: skip
    for gold in answers("polynomial_equations"):
        roots = [r.strip() for r in gold.split(",")]
        c.add("polynomial_equations: as given", gold, gold, True)
        c.add("polynomial_equations: 0 for 0.0", gold, ", ".join(_num(float(r)) for r in roots), True)
        if len(roots) > 1:
            c.add("polynomial_equations: wrong, a root missing", gold, ", ".join(roots[:-1]), False)
        else:
            c.add("polynomial_equations: wrong, an extra root", gold, f"{roots[0]}, 1.5", roots[0] == "1.5")
    for gold in answers("power_function"):
        value = float(gold)
        mantissa, exponent = f"{value:e}".split("e")
        exact = gold if "e" in gold else None
        c.add("power_function: as given", gold, gold, True)
        if exact:
            m, e = exact.split("e")
            c.add("power_function: \\times 10^{n}", gold, f"{m} \\times 10^{{{int(e)}}}", True)
        c.add("power_function: wrong, exponent off by one", gold,
              f"{mantissa}e{int(exponent) + 1}", False)  # fmt: skip
    for task in ("polynomial_multiplication", "simple_integration"):
        for gold in answers(task):
            c.add(f"{task}: as given", gold, gold, True)
            c.add(f"{task}: LaTeX powers and implicit products", gold, _latexify(gold), True)
            wrong = _bump_first_coefficient(gold)
            c.add(f"{task}: wrong, a coefficient + 1", gold, wrong, wrong == gold)


def _complex_parts(text: str) -> tuple[float, float]:
    """``"-2.0 - 4.0i"`` -> ``(-2.0, -4.0)``; also ``"3.0"`` and ``"-4.0i"``."""
    text = text.replace(" ", "")
    split = max(text.rfind("+"), text.rfind("-"))
    if not text.endswith("i"):
        return float(text), 0.0
    if split <= 0:
        return 0.0, float(text[:-1] or "1")
    return float(text[:split]), float(text[split:-1])


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _latexify(expression: str) -> str:
    """``-9*x**8/10 + C`` -> ``-9x^{8}/10 + C``."""
    import re

    text = re.sub(r"\*\*(\d+)", r"^{\1}", expression)
    return re.sub(r"(\d)\*([A-Za-z])", r"\1\2", text)


def _bump_first_coefficient(expression: str) -> str:
    import re

    match = re.search(r"\d+", expression)
    if match is None:
        return expression + " + 1"
    return expression[: match.start()] + str(int(match.group()) + 1) + expression[match.end() :]


def build_corpus(seed: int = 0, repeat: int = 10, gym_per_task: int = 25) -> list[Pair]:
    """The corpus: ``repeat`` random values per procedural kind, ``gym_per_task`` answers per reasoning-gym task."""
    corpus = Corpus(random.Random(seed), repeat)
    for category, build in PROCEDURAL.items():
        corpus.category = category
        build(corpus)
    corpus.category = "reasoning-gym"
    reasoning_gym_pairs(corpus, gym_per_task)
    return corpus.pairs


# ----------------------------------------------------------------------------------------------------------------------
# scoring and the report
# ----------------------------------------------------------------------------------------------------------------------


def score(pairs: list[Pair]) -> dict[str, object]:
    """Both graders' decisions (True: equal) and their costs."""
    ours = MathEquivalence()
    started = time.perf_counter()
    ours_rewards = ours.score([p.completion for p in pairs], [p.gold for p in pairs])
    ours_s = time.perf_counter() - started
    theirs = MathVerifyEquivalence(timeout_s=5.0)
    started = time.perf_counter()
    theirs_rewards = theirs.score([p.completion for p in pairs], [p.gold for p in pairs])
    theirs_s = time.perf_counter() - started
    as_trl = MathVerifyEquivalence(timeout_s=5.0, wrap_gold=False)
    trl_rewards = as_trl.score([p.completion for p in pairs], [p.gold for p in pairs])
    started = time.perf_counter()
    math_verify_outcomes([(pairs[0].gold, pairs[0].completion)])
    one_s = time.perf_counter() - started
    return {
        "ours": [r == 1.0 for r in ours_rewards],
        "theirs": [r == 1.0 for r in theirs_rewards],
        "theirs_none": [r is None for r in theirs_rewards],
        "trl": [r == 1.0 for r in trl_rewards],
        "trl_none": sum(r is None for r in trl_rewards),
        "ours_metrics": ours.pop_metrics(),
        "theirs_metrics": theirs.pop_metrics(),
        "ours_s": ours_s,
        "theirs_s": theirs_s,
        "one_pair_s": one_s,
    }


def _cell(text: str, width: int = 70) -> str:
    text = text.replace("\n", " ").replace("|", "\\|")
    return "`" + (text if len(text) <= width else text[: width - 1] + "…") + "`"


def report(pairs: list[Pair], scores: dict, command: str) -> str:
    ours, theirs, none = scores["ours"], scores["theirs"], scores["theirs_none"]
    n = len(pairs)
    truth = [p.equal for p in pairs]
    agree = sum(a == b for a, b in zip(ours, theirs))
    ours_right = sum(a == t for a, t in zip(ours, truth))
    theirs_right = sum(b == t for b, t in zip(theirs, truth))
    trl_right = sum(b == t for b, t in zip(scores["trl"], truth))
    lines = [
        "# Math graders: genalign `math_equivalence` vs math-verify (`math_verify_equivalence`)",
        "",
        f"Command: `{command}`",
        "",
        f"Environment: Python {platform.python_version()}, math-verify {_version('math-verify')}, "
        f"latex2sympy2_extended {_version('latex2sympy2_extended')}, sympy {_version('sympy')}, "
        f"reasoning-gym {_version('reasoning_gym')}; 2 shared CPU cores. math-verify ran in the sandbox "
        "(genalign.rewards.sandbox), configured as TRL's `accuracy_reward`.",
        "",
        f"Corpus: **{n} pairs** ({sum(truth)} equal, {n - sum(truth)} different by construction), "
        f"{len({p.kind for p in pairs})} kinds in {len({p.category for p in pairs})} categories; "
        "see the script's docstring.",
        "",
        "## Headline",
        "",
        "| measure | value |",
        "|---|---|",
        f"| agreement of the two graders | **{agree / n:.1%}** ({agree} of {n}) |",
        f"| genalign accuracy against the truth | **{ours_right / n:.1%}** ({ours_right}) |",
        f"| math-verify accuracy against the truth | **{theirs_right / n:.1%}** ({theirs_right}) |",
        f"| genalign false positives (different scored equal) | {_count(ours, truth, True, False)} |",
        f"| math-verify false positives | {_count(theirs, truth, True, False)} |",
        f"| genalign false negatives (equal scored different) | {_count(ours, truth, False, True)} |",
        f"| math-verify false negatives | {_count(theirs, truth, False, True)} |",
        f"| math-verify: gold answer not parsed (reward None) | {sum(none)} |",
        f"| math-verify with bare gold answers parsed as TRL's `accuracy_reward` does (`wrap_gold=False`): accuracy | "
        f"{trl_right / n:.1%} ({scores['trl_none']} gold answers not parsed) |",
        f"| genalign: seconds per pair (whole corpus) | {scores['ours_s'] / n * 1000:.1f} ms |",
        f"| math-verify in the sandbox: seconds per pair (batches of 256) | {scores['theirs_s'] / n * 1000:.1f} ms |",
        f"| math-verify in the sandbox: one pair alone (start, import, grade) | {scores['one_pair_s']:.2f} s |",
        "",
        f"genalign counters: {_counters(scores['ours_metrics'])}; math-verify counters: "
        f"{_counters(scores['theirs_metrics'])}.",
        "",
        "## Per category",
        "",
        "| category | pairs | genalign accuracy | math-verify accuracy | agreement |",
        "|---|---|---|---|---|",
    ]
    by_category = collections.defaultdict(list)
    for index, pair in enumerate(pairs):
        by_category[pair.category].append(index)
    for category, indices in by_category.items():
        k = len(indices)
        lines.append(
            f"| {category} | {k} | {sum(ours[i] == truth[i] for i in indices) / k:.0%} | "
            f"{sum(theirs[i] == truth[i] for i in indices) / k:.0%} | "
            f"{sum(ours[i] == theirs[i] for i in indices) / k:.0%} |"
        )
    lines += [
        "",
        "## Disagreements, by class",
        "",
        "A class is a kind of pair and the two decisions. *Right*: the grader whose decision matches the truth.",
        "",
        "| kind | truth | genalign | math-verify | count | right | example: gold → completion's answer |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += _classes(pairs, ours, theirs, lambda i: ours[i] != theirs[i])
    lines += [
        "",
        "## Errors both graders make",
        "",
        "| kind | truth | genalign | math-verify | count | right | example: gold → completion's answer |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += _classes(pairs, ours, theirs, lambda i: ours[i] == theirs[i] != truth[i])
    lines += ["", "## Notes", "", *NOTES]
    return "\n".join(lines) + "\n"


NOTES = [
    "- **Read genalign's figure as an upper bound.** The corpus found the classes where genalign's grader was wrong "
    "(integers compared with a tolerance, an absolute tolerance below 1, `x = 5`, plain-word units, sets, unions, "
    "matrices, `\\ ` and `~`), and the fixes were written against it (before them, on this corpus: 95.7 % "
    "accuracy, 31 false positives, 77 false negatives, 89.7 % agreement); kinds outside the corpus are not measured: "
    "equations and inequalities as answers, `\\pm`, `\\text{or}`, functions (`\\sin`, `\\log`), `i` as the "
    "imaginary unit, degrees against radians, rounded answers.",
    "- **Truth by construction, where a convention decides:** `x = 5` equals `5`; units, `\\%` and `^\\circ` are "
    "decoration; the last `\\boxed{}` is the answer; a decimal rounded to 2 places is not the fraction; `315 m` is "
    "labelled equal to `315` (genalign reads a single letter as a variable, by design: the one pair it gets wrong).",
    "- **math-verify** is configured as TRL's `accuracy_reward` (completion: LaTeX extraction, `\\boxed{}` first, "
    "units dropped); a bare gold answer is parsed as `$gold$` (`wrap_gold`, the default of `math_verify_equivalence`). "
    "With the gold as given, as TRL does, math-verify reads `(1, 2)` as `2` and `8y+48` as `8`: the TRL line above. "
    "Its false negatives are forms its LaTeX grammar does not parse: `**` powers and `*` products, `e` notation, "
    "`\\fbox`, `\\frac12`, `°`, space and `\\,` thousands separators, `sqrt()`, a final period.",
    "- **Cost:** genalign's grader runs in this process (fast path) and a sympy worker process; math-verify runs in a "
    "fresh sandbox per batch of 256 pairs (start and imports once per batch), each pair in a forked worker with a "
    "hard 5 s limit. Seconds depend on the load of the 2 shared cores.",
]


def _classes(pairs: list[Pair], ours: list[bool], theirs: list[bool], keep) -> list[str]:
    groups: dict[tuple, list[int]] = collections.defaultdict(list)
    for index, pair in enumerate(pairs):
        if keep(index):
            groups[(pair.kind, pair.equal, ours[index], theirs[index])].append(index)
    rows = []
    word = {True: "equal", False: "different"}
    for (kind, equal, a, b), indices in sorted(groups.items(), key=lambda item: (-len(item[1]), item[0][0])):
        right = "genalign" if a == equal and b != equal else "math-verify" if b == equal and a != equal else "neither"
        example = pairs[indices[0]]
        rows.append(
            f"| {kind} | {word[equal]} | {word[a]} | {word[b]} | {len(indices)} | {right} | "
            f"{_cell(example.gold, 40)} → {_cell(example.shown, 60)} |"
        )
    return rows or ["| (none) | | | | 0 | | |"]


def _count(decisions: list[bool], truth: list[bool], decided: bool, true: bool) -> int:
    return sum(d == decided and t == true for d, t in zip(decisions, truth))


def _counters(metrics: dict[str, float]) -> str:
    return ", ".join(f"{k} {int(v)}" for k, v in metrics.items() if v and k != "scored") or "none"


def _version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="one pair per kind; print the report, write nothing")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=10, help="random values per procedural kind")
    parser.add_argument("--gym-per-task", type=int, default=25, help="reasoning-gym answers per task")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "grader_comparison_results.md"))
    args = parser.parse_args()
    if not math_verify_available():
        print("grader_comparison needs math-verify: pip install 'genalign[math]'", file=sys.stderr)
        return 2
    pairs = build_corpus(args.seed, 1 if args.smoke else args.repeat, 1 if args.smoke else args.gym_per_task)
    if args.smoke:
        seen: set[str] = set()
        pairs = [p for p in pairs if not (p.kind in seen or seen.add(p.kind))]
    command = "python benchmarks/grader_comparison.py" + (" --smoke" if args.smoke else "")
    if not args.smoke and (args.seed, args.repeat, args.gym_per_task) != (0, 10, 25):
        command += f" --seed {args.seed} --repeat {args.repeat} --gym-per-task {args.gym_per_task}"
    text = report(pairs, score(pairs), command)
    print(text)
    if not args.smoke:
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
