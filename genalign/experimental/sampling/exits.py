"""Early exits from a sampled reasoning path: the path is cut after part of its reasoning, an exit cue is appended and
the policy answers from there (a forced continuation, :class:`~genalign.sampling.base.Forced` with ``continues``).
The member is ``path[:t] ⊕ cue ⊕ answer``: the path's tokens keep their behaviour log-probs, the cue is scored by the
current policy (no policy sampled it), the answer is sampled on-policy; all of it is trained, so an exit that pays
raises the probability of the cue (ending the reasoning) at that point.

* :class:`SerialExits` ([14] S-GRPO): one path per prompt and several exits along it form the *serial group*; the
  rule tells the reward shaper ``exit_decay`` (:mod:`genalign.experimental.shaping.early_exit`) each member's exit
  order (the ``exit_order`` signal), so correct answers earn less the later they exit.
* :class:`DynamicTruncation` ([114] Step-GRPO's dynamic truncated rollout): a path is cut after the first reasoning
  step at which the policy was already confident, exposing the group to the concise version of its own reasoning;
  the step-aware redundancy penalty is the reward shaper ``step_redundancy``.

Paths are cut only inside their reasoning: before ``answer_marker`` (e.g. ``</think>``, or ``A:`` for the chain
demo) when the path writes it, and never at its last token. Steps and tokens are the policy's
(:mod:`genalign.experimental.sampling.tokens`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

from genalign.experimental.sampling.guidance import check_arg
from genalign.experimental.sampling.tokens import PolicyTokens, cut_generator, exit_start
from genalign.experimental.shaping.early_exit import EXIT_ORDER
from genalign.sampling.base import SAMPLE_SOURCES, Decision, Forced, Outcome, RuleDefaults

#: S-GRPO's exit cue for models that think inside ``<think> … </think>``.
THINK_EXIT_CUE = "\nTime is limited, stop thinking and start answering.\n</think>\n\n"


def sampled_by_prompt(outcome: Outcome) -> dict[int, list[int]]:
    """The sampled (not forced) samples of each prompt of ``outcome`` by stream position, in outcome order."""
    forced = outcome.forced if outcome.forced is not None else torch.zeros(len(outcome), dtype=torch.bool)
    paths: dict[int, list[int]] = {}
    for i, position in enumerate(outcome.positions.tolist()):
        if not forced[i]:
            paths.setdefault(position, []).append(i)
    return paths


class _Exits(RuleDefaults):
    """What the exit rules share: the tokenizer, the cue's ids and where a path's reasoning ends."""

    needs_tokens = True
    forces = True

    def __init__(
        self, *, rule: str, tokenizer: str, cue: str, answer_marker: str | None, step_markers: Sequence[str] = ()
    ) -> None:
        check_arg("cue", isinstance(cue, str) and bool(cue), cue, "must be a non-empty text (the exit cue)")
        check_arg("step_markers", all(isinstance(m, str) and m.strip() for m in step_markers), step_markers,
                  "must be non-blank token texts (e.g. ['Wait'])")  # fmt: skip
        self.tokens = PolicyTokens(tokenizer, rule, step_markers=step_markers)
        self.cue, self.answer_marker = cue, answer_marker or None
        self._cue_ids: list[int] | None = None

    @property
    def cue_ids(self) -> list[int]:
        if self._cue_ids is None:
            self._cue_ids = self.tokens.encode(self.cue)
        return self._cue_ids

    def reasoning_length(self, tokens: Tensor) -> int:
        """Cut points ``t`` (exit after ``tokens[:t]``) must be below this: the tokens before the answer marker, and
        never the path's last token."""
        return min(self.tokens.text_before(tokens, self.answer_marker), tokens.shape[0] - 1)

    def step_cuts(self, tokens: Tensor) -> list[int]:
        """The cut points right after a step's last token, inside the reasoning (``0 < t <`` :meth:`reasoning_length`)."""
        limit = self.reasoning_length(tokens)
        ends = self.tokens.step_ends(tokens[:limit])  # [limit]
        return [t + 1 for t in ends.nonzero().flatten().tolist() if t + 1 < limit]

    def exit(self, position: int, tokens: Tensor, logp: Tensor, cut: int, kind: str) -> Forced:
        ids, behaviour = exit_start(tokens, logp, cut, self.cue_ids)
        return Forced(position, ids, behaviour, kind=kind, continues=True)


@SAMPLE_SOURCES.register(
    "serial_exits",
    formula="one path o ~ π(·|x) per prompt; exits t_1 < … < t_m (m = min(exits, cut points), default group_size − "
    "1) drawn uniformly among its step ends (or tokens) before the answer marker; member j = o_{<t_j} ⊕ cue ⊕ a_j "
    "with a_j ~ π(·|x, o_{<t_j}, cue); serial group {member_1..member_m, o}; exit_order = j − 1 for member j, m for o",
    source="[14] S-GRPO (the serial-group rollout; its decaying reward is the reward shaper exit_decay)",
    summary="Serial groups: one reasoning path per prompt is cut at several points, the answer is forced after each "
    "cut, and the answers at the exits (plus the full path) form the group.",
    provides=(EXIT_ORDER,),
)
class SerialExits(_Exits):
    """[14] S-GRPO's serial-group generation: one reasoning path per prompt, answers forced at several exits along it.

    The step samples one path per prompt (``samples_per_prompt = 1``). After its rewards, ``m`` cut points are drawn
    uniformly without replacement among the path's cut points (``at="steps"``: right after a reasoning step's last
    token; ``"tokens"``: after any token) that lie before ``answer_marker`` and before its last token; for each cut
    ``t`` the member ``path[:t] ⊕ cue ⊕ answer`` joins the prompt's group, the answer sampled by the policy. The group
    is the serial group: the members in exit order, then the full path. Each member's ``exit_order`` (0 for the
    earliest exit, ``m`` for the full path, −1 for samples of the prompt outside its serial group) goes to the reward
    shaper ``exit_decay``, which gives a correct answer less reward the later it exits. A path without a cut point
    (no step before its answer) exits once, before its reasoning (``t = 0``: the cue first), so that every serial
    group compares at least two answers; a path still alone in its group (its exit could not be built) leaves the
    groups (``Decision.keep``).

    Reading chosen: the abstract says "serially selects multiple temporal positions"; genalign draws them uniformly
    among step ends (or tokens) of the reasoning, ``m = group_size − 1`` by default so that the serial group has
    ``algorithm.group_size`` members, and trains every member's tokens (path prefix, cue and answer), so that a
    rewarded early exit raises the probability of the cue where it was inserted. The default cue is the paper's.

    Args:
        tokenizer: the policy's tokenizer (the same value as ``policy.model``).
        cue: the text appended at an exit (the model's end-of-thinking marker, after a short instruction).
        answer_marker: the text that ends the reasoning in a full path (``</think>``; ``A:`` for the chain demo);
            null: the whole path is reasoning.
        exits: cut points per path (None: ``group_size − 1``). at: ``"steps"`` or ``"tokens"``.
    """

    def __init__(
        self, *, tokenizer: str, cue: str = THINK_EXIT_CUE, answer_marker: str | None = "</think>",
        exits: int | None = None, at: Literal["steps", "tokens"] = "steps",
    ) -> None:  # fmt: skip
        super().__init__(rule="serial_exits", tokenizer=tokenizer, cue=cue, answer_marker=answer_marker)
        check_arg(
            "exits", exits is None or (isinstance(exits, int) and exits >= 1), exits, "must be an int >= 1 or null"
        )
        check_arg("at", at in ("steps", "tokens"), at, "must be 'steps' or 'tokens'")
        self.exits, self.at = exits, at

    def samples_per_prompt(self, group_size: int) -> int | None:
        self.exits = self.exits if self.exits is not None else group_size - 1
        return 1

    def cuts(self, outcome: Outcome, sample: int) -> list[int]:
        """The exits drawn for ``sample``'s path, ascending (a function of the step, the prompt and the path); ``[0]``
        for a path without a cut point."""
        tokens, _ = outcome.completion(sample)
        points = self.step_cuts(tokens) if self.at == "steps" else list(range(1, self.reasoning_length(tokens)))
        if not points:
            return [0]
        chosen = torch.randperm(len(points), generator=cut_generator(outcome.step, int(outcome.indices[sample])))
        return sorted(points[i] for i in chosen[: self.exits].tolist())

    def forced_samples(self, outcome: Outcome) -> list[Forced]:
        forced = []
        for position, samples in sampled_by_prompt(outcome).items():
            tokens, logp = outcome.completion(samples[0])
            forced += [self.exit(position, tokens, logp, t, "exit") for t in self.cuts(outcome, samples[0])]
        return forced

    def after_rewards(self, outcome: Outcome) -> Decision:
        order = torch.full((len(outcome),), -1, dtype=torch.long)  # [N]
        forced = outcome.forced if outcome.forced is not None else torch.zeros(len(outcome), dtype=torch.bool)
        fractions: list[float] = []
        for position, samples in sampled_by_prompt(outcome).items():
            path, _ = outcome.completion(samples[0])
            cue = torch.tensor(self.cue_ids, dtype=torch.long)
            starts = [torch.cat([path[:t], cue]) for t in self.cuts(outcome, samples[0])]
            exited = 0  # the members are this prompt's forced samples that start as the exits do, in exit order
            for i in (forced & (outcome.positions == position)).nonzero().flatten().tolist():
                if exited == len(starts):
                    break
                tokens, _ = outcome.completion(i)
                start = starts[exited]
                if tokens.shape[0] >= start.shape[0] and torch.equal(tokens[: start.shape[0]], start):
                    order[i] = exited
                    fractions.append((start.shape[0] - cue.shape[0]) / path.shape[0])
                    exited += 1
            order[samples[0]] = exited  # the full path exits last
        alone = [p for p in sampled_by_prompt(outcome) if int((outcome.positions == p).sum()) == 1]
        keep = ~torch.isin(outcome.positions, torch.tensor(alone, dtype=torch.long))  # [N]
        return Decision(keep=keep, signals={EXIT_ORDER: order}, stats={
            "exits": float(len(fractions)),
            "exit_fraction_mean": sum(fractions) / len(fractions) if fractions else math.nan,
            "paths_alone": float(len(alone)),
        })  # fmt: skip


@SAMPLE_SOURCES.register(
    "dynamic_truncation",
    formula="for each sampled path o with steps s_1, s_2, … (before the answer marker): c_k = exp(mean log π_β of "
    "the tokens of s_k); k* = the first k ≥ min_steps with c_k ≥ confidence; add o_{≤s_k*} ⊕ cue ⊕ a, a ~ "
    "π(·|x, o_{≤s_k*}, cue), to the group (replace: in place of o)",
    source="[114] Step-GRPO (dynamic truncated rollout; the step-aware relative reward is the shaper step_redundancy)",
    summary="Dynamic truncated rollouts: a path is cut after the first reasoning step the policy sampled with high "
    "confidence and the answer is forced there, so the group also holds the concise version of its reasoning.",
)
class DynamicTruncation(_Exits):
    """[114] Step-GRPO's dynamic truncated rollout: concise, high-confidence versions of the group's own paths.

    For every sampled path of a prompt (the first ``per_prompt`` of them; all when null) the reasoning is split into
    steps (before ``answer_marker``); the confidence of step ``k`` is the geometric mean of its tokens' behaviour
    probabilities, ``c_k = exp(mean log π_β)``. The path is cut after the first step ``k ≥ min_steps`` with ``c_k ≥
    confidence`` that is not its last reasoning step, ``cue`` is appended and the policy answers from there (a forced
    continuation); the truncated sample joins the group (``replace``: in place of its path, so the group keeps its
    size). A path without such a step is left whole.

    Reading chosen: the abstract names the mechanism ("exposes the model to concise high-confidence trajectories")
    without its test; genalign measures confidence from the behaviour log-probs of the step just written (no extra
    model pass), and the steps are the segments of ``segment_ids`` (newlines and sentence ends, and a new step at each
    of ``step_markers``: the abstract's "linguistic markers"; give the same list as ``policy.probes.step_markers`` so
    that the cut points and ``step_redundancy``'s step counts agree). ``confidence``, ``min_steps`` and the default cue
    are genalign's choices.

    Args:
        tokenizer: the policy's tokenizer (the same value as ``policy.model``).
        cue, answer_marker: as for ``serial_exits``.
        step_markers: token texts that open a new step (e.g. ``["Wait", "Alternatively"]``), each one token's text.
        confidence: the step confidence in (0, 1] at which the path is cut. min_steps: steps kept at least.
        per_prompt: paths of each prompt considered (None: all). replace: drop a path that was truncated.
    """

    def __init__(
        self, *, tokenizer: str, cue: str = THINK_EXIT_CUE, answer_marker: str | None = "</think>",
        confidence: float = 0.9, min_steps: int = 1, per_prompt: int | None = None, replace: bool = False,
        step_markers: Sequence[str] = (),
    ) -> None:  # fmt: skip
        super().__init__(rule="dynamic_truncation", tokenizer=tokenizer, cue=cue, answer_marker=answer_marker,
                         step_markers=step_markers)  # fmt: skip
        check_arg("confidence", 0.0 < confidence <= 1.0, confidence, "must be in (0, 1] (a step's mean probability)")
        check_arg("min_steps", isinstance(min_steps, int) and min_steps >= 1, min_steps, "must be an int >= 1")
        check_arg("per_prompt", per_prompt is None or (isinstance(per_prompt, int) and per_prompt >= 1), per_prompt,
                  "must be an int >= 1 or null")  # fmt: skip
        self.confidence, self.min_steps, self.per_prompt, self.replace = confidence, min_steps, per_prompt, replace

    def truncation(self, tokens: Tensor, logp: Tensor) -> int | None:
        """The cut after the first confident step (module docstring), or None."""
        start = 0
        for count, cut in enumerate(self.step_cuts(tokens), start=1):
            step_confidence = math.exp(float(logp[start:cut].double().mean()))
            if count >= self.min_steps and step_confidence >= self.confidence:
                return cut
            start = cut
        return None

    def truncations(self, outcome: Outcome) -> list[tuple[int, int, int]]:
        """``(position, sample, cut)`` of every path this rule truncates, in outcome order."""
        found = []
        for position, samples in sampled_by_prompt(outcome).items():
            for sample in samples[: self.per_prompt]:
                tokens, logp = outcome.completion(sample)
                cut = self.truncation(tokens, logp)
                if cut is not None:
                    found.append((position, sample, cut))
        return found

    def forced_samples(self, outcome: Outcome) -> list[Forced]:
        forced = []
        for position, sample, cut in self.truncations(outcome):
            tokens, logp = outcome.completion(sample)
            forced.append(self.exit(position, tokens, logp, cut, "truncated"))
        return forced

    def after_rewards(self, outcome: Outcome) -> Decision:
        found = self.truncations(outcome)
        keep = torch.ones(len(outcome), dtype=torch.bool)  # [N]
        if self.replace:
            keep[[sample for _, sample, _ in found]] = False
        fractions = [cut / float(outcome.lengths[sample]) for _, sample, cut in found]
        return Decision(keep=keep if self.replace else None, stats={
            "truncated": float(len(found)),
            "kept_fraction_mean": sum(fractions) / len(fractions) if fractions else math.nan,
        })  # fmt: skip
