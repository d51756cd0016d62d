"""The diffusion-LM policy with a trainable decoding policy: Co-GRPO [179] (count schedule trained jointly with the
model) and SAS [118] (order head against a frozen denoiser): action axis, exact re-scoring, gradients, KL to the
initial decoding policy, checkpoints, inference decisions and config errors. Uses the bundled demo model."""

from __future__ import annotations

import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.policies.base import ScoreRequest
from genalign.policies.dlm.likelihood import LIKELIHOOD_PROXIES
from genalign.policies.dlm.policy import DiffusionLMPolicyConfig, build_policy
from genalign.policies.dlm.trained import DECODING_FILE

ROWS = [{"prompt": "12+34=", "answer": "46"}, {"prompt": "5+6=", "answer": "11"}]


def make(**overrides):
    base = {"model": "builtin:arith-dlm", "gen_length": 4, "block_length": 4, "steps": 2, "seed": 0}
    return build_policy(DiffusionLMPolicyConfig(**(base | overrides)))


@pytest.fixture(scope="module")
def co_grpo():
    policy = make(decoding_policy="count_schedule", likelihood_proxy={"name": "coupled", "level": "sequence"})
    return policy, policy.rollout(ROWS, 3)


@pytest.fixture(scope="module")
def sas():
    policy = make(decoding_policy="order_head", freeze_denoiser=True, likelihood_proxy="trace")
    return policy, policy.rollout(ROWS, 3)


def test_co_grpo_appends_one_action_per_decoding_step_after_the_proxy(co_grpo):
    policy, rollout = co_grpo
    assert rollout.old_logp.shape == (6, 1 + 2)  # coupled sequence term, then the 2 steps
    assert rollout.action_mask[:, 0].tolist() == [1.0] * 6
    assert rollout.action_mask[:, 1:].tolist() == [[1.0, 0.0]] * 6  # step 1 commits what is left
    counts = rollout.per_sample["decoding/count"]  # [6, 2]
    assert torch.all(counts.sum(1) == 4) and torch.all(counts >= 1)
    with torch.no_grad():
        out = policy.score(rollout)
        halves = [policy.score(rollout.select(idx)).logp for idx in ([0, 1, 2], [3, 4, 5])]
    assert torch.equal(out.logp[:, 1:], rollout.old_logp[:, 1:])  # the schedule's log-probs are exact
    torch.testing.assert_close(out.logp, rollout.old_logp, atol=1e-6, rtol=0)
    torch.testing.assert_close(torch.cat(halves), out.logp, atol=1e-6, rtol=0)


def test_co_grpo_trains_model_and_schedule_with_one_loss(co_grpo):
    policy, rollout = co_grpo
    names = {id(p) for p in policy.trainable_parameters()}
    assert id(policy.decoding.module.count_logits) in names and len(names) > 1
    assert policy.modules_to_train() == [policy.model, policy.decoding.module]
    policy.model.zero_grad()
    policy.decoding.module.zero_grad()
    policy.score(rollout).logp.sum().backward()
    assert policy.decoding.module.count_logits.grad.abs().sum() > 0
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in policy.model.parameters())


def test_co_grpo_schedule_logp_and_gradient_by_hand(co_grpo):
    # initial table (Bk = 4, S_b = 2): φ[0] = (0, 3, 0, 0), LLaDA's 2 tokens at logit 3; step 0 allows k ∈ {1, 2, 3}
    # (one token must stay for step 1): log π(k) = φ[0, k − 1] − log(e³ + 2); step 1 is forced (log π = 0)
    policy, rollout = co_grpo
    schedule = policy.decoding.module
    counts = rollout.per_sample["decoding/count"][:, 0]  # [6] the sampled step-0 counts
    table = torch.tensor([0.0, 3.0, 0.0, 0.0], dtype=torch.float64)
    log_z = math.log(math.exp(3.0) + 2.0)
    expected = table[counts - 1] - log_z  # [6]
    schedule.zero_grad()
    logp = policy.score(rollout).logp[:, 1:]  # [6, 2] the count actions
    torch.testing.assert_close(logp[:, 0].double(), expected, atol=1e-6, rtol=0)
    assert torch.all(logp[:, 1] == 0)
    # ∂ Σ log π / ∂φ[0, j] = #(k = j + 1) − 6·p_j with p = (1, e³, 1, 0)/(e³ + 2); row 1 (forced step) gets nothing
    logp.sum().backward()
    p = torch.tensor([1.0, math.exp(3.0), 1.0, 0.0], dtype=torch.float64) / (math.exp(3.0) + 2.0)
    picked = torch.bincount(counts - 1, minlength=4).double()
    grad = schedule.count_logits.grad.double()
    torch.testing.assert_close(grad[0], picked - 6 * p, atol=1e-5, rtol=0)
    assert torch.all(grad[1] == 0)
    schedule.zero_grad()


def test_co_grpo_kl_of_the_schedule_is_to_its_initial_table(co_grpo):
    policy, rollout = co_grpo
    request = ScoreRequest.of(kl="k1")
    with torch.no_grad():
        assert torch.all(policy.score(rollout, request)["kl"][:, 1:] == 0)  # untrained: equal to the initial table
        policy.decoding.module.count_logits.add_(0.5 * torch.arange(4.0))
        kl = policy.score(rollout, request)["kl"]
        policy.decoding.module.count_logits.sub_(0.5 * torch.arange(4.0))
    assert kl[:, 1].abs().sum() > 0 and torch.all(kl[:, 2] == 0)


def test_co_grpo_checkpoint_round_trip_and_argmax_inference(co_grpo, tmp_path):
    policy, _ = co_grpo
    eval_rollout = policy.rollout(ROWS, 1, mode="eval")
    assert eval_rollout.per_sample["decoding/count"].tolist() == [[2, 2], [2, 2]]  # LLaDA's schedule at init
    other = make(decoding_policy="count_schedule", likelihood_proxy={"name": "coupled", "level": "sequence"})
    with torch.no_grad():
        policy.decoding.module.count_logits[0, 0] += 10.0  # now "1 token first" is the most likely
    policy.save(tmp_path)
    assert (tmp_path / DECODING_FILE).exists() and (tmp_path / "model.safetensors").exists()
    other.load(tmp_path)
    assert torch.equal(other.decoding.module.count_logits, policy.decoding.module.count_logits)
    assert other.rollout(ROWS, 1, mode="eval").per_sample["decoding/count"].tolist() == [[1, 3], [1, 3]]
    with torch.no_grad():
        policy.decoding.module.count_logits[0, 0] -= 10.0


def test_sas_trains_the_order_head_alone_on_decoding_actions(sas):
    policy, rollout = sas
    assert [p for p in policy.trainable_parameters()] == [policy.decoding.module.order_weight]
    assert policy.modules_to_train() == [policy.decoding.module]
    assert not any(p.requires_grad for p in policy.model.parameters())
    assert rollout.old_logp.shape == (6, 2) and rollout.info["proxy_forward_per_sample"] == 0
    out = policy.score(rollout)
    assert torch.equal(out.logp.detach(), rollout.old_logp)
    out.logp.sum().backward()
    assert policy.decoding.module.order_weight.grad.abs().sum() > 0


def test_sas_path_logp_is_the_frozen_denoisers_pathwise_likelihood(sas):
    policy, rollout = sas
    data = rollout.per_sample
    trace = LIKELIHOOD_PROXIES.get("trace")(
        policy.model_fn(policy.model), data["prompt_ids"], data["completion_ids"], torch.ones(6, 4),
        mask_id=policy.mask_id, seeds=data["mask_seed"], prompt_attention_mask=data["prompt_mask"],
        decode_step=data["decode_step"],
    )  # fmt: skip
    path_logp = rollout.structure.get("path_logp")  # [6, 2]
    torch.testing.assert_close(path_logp.sum(1), trace.logp.detach().sum(1), atol=1e-4, rtol=0)
    assert "path_logp" in policy.capabilities.signals


def test_sas_checkpoint_holds_the_order_head_not_the_frozen_weights(sas, tmp_path):
    policy, _ = sas
    with torch.no_grad():
        policy.decoding.module.order_weight.add_(torch.tensor([0.0, 1.0, 0.0, -2.0]))
    policy.save(tmp_path)
    assert (tmp_path / DECODING_FILE).exists() and not (tmp_path / "model.safetensors").exists()
    other = make(decoding_policy="order_head", freeze_denoiser=True, likelihood_proxy="trace")
    other.load(tmp_path)
    assert torch.equal(other.decoding.module.order_weight, policy.decoding.module.order_weight)
    with torch.no_grad():
        policy.decoding.module.order_weight.sub_(torch.tensor([0.0, 1.0, 0.0, -2.0]))


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"freeze_denoiser": True}, "decoding_policy"),
        ({"decoding_policy": "count_schedule", "remasking": "threshold"}, "remasking"),
        ({"decoding_policy": "order_head", "remasking": "random"}, "remasking"),
        ({"decoding_policy": "count_schedule", "likelihood_proxy": "spg"}, "spg"),
        ({"decoding_policy": {"name": "count_schedule", "init_logits": 1.0}}, "init_logit"),
        ({"decoding_policy": "count_sched"}, "count_schedule"),
    ],
)
def test_bad_decoding_policy_settings_are_rejected(overrides, match):
    config = DiffusionLMPolicyConfig(model="builtin:arith-dlm", gen_length=4, block_length=4, steps=2, **overrides)
    with pytest.raises(ValueError, match=match):
        config.validate()
