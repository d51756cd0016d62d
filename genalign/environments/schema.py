"""JSON schemas of tool functions from their signatures and docstrings, and the check of a call's arguments.

:func:`function_schema` follows the convention of ``transformers.utils.get_json_schema`` (the form chat templates
render in their tool lists): the description is the docstring before its ``Args:`` section; each argument's
description comes from a Google-style ``Args:`` entry (``name: text`` or ``name (type): text``; a trailing
``(choices: [...])`` becomes an ``enum``); type hints map to JSON types (``int`` → integer, ``float`` → number, ``str``
→ string, ``bool`` → boolean, ``None`` → null, ``list[T]`` → array of T, ``tuple[A, B]`` → array with
``prefixItems``, ``dict[str, T]`` → object with ``additionalProperties``, ``Literal``/``Enum`` → ``enum``, ``X | None``
→ X with ``nullable``, other unions → a list of types or ``anyOf``, ``Any`` → ``{}``); ``required`` lists the
arguments without a default; a leading ``self``/``cls`` without a hint is skipped.

This is a deliberate re-implementation of that convention, not an import: transformers takes seconds to import, the
environments package depends on nothing, and the same type mapping drives :func:`check_arguments`.
``tests/environments/test_schema.py`` checks that both give the same schema for the shapes above.
"""

from __future__ import annotations

import enum
import inspect
import json
import re
import types
from collections.abc import Callable, Mapping
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints


class SchemaError(TypeError):
    """A tool function whose schema cannot be built (no docstring, an undocumented argument, an unmappable hint)."""


class ArgumentError(ValueError):
    """A call's arguments do not fit the tool's schema (the message says which argument and why)."""


_JSON_SCALARS = {int: "integer", float: "number", str: "string", bool: "boolean", type(None): "null"}
_BASIC = {**{t: {"type": name} for t, name in _JSON_SCALARS.items()}, list: {"type": "array"}}
_BASIC.update({tuple: {"type": "array"}, dict: {"type": "object"}})

_DESCRIPTION_RE = re.compile(r"^(.*?)[\n\s]*(Args:|Returns:|Raises:|\Z)", re.DOTALL)
_ARGS_RE = re.compile(r"\n\s*Args:\n(.*?)[\n\s]*(Returns:|Raises:|\Z)", re.DOTALL)
_ARG_SPLIT_RE = re.compile(
    r"(?:^|\n)([ \t]*)(\w+)(?:[ \t]*\([^()\n]*\))?:\s*(.*?)\s*(?=\n(?!\1[ \t])[ \t]*\w+(?:[ \t]*\([^()\n]*\))?:|\Z)",
    re.DOTALL,
)
_RETURNS_RE = re.compile(r"\n\s*Returns:\n\s*(.*?)[\n\s]*(Raises:|\Z)", re.DOTALL)
_CHOICES_RE = re.compile(r"\(choices:\s*(.*?)\)\s*$", re.IGNORECASE)


def function_schema(fn: Callable[..., Any], *, name: str | None = None) -> dict[str, Any]:
    """The tool schema of ``fn``: ``{"type": "function", "function": {"name", "description", "parameters"}}``.

    Raises:
        SchemaError: ``fn`` has no docstring, an argument without a hint or without an ``Args:`` entry, or a hint
            that has no JSON form (a custom class).
    """
    fn_name = name or getattr(fn, "__name__", "tool")
    doc = inspect.getdoc(fn)
    if not doc:
        raise SchemaError(f"tool {fn_name!r} has no docstring; describe it and each argument in an 'Args:' section.")
    description, arg_docs, returns = _parse_docstring(doc.strip())
    parameters = _parameters_schema(fn, fn_name)
    for arg, schema in parameters["properties"].items():
        if arg not in arg_docs:
            raise SchemaError(
                f"tool {fn_name!r}: the docstring has no description of argument {arg!r}; add '{arg}: ...' under "
                "'Args:'."
            )
        text = arg_docs[arg]
        if choices := _CHOICES_RE.search(text):
            schema["enum"] = [c.strip() if isinstance(c, str) else c for c in json.loads(choices.group(1))]
            text = text[: choices.start()].strip()
        schema["description"] = text
    function: dict[str, Any] = {"name": fn_name, "description": description, "parameters": parameters}
    if returns is not None and (hint := _return_hint(fn)) is not None:
        function["return"] = {**hint, "description": returns}
    elif (hint := _return_hint(fn)) is not None:
        function["return"] = hint
    return {"type": "function", "function": function}


def _parse_docstring(doc: str) -> tuple[str | None, dict[str, str], str | None]:
    description = _DESCRIPTION_RE.search(doc)
    args = _ARGS_RE.search(doc)
    returns = _RETURNS_RE.search(doc)
    arg_docs: dict[str, str] = {}
    if args is not None:
        block = "\n".join(line for line in args.group(1).split("\n") if line.strip())
        arg_docs = {m[1]: re.sub(r"\s*\n+\s*", " ", m[2].strip()) for m in _ARG_SPLIT_RE.findall(block)}
    return (
        description.group(1).strip() if description else None,
        arg_docs,
        returns.group(1).strip() if returns else None,
    )


def _receiver(signature: inspect.Signature) -> str | None:
    first = next(iter(signature.parameters.values()), None)
    if first is not None and first.name in ("self", "cls") and first.annotation is inspect.Parameter.empty:
        return first.name
    return None


def _parameters_schema(fn: Callable[..., Any], fn_name: str) -> dict[str, Any]:
    signature = inspect.signature(fn)
    hints = get_type_hints(fn)
    receiver = _receiver(signature)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in signature.parameters.values():
        if param.name == receiver:
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise SchemaError(f"tool {fn_name!r}: *{param.name} cannot be described as JSON; name each argument.")
        if param.name not in hints:
            raise SchemaError(f"tool {fn_name!r}: argument {param.name!r} has no type hint.")
        properties[param.name] = type_schema(hints[param.name], where=f"tool {fn_name!r} argument {param.name!r}")
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _return_hint(fn: Callable[..., Any]) -> dict[str, Any] | None:
    hint = get_type_hints(fn).get("return")
    if hint is None:
        return None
    try:
        return type_schema(hint, where="return")
    except SchemaError:
        return None  # the model never writes the return value: an unmappable return hint is left out


def type_schema(hint: Any, *, where: str = "type hint") -> dict[str, Any]:
    """The JSON schema of one type hint (see the module docstring)."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any:
        return {}
    if origin is None and isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _enum_schema([member.value for member in hint], where)
    if origin is None:
        if hint in _BASIC:
            return dict(_BASIC[hint])
        raise SchemaError(f"{where}: {hint!r} has no JSON form; use int, float, str, bool, list, dict, Literal, ...")
    if origin is Union or origin is types.UnionType:
        subtypes = [type_schema(t, where=where) for t in args if t is not type(None)]
        if len(subtypes) == 1:
            schema = subtypes[0]
        elif all(s.keys() == {"type"} and isinstance(s["type"], str) for s in subtypes):
            names = sorted({s["type"] for s in subtypes})
            schema = {"type": names[0] if len(names) == 1 else names}
        else:
            schema = {"anyOf": subtypes}
        if type(None) in args:
            schema["nullable"] = True
        return schema
    if origin is Literal and args:
        return _enum_schema(list(args), where)
    if origin is list:
        return {"type": "array", "items": type_schema(args[0], where=where)} if args else {"type": "array"}
    if origin is tuple:
        if not args:
            return {"type": "array"}
        if len(args) == 1 or ... in args:
            raise SchemaError(f"{where}: use list[T] for a variable-length sequence, not {hint!r}.")
        return {"type": "array", "prefixItems": [type_schema(t, where=where) for t in args]}
    if origin is dict:
        schema = {"type": "object"}
        if len(args) == 2:
            schema["additionalProperties"] = type_schema(args[1], where=where)
        return schema
    raise SchemaError(f"{where}: {hint!r} has no JSON form.")


def _enum_schema(values: list[Any], where: str) -> dict[str, Any]:
    if not values or any(type(v) not in _JSON_SCALARS for v in values):
        raise SchemaError(f"{where}: enum values must be JSON scalars (int, float, str, bool, None), got {values!r}.")
    names = list(dict.fromkeys(_JSON_SCALARS[type(v)] for v in values))
    return {"type": names[0] if len(names) == 1 else names, "enum": values}


# ----------------------------------------------------------------------------------------------------------------------
# checking a call's arguments
# ----------------------------------------------------------------------------------------------------------------------


def check_arguments(fn: Callable[..., Any], schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments to call ``fn`` with, after checking ``arguments`` (parsed JSON) against the tool's
    ``schema``: unknown names, missing required names and values of the wrong JSON type are refused.

    Conversions, the only ones: an integral float (``3.0``) where an integer is expected becomes ``3``; a list where
    the hint is a tuple becomes a tuple; a value where the hint is an ``Enum`` becomes its member.

    Raises:
        ArgumentError: with a message for the model (which argument, what was expected).
    """
    parameters = schema["function"]["parameters"]
    properties: Mapping[str, Any] = parameters.get("properties", {})
    unknown = [key for key in arguments if key not in properties]
    if unknown:
        from genalign.registry import did_you_mean

        hint = did_you_mean(unknown[0], list(properties))
        raise ArgumentError(
            f"unexpected argument {unknown[0]!r}.{hint} The arguments are: {', '.join(properties) or 'none'}."
        )
    missing = [key for key in parameters.get("required", []) if key not in arguments]
    if missing:
        raise ArgumentError(f"missing required argument {missing[0]!r}.")
    hints = _hints(fn)
    checked = {}
    for key, value in arguments.items():
        value = _check_value(properties[key], value, key)
        hint = hints.get(key)
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            value = hint(value)
        elif get_origin(hint) is tuple and isinstance(value, list):
            value = tuple(value)
        checked[key] = value
    return checked


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return get_type_hints(fn)
    except (NameError, TypeError):
        return {}


_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def _check_value(schema: Mapping[str, Any], value: Any, path: str) -> Any:
    if value is None and schema.get("nullable"):
        return None
    if "enum" in schema:
        if not any(value == choice and type(value) is type(choice) for choice in schema["enum"]):
            raise ArgumentError(f"argument {path!r} must be one of {schema['enum']!r}, got {_short(value)}.")
        return value
    if "anyOf" in schema:
        for option in schema["anyOf"]:
            try:
                return _check_value(option, value, path)
            except ArgumentError:
                continue
        raise ArgumentError(f"argument {path!r} has the wrong type ({_short(value)}).")
    kinds = schema.get("type")
    if kinds is None:
        return value
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    for kind in kinds:
        converted = _as_kind(kind, value)
        if converted is not _NO:
            return _check_items(schema, kind, converted, path)
    expected = " or ".join(kinds)
    raise ArgumentError(f"argument {path!r} must be {_article(expected)}, got {_json_type(value)} {_short(value)}.")


_NO = object()


def _as_kind(kind: str, value: Any) -> Any:
    if kind in ("integer", "number") and isinstance(value, bool):
        return _NO
    if kind == "integer" and isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, _PYTHON_TYPES.get(kind, ())):
        return value
    return _NO


def _check_items(schema: Mapping[str, Any], kind: str, value: Any, path: str) -> Any:
    if kind == "array" and "prefixItems" in schema:
        items = schema["prefixItems"]
        if len(value) != len(items):
            raise ArgumentError(f"argument {path!r} must have {len(items)} items, got {len(value)}.")
        return [_check_value(s, v, f"{path}[{i}]") for i, (s, v) in enumerate(zip(items, value))]
    if kind == "array" and "items" in schema:
        return [_check_value(schema["items"], v, f"{path}[{i}]") for i, v in enumerate(value)]
    if kind == "object" and "additionalProperties" in schema:
        return {k: _check_value(schema["additionalProperties"], v, f"{path}.{k}") for k, v in value.items()}
    return value


def _json_type(value: Any) -> str:
    for name, python_types in _PYTHON_TYPES.items():
        if isinstance(value, python_types) and not (name in ("integer", "number") and isinstance(value, bool)):
            return "a number" if name == "number" and isinstance(value, float) else _article(name)
    return type(value).__name__


def _article(kind: str) -> str:
    return ("an " if kind[0] in "aeiou" else "a ") + kind


def _short(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (str, int, float, bool, type(None))) else type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."
