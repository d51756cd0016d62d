"""Sampling trajectory trees with a diffusers flow-matching model (BranchGRPO [170]): shared prefixes, splits into
``k`` children, every leaf exactly the independent rollout :func:`genalign.pipelines.flow.denoise` would produce from
the same root noise and step noises. The tree's shape is a :class:`genalign.schedulers.branching.TreePlan`."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from genalign.pipelines.architectures.base import FlowArchitecture, PromptEmbeddings, repeat_embeddings
from genalign.pipelines.flow import FlowTrajectory, check_finite, guided_velocity
from genalign.schedulers.branching import TreePlan
from genalign.schedulers.flow_sde import FlowSDEScheduler


@dataclass
class TreeTrajectory(FlowTrajectory):
    """A :class:`FlowTrajectory` of the ``B L`` leaves of ``B`` trajectory trees (leaves of tree ``b`` at
    ``b L .. b L + L - 1``), plus ``noises`` ``[B L, S, ...]`` (the standard-normal noise of each leaf's step, 0 on
    ODE steps; None when not recorded) and ``network_evaluations`` (transformer calls per guidance branch)."""

    noises: Tensor | None = None
    network_evaluations: int = 0


def denoise_tree(
    arch: FlowArchitecture,
    transformer: nn.Module,
    scheduler: FlowSDEScheduler,
    latents: Tensor,
    cond: PromptEmbeddings,
    uncond: PromptEmbeddings | None,
    *,
    plan: TreePlan,
    guidance_scale: float,
    noise_level: float,
    generator: torch.Generator | None,
    record_latents: bool,
    record_noises: bool = False,
    prompts: list[str] | None = None,
) -> TreeTrajectory:
    """Sample ``B`` trajectory trees (BranchGRPO [170]) from root noise ``latents`` ``[B, ...]``.

    The transformer runs once per node and step on the ``B n_t`` live nodes; at a split step each node's mean and std
    are repeated ``k`` times and every child draws its own noise; extra SDE steps draw one noise per node; other
    steps are ODE steps. Each transition is :meth:`FlowSDEScheduler.step`, so every leaf's path is exactly the
    independent rollout :func:`denoise` would produce from the same root noise and step noises (``noises``), and
    :func:`score_transitions` scores the leaves like any trajectory.

    Returns:
        :class:`TreeTrajectory` over the ``B L`` leaves: ``latents`` ``[B L, S + 1, ...]`` (shared prefixes
        duplicated), ``log_probs`` / ``stochastic`` ``[B L, S]``, ``final`` ``[B L, ...]``.
    """
    num_steps = len(scheduler.timesteps)
    if plan.num_steps != num_steps:
        raise ValueError(f"the tree plan has {plan.num_steps} steps but the schedule has {num_steps}.")
    trees = latents.shape[0]
    check_finite(latents, step=-1, prompts=prompts)
    splits, sde_steps = set(plan.split_steps), set(plan.sde_steps)
    node_states, node_log_probs, node_noises, node_stochastic = [latents.float()], [], [], []
    x = latents
    for i in range(num_steps):
        nodes = plan.nodes_at_state(i)
        timestep = scheduler.timesteps[i].expand(x.shape[0]).to(x.device)  # [B n_t]
        velocity = guided_velocity(
            arch,
            transformer,
            x,
            timestep,
            repeat_embeddings(cond, nodes),
            repeat_embeddings(uncond, nodes),
            guidance_scale=guidance_scale,
        )  # [B n_t, ...]
        children = plan.branching if i in splits else 1
        stochastic = i in splits or i in sde_steps
        x_in = x.repeat_interleave(children, dim=0)  # [B n_{t+1}, ...]
        v_in = velocity.repeat_interleave(children, dim=0)
        if stochastic:  # one independent draw per child
            noise = torch.randn(x_in.shape, generator=generator, device=x.device, dtype=torch.float32)
        else:
            noise = torch.zeros(x_in.shape, device=x.device, dtype=torch.float32)
        out = scheduler.step(
            v_in,
            scheduler.timesteps[i],
            x_in,
            step_index=i,
            noise_level=noise_level if stochastic else 0.0,
            noise=noise,
        )
        x = out.prev_sample  # [B n_{t+1}, ...]
        check_finite(x, step=i, prompts=prompts)
        node_states.append(x.float())
        node_log_probs.append(out.log_prob)
        node_noises.append(noise)
        node_stochastic.append(out.std.flatten(1)[:, 0] > 0)  # [B n_{t+1}]

    return TreeTrajectory(
        latents=per_leaf(plan, trees, node_states, 0) if record_latents else None,  # [B L, S + 1, ...]
        log_probs=per_leaf(plan, trees, node_log_probs, 1).float(),  # [B L, S] (step i: the child at state i + 1)
        stochastic=per_leaf(plan, trees, node_stochastic, 1),  # [B L, S]
        final=x,
        timesteps=scheduler.timesteps,
        noises=per_leaf(plan, trees, node_noises, 1) if record_noises else None,  # [B L, S, ...]
        network_evaluations=trees * plan.network_evaluations(),
    )


def per_leaf(plan: TreePlan, trees: int, values: list[Tensor], offset: int) -> Tensor:
    """Gather node values (one ``[B n_t, ...]`` tensor per state or step) for every leaf: ``[B L, len(values), ...]``.
    Entry ``t`` of ``values`` belongs to state ``t + offset``."""
    columns = []
    for t, value in enumerate(values):
        nodes = plan.nodes_at_state(t + offset)
        index = (torch.arange(trees)[:, None] * nodes + plan.node_of_leaf(t + offset)[None]).flatten()  # [B L]
        columns.append(value[index.to(value.device)])
    return torch.stack(columns, dim=1)
