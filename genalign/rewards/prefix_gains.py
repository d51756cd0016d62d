"""The token judge ``prefix_reward_gains``: an off-the-shelf sequence reward scored on every word prefix of a
completion, its gains redistributed over the words (RED [247]).

Registered into :data:`~genalign.rewards.token_judges.TOKEN_JUDGES`; the rule that reads its judgement is
``judged_token_rewards``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from genalign.rewards.base import reward_factory
from genalign.rewards.inputs import prompt_text
from genalign.rewards.runner import call_reward
from genalign.rewards.token_judges import WORD, Span, TokenJudge, register_token_judge

#: row keys that are not reward columns (the prompt is passed on its own; guidance is training-only)
NOT_COLUMNS = ("prompt", "guidance")


def word_prefixes(text: str) -> tuple[list[tuple[int, int]], list[str]]:
    """The words of ``text`` (``(start, end)``, whitespace-separated) and the prefixes a reward scores: the empty
    text, then ``text`` cut after each word (the last prefix is ``text`` itself, trailing whitespace included)."""
    words = [match.span() for match in WORD.finditer(text)]
    cuts = [end for _, end in words[:-1]] + ([len(text)] if words else [])
    return words, ["", *(text[:cut] for cut in cuts)]


def redistributed_gains(scores: Sequence[float], words: Sequence[tuple[int, int]]) -> list[Span]:
    """One span per word with the reward gain ``R(prefix through the word) − R(prefix before it)``; ``scores``
    ``[W + 1]`` (the empty prefix first). A word whose gain is not a number (a reward returning None) is left out."""
    spans = []
    for k, (start, end) in enumerate(words):
        gain = scores[k + 1] - scores[k]
        if gain == gain and gain != 0:  # not NaN, not zero
            spans.append((start, end, float(gain)))
    return spans


@register_token_judge("prefix_reward_gains", source="[247]")
def prefix_reward_gains(*, reward: str, args: Mapping[str, Any] | None = None, scale: float = 1.0) -> TokenJudge:
    """Scores every word prefix of each completion with the sequence reward ``reward`` (a registered reward name or
    import path, with its ``args``: e.g. a reward model) and gives every word ``scale·(R(≤ word) − R(< word))``: the
    reward redistributed over the words (the gains add up to ``R(completion) − R(empty)``). Positive and negative
    values: this judge is exactly as forgeable as the reward it reads."""
    if not scale > 0:
        raise ValueError(f"prefix_reward_gains: scale={scale!r} must be > 0")
    fn = reward_factory(reward)(**dict(args or {}))

    def judge(completions: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> list[list[Span]]:
        jobs = [word_prefixes(text) for text in completions]
        prompts, prefixes, columns = [], [], {}
        keys = sorted({key for row in rows for key in row if key not in NOT_COLUMNS})
        for row, (_, texts) in zip(rows, jobs, strict=True):
            prompts += [prompt_text(dict(row))] * len(texts)
            prefixes += texts
            for key in keys:
                columns.setdefault(key, []).extend([row.get(key)] * len(texts))
        scores, _ = call_reward(f"prefix_reward_gains({reward})", fn, prompts, prefixes, columns)
        result, start = [], 0
        for words, texts in jobs:
            values = [scale * value for value in scores[start : start + len(texts)]]
            result.append(redistributed_gains(values, words))
            start += len(texts)
        return result

    return judge


__all__ = ["prefix_reward_gains", "redistributed_gains", "word_prefixes"]
