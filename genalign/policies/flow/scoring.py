"""Scorers of the flow policy: re-score a stored training rollout under the current parameters.

* :class:`SDEStepScorer` (Flow-GRPO [319]): the Gaussian log-probability of each stored SDE transition, evaluated by the
  very :meth:`FlowSDEScheduler.step` the sampler used (``prev_sample`` given), so the rollout's log-probs are exact;
  the step's Gaussian entropy (fixed by the schedule), the closed-form KL in mean space to the reference (LoRA
  adapters disabled) and the reference's log-probability of the same transition on request.
* :class:`FlowMatchingScorer` (likelihood-free training): the flow-matching error at ``K`` stored points per sample.
  ``logp = −elbo_scale · error`` is V-GRPO's ELBO proxy [10] for the ratio objective; on request the current, old
  (an exponential moving average of the weights) and target velocities for DiffusionNFT, ``|v_θ − v_ref|²`` as the
  flow-matching KL proxy and the reference's proxy ``−elbo_scale · |v_ref − v*|²`` (Diffusion-DPO's reference error).
  Training forwards are conditional only (no classifier-free guidance; FLUX gets its embedded guidance), as in the
  CFG-free training of both methods.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager

import torch
from torch import Tensor

from genalign.algorithms.objectives.likelihood_free import element_mse
from genalign.algorithms.scores import ScoreOutput, ScoreRequest, VelocityPredictions
from genalign.pipelines.flow import guided_velocity
from genalign.policies.base import Rollout
from genalign.policies.capabilities import REFERENCE_FEATURES
from genalign.policies.flow import stored
from genalign.policies.flow.components import ParameterAverage
from genalign.policies.flow.config import KL_ESTIMATORS
from genalign.policies.flow.model import FlowModel


def _check_kl(request: ScoreRequest, model: FlowModel) -> bool:
    """Raise on a reference feature the policy cannot compute; return whether the request needs the reference."""
    estimator = request.param("kl", "k3")
    if "kl" in request and estimator not in KL_ESTIMATORS:
        raise ValueError(f"kl_estimator={estimator!r} is not supported by the flow policy; use one of {KL_ESTIMATORS}.")
    wanted = sorted(REFERENCE_FEATURES & request.features)
    if wanted and model.config.lora.rank == 0 and model.anchor is None:
        raise ValueError(
            f"{wanted[0]} needs a reference policy; with policy.lora.rank=0 and no moving anchor there is none. Use "
            "LoRA, set policy.anchor_every > 0, or drop the KL weight / the objective that reads the reference."
        )
    return bool(wanted)


class SDEStepScorer:
    """Log-probs ``[n, T]`` of the stored transitions (grad only through trained steps); entropy / KL on request."""

    def __init__(self, model: FlowModel) -> None:
        self.model = model

    def score(self, rollout: Rollout, request: ScoreRequest) -> ScoreOutput:
        needs_reference = _check_kl(request, self.model)
        model, data = self.model, rollout.per_sample
        latents = stored.require(data, stored.LATENTS).to(model.device)  # [n, T + 1, ...]
        cond, uncond = stored.stored_embeddings(data, model.device)
        model.set_rollout_schedule(rollout.info, rollout.num_actions, latents[:, 0])
        log_probs, entropy, kl, ref_logp = self.transitions(
            latents,
            rollout.action_mask.bool().to(model.device),
            cond,
            uncond,
            guidance=float(rollout.info.get("guidance_scale", model.config.guidance_scale)),
            noise_level=data[stored.NOISE_LEVEL].to(model.device),
            reference=model.reference if needs_reference else None,
        )
        features = {"entropy": entropy if "entropy" in request else None}
        features |= {"kl": kl if "kl" in request else None, "ref_logp": ref_logp if "ref_logp" in request else None}
        return ScoreOutput(log_probs, features)

    def transitions(
        self,
        latents: Tensor,
        step_mask: Tensor,
        cond: dict[str, Tensor],
        uncond: dict[str, Tensor] | None,
        *,
        guidance: float,
        noise_level: Tensor,
        reference: Callable[[], AbstractContextManager] | None,
    ) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
        """``(log_probs, entropy, kl, ref_log_probs)`` ``[n, S]`` float32 (0 where a step is not scored; kl and the
        reference's log-probs of the same transitions None without ``reference``).

        Args:
            latents: ``[n, S + 1, ...]`` stored states; step_mask: ``[n, S]`` bool, the steps to score (the
                transformer runs once per step that any sample needs, on the whole micro-batch).
            noise_level: ``[n, S]`` levels used in the rollout.
            reference: a context-manager factory inside which the transformer is the reference policy.
        """
        arch, transformer, scheduler = self.model.arch, self.model.transformer, self.model.scheduler
        n, num_steps = step_mask.shape
        levels = noise_level.float().expand(n, num_steps)  # [n, S]
        zeros = torch.zeros(n, device=latents.device, dtype=torch.float32)
        reduce = torch.mean if scheduler.config.log_prob_reduction == "mean" else torch.sum
        columns: dict[str, list[Tensor]] = {"log_prob": [], "entropy": [], "kl": [], "ref_log_prob": []}
        for i in range(num_steps):
            if not bool(step_mask[:, i].any()):
                for values in columns.values():
                    values.append(zeros)
                continue
            x, x_next = latents[:, i], latents[:, i + 1]  # [n, ...]
            timestep = scheduler.timesteps[i].expand(n).to(latents.device)  # [n]
            velocity = guided_velocity(arch, transformer, x, timestep, cond, uncond, guidance_scale=guidance)
            out = scheduler.step(velocity, None, x, step_index=i, prev_sample=x_next, noise_level=levels[:, i])
            active = step_mask[:, i].to(latents.device) & (out.std.flatten(1)[:, 0] > 0)  # [n]
            columns["log_prob"].append(torch.where(active, out.log_prob, zeros))
            safe_std = torch.where(out.std > 0, out.std, torch.ones_like(out.std)).detach()  # [n, 1, ...]
            gaussian = (torch.log(safe_std) + 0.5 * math.log(2 * math.pi * math.e)).expand_as(x)
            columns["entropy"].append(torch.where(active, reduce(gaussian.flatten(1), dim=1), zeros))
            if reference is not None:
                with torch.no_grad(), reference():
                    ref_velocity = guided_velocity(
                        arch, transformer, x, timestep, cond, uncond, guidance_scale=guidance
                    )
                    ref = scheduler.step(
                        ref_velocity, None, x, step_index=i, prev_sample=x_next, noise_level=levels[:, i]
                    )
                kl = reduce(((out.mean - ref.mean) ** 2 / (2 * safe_std**2)).flatten(1), dim=1)  # [n]
                columns["kl"].append(torch.where(active, kl, zeros))
                columns["ref_log_prob"].append(torch.where(active, ref.log_prob.float(), zeros))
        kl = torch.stack(columns["kl"], dim=1) if reference is not None else None  # [n, S]
        ref_log_probs = torch.stack(columns["ref_log_prob"], dim=1) if reference is not None else None  # [n, S]
        return torch.stack(columns["log_prob"], dim=1), torch.stack(columns["entropy"], dim=1), kl, ref_log_probs


def flow_matching_points(
    clean: Tensor, num_points: int, *, sampling: str, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """Draw ``K`` points per sample: sigmas ``[N, K]`` in ``(0.001, 0.999)`` and noise ``[N, K, ...]`` (float32)."""
    n = clean.shape[0]
    if sampling == "uniform":
        sigmas = torch.rand(n, num_points, generator=generator)
    elif sampling == "logit_normal":
        sigmas = torch.sigmoid(torch.randn(n, num_points, generator=generator))
    else:
        raise ValueError(f"timestep_sampling={sampling!r} is unknown; use 'uniform' or 'logit_normal'.")
    noise = torch.randn((n, num_points, *clean.shape[1:]), generator=generator)  # [N, K, ...]
    return sigmas.clamp(1e-3, 1 - 1e-3), noise


def noised(clean: Tensor, sigma: Tensor, noise: Tensor) -> tuple[Tensor, Tensor]:
    """Rectified-flow interpolation ``x = (1 - sigma) x_0 + sigma eps`` ``[n, ...]`` and target ``v* = eps - x_0``."""
    s = sigma.reshape(-1, *([1] * (clean.dim() - 1)))  # [n, 1, ...]
    return (1 - s) * clean + s * noise, noise - clean


class FlowMatchingScorer:
    """Likelihood-free scoring at the stored flow-matching points (module docstring).

    Args:
        old: the parameter average used as DiffusionNFT's "old" model (None: velocities cannot be requested).
    """

    def __init__(self, model: FlowModel, old: ParameterAverage | None) -> None:
        self.model = model
        self.old = old

    def _velocity(self, x: Tensor, sigma: Tensor, cond: dict[str, Tensor]) -> Tensor:
        """Conditional (CFG-free) velocity ``[n, ...]`` at noise levels ``sigma`` ``[n]``."""
        model = self.model
        timestep = (sigma * model.scheduler.config.num_train_timesteps).to(x.device)  # [n]
        return guided_velocity(
            model.arch, model.transformer, x, timestep, cond, None, guidance_scale=model.config.guidance_scale
        )

    def points(self, rollout: Rollout) -> tuple[Tensor, list[tuple[Tensor, Tensor, Tensor]], Tensor]:
        """Flow-matching errors ``[n, K]``, the ``(x_k, v_θ, target)`` of each point, and the sigmas ``[n, K]``."""
        data, device = rollout.per_sample, self.model.device
        clean = stored.require(data, stored.CLEAN).to(device)  # [n, ...]
        cond, _ = stored.stored_embeddings(data, device)
        sigmas, noise = data[stored.SIGMAS].to(device), data[stored.NOISE].to(device)  # [n, K], [n, K, ...]
        errors, kept = [], []
        for k in range(sigmas.shape[1]):
            x, target = noised(clean, sigmas[:, k], noise[:, k])
            velocity = self._velocity(x, sigmas[:, k], cond)  # [n, ...]
            errors.append(element_mse(velocity, target))
            kept.append((x, velocity, target))
        return torch.stack(errors, dim=1), kept, sigmas

    def log_likelihood_proxy(self, rollout: Rollout) -> Tensor:
        """``[n, K]`` ``−elbo_scale · error`` (the rollout's old log-probs are this at sampling time)."""
        return -self.model.config.likelihood_free.elbo_scale * self.points(rollout)[0]

    def score(self, rollout: Rollout, request: ScoreRequest) -> ScoreOutput:
        needs_reference = _check_kl(request, self.model)
        if "entropy" in request:
            raise ValueError("likelihood-free flow training has no per-action entropy; set the entropy weight to 0.")
        errors, kept, sigmas = self.points(rollout)
        cond, _ = stored.stored_embeddings(rollout.per_sample, self.model.device)
        velocity = None
        if "velocity" in request:
            if self.old is None:
                raise ValueError("velocity predictions need the old model: set policy.likelihood_free.method='nft'.")
            with torch.no_grad(), self.old.applied():
                v_old = [self._velocity(x, sigmas[:, k], cond) for k, (x, _, _) in enumerate(kept)]
            velocity = VelocityPredictions(
                current=torch.stack([v for _, v, _ in kept], dim=1),  # [n, K, ...]
                old=torch.stack(v_old, dim=1),
                target=torch.stack([t for _, _, t in kept], dim=1),
            )
        scale = self.model.config.likelihood_free.elbo_scale
        kl = ref_logp = None
        if needs_reference:
            with torch.no_grad(), self.model.reference():
                refs = [self._velocity(x, sigmas[:, k], cond) for k, (x, _, _) in enumerate(kept)]
            if "kl" in request:
                kl = torch.stack([element_mse(v, r) for (_, v, _), r in zip(kept, refs, strict=True)], dim=1)  # [n, K]
            if "ref_logp" in request:  # the reference's ELBO proxy at the same points (Diffusion-DPO's ref error)
                ref_errors = [element_mse(r, target) for (_, _, target), r in zip(kept, refs, strict=True)]
                ref_logp = -scale * torch.stack(ref_errors, dim=1)  # [n, K]
        return ScoreOutput(-scale * errors, {"velocity": velocity, "kl": kl, "ref_logp": ref_logp})
