"""In-context expert guidance ([44] ICPO): the policy itself, shown solved examples from the training data, acts as
the expert; what it writes under that guidance joins the group as an answer to the plain prompt.

Mixed-policy GRPO with implicit expert forcing: after the step's on-policy samples, a second round samples ``guided``
completions of each prompt with ``demos`` solved examples of the step's other prompts appended to it (guidance
``hint``, :meth:`~genalign.sampling.base.SampleRule.round_guidance`). Those completions are then re-added as forced
samples of the *plain* prompt with the log-probs they were sampled with (under the demonstrations) as behaviour
log-probs: the policy is trained on them as its own answers, weighted by ``πθ(o|x) / π(o|x, demos)`` under the
off-policy clip [323] (``algorithm.clip: off_policy``, required). The guided originals leave the groups.

Expert-region reject sampling keeps only the guided completions whose reward reaches ``threshold``; the annealed
expert bonus is the reward shaper ``expert_bonus`` (:mod:`genalign.experimental.shaping.expert`), which reads the
``expert_guided`` signal this rule provides.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from genalign.experimental.sampling.guidance import check_arg
from genalign.experimental.sampling.rounds import planned_hint, rounds_of
from genalign.experimental.sampling.tokens import cut_generator
from genalign.experimental.shaping.expert import EXPERT_GUIDED
from genalign.sampling.base import SAMPLE_SOURCES, Candidate, Decision, Forced, Outcome, RuleDefaults


def prompt_words(row: dict[str, Any]) -> str:
    """The prompt as text: the string, or the content of the last user message of a chat prompt."""
    prompt = row.get("prompt", "")
    if isinstance(prompt, str):
        return prompt
    users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
    return str(users[-1]) if users else ""


@SAMPLE_SOURCES.register(
    "in_context_expert",
    formula="round 2: o'_j ~ π(·|x ⊕ demos(x)), j = 1..guided, demos = solved examples of the step's other prompts; "
    "accepted = {o'_j : r(o'_j) ≥ threshold} (expert-region rejection); the group of x = its on-policy samples ∪ "
    "accepted, trained as answers to x with behaviour log-probs log π(o'|x ⊕ demos) (off-policy clip)",
    source="[44] ICPO (implicit expert forcing, expert-region reject sampling; the annealed bonus is the reward "
    "shaper expert_bonus)",
    summary="Mixed-policy groups without an expert model: the policy answers again with solved examples in context, "
    "and its correct guided answers join the group as off-policy answers to the plain prompt.",
    off_policy=True,
    provides=(EXPERT_GUIDED,),
)
class InContextExpert(RuleDefaults):
    """[44] ICPO: implicit expert forcing by in-context demonstrations, with expert-region reject sampling.

    Every prompt of the step gets ``guided`` more samples in a second round, drawn with ``demos`` solved examples of
    the step's other prompts (their prompt and ``solution_column``, rendered with ``example`` and joined into
    ``template``) appended to its prompt. The guided samples whose reward reaches ``threshold`` are added again as
    forced samples of the plain prompt, with the behaviour log-probs they were sampled with; the guided originals
    leave the groups (``Decision.keep``). The accepted copies are flagged ``expert_guided`` for ``expert_bonus``.

    Reading chosen: the abstract says ICPO uses "the inherent in-context learning capability of LRMs to provide
    expert guidance using existing datasets"; genalign takes the demonstrations from the step's other prompts (their
    reference solutions, so no extra data is read and every process draws the same ones), trains the guided answers
    as answers to the plain prompt with the conditional sampling log-probs as behaviour policy (the off-policy clip's
    importance ratio), and reads "expert region reject sampling" as keeping the guided answers that are correct.
    ``demos``, ``guided``, the texts and ``threshold`` are genalign's choices.

    Args:
        demos: solved examples shown per guided prompt (>= 1). guided: guided samples per prompt (>= 1).
        solution_column: the row column with the reference solution.
        template: the text appended to the prompt (``{demos}`` = the rendered examples).
        example: one example (``{prompt}``, ``{solution}``).
        threshold: a guided sample is accepted when its weighted reward reaches it.
    """

    needs_tokens = True
    forces = True
    rounds = 2
    needs_guidance = frozenset({"hint"})

    def __init__(
        self, *, demos: int = 2, guided: int = 2, solution_column: str = "solution",
        template: str = "\n\nSolved examples:\n{demos}", example: str = "Problem: {prompt}\nSolution: {solution}\n",
        threshold: float = 0.5,
    ) -> None:  # fmt: skip
        check_arg("demos", isinstance(demos, int) and demos >= 1, demos, "must be an int >= 1")
        check_arg("guided", isinstance(guided, int) and guided >= 1, guided, "must be an int >= 1")
        check_arg("template", "{demos}" in template, template, "must contain '{demos}'")
        check_arg("example", "{solution}" in example, example, "must contain '{solution}' (and usually '{prompt}')")
        self.demos, self.guided, self.solution_column = demos, guided, solution_column
        self.template, self.example, self.threshold = template, example, threshold
        self._rows: dict[int, tuple[int, str, str | None, str]] = {}  # position -> (index, prompt, solution, hint)
        self._first: dict[int, int] = {}  # position -> its first-round samples (this step)

    def choose(self, pool: list[Candidate], wanted: int, generator: torch.Generator) -> list[Candidate]:
        for candidate in pool:
            solution = candidate.row.get(self.solution_column)
            solution = str(solution) if solution not in (None, "") else None
            self._rows[candidate.position] = (candidate.index, prompt_words(candidate.row), solution,
                                              planned_hint(candidate.row))  # fmt: skip
        return pool

    def demonstrations(self, position: int, step: int, present: list[int]) -> list[int]:
        """The positions whose solved examples guide ``position`` (``demos`` of the other ``present`` prompts with a
        solution, drawn by a generator of the step and the prompt); none for a prompt this rule did not see planned
        (a refill of the stage)."""
        if position not in self._rows:
            return []
        others = [p for p in sorted(present) if p != position and p in self._rows and self._rows[p][2] is not None]
        order = torch.randperm(len(others), generator=cut_generator(step, self._rows[position][0], salt=44))
        return [others[i] for i in sorted(order[: self.demos].tolist())]

    def more_samples(self, outcome: Outcome) -> dict[int, int]:
        if outcome.round != 0:
            return {}
        positions, counts = outcome.positions.unique(return_counts=True)
        self._first = dict(zip(positions.tolist(), counts.tolist()))
        present = list(self._first)
        return {p: self.guided for p in present if self.demonstrations(p, outcome.step, present)}

    def round_guidance(self, outcome: Outcome) -> dict[int, dict[str, Any]]:
        if outcome.round != 0:
            return {}
        present = sorted(set(outcome.positions.tolist()))
        guidance = {}
        for position in present:
            shown = self.demonstrations(position, outcome.step, present)
            if shown:
                examples = "".join(self.example.format(prompt=self._rows[p][1], solution=self._rows[p][2])
                                   for p in shown)  # fmt: skip
                guidance[position] = {"hint": self._rows[position][3] + self.template.format(demos=examples)}
        return guidance

    def accepted(self, outcome: Outcome) -> list[int]:
        """The guided (second-round) samples whose reward reaches ``threshold``, in outcome order."""
        guided = rounds_of(outcome, self._first) == 1  # [N]
        return (guided & (outcome.rewards >= self.threshold)).nonzero().flatten().tolist()

    def forced_samples(self, outcome: Outcome) -> list[Forced]:
        forced = []
        for i in self.accepted(outcome):
            tokens, logp = outcome.completion(i)
            forced.append(Forced(int(outcome.positions[i]), tokens, logp, kind="expert"))
        return forced

    def after_rewards(self, outcome: Outcome) -> Decision:
        rounds = rounds_of(outcome, self._first)  # [N]
        guided = rounds == 1
        expert = torch.zeros(len(outcome), dtype=torch.bool)  # [N] the forced copies of the accepted samples
        unmatched = [outcome.completion(i)[0] for i in self.accepted(outcome)]
        positions = [int(outcome.positions[i]) for i in self.accepted(outcome)]
        for i in (rounds == -1).nonzero().flatten().tolist():
            tokens, _ = outcome.completion(i)
            for k, (position, copy) in enumerate(zip(positions, unmatched, strict=True)):
                if position == int(outcome.positions[i]) and torch.equal(tokens, copy):
                    expert[i] = True
                    del positions[k], unmatched[k]
                    break
        drawn = int(guided.sum())
        self._rows, self._first = {}, {}
        return Decision(keep=~guided, signals={EXPERT_GUIDED: expert}, stats={
            "guided": float(drawn),
            "accepted": float(expert.sum()),
            "acceptance": float(expert.sum()) / drawn if drawn else math.nan,
        })  # fmt: skip
