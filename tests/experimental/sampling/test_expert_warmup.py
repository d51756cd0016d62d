"""EGSPO's SFT warm-up [84]: ``expert_warmup`` makes each group of the first steps the row's expert demonstration
alone, flagged ``expert_demo``; ``expert_nll`` is the NLL of the flagged samples (hand-computed values)."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms import REGULARIZERS, StepBatch
from genalign.algorithms.scores import ScoreOutput
from genalign.experimental.regularizers.expert import EXPERT_DEMO
from genalign.experimental.sampling.expert_warmup import ExpertWarmup
from genalign.sampling import Outcome
from genalign.sampling.base import Candidate


def outcome(step: int, forced: list[bool]) -> Outcome:
    positions = torch.tensor([0, 0, 1, 1, 2, 2, 0, 0, 1, 1][: len(forced)])
    n = len(forced)
    return Outcome(positions=positions, indices=positions + 10, rewards=torch.zeros(n, dtype=torch.float64),
                   lengths=torch.ones(n), truncated=None, progress=step / 10, forced=torch.tensor(forced),
                   step=step)  # fmt: skip


def chosen(rule: ExpertWarmup) -> None:
    rows = [{"prompt": "p0", "solution": "s0"}, {"prompt": "p1", "solution": "s1"}, {"prompt": "p2", "solution": ""}]
    rule.choose([Candidate(position=i, index=10 + i, row=row) for i, row in enumerate(rows)], 3, torch.Generator())


def test_warmup_steps_train_the_demonstrations_alone_and_later_steps_are_untouched():
    rule = ExpertWarmup(warmup_steps=2)
    chosen(rule)
    forced = rule.forced_samples(outcome(2, [False] * 6))
    # two copies of the demonstration of each prompt that has one (prompt 2's is empty), as text the policy scores
    assert [(f.position, f.text, f.kind, f.tokens) for f in forced] == [
        (0, "s0", "expert", None), (0, "s0", "expert", None), (1, "s1", "expert", None), (1, "s1", "expert", None)
    ]  # fmt: skip
    flags = [False] * 6 + [True] * 4
    decision = rule.after_rewards(outcome(2, flags))
    assert decision.keep.tolist() == flags  # the sampled completions leave the groups
    assert decision.signals[EXPERT_DEMO].tolist() == flags and decision.stats["demos"] == 4.0
    chosen(rule)
    assert rule.forced_samples(outcome(3, [False] * 6)) == []  # step 3 > warmup_steps: RL
    after = rule.after_rewards(outcome(3, [False] * 6))
    assert after.keep is None and not after.signals[EXPERT_DEMO].any()
    with pytest.raises(ValueError, match="warmup_steps"):
        ExpertWarmup(warmup_steps=0)
    with pytest.raises(ValueError, match="copies"):
        ExpertWarmup(copies=1)


def test_expert_nll_is_the_nll_of_the_flagged_samples_only():
    logp = torch.tensor([[-0.5, -1.0, -2.0], [-0.1, -0.2, -0.3]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    batch = StepBatch(mask=mask, expert_demo=torch.tensor([True, False]))
    loss = REGULARIZERS.get("expert_nll")(ScoreOutput(logp, {}), torch.zeros(2), batch)
    torch.testing.assert_close(loss, torch.tensor([[0.5, 1.0, 0.0], [0.0, 0.0, 0.0]]))
    loss.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-1.0, -1.0, 0.0], [0.0, 0.0, 0.0]]))
