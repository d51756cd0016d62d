"""Joining rollouts along the sample axis (extra sampling rounds, forced samples): padding sides, structure, info."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms.structure import PrefixTree, cat_structures, pad_cat
from genalign.policies.base import Rollout


def lm_like(prompt_lengths: list[int], completion_lengths: list[int], group: int, counts=None) -> Rollout:
    """A rollout shaped like the causal LM's: left-padded prompts, right-padded completions."""
    n, width, steps = len(prompt_lengths), max(prompt_lengths), max(completion_lengths)
    prompt_mask = torch.zeros(n, width, dtype=torch.long)
    completion_mask = torch.zeros(n, steps)
    for i, (p, c) in enumerate(zip(prompt_lengths, completion_lengths)):
        prompt_mask[i, width - p :] = 1
        completion_mask[i, :c] = 1
    return Rollout(
        rows=[{"prompt": f"p{group}"}] * n,
        outputs=[f"o{group}{i}" for i in range(n)],
        group_ids=torch.full((n,), group),
        old_logp=-completion_mask,
        action_mask=completion_mask,
        structure=dict(truncated=torch.zeros(n, dtype=torch.bool), action_ids=completion_mask.long() * 7),
        per_sample={"prompt_mask": prompt_mask, "completion_mask": completion_mask, "note": ["x"] * n},
        info={"guidance_scale": 4.5, "engine": "static"},
        counts={"completion_tokens": int(completion_mask.sum()), **(counts or {})},
        left_padded=frozenset({"prompt_mask"}),
    )


def test_pad_cat_pads_the_second_axis_on_the_requested_side():
    a, b = torch.ones(1, 2), torch.full((2, 3), 2.0)
    assert pad_cat([a, b]).tolist() == [[1, 1, 0], [2, 2, 2], [2, 2, 2]]
    assert pad_cat([a, b], side="left").tolist() == [[0, 1, 1], [2, 2, 2], [2, 2, 2]]
    assert pad_cat([torch.tensor([1]), torch.tensor([2, 3])]).tolist() == [1, 2, 3]


def test_pad_cat_fills_with_the_last_entry_or_nan_when_asked():
    a, b = torch.tensor([[0, 1]]), torch.tensor([[0, 0, 1, 2]])
    assert pad_cat([a, b], fill="last").tolist() == [[0, 1, 1, 1], [0, 0, 1, 2]]
    assert pad_cat([a, b], side="left", fill="last").tolist() == [[0, 0, 0, 1], [0, 0, 1, 2]]
    joined = pad_cat([torch.tensor([[0.5]]), torch.tensor([[1.0, 2.0]])], fill="nan")
    assert joined[0, 0] == 0.5 and joined[0, 1].isnan() and joined[1].tolist() == [1.0, 2.0]


def test_multi_turn_structure_joins_as_its_signals_declare():
    """Turn ids stay non-decreasing (each row's last turn repeated, so the joined value passes its check) and missing
    turn rewards are NaN, not a reward of 0."""
    short = {"turn_ids": torch.tensor([[0, 0, 1]]), "turn_rewards": torch.tensor([[1.0]])}
    long = {"turn_ids": torch.tensor([[0, 1, 1, 2, 2]]), "turn_rewards": torch.tensor([[0.0, 0.5, 1.0]])}
    joined = cat_structures([short, long], [1, 1])
    assert joined["turn_ids"].tolist() == [[0, 0, 1, 1, 1], [0, 1, 1, 2, 2]]
    assert joined["turn_rewards"][0, 0] == 1.0 and joined["turn_rewards"][0, 1:].isnan().all()
    assert joined["turn_rewards"][1].tolist() == [0.0, 0.5, 1.0]


def test_cat_keeps_left_padded_prompts_aligned_and_right_pads_actions():
    first = lm_like([2, 3], [1, 4], group=0, counts={"turns": 3, "tools/ok": 1})
    second = lm_like([4], [2], group=5, counts={"turns": 2, "tools/bad_json": 4})
    joined = Rollout.cat([first, second])
    assert len(joined) == 3 and joined.group_ids.tolist() == [0, 0, 5]
    assert joined.per_sample["prompt_mask"].tolist() == [[0, 0, 1, 1], [0, 1, 1, 1], [1, 1, 1, 1]]  # left
    assert joined.action_mask.tolist() == [[1, 0, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0]]  # right
    assert joined.old_logp.tolist() == (-joined.action_mask).tolist()
    assert (
        joined.structure.get("action_ids").shape == (3, 4) and joined.structure.get("truncated").tolist() == [False] * 3
    )
    assert joined.per_sample["note"] == ["x"] * 3 and joined.outputs == ["o00", "o01", "o50"]
    assert joined.info == {"guidance_scale": 4.5, "engine": "static"}  # settings kept (a scale is not summed)
    assert joined.counts == {"completion_tokens": 7, "tools/bad_json": 4, "tools/ok": 1, "turns": 5}  # summed by key
    assert joined.left_padded == frozenset({"prompt_mask"})
    assert joined.select([0]).counts == joined.counts  # batch-level, like info
    # selecting the parts back gives the original tensors (up to the padding columns)
    back = joined.select([2])
    assert back.per_sample["prompt_mask"].tolist() == second.per_sample["prompt_mask"].tolist()


def test_empty_parts_are_skipped_and_a_single_part_is_returned_as_it_is():
    part = lm_like([2], [3], group=1)
    assert Rollout.cat([part]) is part
    assert Rollout.cat([part.select(torch.zeros(0, dtype=torch.long)), part]) is part


def test_structure_that_cannot_join_is_an_error_naming_the_field():
    part = lm_like([2], [3], group=1)
    bare = lm_like([2], [3], group=2)
    bare.structure = dict(truncated=torch.zeros(1, dtype=torch.bool))
    with pytest.raises(ValueError, match="action_ids"):
        Rollout.cat([part, bare])
    tree = PrefixTree(node_of_action=torch.zeros(1, 3, dtype=torch.long), depth=torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="prefix tree"):
        cat_structures([{"prefix_tree": tree}] * 2, [1, 1])
