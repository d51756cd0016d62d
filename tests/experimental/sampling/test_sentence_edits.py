"""EditGRPO's sentence-level corrections [146] (sample source ``sentence_edits``): the sentence editor by hand, and
the rule replacing a group's worst sample by its correction, on the chain demo's character tokenizer."""

from __future__ import annotations

import pytest
import torch

from genalign.experimental.sampling.sentence_edits import SentenceEdits, edit_sentences, sentences, word_overlap
from genalign.sampling import Outcome
from genalign.sampling.base import Candidate

REFERENCE = "The heart is normal. No effusion is seen. The lungs are clear."


def test_a_sentence_is_kept_replaced_or_dropped_by_its_overlap_with_the_reference():
    assert sentences("a b. c d!\n\ne f") == ["a b.", "c d!", "e f"]
    assert word_overlap("The heart is normal.", "the heart is large.") == pytest.approx(3 / 5)
    sample = "The heart is normal. A small effusion on the left. Old rib fracture."
    # s1 = r1 (overlap 1): kept; s2 overlaps r1 ("the") and r2 ("effusion") by 1/9 each: replaced by r2, the one
    # not matched yet; s3 overlaps nothing: dropped; r3 was not matched: appended
    assert edit_sentences(sample, REFERENCE) == REFERENCE
    # with a bar of 0.1 the partly right s2 is kept as written (matching r1, the earlier of its two best), so r2 is
    # still missing and appended after it
    kept = edit_sentences(sample, REFERENCE, keep_overlap=0.1)
    assert kept == "The heart is normal. A small effusion on the left. No effusion is seen. The lungs are clear."
    assert edit_sentences("Nothing here", "") == ""


def outcome(texts: list[str], rewards: list[float], tokens, forced: list[bool] | None = None) -> Outcome:
    ids = [tokens.encode(text) for text in texts]
    width = max(len(i) for i in ids)
    padded = torch.zeros(len(ids), width, dtype=torch.long)
    for row, item in enumerate(ids):
        padded[row, : len(item)] = torch.tensor(item)
    n = len(texts)
    return Outcome(positions=torch.zeros(n, dtype=torch.long), indices=torch.full((n,), 5),
                   rewards=torch.tensor(rewards, dtype=torch.float64), lengths=torch.tensor([float(len(i)) for i in ids]),
                   truncated=None, progress=0.5, forced=torch.tensor(forced or [False] * n), tokens=padded,
                   behaviour_logp=torch.zeros(n, width))  # fmt: skip


def chosen(rule: SentenceEdits, report: str) -> None:
    rule.choose([Candidate(position=0, index=5, row={"prompt": "p", "report": report})], 1, torch.Generator())


def test_the_worst_sample_of_a_group_is_replaced_by_its_correction():
    rule = SentenceEdits(tokenizer="builtin:chain-lm", solution_column="report")
    chosen(rule, "1+1=2\n2+2=4\n3+3=6")
    # chain-lm lines have no spaces: a line is one word, kept when it equals a reference line, else dropped
    texts = ["1+1=2\n9+9=1", "1+1=2\n2+2=4\n3+3=6", "5+5=0"]
    (forced,) = rule.forced_samples(outcome(texts, [0.5, 1.0, 0.0], rule.tokens))
    assert forced.position == 0 and forced.kind == "edit" and forced.tokens is None
    assert forced.text == "1+1=2 2+2=4 3+3=6"  # the worst sample "5+5=0" dropped, the reference lines added
    after = outcome([*texts, "1+1=2"], [0.5, 1.0, 0.0, 1.0], rule.tokens, forced=[False, False, False, True])
    decision = rule.after_rewards(after)
    assert decision.keep.tolist() == [True, True, False, True] and decision.stats["inserted"] == 1.0
    # a group without a wrong sample gets nothing; only_failed waits for an all-wrong group
    chosen(rule, "1+1=2")
    assert rule.forced_samples(outcome(["1+1=2"], [1.0], rule.tokens)) == []
    strict = SentenceEdits(tokenizer="builtin:chain-lm", solution_column="report", only_failed=True)
    chosen(strict, "1+1=2")
    assert strict.forced_samples(outcome(texts, [0.5, 1.0, 0.0], strict.tokens)) == []
    with pytest.raises(ValueError, match="keep_overlap"):
        SentenceEdits(tokenizer="builtin:chain-lm", keep_overlap=0.0)
