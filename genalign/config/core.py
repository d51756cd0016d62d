"""Strict, typed configs: dataclasses built from YAML dicts with ``key=value`` overrides.

Rules (shared/STYLE.md): unknown keys are errors with a did-you-mean list; a value of the wrong type or outside a
``Literal`` names the field, the value and the fix; each dataclass may define ``validate()`` for checks that need logic.
Supported field types: ``str``, ``int``, ``float``, ``bool``, ``Literal[...]``, ``X | None``, ``list[X]``,
``dict[str, X]``, ``Any``, :class:`~genalign.registry.Option` and nested dataclasses. A field whose metadata holds
``"resolve"`` picks its dataclass at load time from the raw value (used for the policy section, whose schema depends
on ``family``).

An ``Option`` field (a choice from a registry) takes the option's name, or a mapping of its name and its keyword
hyper-parameters: ``advantage: grpo`` or ``advantage: {name: grpo, eps: 1.0e-6}``; ``list[Option]`` is a chain of them,
e.g. ``credit: [tree, {name: noise_aware_steps}]``. Saved configs (:func:`to_dict`) write an option without
hyper-parameters as its bare name. An override reaches an option's keyword through its field, and a list item through
its index: ``algorithm.clip.eps_high=0.28``, ``algorithm.credit.0.width_keep_fraction=0.5`` (an option given as a bare
name, or not given at all, becomes the mapping form with that name or the field's default). A field whose metadata
holds ``"replaces"`` names the key of an older form (a separate ``*_args`` mapping), and one whose metadata holds
``"absorbs"`` maps older flat keys into its section (``lora_rank`` -> ``lora.rank``); a config that still has such a
key is refused with the new form computed from it (:mod:`genalign.config.migrate`). A nested section whose field
default is an instance with its own values (the flow family's ``policy.lora``: rank 32) keeps those for the keys a
config leaves out.

Numbers must be finite: ``inf`` and ``nan`` are refused in every ``float`` field (a field that can be unlimited or
switched off takes ``null``). YAML is read with a safe loader that also refuses a key written twice in one mapping
(plain YAML keeps the last silently); a YAML error, a Python tag (``!!python/...``: configs never construct objects) or
a file that is not UTF-8 is a :class:`ConfigError` naming the file and the line.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml

from genalign.errors import UserError
from genalign.registry import OPTION_FORMS, Option, did_you_mean

T = TypeVar("T")
_YAML11_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


class ConfigError(UserError, ValueError):
    """A config value or key is invalid; the message names the field and the fix."""


def _describe(tp: Any) -> str:
    if tp is Option:
        return OPTION_FORMS
    origin = get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in get_args(tp))
    if dataclasses.is_dataclass(tp):
        return f"a mapping ({tp.__name__})"
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def _convert(value: Any, tp: Any, where: str) -> Any:
    """Check ``value`` against the type ``tp`` and return it converted (ints accepted for floats, nested dataclasses)."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if tp is Option:
        return _convert_option(value, where)
    if origin is Literal:
        if value in get_args(tp):
            return value
        choices = [str(a) for a in get_args(tp)]
        raise ConfigError(f"{where}: {value!r} is not valid; use {_describe(tp)}.{did_you_mean(str(value), choices)}")
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None:
            if type(None) in args:
                return None
            raise ConfigError(f"{where}: null is not allowed; give {_describe(tp)}.")
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(value, arg, where)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{where}: {value!r} is not {_describe(tp)}.")
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected {_describe(tp)}, got {value!r}.")
        return from_dict(tp, value, where)
    if origin is list:
        (item_tp,) = get_args(tp) or (Any,)
        if not isinstance(value, (list, tuple)):
            if item_tp is Option:
                raise ConfigError(
                    f"{where}: expected a list of options (each {OPTION_FORMS}), got {value!r}; write it in "
                    f"brackets, e.g. [{value if isinstance(value, str) else 'NAME'}]."
                )
            raise ConfigError(f"{where}: expected a list, got {value!r}.")
        return [_convert(v, item_tp, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}.")
        _, val_tp = get_args(tp) or (str, Any)
        return {str(k): _convert(v, val_tp, f"{where}.{k}") for k, v in value.items()}
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected true or false, got {value!r}.")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected an integer, got {value!r}.{_integer_hint(value)}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return _finite(value, where)
        if isinstance(value, str) and _YAML11_FLOAT.fullmatch(value.strip()):
            return _finite(value, where)  # PyYAML reads "1e-5" (no dot) as a string; it is a number to every reader
        raise ConfigError(f"{where}: expected a number, got {value!r}.")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{where}: expected a string, got {value!r} (quote it in YAML).")
    raise TypeError(f"unsupported config field type {tp!r} at {where}")


def _convert_option(value: Any, where: str) -> Option:
    """An option from its name or from a mapping of its name and keyword hyper-parameters."""
    try:
        return Option.parse(value, where)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def convert_options(obj: Any, where: str) -> None:
    """Convert, in place, the option fields of the dataclass ``obj`` that were given as names or mappings (a config
    built in Python, e.g. ``AlgorithmConfig(clip="dual_clip")``); ``from_dict`` has converted them already."""
    hints = get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        value, tp = getattr(obj, f.name), hints[f.name]
        if value is not None and _holds_options(tp):
            setattr(obj, f.name, _convert(value, tp, f"{where}.{f.name}" if where else f.name))


def _holds_options(tp: Any) -> bool:
    """``tp`` is ``Option`` or is built of it (``Option | None``, ``list[Option]``)."""
    return tp is Option or any(_holds_options(arg) for arg in get_args(tp))


def _finite(value: int | float | str, where: str) -> float:
    """``value`` as a float, refused when it is not finite (inf, nan, or an integer too large for a float)."""
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise ConfigError(
            f"{where}: {value!r:.40} is not a finite number; give a finite number (a field that can be unlimited or "
            "switched off takes null, never inf or nan)."
        )
    return number


def _integer_hint(value: Any) -> str:
    """For ``1e8`` given where an integer is expected: how to write it (YAML reads ``1e8`` as a string or a float)."""
    if isinstance(value, str) and _YAML11_FLOAT.fullmatch(value.strip()):
        value = float(value)
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return f" Write it in digits: {int(value)}."
    return ""


def from_dict(cls: type[T], data: dict[str, Any], where: str = "", defaults: T | None = None) -> T:
    """Build dataclass ``cls`` from ``data``, strictly; ``where`` is the dotted path used in messages; ``defaults``:
    an instance whose values the keys ``data`` leaves out take (else the class's defaults)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'config'}: expected a mapping, got {data!r}.")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    hints = get_type_hints(cls)
    unknown = [k for k in data if k not in fields]
    if any(_old_keys(f) & data.keys() for f in fields.values()):  # a key of the older form
        from genalign.config.migrate import old_form_message

        raise ConfigError(old_form_message(cls, data, where))
    if unknown:
        key = unknown[0]
        prefix = f"{where}." if where else ""
        raise ConfigError(
            f"unknown config key {prefix}{key!r}.{did_you_mean(str(key), list(fields))} "
            f"Valid keys{' of ' + where if where else ''}: {', '.join(fields)}."
        )
    kwargs = {}
    for name, value in data.items():
        path = f"{where}.{name}" if where else name
        resolve: Callable[[Any, str], type] | None = fields[name].metadata.get("resolve")
        tp = resolve(value, path) if resolve is not None else hints[name]
        section = _section_default(fields[name], tp, value)
        kwargs[name] = _convert(value, tp, path) if section is None else from_dict(_non_null(tp), value, path, section)
    if defaults is not None:
        kwargs |= {n: copy.deepcopy(getattr(defaults, n)) for n in fields if n not in kwargs}
    missing = [
        n
        for n, f in fields.items()
        if n not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        prefix = f"{where}." if where else ""
        raise ConfigError(
            f"missing required config key {prefix}{missing[0]!r} ({fields[missing[0]].metadata.get('help', '')})."
        )
    obj = cls(**kwargs)
    validate = getattr(obj, "validate", None)
    if callable(validate):
        try:
            validate()
        except ConfigError:
            raise
        except ValueError as err:
            raise ConfigError(f"{where or cls.__name__}: {err}") from None
    return obj


def _old_keys(f: dataclasses.Field) -> set[str]:
    """Keys of an older form that field ``f`` took over (metadata ``replaces`` and ``absorbs``)."""
    return {k for k in [f.metadata.get("replaces"), *f.metadata.get("absorbs", {})] if k}


def _section_default(f: dataclasses.Field, tp: Any, value: Any) -> Any:
    """For a nested section given as a mapping: the field's default instance when its factory is not the bare class
    (a family's own defaults, e.g. the flow family's ``policy.lora``), so the keys left out keep those; else None."""
    tp = _non_null(tp)
    plain = not (isinstance(value, dict) and dataclasses.is_dataclass(tp)) or tp is Option
    if plain or f.metadata.get("resolve") is not None or f.default_factory in (dataclasses.MISSING, tp):
        return None
    default = f.default_factory()
    return default if isinstance(default, tp) else None


def to_dict(obj: Any) -> Any:
    """Plain-python view of a config (for saving the resolved config); an option is written as its bare name when it
    has no hyper-parameters, else as ``{name, **hyper-parameters}``; a callable (a reward passed from Python) is
    written as its import path when it has one, and so is a class (an environment passed from Python)."""
    if isinstance(obj, Option):
        return to_dict(obj.to_config())
    plain_class = isinstance(obj, type) and not dataclasses.is_dataclass(obj)  # an environment class from Python
    if plain_class or (callable(obj) and not isinstance(obj, type | str) and not dataclasses.is_dataclass(obj)):
        from genalign.rewards.base import callable_reference

        return callable_reference(obj)
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def apply_overrides(data: dict[str, Any], overrides: list[str], schema: type | None = None) -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides (values parsed as YAML; list items addressed by index) to a raw config dict.

    With ``schema`` (the dataclass ``data`` is for), a path through an option field reaches the option's keywords:
    ``algorithm.clip.eps_high=0.28`` turns ``clip: ppo`` (or the field's default when ``clip`` is not given) into
    ``clip: {name: ppo, eps_high: 0.28}``, and ``algorithm.credit.0.width_keep_fraction=0.5`` does so for the first
    rule of the list."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key.path=value (e.g. optim.lr=1e-5).")
        dotted, raw = item.split("=", 1)
        try:
            value = yaml.load(raw, Loader=StrictLoader) if raw != "" else ""
        except yaml.YAMLError as err:
            raise ConfigError(
                f"override {item!r}: the value is not valid YAML ({_yaml_problem(err)}); quote it, e.g. "
                f"{dotted}='\"...\"', or close its brackets."
            ) from None
        keys = dotted.split(".")
        node: Any = data
        node_tp: Any = schema
        for depth, key in enumerate(keys[:-1]):
            if isinstance(node, list):
                key = _list_index(node, key, keys[: depth + 1])
            child_tp = _child_type(node_tp, node, key, ".".join(keys[: depth + 1]))
            if _is_option(child_tp):  # an option given by name (or by its default) gets the mapping form
                node[key] = _option_mapping(node[key] if _present(node, key) else _default(node_tp, key))
            elif isinstance(node, dict) and (key not in node or node[key] is None):
                node[key] = {}
            node, node_tp = node[key], child_tp
            if not isinstance(node, (dict, list)):
                raise ConfigError(
                    f"override {item!r}: {'.'.join(keys[: depth + 1])} is the value {node!r:.40}, not a section; "
                    f"set it with {'.'.join(keys[: depth + 1])}=<value>."
                )
        last = keys[-1]
        if isinstance(node, list):
            node[_list_index(node, last, keys)] = value
        else:
            node[last] = value
    return data


def _child_type(tp: Any, node: Any, key: str | int, path: str) -> Any:
    """The schema type of ``node[key]`` for a node of type ``tp`` (None when unknown)."""
    tp = _non_null(tp)
    if dataclasses.is_dataclass(tp) and tp is not Option and isinstance(key, str):
        field = {f.name: f for f in dataclasses.fields(tp)}.get(key)
        if field is None:
            return None
        resolve = field.metadata.get("resolve")
        if resolve is None:
            return get_type_hints(tp)[key]
        try:
            return resolve(node.get(key), path)
        except ConfigError:
            return None
    if get_origin(tp) is list:
        return (get_args(tp) or (None,))[0]
    if get_origin(tp) is dict:
        return (get_args(tp) or (None, None))[1]
    return None


def _non_null(tp: Any) -> Any:
    """``X`` for ``X | None``."""
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        return args[0] if len(args) == 1 else None
    return tp


def _is_option(tp: Any) -> bool:
    return _non_null(tp) is Option


def _present(node: Any, key: str | int) -> bool:
    return isinstance(node, list) or (key in node and node[key] is not None)


def _default(tp: Any, key: str | int) -> Any:
    """The default of field ``key`` of the dataclass ``tp`` (None when it has none)."""
    field = {f.name: f for f in dataclasses.fields(_non_null(tp))}[key]
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None if field.default is dataclasses.MISSING else field.default


def _option_mapping(value: Any) -> Any:
    """The mapping form of an option written as a name (other values are left for the type check to report)."""
    if isinstance(value, Option):
        return {"name": value.name, **value.args}
    if isinstance(value, str):
        return {"name": value}
    return {} if value is None else value


def _list_index(node: list, key: str, keys: list[str]) -> int:
    if not key.isdigit() or int(key) >= len(node):
        raise ConfigError(f"override {'.'.join(keys)}: {key!r} is not an index of a list of {len(node)} items.")
    return int(key)


class StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` (no Python tags) that also refuses a key written twice in one mapping."""


def _construct_mapping(loader: StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # '<<: *anchor' merges keys that may then be overridden
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            repeated = key in seen
        except TypeError:  # an unhashable key: SafeLoader reports it
            continue
        first = seen.setdefault(key, key_node.start_mark.line)
        if repeated:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} is written twice in one mapping (first on line {first + 1})",
                key_node.start_mark,
            )  # fmt: skip
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _yaml_problem(err: yaml.YAMLError) -> str:
    """What a YAML error says, with its line and column, in one line."""
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    mark = getattr(err, "problem_mark", None)
    if "could not determine a constructor for the tag" in problem:
        tag = problem.split("tag", 1)[1].strip(" '").replace("tag:yaml.org,2002:", "!!")
        problem = f"the tag {tag!r} is not allowed: configs are plain YAML and never construct Python objects"
    return f"{problem}, at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else problem


def load_yaml(path: str | Path) -> dict[str, Any]:
    """The mapping in the YAML file ``path``; a missing or unreadable file, invalid YAML, a Python tag or a repeated
    key is a :class:`ConfigError` naming the file and the line."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"config file {str(path)!r} is a folder; give a YAML file (a preset in configs/).")
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist.")
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=StrictLoader) or {}
    except UnicodeDecodeError as err:
        line = path.read_bytes()[: err.start].count(b"\n") + 1
        raise ConfigError(
            f"config file {str(path)!r}, line {line}: not UTF-8 text (byte {err.object[err.start]:#04x}); save it as "
            "UTF-8."
        ) from None
    except yaml.YAMLError as err:
        raise ConfigError(f"config file {str(path)!r} is not valid YAML: {_yaml_problem(err)}.") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping at top level.")
    return data


def help_text(cls: type) -> str:
    """A field listing with types, defaults and help, for ``genalign validate --explain``."""
    lines = []
    hints = get_type_hints(cls)
    for f in dataclasses.fields(cls):
        default = (
            f.default
            if f.default is not dataclasses.MISSING
            else (f.default_factory() if f.default_factory is not dataclasses.MISSING else "required")
        )
        default = to_dict(default) if isinstance(default, Option) else default
        lines.append(f"{f.name}: {_describe(hints[f.name])} = {default!r}  # {f.metadata.get('help', '')}")
    return "\n".join(lines)


__all__ = ["ConfigError", "apply_overrides", "convert_options", "from_dict", "help_text", "load_yaml", "to_dict"]
