"""DenseGRPO [148] measurements: the reward of the output completed deterministically (ODE) from each trained state of
a training rollout, so that the credit rule ``dense_step_gains`` can turn reward gains into per-step advantages."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.pipelines.architectures.base import select_embeddings
from genalign.pipelines.flow import ode_complete
from genalign.policies.base import RewardProbe, Rollout
from genalign.policies.flow import stored
from genalign.policies.flow.model import FlowModel


@torch.no_grad()
def step_rewards(model: FlowModel, rollout: Rollout, reward_probe: RewardProbe) -> Tensor:
    """``[N, S + 1]`` reward of the ODE completion from every state ``x_t`` a trained step starts or ends at (NaN for
    the other states), in chunks of ``sample_batch_size``.

    Args:
        reward_probe: ``(rows [n], outputs [n]) -> [n]`` the trainer's combined reward of decoded outputs.
    """
    data = rollout.per_sample
    latents = stored.require(data, stored.LATENTS).to(model.device)  # [N, S + 1, ...]
    cond, uncond = stored.stored_embeddings(data, model.device)
    guidance = float(rollout.info.get("guidance_scale", model.config.guidance_scale))
    num_steps = rollout.num_actions
    model.set_rollout_schedule(rollout.info, num_steps, latents[:, 0])
    trained = rollout.action_mask.bool()  # [N, S]
    needed = sorted({t for step in trained.any(0).nonzero().flatten().tolist() for t in (step, step + 1)})
    rewards = torch.full((len(rollout), num_steps + 1), float("nan"))  # [N, S + 1]
    chunk = model.config.sample_batch_size or len(rollout)
    for state in needed:
        for start in range(0, len(rollout), chunk):
            part = slice(start, min(start + chunk, len(rollout)))
            final = ode_complete(
                model.arch,
                model.transformer,
                model.scheduler,
                latents[part, state],
                state,
                select_embeddings(cond, part),
                select_embeddings(uncond, part),
                guidance_scale=guidance,
            )
            outputs = model.decode(final, select_embeddings(cond, part))
            rewards[part, state] = reward_probe(rollout.rows[part], outputs).float().cpu()
    return rewards
