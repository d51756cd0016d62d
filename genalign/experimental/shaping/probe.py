"""POISE [257]: a baseline predicted from the policy's own internal states by a lightweight probe trained online, with
the cross-rollout construction that keeps the gradient unbiased (a stateful reward shaper of
:data:`REWARD_SHAPERS`; pair it with the ``reinforce`` estimator, which adds no baseline of its own).

The probe is a ridge regression on features of each completion: a fixed random projection of its mean last hidden
state (unit-normalised) and the mean and maximum of its token entropies, plus a bias. It is fitted on every earlier
step's (features, combined reward) pairs with exponential forgetting, from two running sums (``A = Σ γ^k ΦᵀΦ``,
``b = Σ γ^k Φᵀr``), so its state is small whatever the model's width and the fit is exact, not a gradient step.

With ``single_rollout`` (one rollout per prompt, ``algorithm.group_size: 1``) the features are those of the prompt's
state alone (the hidden state and entropy that predict the first action), which no sampled token can change, so each
sample's baseline is the probe's value of its own prompt and needs no sibling.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from genalign.algorithms._groups import Groups, group_sum, make_groups
from genalign.algorithms._validation import check_float_tensor
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.reward_shaping.base import REWARD_SHAPERS
from genalign.experimental.shaping.diversity import sequence_embeddings

#: entropy statistics appended to the projected hidden state (mean, max) and the bias
EXTRA_FEATURES = 3


def random_projection(width: int, dim: int, seed: int) -> Tensor:
    """``[H, d]`` float64 Gaussian projection with entries of variance ``1/d`` (the same for the same seed)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(width, dim, generator=generator, dtype=torch.float64) / dim**0.5


def probe_features(hidden: Tensor, entropy: Tensor, mask: Tensor, projection: Tensor) -> Tensor:
    """``[N, d + 3]`` float64: ``[P·unit(mean_t h_it), mean_t H_it, max_t H_it, 1]`` from ``hidden`` ``[N, T, H]``,
    ``entropy`` ``[N, T]`` and ``mask`` ``[N, T]`` (valid actions only)."""
    valid = mask.cpu() > 0
    mean_hidden = sequence_embeddings(hidden.cpu(), mask.cpu()).double()  # [N, H]
    unit = mean_hidden / mean_hidden.norm(dim=1, keepdim=True).clamp_min(1e-12)
    entropy = entropy.detach().double().cpu()
    count = valid.sum(1).clamp_min(1)
    mean_entropy = torch.where(valid, entropy, 0.0).sum(1) / count  # [N]
    max_entropy = torch.where(valid, entropy, -torch.inf).amax(1).clamp_min(0.0)  # [N]
    ones = torch.ones_like(mean_entropy)
    return torch.cat([unit @ projection, torch.stack([mean_entropy, max_entropy, ones], 1)], 1)


def first_action_mask(mask: Tensor) -> Tensor:
    """``[N, T]`` float: 1 at each row's first valid action of ``mask`` ``[N, T]`` (none for a row without one)."""
    valid = mask > 0
    return (valid & (valid.long().cumsum(1) == 1)).to(mask.dtype)


def cross_rollout_mean(values: Tensor, valid: Tensor, groups: Groups) -> tuple[Tensor, Tensor]:
    """``(mean over the OTHER valid samples of each sample's group [N], their number [N])`` of ``values`` ``[N]``."""
    filled = torch.where(valid, values, 0.0)  # [N]
    total = group_sum(filled[:, None], groups)[:, 0][groups.index]  # [N]
    count = group_sum(valid.to(values.dtype)[:, None], groups)[:, 0][groups.index]  # [N]
    others = count - valid.to(values.dtype)
    return (total - filled) / others.clamp_min(1.0), others


class ProbeBaseline:
    """The bound form of ``probe_baseline``: the probe's running sums, updated with each step's pairs after the
    step's baselines are computed (so a sample's baseline never depends on its own reward). Stateful
    (``state_dict`` holds the sums as float64 tensors): the trainer checkpoints it."""

    def __init__(
        self,
        *,
        projection_dim: int = 64,
        ridge: float = 1.0,
        forgetting: float = 0.9,
        seed: int = 0,
        single_rollout: bool = False,
    ) -> None:
        if projection_dim < 1 or not ridge > 0 or not 0 < forgetting <= 1:
            raise ValueError(f"probe_baseline: need projection_dim >= 1, ridge > 0 and forgetting in (0, 1]; got "
                             f"{projection_dim!r}, {ridge!r}, {forgetting!r}.")  # fmt: skip
        if not isinstance(single_rollout, bool):
            raise ValueError(f"probe_baseline: single_rollout={single_rollout!r} must be true or false.")
        self.dim, self.ridge, self.forgetting, self.seed = projection_dim, ridge, forgetting, seed
        self.single_rollout = single_rollout
        size = projection_dim + EXTRA_FEATURES
        self.gram = torch.zeros(size, size, dtype=torch.float64)  # Σ γ^k ΦᵀΦ
        self.moment = torch.zeros(size, dtype=torch.float64)  # Σ γ^k Φᵀr
        self.seen = 0
        self._projection: Tensor | None = None

    def projection(self, width: int) -> Tensor:
        if self._projection is None or self._projection.shape[0] != width:
            self._projection = random_projection(width, self.dim, self.seed)
        return self._projection

    def weights(self) -> Tensor:
        """``[d + 3]``: the ridge solution ``(A + λI)⁻¹ b`` of the pairs seen so far."""
        eye = torch.eye(self.gram.shape[0], dtype=torch.float64)
        return torch.linalg.solve(self.gram + self.ridge * eye, self.moment)

    def __call__(self, rewards: Tensor, batch: StepBatch) -> tuple[Tensor, dict[str, float]]:
        rewards = check_float_tensor(rewards, "rewards", "[N]")
        hidden = batch.require("hidden", "reward shaper 'probe_baseline'")
        entropy = batch.require("entropy", "reward shaper 'probe_baseline'")
        mask = first_action_mask(batch.mask) if self.single_rollout else batch.mask  # the prompt's state alone
        features = probe_features(hidden, entropy, mask, self.projection(hidden.shape[-1]))  # [N, d + 3]
        values = rewards.detach().double().cpu()
        valid = ~torch.isnan(values)
        predicted = features @ self.weights() if self.seen else None  # [N] the probe's value of each sample's states
        if predicted is not None and self.single_rollout:  # prompt-only features: its own prompt's value
            baseline = predicted
        else:  # cross-rollout: the siblings' values (before a fit: their rewards; single_rollout: the whole batch's)
            group_ids = torch.zeros_like(batch.group_ids) if self.single_rollout else batch.group_ids
            groups = make_groups(group_ids.cpu(), rewards.shape[0], min_size=1)
            source = predicted if predicted is not None else torch.where(valid, values, 0.0)
            baseline, others = cross_rollout_mean(source, valid, groups)  # [N]
            baseline = torch.where(others > 0, baseline, 0.0)
        stats = {"reward_shaping/probe_baseline_mean": float(baseline[valid].mean()) if bool(valid.any()) else 0.0}
        if predicted is not None and bool(valid.any()):
            stats["reward_shaping/probe_mse"] = float((predicted - values)[valid].square().mean())
        self.update(features[valid], values[valid])
        shaped = (values - baseline).to(rewards.device, rewards.dtype)
        return torch.where(valid.to(rewards.device), shaped, torch.nan), stats

    def update(self, features: Tensor, targets: Tensor) -> None:
        """Add this step's pairs (``features`` ``[n, d + 3]``, ``targets`` ``[n]``) with forgetting of the earlier."""
        self.gram = self.forgetting * self.gram + features.T @ features
        self.moment = self.forgetting * self.moment + features.T @ targets
        self.seen += int(targets.numel())

    def state_dict(self) -> dict[str, Any]:
        return {"gram": self.gram.clone(), "moment": self.moment.clone(), "seen": self.seen}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if tuple(state["gram"].shape) != tuple(self.gram.shape):
            raise ValueError(f"probe_baseline: the saved probe has {state['gram'].shape[0]} features, this config "
                             f"{self.gram.shape[0]}; resume with the same projection_dim.")  # fmt: skip
        self.gram = state["gram"].double().clone()
        self.moment = state["moment"].double().clone()
        self.seen = int(state["seen"])


@REWARD_SHAPERS.register(
    "probe_baseline",
    needs=("hidden", "entropy"),
    bind=ProbeBaseline,
    group_free="single_rollout",
    formula="φ_i = [P·unit(mean_t h_it), mean_t H_it, max_t H_it, 1]; w = (Σ_k γ^k Φ_kᵀΦ_k + λI)⁻¹ Σ_k γ^k Φ_kᵀr_k "
    "over earlier steps; v̂_i = mean_{j∈G, j≠i} w·φ_j (cross-rollout: from the siblings' states); r̃_i = r_i − v̂_i "
    "(first step: v̂_i = mean_{j≠i} r_j); single_rollout (group size 1): φ_i of the first action only (the prompt's "
    "state), v̂_i = w·φ_i (first step: the batch's leave-one-out mean); pair with advantage: reinforce",
    source="[257] POISE",
    summary="Baseline from a linear probe on the policy's hidden states and token entropies, trained online; each "
    "sample's baseline is predicted from its siblings' states, so it never sees the sample itself.",
)
def probe_baseline(
    rewards: Tensor,
    batch: StepBatch,
    *,
    projection_dim: int = 64,
    ridge: float = 1.0,
    forgetting: float = 0.9,
    seed: int = 0,
    single_rollout: bool = False,
) -> tuple[Tensor, dict[str, float]]:
    """POISE [257]: the value of a prompt is predicted by a lightweight probe from internal signals the policy's forward
    pass already computes (hidden states, token entropies), so no critic and no large group are needed for a
    baseline. Features of a trajectory depend on the trajectory, so using a sample's own features would bias the
    gradient; the cross-rollout construction predicts each sample's value from an independent rollout of the same
    prompt instead. The shaper returns ``r_i − v̂_i``; the ``reinforce`` estimator then uses it as the advantage
    (another estimator would subtract a group baseline again).

    Reading chosen: the probe's form and features are not in the abstract. genalign fits a ridge regression, exactly,
    on running sums with forgetting ``γ`` (the policy drifts, so old pairs fade); the features are a fixed random
    projection (dimension ``d``) of the unit-normalised mean last hidden state of the completion, which is
    conditioned on the prompt, and the mean and maximum token entropy. The cross-rollout value is the mean of the
    probe's predictions over the *other* samples of the group (all independent of the sample, which lowers the
    variance of a single pair). Before any step was seen the baseline is the siblings' mean reward (RLOO). Called
    directly, the function has no history (the first-step baseline); in training the bound :class:`ProbeBaseline`
    keeps the probe and is checkpointed with the run. A missing reward stays missing; a sample without a valid
    sibling keeps its reward.

    With ``single_rollout`` (POISE's one rollout per prompt, ``algorithm.group_size: 1``, for more prompts per
    step at the same cost) there is no independent rollout of the same prompt; reading chosen: the features are
    taken at the first action only (the last hidden state of the prompt and the entropy of the first next-token
    distribution: the same map over one action), which depend on the prompt and not on the sampled trajectory, so
    each sample's baseline is the probe's value of its own prompt and the gradient stays unbiased. Before the
    first fit the baseline is the mean reward of the batch's other samples (leave-one-out over the batch).

    Args:
        rewards: ``[N]`` combined rewards.
        batch: reads ``hidden`` ``[N, T, H]``, ``entropy`` ``[N, T]``, ``mask`` and ``group_ids``.
        projection_dim: ``d >= 1``.
        ridge: ``λ > 0``.
        forgetting: ``γ`` in ``(0, 1]`` (1: every earlier step counts alike).
        seed: the seed of the random projection.
        single_rollout: prompt-state features and no sibling (group size 1).
    Returns:
        ``(r̃ [N], {"reward_shaping/probe_baseline_mean", "reward_shaping/probe_mse" once the probe has data})``.
    """
    probe = ProbeBaseline(
        projection_dim=projection_dim, ridge=ridge, forgetting=forgetting, seed=seed, single_rollout=single_rollout
    )
    return probe(rewards, batch)
