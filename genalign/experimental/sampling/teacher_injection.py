"""Teacher demonstrations injected into failed groups under a Thompson-sampling gate ([202] HAPO's Synthetic Success
Injection): the teacher writes a completion for an all-wrong group only when a draw from the teacher's success
posterior beats a draw from the student's, so the injections fade as the student's own success rate rises.
"""

from __future__ import annotations

import random
from typing import Any

from genalign.experimental.sampling.guidance import check_arg, groups_of
from genalign.experimental.sampling.teacher_writing import TeacherWriting, added_to, teacher_sample
from genalign.sampling.base import SAMPLE_SOURCES, Decision, Forced, Outcome


def gate_draws(
    step: int, position: int, student: tuple[float, float], teacher: tuple[float, float]
) -> tuple[float, float]:
    """``(θ_S, θ_T)``: one draw from ``Beta(*student)`` and one from ``Beta(*teacher)`` by a generator of the step and
    the prompt only (every process and a resumed run draw the same)."""
    generator = random.Random((step * 1_000_003 + position * 7_919 + 31) % 2**63)
    return generator.betavariate(*student), generator.betavariate(*teacher)


@SAMPLE_SOURCES.register(
    "hapo",
    formula="posteriors Beta(α_S, β_S) of the student's sample success and Beta(α_T, β_T) of the injected "
    "demonstrations' (counts decayed by γ per step, prior (1, 1)); for an all-wrong group of x: θ_S ~ Beta(α_S, β_S), "
    "θ_T ~ Beta(α_T, β_T); if θ_T > θ_S: y ~ π_T(·|x) replaces the last wrong sample when r(y) ≥ threshold",
    source="[202] HAPO (Synthetic Success Injection under a Thompson-sampling gate)",
    summary="On failure, the teacher writes a demonstration that replaces a wrong sample, under a Thompson-sampling "
    "gate between the teacher's and the student's success posteriors: the teacher fades as the student improves.",
    off_policy=True,
)
class HAPO(TeacherWriting):
    """[202] HAPO: teacher demonstrations injected into failed groups, gated by Thompson sampling.

    Two Beta posteriors are kept: the student's per-sample success (its drawn samples with reward ``>=
    threshold``) and the injected demonstrations' (how often the teacher's demonstration succeeded), both from the
    prior ``Beta(1, 1)`` with the counts decayed by ``decay`` per step. For every all-wrong group the rule draws
    ``θ_S`` and ``θ_T`` from them (a generator of the step and the prompt); when ``θ_T > θ_S`` the teacher
    (``algorithm.teacher``) writes a completion. A successful one replaces the group's last wrong sample (the
    Synthetic Success Injection: the group now holds a success to contrast with); a failed one is dropped and the
    group is unchanged. As the student's success rate rises, ``θ_S`` beats ``θ_T`` more often and the injections
    anneal away, leaving the on-policy gradient.

    Reading chosen: the abstract gives the gate as "Thompson sampling-inspired" without its form; genalign compares
    one draw from each of two global Beta posteriors (student success, teacher success), decays their counts, and
    injects one teacher completion (trained as an off-policy sample under the off-policy clip [323], ratio
    ``πθ/π_T``) per gated all-wrong group.

    Args:
        threshold: the success reward.
        decay: the per-step factor of the posterior counts, in (0, 1] (1: no forgetting).
    """

    def __init__(self, *, threshold: float = 0.5, decay: float = 0.9) -> None:
        check_arg("decay", 0.0 < decay <= 1.0, decay, "must be in (0, 1] (1: no forgetting)")
        self.threshold, self.decay = threshold, decay
        self.student = [1.0, 1.0]  # Beta(α_S, β_S)
        self.teacher = [1.0, 1.0]  # Beta(α_T, β_T)

    def gated(self, outcome: Outcome) -> list[tuple[int, int]]:
        """``(position, replaced sample)`` of the all-wrong groups whose gate opens this step."""
        chosen = []
        for group in groups_of(outcome, self.threshold):
            if group.all_wrong:
                student, teacher = gate_draws(outcome.step, group.position, tuple(self.student), tuple(self.teacher))
                if teacher > student:
                    chosen.append((group.position, group.members[-1]))
        return chosen

    def forced_samples(self, outcome: Outcome) -> list[Forced]:
        return [teacher_sample(position, "teacher_demo") for position, _ in self.gated(outcome)]

    def after_rewards(self, outcome: Outcome) -> Decision:
        gated = self.gated(outcome)  # the same as in forced_samples: the posteriors change only below
        injected = added_to(outcome, {position for position, _ in gated})  # [N]
        success = injected & (outcome.rewards >= self.threshold)  # [N]
        keep = ~injected | success
        for position, replaced in gated:
            if bool((success & (outcome.positions == position)).any()):
                keep[replaced] = False
        groups = groups_of(outcome, self.threshold)
        wins, valid = sum(g.successes for g in groups), sum(g.valid for g in groups)
        self.student = [self.decay * self.student[0] + wins, self.decay * self.student[1] + valid - wins]
        self.teacher = [self.decay * self.teacher[0] + float(success.sum()),
                        self.decay * self.teacher[1] + float((injected & ~success).sum())]  # fmt: skip
        return Decision(keep=keep, stats={
            "all_wrong": float(sum(g.all_wrong for g in groups)), "gated": float(len(gated)),
            "injected": float(success.sum()),
            "student_mean": self.student[0] / sum(self.student), "teacher_mean": self.teacher[0] / sum(self.teacher),
        })  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        return {"student": list(self.student), "teacher": list(self.teacher)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.student, self.teacher = [float(v) for v in state["student"]], [float(v) for v in state["teacher"]]


__all__ = ["HAPO", "gate_draws"]
