"""An SFT warm-up on expert demonstrations before the RL steps (EGSPO's stage 1 [84]): the sample source that adds
them (its SFT loss is the regulariser :func:`genalign.experimental.regularizers.expert.expert_nll`).

During the first ``warmup_steps`` steps, ``expert_warmup`` replaces every group by the row's expert demonstration (its
reference solution, forced ``copies`` times: the policy tokenizes it, closes it with the end token and scores it) and
flags it ``expert_demo``; the ``expert_nll`` regulariser is ``−log πθ`` on the flagged samples. Identical copies get
identical rewards, so their group-relative advantage is 0 and those steps train the NLL alone: pure SFT (a group
needs two samples, hence two copies by default). From step ``warmup_steps + 1`` on the rule
adds nothing, nothing is flagged, the regulariser is 0 and the steps are the configured RL (EGSPO's stages 2 and 3:
on-policy rollouts with the entropy gate of the ``entropy_gated`` credit rule).
"""

from __future__ import annotations

import torch

from genalign.experimental.regularizers.expert import EXPERT_DEMO
from genalign.experimental.sampling.guidance import check_arg, reference_of
from genalign.sampling.base import SAMPLE_SOURCES, Candidate, Decision, Forced, Outcome, RuleDefaults


@SAMPLE_SOURCES.register(
    "expert_warmup",
    formula="steps 1..K: group(x) ← {y*(x), y*(x)} (copies of the expert demonstration, flagged expert_demo, zero "
    "advantage; the sampled o_i dropped); "
    "steps > K: the sampled groups unchanged",
    source="[84] EGSPO (stage 1: SFT warm-up on expert demonstrations; train it with the regulariser expert_nll)",
    summary="SFT warm-up: for the first steps every group is the row's expert demonstration alone, trained by the "
    "expert_nll term; the RL steps follow unchanged.",
    provides=(EXPERT_DEMO,),
)
class ExpertWarmup(RuleDefaults):
    """[84] EGSPO's stage 1: a pure-SFT warm-up on expert demonstrations inside the same training run.

    For the steps ``1..warmup_steps``, each prompt whose row has a demonstration (``solution_column``) gets it as
    ``copies`` forced samples, flagged ``expert_demo``; every sampled completion of those steps leaves the groups
    (``Decision.keep``). Pair it with the regulariser ``expert_nll`` (weight ``algorithm.regularizer_coef``), which is
    the SFT loss on the flagged samples.

    Reading chosen: the abstract trains stage 1 as a separate pure-SFT phase; genalign runs it as the first steps of
    the RL run on the same prompt stream (one demonstration per prompt and step, in ``copies`` identical samples whose
    advantage is 0), so one config gives the three stages. The steps still sample their groups before the rule drops them (the sample count is planned before the
    step is known to the rule).

    Args:
        warmup_steps: the SFT steps (>= 1).
        solution_column: the row column with the expert demonstration.
        copies: forced copies of the demonstration per prompt (>= 2: the group size of the warm-up steps).
    """

    forces = True

    def __init__(self, *, warmup_steps: int = 10, solution_column: str = "solution", copies: int = 2) -> None:
        check_arg("warmup_steps", isinstance(warmup_steps, int) and warmup_steps >= 1, warmup_steps,
                  "must be an int >= 1 (the SFT steps before RL)")  # fmt: skip
        check_arg("copies", isinstance(copies, int) and copies >= 2, copies,
                  "must be an int >= 2 (a group needs two samples)")  # fmt: skip
        self.warmup_steps, self.solution_column, self.copies = warmup_steps, solution_column, copies
        self._solutions: dict[int, str | None] = {}  # stream position -> demonstration (this step)

    def choose(self, pool: list[Candidate], wanted: int, generator: torch.Generator) -> list[Candidate]:
        for candidate in pool:
            self._solutions[candidate.position] = reference_of(candidate.row, self.solution_column, "expert_warmup")
        return pool

    def warming_up(self, outcome: Outcome) -> bool:
        return outcome.step <= self.warmup_steps

    def forced_samples(self, outcome: Outcome) -> list[Forced]:
        if not self.warming_up(outcome):
            return []
        positions = dict.fromkeys(outcome.positions.tolist())  # each prompt once, in order
        return [
            Forced(position, tokens=None, behaviour_logp=None, kind="expert", text=self._solutions[position])
            for position in positions
            if self._solutions.get(position)
            for _ in range(self.copies)
        ]

    def after_rewards(self, outcome: Outcome) -> Decision:
        forced = outcome.forced if outcome.forced is not None else torch.zeros(len(outcome), dtype=torch.bool)
        self._solutions = {}
        if not self.warming_up(outcome):
            return Decision(signals={EXPERT_DEMO: torch.zeros(len(outcome), dtype=torch.bool)}, stats={"demos": 0.0})
        return Decision(keep=forced.clone(), signals={EXPERT_DEMO: forced.clone()},
                        stats={"demos": float(forced.sum())})  # fmt: skip
