"""Smart-GRPO [152]: a reward-guided cross-entropy search over the initial noise of each prompt before the GRPO
rollout.

For every prompt the search keeps a Gaussian ``N(μ, s² I)`` over the initial latent ``x_1``, starting at
``N(0, init_std² I)``. Each round draws ``K`` candidates, predicts each one's clean sample in one step
(``x̂_0 = z − σ_0 · v_θ(z, σ_0)``, one network call), decodes and scores it with the trainer's reward, and refits the
distribution to the ``T`` best candidates (smoothed: ``μ ← (1 − β) μ + β mean(elites)``, likewise for ``s``, the
std over the elites pooled across latent elements). After ``N`` rounds the group's rollouts start from the refined mean
(the paper's optimised noise) or from draws of the refined distribution.

Why the log-probs stay exact: only the initial latent changes. It is an input of the trajectory, not an action, and
carries no log-probability; every SDE step after it is sampled and re-scored with the unchanged dynamics, so the
behaviour log-prob is that of the SDE that produced the sample.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from genalign.pipelines.architectures.base import PromptEmbeddings, repeat_embeddings, select_embeddings
from genalign.pipelines.flow import guided_velocity
from genalign.policies.base import RewardProbe
from genalign.policies.flow.config import NoiseSearchConfig
from genalign.policies.flow.model import FlowModel


def refit(
    mean: Tensor, std: Tensor, candidates: Tensor, rewards: Tensor, *, elites: int, smoothing: float, min_std: float
) -> tuple[Tensor, Tensor]:
    """One cross-entropy update of ``N(mean, std²)`` per prompt.

    Args:
        mean: ``[B, ...]``; std: ``[B]``; candidates: ``[B, K, ...]``; rewards: ``[B, K]`` (NaN ranks last).
    Returns:
        the smoothed mean ``[B, ...]`` and std ``[B]`` fitted to the ``elites`` best candidates of each prompt.
    """
    ranked = torch.nan_to_num(rewards.float(), nan=-torch.inf)  # [B, K]
    top = ranked.topk(elites, dim=1).indices  # [B, E]
    index = top.reshape(*top.shape, *([1] * (candidates.dim() - 2))).expand(-1, -1, *candidates.shape[2:])
    chosen = candidates.gather(1, index)  # [B, E, ...]
    elite_mean = chosen.mean(1)  # [B, ...]
    elite_std = (chosen - elite_mean[:, None]).flatten(1).pow(2).mean(1).sqrt()  # [B], pooled over elements
    new_mean = (1 - smoothing) * mean + smoothing * elite_mean
    new_std = ((1 - smoothing) * std + smoothing * elite_std).clamp_min(min_std)
    return new_mean, new_std


class NoiseSearch:
    """Smart-GRPO's search of the initial noise (module docstring) on ``model``."""

    def __init__(self, model: FlowModel, config: NoiseSearchConfig) -> None:
        self.model = model
        self.config = config

    def _rewards(
        self, rows: list[dict[str, Any]], latents: Tensor, cond: PromptEmbeddings, uncond: PromptEmbeddings | None,
        guidance: float, probe: RewardProbe,
    ) -> Tensor:  # fmt: skip
        """``[n]`` reward of the one-step prediction from each latent ``[n, ...]``, in chunks of
        ``sample_batch_size``."""
        model = self.model
        sigma = model.scheduler.sigmas[0].float().to(latents.device)
        n, chunk = latents.shape[0], model.config.sample_batch_size or latents.shape[0]
        rewards = []
        for start in range(0, n, chunk):
            part = slice(start, min(start + chunk, n))
            x = latents[part]
            timestep = model.scheduler.timesteps[0].expand(x.shape[0]).to(x.device)  # [n]
            velocity = guided_velocity(
                model.arch, model.transformer, x, timestep, select_embeddings(cond, part),
                select_embeddings(uncond, part), guidance_scale=guidance,
            )  # fmt: skip
            predicted = x.float() - sigma * velocity.float()  # [n, ...]: x̂_0
            rewards.append(probe(rows[part], model.decode(predicted.to(x.dtype))).float().cpu())
        return torch.cat(rewards)

    @torch.no_grad()
    def initial_latents(
        self, rows: list[dict[str, Any]], group_size: int, num_steps: int, guidance: float, probe: RewardProbe | None
    ) -> tuple[Tensor, dict[str, float]]:
        """Initial latents ``[len(rows) * group_size, ...]`` (group members consecutive) from the refined
        distribution of each row, and the mean elite reward of each round for logging. Sets the schedule."""
        if probe is None:
            raise ValueError(
                "policy.noise_search needs the trainer's reward probe at rollout time; the trainer passes it when a "
                "credit rule needs step_rewards (e.g. algorithm.credit: [vgpo_values] or [dense_step_gains])."
            )
        cfg, model = self.config, self.model
        template = model.initial_latents(len(rows), num_steps)  # [B, ...]; sets the schedule
        cond, uncond = model.prompt_embeddings([row["prompt"] for row in rows], guidance)
        k = cfg.candidates
        cond_k, uncond_k = repeat_embeddings(cond, k), repeat_embeddings(uncond, k)
        rows_k = [row for row in rows for _ in range(k)]
        mean = torch.zeros_like(template, dtype=torch.float32)  # [B, ...]
        std = torch.full((len(rows),), float(cfg.init_std), device=template.device)  # [B]
        info: dict[str, float] = {}
        shape = (len(rows), k, *template.shape[1:])
        for round_index in range(cfg.rounds):
            noise = torch.randn(shape, generator=model.generator, device=template.device)  # [B, K, ...]
            candidates = mean[:, None] + std.reshape(-1, 1, *([1] * (template.dim() - 1))) * noise  # [B, K, ...]
            flat = candidates.flatten(0, 1).to(template.dtype)  # [B * K, ...]
            rewards = self._rewards(rows_k, flat, cond_k, uncond_k, guidance, probe).view(len(rows), k)  # [B, K]
            best = torch.nan_to_num(rewards, nan=-torch.inf).topk(cfg.elites, dim=1).values
            info[f"noise_search/elite_reward_round_{round_index}"] = float(best[torch.isfinite(best)].mean())
            mean, std = refit(
                mean, std, candidates, rewards.to(template.device), elites=cfg.elites, smoothing=cfg.smoothing,
                min_std=cfg.min_std,
            )  # fmt: skip
        latents = mean.repeat_interleave(group_size, dim=0)  # [B * G, ...]
        if cfg.group_start == "distribution":
            spread = std.repeat_interleave(group_size).reshape(-1, *([1] * (template.dim() - 1)))
            latents = latents + spread * torch.randn(latents.shape, generator=model.generator, device=latents.device)
        return latents.to(template.dtype), info
