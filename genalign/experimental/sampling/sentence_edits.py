"""Sentence-level corrections injected into the groups ([146] EditGRPO): the group's worst sample, edited sentence by
sentence toward the row's reference text, joins the group as an off-policy correction in its place.

EditGRPO mixes on-policy exploration with off-policy guidance by injecting sentence-level corrections of the model's
own report into its rollouts. Here the corrector is a rule over the reference text (:func:`edit_sentences`): each
sentence of the sample is kept when a reference sentence says nearly the same (word overlap), replaced by the
unmatched reference sentence it overlaps most when it overlaps one only partly, and dropped when it overlaps none (a
finding the reference does not support); reference sentences nothing matched are appended (findings it missed).
"""

from __future__ import annotations

import re

from genalign.experimental.sampling.guidance import Group, check_arg, groups_of
from genalign.experimental.sampling.references import _ReferenceInsertion
from genalign.experimental.sampling.tokens import PolicyTokens
from genalign.sampling.base import SAMPLE_SOURCES, Outcome

#: a sentence ends at ``.``, ``!`` or ``?`` followed by whitespace, or at a line break
SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
WORD = re.compile(r"\w+")


def sentences(text: str) -> list[str]:
    """The non-empty sentences of ``text`` (split at :data:`SENTENCE_END`), stripped."""
    return [piece.strip() for piece in SENTENCE_END.split(text) if piece.strip()]


def word_overlap(a: str, b: str) -> float:
    """Jaccard overlap of the lower-cased words (runs of letters, digits and ``_``; punctuation ignored) of ``a`` and
    ``b`` (0 when both have none)."""
    left, right = set(WORD.findall(a.lower())), set(WORD.findall(b.lower()))
    union = left | right
    return len(left & right) / len(union) if union else 0.0


def edit_sentences(sample: str, reference: str, *, keep_overlap: float = 0.5) -> str:
    """``sample`` corrected sentence by sentence toward ``reference`` (module docstring), sentences joined by a space.

    For each sentence of the sample, in order: kept as written when its word overlap with some reference sentence is
    at least ``keep_overlap`` (that sentence counts as matched); otherwise replaced by the not yet matched reference
    sentence it overlaps most (the earlier among equals) when it overlaps one, else dropped. Reference sentences
    that were neither matched nor used as a replacement follow, in reference order.
    """
    targets = sentences(reference)
    covered = [False] * len(targets)
    edited: list[str] = []
    for sentence in sentences(sample):
        scores = [word_overlap(sentence, target) for target in targets]
        best = max(range(len(targets)), key=lambda j: (scores[j], -j), default=-1)
        if best >= 0 and scores[best] >= keep_overlap:
            covered[best] = True
            edited.append(sentence)
            continue
        open_targets = [j for j in range(len(targets)) if not covered[j] and scores[j] > 0.0]
        if open_targets:
            replacement = max(open_targets, key=lambda j: (scores[j], -j))
            covered[replacement] = True
            edited.append(targets[replacement])
    edited += [target for target, done in zip(targets, covered, strict=True) if not done]
    return " ".join(edited)


@SAMPLE_SOURCES.register(
    "sentence_edits",
    formula="for a prompt with a wrong sample (r < threshold): o_w = its lowest-reward sample; o_e = edit(o_w, y*): "
    "each sentence kept (word overlap >= keep_overlap with a sentence of y*), else replaced by the unmatched "
    "sentence of y* it overlaps most, or dropped (no overlap); then the unmatched sentences of y*; o_e in place of o_w",
    source="[146] EditGRPO (sentence-level corrections injected into rollouts; the corrector is a rule over the "
    "reference text)",
    summary="Mixed-policy groups: the worst sample of a group is corrected sentence by sentence toward the "
    "reference and joins the group in its place as off-policy guidance.",
    needs=("action_ids",),
)
class SentenceEdits(_ReferenceInsertion):
    """[146] EditGRPO: sentence-level corrections of the model's own sample injected into its group.

    For every prompt whose row has a reference text and whose drawn samples include a wrong one (weighted reward
    below ``threshold``; with ``only_failed`` only prompts whose samples all fail), the lowest-reward sample (the
    first drawn among equals) is decoded and corrected by :func:`edit_sentences`; the corrected text joins the group
    as a forced sample (kind ``edit``), tokenized, closed with the end token and scored by the current policy, in
    place of the sample it corrects; its reward is computed like any sample's.

    Reading chosen: the abstract gives "sentence-level detailed corrections" without the corrector; genalign edits
    toward the row's reference report with word-overlap alignment (``keep_overlap`` and the drop of unsupported
    sentences are its choices), so the correction keeps the sample's wording where it is right. The rule decodes
    token ids itself: ``tokenizer`` must name the policy's tokenizer.

    Args:
        tokenizer: the policy's tokenizer (the same value as ``policy.model``).
        solution_column: the row column with the reference text. threshold: the success reward.
        keep_overlap: the word overlap in (0, 1] from which a sample sentence is kept as written.
        only_failed: correct only prompts whose samples all fail.
    """

    needs_tokens = True
    kind = "edit"
    name = "sentence_edits"

    def __init__(
        self, *, tokenizer: str, solution_column: str = "solution", threshold: float = 0.5, keep_overlap: float = 0.5,
        only_failed: bool = False,
    ) -> None:  # fmt: skip
        check_arg("keep_overlap", 0.0 < keep_overlap <= 1.0, keep_overlap, "must be in (0, 1] (a word overlap)")
        super().__init__(solution_column=solution_column, threshold=threshold)
        self.tokens, self.keep_overlap, self.only_failed = (
            PolicyTokens(tokenizer, "sentence_edits"),
            keep_overlap,
            only_failed,
        )

    def targets(self, outcome: Outcome) -> list[Group]:
        """The groups with a reference text and a wrong sample (all wrong with ``only_failed``)."""
        groups = groups_of(outcome, self.threshold)
        wanted = [g for g in groups if (g.all_wrong if self.only_failed else g.successes < g.valid)]
        return [g for g in wanted if self._solutions.get(g.position)]

    def replaced(self, outcome: Outcome, group: Group) -> int:
        """The lowest-reward valid sample (the first drawn among equals)."""
        valid = [i for i in group.members if not bool(outcome.rewards[i].isnan())] or group.members
        return min(valid, key=lambda i: (float(outcome.rewards[i]), i))

    def completion(self, outcome: Outcome, group: Group) -> str:
        tokens, _ = outcome.completion(self.replaced(outcome, group))
        sample = self.tokens.decode(tokens)
        return edit_sentences(sample, str(self._solutions[group.position]), keep_overlap=self.keep_overlap)
