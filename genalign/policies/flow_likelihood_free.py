"""Likelihood-free objectives for flow models: DiffusionNFT and V-GRPO's ELBO surrogate.

Neither needs the SDE step log-probability, so training rollouts may be deterministic (ODE) and only the final clean
latent ``x_0`` of each sample is kept. Each sample gets ``K`` flow-matching points ``(sigma_k, eps_k)`` drawn at
rollout time and stored, ``x_k = (1 - sigma_k) x_0 + sigma_k eps_k``, target velocity ``v* = eps_k - x_0``; each
point is one action of the ``[N, K]`` action axis.

* **V-GRPO** [10] (``method="elbo"``): the flow-matching error is (up to constants and weighting) the negative ELBO,
  so ``log pi(x_0) ~ -scale * |v_theta(x_k) - v*|^2`` (mean over latent elements) is the log-likelihood proxy of
  action ``k``. ``score`` returns it as ``logp``, and the shared ratio objective (any ratio level and clip form) is
  used unchanged; ``old_logp`` is the same function at rollout time on the stored points, so the first ratio is 1 up
  to batching rounding.
* **DiffusionNFT** (``method="nft"``, shared/reference/formulas.md §5): the advantage is mapped to an optimality
  probability ``r = 0.5 + 0.5 clip(A / c, -1, 1)``; with the "old" velocity ``v_old`` (a copy of the trainable
  weights updated by decay, ``old <- d old + (1 - d) theta`` after each optimizer step) the implicit positive and
  negative policies are ``v+ = beta v_theta + (1 - beta) v_old`` and ``v- = (1 + beta) v_old - beta v_theta`` and
  the loss is ``r |v+ - v*|^2 + (1 - r) |v- - v*|^2``. The policy defines the trainer hook ``objective``.

Training forwards are conditional only (no classifier-free guidance; FLUX gets its embedded guidance), as in the
CFG-free training of both methods; rollouts use the configured guidance.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

import torch
from torch import Tensor

from genalign.pipelines.flow import adapters_disabled, guided_velocity
from genalign.policies.base import Rollout, ScoreOutput
from genalign.policies.flow import COND, KL_ESTIMATORS, FlowPolicy, FlowPolicyConfig
from genalign.schedulers.train_steps import select_train_steps

CLEAN, SIGMAS, NOISE = "clean_latents", "fm_sigmas", "fm_noise"  # per_sample keys


def sample_flow_matching_points(
    clean: Tensor, num_points: int, *, sampling: Literal["uniform", "logit_normal"], generator: torch.Generator
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


def element_mse(a: Tensor, b: Tensor) -> Tensor:
    """``[n]`` mean over latent elements of ``(a - b)^2``."""
    return ((a.float() - b.float()) ** 2).flatten(1).mean(dim=1)


def nft_loss(v_theta: Tensor, v_old: Tensor, target: Tensor, optimality: Tensor, *, beta: float) -> Tensor:
    """DiffusionNFT per-sample loss ``[n]``: ``r |v+ - v*|^2 + (1 - r) |v- - v*|^2`` with
    ``v+ = beta v_theta + (1 - beta) v_old`` and ``v- = (1 + beta) v_old - beta v_theta`` (``optimality`` = ``r`` [n])."""
    positive = beta * v_theta + (1 - beta) * v_old  # [n, ...]
    negative = (1 + beta) * v_old - beta * v_theta  # [n, ...]
    return optimality * element_mse(positive, target) + (1 - optimality) * element_mse(negative, target)


def optimality_probability(advantages: Tensor, *, clip: float) -> Tensor:
    """``r = 0.5 + 0.5 clip(A / clip, -1, 1)`` in ``[0, 1]`` (same shape as ``advantages``)."""
    return 0.5 + 0.5 * (advantages.float() / clip).clamp(-1.0, 1.0)


class LikelihoodFreeFlowPolicy(FlowPolicy):
    """The flow policy with a likelihood-free training signal (V-GRPO as is; DiffusionNFT in the subclass);
    evaluation rollouts, LoRA, EMA, save/load unchanged."""

    def __init__(self, config: FlowPolicyConfig, device: str | torch.device = "cpu") -> None:
        super().__init__(config, device)
        self.method = config.likelihood_free.method
        self.point_generator = torch.Generator().manual_seed(config.seed + 2)
        self._old: list[Tensor] | None = None
        if self.method == "nft":
            self._old = [p.detach().float().clone() for p in self.trainable_parameters()]
        self._nft_cache: tuple[int, Tensor, Tensor, Tensor] | None = None

    # ------------------------------------------------------------------------------------- old model (NFT)
    @contextmanager
    def _old_weights(self) -> Iterator[None]:
        """Inside the block the trainable weights are the decayed "old" copy (DiffusionNFT)."""
        assert self._old is not None
        live = [p.detach().clone() for p in self.trainable_parameters()]
        for param, old in zip(self.trainable_parameters(), self._old, strict=True):
            param.data.copy_(old.to(param.dtype))
        try:
            yield
        finally:
            for param, value in zip(self.trainable_parameters(), live, strict=True):
                param.data.copy_(value)

    @torch.no_grad()
    def after_optimizer_step(self) -> None:
        """EMA for evaluation (parent) and the DiffusionNFT old model, ``old <- d old + (1 - d) theta``."""
        super().after_optimizer_step()
        if self._old is None:
            return
        decay = self.config.likelihood_free.old_decay
        for old, param in zip(self._old, self.trainable_parameters(), strict=True):
            old.mul_(decay).add_(param.detach().float(), alpha=1 - decay)

    def state_dict_extra(self) -> dict[str, Any]:
        return super().state_dict_extra() | {"nft_old": self._old}

    def load_state_dict_extra(self, state: dict[str, Any]) -> None:
        super().load_state_dict_extra(state)
        if state.get("nft_old") is not None:
            self._old = [t.float().clone() for t in state["nft_old"]]

    # ----------------------------------------------------------------------------------------------- rollout
    @torch.no_grad()
    def rollout(
        self, rows: list[dict[str, Any]], group_size: int, *, mode: Literal["train", "eval"] = "train"
    ) -> Rollout:
        """Evaluation: the parent's. Training: sample (ODE by default), keep ``x_0``, draw the ``K`` points."""
        if mode == "eval":
            return super().rollout(rows, group_size, mode=mode)
        self._check_rows(rows, group_size)
        cfg, lf = self.config, self.config.likelihood_free
        expanded = [row for row in rows for _ in range(group_size)]
        prompts = [row["prompt"] for row in expanded]
        n = len(expanded)
        if lf.deterministic_rollout:
            sde = torch.zeros(n, cfg.num_steps, dtype=torch.bool)
        else:
            sde = select_train_steps(
                cfg.train_steps,
                num_steps=cfg.num_steps,
                num_samples=n,
                iteration=self.iteration,
                generator=self.mask_generator,
            ).sde
        trajectory, outputs, cond, uncond = self._sample(
            prompts,
            sde,
            num_steps=cfg.num_steps,
            guidance=cfg.guidance_scale,
            record_latents=False,
            group_size=group_size,
        )
        chunk = cfg.sample_batch_size or n
        clean = trajectory.final.float()  # [N, ...]
        sigmas, noise = sample_flow_matching_points(
            clean.cpu(), lf.num_timesteps, sampling=lf.timestep_sampling, generator=self.point_generator
        )
        per_sample: dict[str, Tensor | list[Any]] = {CLEAN: clean, SIGMAS: sigmas.to(self.device)}
        per_sample[NOISE] = noise.to(self.device)  # [N, K, ...]
        per_sample |= {COND + k: v for k, v in cond.items()}
        action_mask = torch.ones(n, lf.num_timesteps, device=self.device)  # [N, K]
        old_logp = torch.zeros_like(action_mask)
        if self.method == "elbo":
            draft = Rollout(expanded, outputs, torch.zeros(n, dtype=torch.long), old_logp, action_mask, per_sample)
            old_logp = torch.cat(
                [self._errors(draft.select(range(s, min(s + chunk, n))))[0] for s in range(0, n, chunk)]
            ).mul(-lf.elbo_scale)  # [N, K]
        cfg_passes = 1 if uncond is None else 2
        return Rollout(
            rows=expanded,
            outputs=outputs,
            group_ids=torch.arange(len(rows)).repeat_interleave(group_size),
            old_logp=old_logp,
            action_mask=action_mask,
            per_sample=per_sample,
            info={"nfe_per_sample": cfg.num_steps * cfg_passes, "num_steps": cfg.num_steps},
        )

    # ------------------------------------------------------------------------------------------------- score
    def _velocity(self, x: Tensor, sigma: Tensor, cond: dict[str, Tensor]) -> Tensor:
        """Conditional (CFG-free) velocity ``[n, ...]`` at noise levels ``sigma`` ``[n]``."""
        timestep = (sigma * self.sampler.scheduler.config.num_train_timesteps).to(x.device)  # [n]
        return guided_velocity(
            self.sampler.arch, self.transformer, x, timestep, cond, None, guidance_scale=self.config.guidance_scale
        )

    def _errors(self, rollout: Rollout, *, keep: bool = False) -> tuple[Tensor, list[tuple[Tensor, ...]]]:
        """Flow-matching errors ``[n, K]`` of the stored points; with ``keep`` also ``(v_theta, target)`` per point."""
        data = rollout.per_sample
        if CLEAN not in data:
            raise ValueError("this rollout has no stored clean latents (an evaluation rollout?); score training ones.")
        clean = data[CLEAN].to(self.device)  # [n, ...]
        cond = {k[len(COND) :]: v.to(self.device) for k, v in data.items() if k.startswith(COND)}
        sigmas, noise = data[SIGMAS].to(self.device), data[NOISE].to(self.device)  # [n, K], [n, K, ...]
        columns, kept = [], []
        for k in range(sigmas.shape[1]):
            x, target = noised(clean, sigmas[:, k], noise[:, k])
            velocity = self._velocity(x, sigmas[:, k], cond)  # [n, ...]
            columns.append(element_mse(velocity, target))
            if keep:
                kept.append((x, velocity, target))
        return torch.stack(columns, dim=1), kept  # [n, K]

    def score(self, rollout: Rollout, *, entropy: bool = False, kl_estimator: str | None = None) -> ScoreOutput:
        """``logp`` ``[n, K]`` = ``-elbo_scale * flow-matching error`` (V-GRPO's proxy; also reported for NFT);
        ``kl`` (on request) = ``|v_theta - v_ref|^2`` per point, the flow-matching KL proxy; no entropy.

        For DiffusionNFT the velocities of this call are kept for :meth:`objective` on the same batch object.
        """
        if kl_estimator is not None and kl_estimator not in KL_ESTIMATORS:
            raise ValueError(f"kl_estimator={kl_estimator!r} is not supported; use one of {KL_ESTIMATORS}.")
        if kl_estimator is not None and self.config.lora_rank == 0:
            raise ValueError("KL needs a reference policy; with lora_rank=0 there is none. Use LoRA or KL weight 0.")
        errors, kept = self._errors(rollout, keep=self.method == "nft" or kl_estimator is not None)
        cond = {k[len(COND) :]: v.to(self.device) for k, v in rollout.per_sample.items() if k.startswith(COND)}
        sigmas = rollout.per_sample[SIGMAS].to(self.device)  # [n, K]
        if self.method == "nft":
            with torch.no_grad(), self._old_weights():
                v_old = [self._velocity(x, sigmas[:, k], cond) for k, (x, _, _) in enumerate(kept)]
            self._nft_cache = (
                id(rollout),
                torch.stack([v for _, v, _ in kept], dim=1),  # [n, K, ...]
                torch.stack(v_old, dim=1),  # [n, K, ...]
                torch.stack([t for _, _, t in kept], dim=1),  # [n, K, ...]
            )
        kl = None
        if kl_estimator is not None:
            with torch.no_grad(), adapters_disabled(self.transformer):
                refs = [self._velocity(x, sigmas[:, k], cond) for k, (x, _, _) in enumerate(kept)]
            kl = torch.stack([element_mse(v, r) for (_, v, _), r in zip(kept, refs, strict=True)], dim=1)  # [n, K]
        return ScoreOutput(logp=-self.config.likelihood_free.elbo_scale * errors, entropy=None, kl=kl)


class DiffusionNFTFlowPolicy(LikelihoodFreeFlowPolicy):
    """DiffusionNFT: the likelihood-free policy plus the trainer's ``objective`` hook (V-GRPO has no such hook, so
    the trainer applies the shared ratio objective to its ELBO proxy)."""

    def objective(self, batch: Rollout, score_output: ScoreOutput, advantages: Tensor) -> tuple[Tensor, dict]:
        """Trainer hook: DiffusionNFT per-action loss ``[n, K]`` from the velocities of the preceding
        ``score(batch)`` (one forward serves both); metrics are detached scalars."""
        if self._nft_cache is None or self._nft_cache[0] != id(batch):
            raise RuntimeError("objective() must follow score() on the same batch (DiffusionNFT reuses its forward).")
        _, v_theta, v_old, target = self._nft_cache
        self._nft_cache = None
        lf = self.config.likelihood_free
        adv = advantages.float()
        adv = adv.mean(dim=1) if adv.dim() == 2 else adv  # [n]; NFT credits the whole sample
        optimality = optimality_probability(adv, clip=lf.nft_advantage_clip).to(v_theta.device)  # [n]
        n, k = v_theta.shape[:2]
        loss = nft_loss(
            v_theta.flatten(0, 1),
            v_old.flatten(0, 1),
            target.flatten(0, 1),
            optimality.repeat_interleave(k),
            beta=lf.nft_beta,
        ).view(n, k)  # [n, K]
        metrics = {"nft/optimality_mean": optimality.mean().detach(), "nft/loss": loss.mean().detach()}
        return loss, metrics
