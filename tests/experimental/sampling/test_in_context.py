"""ICPO's implicit expert forcing with expert-region reject sampling [44] (``in_context_expert``): the guided round
shows solved examples of the step's other prompts, the correct guided answers come back as forced samples of the
plain prompt with the log-probs they were sampled with, the guided originals leave the groups and the copies are
flagged for ``expert_bonus``; then one training step on the arithmetic demo under the off-policy clip."""

from __future__ import annotations

import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.config import ConfigError, from_dict
from genalign.config.schema import TrainConfig
from genalign.experimental.sampling.in_context import prompt_words
from genalign.experimental.sampling.rounds import rounds_of
from genalign.policies.base import GUIDANCE_KEY
from genalign.sampling import SAMPLE_SOURCES, Candidate
from genalign.trainer import recipe
from tests.experimental.sampling.test_exits import ids, outcome

GEN = torch.Generator()
ROWS = [{"prompt": "1+2\n", "solution": "A:3"}, {"prompt": "3+4\n", "solution": "A:7", GUIDANCE_KEY: {"hint": "+"}},
        {"prompt": [{"role": "user", "content": "5+6\n"}], "solution": "A:11"}, {"prompt": "7+8\n", "solution": None}]  # fmt: skip


def planned(**args):
    rule = SAMPLE_SOURCES.get("in_context_expert")(template="{demos}", example="{prompt}{solution}\n", **args)
    rule.choose([Candidate(p, p + 100, row) for p, row in enumerate(ROWS)], 4, GEN)
    return rule


def test_prompt_words_and_rounds_of_samples():
    assert prompt_words(ROWS[2]) == "5+6\n" and prompt_words(ROWS[0]) == "1+2\n"
    drawn = outcome([(0, ids("A:1"), torch.zeros(4), f) for f in (False, False, False, True, False)])
    assert rounds_of(drawn, {0: 2}).tolist() == [0, 0, 1, -1, 1]


def test_the_guided_round_shows_solved_examples_of_the_other_prompts():
    rule = planned(demos=2, guided=3)
    drawn = outcome([(p, ids("A:1"), torch.zeros(4), False) for p in (0, 0, 1, 1, 2, 2, 3, 3)], step=2)
    drawn.round = 0
    assert rule.more_samples(drawn) == {0: 3, 1: 3, 2: 3, 3: 3}
    guidance = rule.round_guidance(drawn)
    examples = {p: f"{prompt_words(ROWS[p])}{ROWS[p]['solution']}\n" for p in (0, 1, 2)}  # prompt 3 has none
    for position, keys in guidance.items():
        shown = [p for p in (0, 1, 2) if p != position and examples[p] in keys["hint"]]
        assert len(shown) == 2 and keys["hint"] == ("+" if position == 1 else "") + "".join(examples[p] for p in shown)
    assert set(guidance) == {0, 1, 2, 3}
    assert rule.round_guidance(drawn) == guidance  # a function of the step and the prompts: every process agrees
    one = planned(demos=5)
    assert one.demonstrations(3, 2, [0, 1, 2, 3]) == [0, 1, 2]  # all the others that have a solution
    lonely = outcome([(0, ids("A:1"), torch.zeros(4), False)], step=2)
    lonely.round = 0
    assert planned().more_samples(lonely) == {}  # no other prompt to learn from: no guided round


def test_correct_guided_answers_replace_the_guided_originals_as_answers_to_the_plain_prompt():
    rule = planned(demos=1, guided=2, threshold=0.5)
    first = outcome([(p, ids("A:9"), torch.zeros(4), False) for p in (0, 0, 1, 1)], step=2)
    first.round = 0
    rule.more_samples(first)  # records the first round: two samples per prompt
    good, bad, other = ids("A:3"), ids("A:4"), ids("A:7")
    logp = torch.tensor([-0.1, -0.2, -0.3, -0.4])
    guided = [(0, good, logp, False), (0, bad, logp, False), (1, other, logp * 2, False), (1, bad, logp, False)]
    drawn = outcome([(p, ids("A:9"), torch.zeros(4), False) for p in (0, 0, 1, 1)] + guided,
                    rewards=[0.0] * 4 + [1.0, 0.0, 0.5, math.nan], step=2)  # fmt: skip
    forced = rule.forced_samples(drawn)
    assert [(f.position, f.tokens.tolist(), f.behaviour_logp.tolist(), f.kind) for f in forced] == [
        (0, good.tolist(), logp.tolist(), "expert"),
        (1, other.tolist(), (logp * 2).tolist(), "expert"),
    ]
    # the copies come back (after another rule's forced sample that happens to repeat an answer)
    copies = [(0, ids("A:9"), torch.zeros(4), True), (0, good, logp, True), (1, other, logp * 2, True)]
    after = outcome(drawn_samples(drawn) + copies, rewards=[0.0] * 4 + [1.0, 0.0, 0.5, math.nan, 0.0, 1.0, 0.5])
    decision = rule.after_rewards(after)
    assert decision.keep.tolist() == [True] * 4 + [False] * 4 + [True] * 3
    assert decision.signals["expert_guided"].tolist() == [False] * 9 + [True, True]
    assert decision.stats == {"guided": 4.0, "accepted": 2.0, "acceptance": 0.5}


def drawn_samples(drawn) -> list:
    lengths = drawn.lengths.long().tolist()
    return [(int(drawn.positions[i]), drawn.tokens[i, : lengths[i]], drawn.behaviour_logp[i, : lengths[i]],
             bool(drawn.forced[i])) for i in range(len(drawn))]  # fmt: skip


def test_the_rule_needs_the_off_policy_clip():
    base = {
        "policy": {"family": "causal_lm", "model": "builtin:arith-lm", "max_new_tokens": 4},
        "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 16, "digits": 1}}},
        "rewards": [{"fn": "exact_match"}],
    }
    with pytest.raises(ConfigError, match=r"set algorithm\.clip = off_policy"):
        from_dict(TrainConfig, {**base, "algorithm": {"sample_sources": ["in_context_expert"]}})
    with pytest.raises(ValueError, match="template = 'x'"):
        SAMPLE_SOURCES.get("in_context_expert")(template="x")


def test_guided_answers_train_as_off_policy_answers_to_the_plain_prompt(tmp_path, monkeypatch):
    seen = {}
    real = recipe.run_update

    def spy(policy, rollout, batch, *args, **kwargs):
        seen.update(rollout=rollout, batch=batch)
        return real(policy, rollout, batch, *args, **kwargs)

    monkeypatch.setattr(recipe, "run_update", spy)
    config = from_dict(TrainConfig, {
        "policy": {"family": "causal_lm", "model": "builtin:arith-lm", "max_prompt_tokens": 16, "max_new_tokens": 5},
        "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 8, "seed": 0, "digits": 2}}},
        "rewards": [{"fn": "exact_match", "name": "accuracy"}],
        "algorithm": {"group_size": 4, "prompts_per_step": 4, "micro_batch_size": 32, "minibatches": 2,
                      "clip": "off_policy", "reward_shaping": [{"name": "expert_bonus", "bonus": 0.5}],
                      "sample_sources": [{"name": "in_context_expert", "demos": 2, "guided": 4,
                                          "solution_column": "answer", "template": "{demos}",
                                          "example": " {prompt}{solution}", "threshold": 0.0}]},
        "eval": {"at_start": False, "every": 0},
        "run": {"output_dir": str(tmp_path / "run"), "max_steps": 4, "progress_bar": False, "num_threads": 1},
    })  # fmt: skip
    run, _ = recipe.start_run(config)
    record, _, _ = recipe.training_step(run, 1)  # progress 1/4
    rollout, batch = seen["rollout"], seen["batch"]
    expert = rollout.structure["expert_guided"]  # [N]
    assert record["sampling/in_context_expert/accepted"] == 16.0 == float(expert.sum())  # threshold 0 keeps all
    assert record["num_samples"] == 4 * 4 + 16 and len(rollout) == 32
    assert all(GUIDANCE_KEY not in row for row in rollout.rows)  # trained as answers to the plain prompts
    plain = rollout.per_sample["prompt_mask"].sum(1)  # [N] prompt lengths
    for group in rollout.group_ids.unique():
        members = rollout.group_ids == group
        assert plain[members].unique().numel() == 1  # the copies have their group's plain prompt
    # the behaviour log-probs are those under the demonstrations: the re-scored old log-probs differ from them
    mask = rollout.action_mask[expert] > 0
    assert (batch["behaviour_logp"][expert][mask] - batch["old_logp"][expert][mask]).abs().max() > 1e-3
    # the annealed bonus at progress 1/4: 0.5·(1 − 1/4) on the guided copies only
    torch.testing.assert_close(batch["combined_reward"], batch["rewards"][:, 0] + 0.375 * expert.float())
    assert record["reward_shaping/expert_bonus"] == pytest.approx(0.375)
