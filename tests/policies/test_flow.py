"""Flow policy contract on tiny SD3 / FLUX / Wan: exact old log-probs, one full training step, windows, LoRA, EMA."""

import math
import os

import numpy as np
import pytest
import torch
from diffusers import DiffusionPipeline

from genalign.algorithms import CREDIT_RULES, StepBatch, aggregate, compute_advantages, loss_normalizer, policy_loss
from genalign.pipelines import FlowLogProbPipeline
from genalign.policies import load_family
from genalign.policies.base import Policy, RolloutRequest, ScoreRequest
from genalign.policies.flow import FlowPolicyConfig, build_policy, flow_lora
from genalign.schedulers import TrainStepsConfig

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROWS = [{"prompt": "two red circles"}, {"prompt": "a blue square"}]


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    from genalign.pipelines.tiny_models import save_tiny_pipeline

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("tiny_flow_policy_models")
    return {name: save_tiny_pipeline(name, root / name) for name in ("sd3", "flux", "wan")}


def _config(model_dirs, architecture: str = "sd3", **overrides) -> FlowPolicyConfig:
    values = dict(
        model=str(model_dirs[architecture]),
        height=16,
        width=16,
        num_frames=5 if architecture == "wan" else 1,
        num_steps=4,
        eval_num_steps=3,
        guidance_scale=3.0,
        max_sequence_length=8,
        lora=flow_lora(rank=4, alpha=4.0),
    )
    return FlowPolicyConfig(**(values | overrides))


def _perturb_lora(policy, scale: float = 0.05) -> None:
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in policy.trainable_parameters():
            param.add_(scale * torch.randn(param.shape, generator=generator))


def test_policy_satisfies_the_protocol_and_is_registered(model_dirs):
    policy = build_policy(_config(model_dirs))
    assert isinstance(policy, Policy) and policy.capabilities.rollout_logp_is_exact
    assert load_family("flow").CONFIG_CLASS is FlowPolicyConfig
    assert all("lora" in name for name, p in policy.model.transformer.named_parameters() if p.requires_grad)


@pytest.mark.parametrize("architecture", ["sd3", "flux", "wan"])
def test_one_full_training_step(model_dirs, architecture):
    config = _config(model_dirs, architecture, train_steps=TrainStepsConfig(strategy="random_subset", fraction=0.5))
    policy = build_policy(config)
    frozen = {n: p.detach().clone() for n, p in policy.model.transformer.named_parameters() if not p.requires_grad}
    trainable = {n: p.detach().clone() for n, p in policy.model.transformer.named_parameters() if p.requires_grad}
    text_encoder = next(policy.model.sampler.pipe.text_encoder.parameters()).detach().clone()

    rollout = policy.rollout(ROWS, group_size=2)
    assert rollout.old_logp.shape == rollout.action_mask.shape == (4, 4)
    assert torch.equal(rollout.action_mask.sum(1), torch.full((4,), 2.0))
    assert rollout.group_ids.tolist() == [0, 0, 1, 1]
    rewards = torch.tensor(
        [float(np.asarray(output, dtype=np.float32).mean()) for output in rollout.outputs]
    )  # brightness
    advantages = compute_advantages("grpo", rewards, rollout.group_ids)
    optimizer = torch.optim.Adam(policy.trainable_parameters(), lr=1e-2)

    scored = policy.score(rollout, ScoreRequest.of(kl="k3"))
    assert torch.equal(scored.logp.detach(), rollout.old_logp), "ratio must be exactly 1 before the update"
    assert torch.equal(scored["kl"], torch.zeros_like(scored["kl"])), "LoRA starts at zero: policy == reference"
    loss, metrics = policy_loss(
        scored.logp, rollout.old_logp, advantages, rollout.action_mask, clip="ppo", eps_low=1e-4, eps_high=1e-4
    )
    loss = loss + 0.04 * scored["kl"]
    mask = rollout.action_mask
    aggregate(loss, mask, "token_mean", loss_normalizer(mask, "token_mean")).backward()
    assert metrics["ratio_mean"].item() == 1.0
    optimizer.step()
    policy.after_optimizer_step()

    changed = [
        n
        for n, p in policy.model.transformer.named_parameters()
        if p.requires_grad and not torch.equal(p, trainable[n])
    ]
    assert changed, "LoRA weights must move"
    assert all(torch.equal(p, frozen[n]) for n, p in policy.model.transformer.named_parameters() if not p.requires_grad)
    assert torch.equal(next(policy.model.sampler.pipe.text_encoder.parameters()), text_encoder)
    after = policy.score(rollout, ScoreRequest.of(kl="mean_space"))
    assert not torch.equal(after.logp.detach(), rollout.old_logp)
    assert after["kl"].max() > 0 and torch.all(after["kl"][rollout.action_mask == 0] == 0)


def test_reference_log_probs_are_the_adapter_free_log_probs_of_the_same_transitions(model_dirs):
    """``ref_logp`` (Diffusion-DPO-style preference objectives): the reference's Gaussian log-density of each stored
    SDE transition, 0 on untrained steps; equal to the policy's before LoRA moves, unchanged after."""
    policy = build_policy(_config(model_dirs, train_steps=TrainStepsConfig(strategy="first_fraction", fraction=0.5)))
    rollout = policy.rollout(ROWS, group_size=2)
    with torch.no_grad():
        first = policy.score(rollout, ScoreRequest.of("ref_logp"))
    assert first.get("kl") is None and not first["ref_logp"].requires_grad
    assert torch.equal(first["ref_logp"], rollout.old_logp), "LoRA starts at zero: the reference is the policy"
    assert torch.all(first["ref_logp"][rollout.action_mask == 0] == 0)
    _perturb_lora(policy)
    with torch.no_grad():
        after = policy.score(rollout, ScoreRequest.of("ref_logp", kl="mean_space"))
        with policy.model.reference():
            adapter_free = policy.score(rollout).logp
    assert torch.equal(after["ref_logp"], first["ref_logp"]) and torch.equal(adapter_free, first["ref_logp"])
    assert (after.logp - after["ref_logp"]).abs().max() > 0 and after["kl"].max() > 0


@pytest.mark.parametrize(("dynamics", "noise_level"), [("flow_sde", 0.7), ("dance_sde", 0.3), ("cps", 0.5)])
def test_rollout_log_probs_are_exact_for_every_dynamics(model_dirs, dynamics, noise_level):
    policy = build_policy(_config(model_dirs, dynamics=dynamics, noise_level=noise_level))
    rollout = policy.rollout(ROWS, group_size=2)
    with torch.no_grad():
        assert torch.equal(policy.score(rollout).logp, rollout.old_logp)
    expected_last = 0.0 if dynamics == "cps" else 1.0  # cps is deterministic at sigma' = 0: not an action
    assert torch.all(rollout.action_mask[:, -1] == expected_last) and torch.all(rollout.action_mask[:, :-1] == 1)


def test_only_steps_inside_the_training_window_receive_gradient(model_dirs):
    window = TrainStepsConfig(strategy="sliding_window", stochastic="trained", window_size=2, advance_every=1)
    policy = build_policy(_config(model_dirs, num_steps=5, train_steps=window))
    _perturb_lora(policy)  # LoRA B = 0 would give zero gradient to the A matrices
    policy.on_step(2)  # window = steps 2 and 3
    rollout = policy.rollout(ROWS, group_size=1)
    assert rollout.action_mask.tolist() == [[0, 0, 1, 1, 0]] * 2
    assert torch.all(rollout.old_logp[:, [0, 1, 4]] == 0), "ODE outside the window"
    logp = policy.score(rollout).logp
    params = policy.trainable_parameters()
    for step in range(5):
        column = logp[:, step].sum()
        if step in (2, 3):
            grads = torch.autograd.grad(column, params, retain_graph=True)
            assert sum(g.abs().sum() for g in grads) > 0
        else:
            assert not column.requires_grad or all(
                g is None or torch.all(g == 0)
                for g in torch.autograd.grad(column, params, retain_graph=True, allow_unused=True)
            )


def test_rollout_in_chunks_of_the_micro_batch_size_rescores_bit_exactly(model_dirs):
    policy = build_policy(_config(model_dirs, sample_batch_size=2))
    rollout = policy.rollout(ROWS, group_size=2)
    assert rollout.per_sample["latents"].shape[:2] == (4, 5)
    with torch.no_grad():
        halves = [policy.score(rollout.select(idx)).logp for idx in ([0, 1], [2, 3])]
    assert torch.equal(torch.cat(halves), rollout.old_logp)


def test_micro_batches_rescore_to_the_rollout_values(model_dirs):
    policy = build_policy(_config(model_dirs))
    rollout = policy.rollout(ROWS, group_size=2)
    with torch.no_grad():
        halves = [policy.score(rollout.select(idx)).logp for idx in ([0, 1], [2, 3])]
    torch.testing.assert_close(torch.cat(halves), rollout.old_logp, rtol=1e-5, atol=1e-5)


def test_eval_rollout_is_deterministic_ode_with_eval_steps_and_ema_weights(model_dirs):
    policy = build_policy(_config(model_dirs, ema_decay=0.5))
    before = [p.detach().clone() for p in policy.trainable_parameters()]
    _perturb_lora(policy)
    live = [p.detach().clone() for p in policy.trainable_parameters()]
    policy.after_optimizer_step()
    for average, old, new in zip(policy.ema.average, before, live, strict=True):
        torch.testing.assert_close(average, 0.5 * old + 0.5 * new)
    with policy.evaluation_weights():
        assert all(torch.equal(p, a) for p, a in zip(policy.trainable_parameters(), policy.ema.average, strict=True))
        evaluation = policy.rollout(ROWS[:1], group_size=2, mode="eval")
    assert evaluation.info["num_steps"] == 3 and torch.all(evaluation.action_mask == 0)
    assert all(torch.equal(p, q) for p, q in zip(policy.trainable_parameters(), live, strict=True)), (
        "live weights restored"
    )
    with pytest.raises(ValueError, match="no stored 'latents'"):
        policy.score(evaluation)


@pytest.mark.parametrize("architecture", ["sd3", "flux", "wan"])
def test_save_writes_lora_that_diffusers_load_lora_weights_reads(model_dirs, tmp_path, architecture):
    policy = build_policy(_config(model_dirs, architecture))
    _perturb_lora(policy)
    policy.save(tmp_path / "lora")
    assert (tmp_path / "lora" / "pytorch_lora_weights.safetensors").exists()
    pipe = DiffusionPipeline.from_pretrained(model_dirs[architecture])
    pipe.load_lora_weights(tmp_path / "lora")
    loaded = FlowLogProbPipeline(pipe)
    kwargs = dict(
        num_inference_steps=2, guidance_scale=3.0, height=16, width=16, max_sequence_length=8, noise_level=0.0
    )
    kwargs |= {"num_frames": 5} if architecture == "wan" else {}
    with_lora = loaded(["two red circles"], generator=torch.Generator().manual_seed(0), **kwargs).trajectory.final
    expected = policy.model.sampler(
        ["two red circles"], generator=torch.Generator().manual_seed(0), **kwargs
    ).trajectory.final
    torch.testing.assert_close(with_lora, expected)
    restored = build_policy(_config(model_dirs, architecture))
    restored.load(tmp_path / "lora")
    for a, b in zip(restored.trainable_parameters(), policy.trainable_parameters(), strict=True):
        torch.testing.assert_close(a, b)


def test_prompt_embeddings_are_cached_with_lru_eviction(model_dirs, monkeypatch):
    policy = build_policy(_config(model_dirs, prompt_cache_size=1))
    encoded: list[list[str]] = []
    original = policy.model.sampler.encode

    def counting(prompts, **kwargs):
        encoded.append(list(prompts))
        return original(prompts, **kwargs)

    monkeypatch.setattr(policy.model.sampler, "encode", counting)
    policy.rollout(ROWS, group_size=2)
    policy.rollout(ROWS, group_size=2)
    assert encoded == [["two red circles"], ["a blue square"]], "each distinct prompt is encoded once, on its own"
    policy.rollout(ROWS[1:], group_size=1)
    assert list(policy.model.embeddings) == ["a blue square"]


def test_a_prompt_embedding_does_not_depend_on_the_prompts_requested_with_it(model_dirs):
    """What a resumed run (empty cache) needs to encode bit-identically to the uninterrupted run."""
    together = build_policy(_config(model_dirs)).model.embeddings(["a blue square", "two red circles", "one dog"])
    alone = build_policy(_config(model_dirs)).model.embeddings(["two red circles"])
    for kept, single in zip(together, alone, strict=True):
        assert all(torch.equal(kept[key][1:2], single[key]) for key in single)


def test_bfloat16_weights_keep_float32_log_probs_and_exact_ratio(model_dirs):
    policy = build_policy(_config(model_dirs, dtype="bfloat16", gradient_checkpointing=True))
    rollout = policy.rollout(ROWS, group_size=1)
    assert rollout.old_logp.dtype == torch.float32 and rollout.per_sample["latents"].dtype == torch.float32
    policy.model.transformer.train()
    scored = policy.score(rollout)
    assert torch.equal(scored.logp.detach(), rollout.old_logp)
    scored.logp.sum().backward()
    assert all(p.grad is not None for p in policy.trainable_parameters())


def test_entropy_is_the_constant_gaussian_entropy_of_trained_steps(model_dirs):
    policy = build_policy(_config(model_dirs, train_steps=TrainStepsConfig(strategy="first_k", k=2)))
    rollout = policy.rollout(ROWS, group_size=1)
    entropy = policy.score(rollout, ScoreRequest.of("entropy"))["entropy"]
    assert entropy.shape == (2, 4) and not entropy.requires_grad
    assert torch.all(entropy[:, 2:] == 0) and torch.all(entropy[:, :2] != 0)
    # entropy of N(mean, std^2) per element: log std + log(2 pi e) / 2, with std from the scheduler
    scheduler = policy.model.scheduler
    step = scheduler.step(torch.zeros(1, 1), None, torch.zeros(1, 1), step_index=1, noise_level=0.7)
    expected = math.log(step.std.item()) + 0.5 * math.log(2 * math.pi * math.e)
    torch.testing.assert_close(entropy[:, 1], torch.full((2,), expected))
    assert policy.score(rollout).get("entropy") is None


def test_cfg_free_training_makes_one_pass_per_step(model_dirs):
    policy = build_policy(_config(model_dirs, guidance_scale=1.0))
    rollout = policy.rollout(ROWS, group_size=1)
    assert rollout.info["nfe_per_sample"] == 4
    assert torch.equal(policy.score(rollout).logp.detach(), rollout.old_logp)


def test_bad_inputs_are_named(model_dirs):
    policy = build_policy(_config(model_dirs))
    with pytest.raises(ValueError, match="row 1 has no string 'prompt'"):
        policy.rollout([{"prompt": "a"}, {"caption": "b"}], group_size=1)
    rollout = policy.rollout(ROWS, group_size=1)
    with pytest.raises(ValueError, match="kl_estimator='k4'"):
        policy.score(rollout, ScoreRequest.of(kl="k4"))
    with pytest.raises(ValueError, match=r"policy\.model is empty"):
        FlowPolicyConfig().validate()
    with pytest.raises(ValueError, match=r"noise_level=-0\.1"):
        _config(model_dirs, noise_level=-0.1).validate()
    full = build_policy(_config(model_dirs, lora=flow_lora(rank=0)))
    with pytest.raises(ValueError, match=r"policy.lora.rank=0"):
        full.score(full.rollout(ROWS[:1], group_size=1), ScoreRequest.of(kl="k3"))


def test_dense_step_rewards_are_measured_on_request_and_give_per_step_advantages(model_dirs):
    policy = build_policy(_config(model_dirs))
    calls = []

    def reward_probe(rows, outputs):  # call c (state c, one chunk) gives sample i the reward c * (i + 1)
        calls.append(len(outputs))
        return torch.arange(1, len(outputs) + 1, dtype=torch.float32) * (len(calls) - 1)

    plain = policy.rollout(ROWS, group_size=2)
    assert plain.structure.get("step_rewards") is None and not calls  # measured only when asked
    request = RolloutRequest(structure=frozenset({"step_rewards"}), reward_probe=reward_probe)
    rollout = policy.rollout(ROWS, group_size=2, request=request)
    assert calls == [4] * 5  # states x_0 .. x_4 are completed and scored
    assert rollout.structure.get("step_rewards")[:, 1].tolist() == [1.0, 2.0, 3.0, 4.0]
    inputs = StepBatch(
        sample_advantages=torch.zeros(4), mask=rollout.action_mask, group_ids=rollout.group_ids, **rollout.structure
    )
    advantages = CREDIT_RULES.get("dense_step_gains")(torch.zeros(4, 4), inputs)
    # gain of every step = i + 1: groups {1, 2} and {3, 4} -> -1, +1 after normalisation
    expected = torch.tensor([-1.0, 1.0, -1.0, 1.0])[:, None].expand(4, 4) / (1 + 2e-4)
    assert torch.allclose(advantages, expected * rollout.action_mask, atol=1e-4)
    with pytest.raises(ValueError, match="reward_probe"):
        policy.rollout(ROWS, group_size=2, request=RolloutRequest(structure=frozenset({"step_rewards"})))


def test_ode_completion_from_the_noise_equals_an_ode_rollout(model_dirs):
    from genalign.pipelines.flow import denoise, ode_complete

    policy = build_policy(_config(model_dirs))
    sampler = policy.model.sampler
    cond, uncond = policy.model.embeddings(["two red circles"])
    noise = sampler.prepare(1, height=16, width=16, num_frames=1, num_inference_steps=4,
                            generator=torch.Generator().manual_seed(0))  # fmt: skip
    completed = ode_complete(sampler.arch, policy.model.transformer, sampler.scheduler, noise, 0, cond, uncond,
                             guidance_scale=3.0)  # fmt: skip
    ode = denoise(sampler.arch, policy.model.transformer, sampler.scheduler, noise, cond, uncond, guidance_scale=3.0,
                  sde_mask=torch.zeros(1, 4, dtype=torch.bool), noise_level=0.7, generator=None,
                  record_latents=False)  # fmt: skip
    assert torch.allclose(completed, ode.final, atol=1e-6)


@pytest.mark.parametrize("mode", ["independent", "shared"])
def test_group_initial_noise_is_shared_within_groups_only_when_asked(model_dirs, mode):
    policy = build_policy(_config(model_dirs, group_initial_noise=mode))
    start = policy.rollout(ROWS, group_size=3).per_sample["latents"][:, 0]  # [6, ...] x_T of each sample
    same_in_group = [torch.equal(start[i], start[j]) for i, j in [(0, 1), (1, 2), (3, 4), (4, 5)]]
    assert all(same_in_group) if mode == "shared" else not any(same_in_group)
    assert not torch.equal(start[0], start[3])  # groups differ either way


def test_step_noise_is_declared_for_every_trained_step(model_dirs):
    steps = TrainStepsConfig(strategy="first_k", k=2, stochastic="trained")
    policy = build_policy(_config(model_dirs, train_steps=steps))
    rollout = policy.rollout(ROWS, group_size=1)
    std = rollout.structure.get("step_std")  # [2, 4]
    assert std.shape == (2, 4) and torch.all(std[:, :2] > 0) and torch.all(std[:, 2:] == 0)
    assert torch.equal(std[0], std[1])  # the same schedule and noise level for every sample
    inputs = StepBatch(
        sample_advantages=torch.ones(2), mask=rollout.action_mask, group_ids=rollout.group_ids, **rollout.structure
    )
    weights = CREDIT_RULES.get("noise_aware_steps")(torch.ones(2, 4), inputs)
    torch.testing.assert_close(weights[:, :2].mean(1), torch.ones(2))  # mean 1 over the trained steps
    assert torch.all(weights[:, 2:] == 0)


def test_state_dict_restores_generators_iteration_and_ema(model_dirs):
    policy = build_policy(_config(model_dirs, ema_decay=0.5))
    policy.on_step(3)
    policy.rollout(ROWS, group_size=1)
    _perturb_lora(policy)
    policy.after_optimizer_step()
    state = policy.state_dict()
    torch.save(state, "/dev/null")  # plain tensors and values
    expected = policy.rollout(ROWS, group_size=2)
    other = build_policy(_config(model_dirs, ema_decay=0.5))
    for mine, theirs in zip(other.trainable_parameters(), policy.trainable_parameters(), strict=True):
        mine.data.copy_(theirs.data)
    other.load_state_dict(state)
    assert other.iteration == 3
    again = other.rollout(ROWS, group_size=2)
    assert torch.equal(again.per_sample["latents"], expected.per_sample["latents"])
    assert all(torch.equal(a, b) for a, b in zip(other.ema.average, policy.ema.average, strict=True))
    with pytest.raises(ValueError, match="ema"):
        build_policy(_config(model_dirs)).load_state_dict(state)


def test_lora_options_reach_the_adapters(model_dirs):
    policy = build_policy(_config(model_dirs, lora=flow_lora(rank=4, alpha=8.0, use_dora=True, use_rslora=True)))
    layers = [m for m in policy.model.transformer.modules() if hasattr(m, "lora_A")]
    assert layers and all("default" in m.lora_magnitude_vector for m in layers)  # DoRA
    assert all(m.scaling["default"] == 8.0 / 4**0.5 for m in layers)  # rsLoRA: alpha / sqrt(rank)
    everything = build_policy(_config(model_dirs, lora=flow_lora(rank=4, alpha=4.0, target_modules=["all-linear"])))
    transformer = everything.model.transformer
    adapted = {name for name, m in transformer.named_modules() if hasattr(m, "lora_A")}
    wrapped = {f"{name}.{child}" for name in adapted for child, _ in transformer.get_submodule(name).named_modules()}
    linear = {name for name, m in transformer.named_modules() if isinstance(m, torch.nn.Linear)} - wrapped
    assert adapted and linear <= adapted  # every linear layer (those left are LoRA's own A / B layers)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"init_lora_weights": "pissa"}, r"policy.lora.init_lora_weights='pissa' is not a LoRA initialisation"),
        ({"init_lora_weights": "orthogonal", "rank": 3}, r"'orthogonal' needs an even LoRA rank"),
        ({"target_modules": ["all-linear", "to_q"]}, r"policy.lora.target_modules=\['all-linear', 'to_q'\] mixes"),
        ({"alpha": 0}, r"policy.lora.alpha=0.0 must be > 0"),
        ({"rank": 0, "use_dora": True}, r"policy.lora.use_dora=True has no effect with policy.lora.rank=0"),
        ({"dropout": 0.1}, r"policy.lora.dropout=0.1 is not supported here \(the flow family"),
        ({"bias": "all"}, r"policy.lora.bias='all' is not supported here"),
    ],
)
def test_flow_lora_options_are_checked_at_config_load(overrides, message):
    from genalign.config.core import ConfigError, from_dict

    with pytest.raises(ConfigError, match=message):
        from_dict(FlowPolicyConfig, {"family": "flow", "model": "some/folder", "lora": overrides}, "policy")
