"""Options in the form of older versions: a name plus a separate ``*_args`` mapping of its hyper-parameters.

Older configs wrote ``advantage: grpo`` with ``advantage_args: {eps: 1.0e-6}``, chains as a list of names with their
arguments by name (``credit: [tree]`` with ``credit_args: {tree: {width_keep_fraction: 0.5}}``), and the keywords of
the ratio level and of the clip form in ``objective_args``. Today an option carries its own hyper-parameters
(``advantage: {name: grpo, eps: 1.0e-6}``, :mod:`genalign.config.core`). A schema field that took over an old key
names it in its metadata (``"replaces"``). Older flow configs also wrote their LoRA options as flat keys
(``policy.lora_rank: 32``), which the section ``policy.lora`` took over (metadata ``"absorbs"``: ``{old key: key in
the section}``). This module computes the new form from the old one:

* :func:`old_form_message`: a config (a user's YAML or overrides) that still has an old key is refused with the exact
  new form of each old key, computed from the config being loaded (``objective_args``: which keyword goes to the
  objective, the ratio level or the clip form);
* :func:`migrate_saved_config`: the config a run wrote (``config.yaml`` in a run folder and in its checkpoints) is
  read in the new form, in memory: the files are never rewritten (checkpoint manifests hold their checksums).
"""

from __future__ import annotations

import dataclasses
import types
from dataclasses import dataclass, field
from typing import Any, Union, get_args, get_origin, get_type_hints

import yaml

from genalign.registry import Option, did_you_mean

#: the written name of an option the config does not name (a mapping without ``name``, an entry of the wrong type)
NAME = "NAME"


@dataclass
class Move:
    """What one old key becomes: the new raw values of the fields it moves into, and notes for the message."""

    old_key: str
    old_value: Any
    new: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    complete: bool = True  # every argument found its option (else the old key stays and the message says why)
    text: str = ""  # the message's sentence, when it is not the option form's


def replaced_keys(cls: type) -> dict[str, str]:
    """``{old key: field}`` of the dataclass ``cls`` (field metadata ``"replaces"``)."""
    return {f.metadata["replaces"]: f.name for f in dataclasses.fields(cls) if f.metadata.get("replaces")}


def plan_moves(cls: type, data: dict[str, Any], where: str = "") -> list[Move]:
    """The moves of the old keys in the raw section ``data`` of dataclass ``cls`` (``data`` is not changed); ``where``
    is the section's dotted path, for the notes."""
    prefix = f"{where}." if where else ""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = get_type_hints(cls)
    work = dict(data)  # later moves see earlier ones (objective_args may touch ratio_level and clip)
    moves = []
    for old, name in replaced_keys(cls).items():
        if old not in work:
            continue
        move = Move(old, work[old])
        if not isinstance(move.old_value, dict):
            move.complete = False
            move.notes.append(f"its value is not a mapping of keywords; give the keywords in {prefix}{name} itself")
        elif not move.old_value:
            move.notes.append("it holds no keywords: remove it")
        elif old == "objective_args":
            _move_objective_args(fields, work, move)
        elif get_origin(_non_null(hints[name])) is list:
            _move_list_args(name, _default(fields[name]), work, move, prefix)
        else:
            option, args = _parts(work.get(name), _default(fields[name]))
            if option is None and old == "aggregation_args":  # null aggregation: the objective's mode, or token_mean
                option = _default_aggregation(_parts(work.get("objective"), _default(fields["objective"]))[0])
            if option is None:  # no option (regularizer: null): the keywords had no effect
                example = yaml_text({"name": NAME, **move.old_value})
                move.notes.append(f"{prefix}{name} is null, so they had no effect: remove them, or name the option: "
                                  f"{prefix}{name}: {example}")  # fmt: skip
            else:
                move.new[name] = _written(option, args, move.old_value)
        work.update(move.new)
        moves.append(move)
    for name, f in fields.items():
        moves += _absorb_flat_keys(name, f, work, prefix)
    return moves


def old_form_message(cls: type, data: dict[str, Any], where: str) -> str:
    """The error for a config section that still has old keys: each one with its new form."""
    prefix = f"{where}." if where else ""
    sentences = []
    for move in plan_moves(cls, data, where):
        if move.text:
            sentences.append(move.text)
            continue
        writes = " and ".join(f"{prefix}{name}: {yaml_text(value)}" for name, value in move.new.items())
        text = f"{prefix}{move.old_key} = {yaml_text(move.old_value)} was replaced by the option form"
        text += f": write {writes}" if writes else ""
        text += f" ({'; '.join(move.notes)})" if move.notes else ""
        sentences.append(text + ".")
    return " ".join(sentences)


def migrate_saved_config(cls: type, data: dict[str, Any]) -> list[str]:
    """Rewrite, in place, the old keys of a config a run wrote (raw dict of the dataclass ``cls`` and its sections)
    into the option form; returns what moved (``"algorithm.objective_args -> algorithm.clip"``; empty old keys are
    dropped without a word). An old key whose arguments fit no option (which a saved config cannot hold: it was
    validated) stays, so loading it reports the problem."""
    moved = []
    for path, section_cls, section in _sections(cls, data, ""):
        for move in plan_moves(section_cls, section, path.rstrip(".")):
            if move.complete:
                del section[move.old_key]
                section.update(move.new)
                if move.new:
                    moved.append(f"{path}{move.old_key} -> {', '.join(path + name for name in move.new)}")
    return moved


def yaml_text(value: Any) -> str:
    """``value`` as YAML in flow style, on one line (as a config writes it)."""
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10**9).strip()
    return text.removesuffix("...").strip()


# --------------------------------------------------------------------------------------------------------- helpers
def _sections(cls: type, data: dict[str, Any], path: str):
    """``(dotted prefix, dataclass, raw section)`` of ``data`` and of every nested dataclass section in it."""
    yield path, cls, data
    hints = get_type_hints(cls)
    for f in dataclasses.fields(cls):
        value = data.get(f.name)
        if not isinstance(value, dict):
            continue
        resolve = f.metadata.get("resolve")
        try:
            tp = resolve(value, f.name) if resolve is not None else _non_null(hints[f.name])
        except (KeyError, ValueError):  # an unknown family: loading reports it
            continue
        if dataclasses.is_dataclass(tp) and tp is not Option:
            yield from _sections(tp, value, f"{path}{f.name}.")


def _non_null(tp: Any) -> Any:
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        return args[0] if len(args) == 1 else tp
    return tp


def _default(f: dataclasses.Field) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None if f.default is dataclasses.MISSING else f.default


def _parts(value: Any, default: Any = None) -> tuple[str | None, dict[str, Any]]:
    """``(name, keywords)`` of an option as written (a name, a mapping, an ``Option``; absent: ``default``)."""
    if value is None:
        value = default
    if isinstance(value, Option):
        return value.name, dict(value.args)
    if isinstance(value, str):
        return value, {}
    if isinstance(value, dict):
        name = value.get("name")
        return (name if isinstance(name, str) else None), {k: v for k, v in value.items() if k != "name"}
    return None, {}


def _written(name: str | None, args: dict[str, Any], extra: dict[str, Any] | None = None) -> Any:
    """The written form of an option: its bare name without keywords, else the mapping (``NAME`` where the config
    gives none)."""
    args = {**args, **(extra if isinstance(extra, dict) else {})}
    return {"name": name or NAME, **args} if args or name is None else name


def _default_aggregation(objective: str | None) -> str:
    """The aggregation a null ``aggregation`` resolves to (``AlgorithmConfig``): the objective's declared mode."""
    from genalign import algorithms as alg

    declared = alg.OBJECTIVES.meta(objective).get("aggregation") if objective in alg.OBJECTIVES else None
    return declared or "token_mean"


def _absorb_flat_keys(name: str, f: dataclasses.Field, work: dict[str, Any], prefix: str) -> list[Move]:
    """Flat keys of an older form that the section ``name`` took over (field metadata ``"absorbs"``: ``{old key: key
    in the section}``), e.g. ``lora_rank: 8`` -> ``lora: {rank: 8}``. Each move's ``new`` holds the whole section so
    far, started from the field's default (a saved config then compares equal to the current one on resume)."""
    moves = []
    for old, key in (f.metadata.get("absorbs") or {}).items():
        if old not in work:
            continue
        section = work.get(name)
        if not isinstance(section, dict):
            default = _default(f)
            section = dataclasses.asdict(default) if dataclasses.is_dataclass(default) else {}
        value = work.pop(old)
        text = (f"{prefix}{old} = {yaml_text(value)} moved into the section {prefix}{name}: write {prefix}{name}: "
                f"{{{key}: {yaml_text(value)}}} (as an override: {prefix}{name}.{key}={yaml_text(value)}).")  # fmt: skip
        work[name] = {**section, key: value}
        moves.append(Move(old, value, new={name: work[name]}, text=text))
    return moves


def _move_list_args(name: str, default: Any, work: dict[str, Any], move: Move, prefix: str) -> None:
    """``credit_args: {rule: {...}}`` into the matching entries of the ``credit`` list."""
    items = work.get(name)
    items = list(default or []) if items is None else items
    if not isinstance(items, list):
        move.complete = False
        move.notes.append(f"{prefix}{name} must be a list")
        return
    entries = [_parts(item) for item in items]
    move.new[name] = [_written(rule, args, move.old_value.get(rule)) for rule, args in entries]
    unplaced = [rule for rule in move.old_value if rule not in [entry for entry, _ in entries]]
    if unplaced:
        move.complete = False
        one = len(unplaced) == 1
        move.notes.append(
            f"its arguments for {', '.join(map(repr, unplaced))} name no entry of {prefix}{name}; add "
            f"{'it' if one else 'them'} to the list with {'its' if one else 'their'} keywords, or drop the arguments"
        )


def _move_objective_args(fields: dict[str, dataclasses.Field], work: dict[str, Any], move: Move) -> None:
    """``objective_args`` held the objective's own keywords and, for a ratio objective, those of its ratio level and
    clip form: each keyword goes to the option it belongs to."""
    from genalign import algorithms as alg
    from genalign.algorithms.options import accepted_hyperparameters

    def parts(name: str) -> tuple[str | None, dict[str, Any]]:
        return _parts(work.get(name), _default(fields[name]))

    objective = parts("objective")[0]
    targets = [("objective", alg.OBJECTIVES, "objective")]
    if objective in alg.OBJECTIVES and alg.OBJECTIVES.meta(objective).get("ratio", False):
        targets += [("ratio_level", alg.RATIO_LEVELS, "ratio level"), ("clip", alg.CLIP_FORMS, "clip form")]
    owners: dict[str, tuple[str, str]] = {}  # keyword -> (field, "<kind> '<name>'"); the objective's own come first
    for target, registry, kind in reversed(targets):
        option = parts(target)[0]
        accepted = accepted_hyperparameters(registry, option) if option in registry else {}
        owners |= {key: (target, f"{kind} {option!r}") for key in accepted if key not in ("ratio_level", "clip")}
    if len(targets) == 1:  # not a ratio objective: every keyword is its own (loading checks them)
        owners = {key: ("objective", "") for key in move.old_value}
    placed: dict[str, dict[str, Any]] = {}
    for key, value in move.old_value.items():
        if key in owners:
            placed.setdefault(owners[key][0], {})[key] = value
    move.new = {target: _written(*parts(target), placed[target]) for target, _, _ in targets if target in placed}
    if len(targets) == 1:
        return
    groups: dict[str, list[str]] = {}
    for key in move.old_value:
        if key in owners:
            groups.setdefault(owners[key][1], []).append(key)
    move.notes += [f"{', '.join(keys)}: {'a keyword' if len(keys) == 1 else 'keywords'} of {owner}"
                   for owner, keys in groups.items()]  # fmt: skip
    unknown = [key for key in move.old_value if key not in owners]
    if unknown:
        move.complete = False
        names = ", ".join(f"{kind} {parts(target)[0]!r}" for target, _, kind in targets)
        hints = "".join(did_you_mean(key, sorted(owners)) for key in unknown)
        move.notes.append(f"{', '.join(map(repr, unknown))}: a keyword of none of {names}.{hints}".removesuffix("."))


__all__ = ["Move", "migrate_saved_config", "old_form_message", "plan_moves", "replaced_keys", "yaml_text"]
