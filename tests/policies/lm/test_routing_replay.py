"""Routing Replay [294] on a tiny Qwen3-MoE: the experts recorded when a rollout is scored are the experts of every
later scoring pass of it, while the router still trains (its routing weights are recomputed at those experts)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy
from genalign.policies.lm.routing_replay import moe_routers, recording, replaying
from genalign.policies.lm.tiny import build_tiny_causal_lm

torch.set_num_threads(1)
ROWS = [{"prompt": "1 + 2 ="}, {"prompt": "what is 3 * 4 ? answer :"}]


@pytest.fixture(scope="module")
def moe_dir(tmp_path_factory):
    return build_tiny_causal_lm(tmp_path_factory.mktemp("moe") / "qwen3_moe", architecture="qwen3_moe", vocab_size=96)


def policy_of(path, **options):
    return build_policy(CausalLMPolicyConfig(model=str(path), max_new_tokens=6, temperature=0.9, **options), "cpu")


def used_routes(policy, rollout) -> tuple[torch.Tensor, torch.Tensor]:
    """``([T, layers, k] experts the expert blocks were handed in a scoring pass, logp [n, C])``."""
    seen: list[torch.Tensor] = []
    experts = [layer.mlp.experts for layer in policy.hf_model.model.layers]
    handles = [e.register_forward_pre_hook(lambda _m, args: seen.append(args[1].clone())) for e in experts]
    try:
        with torch.no_grad():
            logp = policy.score(rollout).logp
    finally:
        for handle in handles:
            handle.remove()
    return torch.stack(seen, dim=1).sort(-1).values, logp


def test_replayed_scoring_routes_to_the_recorded_experts_after_the_router_moved(moe_dir):
    policy = policy_of(moe_dir, routing_replay=True)
    rollout = policy.rollout(ROWS, group_size=2)
    data = rollout.per_sample
    assert data["prompt_routes"].shape[:2] == data["prompt_ids"].shape and data["prompt_routes"].shape[2:] == (2, 2)
    assert data["completion_routes"].shape[:2] == data["completion_ids"].shape
    first = int(data["prompt_mask"].any(0).long().argmax())  # the columns a scoring pass keeps
    width = int(data["completion_mask"].any(0).sum())
    recorded = torch.cat([data["prompt_routes"][:, first:], data["completion_routes"][:, :width]], 1)
    recorded = recorded.flatten(0, 1).long().sort(-1).values  # [T, layers, k]
    unmoved, before = used_routes(policy, rollout)
    assert torch.equal(unmoved, recorded)
    with torch.no_grad():
        for router in moe_routers(policy.model):
            router.weight.add_(torch.randn(router.weight.shape, generator=torch.Generator().manual_seed(0)))
    replayed, after = used_routes(policy, rollout)
    assert torch.equal(replayed, recorded), "the moved router's pass still uses the recorded experts"
    without_replay = rollout.select(range(len(rollout)))
    for key in ("prompt_routes", "completion_routes"):
        del without_replay.per_sample[key]
    fresh, _ = used_routes(policy, without_replay)
    assert not torch.equal(fresh, recorded), "without replay the moved router routes elsewhere"
    assert not torch.equal(after, before), "the routing weights still follow the router"


def test_replay_keeps_the_router_trainable_and_recomputes_its_weights_by_hand(moe_dir):
    policy = policy_of(moe_dir)
    model, router = policy.hf_model, moe_routers(policy.model)[0]
    ids = torch.tensor([[5, 6, 7]])
    with torch.no_grad(), recording(model, 1) as passes:
        model(input_ids=ids)
    routes = passes[0]  # [1, 3, layers, k]
    forced = torch.zeros_like(routes)
    forced[..., 1] = 3  # experts (0, 3) for every token of every layer
    logits, handed = [], []  # the router's logits; what the expert block is handed (after the replay)
    handles = [
        router.register_forward_hook(lambda _m, _a, out: logits.append(out[0])),
        model.model.layers[0].mlp.experts.register_forward_pre_hook(lambda _m, args: handed.append(args[1:])),
    ]
    with replaying(model, forced):
        loss = model(input_ids=ids).logits.sum()
    for handle in handles:
        handle.remove()
    logits, (experts, weights) = logits[0], handed[0]
    probs = logits.detach().float().softmax(-1)[:, [0, 3]]  # [3, 2]
    torch.testing.assert_close(weights.detach(), probs / probs.sum(-1, keepdim=True))  # norm_topk_prob=True
    assert experts.tolist() == [[0, 3]] * 3
    loss.backward()
    assert router.weight.grad is not None and router.weight.grad.abs().sum() > 0


def test_first_ratio_is_one_and_micro_batches_agree_with_replay(moe_dir):
    policy = policy_of(moe_dir, routing_replay=True)
    rollout = policy.rollout(ROWS, group_size=3)
    with torch.no_grad():
        whole = policy.score(rollout).logp
        halves = torch.cat([policy.score(rollout.select(part)).logp for part in ([0, 1, 2], [3, 4, 5])])
    assert (whole - rollout.old_logp).abs().max().item() < 1e-4
    assert (whole - halves).abs().max().item() <= 1e-6


def test_routing_replay_is_refused_where_it_cannot_apply(tmp_path, moe_dir):
    dense = build_tiny_causal_lm(tmp_path / "qwen3", architecture="qwen3", vocab_size=96)
    with pytest.raises(ValueError, match="routing_replay=true needs a mixture-of-experts model: model_type 'qwen3'"):
        policy_of(dense, routing_replay=True)
    with pytest.raises(ValueError, match="gradient_checkpointing=true: the recomputed forward"):
        policy_of(moe_dir, routing_replay=True, gradient_checkpointing=True)


def test_joined_rollouts_keep_each_tokens_routes(moe_dir):
    """Rollouts of different prompt widths joined (extra sampling rounds): prompt routes pad on the left like the ids."""
    from genalign.policies.base import Rollout

    policy = policy_of(moe_dir, routing_replay=True)
    short, long = policy.rollout(ROWS[:1], group_size=2), policy.rollout(ROWS[1:], group_size=2)
    joined = Rollout.cat([short, long])
    assert joined.per_sample["prompt_routes"].shape[1] == joined.per_sample["prompt_ids"].shape[1]
    with torch.no_grad():
        parts = [policy.score(part).logp for part in (short, long)]
        whole = policy.score(joined).logp
    width = max(part.shape[1] for part in parts)
    expected = torch.cat([torch.nn.functional.pad(part, (0, width - part.shape[1])) for part in parts])
    assert (whole[:, :width] - expected).abs().max().item() <= 1e-6
