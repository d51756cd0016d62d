"""Tool schemas come from signatures and Google-style docstrings, exactly as transformers' get_json_schema builds
them; a call's arguments are checked against the schema (names, required, JSON types) with no evaluation."""

from __future__ import annotations

import enum
from typing import Any, Literal

import pytest

from genalign.environments import ArgumentError, SchemaError, Tool, function_schema


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


def basic(x: int, y: float, name: str, flag: bool = False) -> str:
    """Do a basic thing.

    Args:
        x: an integer
        y: a number
            spanning two lines
        name (str): a name with a type in parentheses
        flag: whether to flag

    Returns:
        A string.
    """
    return ""


def containers(items: list[int], pairs: tuple[int, str], table: dict[str, float], anything: Any, raw: list) -> None:
    """Containers.

    Args:
        items: integers
        pairs: an int and a string
        table: name to number
        anything: whatever
        raw: a bare list
    """


def choices(
    mode: Literal["fast", "slow"],
    color: Color,
    maybe: int | None = None,
    either: int | str = 0,
    drink: str = "tea",
) -> dict[str, int]:
    """Choose things.

    Args:
        mode: the mode
        color: a color
        maybe: an optional integer
        either: an integer or a string
        drink: a drink (choices: ["tea", "coffee"])
    """
    return {}


class Holder:
    def method(self, query: str, top_k: int = 3) -> str:
        """Search something.

        Args:
            query: words
            top_k: how many
        """
        return query


@pytest.mark.parametrize("fn", [basic, containers, choices, Holder.method, Holder().method])
def test_schemas_match_transformers_get_json_schema(fn):
    get_json_schema = pytest.importorskip("transformers.utils").get_json_schema
    assert function_schema(fn) == get_json_schema(fn)


def test_basic_schema_by_hand():
    schema = function_schema(basic)["function"]
    assert schema["name"] == "basic" and schema["description"] == "Do a basic thing."
    assert schema["parameters"] == {
        "type": "object",
        "properties": {
            "x": {"type": "integer", "description": "an integer"},
            "y": {"type": "number", "description": "a number spanning two lines"},
            "name": {"type": "string", "description": "a name with a type in parentheses"},
            "flag": {"type": "boolean", "description": "whether to flag"},
        },
        "required": ["x", "y", "name"],
    }
    assert schema["return"] == {"type": "string", "description": "A string."}


def test_schema_errors_name_the_function_and_the_fix():
    def no_doc(x: int) -> int:
        return x

    def undocumented_argument(x: int, y: int) -> int:
        """Add.

        Args:
            x: first
        """
        return x + y

    def no_hint(x) -> int:
        """F.

        Args:
            x: a value
        """
        return x

    def custom_class(x: Holder) -> None:
        """F.

        Args:
            x: a holder
        """

    with pytest.raises(SchemaError, match="no docstring"):
        function_schema(no_doc)
    with pytest.raises(SchemaError, match="argument 'y'"):
        function_schema(undocumented_argument)
    with pytest.raises(SchemaError, match="no type hint"):
        function_schema(no_hint)
    with pytest.raises(SchemaError, match="no JSON form"):
        function_schema(custom_class)


def test_arguments_are_checked_against_the_schema():
    check = Tool.from_function(basic).check
    assert check({"x": 3, "y": 2, "name": "a"}) == {"x": 3, "y": 2, "name": "a"}
    assert check({"x": 3.0, "y": 2.5, "name": "a", "flag": True}) == {"x": 3, "y": 2.5, "name": "a", "flag": True}
    for arguments, message in [
        ({"x": 3, "y": 2}, "missing required argument 'name'"),
        ({"x": 3, "y": 2, "name": "a", "nmae": 1}, "unexpected argument 'nmae'"),
        ({"x": "3", "y": 2, "name": "a"}, "'x' must be an integer, got a string"),
        ({"x": 3.5, "y": 2, "name": "a"}, "'x' must be an integer"),
        ({"x": True, "y": 2, "name": "a"}, "'x' must be an integer"),
        ({"x": 3, "y": None, "name": "a"}, "'y' must be a number"),
        ({"x": 3, "y": 1, "name": ["a"]}, "'name' must be a string"),
    ]:
        with pytest.raises(ArgumentError, match=message):
            check(arguments)


def test_nested_enum_literal_tuple_and_optional_arguments():
    check = Tool.from_function(choices).check
    out = check({"mode": "fast", "color": "red", "maybe": None, "either": "x", "drink": "coffee"})
    assert out == {"mode": "fast", "color": Color.RED, "maybe": None, "either": "x", "drink": "coffee"}
    for arguments in ({"mode": "medium", "color": "red"}, {"mode": "fast", "color": "green"},
                      {"mode": "fast", "color": "red", "drink": "milk"}, {"mode": "fast", "color": "red", "either": 1.5}):  # fmt: skip
        with pytest.raises(ArgumentError):
            check(arguments)
    check = Tool.from_function(containers).check
    out = check({"items": [1, 2.0], "pairs": [1, "a"], "table": {"a": 1}, "anything": {"x": [None]}, "raw": ["x", 1]})
    assert out["items"] == [1, 2] and out["pairs"] == (1, "a")
    with pytest.raises(ArgumentError, match=r"'items\[1\]' must be an integer"):
        check({"items": [1, "2"], "pairs": [1, "a"], "table": {}, "anything": 0, "raw": []})
    with pytest.raises(ArgumentError, match="must have 2 items"):
        check({"items": [], "pairs": [1], "table": {}, "anything": 0, "raw": []})
    with pytest.raises(ArgumentError, match=r"'table.a' must be a number"):
        check({"items": [], "pairs": [1, "a"], "table": {"a": "x"}, "anything": 0, "raw": []})
