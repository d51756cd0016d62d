"""Rewards of a generated list of items against a row's relevant items (generative retrieval and reranking, F-GRPO
[303]): the order-invariant ``list_coverage`` of the candidate set and the position-aware ``ranking_utility`` (NDCG)
of the ranked list.

F-GRPO's policy writes, in one completion, a candidate subset of the pool and then its ranking; each phase gets its
own reward and its own group advantage. With ``marker`` set, a reward reads only its part of the completion (``part:
before`` the first marker: the candidates; ``after``: the ranking), which matches the text blocks of
``policy.probes.block_markers: [<marker>]`` that the ``role_segments`` credit rule and the ``phase`` ratio level
read. Items are the completion's text split at ``separator`` (a regular expression), stripped, empty ones dropped;
repeats count once (at their first position). The relevant items come from the dataset column ``column``: a list of
items, a ``{item: gain}`` mapping (graded relevance, for the utility), a string split like the completion, or one
number (a single relevant item).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from genalign.rewards.base import register_reward
from genalign.rewards.inputs import answer_text, check_column, completion_text

Part = Literal["whole", "before", "after"]


class _ListReward:
    """What both rewards share: reading the listed items of a completion and the relevant items of its row."""

    name = ""

    def __init__(
        self,
        *,
        column: str = "relevant",
        separator: str = r"[,\n]",
        marker: str | None = None,
        part: Part = "whole",
        lowercase: bool = True,
    ) -> None:
        if part not in ("whole", "before", "after"):
            raise ValueError(f"reward {self.name!r}: part={part!r} must be 'whole', 'before' or 'after'.")
        if (part == "whole") != (marker is None):
            raise ValueError(
                f"reward {self.name!r}: part={part!r} with marker={marker!r}; set a marker with part 'before' or "
                "'after' (the candidates / the ranking), or neither for the whole completion."
            )
        try:
            self.separator = re.compile(separator)
        except re.error as error:
            raise ValueError(
                f"reward {self.name!r}: separator={separator!r} is not a regular expression ({error})."
            ) from None
        self.column, self.marker, self.part, self.lowercase = column, marker, part, lowercase

    def items(self, text: str) -> list[str]:
        """The distinct items of ``text`` in order of first appearance."""
        seen: dict[str, None] = {}
        for piece in self.separator.split(text):
            item = piece.strip().lower() if self.lowercase else piece.strip()
            if item:
                seen.setdefault(item, None)
        return list(seen)

    def listed(self, completion: Any) -> list[str] | None:
        """The items of ``completion``'s part; None when the marker is configured and absent (not applicable)."""
        text = completion_text(completion)
        if self.marker is None:
            return self.items(text)
        before, found, after = text.partition(self.marker)
        if not found:
            return None
        return self.items(before if self.part == "before" else after)

    def gains(self, value: Any) -> dict[str, float] | None:
        """``{item: gain}`` of a row's relevant items (gain 1 unless graded); None when the row has none."""
        if value is None:
            return None
        if isinstance(value, Mapping):
            pairs = [(str(item), float(gain)) for item, gain in value.items()]
        elif isinstance(value, str):
            pairs = [(item, 1.0) for item in self.items(value)]
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            pairs = [(answer_text(value) or "", 1.0)]  # one relevant item, e.g. a numeric answer
        elif isinstance(value, Sequence):
            pairs = [(str(item).strip(), 1.0) for item in value]
        else:
            raise ValueError(
                f"reward {self.name!r}: column {self.column!r} holds {value!r}; give a list of items, an "
                "{item: gain} mapping, a separated string or one number."
            )
        gains = {(item.lower() if self.lowercase else item): gain for item, gain in pairs if gain > 0}
        return gains or None

    def __call__(self, prompts: Sequence[str], completions: Sequence[Any], **columns: Any) -> list[float | None]:
        relevant = check_column(self.column, columns.get(self.column), len(completions), self.name)
        scores: list[float | None] = []
        for completion, value in zip(completions, relevant, strict=True):
            gains, listed = self.gains(value), self.listed(completion)
            scores.append(None if gains is None else 0.0 if listed is None else self.score(listed, gains))
        return scores

    def score(self, listed: list[str], gains: dict[str, float]) -> float:
        raise NotImplementedError


@register_reward("list_coverage", source="[303] F-GRPO (order-invariant coverage reward)")
class ListCoverage(_ListReward):
    """Order-invariant coverage of the relevant items by the listed ones: ``|L ∩ R| / max(|R|, |L|)`` by default, so
    that listing the whole pool does not pay (plain recall would reward it with 1 under RL), or the recall
    ``|L ∩ R| / |R|`` with ``penalize_extra: false`` (for lists whose length the task fixes).

    Reading chosen: the abstract names an "order-invariant coverage reward" without its form; genalign takes the
    recall of the relevant set, optionally divided by the longer of the two lists (a missing marker scores 0, a row
    without relevant items is not applicable). Args: see the module docstring; ``penalize_extra``.
    """

    name = "list_coverage"

    def __init__(
        self,
        *,
        column: str = "relevant",
        separator: str = r"[,\n]",
        marker: str | None = None,
        part: Part = "whole",
        lowercase: bool = True,
        penalize_extra: bool = True,
    ) -> None:
        super().__init__(column=column, separator=separator, marker=marker, part=part, lowercase=lowercase)
        self.penalize_extra = penalize_extra

    def score(self, listed: list[str], gains: dict[str, float]) -> float:
        hits = sum(1 for item in listed if item in gains)
        return hits / (max(len(gains), len(listed)) if self.penalize_extra else len(gains))


@register_reward("ranking_utility", source="[303] F-GRPO (position-aware utility reward)")
class RankingUtility(_ListReward):
    """Position-aware utility of the ranked list: NDCG@k, ``DCG / IDCG`` with ``DCG = Σ_i g(item_i) / log2(i + 2)``
    over the first ``k`` listed items (``i`` from 0) and ``IDCG`` the DCG of the relevant items in the best order.

    Reading chosen: the abstract names a "position-aware utility reward"; genalign takes NDCG (gains 1, or the graded
    gains of a ``{item: gain}`` column). Args: see the module docstring; ``k`` (None: the whole list).
    """

    name = "ranking_utility"

    def __init__(
        self,
        *,
        column: str = "relevant",
        separator: str = r"[,\n]",
        marker: str | None = None,
        part: Part = "whole",
        lowercase: bool = True,
        k: int | None = None,
    ) -> None:
        super().__init__(column=column, separator=separator, marker=marker, part=part, lowercase=lowercase)
        if k is not None and k < 1:
            raise ValueError(f"reward 'ranking_utility': k={k} must be >= 1 or null (the whole list).")
        self.k = k

    def score(self, listed: list[str], gains: dict[str, float]) -> float:
        cut = len(listed) if self.k is None else self.k
        dcg = sum(gains.get(item, 0.0) / math.log2(i + 2) for i, item in enumerate(listed[:cut]))
        best = sorted(gains.values(), reverse=True)[: self.k if self.k is not None else None]
        ideal = sum(gain / math.log2(i + 2) for i, gain in enumerate(best))
        return dcg / ideal


__all__ = ["ListCoverage", "RankingUtility"]
