"""Sampling strategies of the flow policy, each filling one skeleton (:class:`Sampled` -> :func:`assemble_rollout`).

* :class:`SDESampling`: independent trajectories; training rollouts sample the steps chosen by ``train_steps`` with
  the SDE dynamics and store every latent; evaluation rollouts are deterministic ODE samples with the evaluation steps
  and guidance (Flow-GRPO [319], DanceGRPO, MixGRPO windows, Chunk-GRPO).
* :class:`TreeSampling`: each group is the leaves of one trajectory tree (BranchGRPO [170], TempFlow-GRPO [168],
  G2RPO-style single split); leaves are stored like independent trajectories and their shared prefixes declared as
  the rollout's prefix tree; ``info["nfe_per_sample"]`` reports the network evaluations per leaf.
* :class:`FlowMatchingSampling`: likelihood-free training (DiffusionNFT, V-GRPO [10]): ODE (or SDE) samples, of which
  only the clean latent is kept, plus ``K`` flow-matching points per sample drawn at rollout time; each point is one
  action.

Every strategy declares the step noise of its actions (``structure.step_std``) where it has one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from genalign.pipelines.architectures.base import join_sources, repeat_embeddings, select_embeddings
from genalign.pipelines.flow import concat_trajectories
from genalign.pipelines.flow_tree import denoise_tree
from genalign.policies.base import RewardProbe, Rollout
from genalign.policies.flow import stored
from genalign.policies.flow.model import FlowModel
from genalign.policies.flow.noise_calibration import NoiseCalibrator
from genalign.policies.flow.noise_search import NoiseSearch
from genalign.policies.flow.scoring import FlowMatchingScorer, flow_matching_points
from genalign.policies.flow.tree import plan_for_iteration, prefix_tree, trained_steps
from genalign.schedulers.sde_dynamics import SDE_DYNAMICS
from genalign.schedulers.train_steps import select_train_steps


@dataclass
class Sampled:
    """What a strategy produced for ``N = rows × group_size`` samples (group members consecutive)."""

    outputs: list[Any]
    old_logp: Tensor  # [N, T]
    action_mask: Tensor  # [N, T]
    per_sample: dict[str, Any] = field(default_factory=dict)
    structure: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


def assemble_rollout(
    rows: list[dict[str, Any]], group_size: int, sampled: Sampled, output_info: dict[str, Any] | None = None
) -> Rollout:
    """The rollout skeleton shared by every strategy: rows repeated per group member, group ids, the sample;
    ``output_info`` (what describes the outputs, e.g. videos' ``fps``) joins the sample's ``info``."""
    return Rollout(
        rows=[row for row in rows for _ in range(group_size)],
        outputs=sampled.outputs,
        group_ids=torch.arange(len(rows)).repeat_interleave(group_size),
        old_logp=sampled.old_logp,
        action_mask=sampled.action_mask,
        structure=sampled.structure,
        per_sample=sampled.per_sample,
        info=sampled.info | (output_info or {}),
    )


def step_std(model: FlowModel, stochastic: Tensor, levels: Tensor | None = None) -> Tensor:
    """``[N, S]`` std of each step's transition at the configured noise level (or at ``levels`` ``[S]``, one per step)
    on the current schedule (0 on deterministic steps)."""
    sigmas = model.scheduler.sigmas.float()  # [S + 1]
    steps = stochastic.shape[1]
    unit = torch.zeros(steps, 1)
    _, std = SDE_DYNAMICS.get(model.config.dynamics)(
        unit,
        unit,
        sigmas[:steps].cpu(),
        sigmas[1 : steps + 1].cpu(),
        noise_level=model.config.noise_level if levels is None else levels.cpu(),
        sigma_max=float(sigmas[1]) if len(sigmas) > 1 else 1.0,
    )  # [S, 1]
    return (std[:, 0] * stochastic.cpu().float()).to(stochastic.device)  # [N, S]


class SDESampling:
    """Independent trajectories (module docstring); ``training=False`` for evaluation rollouts.

    Training rollouts may sample each step at a calibrated noise level (``calibrator``, DenseGRPO [148]) and start
    each group from a searched initial noise (``noise_search``, Smart-GRPO [152], which reads ``reward_probe``)."""

    def __init__(
        self,
        model: FlowModel,
        *,
        training: bool,
        calibrator: NoiseCalibrator | None = None,
        noise_search: NoiseSearch | None = None,
    ) -> None:
        self.model = model
        self.training = training
        self.calibrator = calibrator
        self.noise_search = noise_search

    def _initial_latents(
        self, rows: list[dict[str, Any]], group_size: int, num_steps: int, guidance: float, probe: RewardProbe | None
    ) -> tuple[Tensor, dict[str, float]]:
        """``[N, ...]`` starting latents of a rollout (searched, shared per group, or independent) and search info."""
        model, n = self.model, len(rows) * group_size
        if self.training and self.noise_search is not None:
            return self.noise_search.initial_latents(rows, group_size, num_steps, guidance, probe)
        share = self.training and group_size > 1 and model.config.group_initial_noise == "shared"
        latents = model.initial_latents(n // group_size if share else n, num_steps)  # [n, ...] or one per group
        return (latents.repeat_interleave(group_size, dim=0) if share else latents), {}

    def sample(
        self, rows: list[dict[str, Any]], group_size: int, iteration: int, reward_probe: RewardProbe | None = None
    ) -> Sampled:
        model, cfg, training = self.model, self.model.config, self.training
        prompts = [row["prompt"] for row in rows for _ in range(group_size)]
        n = len(prompts)
        schedule_steps = cfg.num_steps if training else cfg.eval_num_steps
        num_steps = model.denoising_steps(schedule_steps)  # fewer for image-to-image (policy.strength < 1)
        guidance = cfg.guidance_scale if training or cfg.eval_guidance_scale is None else cfg.eval_guidance_scale
        cond, uncond, sources = model.conditioning(rows, group_size, guidance)  # [N, ...] each; sources may be None
        if training:
            generator = model.mask_generator
            masks = select_train_steps(cfg.train_steps, num_steps=num_steps, num_samples=n, iteration=iteration,
                                       generator=generator)  # fmt: skip
            sde, trained = masks.sde, masks.trained
        else:  # evaluation: deterministic ODE sampling
            sde = torch.zeros(n, num_steps, dtype=torch.bool)
            trained = sde.clone()
        levels = self.calibrator.levels if training and self.calibrator is not None else None  # [S] or None
        latents, search_info = self._initial_latents(rows, group_size, schedule_steps, guidance, reward_probe)
        latents = model.start_latents(latents, sources)
        trajectory, outputs = model.denoise_in_chunks(
            latents, join_sources(cond, sources), join_sources(uncond, sources), sde, prompts=prompts,
            guidance=guidance, record_latents=training,
            noise_level=None if levels is None else levels.to(model.device),
            ode_solver=None if training else cfg.eval_ode_solver,
        )  # fmt: skip
        action_mask = (trained.to(trajectory.stochastic.device) & trajectory.stochastic).float()  # [N, T]
        sampled = Sampled(outputs, trajectory.log_probs * action_mask, action_mask)  # old_logp on the model's device
        sampled.info = {"nfe_per_sample": num_steps * (1 if uncond is None else 2), "num_steps": num_steps,
                        "schedule_steps": schedule_steps, "guidance_scale": guidance} | search_info  # fmt: skip
        if training:
            sde = sde.to(model.device)
            level = cfg.noise_level if levels is None else levels.to(model.device)[None, :]  # float or [1, S]
            sampled.per_sample = {stored.LATENTS: trajectory.latents, stored.NOISE_LEVEL: sde.float() * level}
            sampled.per_sample |= stored.store_embeddings(cond, uncond, sources)  # [N, ...] each
            sampled.structure = {"step_std": step_std(model, sde, levels)}
        return sampled


class TreeSampling:
    """Each group is the leaves of one trajectory tree (module docstring)."""

    def __init__(self, model: FlowModel) -> None:
        self.model = model

    def sample(self, rows: list[dict[str, Any]], group_size: int, iteration: int) -> Sampled:
        model, cfg = self.model, self.model.config
        plan = plan_for_iteration(cfg.tree, num_steps=cfg.num_steps, iteration=iteration)
        if group_size != plan.num_leaves:
            raise ValueError(
                f"group_size={group_size} but the tree has {plan.num_leaves} leaves (branching={plan.branching} ** "
                f"{plan.depth} splits); set algorithm.group_size={plan.num_leaves} or change policy.tree."
            )
        n, num_steps = len(rows) * group_size, cfg.num_steps
        tree_prompts = [row["prompt"] for row in rows]
        cond, uncond, sources = model.conditioning(rows, 1, cfg.guidance_scale)  # [B, ...] each; sources may be None
        tree_cond, tree_uncond = join_sources(cond, sources), join_sources(uncond, sources)
        roots = model.initial_latents(len(rows), num_steps)  # [B, ...]
        trees_per_chunk = max(1, (cfg.sample_batch_size or n) // plan.num_leaves)
        pieces, outputs = [], []
        for start in range(0, len(rows), trees_per_chunk):
            part = slice(start, min(start + trees_per_chunk, len(rows)))
            piece = denoise_tree(
                model.arch, model.transformer, model.scheduler, roots[part], select_embeddings(tree_cond, part),
                select_embeddings(tree_uncond, part), plan=plan, guidance_scale=cfg.guidance_scale,
                noise_level=cfg.noise_level, generator=model.generator, record_latents=True,
                prompts=tree_prompts[part],
            )  # fmt: skip
            pieces.append(piece)
            outputs += model.decode(piece.final, repeat_embeddings(select_embeddings(tree_cond, part), plan.num_leaves))
        trajectory = concat_trajectories(pieces)
        stochastic = plan.stochastic_steps().to(model.device).expand(n, num_steps)  # [N, T]
        trained = trained_steps(cfg.tree, plan).to(model.device).expand(n, num_steps)  # [N, T]
        action_mask = (trained & trajectory.stochastic).float()  # [N, T]
        per_sample: dict[str, Any] = {stored.LATENTS: trajectory.latents}  # [N, T + 1, ...]
        per_sample[stored.NOISE_LEVEL] = stochastic.float() * cfg.noise_level  # [N, T]
        per_sample |= stored.store_embeddings(
            repeat_embeddings(cond, group_size),
            repeat_embeddings(uncond, group_size),
            repeat_embeddings(sources, group_size),
        )  # every leaf of a tree has its tree's prompt and source
        cfg_passes = 1 if uncond is None else 2
        info = {
            "nfe_per_sample": sum(piece.network_evaluations for piece in pieces) * cfg_passes / n,
            "nfe_per_sample_independent": num_steps * cfg_passes,
            "num_steps": num_steps,
            "guidance_scale": cfg.guidance_scale,
            "tree_leaves": plan.num_leaves,
        }
        structure = {"prefix_tree": prefix_tree(plan, len(rows)), "step_std": step_std(model, stochastic)}
        return Sampled(outputs, trajectory.log_probs * action_mask, action_mask, per_sample, structure, info)


class FlowMatchingSampling:
    """Likelihood-free training rollouts (module docstring); ``scorer`` gives V-GRPO's old log-probs."""

    def __init__(self, model: FlowModel, scorer: FlowMatchingScorer) -> None:
        self.model = model
        self.scorer = scorer

    def sample(self, rows: list[dict[str, Any]], group_size: int, iteration: int) -> Sampled:
        model, cfg = self.model, self.model.config
        lf = cfg.likelihood_free
        prompts = [row["prompt"] for row in rows for _ in range(group_size)]
        n = len(prompts)
        steps = model.denoising_steps(cfg.num_steps)  # fewer for image-to-image (policy.strength < 1)
        if lf.deterministic_rollout:
            sde = torch.zeros(n, steps, dtype=torch.bool)
        else:
            sde = select_train_steps(cfg.train_steps, num_steps=steps, num_samples=n, iteration=iteration,
                                     generator=model.mask_generator).sde  # fmt: skip
        cond, uncond, sources = model.conditioning(rows, group_size, cfg.guidance_scale)  # [N, ...]; sources or None
        share = group_size > 1 and cfg.group_initial_noise == "shared"
        latents = model.initial_latents(n // group_size if share else n, cfg.num_steps)
        if share:
            latents = latents.repeat_interleave(group_size, dim=0)
        trajectory, outputs = model.denoise_in_chunks(
            model.start_latents(latents, sources), join_sources(cond, sources), join_sources(uncond, sources), sde,
            prompts=prompts, guidance=cfg.guidance_scale, record_latents=False,
        )  # fmt: skip
        clean = trajectory.final.float()  # [N, ...]
        sigmas, noise = flow_matching_points(
            clean.cpu(), lf.num_timesteps, sampling=lf.timestep_sampling, generator=model.point_generator
        )
        per_sample = {stored.CLEAN: clean, stored.SIGMAS: sigmas.to(model.device), stored.NOISE: noise.to(model.device)}
        per_sample |= stored.store_embeddings(cond, None, sources)
        action_mask = torch.ones(n, lf.num_timesteps, device=model.device)  # [N, K]
        old_logp = torch.zeros_like(action_mask)
        if lf.method == "elbo":  # V-GRPO: the proxy at sampling time, in the chunks the update scores
            draft = Rollout(rows=[{}] * n, outputs=outputs, group_ids=torch.zeros(n, dtype=torch.long),
                            old_logp=old_logp, action_mask=action_mask, per_sample=per_sample)  # fmt: skip
            chunk = cfg.sample_batch_size or n
            errors = [self.scorer.points(draft.select(range(s, min(s + chunk, n))))[0] for s in range(0, n, chunk)]
            old_logp = torch.cat(errors).mul(-lf.elbo_scale)  # [N, K]
        info = {"nfe_per_sample": steps * (1 if uncond is None else 2), "num_steps": steps}
        return Sampled(outputs, old_logp, action_mask, per_sample, {}, info)
