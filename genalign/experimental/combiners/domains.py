"""DRPO [25]: group-normalised rewards scaled hierarchically, first by the rarity of each prompt's domain, then by
the difficulty cluster of the prompt within its domain (a stateful reward combiner of :data:`REWARD_COMBINERS`).

The domain of a sample is a reward column holding a label of its row (the ``row_label`` reward, e.g. the clinical
domain or modality); that column is left out of the combined reward. Signature: :mod:`genalign.algorithms.reward_combiners`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from genalign.algorithms._groups import Groups, group_stats, make_groups
from genalign.algorithms.advantages.group_baselines import grpo
from genalign.algorithms.reward_combiners import (
    REWARD_COMBINERS,
    check_combiner_inputs,
    reward_statistics,
    weighted_nansum,
)

#: the label of a sample whose label column is missing (NaN): its own domain
MISSING_LABEL = -1.0


def kmeans_1d(values: Tensor, clusters: int, *, iterations: int = 50) -> Tensor:
    """``[M]`` long: 1-D k-means clusters of ``values`` ``[M]``, numbered by increasing centre. Centres start at the
    quantiles ``(j + ½)/k`` and move to the mean of their members (Lloyd) until no assignment changes; a tie goes to
    the lower centre, an empty cluster keeps its centre. Deterministic."""
    k = max(1, min(clusters, values.numel()))
    if values.numel() == 0 or k == 1:
        return torch.zeros(values.shape, dtype=torch.long, device=values.device)
    values = values.double()
    levels = (torch.arange(k, dtype=torch.float64, device=values.device) + 0.5) / k
    centres = torch.quantile(values, levels)  # [k]
    assignment = torch.full(values.shape, -1, dtype=torch.long, device=values.device)
    for _ in range(iterations):
        updated = (values[:, None] - centres[None, :]).abs().argmin(1)  # [M] first (lowest) centre on ties
        if torch.equal(updated, assignment):
            break
        assignment = updated
        sums = torch.zeros(k, dtype=torch.float64, device=values.device).index_add_(0, assignment, values)
        counts = torch.bincount(assignment, minlength=k).double()
        centres = torch.where(counts > 0, sums / counts.clamp_min(1.0), centres)
    return torch.argsort(torch.argsort(centres))[assignment]  # renumber by increasing centre


def normalised_weights(logits: Tensor, mass: Tensor) -> Tensor:
    """``[C]`` weights ``∝ exp(logits)`` (``[C]``) scaled so that their mean weighted by ``mass`` ``[C]`` is 1."""
    raw = torch.exp(logits - logits.max())
    return raw * mass.sum() / (raw * mass).sum()


def domain_weights(labels: Tensor, counts: Mapping[float, float], temperature: float) -> tuple[Tensor, Tensor]:
    """``(w [D], domain of each group [G])`` for the group labels ``labels`` ``[G]``: ``w_d ∝ n_d^(−1/T)`` with
    ``n_d`` the prompts of domain ``d`` in ``counts`` (earlier steps and this one), mean 1 over the batch's groups."""
    domains, of_group = labels.unique(return_inverse=True)  # [D], [G]
    seen = torch.tensor([counts[float(d)] for d in domains.tolist()], dtype=torch.float64)  # [D]
    in_batch = torch.bincount(of_group, minlength=domains.numel()).double()  # [D]
    return normalised_weights(-seen.log() / temperature, in_batch), of_group


def difficulty_weights(means: Tensor, domain: Tensor, clusters: int, temperature: float) -> Tensor:
    """``[G]`` weight of each group: within its domain, the groups are clustered by mean reward (``means`` ``[G]``,
    :func:`kmeans_1d`), cluster ``c`` gets ``∝ exp(−μ_c/T)`` (``μ_c`` its mean reward), mean 1 over the domain's
    groups."""
    weights = torch.ones_like(means)
    for d in domain.unique().tolist():
        members = torch.nonzero(domain == d).flatten()
        cluster = kmeans_1d(means[members], clusters)  # [m]
        sizes = torch.bincount(cluster).double()  # [C]
        centres = torch.zeros_like(sizes).index_add_(0, cluster, means[members]) / sizes.clamp_min(1.0)  # [C] μ_c
        weights[members] = normalised_weights(-centres / temperature, sizes)[cluster]
    return weights


def check_temperatures(rarity_temperature: float, difficulty_temperature: float, difficulty_clusters: int) -> None:
    if not (rarity_temperature > 0 and difficulty_temperature > 0 and difficulty_clusters >= 1):
        raise ValueError(f"domain_scaled: need rarity_temperature > 0, difficulty_temperature > 0 and "
                         f"difficulty_clusters >= 1; got {rarity_temperature!r}, {difficulty_temperature!r}, "
                         f"{difficulty_clusters!r}.")  # fmt: skip


def scaled_by_domain(
    rewards: Tensor, group_ids: Tensor, weights: Tensor | Sequence[float], counts: Mapping[float, float], *,
    domain_column: int | None, rarity_temperature: float, difficulty_clusters: int, difficulty_temperature: float,
    eps: float, unbiased_std: bool, names: Sequence[str] | None,
) -> tuple[Tensor, dict[str, float]]:  # fmt: skip
    """:func:`domain_scaled` with the prompt counts of earlier steps by label (``counts``; this batch is added)."""
    rewards, weights = check_combiner_inputs(rewards, group_ids, weights)
    if domain_column is not None and not -rewards.shape[1] <= domain_column < rewards.shape[1]:
        raise ValueError(f"domain_scaled: domain_column={domain_column} is not one of the {rewards.shape[1]} rewards "
                         "(0-based); give the position of the row_label reward in the config's rewards list.")  # fmt: skip
    check_temperatures(rarity_temperature, difficulty_temperature, difficulty_clusters)
    others = [k for k in range(rewards.shape[1]) if domain_column is None or k != domain_column % rewards.shape[1]]
    combined = weighted_nansum(rewards[:, others], weights[others])  # [N], the label column left out
    groups = make_groups(group_ids, rewards.shape[0], min_size=1)
    labels = group_labels(rewards, groups, domain_column)  # [G]
    totals = dict(counts)
    for label in labels.tolist():
        totals[label] = totals.get(label, 0.0) + 1.0
    rarity, domain = domain_weights(labels, totals, rarity_temperature)  # [D], [G]
    means = group_stats(combined.double()[:, None], groups, unbiased=False).mean[:, 0].nan_to_num(0.0)  # [G]
    difficulty = difficulty_weights(means, domain, difficulty_clusters, difficulty_temperature)  # [G]
    scale = (rarity[domain] * difficulty).to(rewards.dtype)  # [G]
    normalised = grpo(combined, group_ids, eps=eps, unbiased_std=unbiased_std)  # [N]
    scaled = torch.where(torch.isnan(combined), torch.nan, normalised * scale[groups.index])
    stats = reward_statistics(rewards, names) | {
        "domain_scaled/domains": float(rarity.numel()),
        "domain_scaled/weight_max": float(scale.max()),
        "domain_scaled/weight_min": float(scale.min()),
    }
    return scaled, stats


def group_labels(rewards: Tensor, groups: Groups, domain_column: int | None) -> Tensor:
    """``[G]`` float64: the label of each group (its first sample's; :data:`MISSING_LABEL` for a missing one), all
    0 without a label column."""
    if domain_column is None:
        return torch.zeros(groups.num_groups, dtype=torch.float64)
    column = rewards[:, domain_column].double().nan_to_num(MISSING_LABEL)  # [N]
    first = torch.full((groups.num_groups,), rewards.shape[0], dtype=torch.long)
    first = first.scatter_reduce(0, groups.index, torch.arange(rewards.shape[0]), "amin")  # [G]
    return column[first]


class DomainScaled:
    """:func:`domain_scaled` with the number of prompts seen per domain label over the run (rarity is a property of
    the data stream, not of one batch), updated after each step's combination. Stateful (``state_dict``: the labels
    and counts as float64 tensors): the trainer checkpoints it."""

    def __init__(
        self,
        *,
        domain_column: int | None = None,
        rarity_temperature: float = 1.0,
        difficulty_clusters: int = 2,
        difficulty_temperature: float = 1.0,
        eps: float = 1e-6,
        unbiased_std: bool = True,
        names: Sequence[str] | None = None,
    ) -> None:
        check_temperatures(rarity_temperature, difficulty_temperature, difficulty_clusters)  # at config load
        self.hp: dict[str, Any] = {
            "domain_column": domain_column, "rarity_temperature": rarity_temperature,
            "difficulty_clusters": difficulty_clusters, "difficulty_temperature": difficulty_temperature, "eps": eps,
            "unbiased_std": unbiased_std, "names": names,
        }  # fmt: skip
        self.counts: dict[float, float] = {}

    def __call__(self, rewards: Tensor, group_ids: Tensor, weights: Tensor | Sequence[float]):
        return scaled_by_domain(rewards, group_ids, weights, self.counts, **self.hp)

    def update(self, rewards: Tensor, group_ids: Tensor) -> None:
        """Count the prompts of one step's global rewards ``[N, K]`` per label."""
        groups = make_groups(group_ids, rewards.shape[0], min_size=1)
        for label in group_labels(rewards.detach(), groups, self.hp["domain_column"]).tolist():
            self.counts[label] = self.counts.get(label, 0.0) + 1.0

    def state_dict(self) -> dict[str, Any]:
        labels = sorted(self.counts)
        return {"labels": torch.tensor(labels, dtype=torch.float64),
                "counts": torch.tensor([self.counts[k] for k in labels], dtype=torch.float64)}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.counts = dict(zip(state["labels"].tolist(), state["counts"].tolist(), strict=True))


@REWARD_COMBINERS.register(
    "domain_scaled",
    bind=DomainScaled,
    formula="r_i = Σ_{k≠d} w_k r_ik (d = the label column); z_i = (r_i − mean_G)/(std_G + eps); domain weight "
    "ω_d ∝ n_d^(−1/T_r) (n_d = prompts of domain d seen so far); within the domain, the groups' mean rewards in k "
    "1-D k-means clusters, κ_c ∝ exp(−μ_c/T_d); both mean 1 over the batch's groups; combined_i = ω_d·κ_c·z_i "
    "(pair with dr_grpo)",
    source="[25] DRPO (QoQ-Med)",
    summary="Group-normalised rewards scaled up for rare domains and, within a domain, for the harder cluster of "
    "prompts, so abundant easy data stops dominating the update.",
)
def domain_scaled(
    rewards: Tensor,
    group_ids: Tensor,
    weights: Tensor | Sequence[float],
    *,
    domain_column: int | None = None,
    rarity_temperature: float = 1.0,
    difficulty_clusters: int = 2,
    difficulty_temperature: float = 1.0,
    eps: float = 1e-6,
    unbiased_std: bool = True,
    names: Sequence[str] | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Domain-aware Relative Policy Optimization [25]: with skewed multi-domain data (many chest X-rays, few ECGs),
    GRPO's update is dominated by the abundant, easy domains. DRPO scales the normalised rewards hierarchically:
    by the rarity of the prompt's domain, then by the difficulty of the prompt within its domain.

    The weighted sum of the rewards, without the label column ``domain_column`` (a ``row_label`` reward), is
    normalised within each group (GRPO). Domain level: ``ω_d ∝ n_d^(−1/T_r)``, ``n_d`` the prompts of domain ``d``
    seen so far (``T_r = 1``: inverse frequency; larger ``T_r`` flattens). Difficulty level: the domain's groups of
    the batch are clustered by their mean reward (1-D k-means, :func:`kmeans_1d`), and cluster ``c`` gets
    ``κ_c ∝ exp(−μ_c/T_d)`` (harder clusters, with lower mean reward, weigh more). Each level's weights have mean 1
    over the batch's groups (domain level) and over the domain's groups (difficulty level), so the overall scale
    matches GRPO. The result is already centred per group: pair with ``advantage: dr_grpo``, which keeps the scale
    (``grpo`` would divide it out again).

    Reading chosen: the abstract names the two levels and temperature scaling (the published notes add intra-domain
    k-means) without the formulas; the weights above, the counts of prompts over the run (the bound
    :class:`DomainScaled`; a direct call counts this batch only) and ``k = 2``, ``T = 1`` are genalign's.
    Without ``domain_column`` every sample is in one domain (only the difficulty level acts). A missing label is a
    domain of its own; a sample whose rewards are all missing stays missing.

    Args:
        rewards: ``[N, K]``, one column per reward; NaN = missing.
        group_ids: ``[N]`` integer group of each sample.
        weights: ``[K]`` reward weights (the label column's is ignored).
        domain_column: the reward column holding the domain label, or None.
        rarity_temperature: ``T_r > 0``.
        difficulty_clusters: ``k >= 1`` clusters per domain.
        difficulty_temperature: ``T_d > 0`` (in reward units).
        eps: added to the group std.
        unbiased_std: ``n − 1`` (True) or ``n`` (False) in the group std.
        names: reward names for ``stats``.
    Returns:
        ``(combined [N], stats)`` with ``domain_scaled/domains``, ``domain_scaled/weight_max`` and ``/weight_min``.
    """
    bound = DomainScaled(domain_column=domain_column, rarity_temperature=rarity_temperature,
                         difficulty_clusters=difficulty_clusters, difficulty_temperature=difficulty_temperature,
                         eps=eps, unbiased_std=unbiased_std, names=names)  # fmt: skip
    return bound(rewards, group_ids, weights)  # no earlier steps: the rarity of this batch alone
