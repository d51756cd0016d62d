"""SAS [118] self-aware credit: per-step advantages of a masked diffusion LM's decoding order from its own
pathwise log-likelihood (rule of :data:`~genalign.algorithms.credit.base.CREDIT_RULES`).

SAS bounds the KL mismatch of sequential (any-order or semi-autoregressive) decoding by the model's pathwise
log-likelihood along the decoded order, which yields a dense reward per decoding step: the log-probability, under
the frozen denoiser, of the tokens committed at that step, ``r_s = Σ_{j committed at s} log p_θ(x_j | x_s)``
(rollout signal ``path_logp`` ``[N, S]``, recorded by the diffusion-LM sampler with a trainable decoding policy).
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms._groups import group_stats, make_groups
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.signals import declare_signal

declare_signal("path_logp", ("N", "S"), "rollout",
               "Masked diffusion LMs sampled with a trainable decoding policy: the summed log-probability, under the "
               "denoiser, of the tokens committed at each of the S decoding steps, in the state they were decoded from.",
               source="[118] SAS")  # fmt: skip


def self_aware_step_advantages(path_logp: Tensor, group_ids: Tensor, *, eps: float = 1e-4) -> Tensor:
    """Group-normalised returns of the self-aware reward.

    ``G_s = Σ_{s' >= s} r_{s'}`` (the log-likelihood still to be collected from step ``s`` on; ``G_0`` is the
    pathwise log-likelihood of the whole answer), then ``Â_s = (G_s − mean_group(G_s)) / (std_group(G_s) + ε)``
    per step index across the samples of a group (population std).

    Args:
        path_logp: ``[N, S]`` float ``r_s`` per decoding step; group_ids: ``[N]``.

    Returns:
        ``[N, S]`` float32 advantages.
    """
    returns = path_logp.float().flip(1).cumsum(1).flip(1)  # [N, S] reward-to-go
    groups = make_groups(group_ids.cpu(), returns.shape[0], min_size=1)
    stats = group_stats(returns.cpu(), groups, unbiased=False)  # [G, S]
    mean, std = stats.mean[groups.index], stats.std[groups.index]  # [N, S]
    return ((returns.cpu() - mean) / (std + eps)).to(path_logp.device)  # [N, S]


@CREDIT_RULES.register(
    "self_aware_returns",
    needs=("path_logp",),
    formula="r_s = Σ_{j decoded at s} log p_θ(x_j | x_s); G_s = Σ_{s'≥s} r_s'; "
    "A_s = (G_s − mean_group G_s) / (std_group G_s + ε) + λ·A_s^in on the S decoding actions",
    source="[118] SAS (Self-Aware Scheduling)",
    summary="Dense self-aware advantages of a diffusion LM's decoding-order actions from the pathwise "
    "log-likelihood per step, normalised per step within the group; other actions keep their advantages.",
)
def self_aware_returns(advantages: Tensor, batch: StepBatch, *, task_weight: float = 0.0, eps: float = 1e-4) -> Tensor:
    """SAS [118]: the advantages of the ``S`` decoding actions (the last ``S`` columns of the action axis, where the
    diffusion-LM policy puts them) become ``Â_s + task_weight · A_in`` (:func:`self_aware_step_advantages`), 0 on
    steps without a choice (``mask`` 0); the earlier columns (the denoiser's likelihood-proxy actions in joint
    training) keep their incoming advantages.

    Reading chosen: the abstract derives the dense reward from the pathwise log-likelihood; the reward-to-go with a
    per-step group baseline is our form of "dense" GRPO credit. ``task_weight = 0`` (default) trains the order on the
    self-aware reward alone, as the abstract's frozen-denoiser setting; ``task_weight > 0`` adds the task reward's
    group advantage (this library's option).

    Args:
        advantages: ``[N, T]`` incoming per-action advantages, ``T >= S``.
        batch: reads ``path_logp`` ``[N, S]``, ``group_ids`` and ``mask``.
    """
    if eps <= 0:
        raise ValueError(f"self_aware_returns: eps={eps} must be > 0 (e.g. 1e-4).")
    path_logp = batch.require("path_logp", "credit rule 'self_aware_returns'")
    steps, actions = path_logp.shape[1], advantages.shape[1]
    if steps > actions:
        raise ValueError(
            f"credit rule 'self_aware_returns': path_logp has {steps} decoding steps but the action axis has only "
            f"{actions} actions; use it with a diffusion_lm policy whose decoding_policy is set."
        )
    dense = self_aware_step_advantages(path_logp, batch.group_ids, eps=eps).to(advantages)  # [N, S]
    trained = (batch.mask[:, actions - steps :] > 0).to(advantages)  # [N, S]
    decoding = (dense + task_weight * advantages[:, actions - steps :]) * trained  # [N, S]
    return torch.cat([advantages[:, : actions - steps], decoding], dim=1)  # [N, T]
