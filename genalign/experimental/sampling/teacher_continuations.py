"""The teacher continues the student's own completions: after a prefix cut at a drawn share of a failed sample
([133] TGPO), or for a few tokens at the student's first uncertain token, after which the student goes on ([196]
MENTOR). The continued samples join the prompt's group as off-policy samples: the student's prefix keeps the
student's behaviour log-probs, the teacher's tokens the teacher's, so the off-policy clip [323]
(``algorithm.clip: off_policy``, required) weighs every token by the ratio to the policy that wrote it, and the
group-relative advantage of the outcome reward covers the student's and the guided samples together.
"""

from __future__ import annotations

import math

import torch

from genalign.experimental.sampling.guidance import Group, check_arg, groups_of
from genalign.experimental.sampling.mixed_prefix import prefix_length
from genalign.experimental.sampling.replay_buffer import check_count
from genalign.experimental.sampling.teacher_writing import TeacherWriting, added_to, teacher_sample
from genalign.experimental.sampling.tokens import cut_generator
from genalign.sampling.base import SAMPLE_SOURCES, Decision, Forced, Outcome


class _Continuations(TeacherWriting):
    """Rules that guide up to ``guided`` failed samples of each prompt (the first drawn), each at most once."""

    needs_tokens = True

    def __init__(self, *, guided: int, threshold: float) -> None:
        check_count("guided", guided)
        self.guided, self.threshold = guided, threshold
        self._stats: dict[str, list[float]] = {}

    def failed(self, outcome: Outcome, group: Group) -> list[int]:
        """The group's drawn samples with a valid reward below ``threshold``, the first ``guided``."""
        rewards = outcome.rewards
        return [i for i in group.members if not math.isnan(float(rewards[i])) and rewards[i] < self.threshold][
            : self.guided
        ]

    def guide(self, outcome: Outcome, sample: int) -> Forced | None:
        """The guided sample built from student sample ``sample`` (None: this sample gets none)."""
        raise NotImplementedError

    def forced_samples(self, outcome: Outcome) -> list[Forced]:
        forced = []
        for group in groups_of(outcome, self.threshold):
            forced += [f for i in self.failed(outcome, group) if (f := self.guide(outcome, i)) is not None]
        return forced

    def note(self, key: str, value: float) -> None:
        self._stats.setdefault(key, []).append(value)

    def after_rewards(self, outcome: Outcome) -> Decision:
        guided = added_to(outcome, set(outcome.positions.tolist()))  # [N]
        notes, self._stats = self._stats, {}
        success = (outcome.rewards[guided] >= self.threshold).double()
        return Decision(stats={
            "guided": float(guided.sum()),
            "guided_success": float(success.mean()) if len(success) else math.nan,
            **{f"{key}_mean": sum(values) / len(values) for key, values in notes.items()},
        })  # fmt: skip


@SAMPLE_SOURCES.register(
    "tgpo",
    formula="for each of the first `guided` failed samples o of a prompt x: f ~ U[min_fraction, max_fraction], k = "
    "round(f·|o|) ∈ [1, |o| − 1]; õ = o_{≤k} ⊕ c, c ~ π_T(·|x, o_{≤k}) (the teacher continues); õ joins the group; "
    "ratio per token πθ/πθ_old on o_{≤k}, πθ/π_T on c (off-policy clip); advantages from the outcome rewards",
    source="[133] TGPO",
    summary="Teacher-guided continuations: the teacher continues a prefix of a failed student sample, and the "
    "continued sample joins the group with the outcome reward, as an off-policy sample.",
    off_policy=True,
)
class TGPO(_Continuations):
    """[133] TGPO: the teacher writes the rest of a failed sample after a prefix of it, conditioned on the student's
    own context.

    After the rewards of the student's samples, the first ``guided`` failed samples (reward below ``threshold``) of
    each prompt are cut after ``k = round(f·L)`` of their ``L`` tokens (``f`` uniform in ``[min_fraction,
    max_fraction]``, drawn by a generator of the step, the prompt and the pick) and the teacher
    (``algorithm.teacher``) writes the rest; the continued samples join the group and are rewarded like any sample.

    Reading chosen: the abstract says the teacher guides "token level generation conditioning on student-generated
    contexts"; genalign has the teacher write the whole rest after one cut per guided sample (not token by token
    interleaved), cuts only failed samples (the trajectories the abstract calls outside the teacher's
    distribution), and trains the result as an extra group member under the off-policy clip; ``guided`` and the cut
    range are genalign's choices.

    Args:
        guided: failed samples continued per prompt (>= 1).
        min_fraction, max_fraction: the range of the student prefix's share of the sample, in (0, 1).
        threshold: the success reward.
    """

    def __init__(
        self, *, guided: int = 1, min_fraction: float = 0.2, max_fraction: float = 0.8, threshold: float = 0.5
    ) -> None:
        check_arg("max_fraction", 0.0 < min_fraction <= max_fraction < 1.0, max_fraction,
                  f"must be >= min_fraction = {min_fraction!r}, both in (0, 1)")  # fmt: skip
        super().__init__(guided=guided, threshold=threshold)
        self.min_fraction, self.max_fraction = min_fraction, max_fraction

    def guide(self, outcome: Outcome, sample: int) -> Forced | None:
        tokens, logp = outcome.completion(sample)
        if tokens.shape[0] < 2:
            return None
        generator = cut_generator(outcome.step, int(outcome.indices[sample]), salt=sample)
        draw = float(torch.rand((), generator=generator, dtype=torch.float64))
        k = prefix_length(tokens.shape[0], self.min_fraction + (self.max_fraction - self.min_fraction) * draw)
        self.note("prefix_fraction", k / tokens.shape[0])
        return teacher_sample(int(outcome.positions[sample]), "teacher_guided", tokens[:k], logp[:k])


@SAMPLE_SOURCES.register(
    "mentor",
    formula="for each of the first `guided` failed samples o of x: t* = min{t : −log π_old(o_t) ≥ min_surprise} "
    "(the first uncertain token); õ = o_{<t*} ⊕ e ⊕ c, e ~ π_T(·|x, o_{<t*}) for `span` tokens (the expert), c ~ "
    "πθ_old(·|x, o_{<t*}, e) (the student goes on); õ joins the group; ratio πθ/π_T on e (off-policy clip)",
    source="[196] MENTOR",
    summary="Expert guidance only at critical decision points: at a failed sample's first uncertain token the "
    "teacher writes a few tokens, then the student continues; the mixed sample joins the group.",
    off_policy=True,
)
class Mentor(_Continuations):
    """[196] MENTOR: the expert takes over sampling only at a critical decision point, for a short span.

    For the first ``guided`` failed samples of each prompt, the critical point ``t*`` is the first token the student
    sampled with surprise ``−log π_old(o_t) >= min_surprise`` (probability at most ``exp(−min_surprise)``); the
    student's tokens before it are kept, the teacher (``algorithm.teacher``) writes up to ``span`` tokens from
    there, and the student samples the rest with its training settings (a forced continuation). The mixed sample
    joins the group and is rewarded like any sample; a failed sample without an uncertain token gets none.

    Reading chosen: the abstract locates guidance at "critical decision points" without their test; genalign takes
    the first token whose sampled surprise reaches ``min_surprise`` (the sampled token's ``−log π``, a one-sample
    estimate of the entropy there: the rule sees the behaviour log-probs, not the full distribution), guides one
    point per sample, and trains the mixed sample as an extra group member under the off-policy clip.

    Args:
        guided: failed samples guided per prompt (>= 1).
        min_surprise: the surprise (nats) that marks a critical token (> 0).
        span: the most tokens the teacher writes at the critical point (>= 1).
        threshold: the success reward.
    """

    def __init__(self, *, guided: int = 1, min_surprise: float = 1.0, span: int = 8, threshold: float = 0.5) -> None:
        check_arg("min_surprise", min_surprise > 0.0, min_surprise, "must be > 0 (nats)")
        check_count("span", span)
        super().__init__(guided=guided, threshold=threshold)
        self.min_surprise, self.span = min_surprise, span

    def critical(self, behaviour_logp: torch.Tensor) -> int | None:
        """The first position whose surprise ``−log π`` reaches ``min_surprise`` (None: none does)."""
        hits = (-behaviour_logp >= self.min_surprise).nonzero().flatten()
        return int(hits[0]) if len(hits) else None

    def guide(self, outcome: Outcome, sample: int) -> Forced | None:
        tokens, logp = outcome.completion(sample)
        t = self.critical(logp)
        if t is None:
            return None
        self.note("critical_position", float(t))
        return teacher_sample(int(outcome.positions[sample]), "teacher_mentor", tokens[:t], logp[:t], cap=self.span,
                              continues=True)  # fmt: skip
