"""Tokens of a math answer: :func:`tokenize` (numbers, single letters, LaTeX commands, operators),
:func:`strip_units` (``\\text{..}`` units at the ends) and :func:`strip_word_units` (``5 cm``: plain words at the end).
The accepted text is described in :mod:`genalign.rewards.math_answers`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from genalign.rewards.math_answers.syntax import MathParseError

MAX_SCIENTIFIC_EXPONENT = 400

FRAC_COMMANDS = {"frac", "dfrac", "tfrac"}
#: command -> the constant's name in :class:`~genalign.rewards.math_answers.syntax.Const`
CONSTANT_COMMANDS = {"pi": "pi", "infty": "oo"}
_MUL_COMMANDS = {"cdot", "times"}
#: set braces and the union of intervals or sets
_SET_COMMANDS = {"{": "\\{", "}": "\\}"}
#: matrix environments (``vmatrix`` is a determinant, a number: not here)
MATRIX_ENVIRONMENTS = {"pmatrix", "bmatrix", "matrix", "smallmatrix"}
_IGNORED_COMMANDS = {"left", "right", "displaystyle", "quad", "qquad", "bigl", "bigr", "Bigl", "Bigr"}
_TEXT_COMMANDS = {"text", "textrm", "textbf", "mathrm", "mbox", "textnormal"}
_PLAIN_WORDS = {"sqrt", "pi"}
_IGNORED_SYMBOLS = {"%", "$", ",", ";", ":", "!", " "}  # after a backslash: \% \$ and LaTeX spacing
_UNICODE = {"−": "-", "–": "-", "×": "\\times ", "·": "\\cdot ", "⋅": "\\cdot ", "÷": "\\div ", "π": "\\pi "}
_UNICODE |= {"∞": "\\infty ", "√": "\\sqrt ", "°": "^\\circ "}

_NUMBER = re.compile(
    r"(?P<int>\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?P<frac>\.\d+)?(?P<exp>[eE][+-]?\d+)?|\.(?P<frac3>\d+)", re.ASCII
)
_DIGITS = frozenset("0123456789")
_COMMAND = re.compile(r"\\([A-Za-z]+|.)", re.DOTALL)


@dataclass(frozen=True)
class Token:
    kind: str  # "num", "letter", "cmd", "text", "op", "end"
    text: str
    value: Fraction | None = None
    position: int = 0


def _number_value(match: re.Match[str]) -> Fraction:
    if match.group("frac3") is not None:
        return Fraction(int(match.group("frac3")), 10 ** len(match.group("frac3")))
    integer = match.group("int").replace(",", "")
    fraction = match.group("frac") or ""
    value = Fraction(int(integer + fraction[1:]), 10 ** max(len(fraction) - 1, 0))
    exponent = match.group("exp")
    if exponent:
        power = int(exponent[1:])
        if abs(power) > MAX_SCIENTIFIC_EXPONENT:
            raise MathParseError(f"scientific exponent {power} is larger than {MAX_SCIENTIFIC_EXPONENT}")
        value *= Fraction(10) ** power
    return value


def _braced(text: str, start: int) -> int:
    """Index just past the ``}`` matching the ``{`` at ``text[start]``."""
    depth = 0
    for position in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[position], 0)
        if depth == 0:
            return position + 1
    raise MathParseError("unbalanced braces")


def _word(text: str, position: int) -> tuple[Token, int]:
    """The run of ASCII letters at ``position``: a single-letter variable, or ``sqrt``/``pi`` written without a
    backslash (the two commands models often write so: ``sqrt(2)``, ``2pi``); and the index past it."""
    end = position
    while end < len(text) and text[end].isascii() and text[end].isalpha():
        end += 1
    word = text[position:end]
    if word in _PLAIN_WORDS:
        return Token("cmd", word, None, position), end
    if len(word) > 1:
        raise MathParseError(f"{word!r} is not a single-letter variable or a known command")
    return Token("letter", word, None, position), end


def _text_group(text: str, name: str, position: int) -> tuple[Token, int]:
    """The ``{..}`` argument of the text command ``\\name`` that ends at ``position``, and the index past it."""
    while position < len(text) and text[position].isspace():
        position += 1
    if position >= len(text) or text[position] != "{":
        raise MathParseError(f"\\{name} must be followed by {{...}}")
    end = _braced(text, position)
    return Token("text", text[position + 1 : end - 1], None, position), end


def _command(text: str, position: int) -> tuple[Token | None, int]:
    """The LaTeX command at ``position`` (a backslash): its token (None for ignored decoration) and the index past it."""
    match = _COMMAND.match(text, position)
    if match is None:
        raise MathParseError("a lone backslash at the end")
    name = match.group(1)
    position = match.end()
    if name in ("left", "right") and text[position : position + 1] == ".":
        return None, position + 1  # \left. and \right. are invisible delimiters
    if name in _IGNORED_SYMBOLS or name in _IGNORED_COMMANDS:
        return None, position
    if name in _TEXT_COMMANDS:
        return _text_group(text, name, position)
    if name in ("begin", "end"):  # \begin{pmatrix} ... \end{pmatrix}
        group, end = _text_group(text, name, position)
        if group.text not in MATRIX_ENVIRONMENTS:
            raise MathParseError(f"unsupported environment {group.text!r}")
        return Token("op", f"\\{name}", None, position), end
    if name == "\\":  # a matrix's row separator
        return Token("op", "\\\\", None, position), position
    if name in _SET_COMMANDS:
        return Token("op", _SET_COMMANDS[name], None, position), position
    if (
        name in FRAC_COMMANDS
        or name in CONSTANT_COMMANDS
        or name in _MUL_COMMANDS
        or name in ("sqrt", "div", "circ", "cup")
    ):
        return Token("cmd", name, None, position), position
    raise MathParseError(f"unknown or unsupported command \\{name}")


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into tokens; raises :class:`MathParseError` at the first character outside the grammar."""
    for old, new in _UNICODE.items():
        text = text.replace(old, new)
    text = text.replace("{,}", ",")
    tokens: list[Token] = []
    position = 0
    while position < len(text):
        char = text[position]
        token: Token | None
        if char.isspace() or char in "$~":  # ~ is a LaTeX non-breaking space
            token, position = None, position + 1
        elif char in _DIGITS or (char == "." and text[position + 1 : position + 2] in _DIGITS):
            match = _NUMBER.match(text, position)
            assert match is not None  # a digit or ".<digit>" always starts a number
            token, position = Token("num", match.group(0), _number_value(match), position), match.end()
        elif char.isascii() and char.isalpha():
            token, position = _word(text, position)
        elif char == "\\":
            token, position = _command(text, position)
        elif text.startswith("**", position):
            token, position = Token("op", "^", None, position), position + 2
        elif char in "+-*/^()[]{},%&":
            token, position = Token("op", char, None, position), position + 1
        else:
            raise MathParseError(f"character {char!r} at position {position} is outside the grammar")
        if token is not None:
            tokens.append(token)
    tokens.append(Token("end", "", None, len(text)))
    return tokens


#: plain words ending an answer after a value and a space: ``5 cm``, ``12 square units``, ``3 cm^2`` (at most three
#: words of two letters or more; ``sqrt`` and ``pi`` are values, and single letters are variables)
_WORD_UNITS = re.compile(
    r"(?<=[\d}).%])\s+(?P<words>[A-Za-z]{2,}\.?(?:\s+[A-Za-z]{2,}\.?){0,2})(?:\^\{?\d\}?)?\s*", re.ASCII
)


def strip_word_units(text: str) -> str:
    """``text`` without plain words that end it after a value and a space (units and counted nouns: ``5 cm``,
    ``12 apples``); ``2 pi`` and ``3 sqrt`` keep theirs."""
    for match in _WORD_UNITS.finditer(text):
        if match.end() == len(text) and not set(match.group("words").lower().split()) & _PLAIN_WORDS:
            return text[: match.start()]
    return text


def strip_units(tokens: list[Token]) -> list[Token]:
    """Drop ``\\text{..}`` groups at the start, and at the end (with a following ``^2``/``^{2}``), of the answer."""
    while tokens and tokens[0].kind == "text":
        tokens = tokens[1:]
    while True:
        body = tokens[:-1]
        if body and body[-1].kind == "text":
            tokens = [*body[:-1], tokens[-1]]
            continue
        # a unit with a power: \text{cm} ^ 2   or   \text{cm} ^ { 2 }
        if len(body) >= 3 and body[-3].kind == "text" and body[-2].text == "^" and body[-1].kind == "num":
            tokens = [*body[:-3], tokens[-1]]
            continue
        if (
            len(body) >= 5
            and body[-5].kind == "text"
            and body[-4].text == "^"
            and [t.text for t in (body[-3], body[-1])] == ["{", "}"]
            and body[-2].kind == "num"
        ):
            tokens = [*body[:-5], tokens[-1]]
            continue
        return tokens
