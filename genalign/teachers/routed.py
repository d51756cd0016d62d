"""Several domain-expert teachers routed per prompt (MOPD [317]): each sample is judged by the teacher model of its
prompt's domain (``algorithm.teacher.routing``, :mod:`genalign.teachers.routing_options`), so one student distils
from every expert at once, each on its own domain, through any distillation credit rule (``opd``: the routed
reverse-KL objective of [317]).

Each expert is a :class:`~genalign.teachers.local.LocalTeacher` built from the same ``algorithm.teacher`` settings
(context, dtype, distribution, batch size) with its own model; the routed teacher judges each expert's samples as a
sub-rollout and writes the values back in sample order. A sample whose domain has no expert (and no default
``model``) is not scored: ``teacher_scored`` is False, its values 0, and the distillation rules leave its advantage as
it was.
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.policies.base import Rollout, TeacherHost
from genalign.teachers.base import PassCount, Teacher, same_count
from genalign.teachers.config import TeacherConfig


def route_of(row: dict, column: str) -> str:
    """The routing value of ``row``: its ``column`` as text; a row without it is an error naming the column."""
    if column not in row:
        raise ValueError(
            f"algorithm.teacher.routing.column = {column!r}, which a row of the batch lacks (its columns: "
            f"{sorted(row)}); add the column to the data or change routing.column."
        )
    return str(row[column])


class RoutedTeacher(Teacher):
    """Experts by routing value, and the default teacher for the other samples (module docstring).

    Args:
        experts: routing value -> its teacher.
        default: the teacher of the samples whose value has no expert (None: they are not scored).
    """

    def __init__(
        self, config: TeacherConfig, host: TeacherHost, batch_size: int, experts: dict[str, Teacher],
        default: Teacher | None,
    ) -> None:  # fmt: skip
        super().__init__(config, host, batch_size)
        self.experts, self.default = experts, default
        self.column = config.routing.column
        self._unrouted = 0.0

    def judge(
        self, rollout: Rollout, wanted: frozenset[str], *, passes_everywhere: PassCount = same_count
    ) -> dict[str, Tensor]:
        """Each expert's signals on its samples, in sample order; unrouted samples unscored (module docstring)."""
        mask = rollout.action_mask
        values: dict[str, Tensor] = {"teacher_scored": torch.zeros(len(rollout), dtype=torch.bool, device=mask.device)}
        for name in (wanted | {"teacher_action_logp"}) - {"teacher_scored"}:
            values[name] = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)  # [n, T]
        groups: dict[int, list[int]] = {}  # position in ``teachers`` -> its samples
        teachers = [*self.experts.values(), self.default]
        for i, route in enumerate(route_of(row, self.column) for row in rollout.rows):
            teacher = self.experts.get(route, self.default)
            if teacher is None:
                self._unrouted += 1
                continue
            groups.setdefault(teachers.index(teacher), []).append(i)
        for which, index in groups.items():
            part = teachers[which].judge(rollout.select(index), wanted)
            rows = torch.as_tensor(index, dtype=torch.long, device=mask.device)
            for name, value in part.items():
                if name in values:
                    values[name][rows] = value.to(mask.device).to(values[name].dtype)
        return values

    def take_metrics(self) -> dict[str, float]:
        """``teacher/unrouted_samples`` and the experts' own counters, summed."""
        counts, self._unrouted = {"teacher/unrouted_samples": self._unrouted}, 0.0
        for teacher in [*self.experts.values(), self.default]:
            for key, value in (teacher.take_metrics() if teacher is not None else {}).items():
                counts[key] = counts.get(key, 0.0) + value
        return counts


__all__ = ["RoutedTeacher", "route_of"]
