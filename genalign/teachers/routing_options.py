"""``algorithm.teacher.routing``: several domain-expert teacher models, each judging the samples of its prompts (MOPD
[317]); light, read at config load. The teacher itself: :mod:`genalign.teachers.routed`."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RoutingOptions:
    """Route each prompt to the teacher model of its domain.

    Attributes:
        column: the row column whose value picks the expert (e.g. ``domain``); null: no routing.
        experts: column value -> the expert's model folder (a hub id, ``builtin:<name>``, or a path: relative to the
            working directory, as a mapping's values are not config paths), each with the policy's tokenizer. A prompt
            whose value has no expert is judged by ``algorithm.teacher.model`` when it is set, else not scored (it
            keeps its reward advantage; counted as ``teacher/unrouted_samples``).
    """

    column: str | None = field(default=None, metadata={"help": "Row column whose value picks the expert teacher."})
    experts: dict[str, str] = field(
        default_factory=dict,
        metadata={"help": "Column value -> the expert teacher's model folder (same tokenizer as the policy)."},
    )

    def validate(self) -> None:
        """A column comes with experts, experts with a column; every expert names a model."""
        if (self.column is None) != (not self.experts):
            raise ValueError(
                f"routing.column = {self.column!r} and routing.experts = {self.experts!r}: give both (the column whose "
                "value picks the expert, and value -> model folder) or neither."
            )
        empty = [key for key, model in self.experts.items() if not isinstance(model, str) or not model]
        if empty:
            raise ValueError(f"routing.experts[{empty[0]!r}] names no model folder; give the expert's model folder.")

    @property
    def enabled(self) -> bool:
        return self.column is not None


__all__ = ["RoutingOptions"]
