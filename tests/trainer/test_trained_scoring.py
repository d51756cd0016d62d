"""``algorithm.score_only_trained`` (NAT [220], S-GRPO [312]): the update scores each completion only up to its last
trained token, the head runs on the trained tokens only, and the loss and its gradient equal those of the full pass."""

from __future__ import annotations

import pytest
import torch

from genalign.algorithms import LossPlan, ScoreRequest, StepBatch
from genalign.config import ConfigError
from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy
from genalign.policies.lm.trained_actions import restrict_to_trained, trained_width
from genalign.registry import Option
from genalign.trainer.trained_scoring import score_trained, scored_feature_means, trained_actions
from tests.algorithms.arith_config import arith_lm_config


@pytest.fixture(scope="module")
def policy_and_rollout():
    torch.manual_seed(0)
    policy = build_policy(CausalLMPolicyConfig(model="builtin:arith-lm", max_new_tokens=6, use_chat_template=False))
    rows = [{"prompt": "12+7="}, {"prompt": "12+7="}, {"prompt": "3+45="}, {"prompt": "3+45="}]
    completions = ["12345", "12", "98765", "4321"]  # forced: known lengths (each + the end token)
    rollout = policy.force(rows, completions, [None] * 4)
    return policy, rollout


def test_trained_actions_are_real_actions_with_a_non_zero_advantage():
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    advantages = torch.tensor([[0.5, 0.0, 2.0, 7.0], [0.0, 0.0, 0.0, 0.0]])
    assert trained_actions(advantages, mask).tolist() == [[True, False, True, False], [False, False, False, False]]
    assert trained_actions(torch.tensor([1.0, 0.0]), mask).tolist() == [[True, True, True, False], [False] * 4]
    assert trained_width(trained_actions(advantages, mask)) == 3  # columns 0..2
    assert trained_width(torch.zeros(2, 4, dtype=torch.bool)) == 1  # one cheap column when nothing is trained


def prefix_advantages(rollout, cuts: list[int]) -> torch.Tensor:
    """``[n, T]`` advantages 1, −1, 1, ... per sample on its first ``cuts[i]`` actions (RPC's kept prefix), 0 after."""
    n, steps = rollout.action_mask.shape
    signs = torch.tensor([1.0, -1.0] * n)[:n, None]
    keep = torch.arange(steps)[None, :] < torch.tensor(cuts)[:, None]
    return torch.where(keep, signs.expand(n, steps), 0.0) * rollout.action_mask


def test_the_cut_rollout_ends_at_the_last_trained_token_and_scores_only_trained_tokens(policy_and_rollout):
    policy, rollout = policy_and_rollout
    assert rollout.action_mask.sum(1).tolist() == [6.0, 3.0, 6.0, 5.0]
    advantages = prefix_advantages(rollout, [2, 1, 3, 0])
    advantages[0, 0] = 0.0  # a dropped token before a kept one stays in the context, unscored
    trained = trained_actions(advantages, rollout.action_mask)
    cut = restrict_to_trained(rollout, trained)
    assert cut.num_actions == 3 and cut.per_sample["completion_ids"].shape[1] == 3
    assert cut.action_mask.bool().tolist() == trained[:, :3].tolist()
    assert torch.equal(cut.per_sample["completion_attention"], rollout.per_sample["completion_mask"][:, :3])
    widths = []
    handle = policy.model.register_forward_pre_hook(lambda _m, _a, kw: widths.append(kw["input_ids"].shape[1]),
                                                    with_kwargs=True)  # fmt: skip
    try:
        with torch.no_grad():
            full = policy.score(rollout).logp
            part = score_trained(policy, rollout, advantages, ScoreRequest(), rollout.old_logp).logp
    finally:
        handle.remove()
    assert widths[1] == widths[0] - (rollout.per_sample["completion_mask"].any(0).sum() - 3)  # the tail is not run
    torch.testing.assert_close(part[trained], full[trained], rtol=0, atol=1e-5)  # causal: same trained log-probs
    assert torch.equal(part[~trained], rollout.old_logp[~trained])  # the filler: ratio exactly 1


def loss_gradient(policy, rollout, advantages, *, only_trained: bool) -> list[torch.Tensor]:
    plan = LossPlan.build(objective=Option("clipped_ratio"), aggregation=Option("seq_mean_token_mean"))
    batch = StepBatch(advantages=advantages, mask=rollout.action_mask, old_logp=rollout.old_logp - 0.05,
                      group_ids=rollout.group_ids)  # fmt: skip
    policy.model.zero_grad(set_to_none=True)
    request = plan.score_request(policy.capabilities.signals)
    if only_trained:
        out = score_trained(policy, rollout, advantages, request, batch["old_logp"])
    else:
        out = policy.score(rollout, request)
    normalizer = plan.normalizer(rollout.action_mask, advantages)
    loss, _ = plan(out, batch, normalizer)
    loss.backward()
    return [p.grad.clone() for p in policy.model.parameters() if p.grad is not None]


def test_the_loss_gradient_equals_the_full_pass_gradient(policy_and_rollout):
    """The normaliser counts every real token (Horvitz–Thompson); only the work on untrained tokens disappears."""
    policy, rollout = policy_and_rollout
    advantages = prefix_advantages(rollout, [2, 1, 3, 2])
    full = loss_gradient(policy, rollout, advantages, only_trained=False)
    part = loss_gradient(policy, rollout, advantages, only_trained=True)
    assert len(full) == len(part) > 0
    for a, b in zip(part, full, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_a_micro_batch_with_nothing_trained_backpropagates_zero(policy_and_rollout):
    policy, rollout = policy_and_rollout
    grads = loss_gradient(policy, rollout, torch.zeros_like(rollout.action_mask), only_trained=True)
    assert all(float(g.abs().max()) == 0.0 for g in grads)


def test_config_accepts_nat_with_trained_scoring_and_refuses_terms_on_untrained_actions():
    nat = [{"name": "token_subsample", "scheme": "prefix"}]
    assert arith_lm_config(credit=nat, score_only_trained=True).algorithm.score_only_trained
    with pytest.raises(ConfigError, match="kl_coef"):
        arith_lm_config(credit=nat, score_only_trained=True, kl_coef=0.1)
    arith_lm_config(credit=nat, score_only_trained=True, kl_coef=0.1, kl_placement="reward")  # a KL in the reward
    with pytest.raises(ConfigError, match="entropy_coef"):
        arith_lm_config(score_only_trained=True, entropy_coef=0.01)
    with pytest.raises(ConfigError, match="ratio_level = 'sequence'"):
        arith_lm_config(score_only_trained=True, ratio_level="sequence")
    with pytest.raises(ConfigError, match="entropy_adaptive"):
        arith_lm_config(score_only_trained=True, clip="entropy_adaptive")


def test_logged_entropy_is_the_mean_over_the_scored_actions():
    mask = torch.ones(2, 4)
    advantages = torch.tensor([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])  # 2 of 8 actions scored
    metrics = scored_feature_means({"entropy": torch.tensor(0.25), "clip_frac": 0.5}, advantages, mask)
    assert float(metrics["entropy"]) == 1.0 and metrics["clip_frac"] == 0.5  # 0.25·8/2


def test_a_family_that_cannot_cut_its_scoring_pass_is_refused_at_config_load():
    from genalign.config import from_dict
    from genalign.config.schema import TrainConfig

    data = {
        "policy": {"family": "flow", "model": "some/pipeline"},
        "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 8}}},
        "rewards": [{"fn": "exact_match"}],
        "algorithm": {"group_size": 4, "prompts_per_step": 2, "score_only_trained": True},
    }
    with pytest.raises(ConfigError, match=r"policy\.family = 'flow'.*score_only_trained=false"):
        from_dict(TrainConfig, data)
    assert CausalLMPolicyConfig().capabilities().trained_action_scoring
