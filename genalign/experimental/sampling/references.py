"""Reference-solution insertion: an all-wrong group gets a sample built from the row's reference solution, in place
of one of its wrong samples, so the group has a success to contrast with ([253] GCPO: the reference itself; [99]
EDGE-GRPO's guided error correction: a wrong response, a reflection cue, then the reference). The inserted samples
are forced (:meth:`~genalign.sampling.base.SampleRule.forced_samples`): the policy tokenizes the text, closes it with
the end token and scores it with the current weights; rewards are computed like any sample's. Conventions (success
threshold, groups, reference columns) are those of :mod:`genalign.experimental.sampling.guidance`.
"""

from __future__ import annotations

import math

import torch

from genalign.experimental.sampling.guidance import Group, check_arg, groups_of, reference_of
from genalign.sampling.base import SAMPLE_SOURCES, Candidate, Decision, Forced, Outcome, RuleDefaults


class _ReferenceInsertion(RuleDefaults):
    """Rules that insert one sample into each all-wrong group that has a reference solution, replacing one of its
    wrong samples (:meth:`replaced`). The rows' solutions are read in :meth:`choose` (rules see no rows later)."""

    forces = True
    kind = "reference"
    name = ""

    def __init__(self, *, solution_column: str, threshold: float) -> None:
        self.solution_column, self.threshold = solution_column, threshold
        self._solutions: dict[int, str | None] = {}  # stream position -> reference solution (this step)

    def choose(self, pool: list[Candidate], wanted: int, generator: torch.Generator) -> list[Candidate]:
        for candidate in pool:
            self._solutions[candidate.position] = reference_of(candidate.row, self.solution_column, self.name)
        return pool

    def targets(self, outcome: Outcome) -> list[Group]:
        """The all-wrong groups that have a reference solution (the same before and after the insertion: inserted
        samples do not count)."""
        groups = groups_of(outcome, self.threshold)
        return [g for g in groups if g.all_wrong and self._solutions.get(g.position)]

    def replaced(self, outcome: Outcome, group: Group) -> int:
        """The wrong sample the inserted one replaces: the last one drawn."""
        return group.members[-1]

    def completion(self, outcome: Outcome, group: Group) -> str:
        """The inserted completion's text."""
        return str(self._solutions[group.position])

    def forced_samples(self, outcome: Outcome) -> list[Forced]:
        return [
            Forced(g.position, tokens=None, behaviour_logp=None, kind=self.kind, text=self.completion(outcome, g))
            for g in self.targets(outcome)
        ]

    def after_rewards(self, outcome: Outcome) -> Decision:
        keep = torch.ones(len(outcome), dtype=torch.bool)
        forced = outcome.forced if outcome.forced is not None else torch.zeros(len(outcome), dtype=torch.bool)
        targets = self.targets(outcome)
        inserted = []
        for group in targets:
            mine = (forced & (outcome.positions == group.position)).nonzero().flatten()  # [k] inserted samples
            if len(mine):
                keep[self.replaced(outcome, group)] = False
                inserted.append(int(mine[-1]))
        all_wrong = sum(g.all_wrong for g in groups_of(outcome, self.threshold))
        successes = [float(outcome.rewards[i] >= self.threshold) for i in inserted]
        self._solutions = {}
        return Decision(keep=keep, stats={
            "inserted": float(len(inserted)),
            "inserted_success": sum(successes) / len(successes) if successes else math.nan,
            "all_wrong_without_reference": float(all_wrong - len(targets)),
        })  # fmt: skip


@SAMPLE_SOURCES.register(
    "gcpo",
    formula="for a prompt whose G samples all fail (r_i < threshold): o_G ← the reference solution y* (scored by "
    "the current policy, rewarded like any sample); advantages over {o_1..o_{G−1}, y*}",
    source="[253] GCPO",
    summary="When the model cannot solve a prompt, the reference solution joins its group in place of one wrong "
    "sample, so the group has a success and the update moves toward it.",
)
class GCPO(_ReferenceInsertion):
    """[253] GCPO: an all-wrong group gets the reference answer as one of its samples.

    After the rewards of the step's samples, each prompt whose drawn samples all fail (weighted reward below
    ``threshold``) and whose row has a reference solution gets it inserted as a forced sample (kind
    ``reference``): the policy tokenizes it, closes it with the end token and scores it (its old log-probs are the
    current policy's); its reward is computed like any sample's. The last wrong sample of the group is dropped
    (``Decision.keep``), so the group keeps its size and now contrasts the reference with the model's failures.

    Reading chosen: the abstract says the reference "supplies the correct response" when the model cannot solve the
    problem; genalign replaces the group's last-drawn wrong sample (the paper's choice of which one is not stated) and
    trains on the whole reference text as actions.

    Args:
        solution_column: the row column with the reference solution. threshold: the success reward.
    """

    name = "gcpo"

    def __init__(self, *, solution_column: str = "solution", threshold: float = 0.5) -> None:
        super().__init__(solution_column=solution_column, threshold=threshold)


@SAMPLE_SOURCES.register(
    "edge_gec",
    formula="for a prompt whose G samples all fail: o_c = decode(o_w) ⊕ cue ⊕ y* with o_w the shortest wrong "
    "sample and y* the reference solution, in place of o_w; advantages over {o_i}_{i≠w} ∪ {o_c}",
    source="[99] EDGE-GRPO (guided error correction)",
    summary="An all-wrong group gets a corrected response: one of its wrong responses, a reflection cue and the "
    "reference solution, so the model learns to recover from its own error.",
    needs=("action_ids",),
)
class EdgeGEC(_ReferenceInsertion):
    """[99] EDGE-GRPO's guided error correction: a wrong response followed by a reflection cue and the reference.

    For a prompt whose drawn samples all fail and whose row has a reference solution, the shortest wrong sample
    ``o_w`` is decoded, ``cue`` and the reference solution are appended, and the text joins the group as a forced
    sample (kind ``correction``) in place of ``o_w``; the whole text is actions, scored by the current policy, so a
    successful correction raises the probability of the reflection after the error. (The entropy-driven advantage,
    EDGE-GRPO's other half, is the credit rule in :mod:`genalign.algorithms.credit.token_weights`.)

    Reading chosen: the abstract names "Guided Error Correction" without its form; genalign builds the corrected
    response as (wrong response ⊕ reflection cue ⊕ reference solution), picks the shortest wrong response so the
    result fits the completion length (the policy cuts a longer one at ``max_new_tokens``, which marks it truncated),
    and the cue text is genalign's choice. The rule decodes token ids itself: ``tokenizer`` must name the policy's
    tokenizer (its model folder, hub id or ``builtin:<name>``).

    Args:
        tokenizer: the policy's tokenizer (usually ``policy.model``). cue: the reflection cue between the two parts.
        solution_column: the row column with the reference solution. threshold: the success reward.
    """

    needs_tokens = True
    kind = "correction"
    name = "edge_gec"

    def __init__(
        self, *, tokenizer: str, cue: str = "\nWait, that is not right. Let me solve it again.\n",
        solution_column: str = "solution", threshold: float = 0.5,
    ) -> None:  # fmt: skip
        check_arg("tokenizer", isinstance(tokenizer, str) and bool(tokenizer), tokenizer, "must name the policy's "
               "tokenizer (e.g. the same value as policy.model)")  # fmt: skip
        super().__init__(solution_column=solution_column, threshold=threshold)
        self.tokenizer_name, self.cue = tokenizer, cue
        self._tokenizer = None

    def decode(self, tokens: list[int]) -> str:
        if self._tokenizer is None:
            from genalign.assets import model_location
            from genalign.policies.lm.tokenizer import load_tokenizer

            path = model_location(
                self.tokenizer_name, field="algorithm.sample_sources[edge_gec].tokenizer", marker=None
            )
            self._tokenizer = load_tokenizer(path)
        return self._tokenizer.decode(tokens, skip_special_tokens=True)

    def replaced(self, outcome: Outcome, group: Group) -> int:
        """The shortest wrong sample (the first drawn among equals)."""
        return min(group.members, key=lambda i: (float(outcome.lengths[i]), i))

    def completion(self, outcome: Outcome, group: Group) -> str:
        tokens, _ = outcome.completion(self.replaced(outcome, group))
        return self.decode(tokens.tolist()) + self.cue + str(self._solutions[group.position])
