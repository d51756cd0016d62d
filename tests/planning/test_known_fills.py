"""Constant fills followed on the meta device: a traced model may branch on them and index with masks made of them
(HunyuanVideo 1.5's transformer does both), and a value the planner cannot know is an error naming the problem."""

import pytest
import torch

from genalign.planning.known_fills import KnownFills
from genalign.planning.tracing import trace_peak

META = torch.device("meta")


def test_a_branch_on_constant_inputs_takes_the_value_they_hold():
    with KnownFills():
        zeros = torch.zeros(2, 729, 12, device=META)
        assert bool(torch.all(zeros == 0)) is True
        assert bool(torch.all(zeros.to(torch.bfloat16) == 1)) is False
        assert bool(torch.any(zeros[:, :3] + 2 > 1)) is True  # a view keeps the value; 0 + 2 > 1
        assert torch.full((3,), 2.5, device=META).sum(0).shape == ()  # reductions other than all / any: shapes only


def test_boolean_indexing_with_a_constant_mask_selects_all_or_nothing():
    with KnownFills():
        tokens = torch.zeros(2, 8, 16, device=META)
        valid = torch.ones(2, 8, dtype=torch.long, device=META).bool()
        invalid = ~valid
        rows = [torch.cat([text[mask], text[~mask]]) for text, mask in zip(tokens, invalid, strict=True)]
        assert [r.shape for r in rows] == [(8, 16), (8, 16)]
        assert tokens[0][valid[0]].shape == (8, 16) and tokens[0][invalid[0]].shape == (0, 16)
        assert torch.nonzero(valid).shape == (16, 2)
        stacked = torch.stack([valid[0], valid[1]])  # both true: still known
        assert tokens[stacked].shape == (16, 16)


def test_a_partial_write_forgets_the_value_and_unknown_values_are_errors():
    with KnownFills():
        mask = torch.zeros(4, dtype=torch.bool, device=META)
        mask[:2] = True  # a part of the storage: no longer one value
        with pytest.raises(RuntimeError, match=r"Tensor.item\(\) on a meta tensor whose value the planner"):
            bool(mask.all())
        with pytest.raises(RuntimeError, match=r"boolean indexing with a meta mask of shape \(4,\)"):
            torch.zeros(4, device=META)[mask]
        mask.fill_(False)  # the whole storage: known again
        assert torch.zeros(4, device=META)[mask].shape == (0,)


def test_traces_follow_constant_fills_and_count_the_selected_tokens():
    """``trace_peak`` runs under the mode: a forward that gathers the tokens a constant mask selects keeps, for
    backward, the gathered ``[100, 64]`` float32 tokens (25,600 bytes) when all are selected, none when none are."""

    def forward(selected: bool):
        tokens = torch.zeros(1, 100, 64, device=META, requires_grad=True)
        mask = torch.full((1, 100), selected, device=META)
        picked = tokens[0][mask[0]] if torch.all(mask == selected) else tokens[0]  # [100 or 0, 64]
        return (picked * picked).sum()

    every, none = trace_peak(lambda: forward(True)), trace_peak(lambda: forward(False))
    assert every.kept - none.kept == 100 * 64 * 4
