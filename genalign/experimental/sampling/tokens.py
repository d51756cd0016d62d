"""The policy's tokenizer as the sample-source rules that read or write token ids use it: a rule sees the samples'
action ids and the rows, never the policy, so a rule that decodes a sample (iGRPO's best draft [100]), encodes a cue
(an exit cue [14], [114]) or finds where reasoning steps end is given the tokenizer's name (``tokenizer``: the same
value as ``policy.model``, or ``policy.tokenizer`` when that is set) and loads it on first use, as
:class:`genalign.experimental.sampling.references.EdgeGEC` does.

Steps are the segments of :mod:`genalign.policies.lm.segments` (a token whose text holds a newline, or a sentence end
followed by whitespace, closes a step; a step marker opens one), so a rule's cut points and the ``segment_ids`` signal
agree when the rule and ``policy.probes.step_markers`` list the same markers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor


class PolicyTokens:
    """The tokenizer named ``name`` (loaded lazily) with the few operations the rules need.

    Args:
        name: the policy's tokenizer: a model folder, a hub id or ``builtin:<name>`` (its location is checked here,
            at config load; the tokenizer loads on first use).
        rule: the rule's registered name, for messages.
        step_markers: token texts that open a new step (:class:`~genalign.policies.lm.segments.SegmentBoundaries`).
    """

    def __init__(self, name: str, rule: str, step_markers: Sequence[str] = ()) -> None:
        from genalign.assets import model_location

        if not isinstance(name, str) or not name:
            raise ValueError(
                f"tokenizer = {name!r}: sample source {rule!r} reads and writes token ids, so it must name the "
                "policy's tokenizer (the same value as policy.model, or policy.tokenizer when set)"
            )
        try:
            self.location = model_location(name, field=f"algorithm.sample_sources[{rule}].tokenizer", marker=None)
        except OSError as err:  # a missing folder or built-in, or a hub id not cached while offline
            raise ValueError(f"tokenizer = {name!r}: {err}") from None
        self.name, self.rule, self.step_markers = name, rule, tuple(step_markers)
        self._tokenizer: Any = None
        self._boundaries: Any = None

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            from genalign.policies.lm.tokenizer import load_tokenizer

            self._tokenizer = load_tokenizer(self.location)
        return self._tokenizer

    def decode(self, ids: Tensor | list[int]) -> str:
        """The text of ``ids`` (special tokens left out)."""
        return self.tokenizer.decode(torch.as_tensor(ids).tolist(), skip_special_tokens=True)

    def encode(self, text: str) -> list[int]:
        """The ids of ``text`` tokenized on its own (no special tokens)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def step_ends(self, ids: Tensor) -> Tensor:
        """``[T]`` bool: token ``t`` of ``ids`` ``[T]`` closes a reasoning step (module docstring): it is a boundary
        token, or token ``t + 1`` is a step marker."""
        if self._boundaries is None:
            from genalign.policies.lm.segments import SegmentBoundaries

            self._boundaries = SegmentBoundaries(self.tokenizer, self.step_markers)
        table = self._boundaries.table()  # [V]
        inside = ids < table.shape[0]  # [T] ids outside the vocabulary never close a step
        clamped = ids.clamp(0, table.shape[0] - 1)  # [T]
        ends = table[clamped] & inside  # [T]
        if self.step_markers:
            opens = self._boundaries.opens()[clamped] & inside  # [T]
            ends[:-1] |= opens[1:]
        return ends

    def text_before(self, ids: Tensor, marker: str | None) -> int:
        """How many leading tokens of ``ids`` ``[T]`` come before ``marker``: the most tokens whose decoded text ends
        at or before the marker's first character (all of them without a marker, or when the text has none)."""
        if not marker:
            return ids.shape[0]
        where = self.decode(ids).find(marker)
        if where < 0:
            return ids.shape[0]
        low, high = 0, ids.shape[0]  # the decoded length grows with the prefix: the largest t with len <= where
        while low < high:
            middle = (low + high + 1) // 2
            if len(self.decode(ids[:middle])) <= where:
                low = middle
            else:
                high = middle - 1
        return low


def cut_generator(step: int, index: int, salt: int = 0) -> torch.Generator:
    """A generator for random cut points of data row ``index`` at ``step``: a function of its arguments only, so every
    process and a resumed run draw the same cuts."""
    return torch.Generator().manual_seed((step * 1_000_003 + index * 7_919 + salt * 104_729 + 29) % 2**63)


def exit_start(tokens: Tensor, logp: Tensor, cut: int, cue: list[int]) -> tuple[Tensor, Tensor]:
    """The start of a forced continuation that exits a path after ``cut`` actions: ``tokens[:cut] ⊕ cue`` ``[cut +
    C]`` long and its behaviour log-probs ``logp[:cut] ⊕ NaN`` (the cue is no policy's sample: the current policy
    scores it)."""
    ids = torch.cat([tokens[:cut].long(), torch.tensor(cue, dtype=torch.long)])  # [cut + C]
    behaviour = torch.cat([logp[:cut].float(), torch.full((len(cue),), float("nan"))])  # [cut + C]
    return ids, behaviour
