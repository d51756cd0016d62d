"""A forward-KL phase on teacher rollouts ([72] TREK, [88] the dense bridge's warm-up): the teacher writes whole
completions of the prompts the student fails, and the verified ones are trained by supervised NLL (the regulariser
``expert_nll`` on the samples flagged ``expert_demo``): ``E_{y~π_T}[−log πθ(y)]`` is the forward KL
``KL(π_T ‖ πθ)`` up to the teacher's entropy, estimated on the teacher's own samples.
"""

from __future__ import annotations

import math

from genalign.experimental.regularizers.expert import EXPERT_DEMO
from genalign.experimental.sampling.guidance import check_arg, groups_of
from genalign.experimental.sampling.replay_buffer import check_count
from genalign.experimental.sampling.teacher_writing import TeacherWriting, added_to, teacher_sample
from genalign.sampling.base import SAMPLE_SOURCES, Decision, Forced, Outcome


@SAMPLE_SOURCES.register(
    "teacher_sft",
    formula="steps ≤ until_step, prompt x with student pass rate ≤ max_pass_rate: y_1..y_R ~ π_T(·|x) (the teacher "
    "writes); V = {y_j : r(y_j) ≥ threshold} (all y_j unless verified) replace the last |V| student samples of x, "
    "flagged expert_demo: L = −log πθ(y) on V (regulariser expert_nll), the forward KL(π_T ‖ πθ) on the teacher's "
    "samples; advantages over the group",
    source="[72] TREK (forward-KL phase on verified teacher rollouts of the hardest prompts); [88] dense bridge "
    "(forward-KL warm-up on teacher rollouts before OPD: max_pass_rate 1, verified false, until_step K)",
    summary="The teacher writes completions of the prompts the student fails; the verified ones replace student "
    "samples of the group and are trained by supervised NLL (forward KL on teacher samples), for a phase or "
    "alongside GRPO.",
    provides=(EXPERT_DEMO,),
)
class TeacherSFT(TeacherWriting):
    """[72] TREK / [88] dense bridge: supervised training on the teacher's own (verified) rollouts.

    After the student's rollout, each prompt whose pass rate (samples with reward ``>= threshold`` among its valid
    ones) is at most ``max_pass_rate`` gets ``rollouts`` completions written by the teacher (``algorithm.teacher``;
    a ``self`` teacher with a ``context`` is TREK's self-context variant). Their rewards are computed like any
    sample's. The verified ones (reward ``>= threshold``; every one with ``verified: false``) replace as many of the
    prompt's last-drawn student samples (the group keeps its size) and are flagged ``expert_demo``; the regulariser
    ``expert_nll`` (weight ``algorithm.regularizer_coef``) trains ``−log πθ`` on them, the forward KL on teacher
    samples. Unverified teacher rollouts are dropped. Steps after ``until_step`` add nothing: GRPO
    (or OPD, [88]) resumes on the student's own samples; ``until_step: null`` runs the phase alongside GRPO.

    Reading chosen: TREK keeps "the top-r proposals ranked by current student likelihood"; genalign keeps every
    verified one of the ``rollouts`` written (the rule sees the teacher's log-probs, not the student's). The phase is
    the first ``until_step`` steps of the run on the same prompt stream, not a separate training stage. The teacher
    rollouts stay in their prompt's group, so besides the NLL they get the group-relative advantage of their reward
    (positive next to the student's failures; 0 when ``rollouts >= group_size`` teacher rollouts with one reward
    replace the whole group, the pure forward-KL step of [88]'s warm-up), trained as on-policy samples (their
    old log-probs are re-scored, as for a reference solution of ``gcpo``).

    Args:
        rollouts: teacher completions per hard prompt (>= 1).
        max_pass_rate: the student pass rate at or below which a prompt is hard (0: every sample failed; 1: every
            prompt, the [88] warm-up).
        threshold: the success reward.
        verified: keep only the teacher rollouts whose reward reaches ``threshold`` (TREK); false: all ([88]).
        until_step: the last step of the phase (>= 1), or None for every step.
    """

    def __init__(
        self, *, rollouts: int = 2, max_pass_rate: float = 0.0, threshold: float = 0.5, verified: bool = True,
        until_step: int | None = None,
    ) -> None:  # fmt: skip
        check_count("rollouts", rollouts)
        check_arg("max_pass_rate", 0.0 <= max_pass_rate <= 1.0, max_pass_rate, "must be in [0, 1]")
        check_arg("until_step", until_step is None or (isinstance(until_step, int) and until_step >= 1), until_step,
                  "must be an int >= 1 (the last step of the phase) or null (every step)")  # fmt: skip
        self.rollouts, self.max_pass_rate, self.threshold = rollouts, max_pass_rate, threshold
        self.verified, self.until_step = verified, until_step

    def hard(self, outcome: Outcome) -> list[int]:
        """Positions of the prompts the student fails (pass rate ``<= max_pass_rate``), during the phase."""
        if self.until_step is not None and outcome.step > self.until_step:
            return []
        return [g.position for g in groups_of(outcome, self.threshold) if g.valid and g.rate <= self.max_pass_rate]

    def forced_samples(self, outcome: Outcome) -> list[Forced]:
        return [teacher_sample(p, "teacher") for p in self.hard(outcome) for _ in range(self.rollouts)]

    def after_rewards(self, outcome: Outcome) -> Decision:
        hard = self.hard(outcome)
        written = added_to(outcome, hard)  # [N]
        kept = written & (outcome.rewards >= self.threshold) if self.verified else written  # [N]
        keep = ~written | kept  # [N] unverified teacher rollouts leave
        taught = 0
        for group in groups_of(outcome, self.threshold):
            count = int((kept & (outcome.positions == group.position)).sum())
            if group.position in hard and count:
                keep[group.members[max(0, len(group.members) - count) :]] = False  # the last drawn leave for them
                taught += 1
        success = float((written & (outcome.rewards >= self.threshold)).sum())
        return Decision(keep=keep, signals={EXPERT_DEMO: kept.clone()}, stats={
            "hard_prompts": float(len(hard)), "taught_prompts": float(taught),
            "teacher_success": success / float(written.sum()) if bool(written.any()) else math.nan,
        })  # fmt: skip
