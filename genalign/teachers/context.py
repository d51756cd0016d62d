"""Privileged context of a teacher: templates filled from the rows, appended to the prompts the teacher sees.

A template is text with placeholders: ``{column}`` is the row's value of ``column`` (e.g. ``{answer}``, the reference
answer); in a contrast template ``{other.column}`` is the value of ``column`` in *another* prompt of the batch (a wrong
hint, [135] RLCSD). Braces that are not a placeholder are refused, so a typo never reaches the teacher silently.

The other prompt of sample ``i`` is the first prompt after it, cyclically in the batch order, whose values of the
``other.`` columns differ from sample ``i``'s own (:func:`other_rows`); it depends only on the rows of the batch, so the
contrast does not depend on how the batch is split into teacher passes. When every prompt of the batch shares the
values, there is no wrong hint: the sample's own row is used (its contrast term is 0) and the sample is counted.

**Hindsight** ([43] OpenClaw-RL's hindsight-guided OPD, [225] RLMEC's rewrite of the sample's own solution): ``{sample.
completion}`` is the sample's own output (its decoded text) and ``{sample.reward}`` its reward (the first reward
function's, ``%g``; ``{sample.rewards}`` all of them, comma-separated, ``nan`` where one did not apply): what the step
learned about the sample after sampling it. The teacher stage fills them (:func:`with_sample_fields`) before the
teacher judges the rollout.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_PLACEHOLDER = re.compile(r"\{(other\.)?((?:sample\.)?[A-Za-z_][A-Za-z0-9_]*)\}")
#: what ``{sample.NAME}`` may name (module docstring)
SAMPLE_FIELDS = ("completion", "reward", "rewards")


@dataclass(frozen=True)
class Template:
    """A parsed context template (module docstring).

    Attributes:
        text: the template.
        columns: the row columns it reads; other_columns: the columns it reads of another prompt.
    """

    text: str
    columns: tuple[str, ...]
    other_columns: tuple[str, ...]

    @classmethod
    def parse(cls, text: str, field: str, *, others: bool) -> Template:
        """Check ``text`` (``field`` names it in errors); ``others``: ``{other.column}`` is allowed."""
        found = _PLACEHOLDER.findall(text)
        stray = _PLACEHOLDER.sub("", text)
        if "{" in stray or "}" in stray:
            raise ValueError(
                f"{field} = {text!r} holds a brace that is not a placeholder; placeholders are {{column}} (a row "
                f"column){' and {other.column} (that column of another prompt)' if others else ''}."
            )
        unknown = [name for _, name in found if name.startswith("sample.") and name[7:] not in SAMPLE_FIELDS]
        if unknown:
            raise ValueError(
                f"{field} = {text!r} reads {{{unknown[0]}}}; a sample's own fields are "
                f"{', '.join('{sample.' + name + '}' for name in SAMPLE_FIELDS)}."
            )
        other_columns = tuple(name for prefix, name in found if prefix)
        if other_columns and not others:
            raise ValueError(
                f"{field} = {text!r} reads {{other.{other_columns[0]}}}, another prompt's column; only the "
                "contrast_context may (the context is the row's own privileged information)."
            )
        return cls(text, tuple(name for prefix, name in found if not prefix), other_columns)

    def render(self, row: dict[str, Any], other: dict[str, Any], where: str) -> str:
        """The template filled from ``row`` (and ``other`` for ``{other.column}``); a missing column is an error
        naming ``where`` and the row's columns."""

        def value(match: re.Match) -> str:
            source = other if match.group(1) else row
            name = match.group(2)
            if name not in source:
                raise ValueError(
                    f"{where} = {self.text!r} reads column {name!r}, which a row of the batch lacks (its columns: "
                    f"{sorted(source)}); add it to the data or change the template."
                )
            return str(source[name])

        return _PLACEHOLDER.sub(value, self.text)


def other_rows(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> tuple[list[dict[str, Any]], int]:
    """For each row, the first row after it (cyclically) whose values of ``columns`` differ from its own (itself when
    none does); and how many rows found none."""
    keys = [tuple(repr(row.get(name)) for name in columns) for row in rows]
    chosen, alone = [], 0
    for i, key in enumerate(keys):
        j = next((k % len(rows) for k in range(i + 1, i + len(rows)) if keys[k % len(rows)] != key), None)
        alone += j is None
        chosen.append(rows[i if j is None else j])
    return chosen, alone


def with_sample_fields(rows: list[dict[str, Any]], outputs: list[Any], rewards: Any = None) -> list[dict[str, Any]]:
    """``rows`` (one per sample) with ``sample.completion`` (``outputs[i]`` as text) and, given the ``[n, K]`` reward
    table ``rewards``, ``sample.reward`` (column 0) and ``sample.rewards`` (every column), for the ``{sample.*}``
    placeholders (module docstring)."""
    table = rewards.tolist() if rewards is not None else None  # [n][K], one transfer
    filled = []
    for i, (row, output) in enumerate(zip(rows, outputs, strict=True)):
        fields = {"sample.completion": output if isinstance(output, str) else str(output)}
        if table is not None:
            values = [float(value) for value in table[i]]
            fields |= {"sample.reward": f"{values[0]:g}", "sample.rewards": ", ".join(f"{v:g}" for v in values)}
        filled.append({**row, **fields})
    return filled


def context_rows(
    rows: list[dict[str, Any]], template: Template, where: str, others: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """``rows`` with ``template`` (filled from each row, and from ``others[i]`` for its ``{other.column}``) appended
    to their prompts (to the last user message of a chat prompt)."""
    from genalign.policies.lm.guidance import append_to_prompt  # (torch; config loading imports this module)

    others = rows if others is None else others
    return [
        {**row, "prompt": append_to_prompt(row["prompt"], template.render(row, other, where))}
        for row, other in zip(rows, others, strict=True)
    ]


__all__ = ["SAMPLE_FIELDS", "Template", "context_rows", "other_rows", "with_sample_fields"]
